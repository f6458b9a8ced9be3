// The What-if page (docs/STUDIO.md "What if"): pick hardware (the shipped descriptions that
// `ulysses-run --simulate list` names, or a JSON file), simulate one step of the launcher's config
// on it and see the simulated step beside the memory plan and the cost model's estimate; or, with a
// measured run, calibrate the hardware from it (`--calibrate RUN`), change sp, ring, head chunks
// or the ZeRO stage, simulate, and see the simulated step beside the measured one (and open both
// in the Runs page's comparison). ulysses-run runs as a subprocess (the GUI never links libtorch);
// progress and its errors are shown on the page. Figures: ui/models/whatif_model.
#pragma once

#include <QPointer>
#include <QTemporaryDir>
#include <QWidget>
#include <functional>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "whatif_model.hpp"

class QComboBox;
class QSpinBox;
class QCheckBox;
class QLabel;
class QLineEdit;
class QProcess;
class QProgressBar;
class QPushButton;
class QTableView;
class QTemporaryFile;

namespace ulysses::ui {

class WhatIfPage : public QWidget {
  Q_OBJECT
 public:
  explicit WhatIfPage(QWidget* parent = nullptr);
  ~WhatIfPage() override;

  // The launcher's config (its JSON), with its cost-model estimate and memory plan when it has
  // them: what is simulated while no measured run is set.
  void setLauncherConfig(const nlohmann::json& cfg, const std::optional<cost::CostEstimate>& est,
                         const std::optional<PlanFigures>& plan);
  // A measured run folder: its config.json is simulated (with the changes), its metrics fill the
  // Measured column and it is the run `--calibrate` fits the hardware to. "" goes back to the
  // launcher's config. False (and *error) when `dir` is no run folder with a config.
  bool setMeasuredRun(const QString& dir, QString* error);
  QString measuredRun() const { return measured_; }
  // Where simulated run folders go (whatif-HW-<date-time>; the Runs page's folder). Empty: a
  // temporary folder of this page.
  void setOutputFolder(const QString& dir) { outputFolder_ = dir; }

  // Runs `ulysses-run --simulate list` and fills the hardware choice (hardwareListed when done).
  void refreshHardware();
  // Adds a hardware JSON file to the choice and selects it.
  void addHardwareFile(const QString& path);
  QStringList hardwareNames() const;  // the choice's entries (names, or file paths)
  bool selectHardware(const QString& nameOrPath);

  // Calibrates (when a measured run is set and "calibrate" is on), then simulates. finished(ok).
  void simulate();
  bool busy() const { return proc_ != nullptr; }
  QString statusText() const;
  QString lastSimulatedRun() const { return lastRun_; }

  WhatIfModel* model() const { return model_; }
  QComboBox* hardwareBox() const { return hardware_; }
  QSpinBox* spBox() const { return sp_; }
  QSpinBox* ringBox() const { return ring_; }
  QSpinBox* chunksBox() const { return chunks_; }
  QSpinBox* zeroBox() const { return zero_; }
  QCheckBox* calibrateBox() const { return calibrate_; }
  QPushButton* simulateButton() const { return simulate_; }
  QPushButton* compareButton() const { return compare_; }
  QPushButton* openButton() const { return open_; }
  QProgressBar* progress() const { return progress_; }

 signals:
  void hardwareListed();
  void finished(bool ok);
  void openRunRequested(const QString& dir);
  void compareRequested(const QString& measured, const QString& simulated);

 private:
  QWidget* buildControls();
  QWidget* buildResults();
  void setBase(const nlohmann::json& cfg);
  void startCalibrate();
  void startSimulate(const QString& hardware);
  // Starts ulysses-run with `args`; `done` gets its exit code, stdout and stderr.
  void startProcess(const QStringList& args, std::function<void(int, const QByteArray&, const QString&)> done);
  void fail(const QString& why);       // shown, and finished(false)
  void showError(const QString& why);  // shown only
  void setBusy(bool busy, const QString& status);
  QString selectedHardware() const;
  QString scratchDir();

  WhatIfModel* model_ = nullptr;
  QComboBox* hardware_ = nullptr;
  QLineEdit* runEdit_ = nullptr;
  QCheckBox* calibrate_ = nullptr;
  QSpinBox *sp_ = nullptr, *ring_ = nullptr, *chunks_ = nullptr, *zero_ = nullptr;
  QPushButton *simulate_ = nullptr, *compare_ = nullptr, *open_ = nullptr, *file_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* base_ = nullptr;
  QTableView* table_ = nullptr;
  QPointer<QProcess> proc_;
  QProcess* listProc_ = nullptr;
  std::unique_ptr<QTemporaryFile> configFile_;
  std::unique_ptr<QTemporaryDir> scratch_;
  nlohmann::json launcherCfg_, baseCfg_;
  std::optional<cost::CostEstimate> launcherEst_;
  std::optional<PlanFigures> launcherPlan_;
  QString measured_, outputFolder_, lastRun_;
};

}  // namespace ulysses::ui
