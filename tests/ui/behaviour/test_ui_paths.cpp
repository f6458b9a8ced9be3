// File names that are not UTF-8 in the studio as in the CLI (docs/RELIABILITY.md): a runs folder
// "runs-\xfe" holding a run "run-\xff" is listed, opened (monitor, trace folder, rank file) and
// a screenshot / export asked for as "shot-\xfd.png" is written under exactly that name, through
// the studio's own code paths (MainWindow, RunsPage, TraceView, exportCurrentView, and the
// ulysses-studio program with --screenshot). Qt 6 alone loses such names: QFileInfo says they
// do not exist and QDir listings leave them out (Qt 6.4 and 6.8: U+FFFD in place of the bytes).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <QApplication>
#include <QDir>
#include <QDropEvent>
#include <QFileInfo>
#include <QImage>
#include <QMimeData>
#include <QTemporaryDir>
#include <QUrl>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "main_window.hpp"
#include "monitor_page.hpp"
#include "native_path.hpp"
#include "run_data.hpp"
#include "ui/run_fixture.hpp"
#include "runs_model.hpp"
#include "runs_page.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/trace_model.hpp"

extern char** environ;

using namespace ulysses::ui;
namespace fs = std::filesystem;

namespace {
std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().native());
  return out;
}
// The image at a byte path (QImage(QString) would ask for another name).
QImage image_at(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return QImage::fromData(QByteArray::fromStdString(bytes));
}
bool regular_nonempty(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}
}  // namespace

TEST(NativePath, EveryByteStringRoundTripsAndUtf8StaysUtf8) {
  const std::vector<std::string> names = {"run-\xff",
                                          "a\xc3\xa9z",
                                          "\xe2\x82",
                                          "\xf0\x9f\x98\x80x",
                                          "\xed\xa0\x80",
                                          "\xc0\xaf",
                                          std::string("x\x80\xbf\xfe", 4),
                                          "plain"};
  for (const auto& n : names) EXPECT_EQ(native_path(qs_from_native(n)), n);
  EXPECT_EQ(qs_from_native("a\xc3\xa9z"), QStringLiteral("a\u00e9z"));
  EXPECT_EQ(qs_from_native("\xf0\x9f\x98\x80"), QString::fromUtf8("\xf0\x9f\x98\x80"));
  EXPECT_EQ(qs_from_native("run-\xff").size(), 5);
  EXPECT_EQ(display_path(qs_from_native("run-\xff")), QStringLiteral("run-\ufffd"));
  // Every byte value alone and after a lead byte.
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b)), two = std::string("\xe2") + char(b);
    EXPECT_EQ(native_path(qs_from_native(one)), one) << b;
    EXPECT_EQ(native_path(qs_from_native(two)), two) << b;
  }
}

TEST(NonUtf8Paths, TheStudioListsOpensAndWritesUnderTheExactByteName) {
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const std::string top = native_path(tmp.path());
  const std::string runs = top + "/runs-\xfe", run = runs + "/run-\xff";
  ulysses::test::write_fixture_run(run, 2, std::vector<ulysses::test::FixtureStep>(3, {10.0, 2.0, 1 << 20}));
  ASSERT_TRUE(fs::is_directory(run + "/trace"));

  const QString qruns = qs_from_native(runs), qrun = qs_from_native(run);
  // Listed: the runs folder's one run, its path byte for byte.
  const auto scanned = scanRunsDir(qruns);
  ASSERT_EQ(scanned.size(), 1);
  EXPECT_EQ(native_path(scanned.front().dir), run);
  EXPECT_EQ(scanned.front().stepsDone, 3);
  EXPECT_TRUE(scanned.front().hasTrace);

  MainWindow w;
  w.setQuiet(true);
  w.setRunsDir(qruns, /*remember=*/false);
  QApplication::processEvents();
  RunsModel* rm = w.runsPage()->model();
  ASSERT_EQ(rm->rowCount(), 1) << "the runs page lists the run";
  EXPECT_EQ(native_path(rm->run(0).dir), run);

  // Opened: the run folder (monitor and trace), then its rank file alone.
  QString err;
  ASSERT_TRUE(w.openPath(qrun, &err)) << err.toStdString();
  EXPECT_EQ(w.monitor()->chartPoints(), 3) << "metrics.jsonl read";
  ASSERT_TRUE(w.traceView()->openTraceAndWait(qrun, &err)) << err.toStdString();
  ASSERT_NE(w.traceView()->model(), nullptr);
  EXPECT_EQ(w.traceView()->model()->rank_set().size(), 2u);
  ASSERT_TRUE(w.openPath(qs_from_native(run + "/trace/rank1.sqlite"), &err)) << err.toStdString();
  ASSERT_TRUE(w.traceView()->openTraceAndWait(qs_from_native(run + "/trace/rank1.sqlite"), &err)) << err.toStdString();
  EXPECT_EQ(w.traceView()->model()->rank_set().size(), 1u);
  const std::string png = top + "/shot-\xfd.png", svg = top + "/shot-\xfc.svg";
  w.resize(1200, 800);
  w.show();
  QApplication::processEvents();
  // Dropped from a file manager: a file:// URL with the bytes percent-encoded opens the run.
  w.setView(QStringLiteral("launch"));
  QMimeData mime;
  mime.setUrls({QUrl::fromEncoded(QByteArray("file://") + QByteArray::fromStdString(run).toPercentEncoding("/"))});
  QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &drop);
  EXPECT_EQ(w.currentPage(), QStringLiteral("monitor")) << "the dropped run opened";

  // Written: File > Export image, PNG and SVG, under the exact names.
  ASSERT_TRUE(w.exportCurrentView(qs_from_native(png), &err)) << err.toStdString();
  ASSERT_TRUE(w.exportCurrentView(qs_from_native(svg), &err)) << err.toStdString();
  EXPECT_TRUE(regular_nonempty(png));
  EXPECT_FALSE(image_at(png).isNull()) << "a PNG";
  EXPECT_TRUE(regular_nonempty(svg));
  EXPECT_EQ(names_in(top), (std::set<std::string>{"runs-\xfe", "shot-\xfd.png", "shot-\xfc.svg"}))
      << "nothing written under another name";
  EXPECT_EQ(names_in(runs), (std::set<std::string>{"run-\xff"}));
  // A name that does not exist is said to be missing, shown readable.
  EXPECT_FALSE(w.openPath(qs_from_native(top + "/gone-\xfa"), &err));
  EXPECT_TRUE(err.contains(QStringLiteral("gone-\ufffd"))) << err.toStdString();
  fs::remove_all(top);  // QTemporaryDir cannot remove what it cannot name
}

#ifdef ULYSSES_STUDIO_PATH
// The program: its arguments byte for byte (QApplication::arguments() decodes them with U+FFFD).
TEST(NonUtf8Paths, StudioScreenshotOfARunWhoseNameIsNotUtf8) {
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const std::string top = native_path(tmp.path());
  const std::string run = top + "/run-\xff", shot = top + "/win-\xfb.png";
  ulysses::test::write_fixture_run(run, 2, std::vector<ulysses::test::FixtureStep>(3, {10.0, 2.0, 1 << 20}));
  std::vector<std::string> args = {ULYSSES_STUDIO_PATH, run,  "--view", "timeline",
                                   "--screenshot",      shot, "--size", "900x600"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(regular_nonempty(shot));
  EXPECT_FALSE(image_at(shot).isNull());
  EXPECT_EQ(names_in(top), (std::set<std::string>{"run-\xff", "win-\xfb.png"}));
  fs::remove_all(top);
}
#endif
