// Main window of the studio.
#include "main_window.hpp"
#include "prepare_dialog.hpp"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QEventLoop>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProcess>
#include <QScreen>
#include <QSettings>
#include <QSignalBlocker>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>

#include "estimate_model.hpp"
#include "explain_times.hpp"
#include "explain_view.hpp"
#include "status_line.hpp"
#include "export_image.hpp"
#include "launcher_page.hpp"
#include "native_path.hpp"
#include "monitor_page.hpp"
#include "rank_status_model.hpp"
#include "run_controller.hpp"
#include "runs_page.hpp"
#include "studio_paths.hpp"
#include "simulated_run.hpp"
#include "theme.hpp"
#include "trace/phase_style.hpp"
#include "trace/shortcuts.hpp"
#include "trace/timeline_index.hpp"
#include "trace/timeline_widget.hpp"
#include "run_dir_reader.hpp"
#include "trace/trace_view.hpp"
#include "wheel_guard.hpp"
#include "whatif_page.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses::ui {

namespace {
constexpr int kMaxRecent = 10;
// A Hugging Face config.json names the model at its top level (model_type, architectures,
// hidden_size); a run config has sections. Decided on the parsed object: a run config with
// "model_type" inside its model section (qwen3-tiny.json, every RUN/config.json) is no
// Hugging Face one, though its text holds the key.
bool looksLikeHfConfig(const QString& path) {
  const auto j = launch::read_json_object_file(native_path(path));
  if (!j) return false;
  for (const char* section : kRunConfigSections)
    if (j->contains(section)) return false;
  return j->contains("model_type") || j->contains("architectures") || j->contains("hidden_size");
}
}  // namespace

namespace {
// The What-if page follows the launcher's config and plan, and takes a measured run whose trace
// opens; it opens simulated runs and hands a comparison to the Runs page. Returns it.
WhatIfPage* wire_whatif(MainWindow* w, WhatIfPage* whatif) {
  LauncherPage* launcher = w->launcher();
  auto follow = [launcher, whatif] {
    const EstimateModel* e = launcher->estimateModel();
    whatif->setLauncherConfig(launcher->configJson(),
                              e->hasEstimate() ? std::optional<cost::CostEstimate>(e->estimate()) : std::nullopt,
                              e->hasPlan() ? std::optional<PlanFigures>(e->plan()) : std::nullopt);
  };
  QObject::connect(launcher, &LauncherPage::configEdited, whatif, follow);
  QObject::connect(launcher, &LauncherPage::planUpdated, whatif, follow);
  follow();
  QObject::connect(w->traceView(), &TraceView::loaded, whatif, [whatif](const QString& path) {
    if (QFileInfo(path).isDir() && sim::simulated_banner(native_path(path)).empty())
      whatif->setMeasuredRun(path, nullptr);  // not a run folder (an nsys export folder): left as it was
  });
  QObject::connect(whatif, &WhatIfPage::openRunRequested, w, [w](const QString& d) {
    QString err;
    if (!w->openPath(d, &err)) w->statusBar()->showMessage(QStringLiteral("Not opened: %1").arg(err), 30000);
  });
  QObject::connect(whatif, &WhatIfPage::compareRequested, w, [w](const QString& measured, const QString& simulated) {
    w->runsPage()->compare(measured, simulated);
    w->setView(QStringLiteral("runs"));
  });
  return whatif;
}
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Ulysses Studio"));
  setAcceptDrops(true);
  WheelGuard::install();  // no form field changes on a wheel it was not focused for
  controller_ = new RunController(this);
  launcher_ = new LauncherPage(this);
  monitor_ = new MonitorPage(controller_, this);
  runs_ = new RunsPage(this);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName(QStringLiteral("pages"));
  tabs_->setDocumentMode(true);
  tabs_->addTab(launcher_, QStringLiteral("Launch"));
  tabs_->addTab(monitor_, QStringLiteral("Monitor"));
  tabs_->addTab(runs_, QStringLiteral("Runs"));
  trace_ = new TraceView(this);
  tabs_->addTab(trace_, QStringLiteral("Trace"));
  wireTraceView();
  addExplainTab();
  tabs_->addTab(wire_whatif(this, new WhatIfPage(this)), QStringLiteral("What if"));  // docs/STUDIO.md
  setCentralWidget(tabs_);
  setStatusBar(new StatusLine(this));  // elides: no message widens the window
  statusRun_ = static_cast<StatusLine*>(statusBar())->runLabel();

  wireRunSignals();
  buildMenus();
  restoreSettings();
}

// A trace that fails to load reports in the status bar; replay moves the timeline step by step.
void MainWindow::wireTraceView() {
  // Loading is asynchronous: a trace that turns out unreadable reports here, in the status bar.
  connect(trace_, &TraceView::loadFailed, this, [this](const QString& m) {
    lastTraceError_ = m;
    statusBar()->showMessage(QStringLiteral("Trace not opened: %1").arg(m), 30000);
  });
  connect(trace_, &TraceView::loaded, this, [this] { lastTraceError_.clear(); });
  // Replay: the timeline follows the replayed step (the view sweeps step by step).
  // A cursor line sweeps it: ReplayModel::cursorNs maps the replay clock onto the trace's
  // step spans; the view moves to the next step when the cursor enters it.
  connect(monitor_, &MonitorPage::replayCursor, this, [this](int, double) {
    auto* tl = trace_->timeline();
    if (!tl || !tl->index() || !monitor_->replayModel()) return;
    const auto& st = tl->index()->steps();
    std::vector<TraceStepSpan> spans;
    spans.reserve(st.size());
    for (const auto& s : st) spans.push_back({s.step, s.start_ns, s.end_ns});
    const int64_t c = monitor_->replayModel()->cursorNs(spans);
    tl->setCursorTime(c);
    if (c < 0) return;
    for (size_t i = 0; i < st.size(); ++i)
      if (st[i].start_ns <= c && c <= st[i].end_ns) {
        if (tl->currentStep() != static_cast<int64_t>(i)) tl->fitStep(static_cast<int>(i));
        break;
      }
  });
}

// Explainer: follows the launcher's config as it is edited.
void MainWindow::addExplainTab() {
  auto* explain = new ExplainView(this);
  tabs_->addTab(explain, QStringLiteral("Explain"));
  connect(launcher_, &LauncherPage::configEdited, explain,
          [this, explain] { explain->setConfigJson(launcher_->configJson()); });
  explain->setConfigJson(launcher_->configJson());
  // With a run open: the run's own config and its measured stage times (explain_times.hpp,
  // from the analysis core's layer table, as `ulysses-trace summary` computes it).
  connect(trace_, &TraceView::loaded, explain, [this, explain](const QString& path) {
    const auto m = trace_->model();
    if (!m) return;
    if (!m->config_json.empty()) {
      try {
        const RunConfig cfg = RunConfig::from_json(nlohmann::json::parse(m->config_json));
        // Its own settings are replaced when the presenter says so (else no times of the run).
        if (ulysses::ui::explain(cfg).ok && !explain->offerConfig(cfg, QFileInfo(path).fileName(), !quiet_)) return;
      } catch (const std::exception&) {  // a foreign or older config: keep the launcher's
      }
    }
    explain->highlightStage(-1);
    explain->setStageTimes(stage_times(prof::layer_table(*m)), QFileInfo(path).fileName());
    explain->setRingHopTime(ring_hop_time(*m));
  });
  connect(explain, &ExplainView::memoryRequested, this, [this] { setView(QStringLiteral("memory")); });
  // A range selected in the timeline highlights its stage.
  connect(trace_->timeline(), &TimelineWidget::rangeSelected, explain, [this, explain](qint64 i) {
    const auto m = trace_->model();
    if (!m || i < 0 || static_cast<size_t>(i) >= m->ranges.size()) return explain->highlightStage(-1);
    const auto& r = m->ranges[static_cast<size_t>(i)];
    const std::string name = r.name_id >= 0 && static_cast<size_t>(r.name_id) < m->strings.size()
                                 ? m->strings[static_cast<size_t>(r.name_id)]
                                 : std::string();
    explain->highlightStage(explain_stage_of_range(r.phase, name));
  });
}

// Launch, stop, finish and the runs page's requests.
void MainWindow::wireRunSignals() {
  connect(launcher_, &LauncherPage::outputFolderChosen, this, [this](const QString& d) { setRunsDir(d); });
  connect(launcher_, &LauncherPage::launchRequested, this, [this] {
    QString err;
    if (!launch(&err)) showError(QStringLiteral("Launch"), err);
  });
  connect(monitor_, &MonitorPage::startRequested, this, [this] {
    QString err;
    if (!launch(&err)) showError(QStringLiteral("Start"), err);
  });
  connect(controller_, &RunController::started, this, [this] {
    launcher_->setRunning(true);
    stopAction_->setEnabled(true);
    launcher_->estimateModel()->clearMeasured();
    static_cast<StatusLine*>(statusBar())
        ->setRunText(QStringLiteral("running: ") + QFileInfo(controller_->runDir()).fileName());
    tabs_->setCurrentWidget(monitor_);
    runs_->refresh();
  });
  connect(controller_, &RunController::finished, this, &MainWindow::onFinished);
  connect(runs_, &RunsPage::openRequested, this, [this](const QString& d) {
    QString err;
    if (!openPath(d, &err)) showError(QStringLiteral("Open"), err);
  });
  connect(runs_, &RunsPage::relaunchRequested, this, &MainWindow::relaunch);
  connect(runs_, &RunsPage::resumeRequested, this,
          [this](const QString& dir, const QString& saveTo) { resume(dir, saveTo); });
  connect(runs_, &RunsPage::changeRunsDirRequested, this, &MainWindow::chooseRunsDir);
}

// What the last session left (runs folder, theme, palette, throughput, geometry, config), the
// devices found, and the ulysses-run to launch with.
void MainWindow::restoreSettings() {
  QSettings s;
  setRunsDir(s.value(QStringLiteral("runsDir"), QDir::current().filePath(QStringLiteral("runs"))).toString());
  setDarkTheme(s.value(QStringLiteral("darkTheme"), false).toBool(), /*remember=*/false);
  if (PhasePalette pal = PhasePalette::Default;
      phase_palette_from_name(s.value(QStringLiteral("phasePalette")).toString().toStdString(), &pal))
    setPhasePalette(pal, false);
  const DeviceScan scan = discoverDevices(3000);
  hasGpus_ = !scan.gpus.isEmpty();
  launcher_->setDevices(scan);
  launcher_->setThroughputTflops(
      s.value(QStringLiteral("throughputTflops"), scan.gpus.isEmpty() ? 0.02 : 400.0).toDouble());
  statusBar()->showMessage(scan.gpus.isEmpty()
                               ? scan.note
                               : QStringLiteral("%1 GPU(s): %2").arg(scan.gpus.size()).arg(scan.gpus.front().name),
                           8000);
  if (!restoreGeometry(s.value(QStringLiteral("geometry")).toByteArray())) {
    // 1400x900, or the screen's available area when smaller (a 1280x720 projector).
    const QRect avail = screen() ? screen()->availableGeometry() : QRect(0, 0, 1400, 900);
    resize(QSize(1400, 900).boundedTo(avail.size()));
  }
  restoreState(s.value(QStringLiteral("windowState")).toByteArray());
  const QString last = s.value(QStringLiteral("lastConfig")).toString();
  QString ignored;
  // The last config, else the tiny preset; a last config that no longer loads is said, and the
  // preset opens instead (not bare defaults, unsaid).
  bool loaded = false;
  if (!last.isEmpty() && QFileInfo::exists(last)) {
    loaded = launcher_->loadConfigFile(last, &ignored);
    if (!loaded) lastConfigProblem_ = QStringLiteral("the last config %1 did not load: %2").arg(last, ignored);
  }
  if (!loaded && launcher_->presetNames().contains(QStringLiteral("tiny")))
    launcher_->loadPreset(QStringLiteral("tiny"), &ignored);
  if (!lastConfigProblem_.isEmpty()) statusBar()->showMessage(lastConfigProblem_, 15000);
  program_ = findUlyssesRun();
  if (program_.isEmpty())
    statusBar()->showMessage(
        QStringLiteral("ulysses-run not found: build it (cmake --build build --target ulysses-run) or set ULYSSES_RUN"),
        15000);
}

MainWindow::~MainWindow() {
  // A memory plan still running (ulysses-run --plan) would report to a launcher page whose
  // models are already gone while the page's children are deleted (a crash at exit after a
  // quick --screenshot): stop it first.
  for (auto* p : launcher_->findChildren<QProcess*>()) {
    p->disconnect();
    p->kill();
    p->waitForFinished(1000);
  }
}

void MainWindow::buildMenus() {
  buildFileMenu();
  buildRunMenu();
  buildViewMenu();
  buildHelpMenu();
  rebuildRecentMenu();
}

void MainWindow::buildFileMenu() {
  auto* file = menuBar()->addMenu(QStringLiteral("&File"));
  // Files (traces, configs) and folders (runs, runs folders, folders of exports); both go
  // through openPath, as a drop on the window does.
  file->addAction(QStringLiteral("&Open…"), this, &MainWindow::openConfigDialog)
      ->setShortcuts(key_sequences(Command::OpenFile));
  file->addAction(QStringLiteral("Open &Folder…"), this, &MainWindow::openDialog)
      ->setShortcuts(key_sequences(Command::OpenFolder));
  recentMenu_ = file->addMenu(QStringLiteral("Open R&ecent"));
  file->addAction(QStringLiteral("&Save Config As…"), QKeySequence::Save, this, &MainWindow::saveConfigDialog);
  file->addAction(QStringLiteral("&Import Hugging Face config.json…"), QKeySequence(QStringLiteral("Ctrl+I")), this,
                  &MainWindow::importHfDialog);
  file->addAction(QStringLiteral("&Prepare Data…"), this, [this] {
    prepareDialog()->show();
    prepare_->raise();
  });
  file->addSeparator();
  file->addAction(QStringLiteral("Runs &Folder…"), this, &MainWindow::chooseRunsDir);
  file->addAction(QStringLiteral("Export &Image…"), QKeySequence(QStringLiteral("Ctrl+E")), this, [this] {
    // The current view as PNG or SVG (export_image.hpp).
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export image"), QString(),
                                                      QStringLiteral("PNG image (*.png);;SVG image (*.svg)"));
    if (path.isEmpty()) return;
    QString err;
    exportCurrentView(path, &err);
    if (!err.isEmpty()) showError(QStringLiteral("Export image"), err);
  });
  file->addSeparator();
  file->addAction(QStringLiteral("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::buildRunMenu() {
  auto* run = menuBar()->addMenu(QStringLiteral("&Run"));
  run->addAction(QStringLiteral("&Launch"), QKeySequence(QStringLiteral("Ctrl+R")), this, [this] {
    QString err;
    if (!launch(&err)) showError(QStringLiteral("Launch"), err);
  });
  stopAction_ = run->addAction(QStringLiteral("&Stop"), QKeySequence(QStringLiteral("Ctrl+.")), this,
                               [this] { controller_->stop(); });
  stopAction_->setEnabled(false);
  // Ctrl+Shift+R: F5 (QKeySequence::Refresh) is Presentation Mode's, and a shortcut two
  // actions share runs neither ("Ambiguous shortcut overload").
  run->addAction(QStringLiteral("&Refresh Runs"), QKeySequence(QStringLiteral("Ctrl+Shift+R")), runs_,
                 &RunsPage::refresh);
}

void MainWindow::buildViewMenu() {
  auto* view = menuBar()->addMenu(QStringLiteral("&View"));
  const QStringList pages = {"Launch", "Monitor", "Runs", "Trace"};
  for (int i = 0; i < tabs_->count(); ++i)
    view->addAction(tabs_->tabText(i), QKeySequence(QStringLiteral("Ctrl+%1").arg(i + 1)), this,
                    [this, i] { tabs_->setCurrentIndex(i); });
  view->addSeparator();
  {  // Presentation mode: fonts 1.5x and a high-contrast palette that survives a projector.
    auto* present = view->addAction(QStringLiteral("&Presentation Mode"));
    present->setObjectName(QStringLiteral("presentationMode"));
    present->setCheckable(true);
    present->setShortcuts(key_sequences(Command::PresentationMode));
    connect(present, &QAction::toggled, this, &MainWindow::applyPresentationMode);
  }
  {  // Colour-blind-safe phase colours (Okabe-Ito) in every trace view; remembered.
    auto* cb = view->addAction(QStringLiteral("&Colour-blind-safe Phase Colours"));
    cb->setObjectName(QStringLiteral("colorBlindPalette"));
    cb->setCheckable(true);
    cb->setChecked(phase_palette() == PhasePalette::ColorBlind);
    connect(cb, &QAction::toggled, this,
            [this](bool on) { setPhasePalette(on ? PhasePalette::ColorBlind : PhasePalette::Default); });
  }
  {  // The plain wheel zooms the timelines (it scrolls their lanes by default, as in Perfetto).
    auto* wz = view->addAction(QStringLiteral("&Wheel Zooms Timeline"));
    wz->setObjectName(QStringLiteral("wheelZooms"));
    wz->setCheckable(true);
    const bool on = QSettings().value(QStringLiteral("wheelZooms"), false).toBool();
    wz->setChecked(on);
    auto apply = [this](bool z) {
      trace_->timeline()->setWheelZooms(z);
      trace_->loadingTimeline()->setWheelZooms(z);
    };
    apply(on);
    connect(wz, &QAction::toggled, this, [apply](bool z) {
      apply(z);
      QSettings().setValue(QStringLiteral("wheelZooms"), z);
    });
  }
  darkAction_ = view->addAction(QStringLiteral("&Dark Theme"));
  darkAction_->setCheckable(true);
  darkAction_->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+D")));
  connect(darkAction_, &QAction::toggled, this, [this](bool dark) { setDarkTheme(dark); });
}

// Presentation mode: fonts 1.5x and a high-contrast palette that survives a projector.
void MainWindow::applyPresentationMode(bool on) {
  static const QFont normalFont = QApplication::font();
  static const QPalette normalPalette = QApplication::palette();
  // The window stays within its screen: labels wrap (they widened it to 1802 px on a
  // 1280x720 projector), and a window larger than the screen is brought back into it.
  auto fitScreen = [this] {
    QApplication::processEvents();
    if (!screen() || isMaximized() || isFullScreen()) return;
    const QRect avail = screen()->availableGeometry();
    const QSize frameExtra = frameGeometry().size() - geometry().size();
    const QSize most = avail.size() - frameExtra;
    if (width() > most.width() || height() > most.height()) resize(size().boundedTo(most));
    if (!avail.contains(frameGeometry())) move(avail.topLeft());
  };
  if (!on) {
    QApplication::setFont(normalFont);
    QApplication::setPalette(normalPalette);
    return;
  }
  QFont f = normalFont;
  f.setPointSizeF(normalFont.pointSizeF() * 1.5);
  f.setBold(true);
  QApplication::setFont(f);
  QPalette p = normalPalette;
  p.setColor(QPalette::Window, Qt::white);
  p.setColor(QPalette::Base, Qt::white);
  p.setColor(QPalette::WindowText, Qt::black);
  p.setColor(QPalette::Text, Qt::black);
  p.setColor(QPalette::ButtonText, Qt::black);
  p.setColor(QPalette::Mid, Qt::black);
  p.setColor(QPalette::Highlight, QColor(0x00, 0x72, 0xB2));
  QApplication::setPalette(p);
  fitScreen();
}

void MainWindow::buildHelpMenu() {
  auto* help = menuBar()->addMenu(QStringLiteral("&Help"));
  {  // The sheet is generated from the binding table that binds the keys (shortcuts.hpp).
    auto* keys = help->addAction(QStringLiteral("&Keyboard Shortcuts"), this, &MainWindow::showShortcuts);
    keys->setObjectName(QStringLiteral("keyboardShortcuts"));
    keys->setShortcuts(key_sequences(Command::ShowShortcuts));
    keys->setShortcutContext(Qt::ApplicationShortcut);
  }
  help->addAction(QStringLiteral("&About Ulysses Studio"), this, [this] {
    QMessageBox::about(
        this, QStringLiteral("Ulysses Studio"),
        QStringLiteral("Ulysses Studio: launch, monitor and profile Llama training with Ulysses sequence "
                       "parallelism.\nLauncher: %1\nRuns folder: %2")
            .arg(program_.isEmpty() ? QStringLiteral("(ulysses-run not found)") : program_, runsDir()));
  });
}

QWidget* MainWindow::showShortcuts() {
  auto* sheet = findChild<QWidget*>(QStringLiteral("shortcutsSheet"));
  if (!sheet) {
    sheet = make_shortcuts_sheet(this);
    sheet->setAttribute(Qt::WA_DeleteOnClose);
  }
  sheet->show();
  sheet->raise();
  sheet->activateWindow();
  return sheet;
}

void MainWindow::setRunsDir(const QString& dir, bool remember) {
  runs_->setRunsDir(dir);
  launcher_->setOutputFolder(runs_->runsDir());  // the launcher's output folder is the runs folder
  if (auto* w = findChild<WhatIfPage*>()) w->setOutputFolder(runs_->runsDir());  // and the simulated runs'
  if (remember) QSettings().setValue(QStringLiteral("runsDir"), runs_->runsDir());
}

QString MainWindow::runsDir() const { return runs_->runsDir(); }

void MainWindow::setDarkTheme(bool dark, bool remember) {
  dark_ = dark;
  applyTheme(dark);
  if (darkAction_ && darkAction_->isChecked() != dark) {
    const QSignalBlocker quiet(darkAction_);  // no second call through toggled
    darkAction_->setChecked(dark);
  }
  if (remember) QSettings().setValue(QStringLiteral("darkTheme"), dark);
}

void MainWindow::setPhasePalette(PhasePalette p, bool remember) {
  set_phase_palette(p);
  if (auto* a = findChild<QAction*>(QStringLiteral("colorBlindPalette"));
      a && a->isChecked() != (p == PhasePalette::ColorBlind)) {
    const QSignalBlocker quiet(a);  // no second call through toggled
    a->setChecked(p == PhasePalette::ColorBlind);
  }
  if (auto* tl = trace_->timeline()) tl->refreshColours();
  trace_->update();
  if (remember)
    QSettings().setValue(QStringLiteral("phasePalette"),
                         p == PhasePalette::ColorBlind ? QStringLiteral("cb") : QStringLiteral("default"));
}

bool MainWindow::exportCurrentView(const QString& path, QString* error) {
  auto* ex = qobject_cast<ExplainView*>(tabs_->currentWidget());
  if (ex && ex->explanation().ok && !ex->isWeightsStage(ex->stage()) &&
      QFileInfo(path).suffix().toLower() == QLatin1String("svg")) {
    // The explainer's stage as vector shapes of its own (explainStageSvg).
    QString why;
    if (!writeFileWhole(path, explainStageSvg(ex->explanation(), ex->stage()).toUtf8(), &why)) {
      if (error) *error = QStringLiteral("cannot write %1: %2").arg(display_path(path), why);
      return false;
    }
    return true;
  }
  return exportWidgetImage(tabs_->currentWidget(), path, error);
}

QStringList MainWindow::recentFiles() const { return QSettings().value(QStringLiteral("recentFiles")).toStringList(); }

void MainWindow::addRecent(const QString& path) {
  QStringList r = recentFiles();
  const QString abs = QFileInfo(path).absoluteFilePath();
  r.removeAll(abs);
  r.prepend(abs);
  while (r.size() > kMaxRecent) r.removeLast();
  QSettings().setValue(QStringLiteral("recentFiles"), r);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  const auto r = recentFiles();
  for (int i = 0; i < r.size(); ++i) {
    const QString p = r[i];
    auto* a = recentMenu_->addAction(QStringLiteral("&%1 %2").arg((i + 1) % 10).arg(p), this, [this, p] {
      QString err;
      if (!openPath(p, &err)) showError(QStringLiteral("Open"), err);
    });
    a->setEnabled(path_exists(p));
  }
  if (r.isEmpty())
    recentMenu_->addAction(QStringLiteral("(none)"))->setEnabled(false);
  else {
    recentMenu_->addSeparator();
    recentMenu_->addAction(QStringLiteral("Clear"), this, [this] {
      QSettings().remove(QStringLiteral("recentFiles"));
      rebuildRecentMenu();
    });
  }
}

bool MainWindow::openPath(const QString& path, QString* error) {
  // The file system is asked through native_path (names that are not UTF-8 byte for byte);
  // QFileInfo only takes the string apart.
  const QFileInfo fi(path);
  if (!path_exists(path)) {
    if (error) *error = QStringLiteral("%1 does not exist").arg(display_path(path));
    return false;
  }
  if (path_is_dir(path)) {
    const QString dir = fi.absoluteFilePath();
    // A folder of Nsight Systems exports or PyTorch profiler traces (one per rank), under any
    // names (rank0.sqlite, rank1.sqlite too): what ulysses-trace reads (prof::is_trace_input).
    if (!isRunDir(dir) && ulysses::prof::is_trace_input(native_path(dir))) {
      if (!trace_->openTrace(dir, error)) return false;
      tabs_->setCurrentWidget(trace_);
      addRecent(dir);
      return true;
    }
    if (!isRunDir(dir)) {
      // A folder of runs: make it the runs folder.
      if (!scanRunsDir(dir).isEmpty()) {
        setRunsDir(dir);
        tabs_->setCurrentWidget(runs_);
        return true;
      }
      if (error) *error = QStringLiteral("%1 is not a run folder (no run.json, config.json or metrics.jsonl)").arg(dir);
      return false;
    }
    monitor_->showRun(dir);
    runs_->selectDir(dir);
    showMeasured(dir, readMetricsFile(QDir(dir).filePath(QString::fromLatin1(run_layout::kMetrics))));
    if (path_exists(QDir(dir).filePath(QString::fromLatin1(run_layout::kTraceDir)))) openRunTrace(dir);
    tabs_->setCurrentWidget(monitor_);
    addRecent(dir);
    return true;
  }
  // A run's own record (RUN/run.json) opens its run: read as a run config it would be refused with
  // "unknown config section 'duration_s'".
  if (fi.fileName() == QLatin1String(run_layout::kRunRecord) && isRunDir(fi.absolutePath()))
    return openPath(fi.absolutePath(), error);
  const QString suffix = fi.suffix().toLower();
  // Compressed traces go to the loader too, which says how to unpack them.
  const QString name = fi.fileName().toLower();
  const bool compressed = name.endsWith(QLatin1String(".json.gz")) || name.endsWith(QLatin1String(".sqlite.gz"));
  // By content first (an Nsight export named .json, a trace named .sqlite that is JSON), as
  // ulysses-trace reads it; by name for what is no trace, so that the loader says why.
  if (compressed || suffix == QLatin1String("sqlite") || suffix == QLatin1String("db") ||
      suffix == QLatin1String("sqlite3") || ulysses::prof::is_trace_input(native_path(fi.absoluteFilePath()))) {
    if (!trace_->openTrace(fi.absoluteFilePath(), error)) return false;
    tabs_->setCurrentWidget(trace_);
    addRecent(fi.absoluteFilePath());
    return true;
  }
  if (suffix == QLatin1String("json") &&
      ulysses::prof::is_foreign_trace(native_path(fi.absoluteFilePath()))) {  // PyTorch profiler
    if (!trace_->openTrace(fi.absoluteFilePath(), error)) return false;
    tabs_->setCurrentWidget(trace_);
    addRecent(fi.absoluteFilePath());
    return true;
  }
  if (suffix == QLatin1String("json")) {
    const bool hf = looksLikeHfConfig(fi.absoluteFilePath());
    const bool ok = hf ? launcher_->importHfConfig(fi.absoluteFilePath(), error)
                       : launcher_->loadConfigFile(fi.absoluteFilePath(), error);
    if (!ok) return false;
    if (!hf) QSettings().setValue(QStringLiteral("lastConfig"), fi.absoluteFilePath());
    tabs_->setCurrentWidget(launcher_);
    addRecent(fi.absoluteFilePath());
    return true;
  }
  if (error)
    *error = QStringLiteral("cannot open %1: expected a run folder, a trace .sqlite or a config .json").arg(path);
  return false;
}

bool MainWindow::openTraceAndWait(const QString& path, QString* error) {
  if (!trace_->openTraceAndWait(path, error)) return false;
  tabs_->setCurrentWidget(trace_);
  return true;
}

QString MainWindow::currentPage() const {
  auto* w = tabs_->currentWidget();
  if (w == launcher_) return QStringLiteral("launch");
  if (w == monitor_) return QStringLiteral("monitor");
  if (w == runs_) return QStringLiteral("runs");
  return QStringLiteral("trace");
}

bool MainWindow::setView(const QString& name) {
  const QString n = name.toLower();
  if (n == QLatin1String("launch") || n == QLatin1String("launcher"))
    tabs_->setCurrentWidget(launcher_);
  else if (n == QLatin1String("monitor"))
    tabs_->setCurrentWidget(monitor_);
  else if (n == QLatin1String("runs"))
    tabs_->setCurrentWidget(runs_);
  else if (n == QLatin1String("explain"))
    tabs_->setCurrentWidget(findChild<ExplainView*>());
  else if (n == QLatin1String("whatif") || n == QLatin1String("what-if"))
    tabs_->setCurrentWidget(findChild<WhatIfPage*>());
  else if (n == QLatin1String("trace"))
    tabs_->setCurrentWidget(trace_);
  else if (trace_->setView(n))
    tabs_->setCurrentWidget(trace_);
  else
    return false;
  return true;
}

bool MainWindow::launch(QString* error) {
  if (controller_->isRunning()) {
    if (error) *error = QStringLiteral("a run is already in progress; stop it first (Ctrl+.)");
    return false;
  }
  const auto cfg = launcher_->config();
  if (!cfg) {
    if (error) *error = QStringLiteral("the config has problems; fix the fields marked in red");
    return false;
  }
  const QString program = program_.isEmpty() ? findUlyssesRun() : program_;
  QDir runs(runsDir());
  if (!runs.mkpath(QStringLiteral(".studio"))) {
    if (error)
      *error = QFileInfo(runsDir()).isDir()
                   ? QStringLiteral("cannot create the folder %1 (where the studio keeps the configs it launches)")
                         .arg(runs.filePath(QStringLiteral(".studio")))
                   : QStringLiteral("cannot create the runs folder %1").arg(runsDir());
    return false;
  }
  const QString base = slug(launcher_->configName()) + QLatin1Char('_') +
                       QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-hhmmss"));
  QString name = base;
  for (int i = 2; runs.exists(name); ++i) name = base + QStringLiteral("-%1").arg(i);
  const QString configPath = runs.filePath(QStringLiteral(".studio/") + name + QStringLiteral(".json"));
  // Whole or not launched: a full disk left an empty config that ulysses-run then "refused".
  if (!writeFileWhole(configPath, QByteArray::fromStdString(launcher_->configJson().dump(2) + "\n"), error))
    return false;
  return controller_->start(program, configPath, runs.filePath(name), static_cast<int>(cfg->parallel.world_size()),
                            static_cast<int>(cfg->train.steps), error);
}

void MainWindow::onFinished(const RunOutcome& o) {
  launcher_->setRunning(false);
  stopAction_->setEnabled(false);
  static_cast<StatusLine*>(statusBar())
      ->setRunText(QStringLiteral("%1: %2").arg(o.status, QFileInfo(o.runDir).fileName()));
  runs_->refresh();
  runs_->selectDir(o.runDir);
  if (!controller_->metrics().isEmpty()) showMeasured(o.runDir, controller_->metrics());
  statusBar()->showMessage(o.message.section(QLatin1Char('\n'), 0, 0), 15000);
  if (path_exists(o.runDir)) addRecent(o.runDir);
  if (path_exists(QDir(o.runDir).filePath(QStringLiteral("trace/rank0.sqlite")))) openRunTrace(o.runDir);
}

// A run's measured figures go in the launcher's Measured column only against that run's own
// config: opened beside another config (a preset, a later edit) they compared two different
// runs ("44.8x"). A CPU run's memory is the process's resident memory, said as such.
bool MainWindow::showMeasured(const QString& runDir, const QVector<MetricPoint>& metrics) {
  auto* est = launcher_->estimateModel();
  const auto runCfg =
      launch::read_json_object_file(native_path(QDir(runDir).filePath(QString::fromLatin1(run_layout::kConfig))));
  std::optional<RunConfig> a, b;
  try {
    if (runCfg) a = run_config_from_json(*runCfg);
    b = run_config_from_json(launcher_->configJson());
  } catch (const std::exception&) {
  }
  // The same run whatever its name and description.
  auto settings = [](const RunConfig& c) {
    nlohmann::json j = c.to_json();
    j.erase("name");
    j.erase("description");
    return j;
  };
  if (!a || !b || settings(*a) != settings(*b)) {
    est->clearMeasured();
    statusBar()->showMessage(
        QStringLiteral("%1's measured figures are not set beside the launcher's estimates: the launcher holds another "
                       "config (Runs ▸ Launch Again loads the run's)")
            .arg(QFileInfo(runDir).fileName()),
        15000);
    return false;
  }
  const QString device = QString::fromStdString(a->train.device);
  const bool cpu = device == QLatin1String("cpu") || (device == QLatin1String("auto") && !hasGpus_);
  est->setMeasured(measure(metrics), cpu);
  return true;
}

// A run folder's trace opens beside its metrics; when it cannot be read the run still opens,
// and the reason is shown instead of being dropped.
void MainWindow::openRunTrace(const QString& runDir) {
  QString terr;
  // A simulated run (engine/sim) says so in the title and the status bar, whatever view is on.
  const std::string simulated = ulysses::sim::simulated_banner(native_path(runDir));
  setWindowTitle(simulated.empty() ? QStringLiteral("Ulysses Studio")
                                   : QStringLiteral("Ulysses Studio — %1 — %2")
                                         .arg(QFileInfo(runDir).fileName(),
                                              QString::fromStdString(simulated.substr(0, simulated.find(':')))));
  if (!simulated.empty()) statusBar()->showMessage(QString::fromStdString(simulated));
  if (trace_->openTrace(runDir, &terr)) return;
  const QString msg = QStringLiteral("trace of %1 not opened: %2").arg(QFileInfo(runDir).fileName(), terr);
  lastTraceError_ = msg;
  statusBar()->showMessage(msg, 30000);
  qWarning("%s", qPrintable(msg));
}

void MainWindow::relaunch(const QString& runDir) {
  const QString cfg = QDir(runDir).filePath(QString::fromLatin1(run_layout::kConfig));
  QString err;
  if (!launcher_->loadConfigFile(cfg, &err)) {
    showError(QStringLiteral("Launch again"), err);
    return;
  }
  tabs_->setCurrentWidget(launcher_);
}

bool MainWindow::resume(const QString& runDir, const QString& saveTo) {
  QString err;
  if (!launcher_->loadConfigFile(QDir(runDir).filePath(QString::fromLatin1(run_layout::kConfig)), &err) ||
      !launcher_->setFieldText(QStringLiteral("train.resume_from"), saveTo)) {
    showError(QStringLiteral("Resume"),
              err.isEmpty() ? QStringLiteral("the launcher has no train.resume_from field") : err);
    return false;
  }
  tabs_->setCurrentWidget(launcher_);
  statusBar()->showMessage(
      QStringLiteral("Resuming from the latest complete checkpoint in %1: press Launch").arg(saveTo), 15000);
  return true;
}

void MainWindow::openDialog() {
  const QString p = QFileDialog::getExistingDirectory(
      this, QStringLiteral("Open a run folder, a runs folder or a folder of traces"), runsDir());
  if (p.isEmpty()) return;
  QString err;
  if (!openPath(p, &err)) showError(QStringLiteral("Open"), err);
}

QString MainWindow::openFileFilters() {
  return QStringLiteral(
      "Traces, configs and runs (*.sqlite *.sqlite3 *.db *.json *.json.gz *.sqlite.gz);;"
      "Traces: ours and Nsight Systems exports (*.sqlite *.sqlite3 *.db);;PyTorch profiler traces (*.json *.json.gz);;"
      "Run configs and run.json (*.json);;All files (*)");
}

void MainWindow::openConfigDialog() {
  const QString p =
      QFileDialog::getOpenFileName(this, QStringLiteral("Open a trace, config or run"), runsDir(), openFileFilters());
  if (p.isEmpty()) return;
  QString err;
  if (!openPath(p, &err)) showError(QStringLiteral("Open"), err);
}

void MainWindow::saveConfigDialog() {
  // A shipped preset is not offered for overwriting: the dialog starts in the home folder.
  QString start = launcher_->currentFile();
  const QString presets = findConfigsDir();
  if (!start.isEmpty() && !presets.isEmpty() &&
      QFileInfo(start).absolutePath() == QFileInfo(presets).absoluteFilePath())
    start = QDir::home().filePath(QFileInfo(start).fileName());
  const QString p = QFileDialog::getSaveFileName(this, QStringLiteral("Save run config"), start,
                                                 QStringLiteral("Run configs (*.json)"));
  if (p.isEmpty()) return;
  QString err;
  if (!launcher_->saveConfigFile(p, &err))
    showError(QStringLiteral("Save"), err);
  else {
    QSettings().setValue(QStringLiteral("lastConfig"), p);
    addRecent(p);
  }
}

void MainWindow::importHfDialog() {
  const QString p = QFileDialog::getOpenFileName(this, QStringLiteral("Import a Hugging Face config.json"), QString(),
                                                 QStringLiteral("config.json (*.json)"));
  if (p.isEmpty()) return;
  QString err;
  if (!launcher_->importHfConfig(p, &err)) showError(QStringLiteral("Import"), err);
}

void MainWindow::chooseRunsDir() {
  const QString p = QFileDialog::getExistingDirectory(this, QStringLiteral("Runs folder"), runsDir());
  if (!p.isEmpty()) setRunsDir(p);
}

void MainWindow::showError(const QString& title, const QString& msg) {
  statusBar()->showMessage(msg.section(QLatin1Char('\n'), 0, 0), 15000);
  if (!quiet_) QMessageBox::warning(this, title, msg);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  if (controller_->isRunning()) {
    if (!quiet_ &&
        QMessageBox::question(this, QStringLiteral("Quit"),
                              QStringLiteral("A run is in progress. Stop it and quit?")) != QMessageBox::Yes) {
      e->ignore();
      return;
    }
    controller_->stop();
  }
  QSettings s;
  s.setValue(QStringLiteral("geometry"), saveGeometry());
  s.setValue(QStringLiteral("windowState"), saveState());
  s.setValue(QStringLiteral("throughputTflops"), launcher_->throughputTflops());
  QMainWindow::closeEvent(e);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls() && !e->mimeData()->urls().isEmpty() && e->mimeData()->urls().front().isLocalFile())
    e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  for (const auto& url : e->mimeData()->urls()) {
    if (!url.isLocalFile()) continue;
    QString err;
    // The path's bytes as the file manager percent-encoded them (toLocalFile decodes a name
    // that is not UTF-8 with U+FFFD).
    const QByteArray bytes = QByteArray::fromPercentEncoding(url.path(QUrl::FullyEncoded).toLatin1());
    if (!openPath(qs_from_native(std::string_view(bytes.constData(), size_t(bytes.size()))), &err))
      showError(QStringLiteral("Open"), err);
    e->acceptProposedAction();
    return;
  }
}

PrepareDialog* MainWindow::prepareDialog() {
  if (!prepare_) {
    prepare_ = new PrepareDialog(this);
    connect(prepare_, &PrepareDialog::datasetReady, this, [this](const QString& dir) {
      QString why;
      if (launcher_->useDataset(dir, &why))
        setView(QStringLiteral("launch"));
      else
        statusBar()->showMessage(why, 8000);
    });
  }
  return prepare_;
}

}  // namespace ulysses::ui
