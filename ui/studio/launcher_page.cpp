// Launcher page: config form, validation, presets, devices, estimates and the memory plan.
#include "launcher_page.hpp"

#include <QCheckBox>
#include <QCoreApplication>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
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
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTableView>
#include <QTemporaryFile>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "form_fields.hpp"
#include "cost_model.hpp"
#include "estimate_model.hpp"
#include "launch_form.hpp"
#include "dataset_info.hpp"
#include "run_data.hpp"
#include "studio_paths.hpp"
#include "trace/qt_text.hpp"

namespace ulysses::ui {

namespace {
const char* kErrorStyle = "color: #d03030;";
const char* kWarnStyle = "color: #c07000;";

// Physical memory of this machine (Linux /proc/meminfo), 0 when unknown.
qint64 machineMemoryBytes() {
  QFile f(QStringLiteral("/proc/meminfo"));
  if (!f.open(QIODevice::ReadOnly)) return 0;
  for (const auto& line : f.readAll().split('\n'))
    if (line.startsWith("MemTotal:")) return line.mid(9).trimmed().split(' ').value(0).toLongLong() * 1024;
  return 0;
}

QString sectionTitle(const QString& s) {
  if (s == QLatin1String("model")) return QStringLiteral("Model (Hugging Face LlamaConfig)");
  if (s == QLatin1String("parallel")) return QStringLiteral("Parallelism");
  if (s == QLatin1String("train")) return QStringLiteral("Training");
  if (s == QLatin1String("data")) return QStringLiteral("Data");
  if (s == QLatin1String("faults")) return QStringLiteral("Fault injection (demos)");
  return QStringLiteral("Profiling");
}

// Groups inside a section, by the key that starts them (the table keeps each group's keys
// together): the settings a long-sequence user weighs against each other sit in one box.
QString groupStartingAt(const QString& dotted) {
  if (dotted == QLatin1String("parallel.ring_size")) return QStringLiteral("Ring attention (Ulysses × ring)");
  if (dotted == QLatin1String("train.activation_checkpointing"))
    return QStringLiteral("Memory (recompute, tiling, attention kernel, ZeRO sharding, offload)");
  if (dotted == QLatin1String("train.init_from"))
    return QStringLiteral("Checkpoints (Hugging Face and training state)");
  return {};
}

// Text shown in the form for a JSON value.
QString valueText(const json& v) {
  if (v.is_string()) return to_qs(v.get<std::string>());
  if (v.is_null()) return QString();
  return to_qs(v.dump());
}
}  // namespace

LauncherPage::LauncherPage(QWidget* parent) : QWidget(parent) {
  configsDir_ = findConfigsDir();
  estimates_ = new EstimateModel(this);
  buildUi();
  filling_ = true;
  setConfigJson(RunConfig{}.to_json(), nullptr);
  filling_ = false;
  revalidate();
}

void LauncherPage::buildUi() {
  QHBoxLayout* top = buildTopRow();
  QScrollArea* scroll = buildForm();
  QWidget* side = buildSidePanel();
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(scroll);
  split->addWidget(side);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* col = new QVBoxLayout(this);
  col->addLayout(top);
  col->addWidget(split, 1);
}

// Top row: preset chooser and run name.
QHBoxLayout* LauncherPage::buildTopRow() {
  auto* top = new QHBoxLayout;
  presets_ = new QComboBox(this);
  presets_->setObjectName(QStringLiteral("presets"));
  presets_->addItem(QStringLiteral("(choose a preset)"));
  presets_->addItems(presetNames());
  presets_->setToolTip(QStringLiteral("Example configs from %1").arg(configsDir_));
  connect(presets_, &QComboBox::activated, this, [this](int i) {
    if (i <= 0) return;
    QString err;
    if (!loadPreset(presets_->itemText(i), &err)) status_->setText(err);
  });
  name_ = new QLineEdit(this);
  name_->setObjectName(QStringLiteral("name"));
  name_->setPlaceholderText(QStringLiteral("run name"));
  connect(name_, &QLineEdit::textChanged, this, &LauncherPage::revalidate);
  top->addWidget(new QLabel(QStringLiteral("Preset:"), this));
  top->addWidget(presets_);
  top->addSpacing(12);
  top->addWidget(new QLabel(QStringLiteral("Name:"), this));
  top->addWidget(name_, 1);
  // Where the run goes (the Runs page's folder); the Ready line names the run folder in it.
  output_ = new QLineEdit(this);
  output_->setObjectName(QStringLiteral("outputFolder"));
  output_->setPlaceholderText(QStringLiteral("output folder"));
  output_->setToolTip(QStringLiteral("Each launch makes its run folder NAME_yyyyMMdd-hhmmss in this folder"));
  connect(output_, &QLineEdit::editingFinished, this, [this] {
    if (!output_->text().trimmed().isEmpty()) emit outputFolderChosen(output_->text().trimmed());
  });
  connect(output_, &QLineEdit::textChanged, this, &LauncherPage::revalidate);
  auto* browse = new QToolButton(this);
  browse->setObjectName(QStringLiteral("outputBrowse"));
  browse->setText(QStringLiteral("…"));
  browse->setToolTip(QStringLiteral("Choose the output folder"));
  connect(browse, &QToolButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, QStringLiteral("Output folder"), output_->text());
    if (d.isEmpty()) return;
    output_->setText(d);
    emit outputFolderChosen(d);
  });
  top->addSpacing(12);
  top->addWidget(new QLabel(QStringLiteral("Output:"), this));
  top->addWidget(output_, 1);
  top->addWidget(browse);

  return top;
}

// Form, one group per section, and groups of their own for ring attention, memory and
// checkpoints (groupStartingAt).
QScrollArea* LauncherPage::buildForm() {
  auto* formHost = new QWidget;
  auto* formCol = new QVBoxLayout(formHost);
  QString currentSection;
  QFormLayout* form = nullptr;
  for (const auto& spec : configFields()) {
    const QString group = groupStartingAt(spec.dotted());
    if (spec.section != currentSection || !group.isEmpty()) {
      currentSection = spec.section;
      auto* box = new QGroupBox(group.isEmpty() ? sectionTitle(spec.section) : group, formHost);
      form = new QFormLayout(box);
      form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
      formCol->addWidget(box);
    }
    const QString dotted = spec.dotted();
    QWidget* cell = buildFieldCell(spec);
    auto* label = new QLabel(spec.label, formHost);
    label->setToolTip(dotted);
    form->addRow(label, cell);
  }
  formCol->addStretch(1);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setWidget(formHost);
  return scroll;
}

// One field's cell: its editor (by kind) and, under it, its error label; recorded in fields_.
QWidget* LauncherPage::buildFieldCell(const FieldSpec& spec) {
  const QString dotted = spec.dotted();
  auto* cell = new QWidget;
  auto* cellLayout = new QVBoxLayout(cell);
  cellLayout->setContentsMargins(0, 0, 0, 0);
  cellLayout->setSpacing(1);
  FieldUi ui;
  switch (spec.kind) {
    case FieldKind::Integer:
    case FieldKind::Number:
    case FieldKind::Text: {
      auto* e = new QLineEdit(cell);
      connect(e, &QLineEdit::textChanged, this, &LauncherPage::revalidate);
      cellLayout->addWidget(e);
      ui.editor = e;
      break;
    }
    case FieldKind::Path: {
      auto* row = new QHBoxLayout;
      auto* e = new QLineEdit(cell);
      connect(e, &QLineEdit::textChanged, this, &LauncherPage::revalidate);
      auto* browse = new QToolButton(cell);
      browse->setText(QStringLiteral("…"));
      browse->setToolTip(QStringLiteral("Choose"));
      const bool isDir = spec.key != QLatin1String("path");
      connect(browse, &QToolButton::clicked, this, [this, e, isDir] {
        const QString p =
            isDir ? QFileDialog::getExistingDirectory(this, QStringLiteral("Choose a checkpoint folder"), e->text())
                  : QFileDialog::getOpenFileName(this, QStringLiteral("Choose a data file"), e->text());
        if (!p.isEmpty()) e->setText(p);
      });
      row->addWidget(e, 1);
      row->addWidget(browse);
      if (dotted == QLatin1String("data.path")) {  // a prepared dataset: kind, path and its statistics
        auto* dataset = new QToolButton(cell);
        dataset->setObjectName(QStringLiteral("datasetBrowse"));
        dataset->setText(QStringLiteral("Dataset…"));
        dataset->setToolTip(
            QStringLiteral("Choose a folder made by `ulysses data prepare` (sets data.kind=documents)"));
        connect(dataset, &QToolButton::clicked, this, [this, e] {
          const QString d =
              QFileDialog::getExistingDirectory(this, QStringLiteral("Choose a prepared dataset"), e->text());
          QString why;
          if (d.isEmpty() || useDataset(d, &why)) return;
          datasetInfo_->setText(QStringLiteral("Not a prepared dataset: ") + why);
          datasetInfo_->setVisible(true);
        });
        row->addWidget(dataset);
        datasetInfo_ = new QLabel(cell);
        datasetInfo_->setObjectName(QStringLiteral("datasetInfo"));
        datasetInfo_->setWordWrap(true);
        datasetInfo_->setTextInteractionFlags(Qt::TextSelectableByMouse);
        datasetInfo_->setVisible(false);
      }
      cellLayout->addLayout(row);
      if (datasetInfo_ && datasetInfo_->parent() == cell) cellLayout->addWidget(datasetInfo_);
      ui.editor = e;
      break;
    }
    case FieldKind::Choice: {
      auto* c = new QComboBox(cell);
      c->addItems(spec.choices);
      connect(c, &QComboBox::currentTextChanged, this, &LauncherPage::revalidate);
      cellLayout->addWidget(c);
      ui.editor = c;
      break;
    }
    case FieldKind::Check: {
      auto* c = new QCheckBox(cell);
      connect(c, &QCheckBox::toggled, this, &LauncherPage::revalidate);
      cellLayout->addWidget(c);
      ui.editor = c;
      break;
    }
  }
  ui.editor->setObjectName(dotted);
  ui.editor->setToolTip(spec.help + QStringLiteral(" (") + dotted + QLatin1Char(')'));
  ui.error = new QLabel(cell);
  ui.error->setObjectName(QStringLiteral("error:") + dotted);
  ui.error->setStyleSheet(QLatin1String(kErrorStyle));
  ui.error->setWordWrap(true);
  ui.error->setVisible(false);
  cellLayout->addWidget(ui.error);
  fields_.insert(dotted, ui);
  return cell;
}

// Right side: devices, estimates, issues, Launch.
QWidget* LauncherPage::buildSidePanel() {
  auto* side = new QWidget(this);
  auto* sideCol = new QVBoxLayout(side);
  auto* devBox = new QGroupBox(QStringLiteral("Devices"), side);
  auto* devCol = new QVBoxLayout(devBox);
  deviceNote_ = new QLabel(devBox);
  deviceNote_->setObjectName(QStringLiteral("deviceNote"));
  deviceNote_->setWordWrap(true);
  devCol->addWidget(deviceNote_);
  sideCol->addWidget(devBox);

  sideCol->addWidget(buildEstimatesBox(side), 1);

  general_ = new QLabel(side);
  general_->setObjectName(QStringLiteral("generalIssues"));
  general_->setStyleSheet(QLatin1String(kErrorStyle));
  general_->setWordWrap(true);
  sideCol->addWidget(general_);
  status_ = new QLabel(side);
  status_->setObjectName(QStringLiteral("launchStatus"));
  status_->setWordWrap(true);
  sideCol->addWidget(status_);
  planNote_ = new QLabel(side);
  planNote_->setObjectName(QStringLiteral("planWarning"));
  planNote_->setStyleSheet(QLatin1String(kWarnStyle));
  planNote_->setWordWrap(true);
  planNote_->hide();
  sideCol->addWidget(planNote_);
  planTimer_ = new QTimer(this);
  planTimer_->setSingleShot(true);
  planTimer_->setInterval(400);  // plan once the user pauses typing
  connect(planTimer_, &QTimer::timeout, this, &LauncherPage::runPlan);
  launch_ = new QPushButton(QStringLiteral("Launch"), side);
  launch_->setObjectName(QStringLiteral("launch"));
  launch_->setToolTip(QStringLiteral("Start ulysses-run with this config (Ctrl+R)"));
  connect(launch_, &QPushButton::clicked, this, [this] {
    if (isValid() && !running_) emit launchRequested();
  });
  sideCol->addWidget(launch_);
  return side;
}

// Estimates (cost model): throughput and bandwidth knobs over the estimate table.
QWidget* LauncherPage::buildEstimatesBox(QWidget* side) {
  auto* estBox = new QGroupBox(QStringLiteral("Estimates (cost model)"), side);
  auto* estCol = new QVBoxLayout(estBox);
  auto* knobs = new QFormLayout;
  tflops_ = new QDoubleSpinBox(estBox);
  tflops_->setObjectName(QStringLiteral("throughput"));
  tflops_->setRange(0.001, 100000);
  tflops_->setDecimals(3);
  tflops_->setValue(0.02);
  tflops_->setSuffix(QStringLiteral(" TFLOP/s"));
  tflops_->setToolTip(QStringLiteral("Sustained throughput of one rank, used for the predicted step time"));
  bandwidth_ = new QDoubleSpinBox(estBox);
  bandwidth_->setRange(0, 100000);
  bandwidth_->setValue(0);
  bandwidth_->setSuffix(QStringLiteral(" GB/s"));
  bandwidth_->setSpecialValueText(QStringLiteral("ignore communication"));
  bandwidth_->setToolTip(QStringLiteral("All-to-all bandwidth per rank; 0 ignores communication time"));
  connect(tflops_, &QDoubleSpinBox::valueChanged, this, &LauncherPage::updateEstimates);
  connect(bandwidth_, &QDoubleSpinBox::valueChanged, this, &LauncherPage::updateEstimates);
  knobs->addRow(QStringLiteral("Throughput / rank"), tflops_);
  knobs->addRow(QStringLiteral("Link bandwidth"), bandwidth_);
  estCol->addLayout(knobs);
  estimateView_ = new QTableView(estBox);
  estimateView_->setObjectName(QStringLiteral("estimates"));
  estimateView_->setModel(estimates_);
  estimateView_->verticalHeader()->hide();
  estimateView_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  estimateView_->horizontalHeader()->setStretchLastSection(true);
  estimateView_->setSelectionMode(QAbstractItemView::NoSelection);
  estCol->addWidget(estimateView_);
  return estBox;
}

QStringList LauncherPage::presetNames() const {
  QStringList names;
  if (configsDir_.isEmpty()) return names;
  const auto files = QDir(configsDir_).entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name);
  for (const auto& f : files) names << f.completeBaseName();
  return names;
}

bool LauncherPage::loadPreset(const QString& name, QString* error) {
  const QString path = QDir(configsDir_).filePath(name + QStringLiteral(".json"));
  if (!QFileInfo::exists(path)) {
    if (error) *error = QStringLiteral("no preset named '%1' in %2").arg(name, configsDir_);
    return false;
  }
  return loadConfigFile(path, error);
}

void LauncherPage::resolveRelativePaths(json& j, const QString& baseDir) const {
  auto fix = [&](const char* section, const char* key) {
    if (!j.contains(section) || !j[section].is_object() || !j[section].contains(key) || !j[section][key].is_string())
      return;
    const QString p = to_qs(j[section][key].get<std::string>());
    if (p.isEmpty() || QFileInfo(p).isAbsolute()) return;
    if (QFileInfo::exists(p)) {  // relative to the working directory: pin it there
      j[section][key] = QFileInfo(p).absoluteFilePath().toStdString();
      return;
    }
    QDir base(baseDir);
    for (int up = 0; up < 4; ++up) {
      if (QFileInfo::exists(base.filePath(p))) {
        j[section][key] = QFileInfo(base.filePath(p)).absoluteFilePath().toStdString();
        return;
      }
      if (!base.cdUp()) return;
    }
  };
  fix("data", "path");
  fix("train", "init_from");
}

bool LauncherPage::loadConfigFile(const QString& path, QString* error) {
  try {
    json j = load_json_file(path.toStdString());
    if (!j.is_object()) throw ConfigError(path.toStdString() + ": a run config must be a JSON object");
    resolveRelativePaths(j, QFileInfo(path).absolutePath());
    if (!j.contains("name") || !j["name"].is_string()) j["name"] = QFileInfo(path).completeBaseName().toStdString();
    if (!setConfigJson(j, error)) return false;
    currentFile_ = QFileInfo(path).absoluteFilePath();
    const bool preset =
        !configsDir_.isEmpty() && QFileInfo(path).absolutePath() == QFileInfo(configsDir_).absoluteFilePath();
    const int i = preset ? presets_->findText(QFileInfo(path).completeBaseName()) : -1;
    presets_->setCurrentIndex(i > 0 ? i : 0);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = to_qs(e.what());
    return false;
  }
}

bool LauncherPage::saveConfigFile(const QString& path, QString* error) {
  // Whole or not at all: a full disk cut an existing config to its first kilobyte, unsaid.
  if (!writeFileWhole(path, QByteArray::fromStdString(formJson_.dump(2) + "\n"), error)) return false;
  currentFile_ = QFileInfo(path).absoluteFilePath();
  return true;
}

bool LauncherPage::importHfConfig(const QString& path, QString* error) {
  try {
    const ModelConfig m = model_from_hf_config(load_json_file(path.toStdString()));
    RunConfig r;
    r.model = m;
    const json model = r.to_json()["model"];
    filling_ = true;
    for (auto it = model.begin(); it != model.end(); ++it)
      setFieldText(to_qs("model." + it.key()), valueText(it.value()));
    filling_ = false;
    revalidate();
    return true;
  } catch (const std::exception& e) {
    filling_ = false;
    if (error) *error = to_qs(e.what());
    return false;
  }
}

bool LauncherPage::setConfigJson(const json& j, QString* error) {
  json full;
  try {
    full = RunConfig::from_json(j).to_json();  // defaults for missing keys; unknown keys refused
  } catch (const std::exception& e) {
    if (error) *error = to_qs(e.what());
    return false;
  }
  // With train.init_from, the model is the checkpoint's (as ulysses-run reads the config), not
  // defaults and a shape mismatch for a fine-tune config without a model section.
  // When the checkpoint cannot be read or disagrees, the form shows why (checkLaunchForm).
  try {
    if (full.contains("train") && full["train"].value("init_from", std::string()) != "") {
      json without_model = j;
      without_model.erase("model");
      json model = run_config_from_json(without_model).to_json()["model"];
      // The config's own model keys over the checkpoint's: one that disagrees is shown on its
      // field (checkLaunchForm), the rest are the checkpoint's.
      if (j.contains("model") && j["model"].is_object())
        for (auto it = j["model"].begin(); it != j["model"].end(); ++it) model[it.key()] = full["model"][it.key()];
      full["model"] = model;
    }
  } catch (const std::exception&) {
  }
  loadedJson_ = full;
  const bool wasFilling = filling_;
  filling_ = true;
  name_->setText(j.contains("name") && j["name"].is_string() ? to_qs(j["name"].get<std::string>()) : QString());
  for (auto s = full.begin(); s != full.end(); ++s) {
    if (!s.value().is_object()) continue;  // name, description: free text, not form fields
    for (auto k = s.value().begin(); k != s.value().end(); ++k)
      setFieldText(to_qs(s.key() + "." + k.key()), valueText(k.value()));
  }
  filling_ = wasFilling;
  if (!filling_) revalidate();
  return true;
}

QString LauncherPage::outputFolder() const { return output_ ? output_->text().trimmed() : QString(); }

void LauncherPage::setOutputFolder(const QString& dir) {
  if (!output_ || output_->text() == dir) return;
  output_->setText(dir);  // revalidates: the Ready line names it
}

QString LauncherPage::statusText() const { return status_ ? status_->text() : QString(); }

QString LauncherPage::configName() const {
  const QString n = name_->text().trimmed();
  return n.isEmpty() ? QStringLiteral("run") : n;
}

QStringList LauncherPage::fieldNames() const {
  QStringList out;
  for (const auto& s : configFields()) out << s.dotted();
  return out;
}

QWidget* LauncherPage::fieldWidget(const QString& dotted) const {
  const auto it = fields_.find(dotted);
  return it == fields_.end() ? nullptr : it->editor;
}

QString LauncherPage::fieldError(const QString& dotted) const {
  const auto it = fields_.find(dotted);
  return it == fields_.end() ? QString() : it->error->text();
}

bool LauncherPage::setFieldText(const QString& dotted, const QString& text) {
  QWidget* w = fieldWidget(dotted);
  if (!w) return false;
  if (auto* e = qobject_cast<QLineEdit*>(w)) {
    e->setText(text);
  } else if (auto* c = qobject_cast<QComboBox*>(w)) {
    int i = c->findText(text);
    if (i < 0) {  // a value from a file that the form does not offer: show it, validation flags it
      c->addItem(text);
      i = c->count() - 1;
    }
    c->setCurrentIndex(i);
  } else if (auto* b = qobject_cast<QCheckBox*>(w)) {
    if (text != QLatin1String("true") && text != QLatin1String("false")) return false;
    b->setChecked(text == QLatin1String("true"));
  }
  return true;
}

QString LauncherPage::fieldText(const QString& dotted) const {
  QWidget* w = fieldWidget(dotted);
  if (auto* e = qobject_cast<QLineEdit*>(w)) return e->text();
  if (auto* c = qobject_cast<QComboBox*>(w)) return c->currentText();
  if (auto* b = qobject_cast<QCheckBox*>(w)) return b->isChecked() ? QStringLiteral("true") : QStringLiteral("false");
  return {};
}

QString LauncherPage::generalIssues() const { return general_->text(); }

void LauncherPage::setFieldError(const QString& dotted, const QString& msg) {
  auto it = fields_.find(dotted);
  if (it == fields_.end()) return;
  it->error->setText(msg);
  it->error->setVisible(!msg.isEmpty());
}

void LauncherPage::revalidate() {
  if (filling_) return;
  // The checks and their messages are the engine's (ui/models/launch_form); this page shows them.
  // Keys the form has no field for (a Qwen3 config's head_dim, RoPE scaling, ...) keep the
  // values of the config that was loaded; the form's fields are laid over them.
  const LaunchFormCheck check = checkLaunchForm(
      loadedJson_, name_->text(), [this](const QString& f) { return fieldText(f); }, devices_);
  formJson_ = check.config_json;
  config_ = check.config;
  const auto& errs = check.field_errors;
  const QStringList& general = check.general;
  for (auto it = fields_.begin(); it != fields_.end(); ++it)
    setFieldError(it.key(), errs.value(it.key()).join(QLatin1Char('\n')));
  general_->setText(general.join(QLatin1Char('\n')));
  general_->setVisible(!general.isEmpty());
  const int problems = check.problems();
  if (config_) {
    status_->setStyleSheet(QString());
    // The whole layout (sp x ring x dp) and where the run lands.
    const QString folder = outputFolder().isEmpty() ? QStringLiteral("(no output folder)") : outputFolder();
    status_->setText(QStringLiteral("Ready: %1 rank(s) = sp %2 x ring %3 x dp %4, %5 steps of %6 tokens; the run goes "
                                    "to %7")
                         .arg(config_->parallel.world_size())
                         .arg(config_->parallel.sp_size)
                         .arg(config_->parallel.ring_size)
                         .arg(config_->parallel.dp_size)
                         .arg(config_->train.steps)
                         .arg(config_->train.seq_length)
                         .arg(QDir(folder).filePath(slug(configName()) + QStringLiteral("_<date-time>"))));
  } else {
    status_->setStyleSheet(QLatin1String(kErrorStyle));
    status_->setText(
        QStringLiteral("%1 problem(s): fix the fields marked in red to launch").arg(std::max(1, problems)));
  }
  launch_->setEnabled(config_.has_value() && !running_);
  updateDatasetInfo();
  updateEstimates();
  updateDeviceNote();
  if (lastValid_ != config_.has_value()) {
    lastValid_ = config_.has_value();
    emit validityChanged(lastValid_);
  }
  emit configEdited();
}

bool LauncherPage::useDataset(const QString& dir, QString* error) {
  DatasetInfo info;
  if (!read_dataset_info(dir, &info, error)) return false;
  setFieldText(QStringLiteral("data.kind"), QStringLiteral("documents"));
  setFieldText(QStringLiteral("data.path"), dir);
  datasetShownFor_.clear();
  updateDatasetInfo();
  // The statistics in view: the form scrolls to them.
  for (QWidget* w = datasetInfo_; w; w = w->parentWidget())
    if (auto* scroll = qobject_cast<QScrollArea*>(w)) {
      scroll->ensureWidgetVisible(datasetInfo_, 0, 200);
      break;
    }
  return true;
}

QString LauncherPage::datasetInfoText() const { return datasetInfo_ ? datasetInfo_->text() : QString(); }

// data.kind = documents: the folder's statistics (or why it is not a prepared dataset) under
// data.path; read again only when the folder changes.
void LauncherPage::updateDatasetInfo() {
  if (!datasetInfo_) return;
  const QString dir = fieldText(QStringLiteral("data.path"));
  if (fieldText(QStringLiteral("data.kind")) != QLatin1String("documents") || dir.isEmpty()) {
    datasetInfo_->clear();
    datasetInfo_->setVisible(false);
    datasetShownFor_.clear();
    return;
  }
  if (dir == datasetShownFor_) return;
  datasetShownFor_ = dir;
  DatasetInfo info;
  QString why;
  datasetInfo_->setText(read_dataset_info(dir, &info, &why) ? dataset_info_text(info)
                                                            : QStringLiteral("Not a prepared dataset: ") + why);
  datasetInfo_->setVisible(true);
}

void LauncherPage::updateEstimates() {
  if (!config_) {
    estimates_->clearEstimate(QStringLiteral("(invalid config)"));
    schedulePlan();  // clears the plan too: the last valid config's figures stayed beside "(invalid config)"
    return;
  }
  cost::CostOptions o;
  o.tflops_per_rank = tflops_->value();
  o.link_gbytes_per_s = bandwidth_->value();
  try {
    estimates_->setEstimate(cost::estimate(*config_, o), static_cast<int>(config_->train.steps));
  } catch (const std::exception& e) {
    estimates_->clearEstimate(to_qs(e.what()));
  }
  schedulePlan();
}

void LauncherPage::schedulePlan() {
  if (!config_) {
    planTimer_->stop();
    if (planProc_) {
      planProc_->disconnect(this);
      planProc_->kill();
      planProc_->waitForFinished(1000);
      planProc_->deleteLater();
      planProc_ = nullptr;
    }
    planKey_.clear();
    estimates_->clearPlan(QStringLiteral("(invalid config)"));
    updatePlanWarning();
    return;
  }
  json j = formJson_;
  j.erase("name");
  if (j.dump() == planKey_) return;  // plan (or planning) for this very config already
  planTimer_->start();
}

void LauncherPage::runPlan() {
  if (!config_) return;
  json j = formJson_;
  j.erase("name");
  planKey_ = j.dump();
  if (planProc_) {  // superseded
    planProc_->disconnect(this);
    planProc_->kill();
    planProc_->waitForFinished(1000);
    planProc_->deleteLater();
    planProc_ = nullptr;
  }
  const QString run = findUlyssesRun();
  if (run.isEmpty()) {
    estimates_->clearPlan(QStringLiteral("(no plan: ulysses-run not found)"));
    updatePlanWarning();
    emit planUpdated();
    return;
  }
  auto* proc = new QProcess(this);
  // The config the plan reads: a temporary file of a name no one can guess (a fixed name in
  // /tmp could be planted), removed with the process object (they piled up in /tmp).
  auto* tf = new QTemporaryFile(QDir::temp().filePath(QStringLiteral("ulysses-studio-plan-XXXXXX.json")), proc);
  const QByteArray text = QByteArray::fromStdString(formJson_.dump(2));
  if (!tf->open() || tf->write(text) != text.size() || !tf->flush()) {
    estimates_->clearPlan(
        QStringLiteral("(no plan: cannot write a temporary file in %1: %2)").arg(QDir::tempPath(), tf->errorString()));
    proc->deleteLater();
    updatePlanWarning();
    emit planUpdated();
    return;
  }
  const QString file = tf->fileName();
  estimates_->clearPlan(QStringLiteral("planning…"));
  planProc_ = proc;
  connect(proc, &QProcess::finished, this, [this, proc](int code, QProcess::ExitStatus st) {
    const QByteArray out = proc->readAllStandardOutput();
    const QString err = QString::fromLocal8Bit(proc->readAllStandardError()).trimmed();
    QString why;
    if (st != QProcess::NormalExit || code != 0) {
      why = QStringLiteral("(no plan: %1)")
                .arg(err.isEmpty() ? QStringLiteral("exit code %1").arg(code) : err.section(QLatin1Char('\n'), -1));
    } else if (auto p = PlanFigures::fromJson(out, &why)) {
      estimates_->setPlan(*p);
    } else {
      why = QStringLiteral("(no plan: %1)").arg(why);
    }
    if (!why.isEmpty()) estimates_->clearPlan(why);
    proc->deleteLater();
    planProc_ = nullptr;
    updatePlanWarning();
    emit planUpdated();
  });
  proc->start(run, {file, QStringLiteral("--plan"), QStringLiteral("--json")});
}

QString LauncherPage::planWarning() const { return planNote_->isHidden() ? QString() : planNote_->text(); }

void LauncherPage::updatePlanWarning() {
  QString warn;
  if (config_ && estimates_->hasPlan()) {
    const auto& p = estimates_->plan();
    const QString dev = to_qs(config_->train.device);
    const bool gpuRun = dev == QLatin1String("cuda") || (dev == QLatin1String("auto") && !devices_.gpus.isEmpty());
    const QString fix = QStringLiteral(
        "; try train.activation_checkpointing=layer, train.loss_chunk_tokens, train.mlp_chunk_tokens, "
        "a larger parallel.sp_size or a shorter train.seq_length");
    if (gpuRun && !devices_.gpus.isEmpty()) {
      const qint64 have = devices_.gpus.front().memoryBytes;
      if (have > 0 && p.peakBytes > have)
        warn = QStringLiteral("Will not fit: the planned peak is %1 per rank, the GPU has %2")
                   .arg(to_qs(cost::format_bytes(double(p.peakBytes))), to_qs(cost::format_bytes(double(have)))) +
               fix;
    } else if (!gpuRun) {
      const qint64 have = machineMemoryBytes();
      const double need = double(p.peakBytes) * double(config_->parallel.world_size());
      if (have > 0 && need > double(have))
        warn = QStringLiteral("Will not fit: %1 ranks x planned peak %2 = %3, this machine has %4")
                   .arg(config_->parallel.world_size())
                   .arg(to_qs(cost::format_bytes(double(p.peakBytes))), to_qs(cost::format_bytes(need)),
                        to_qs(cost::format_bytes(double(have)))) +
               fix;
    }
  }
  planNote_->setText(warn);
  planNote_->setVisible(!warn.isEmpty());
}

void LauncherPage::updateDeviceNote() {
  QString text;
  if (!devices_.gpus.isEmpty()) {
    QStringList g;
    for (int i = 0; i < devices_.gpus.size(); ++i)
      g << QStringLiteral("GPU %1: %2, %3")
               .arg(i)
               .arg(devices_.gpus[i].name, to_qs(cost::format_bytes(double(devices_.gpus[i].memoryBytes))));
    text = g.join(QLatin1Char('\n'));
  } else {
    text = QStringLiteral("No GPU: %1 CPU threads for CPU ranks").arg(devices_.cpuThreads);
    if (!devices_.note.isEmpty()) text += QStringLiteral("\n(") + devices_.note + QLatin1Char(')');
  }
  QString warn;
  if (config_) {
    const int world = static_cast<int>(config_->parallel.world_size());
    const QString dev = to_qs(config_->train.device);
    const bool gpuRun = dev == QLatin1String("cuda") || (dev == QLatin1String("auto") && !devices_.gpus.isEmpty());
    if (!gpuRun && world > devices_.cpuThreads)
      warn = QStringLiteral("%1 CPU ranks on %2 threads: ranks will share cores and run slowly")
                 .arg(world)
                 .arg(devices_.cpuThreads);
    if (gpuRun && estimates_->hasEstimate() && !devices_.gpus.isEmpty()) {
      const double need = double(estimates_->estimate().total_bytes());
      const double have = double(devices_.gpus.front().memoryBytes);
      if (have > 0 && need > have)
        warn = QStringLiteral("estimated %1 per rank exceeds the GPU's %2")
                   .arg(to_qs(cost::format_bytes(need)), to_qs(cost::format_bytes(have)));
    }
  }
  if (!warn.isEmpty())
    text +=
        QStringLiteral("\n<span style='%1'>Warning: %2</span>").arg(QLatin1String(kWarnStyle), warn.toHtmlEscaped());
  deviceNote_->setText(
      text.contains(QLatin1String("<span")) ? QString(text).replace(QLatin1Char('\n'), QStringLiteral("<br>")) : text);
}

void LauncherPage::setRunning(bool running) {
  running_ = running;
  launch_->setEnabled(config_.has_value() && !running_);
  launch_->setText(running ? QStringLiteral("Running…") : QStringLiteral("Launch"));
}

void LauncherPage::setDevices(const DeviceScan& scan) {
  devices_ = scan;
  revalidate();
  updatePlanWarning();
}

double LauncherPage::throughputTflops() const { return tflops_->value(); }
void LauncherPage::setThroughputTflops(double v) { tflops_->setValue(v); }

}  // namespace ulysses::ui
