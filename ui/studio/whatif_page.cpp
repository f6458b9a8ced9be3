// The What-if page (see whatif_page.hpp).
#include "whatif_page.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryFile>
#include <QVBoxLayout>
#include <cmath>

#include "native_path.hpp"
#include "run_data.hpp"
#include "studio_paths.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/common/run_record.hpp"

namespace ulysses::ui {

namespace {
const char* kWhatIfErrorStyle = "color: #d03030;";

int64_t config_int(const nlohmann::json& cfg, const char* section, const char* key, int64_t dflt) {
  const auto s = cfg.find(section);
  if (s == cfg.end() || !s->is_object()) return dflt;
  const auto v = s->find(key);
  return v != s->end() && v->is_number_integer() ? v->get<int64_t>() : dflt;
}

std::optional<nlohmann::json> read_json_file(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(f.readAll().toStdString());
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}
}  // namespace

WhatIfPage::WhatIfPage(QWidget* parent) : QWidget(parent) {
  model_ = new WhatIfModel(this);
  auto* row = new QHBoxLayout(this);
  auto* scroll = new QScrollArea(this);  // the controls scroll on a small screen (or in presentation mode)
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(buildControls());
  row->addWidget(scroll, 2);
  row->addWidget(buildResults(), 3);
  setBase(nlohmann::json::object());
  refreshHardware();
}

WhatIfPage::~WhatIfPage() {
  for (QProcess* p : {static_cast<QProcess*>(proc_), listProc_}) {
    if (!p) continue;
    p->disconnect(this);
    p->kill();
    p->waitForFinished(1000);
  }
}

// Left: hardware, the measured run, the changes, Simulate with its progress and status.
QWidget* WhatIfPage::buildControls() {
  auto* w = new QWidget(this);
  auto* col = new QVBoxLayout(w);
  auto* hwBox = new QGroupBox(QStringLiteral("Hardware"), w);
  auto* hwRow = new QHBoxLayout(hwBox);
  hardware_ = new QComboBox(hwBox);
  hardware_->setObjectName(QStringLiteral("whatifHardware"));
  hardware_->setToolTip(QStringLiteral("Shipped descriptions (ulysses-run --simulate list) or a JSON file"));
  hardware_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  hardware_->setMinimumContentsLength(14);
  file_ = new QPushButton(QStringLiteral("File…"), hwBox);
  file_->setToolTip(QStringLiteral("A hardware description JSON (e.g. one ulysses-run --calibrate wrote)"));
  connect(file_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, QStringLiteral("Hardware description"), QString(),
                                                   QStringLiteral("JSON (*.json)"));
    if (!f.isEmpty()) addHardwareFile(f);
  });
  hwRow->addWidget(hardware_, 1);
  hwRow->addWidget(file_);
  col->addWidget(hwBox);

  auto* runBox = new QGroupBox(QStringLiteral("Measured run (optional)"), w);
  auto* runCol = new QVBoxLayout(runBox);
  auto* runRow = new QHBoxLayout;
  runEdit_ = new QLineEdit(runBox);
  runEdit_->setObjectName(QStringLiteral("whatifRun"));
  runEdit_->setPlaceholderText(QStringLiteral("none: the launcher's config"));
  connect(runEdit_, &QLineEdit::editingFinished, this, [this] {
    if (runEdit_->text() == measured_) return;
    QString err;
    if (!setMeasuredRun(runEdit_->text(), &err)) fail(err);
  });
  auto* browse = new QPushButton(QStringLiteral("Browse…"), runBox);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, QStringLiteral("Measured run folder"));
    QString err;
    if (!d.isEmpty() && !setMeasuredRun(d, &err)) fail(err);
  });
  runRow->addWidget(runEdit_, 1);
  runRow->addWidget(browse);
  runCol->addLayout(runRow);
  calibrate_ = new QCheckBox(QStringLiteral("Calibrate the hardware to this run first"), runBox);
  calibrate_->setObjectName(QStringLiteral("whatifCalibrate"));
  calibrate_->setToolTip(
      QStringLiteral("ulysses-run --calibrate RUN --simulate HW: fit the kinds' efficiencies and "
                     "the link to what the run measured"));
  calibrate_->setChecked(true);
  calibrate_->setEnabled(false);
  runCol->addWidget(calibrate_);
  col->addWidget(runBox);

  auto* changeBox = new QGroupBox(QStringLiteral("Change"), w);
  auto* form = new QFormLayout(changeBox);
  auto spin = [&](const char* name, int lo, int hi, const char* tip) {
    auto* s = new QSpinBox(changeBox);
    s->setObjectName(QString::fromLatin1(name));
    s->setRange(lo, hi);
    s->setToolTip(QString::fromLatin1(tip));
    return s;
  };
  sp_ = spin("whatifSp", 1, 4096, "parallel.sp_size: Ulysses ranks per sequence");
  ring_ = spin("whatifRing", 1, 512, "parallel.ring_size: ring attention ranks (Ulysses x ring)");
  chunks_ = spin("whatifChunks", 1, 256, "parallel.head_chunks: all-to-alls pipelined over head chunks");
  zero_ = spin("whatifZero", 0, 3, "train.zero_stage: ZeRO sharding of optimizer, gradients, parameters");
  form->addRow(QStringLiteral("sp_size"), sp_);
  form->addRow(QStringLiteral("ring_size"), ring_);
  form->addRow(QStringLiteral("head_chunks"), chunks_);
  form->addRow(QStringLiteral("ZeRO stage"), zero_);
  col->addWidget(changeBox);

  base_ = new QLabel(w);
  base_->setObjectName(QStringLiteral("whatifBase"));
  base_->setWordWrap(true);
  col->addWidget(base_);
  simulate_ = new QPushButton(QStringLiteral("Simulate"), w);
  simulate_->setObjectName(QStringLiteral("whatifSimulate"));
  connect(simulate_, &QPushButton::clicked, this, [this] {
    if (!busy()) {
      simulate();
      return;
    }
    QProcess* p = proc_;
    proc_ = nullptr;
    p->disconnect(this);
    p->kill();
    p->waitForFinished(1000);
    p->deleteLater();
    fail(QStringLiteral("cancelled"));
  });
  col->addWidget(simulate_);
  progress_ = new QProgressBar(w);
  progress_->setObjectName(QStringLiteral("whatifProgress"));
  progress_->setRange(0, 0);  // busy: ulysses-run says no fraction
  progress_->hide();
  col->addWidget(progress_);
  status_ = new QLabel(w);
  status_->setObjectName(QStringLiteral("whatifStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  col->addWidget(status_);
  col->addStretch(1);
  return w;
}

// Right: the figures side by side, and where the simulated run goes next.
QWidget* WhatIfPage::buildResults() {
  auto* w = new QGroupBox(QStringLiteral("Simulated step beside the plan and the measured run"), this);
  auto* col = new QVBoxLayout(w);
  table_ = new QTableView(w);
  table_->setObjectName(QStringLiteral("whatifTable"));
  table_->setModel(model_);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  col->addWidget(table_, 1);
  auto* buttons = new QHBoxLayout;
  open_ = new QPushButton(QStringLiteral("Open simulated run"), w);
  open_->setObjectName(QStringLiteral("whatifOpen"));
  open_->setEnabled(false);
  connect(open_, &QPushButton::clicked, this, [this] {
    if (!lastRun_.isEmpty()) emit openRunRequested(lastRun_);
  });
  compare_ = new QPushButton(QStringLiteral("Compare with measured run"), w);
  compare_->setObjectName(QStringLiteral("whatifCompare"));
  compare_->setEnabled(false);
  connect(compare_, &QPushButton::clicked, this, [this] {
    if (!lastRun_.isEmpty() && !measured_.isEmpty()) emit compareRequested(measured_, lastRun_);
  });
  buttons->addWidget(open_);
  buttons->addWidget(compare_);
  buttons->addStretch(1);
  col->addLayout(buttons);
  return w;
}

void WhatIfPage::setBase(const nlohmann::json& cfg) {
  baseCfg_ = cfg;
  sp_->setValue(static_cast<int>(config_int(cfg, "parallel", "sp_size", 1)));
  ring_->setValue(static_cast<int>(config_int(cfg, "parallel", "ring_size", 1)));
  chunks_->setValue(static_cast<int>(config_int(cfg, "parallel", "head_chunks", 1)));
  zero_->setValue(static_cast<int>(config_int(cfg, "train", "zero_stage", 0)));
  const QString name = cfg.contains("name") && cfg["name"].is_string()
                           ? QString::fromStdString(cfg["name"].get<std::string>())
                           : QStringLiteral("(unnamed)");
  base_->setText(measured_.isEmpty()
                     ? QStringLiteral("Simulates the launcher's config \"%1\" with the changes above.").arg(name)
                     : QStringLiteral("Simulates the config of the measured run %1 with the changes above.")
                           .arg(QDir::toNativeSeparators(measured_)));
}

void WhatIfPage::setLauncherConfig(const nlohmann::json& cfg, const std::optional<cost::CostEstimate>& est,
                                   const std::optional<PlanFigures>& plan) {
  launcherCfg_ = cfg;
  launcherEst_ = est;
  launcherPlan_ = plan;
  if (!measured_.isEmpty()) return;
  if (!busy()) setBase(cfg);
  model_->setEstimate(est);
  model_->setPlan(plan);
}

bool WhatIfPage::setMeasuredRun(const QString& dir, QString* error) {
  if (dir.trimmed().isEmpty()) {
    measured_.clear();
    runEdit_->clear();
    calibrate_->setEnabled(false);
    compare_->setEnabled(false);
    setBase(launcherCfg_);
    model_->setEstimate(launcherEst_);
    model_->setPlan(launcherPlan_);
    model_->setMeasured(std::nullopt);
    return true;
  }
  const QDir d(dir);
  const auto cfg = read_json_file(d.filePath(QString::fromLatin1(run_layout::kConfig)));
  if (!cfg) {
    if (error) *error = QStringLiteral("%1 has no readable config.json: not a run folder").arg(dir);
    return false;
  }
  const QString record = d.filePath(QString::fromLatin1(run_layout::kRunRecord));
  if (read_run_record_file(native_path(record)).record.simulated.is_object()) {
    if (error) *error = QStringLiteral("%1 is itself simulated: choose a measured run").arg(dir);
    return false;
  }
  const MeasuredStats m = measure(readMetricsFile(d.filePath(QString::fromLatin1(run_layout::kMetrics))));
  if (m.steps <= 0) {
    if (error) *error = QStringLiteral("%1 has no measured steps (metrics.jsonl)").arg(dir);
    return false;
  }
  measured_ = d.absolutePath();
  runEdit_->setText(measured_);
  calibrate_->setEnabled(true);
  setBase(*cfg);
  model_->setEstimate(std::nullopt);  // the launcher's figures are for another config
  model_->setPlan(std::nullopt);
  model_->setMeasured(m);
  compare_->setEnabled(!lastRun_.isEmpty());
  if (hardware_->findData(QStringLiteral("cpu-ranks")) >= 0 &&
      cfg->value("train", nlohmann::json::object()).value("device", std::string("auto")) != "cuda")
    selectHardware(QStringLiteral("cpu-ranks"));  // a CPU run: calibrate this machine's description
  status_->setStyleSheet(QString());
  status_->setText(
      QStringLiteral("Measured run: %1 steps, median step %2 ms.").arg(m.steps).arg(m.medianStepMs, 0, 'f', 1));
  return true;
}

void WhatIfPage::refreshHardware() {
  const QString run = findUlyssesRun();
  if (run.isEmpty() || listProc_) {
    if (run.isEmpty()) showError(QStringLiteral("ulysses-run not found: no hardware list (set ULYSSES_RUN)"));
    return;
  }
  listProc_ = new QProcess(this);
  connect(listProc_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus st) {
    const QString out = QString::fromLocal8Bit(listProc_->readAllStandardOutput());
    const QString err = QString::fromLocal8Bit(listProc_->readAllStandardError());
    listProc_->deleteLater();
    listProc_ = nullptr;
    if (st != QProcess::NormalExit || code != 0) {
      showError(QStringLiteral("no hardware list: %1").arg(lastErrorLine(err, code)));
    } else {
      const QString keep = selectedHardware();
      for (const QString& n : parseHardwareList(out))
        if (hardware_->findData(n) < 0) hardware_->addItem(n, n);
      if (!keep.isEmpty() || !selectHardware(QStringLiteral("h200-x8"))) selectHardware(keep);
    }
    emit hardwareListed();
  });
  connect(listProc_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart || !listProc_) return;
    showError(QStringLiteral("cannot start ulysses-run: %1").arg(listProc_->errorString()));
    listProc_->deleteLater();
    listProc_ = nullptr;
    emit hardwareListed();
  });
  listProc_->start(run, {QStringLiteral("--simulate"), QStringLiteral("list")});
}

void WhatIfPage::addHardwareFile(const QString& path) {
  const QString abs = QFileInfo(path).absoluteFilePath();
  if (hardware_->findData(abs) < 0) hardware_->addItem(QFileInfo(abs).fileName(), abs);
  selectHardware(abs);
}

QStringList WhatIfPage::hardwareNames() const {
  QStringList n;
  for (int i = 0; i < hardware_->count(); ++i) n << hardware_->itemData(i).toString();
  return n;
}

bool WhatIfPage::selectHardware(const QString& nameOrPath) {
  const int i = hardware_->findData(nameOrPath);
  if (i < 0) return false;
  hardware_->setCurrentIndex(i);
  return true;
}

QString WhatIfPage::selectedHardware() const { return hardware_->currentData().toString(); }

QString WhatIfPage::statusText() const { return status_->text(); }

QString WhatIfPage::scratchDir() {
  if (!scratch_)
    scratch_ = std::make_unique<QTemporaryDir>(QDir::temp().filePath(QStringLiteral("ulysses-whatif-XXXXXX")));
  return scratch_->isValid() ? scratch_->path() : QDir::tempPath();
}

void WhatIfPage::simulate() {
  if (busy()) return;
  const QString hw = selectedHardware();
  if (hw.isEmpty()) {
    fail(QStringLiteral("choose the hardware first (the list comes from ulysses-run --simulate list)"));
    return;
  }
  if (measured_.isEmpty() && (!launcherCfg_.is_object() || launcherCfg_.empty())) {
    fail(QStringLiteral("no config to simulate: fill the Launch page or choose a measured run"));
    return;
  }
  model_->setSimulated(std::nullopt);
  if (!measured_.isEmpty() && calibrate_->isChecked())
    startCalibrate();
  else
    startSimulate(hw);
}

void WhatIfPage::startCalibrate() {
  const QString hw = selectedHardware();
  const QString out =
      QDir(scratchDir()).filePath(QStringLiteral("calibrated-%1.json").arg(slug(QFileInfo(hw).completeBaseName())));
  setBusy(true, QStringLiteral("Calibrating %1 to %2 (ulysses-run --calibrate)…").arg(hw, measured_));
  startProcess(
      {QStringLiteral("--calibrate"), measured_, QStringLiteral("--simulate"), hw, QStringLiteral("--out"), out},
      [this, out](int code, const QByteArray&, const QString& err) {
        if (code != 0) {
          fail(QStringLiteral("calibration failed: %1").arg(lastErrorLine(err, code)));
          return;
        }
        startSimulate(out);
      });
}

void WhatIfPage::startSimulate(const QString& hardware) {
  QString config;
  if (!measured_.isEmpty()) {
    config = QDir(measured_).filePath(QString::fromLatin1(run_layout::kConfig));
  } else {
    configFile_ = std::make_unique<QTemporaryFile>(QDir(scratchDir()).filePath(QStringLiteral("config-XXXXXX.json")));
    const QByteArray text = QByteArray::fromStdString(launcherCfg_.dump(2));
    if (!configFile_->open() || configFile_->write(text) != text.size() || !configFile_->flush()) {
      fail(QStringLiteral("cannot write a temporary config in %1: %2").arg(scratchDir(), configFile_->errorString()));
      return;
    }
    config = configFile_->fileName();
  }
  const QString folder = outputFolder_.isEmpty() ? scratchDir() : outputFolder_;
  if (!QDir().mkpath(folder)) {
    fail(QStringLiteral("cannot make the folder %1 for the simulated run").arg(folder));
    return;
  }
  const QString stamp = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-hhmmss-zzz"));
  const QString out = QDir(folder).filePath(
      QStringLiteral("whatif-%1-%2").arg(slug(QFileInfo(selectedHardware()).completeBaseName()), stamp));
  WhatIfChanges ch;
  ch.spSize = sp_->value();
  ch.ringSize = ring_->value();
  ch.headChunks = chunks_->value();
  ch.zeroStage = zero_->value();
  QStringList args{config, QStringLiteral("--simulate"), hardware, QStringLiteral("--out"),
                   out,    QStringLiteral("--json")};
  args << ch.setArguments(baseCfg_);
  setBusy(true, QStringLiteral("Simulating on %1 (ulysses-run --simulate)…").arg(QFileInfo(hardware).fileName()));
  startProcess(args, [this](int code, const QByteArray& stdoutText, const QString& err) {
    if (code != 0) {
      fail(QStringLiteral("simulation failed: %1").arg(lastErrorLine(err, code)));
      return;
    }
    QString why;
    const QList<QByteArray> lines = stdoutText.trimmed().split('\n');
    const auto s = SimFigures::fromJson(lines.isEmpty() ? QByteArray() : lines.back(), &why);
    if (!s) {
      fail(why);
      return;
    }
    model_->setSimulated(*s);
    lastRun_ = s->out;
    open_->setEnabled(true);
    compare_->setEnabled(!measured_.isEmpty());
    QString text = QStringLiteral("Simulated on %1: step %2 ms, %3 tok/s.")
                       .arg(s->hardware)
                       .arg(s->stepMs, 0, 'f', 2)
                       .arg(s->tokensPerS, 0, 'f', 0);
    if (const double r = model_->stepRatio(); std::isfinite(r))
      text += QStringLiteral(" Simulated / measured step: %1x.").arg(r, 0, 'f', 2);
    setBusy(false, text + QStringLiteral(" Run folder: %1").arg(QDir::toNativeSeparators(s->out)));
    emit finished(true);
  });
}

void WhatIfPage::startProcess(const QStringList& args,
                              std::function<void(int, const QByteArray&, const QString&)> done) {
  const QString run = findUlyssesRun();
  if (run.isEmpty()) {
    fail(QStringLiteral("ulysses-run not found (set ULYSSES_RUN or install it next to the studio)"));
    return;
  }
  auto* p = new QProcess(this);
  proc_ = p;
  connect(p, &QProcess::finished, this, [this, p, done](int code, QProcess::ExitStatus st) {
    const QByteArray out = p->readAllStandardOutput();
    const QString err = QString::fromLocal8Bit(p->readAllStandardError());
    p->deleteLater();
    proc_ = nullptr;
    if (st != QProcess::NormalExit) {
      fail(QStringLiteral("ulysses-run stopped abnormally: %1").arg(lastErrorLine(err, code)));
      return;
    }
    done(code, out, err);
  });
  connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    p->deleteLater();
    proc_ = nullptr;
    fail(QStringLiteral("cannot start ulysses-run: %1").arg(p->errorString()));
  });
  p->start(run, args);
}

void WhatIfPage::setBusy(bool busy, const QString& status) {
  progress_->setVisible(busy);
  simulate_->setText(busy ? QStringLiteral("Cancel") : QStringLiteral("Simulate"));
  status_->setStyleSheet(QString());
  status_->setText(status);
}

void WhatIfPage::showError(const QString& why) {
  setBusy(false, why);
  status_->setStyleSheet(QLatin1String(kWhatIfErrorStyle));
}

void WhatIfPage::fail(const QString& why) {
  showError(why);
  emit finished(false);
}

}  // namespace ulysses::ui
