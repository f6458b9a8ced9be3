// Foreign traces readable (docs/TRACES.md), on the real trace page driven with QTest:
//  - ranges of no known phase take their name family's colour (a stable hash, not the order of
//    appearance), our own phases keep theirs;
//  - the gutter shows whole process names, middle-elided to its width, the whole name in the
//    tooltip;
//  - the importer's notes are in a visible panel, and leave with their trace;
//  - launch -> kernel flows (CUPTI correlation ids) for the selected range and window, on a
//    hand-built Nsight-like trace, a PyTorch profiler trace read by the real loader and the real
//    Nsight export in ../shared/realdata (checked against SQL of its own).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <QApplication>
#include <QFile>
#include <QHelpEvent>
#include <QListWidget>
#include <QMouseEvent>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QToolTip>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trace/launch_flows.hpp"
#include "trace/phase_style.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ulysses;
using namespace ulysses::ui;

namespace {

const char* kLongDevice =
    "cuda:0 NVIDIA H100 80GB HBM3 (python3 /home/someone/projects/long-sequence/"
    "train_with_a_very_long_script_name.py --config configs/llama-8b.json)";
const std::vector<std::string> kNames = {"aten::mm",
                                         "void gemm_kernel<128>(float*)",
                                         "void gemm_kernel<64>(float*)",
                                         "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                                         "cudaLaunchKernel",
                                         "attention",
                                         "void other_kernel(int)",
                                         "aten::copy_"};

struct Foreign {
  std::shared_ptr<prof::TraceModel> m;
  // Per rank: the host range aten::mm and the kernels k[0..3] (correlation 11..14).
  int64_t mm[2] = {-1, -1}, attention[2] = {-1, -1};
  int64_t k[2][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};
};

// Two ranks, each: a host thread "python3" (tid 100 + r) with aten::mm [1000, 5000) (aten::copy_
// [2900, 3600) nested in it) and an attention range [5200, 5800) (our phase); a stream with kernels gemm<128> [6000,
// 9000), gemm<64> [10000, 12000), ncclDevKernel_SendRecv [13000, 15000), other_kernel [16000, 17000), correlation
// ids 11..14; their cudaLaunchKernel calls at [2000, 2500), [3000, 3500), [4000, 4200) on the thread and [4500, 4600)
// on thread 999 (no lane). `reversed`: the same trace with its string table in the opposite order (other name ids).
Foreign foreignTrace(bool reversed = false) {
  Foreign f;
  f.m = std::make_shared<prof::TraceModel>();
  prof::TraceModel& m = *f.m;
  m.format = "nsys";
  m.from_nsys = true;
  m.notes = {"hand.sqlite: kernel table has no globalPid: kernels mapped to processes through CUDA runtime calls",
             "hand.sqlite: 3 rows with an end before their start left out"};
  m.strings = kNames;
  if (reversed) std::reverse(m.strings.begin(), m.strings.end());
  auto id = [&](int i) {
    return int32_t(std::find(m.strings.begin(), m.strings.end(), kNames[size_t(i)]) - m.strings.begin());
  };
  for (int32_t rank = 0; rank < 2; ++rank) {
    prof::RankInfo ri;
    ri.rank = rank;
    ri.pid = 4000 + rank;
    ri.device = rank == 0 ? kLongDevice : "cuda:1 (python3)";
    m.ranks.push_back(ri);
    auto add = [&](prof::Lane& lane, int64_t s, int64_t e, int name, prof::Phase ph, bool kernel, uint32_t corr,
                   uint8_t depth = 0) {
      prof::TraceRange r;
      r.start_ns = s;
      r.end_ns = e;
      r.rank = rank;
      r.lane = int32_t(m.lanes.size());
      r.name_id = id(name);
      r.phase = ph;
      r.is_kernel = kernel;
      r.depth = depth;
      if (corr) m.extra_for(r).correlation = corr;
      m.ranges.push_back(r);
      ++lane.count;
      return int64_t(m.ranges.size()) - 1;
    };
    prof::Lane host;
    host.rank = rank;
    host.kind = prof::LaneKind::HostThread;
    host.name = "python3";
    host.tid_or_stream = 100 + rank;
    host.first = int64_t(m.ranges.size());
    f.mm[rank] = add(host, 1000, 5000, 0, prof::Phase::Other, false, 0);
    add(host, 2900, 3600, 7, prof::Phase::Other, false, 0, 1);  // nested: the second launch is made in it
    f.attention[rank] = add(host, 5200, 5800, 5, prof::Phase::Attention, false, 0);
    m.lanes.push_back(host);
    prof::Lane gpu;
    gpu.rank = rank;
    gpu.kind = prof::LaneKind::CudaStream;
    gpu.name = "gpu " + std::to_string(rank) + " stream 7";
    gpu.tid_or_stream = 7;
    gpu.first = int64_t(m.ranges.size());
    f.k[rank][0] = add(gpu, 6000, 9000, 1, prof::Phase::Other, true, 11);
    f.k[rank][1] = add(gpu, 10000, 12000, 2, prof::Phase::Other, true, 12);
    f.k[rank][2] = add(gpu, 13000, 15000, 3, prof::Phase::Other, true, 13);
    f.k[rank][3] = add(gpu, 16000, 17000, 6, prof::Phase::Other, true, 14);
    m.lanes.push_back(gpu);
    const int64_t calls[4][3] = {{2000, 2500, 11}, {3000, 3500, 12}, {4000, 4200, 13}, {4500, 4600, 14}};
    for (const auto& c : calls) {
      prof::RuntimeCall rc;
      rc.rank = rank;
      rc.tid = c[2] == 14 ? 999 : 100 + rank;
      rc.start_ns = c[0];
      rc.end_ns = c[1];
      rc.correlation = c[2];
      rc.name_id = id(4);
      m.runtime.push_back(rc);
    }
  }
  m.t_min = 1000;
  m.t_max = 17000;
  return f;
}

class ForeignTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    f = foreignTrace();
    tv = std::make_unique<TraceView>();
    tv->resize(1400, 900);
    tv->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(tv.get()));
    tv->setModel(f.m);
    tv->setView(QStringLiteral("timeline"));
    QApplication::processEvents();
    tl = tv->timeline();
    ASSERT_NE(tl->index(), nullptr);
    tl->fitAll();
    tl->setYScroll(0);
  }
  const DrawItem* itemOf(int64_t range) {
    for (const auto& it : tl->drawList().items)
      if (it.range == range && it.count == 1) return &it;
    ADD_FAILURE() << "range " << range << " is not drawn as one item";
    return nullptr;
  }
  QPoint centreOf(int64_t range) {
    const DrawItem* it = itemOf(range);
    if (!it) return {};
    return {tl->gutterWidth() + int(it->x + it->w / 2), tl->rulerHeight() + int(it->y + it->h / 2)};
  }
  Foreign f;
  std::unique_ptr<TraceView> tv;
  TimelineWidget* tl = nullptr;
};

TEST_F(ForeignTrace, RangesTakeTheirNameFamilysColourOurPhasesKeepTheirs) {
  const QImage img = tl->grab().toImage();
  auto pixel = [&](int64_t range) -> uint32_t {
    const DrawItem* it = itemOf(range);
    if (!it) return 0;
    return img.pixel(tl->gutterWidth() + int(it->x) + 1, tl->rulerHeight() + int(it->y) + 1);
  };
  for (int r = 0; r < 2; ++r) {
    // gemm_kernel<128> and gemm_kernel<64>: one family, one colour, on screen.
    EXPECT_EQ(pixel(f.k[r][0]), name_family_argb(kNames[1])) << "rank " << r;
    EXPECT_EQ(pixel(f.k[r][1]), pixel(f.k[r][0])) << "rank " << r;
    EXPECT_EQ(pixel(f.k[r][2]), name_family_argb(kNames[3])) << "rank " << r;
    EXPECT_EQ(pixel(f.mm[r]), name_family_argb(kNames[0])) << "rank " << r;
    EXPECT_EQ(pixel(f.attention[r]), phase_argb(prof::Phase::Attention)) << "our own phase keeps its colour";
    EXPECT_NE(pixel(f.k[r][0]), kFoldedArgb);
  }
  // The same names in a trace whose string table runs the other way: the same colours.
  std::map<std::string, uint32_t> first;
  for (const auto& it : tl->drawList().items)
    if (it.count == 1) first[f.m->strings[size_t(it.name_id)]] = it.argb;
  const Foreign g = foreignTrace(true);
  ASSERT_NE(g.m->strings, f.m->strings);
  tv->setModel(g.m);
  tl->fitAll();
  int compared = 0;
  for (const auto& it : tl->drawList().items) {
    if (it.count != 1) continue;
    const std::string& name = g.m->strings[size_t(it.name_id)];
    ASSERT_TRUE(first.count(name)) << name;
    EXPECT_EQ(it.argb, first[name]) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 14);
}

TEST_F(ForeignTrace, GutterShowsWholeNamesMiddleElidedWithTheWholeNameInTheTooltip) {
  QFont bold = tl->font();
  bold.setBold(true);
  const QFontMetrics fm(bold);
  // A short process name is shown whole (not cut at a fixed 150 px to "rank 1 (cuda:1 (pyt.").
  EXPECT_TRUE(tl->gutterText(1).endsWith(QStringLiteral("rank 1 (cuda:1 (python3))")))
      << tl->gutterText(1).toStdString();
  EXPECT_GE(tl->gutterWidth(), fm.horizontalAdvance(QStringLiteral("\u25BE rank 1 (cuda:1 (python3))")) + 8);
  // A long one is elided in the middle: its start and its end stay, and it fits the gutter.
  const QString g0 = tl->gutterText(0);
  EXPECT_TRUE(g0.contains(QChar(0x2026))) << g0.toStdString();
  EXPECT_TRUE(g0.contains(QStringLiteral("rank 0 (cuda:0"))) << g0.toStdString();
  EXPECT_TRUE(g0.endsWith(QStringLiteral(".json))"))) << g0.toStdString();
  EXPECT_LE(fm.horizontalAdvance(g0), tl->gutterWidth() - 8);
  EXPECT_LE(tl->gutterWidth(), std::max(150, tl->width() / 3));
  // The tooltip over rank 0's header (a real tooltip event) says the whole name.
  const RankLayout* rl = tl->layout().find_rank(0);
  ASSERT_NE(rl, nullptr);
  const QPoint at(20, tl->rulerHeight() + int(rl->y + 5));
  QHelpEvent help(QEvent::ToolTip, at, tl->mapToGlobal(at));
  QApplication::sendEvent(tl, &help);
  EXPECT_TRUE(QToolTip::isVisible());
  EXPECT_TRUE(QToolTip::text().contains(QString::fromLatin1(kLongDevice))) << QToolTip::text().toStdString();
  EXPECT_TRUE(QToolTip::text().contains(QStringLiteral("pid 4000"))) << QToolTip::text().toStdString();
  QToolTip::hideText();
}

TEST_F(ForeignTrace, ImportNotesAreInAVisiblePanelAndLeaveWithTheirTrace) {
  auto* notes = tv->findChild<QListWidget*>(QStringLiteral("importNotes"));
  ASSERT_NE(notes, nullptr);
  auto* tabs = qobject_cast<QTabWidget*>(notes->parentWidget()->parentWidget());
  ASSERT_NE(tabs, nullptr);
  const int tab = tabs->indexOf(notes);
  ASSERT_GE(tab, 0);
  EXPECT_TRUE(tabs->isTabVisible(tab));
  EXPECT_EQ(tabs->currentIndex(), tab) << "the notes are shown on open";
  EXPECT_TRUE(notes->isVisible());
  EXPECT_EQ(tabs->tabText(tab), QStringLiteral("Import notes (2)"));
  ASSERT_EQ(notes->count(), 2);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(notes->item(i)->text().toStdString(), f.m->notes[size_t(i)]);
  // A trace without notes: nothing of the previous one stays.
  auto own = std::make_shared<prof::TraceModel>(*f.m);
  own->notes.clear();
  own->format = "ulysses";
  tv->setModel(own);
  EXPECT_EQ(notes->count(), 0);
  EXPECT_FALSE(tabs->isTabVisible(tab));
}

TEST_F(ForeignTrace, SelectedKernelRangeAndWindowDrawTheirLaunchFlows) {
  const auto& L = tl->layout();
  const float rh = L.opt.row_h;
  // A kernel clicked: one arrow from its cudaLaunchKernel (on its thread's lane) to it.
  QTest::mouseClick(tl, Qt::LeftButton, Qt::NoModifier, centreOf(f.k[0][0]));
  ASSERT_EQ(tl->selectedRange(), f.k[0][0]);
  auto flows = tl->launchFlows();
  ASSERT_EQ(flows.size(), 1u);
  const auto& vp = tl->viewport();
  EXPECT_EQ(flows[0].kernel, f.k[0][0]);
  EXPECT_EQ(flows[0].launch_ns, 2000);
  EXPECT_FLOAT_EQ(flows[0].x0, float(vp.x_of(2000)));
  EXPECT_FLOAT_EQ(flows[0].x1, float(vp.x_of(6000)));
  EXPECT_FLOAT_EQ(flows[0].y0, L.lanes[0].y + rh / 2);  // the host lane (one row)
  EXPECT_FLOAT_EQ(flows[0].y1, L.lanes[1].y + rh / 2);  // the kernel's stream
  // Drawn: the middle of the arrow is in the flows' colour.
  const QImage img = tl->grab().toImage();
  const QPoint mid(tl->gutterWidth() + int((flows[0].x0 + flows[0].x1) / 2),
                   tl->rulerHeight() + int((flows[0].y0 + flows[0].y1) / 2));
  int cyan = 0;
  for (int dx = -2; dx <= 2; ++dx)
    for (int dy = -2; dy <= 2; ++dy) {
      const QColor c = img.pixelColor(mid + QPoint(dx, dy));
      cyan += c.blue() > 150 && c.green() > 150 && c.red() < 140;
    }
  EXPECT_GT(cyan, 0) << "no flow drawn at the arrow's middle";

  // A launch made inside a nested range starts on that range's row (the innermost open then).
  QTest::mouseClick(tl, Qt::LeftButton, Qt::NoModifier, centreOf(f.k[0][1]));
  ASSERT_EQ(tl->selectedRange(), f.k[0][1]);
  flows = tl->launchFlows();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_FLOAT_EQ(flows[0].y0, L.lanes[0].y + rh + rh / 2);

  // The host range aten::mm: the kernels its thread launched inside it (not the one thread 999 launched).
  QTest::mouseClick(tl, Qt::LeftButton, Qt::NoModifier, centreOf(f.mm[1]));
  ASSERT_EQ(tl->selectedRange(), f.mm[1]);
  flows = tl->launchFlows();
  ASSERT_EQ(flows.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(flows[size_t(i)].kernel, f.k[1][i]);
    EXPECT_EQ(flows[size_t(i)].launch_ns, 2000 + 1000 * i);
  }

  // A dragged window over [4400, 4700): the launch on thread 999 (no lane: from its rank's
  // header), on both ranks.
  tl->clearSelection();
  const int g = tl->gutterWidth();
  const QPoint a(g + int(vp.x_of(4400)), tl->rulerHeight() + 5), b(g + int(vp.x_of(4700)), tl->rulerHeight() + 5);
  QTest::mousePress(tl, Qt::RightButton, Qt::NoModifier, a);
  QMouseEvent move(QEvent::MouseMove, QPointF(b), QPointF(tl->mapToGlobal(b)), Qt::NoButton, Qt::RightButton,
                   Qt::NoModifier);
  QApplication::sendEvent(tl, &move);
  QTest::mouseRelease(tl, Qt::RightButton, Qt::NoModifier, b);
  ASSERT_GT(tl->selectedWindow().second, tl->selectedWindow().first);
  flows = tl->launchFlows();
  ASSERT_EQ(flows.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(flows[size_t(r)].kernel, f.k[r][3]);
    EXPECT_FLOAT_EQ(flows[size_t(r)].y0, L.find_rank(r)->y + L.opt.rank_header_h / 2);
  }
  // Nothing selected: no arrows.
  tl->clearSelection();
  EXPECT_TRUE(tl->launchFlows().empty());
}

// A PyTorch profiler trace read by the real loader: the kernel's "correlation" arg meets the
// cuda_runtime event's.
TEST(ForeignTraceLoaded, KinetoCorrelationIsKeptAndDrawnAsAFlow) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString path = dir.filePath(QStringLiteral("trace.json"));
  QFile out(path);
  ASSERT_TRUE(out.open(QIODevice::WriteOnly));
  out.write(R"JSON({"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1000.0, "dur": 50.0,
  "args": {"External id": 3}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": 1010.0, "dur": 5.0,
  "args": {"correlation": 42, "External id": 3}},
 {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<128>(float*)", "pid": 0, "tid": 7, "ts": 1100.0,
  "dur": 20.0, "args": {"device": 0, "stream": 7, "correlation": 42, "External id": 3}},
 {"ph": "X", "cat": "kernel", "name": "void other_kernel(int)", "pid": 0, "tid": 7, "ts": 1200.0,
  "dur": 20.0, "args": {"device": 0, "stream": 7, "correlation": 43, "External id": 4}}
]})JSON");
  out.close();
  TraceView tv;
  tv.resize(1200, 800);
  QString err;
  ASSERT_TRUE(tv.openTraceAndWait(path, &err)) << err.toStdString();
  const auto m = tv.model();
  int64_t kernel = -1;
  for (size_t i = 0; i < m->ranges.size(); ++i)
    if (m->ranges[i].is_kernel && m->strings[size_t(m->ranges[i].name_id)] == "void gemm_kernel<128>(float*)")
      kernel = int64_t(i);
  ASSERT_GE(kernel, 0);
  tv.timeline()->selectRange(kernel);
  const auto flows = tv.timeline()->launchFlows();
  ASSERT_EQ(flows.size(), 1u);
  ASSERT_GE(flows[0].call, 0);
  EXPECT_EQ(m->strings[size_t(m->runtime[size_t(flows[0].call)].name_id)], "cudaLaunchKernel");
  EXPECT_EQ(flows[0].kernel_ns - flows[0].launch_ns, 90000);  // 1100 us - 1010 us
}

// The real Nsight export: every kernel's flow starts at the runtime call with its correlationId,
// as SQL of this test's own finds it (kernel start - launch start, per kernel).
TEST(ForeignTraceLoaded, RealNsightExportFlowsMeetTheCallWithTheSameCorrelationId) {
  const std::string path = ULYSSES_SOURCE_DIR "/../shared/realdata/h100_2gpu_1s.sqlite";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (shared/realdata, see its README)";
  QTemporaryDir cache;
  qputenv("XDG_CACHE_HOME", cache.path().toUtf8());
  std::map<std::pair<int64_t, int64_t>, int64_t> lead;  // (kernel start, end) -> start - launch start
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT k.start, k.end, k.start - r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                 "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                                 "AND r.globalTid / 16777216 % 16777216 = k.globalPid / 16777216 % 16777216",
                                 -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
      lead[{sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1)}] = sqlite3_column_int64(st, 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  ASSERT_GT(lead.size(), 1000u);
  TraceView tv;
  tv.resize(1400, 900);
  QString err;
  ASSERT_TRUE(tv.openTraceAndWait(QString::fromStdString(path), &err)) << err.toStdString();
  const auto m = tv.model();
  int checked = 0, kernels = 0;
  for (size_t i = 0; i < m->ranges.size(); ++i) {
    const prof::TraceRange r = m->ranges[i];
    if (!r.is_kernel || ++kernels % 97 != 0) continue;
    auto it = lead.find({r.start_ns, r.end_ns});
    if (it == lead.end()) continue;  // a memcpy / memset, or a kernel of no runtime call
    tv.timeline()->selectRange(int64_t(i));
    const auto flows = tv.timeline()->launchFlows();
    ASSERT_EQ(flows.size(), 1u) << "kernel " << i;
    EXPECT_EQ(flows[0].kernel_ns - flows[0].launch_ns, it->second) << "kernel " << i;
    ++checked;
  }
  EXPECT_GE(checked, 20);
  qunsetenv("XDG_CACHE_HOME");
}

}  // namespace
