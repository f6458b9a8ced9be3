// Launcher page: a form over the run config (fields generated from engine/config's field
// table, ui/models/form_fields) with presets, load/save, Hugging Face config.json import,
// validation as the user types (ui/models/launch_form: the engine's checks and messages,
// shown inline; Launch disabled while invalid), device discovery, cost-model estimates and, beside them,
// the memory planner's dry run (`ulysses-run CONFIG --plan --json` in a QProcess, which
// execs `ulysses-worker --plan`): a run whose planned peak does not fit the device gets an
// inline warning before launch.
#pragma once

#include <QHash>
#include <QWidget>
#include <optional>

#include "device_info.hpp"
#include "run_config.hpp"

class QLabel;
class QPushButton;
class QComboBox;
class QLineEdit;
class QDoubleSpinBox;
class QTableView;
class QProcess;
class QTimer;
class QHBoxLayout;
class QScrollArea;

namespace ulysses::ui {

class EstimateModel;
struct FieldSpec;

class LauncherPage : public QWidget {
  Q_OBJECT
 public:
  explicit LauncherPage(QWidget* parent = nullptr);

  // Config files. Relative data/init paths are resolved against the file's folder (and its
  // parents) when they do not exist relative to the working directory.
  bool loadConfigFile(const QString& path, QString* error);
  bool saveConfigFile(const QString& path, QString* error);
  // Replaces the model section with a Hugging Face config.json (model_from_hf_config).
  bool importHfConfig(const QString& path, QString* error);
  // Fills the form from a run-config JSON (missing keys keep RunConfig's defaults).
  bool setConfigJson(const json& j, QString* error);
  QString currentFile() const { return currentFile_; }

  // The form as JSON, "name" included; only meaningful when isValid().
  json configJson() const { return formJson_; }
  std::optional<RunConfig> config() const { return config_; }
  QString configName() const;
  bool isValid() const { return config_.has_value(); }

  // Presets from resources/configs: display name -> file.
  QStringList presetNames() const;
  bool loadPreset(const QString& name, QString* error);

  // Field access by dotted key ("train.steps"), for scripts and tests.
  QStringList fieldNames() const;
  QWidget* fieldWidget(const QString& dotted) const;
  QString fieldError(const QString& dotted) const;                // inline message, empty when none
  bool setFieldText(const QString& dotted, const QString& text);  // line edit / choice / "true"/"false"
  QString fieldText(const QString& dotted) const;
  QString generalIssues() const;  // issues not tied to a field in the form

  // Where a launch puts its run: the folder in which it makes NAME_yyyyMMdd-hhmmss (the runs
  // folder of the Runs page). setOutputFolder says nothing back; an edit or Browse by the user
  // emits outputFolderChosen.
  QString outputFolder() const;
  void setOutputFolder(const QString& dir);
  // The status line under the form ("Ready: ... into FOLDER/NAME_<date-time>", or the problems).
  QString statusText() const;

  // Takes a prepared dataset (`ulysses data prepare`): data.kind = documents, data.path = dir,
  // and shows its statistics under the field. False with *error the reason (the engine's) when
  // dir is not one; the form is then left as it was.
  bool useDataset(const QString& dir, QString* error);
  // The statistics shown under data.path (data.kind = documents), or the reason the folder is
  // not a prepared dataset; empty for other data kinds.
  QString datasetInfoText() const;

  QPushButton* launchButton() const { return launch_; }
  EstimateModel* estimateModel() const { return estimates_; }
  void setRunning(bool running);  // Launch stays disabled while a run is in progress
  void setDevices(const DeviceScan& scan);
  const DeviceScan& devices() const { return devices_; }
  double throughputTflops() const;
  void setThroughputTflops(double v);
  // The memory plan: empty when none is running or the plan fits; else the warning shown.
  QString planWarning() const;
  bool planPending() const { return planProc_ != nullptr; }

 signals:
  void launchRequested();
  void validityChanged(bool valid);
  void configEdited();
  void planUpdated();  // a plan finished (or failed): estimateModel()->hasPlan() tells
  void outputFolderChosen(const QString& dir);

 public slots:
  void revalidate();

 private:
  struct FieldUi {
    QWidget* editor = nullptr;
    QLabel* error = nullptr;
  };
  void buildUi();
  QHBoxLayout* buildTopRow();
  QScrollArea* buildForm();
  QWidget* buildFieldCell(const FieldSpec& spec);
  QWidget* buildSidePanel();
  QWidget* buildEstimatesBox(QWidget* side);
  void setFieldError(const QString& dotted, const QString& msg);
  void updateEstimates();
  void updateDeviceNote();
  void resolveRelativePaths(json& j, const QString& baseDir) const;
  void schedulePlan();
  void runPlan();
  void updatePlanWarning();
  void updateDatasetInfo();

  QHash<QString, FieldUi> fields_;
  QLineEdit* name_ = nullptr;
  QLineEdit* output_ = nullptr;
  QComboBox* presets_ = nullptr;
  QLabel* general_ = nullptr;
  QLabel* deviceNote_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* datasetInfo_ = nullptr;  // under data.path: the prepared dataset's statistics
  QString datasetShownFor_;        // the folder datasetInfo_ describes
  QPushButton* launch_ = nullptr;
  QDoubleSpinBox* tflops_ = nullptr;
  QDoubleSpinBox* bandwidth_ = nullptr;
  QTableView* estimateView_ = nullptr;
  EstimateModel* estimates_ = nullptr;
  QString configsDir_;
  QString currentFile_;
  json formJson_;
  json loadedJson_;  // the last config set (every key, defaults filled): the base under the form
  std::optional<RunConfig> config_;
  DeviceScan devices_;
  bool running_ = false;
  bool filling_ = false;  // suppress revalidation while the form is being filled
  bool lastValid_ = false;
  QProcess* planProc_ = nullptr;
  QTimer* planTimer_ = nullptr;
  QLabel* planNote_ = nullptr;
  std::string planKey_;  // config JSON the current plan (or the one running) is for
};

}  // namespace ulysses::ui
