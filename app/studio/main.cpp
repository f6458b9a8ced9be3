// ulysses-studio [RUN_DIR|TRACE.sqlite|CONFIG.json] [--screenshot FILE.png] [--view NAME]
// [--runs-dir DIR] [--stage N] [--replay SPEED] [--palette default|cb]: the desktop studio (--stage N: the explainer
// at stage N; --replay: play a recorded run back in the monitor). --screenshot renders the main window after loading
// and exits (works offscreen: QT_QPA_PLATFORM=offscreen). Exit 2 on bad arguments, 1 when
// the file cannot be opened or the screenshot cannot be written.
#include <QApplication>
#include <QBuffer>
#include <QCommandLineParser>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImageReader>
#include <QImage>
#include <QImageWriter>
#include <QPixmap>
#include <QSaveFile>
#include <QTemporaryDir>
#include <QSettings>
#include <QTimer>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "std_fds.hpp"
#include "explain_view.hpp"
#include "main_window.hpp"
#include "native_path.hpp"
#include "run_data.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "monitor_page.hpp"
#include "svg_export.hpp"

namespace {
// --stage N: the explainer at stage N (1-based, as the view numbers them).
bool select_explainer_stage(ulysses::ui::MainWindow& w, const QString& value) {
  auto* ex = w.findChild<ulysses::ui::ExplainView*>();
  bool ok = false;
  const int n = value.toInt(&ok);
  if (!ex || !ok || n < 1 || n > std::max(1, ex->stageCount())) {
    std::fprintf(stderr, "ulysses-studio: --stage expects 1..%d, got '%s'\n", ex ? std::max(1, ex->stageCount()) : 6,
                 qPrintable(value));
    return false;
  }
  w.setView(QStringLiteral("explain"));
  if (ex->stageCount() > 0) ex->setStage(n - 1);
  return true;
}

// Without a display, --help, --version and --screenshot still work offscreen; a window
// that cannot be shown gets a message instead of Qt's abort (false: exit 1).
bool display_or_offscreen(int argc, char** argv) {
  const bool has_display = std::getenv("DISPLAY") || std::getenv("WAYLAND_DISPLAY") || std::getenv("QT_QPA_PLATFORM");
  if (!has_display) {
    bool headless_ok = false;
    for (int i = 1; i < argc; ++i)
      for (const char* a : {"--screenshot", "--help", "-h", "--version", "-v", "--help-all"})
        if (std::strcmp(argv[i], a) == 0 || std::strncmp(argv[i], "--screenshot=", 13) == 0) headless_ok = true;
    if (!headless_ok) {
      std::fprintf(
          stderr,
          "ulysses-studio: no display (DISPLAY is unset). Run it in a desktop session, or render a window with "
          "--screenshot FILE.png (offscreen).\n");
      return false;
    }
    setenv("QT_QPA_PLATFORM", "offscreen", 1);
  }
  return true;
}

// A display that cannot be opened (DISPLAY=:99 with no X server there, QT_QPA_PLATFORM=bogus)
// is a qFatal inside QApplication's constructor: Qt aborted (exit 134) telling the user to
// reinstall. Said plainly instead, exit 1; once the application exists, Qt's handler again.
// Returns the handler it replaced.
QtMessageHandler say_display_failures() {
  return qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& msg) {
    if (type == QtFatalMsg) {
      std::fprintf(stderr,
                   "ulysses-studio: cannot open the display (DISPLAY=%s, QT_QPA_PLATFORM=%s): %s\n"
                   "Run it in a desktop session, or render a window offscreen with QT_QPA_PLATFORM=offscreen "
                   "and --screenshot FILE.png.\n",
                   std::getenv("DISPLAY") ? std::getenv("DISPLAY") : "(unset)",
                   std::getenv("QT_QPA_PLATFORM") ? std::getenv("QT_QPA_PLATFORM") : "(unset)",
                   qPrintable(msg.section(QLatin1Char('\n'), 0, 0)));
      std::_Exit(1);
    }
    if (type != QtDebugMsg) std::fprintf(stderr, "%s\n", qPrintable(msg));
  });
}

// The options, in --help's order.
struct StudioOptions {
  QCommandLineOption shot, view, runsDir, size, dark, stage, replay, palette;
};

StudioOptions define_options(QCommandLineParser& cli) {
  cli.setApplicationDescription(
      QStringLiteral("Launch, monitor and profile Ulysses sequence-parallel Llama training."));
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addPositionalArgument(QStringLiteral("path"),
                            QStringLiteral("run folder, trace .sqlite or run config .json to open"),
                            QStringLiteral("[RUN_DIR|TRACE.sqlite|CONFIG.json]"));
  const QCommandLineOption shot(
      QStringLiteral("screenshot"),
      QStringLiteral("Render the window to FILE.png (or FILE.svg, a vector drawing) and exit."),
      QStringLiteral("FILE.png"));
  const QCommandLineOption view(
      QStringLiteral("view"),
      QStringLiteral("Page or trace view: launch, monitor, runs, explain, trace, timeline, headmap, memory, report."),
      QStringLiteral("NAME"));
  const QCommandLineOption runsDir(QStringLiteral("runs-dir"),
                                   QStringLiteral("Runs folder (default: <cwd>/runs, remembered)."),
                                   QStringLiteral("DIR"));
  const QCommandLineOption size(QStringLiteral("size"),
                                QStringLiteral("Window size for screenshots, WxH (default 1500x950)."),
                                QStringLiteral("WxH"));
  const QCommandLineOption dark(QStringLiteral("dark"), QStringLiteral("Use the dark theme."));
  const QCommandLineOption stage(
      QStringLiteral("stage"),
      QStringLiteral("Explainer stage to show, 1-7 (shard, q/k/v projection, seq->head all-to-all, "
                     "attention, head->seq all-to-all, output projection, where the weights are); implies "
                     "--view explain."),
      QStringLiteral("N"));
  const QCommandLineOption replay(
      QStringLiteral("replay"),
      QStringLiteral("Play the opened run back in the monitor at SPEED x real time (1, 10, ...; "
                     "0 = step by step), no training."),
      QStringLiteral("SPEED"));
  const QCommandLineOption palette(
      QStringLiteral("palette"),
      QStringLiteral("Phase colours of the trace views: default, or cb (colour-blind safe, Okabe-Ito)."),
      QStringLiteral("NAME"));
  cli.addOptions({shot, view, runsDir, size, dark, stage, replay, palette});
  return {shot, view, runsDir, size, dark, stage, replay, palette};
}

// --screenshot FILE: a suffix an image writer (or the SVG export) has; else a message (exit 2).
bool screenshot_format_ok(const QString& file) {
  if (QFileInfo(file).suffix().isEmpty()) {
    std::fprintf(stderr, "ulysses-studio: --screenshot needs a file name with an image suffix, e.g. out.png\n");
    return false;
  }
  // A suffix no image writer has: refused before anything is drawn or written.
  const QByteArray suffix = QFileInfo(file).suffix().toLower().toLatin1();
  const QList<QByteArray> formats = QImageWriter::supportedImageFormats();
  if (suffix != "svg" && !formats.contains(suffix)) {
    QStringList names{QStringLiteral("svg")};
    for (const QByteArray& f : formats) names << QString::fromLatin1(f);
    std::fprintf(stderr, "ulysses-studio: --screenshot cannot write .%s files; give one of: %s\n", suffix.constData(),
                 qPrintable(names.join(QStringLiteral(", "))));
    return false;
  }
  return true;
}

// --screenshot FILE: an existing target that is no regular file (a FIFO, a device, a folder, a
// link to one) is refused; the save would rename its file over it (/dev/full would become a PNG). False: exit 2.
bool screenshot_file_ok(const QString& file) {
  namespace fs = std::filesystem;
  const QFileInfo target(file);  // string only; the file system is asked byte for byte
  const fs::path tp = ulysses::ui::native_path(target.absoluteFilePath());
  std::error_code ec;
  const fs::file_status lst = fs::symlink_status(tp, ec), st = fs::status(tp, ec);
  const bool exists = fs::exists(st), is_link = fs::is_symlink(lst), is_file = fs::is_regular_file(st);
  if ((exists || is_link) && !is_file) {
    std::fprintf(stderr,
                 "ulysses-studio: --screenshot %s exists and is not a regular file (a folder, a FIFO, a device or a "
                 "link to one); give a new file name\n",
                 qPrintable(file));
    return false;
  }
  // Never through a link, nor over a file that is not an image already (a link named shot.png
  // to someone's config.json, or to the rank file being drawn, would be replaced by a PNG).
  if (is_link) {
    std::fprintf(stderr,
                 "ulysses-studio: --screenshot %s is a symbolic link (to %s); give the file itself or a new file "
                 "name\n",
                 qPrintable(file), fs::read_symlink(tp, ec).c_str());
    return false;
  }
  if (is_file && fs::file_size(tp, ec) > 0) {
    QByteArray head(4096, '\0');
    std::ifstream existing(tp, std::ios::binary);
    existing.read(head.data(), head.size());
    head.truncate(int(existing.gcount()));
    QBuffer buf(&head);
    buf.open(QIODevice::ReadOnly);
    const bool image = QImageReader(&buf).canRead() || head.contains("<svg");
    if (!image) {
      std::fprintf(stderr,
                   "ulysses-studio: --screenshot %s exists and is not an image; it is left as it is: give a new "
                   "file name\n",
                   qPrintable(file));
      return false;
    }
  }
  if (!ulysses::ui::path_is_dir(target.absolutePath())) {  // said only after drawing, with no reason
    std::fprintf(stderr, "ulysses-studio: --screenshot %s: the folder %s does not exist\n", qPrintable(file),
                 qPrintable(target.absolutePath()));
    return false;
  }
  return true;
}

// --size WxH (false: exit 2).
bool parse_window_size(const QString& value, QSize* winSize) {
  const auto parts = value.split(QLatin1Char('x'));
  bool okW = false, okH = false;
  if (parts.size() == 2) *winSize = QSize(parts[0].toInt(&okW), parts[1].toInt(&okH));
  // At most 16384 a side: a 20000x20000 window takes 50 s and 3 GB, 32768 runs past minutes.
  constexpr int kMinSide = 200, kMaxSide = 16384;
  if (!okW || !okH || winSize->width() < kMinSide || winSize->height() < kMinSide || winSize->width() > kMaxSide ||
      winSize->height() > kMaxSide) {
    std::fprintf(stderr, "ulysses-studio: --size expects WxH, each from %d to %d, such as 1500x950; got '%s'\n",
                 kMinSide, kMaxSide, qPrintable(value));
    return false;
  }
  return true;
}

// A screenshot reads the user's settings but never changes them: it saved the file it drew
// as lastConfig, and the next start opened that one (an invalid config, a test's).
void keep_settings_untouched(const QString& dir) {
  const QString real = QSettings().fileName();
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, dir);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir);
  const QString copy = QSettings().fileName();
  QDir().mkpath(QFileInfo(copy).absolutePath());
  QFile::copy(real, copy);
}

// The path given: a run folder, a trace or a config (false: exit 2).
bool open_path(ulysses::ui::MainWindow& w, const QString& path, bool screenshot, const QCommandLineParser& cli,
               const QCommandLineOption& view) {
  QString err;
  const QFileInfo fi(path);  // string only; the file system is asked byte for byte
  const bool exists = ulysses::ui::path_exists(path), is_dir = ulysses::ui::path_is_dir(path),
             is_file = ulysses::ui::path_is_file(path);
  // Only a folder or a regular file: a FIFO would block the studio before its window shows.
  if (exists && !is_dir && !is_file) {
    std::fprintf(stderr, "ulysses-studio: %s is not a regular file or a folder (a FIFO or a device?)\n",
                 qPrintable(path));
    return false;
  }
  bool isTrace = is_file && fi.suffix().toLower() == QLatin1String("sqlite");
  // By content, as ulysses-trace reads it: an Nsight export or a PyTorch profiler trace under any name.
  // A folder: a run folder opens its run (its monitor needs no trace); a folder of foreign traces
  // opens as a trace, as before.
  const std::string native = ulysses::ui::native_path(fi.absoluteFilePath());
  isTrace = isTrace || (is_file ? ulysses::prof::is_trace_input(native) : ulysses::prof::is_foreign_trace(native));
  bool ok = screenshot && isTrace ? w.openTraceAndWait(fi.absoluteFilePath(), &err) : w.openPath(path, &err);
  // A path that cannot be opened (missing, unreadable, not a run or a trace) is bad input: 2,
  // as ulysses-trace says for the same files.
  if (!ok) {
    std::fprintf(stderr, "ulysses-studio: %s\n", qPrintable(err));
    if (!exists || screenshot) return false;
  }
  // A run folder asked for a trace view: its trace must load (rank0 missing, no rank file yet,
  // no trace/ folder at all or a file in its place would give a picture of an empty or error page
  // and exit 0).
  static const QStringList kTraceViews{QStringLiteral("trace"), QStringLiteral("timeline"), QStringLiteral("headmap"),
                                       QStringLiteral("memory"), QStringLiteral("report")};
  if (ok && screenshot && is_dir && cli.isSet(view) && kTraceViews.contains(cli.value(view).toLower())) {
    QString terr;
    if (!w.openTraceAndWait(fi.absoluteFilePath(), &terr)) {
      std::fprintf(stderr, "ulysses-studio: %s\n", qPrintable(terr));
      return false;  // not a picture of the error page in place of the view asked for
    }
  }
  return true;
}

// --replay SPEED: the run played back in the monitor (false: exit 2).
bool start_replay(ulysses::ui::MainWindow& w, const QString& value, const QStringList& pos) {
  bool okSpeed = false;
  const double speed = value.toDouble(&okSpeed);
  QString rerr;
  if (!okSpeed || !std::isfinite(speed) || speed < 0 || pos.isEmpty()) {
    std::fprintf(stderr,
                 "ulysses-studio: --replay needs a run folder and a speed >= 0 (1, 10; 0 = step by step), got '%s'\n",
                 qPrintable(value));
    return false;
  }
  if (!w.monitor()->replayRun(pos.front(), speed, &rerr)) {
    std::fprintf(stderr, "ulysses-studio: %s\n", qPrintable(rerr));
    return false;
  }
  w.setView(QStringLiteral("monitor"));
  return true;
}

// --screenshot: the window drawn once loaded, written to OUT, then the studio quits.
int take_screenshot(QApplication& app, ulysses::ui::MainWindow& w, const QString& out, bool sizeAsked, QSize winSize) {
  int rc = 0;
  QTimer::singleShot(300, &w, [&] {
    QApplication::processEvents();
    QString serr;
    const bool svg = QFileInfo(out).suffix().toLower() == QLatin1String("svg");
    const QPixmap pm = svg ? QPixmap() : w.grab();
    // Written beside and renamed over OUT only when whole (a full disk leaves the
    // old file as it was, not a truncated image under its name).
    // Under the exact name asked for (QSaveFile writes a name that is not UTF-8 as another one).
    auto save_image = [&] {
      QByteArray bytes;
      QBuffer buf(&bytes);
      QString werr;
      return !pm.isNull() && buf.open(QIODevice::WriteOnly) &&
             pm.save(&buf, QFileInfo(out).suffix().toLatin1().constData()) &&
             ulysses::ui::writeFileWhole(out, bytes, &werr);
    };
    if (svg ? !ulysses::ui::exportWidgetSvg(&w, out, &serr) : !save_image()) {
      std::fprintf(stderr, "ulysses-studio: cannot write the screenshot to %s\n", qPrintable(out));
      rc = 1;
    } else {
      std::printf("%s\n", ulysses::ui::native_path(QFileInfo(out).absoluteFilePath()).c_str());
      // The window cannot shrink below what its page needs (--size 200x200 gives 986x573, said in a note).
      if (sizeAsked && w.size() != winSize)
        std::fprintf(
            stderr, "ulysses-studio: note: the screenshot is %dx%d, not the %dx%d asked for%s\n", w.width(), w.height(),
            winSize.width(), winSize.height(),
            w.width() > winSize.width() || w.height() > winSize.height() ? " (this view cannot be drawn smaller)" : "");
    }
    w.setQuiet(true);
    w.close();
    app.quit();
  });
  app.exec();
  return rc;
}

int studio_main(int argc, char** argv) {
  if (!display_or_offscreen(argc, argv)) return 1;
  const QtMessageHandler qt_handler = say_display_failures();
  QApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
  QApplication app(argc, argv);
  qInstallMessageHandler(qt_handler);
  QApplication::setOrganizationName(QStringLiteral("Ulysses"));
  QApplication::setApplicationName(QStringLiteral("Ulysses Studio"));
  QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

  QCommandLineParser cli;
  const StudioOptions o = define_options(cli);
  // The arguments byte for byte: QApplication::arguments() decodes a file name that is not
  // UTF-8 with U+FFFD, and that name then "does not exist" (native_path.hpp).
  QStringList args;
  for (int i = 0; i < argc; ++i) args << ulysses::ui::qs_from_native(argv[i]);
  if (!cli.parse(args)) {
    std::fprintf(stderr, "ulysses-studio: %s\n", qPrintable(cli.errorText()));
    return 2;
  }
  if (cli.isSet(QStringLiteral("help"))) cli.showHelp(0);
  if (cli.isSet(QStringLiteral("version"))) cli.showVersion();
  const QStringList pos = cli.positionalArguments();
  if (pos.size() > 1) {
    std::fprintf(stderr, "ulysses-studio: expected at most one path, got %lld\n", static_cast<long long>(pos.size()));
    return 2;
  }
  const bool screenshot = cli.isSet(o.shot);
  if (screenshot && !(screenshot_format_ok(cli.value(o.shot)) && screenshot_file_ok(cli.value(o.shot)))) return 2;
  QSize winSize(1500, 950);
  if (cli.isSet(o.size) && !parse_window_size(cli.value(o.size), &winSize)) return 2;

  ulysses::ui::PhasePalette phasePalette = ulysses::ui::PhasePalette::Default;
  if (cli.isSet(o.palette) &&
      !ulysses::ui::phase_palette_from_name(cli.value(o.palette).toStdString(), &phasePalette)) {
    std::fprintf(stderr, "ulysses-studio: --palette expects default or cb (colour-blind safe), got '%s'\n",
                 qPrintable(cli.value(o.palette)));
    return 2;
  }

  // A screenshot never changes the user's settings (keep_settings_untouched).
  QTemporaryDir shotSettings;
  if (screenshot && shotSettings.isValid()) keep_settings_untouched(shotSettings.path());
  ulysses::ui::MainWindow w;
  w.setQuiet(screenshot);
  if (cli.isSet(o.palette)) w.setPhasePalette(phasePalette, /*remember=*/false);
  if (cli.isSet(o.runsDir)) {
    const QString rd = cli.value(o.runsDir);
    if (rd.isEmpty() || (ulysses::ui::path_exists(rd) && !ulysses::ui::path_is_dir(rd))) {
      std::fprintf(stderr, "ulysses-studio: --runs-dir '%s' is not a folder\n", qPrintable(cli.value(o.runsDir)));
      return 2;
    }
    w.setRunsDir(cli.value(o.runsDir), /*remember=*/false);  // for this session, like --palette
  }
  if (cli.isSet(o.dark)) w.setDarkTheme(true, /*remember=*/false);
  if (screenshot) w.resize(winSize);
  if (!pos.isEmpty() && !open_path(w, pos.front(), screenshot, cli, o.view)) return 2;
  if (cli.isSet(o.view) && !w.setView(cli.value(o.view))) {
    std::fprintf(stderr,
                 "ulysses-studio: unknown --view '%s' (launch, monitor, runs, explain, trace, timeline, headmap, "
                 "memory, report)\n",
                 qPrintable(cli.value(o.view)));
    return 2;
  }
  if (cli.isSet(o.stage) && !select_explainer_stage(w, cli.value(o.stage))) return 2;
  if (cli.isSet(o.replay) && !start_replay(w, cli.value(o.replay), pos)) return 2;
  w.show();
  if (!screenshot) return app.exec();

  return take_screenshot(app, w, cli.value(o.shot), cli.isSet(o.size), winSize);
}
}  // namespace

int main(int argc, char** argv) {
  // The trace caches and screenshots it writes fail under `ulimit -f` (skipped, or exit 1), no SIGXFSZ.
  ulysses::ignore_file_size_signal();
  ulysses::cli::reopen_closed_std_fds();  // a closed stdout must not become a cache or output file
  // Every exception ends as a message and exit 1, never as an abort (134).
  try {
    return studio_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ulysses-studio: error: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "ulysses-studio: error: unknown exception\n");
    return 1;
  }
}
