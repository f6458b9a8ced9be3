// The studio as profiler users' hands expect it (docs/STUDIO.md), driven with QTest key, mouse and
// wheel events on the real widgets (offscreen):
//  - a wheel over any unfocused combo box, spin box or slider of the window changes nothing
//    (and a focused one still takes it);
//  - every binding of the shortcut sheet (shortcuts.hpp) does what the sheet says;
//  - opening trace B after selecting, filtering and comparing in trace A leaves no figure of A;
//  - the runs comparison lists every config section (`faults` too) with B - A and B / A;
//  - File ▸ Open offers traces (.sqlite, .json, .json.gz), configs and folders, a drop opens;
//  - opening an Nsight Systems export leaves its folder exactly as it was (studio and
//    `ulysses-trace summary`), its caches going to the XDG cache folder;
//  - presentation mode (F5) asks for no more than a 1280x720 screen.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <QAbstractButton>
#include <QAbstractItemView>
#include <QAbstractScrollArea>
#include <QAbstractSlider>
#include <QAbstractSpinBox>
#include <QAbstractAxis>
#include <QAction>
#include <QChart>
#include <QChartView>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QDirIterator>
#include <QFileDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QMimeData>
#include <QProcess>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBrowser>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <QWheelEvent>
#include <QtTest/qtestspontaneevent.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "compare_model.hpp"
#include "explain_controls.hpp"
#include "explain_view.hpp"
#include "status_line.hpp"
#include "trace/head_map.hpp"
#include "estimate_model.hpp"
#include "launcher_page.hpp"
#include "main_window.hpp"
#include "run_data.hpp"
#include "ui/run_fixture.hpp"
#include "testdata/synthetic_trace.hpp"
#include "trace/report_view.hpp"
#include "trace/shortcuts.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_models.hpp"
#include "trace/trace_view.hpp"

using namespace ulysses;
using namespace ulysses::ui;
using ulysses::test::FixtureStep;
using ulysses::test::write_fixture_run;
namespace fs = std::filesystem;

namespace {
// QApplication::setActiveWindow, deprecated from Qt 6.5 on (Debian 13's Qt 6.8 warns, and CI
// builds with -Werror), does what these tests need on every version: the window is active at once.
void make_active(QWidget* w) {
  QT_WARNING_PUSH
  QT_WARNING_DISABLE_DEPRECATED
  QApplication::setActiveWindow(w);
  QT_WARNING_POP
}

// A wheel event as the window system delivers it (spontaneous: QApplication gives focus by
// policy and passes an ignored wheel on to the parents).
bool realWheel(QWidget* w, QPoint pos, int dy, Qt::KeyboardModifiers mods = Qt::NoModifier) {
  QWheelEvent we(QPointF(pos), QPointF(w->mapToGlobal(pos)), QPoint(), QPoint(0, dy), Qt::NoButton, mods,
                 Qt::NoScrollPhase, false);
  QSpontaneKeyEvent::setSpontaneous(&we);
  return QApplication::instance()->notify(w, &we);
}
void sentWheel(QWidget* w, QPoint pos, int dy, Qt::KeyboardModifiers mods = Qt::NoModifier) {
  QWheelEvent we(QPointF(pos), QPointF(w->mapToGlobal(pos)), QPoint(), QPoint(0, dy), Qt::NoButton, mods,
                 Qt::NoScrollPhase, false);
  QApplication::sendEvent(w, &we);
}

QString valueOf(QWidget* w) {
  if (auto* c = qobject_cast<QComboBox*>(w)) return QString::number(c->currentIndex()) + c->currentText();
  if (auto* s = qobject_cast<QAbstractSpinBox*>(w)) return s->text();
  if (auto* s = qobject_cast<QAbstractSlider*>(w)) return QString::number(s->value());
  return {};
}

// A 4-rank synthetic trace (steps, collectives, kernels) whose names all start with `tag`.
std::shared_ptr<prof::TraceModel> taggedTrace(const std::string& tag, uint64_t seed, int32_t ranks = 4) {
  testdata::SyntheticOptions o;
  o.ranks = ranks;
  o.heads = 8;
  o.layers = 2;
  o.head_chunks = 2;
  o.steps = 3;
  o.seed = seed;
  auto m = testdata::make_synthetic_trace(o);
  for (auto& s : m->strings)
    if (!s.empty()) s = tag + s;
  return m;
}

class Hands : public ::testing::Test {
 protected:
  void SetUp() override {
    QSettings().clear();
    w = std::make_unique<MainWindow>();
    w->setQuiet(true);
    w->setRunsDir(tmp.filePath(QStringLiteral("runs")));
    w->resize(1400, 900);
    w->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(w.get()));
    make_active(w.get());
  }
  void TearDown() override { w.reset(); }
  QTemporaryDir tmp;
  std::unique_ptr<MainWindow> w;
};

}  // namespace

// ---- 1. forms change only what the user changes ----------------------------------------

TEST_F(Hands, AWheelOverAnyUnfocusedFieldChangesNothing) {
  w->setView(QStringLiteral("launch"));
  QApplication::processEvents();
  QList<QWidget*> fields;
  for (QWidget* x : w->findChildren<QWidget*>())
    if (qobject_cast<QComboBox*>(x) || qobject_cast<QAbstractSpinBox*>(x) || qobject_cast<QAbstractSlider*>(x))
      if (!qobject_cast<QScrollBar*>(x)) fields << x;
  ASSERT_GE(fields.size(), 8) << "the launcher form has combo and spin boxes";
  w->setFocus();
  int combos = 0;
  for (QWidget* f : fields) {
    combos += qobject_cast<QComboBox*>(f) != nullptr;
    ASSERT_FALSE(f->hasFocus());
    const QString before = valueOf(f);
    for (int dy : {120, -120, -120, 120 * 3}) sentWheel(f, f->rect().center(), dy);
    EXPECT_EQ(valueOf(f), before) << f->metaObject()->className() << " " << f->objectName().toStdString();
    EXPECT_FALSE(f->focusPolicy() & Qt::WheelFocus & ~Qt::StrongFocus) << "takes the focus by the wheel";
  }
  EXPECT_GE(combos, 3);

  // As the window system delivers it, over the launcher's visible fields: nothing changes, no
  // field takes the focus, and the wheel scrolls the form instead.
  auto* scroll = w->launcher()->findChild<QScrollArea*>();
  ASSERT_NE(scroll, nullptr);
  w->resize(1400, 500);  // the form is taller than its area
  QApplication::processEvents();
  int visible = 0;
  for (QWidget* f : fields) {
    if (!f->isVisible() || !scroll->isAncestorOf(f)) continue;
    scroll->ensureWidgetVisible(f, 0, 150);
    QApplication::processEvents();
    ++visible;
    const QString before = valueOf(f);
    const int sb = scroll->verticalScrollBar()->value();
    realWheel(f, f->rect().center(), -120);
    EXPECT_EQ(valueOf(f), before) << f->metaObject()->className();
    EXPECT_FALSE(f->hasFocus());
    if (sb < scroll->verticalScrollBar()->maximum()) {
      EXPECT_GT(scroll->verticalScrollBar()->value(), sb) << "the wheel scrolls the form instead";
    }
  }
  EXPECT_GE(visible, 3) << "fields " << fields.size() << ", scroll area " << scroll->viewport()->size().width() << "x"
                        << scroll->viewport()->size().height();

  // A focused field still takes the wheel (the guard is about focus, not a dead wheel).
  QComboBox* combo = nullptr;
  for (QWidget* f : fields)
    if (auto* c = qobject_cast<QComboBox*>(f); c && c->isVisible() && c->isEnabled() && c->count() > 2) combo = c;
  ASSERT_NE(combo, nullptr);
  combo->setCurrentIndex(1);
  combo->setFocus();
  ASSERT_TRUE(combo->hasFocus());
  sentWheel(combo, combo->rect().center(), -120);
  EXPECT_EQ(combo->currentIndex(), 2);
}

// ---- 2. every binding of the sheet does what the sheet says -----------------------------

TEST_F(Hands, EveryBindingOfTheShortcutSheetDoesWhatItSays) {
  TraceView* tv = w->traceView();
  tv->setModel(taggedTrace("", 7));
  w->setView(QStringLiteral("timeline"));
  QApplication::processEvents();
  TimelineWidget* tl = tv->timeline();
  ASSERT_NE(tl->index(), nullptr);
  ASSERT_TRUE(tl->isVisible());
  const int g = tl->gutterWidth();
  const QPoint pointer(g + 250, tl->rulerHeight() + 40);
  auto focusTimeline = [&] {
    tl->setFocus();
    QApplication::processEvents();
    QTest::mouseMove(tl, pointer + QPoint(7, 3));  // QTest sends no move to where the pointer already is
    QTest::mouseMove(tl, pointer);                 // the pointer over the time area (W/S/+/- zoom here)
  };
  auto startView = [&] {  // zoomed in around the middle so that pans and zooms have room
    tl->fitAll();
    TimelineViewport v = tl->viewport();
    v.zoom_at(v.width_px / 2.0, 8);
    tl->setViewport(v);
  };
  auto press = [&](const QKeySequence& k) {
    QWidget* target = QApplication::focusWidget() ? QApplication::focusWidget() : tl;
    QTest::keyClick(target, Qt::Key(k[0].key()), k[0].keyboardModifiers());
    QApplication::processEvents();
  };

  using Check = std::function<void(const QKeySequence&)>;
  std::map<Command, Check> checks;
  auto zoomCheck = [&](double factor) {
    return [&, factor](const QKeySequence& k) {
      startView();
      focusTimeline();
      const auto before = tl->viewport();
      const int64_t under = before.t_of(pointer.x() - g);
      press(k);
      EXPECT_NEAR(tl->viewport().ns_per_px, before.ns_per_px / factor, before.ns_per_px * 1e-6)
          << k.toString().toStdString();
      EXPECT_NEAR(double(tl->viewport().t_of(pointer.x() - g)), double(under), 2 * before.ns_per_px)
          << "zooms at the pointer: " << k.toString().toStdString();
    };
  };
  checks[Command::ZoomIn] = zoomCheck(1.5);
  checks[Command::ZoomOut] = zoomCheck(1 / 1.5);
  auto panCheck = [&](int sign) {
    return [&, sign](const QKeySequence& k) {
      startView();
      focusTimeline();
      const auto before = tl->viewport();
      press(k);
      EXPECT_DOUBLE_EQ(tl->viewport().ns_per_px, before.ns_per_px);
      EXPECT_NEAR(double(tl->viewport().t0_ns - before.t0_ns), sign * before.width_px / 8.0 * before.ns_per_px,
                  before.ns_per_px + 1)
          << k.toString().toStdString();
    };
  };
  checks[Command::PanLeft] = panCheck(-1);
  checks[Command::PanRight] = panCheck(+1);
  checks[Command::FitAll] = [&](const QKeySequence& k) {
    tl->fitAll();
    const auto all = tl->viewport();
    startView();
    focusTimeline();
    press(k);
    EXPECT_EQ(tl->viewport(), all);
  };
  checks[Command::FitSelection] = [&](const QKeySequence& k) {
    startView();
    focusTimeline();
    tl->clearSelection();
    const auto& m = tl->index()->model();
    int64_t r = -1;
    for (size_t i = 0; i < m.ranges.size() && r < 0; ++i)
      if (m.ranges[i].duration() > 0) r = int64_t(i);
    tl->selectRange(r);
    press(k);
    TimelineViewport want = tl->viewport();
    want.fit(m.ranges[size_t(r)].start_ns, m.ranges[size_t(r)].end_ns, 0.25);
    EXPECT_NEAR(double(tl->viewport().t0_ns), double(want.t0_ns), want.ns_per_px + 1);
    EXPECT_NEAR(tl->viewport().ns_per_px, want.ns_per_px, want.ns_per_px * 1e-3);
    tl->clearSelection();
  };
  checks[Command::NextStep] = [&](const QKeySequence& k) {
    focusTimeline();
    tl->fitStep(0);
    press(k);
    EXPECT_EQ(tl->currentStep(), 1);
  };
  checks[Command::PrevStep] = [&](const QKeySequence& k) {
    focusTimeline();
    tl->fitStep(2);
    press(k);
    EXPECT_EQ(tl->currentStep(), 1);
  };
  // ] / [: the next / previous instance of the selected collective on its rank, by brute force
  // (same name, process group, phase, direction, layer and heads; nearest start that way).
  auto instanceCheck = [&](bool forward) {
    return [&, forward](const QKeySequence& k) {
      const auto& m = tl->index()->model();
      int64_t sel = -1;
      for (size_t i = 0; i < m.ranges.size() && sel < 0; ++i)
        if (!m.ranges[i].is_kernel && m.extra(m.ranges[i]).pg >= 0 && m.ranges[i].rank == 1 && m.ranges[i].step == 1 &&
            m.lanes[size_t(m.ranges[i].lane)].kind != prof::LaneKind::HeadRange)
          sel = int64_t(i);
      ASSERT_GE(sel, 0);
      const auto& s = m.ranges[size_t(sel)];
      int64_t want = -1;
      for (size_t i = 0; i < m.ranges.size(); ++i) {
        const auto& r = m.ranges[i];
        if (int64_t(i) == sel || r.is_kernel || r.rank != s.rank || r.name_id != s.name_id || r.phase != s.phase ||
            r.dir != s.dir || r.layer != s.layer || r.head_begin != s.head_begin || m.extra(r).pg != m.extra(s).pg ||
            m.extra(r).seq < 0 || m.lanes[size_t(r.lane)].kind == prof::LaneKind::HeadRange)
          continue;
        if (forward ? r.start_ns <= s.start_ns : r.start_ns >= s.start_ns) continue;
        if (want < 0 ||
            (forward ? r.start_ns < m.ranges[size_t(want)].start_ns : r.start_ns > m.ranges[size_t(want)].start_ns))
          want = int64_t(i);
      }
      ASSERT_GE(want, 0) << "the synthetic trace repeats its collectives every step";
      focusTimeline();
      tl->selectRange(sel);
      press(k);
      EXPECT_EQ(tl->selectedRange(), want);
      const auto& w = m.ranges[size_t(want)];
      EXPECT_LE(tl->viewport().t0_ns, w.start_ns);
      EXPECT_GE(tl->viewport().t1_ns(), w.end_ns);
      tl->clearSelection();
    };
  };
  checks[Command::NextCollective] = instanceCheck(true);
  checks[Command::PrevCollective] = instanceCheck(false);
  // The explainer's keys, sent to its picture (they step the stages whatever holds the focus:
  // ClickerStepsTheExplainer below tries the slider and the buttons too).
  auto explainCheck = [&](Command c) {
    return [&, c](const QKeySequence& k) {
      w->setView(QStringLiteral("explain"));
      QApplication::processEvents();
      auto* ex = w->findChild<ExplainView*>();
      ASSERT_NE(ex, nullptr);
      ASSERT_GE(ex->stageCount(), 4);
      ex->setStage(1);
      QTest::keyClick(ex->canvas(), Qt::Key(k[0].key()), k[0].keyboardModifiers());
      const int want = c == Command::ExplainNext    ? 2
                       : c == Command::ExplainPrev  ? 0
                       : c == Command::ExplainFirst ? 0
                                                    : ex->stageCount() - 1;
      EXPECT_EQ(ex->stage(), want) << k.toString().toStdString();
      w->setView(QStringLiteral("timeline"));
      QApplication::processEvents();
    };
  };
  for (Command c : {Command::ExplainNext, Command::ExplainPrev, Command::ExplainFirst, Command::ExplainLast})
    checks[c] = explainCheck(c);
  checks[Command::ExplainNotes] = [&](const QKeySequence& k) {
    w->setView(QStringLiteral("explain"));
    QApplication::processEvents();
    auto* ex = w->findChild<ExplainView*>();
    ASSERT_NE(ex, nullptr);
    auto* notes = ex->findChild<QScrollArea*>(QStringLiteral("explainCaption"));
    ASSERT_NE(notes, nullptr);
    const bool before = ex->notesShown();
    EXPECT_EQ(notes->isVisibleTo(ex), before);
    QTest::keyClick(ex->canvas(), Qt::Key(k[0].key()), k[0].keyboardModifiers());
    EXPECT_EQ(ex->notesShown(), !before) << k.toString().toStdString();
    EXPECT_EQ(notes->isVisibleTo(ex), !before);
    QTest::keyClick(ex->canvas(), Qt::Key(k[0].key()), k[0].keyboardModifiers());
    EXPECT_EQ(ex->notesShown(), before);
    w->setView(QStringLiteral("timeline"));
    QApplication::processEvents();
  };
  checks[Command::FocusFilter] = [&](const QKeySequence& k) {
    startView();
    focusTimeline();
    const auto before = tl->viewport();
    press(k);
    EXPECT_TRUE(tv->filterEdit()->hasFocus()) << "Ctrl+F focuses the filter";
    EXPECT_EQ(tl->viewport(), before) << "Ctrl+F is not F (fit)";
  };
  checks[Command::ClearSelection] = [&](const QKeySequence& k) {
    focusTimeline();
    tv->filterEdit()->setText(QStringLiteral("attention"));
    tl->selectRange(0);
    press(k);
    EXPECT_EQ(tl->selectedRange(), -1) << "the first Esc clears the selection";
    EXPECT_EQ(tv->filterEdit()->text(), QStringLiteral("attention")) << "...and keeps the filter";
    press(k);
    EXPECT_TRUE(tv->filterEdit()->text().isEmpty()) << "the second Esc clears the filter";
  };
  checks[Command::ShowShortcuts] = [&](const QKeySequence& k) {
    focusTimeline();
    press(k);
    auto* sheet = w->findChild<QWidget*>(QStringLiteral("shortcutsSheet"));
    ASSERT_NE(sheet, nullptr);
    EXPECT_TRUE(sheet->isVisible());
    const QString text = sheet->findChild<QTextBrowser*>()->toPlainText();
    for (const auto& b : bindings()) {
      EXPECT_TRUE(text.contains(keys_text(b))) << keys_text(b).toStdString();
      EXPECT_TRUE(text.contains(QString::fromUtf8(b.what))) << b.what;
    }
    sheet->close();
    make_active(w.get());
  };
  auto dialogCheck = [&](QFileDialog::FileMode mode) {
    return [&, mode](const QKeySequence& k) {
      focusTimeline();
      bool seen = false;
      QFileDialog::FileMode got = QFileDialog::AnyFile;
      QStringList filters;
      QTimer::singleShot(200, [&] {
        for (QWidget* x : QApplication::topLevelWidgets())
          if (auto* d = qobject_cast<QFileDialog*>(x); d && d->isVisible()) {
            seen = true;
            got = d->fileMode();
            filters = d->nameFilters();
            d->reject();
          }
      });
      press(k);
      QTest::qWait(300);
      ASSERT_TRUE(seen) << k.toString().toStdString();
      EXPECT_EQ(got, mode);
      if (mode == QFileDialog::ExistingFile) {
        const QString all = filters.join(QLatin1Char(' '));
        for (const char* pat : {"*.sqlite", "*.json", "*.json.gz"})
          EXPECT_TRUE(all.contains(QLatin1String(pat))) << pat;
      }
      make_active(w.get());
      w->setView(QStringLiteral("timeline"));
    };
  };
  checks[Command::OpenFile] = dialogCheck(QFileDialog::ExistingFile);
  checks[Command::OpenFolder] = dialogCheck(QFileDialog::Directory);
  checks[Command::PresentationMode] = [&](const QKeySequence& k) {
    focusTimeline();
    auto* a = w->findChild<QAction*>(QStringLiteral("presentationMode"));
    ASSERT_NE(a, nullptr);
    const double pt = QApplication::font().pointSizeF();
    press(k);
    EXPECT_TRUE(a->isChecked());
    EXPECT_GT(QApplication::font().pointSizeF(), pt);
    press(k);
    EXPECT_FALSE(a->isChecked());
    EXPECT_DOUBLE_EQ(QApplication::font().pointSizeF(), pt);
  };
  // Mouse: the wheel scrolls lanes, Ctrl zooms at the pointer, Shift pans; drags and clicks.
  checks[Command::WheelScroll] = [&](const QKeySequence&) {
    startView();
    tl->setYScroll(0);
    const auto before = tl->viewport();
    sentWheel(tl, pointer, -120);
    EXPECT_GT(tl->yScroll(), 0.f);
    EXPECT_EQ(tl->viewport(), before);
  };
  checks[Command::WheelZoom] = [&](const QKeySequence&) {
    startView();
    const auto before = tl->viewport();
    const int64_t under = before.t_of(pointer.x() - g);
    sentWheel(tl, pointer, 120, Qt::ControlModifier);
    EXPECT_NEAR(tl->viewport().ns_per_px, before.ns_per_px / 1.25, before.ns_per_px * 1e-6);
    EXPECT_NEAR(double(tl->viewport().t_of(pointer.x() - g)), double(under), 2 * before.ns_per_px);
  };
  checks[Command::WheelPan] = [&](const QKeySequence&) {
    startView();
    const auto before = tl->viewport();
    const float y = tl->yScroll();
    sentWheel(tl, pointer, -120, Qt::ShiftModifier);
    EXPECT_DOUBLE_EQ(tl->viewport().ns_per_px, before.ns_per_px);
    EXPECT_GT(tl->viewport().t0_ns, before.t0_ns);
    EXPECT_EQ(tl->yScroll(), y);
  };
  checks[Command::DragPan] = [&](const QKeySequence&) {
    startView();
    const auto before = tl->viewport();
    QTest::mousePress(tl, Qt::LeftButton, Qt::NoModifier, pointer);
    QMouseEvent move(QEvent::MouseMove, QPointF(pointer + QPoint(-100, 0)),
                     QPointF(tl->mapToGlobal(pointer + QPoint(-100, 0))), Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(tl, &move);
    QTest::mouseRelease(tl, Qt::LeftButton, Qt::NoModifier, pointer + QPoint(-100, 0));
    EXPECT_NEAR(double(tl->viewport().t0_ns - before.t0_ns), 100 * before.ns_per_px, before.ns_per_px + 1);
  };
  checks[Command::DragSelect] = [&](const QKeySequence&) {
    for (auto [button, mods] : {std::pair{Qt::RightButton, Qt::KeyboardModifiers(Qt::NoModifier)},
                                std::pair{Qt::LeftButton, Qt::KeyboardModifiers(Qt::ShiftModifier)}}) {
      startView();
      tl->clearSelection();
      const auto before = tl->viewport();
      QTest::mousePress(tl, button, mods, pointer);
      QMouseEvent move(QEvent::MouseMove, QPointF(pointer + QPoint(200, 0)),
                       QPointF(tl->mapToGlobal(pointer + QPoint(200, 0))), Qt::NoButton, button, mods);
      QApplication::sendEvent(tl, &move);
      QTest::mouseRelease(tl, button, mods, pointer + QPoint(200, 0));
      EXPECT_EQ(tl->viewport(), before) << "selecting does not zoom";
      EXPECT_EQ(tl->selectedWindow().first, before.t_of(pointer.x() - g));
      EXPECT_EQ(tl->selectedWindow().second, before.t_of(pointer.x() + 200 - g));
    }
    tl->clearSelection();
  };
  checks[Command::ClickSelect] = [&](const QKeySequence&) {
    startView();
    tl->setYScroll(0);
    tl->clearSelection();
    const auto& dl = tl->drawList();
    const DrawItem* item = nullptr;
    for (const auto& it : dl.items)
      if (it.count == 1 && it.w > 6 && it.y > 0 && it.range >= 0) {
        item = &it;
        break;
      }
    ASSERT_NE(item, nullptr);
    const int64_t want = item->range;
    QTest::mouseClick(tl, Qt::LeftButton, Qt::NoModifier,
                      QPoint(g + int(item->x + item->w / 2), tl->rulerHeight() + int(item->y + item->h / 2)));
    EXPECT_EQ(tl->selectedRange(), want);
    tl->clearSelection();
  };

  checks[Command::ClickArrow] = [&](const QKeySequence&) {
    tl->clearSelection();
    tl->setAllFlowsInView(true);
    startView();
    tl->setYScroll(0);
    const auto groups = flows_in_view(*tl->index(), tl->drawList());
    // A point on one arrow that no other arrow passes within 6 px of.
    auto dist = [](QPointF p, const FlowPoint& a, const FlowPoint& b) {
      const QPointF d(b.x - a.x, b.y - a.y);
      const double len2 = d.x() * d.x() + d.y() * d.y();
      const double t = len2 > 0 ? std::clamp(((p.x() - a.x) * d.x() + (p.y() - a.y) * d.y()) / len2, 0.0, 1.0) : 0.0;
      return std::hypot(a.x + t * d.x() - p.x(), a.y + t * d.y() - p.y());
    };
    const FlowPoint* from = nullptr;
    QPointF at;
    for (size_t gi = 0; gi < groups.size() && !from; ++gi) {
      const auto& grp = groups[gi];
      for (size_t i = 0; i + 1 < grp.size() && !from; ++i)
        for (double t : {0.2, 0.35, 0.5, 0.65, 0.8}) {
          const QPointF p(grp[i].x + (grp.back().x - grp[i].x) * t, grp[i].y + (grp.back().y - grp[i].y) * t);
          if (std::hypot(grp.back().x - grp[i].x, grp.back().y - grp[i].y) < 20) break;
          bool alone = true;
          for (size_t gj = 0; gj < groups.size() && alone; ++gj)
            for (size_t j = 0; j + 1 < groups[gj].size() && alone; ++j)
              if (!(gj == gi && j == i) && dist(p, groups[gj][j], groups[gj].back()) < 6) alone = false;
          if (alone && p.x() > 0 && p.y() > 0) {
            from = &grp[i];
            at = p;
            break;
          }
        }
    }
    ASSERT_NE(from, nullptr) << "no arrow clear of the others";
    const FlowPoint& a = *from;
    QTest::mouseClick(tl, Qt::LeftButton, Qt::NoModifier,
                      QPoint(g + int(std::lround(at.x())), tl->rulerHeight() + int(std::lround(at.y()))));
    const auto& m = tl->index()->model();
    ASSERT_GE(tl->selectedRange(), 0);
    const auto& want = m.extra(m.ranges[size_t(a.range)]);
    const auto& got = m.extra(m.ranges[size_t(tl->selectedRange())]);
    EXPECT_EQ(got.pg, want.pg);
    EXPECT_EQ(got.seq, want.seq) << "the arrow's collective instance is selected";
    EXPECT_EQ(tl->selectedRange(), a.range) << "the rank whose arrow it is";
    EXPECT_LE(tl->viewport().t0_ns, m.ranges[size_t(a.range)].start_ns);
    tl->setAllFlowsInView(false);
    tl->clearSelection();
  };

  int keys = 0;
  for (const Binding& b : bindings()) {
    SCOPED_TRACE(std::string("binding: ") + b.keys + " — " + b.what);
    ASSERT_TRUE(checks.count(b.cmd)) << "a binding without a check: add one here";
    if (b.mouse) {
      checks[b.cmd]({});
      continue;
    }
    const auto seqs = key_sequences(b.cmd);
    ASSERT_FALSE(seqs.isEmpty());
    for (const QKeySequence& k : seqs) {
      checks[b.cmd](k);
      ++keys;
    }
  }
  EXPECT_GE(keys, 18);
}

// A presenter's clicker sends PgDn / PgUp (some Right / Left, Space, Home, End): the explainer
// steps whatever in it holds the focus, the picture, the stage slider (whose own arrow keys
// would move it too) or a button; and the timeline takes W/A/S/D after a click on a tool button.
TEST_F(Hands, ClickerStepsTheExplainerAndWasdWorksAfterAToolbarClick) {
  w->setView(QStringLiteral("explain"));
  QApplication::processEvents();
  auto* ex = w->findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  const int n = ex->stageCount();
  ASSERT_GE(n, 4);
  EXPECT_TRUE(ex->isAncestorOf(QApplication::focusWidget()) || QApplication::focusWidget() == nullptr)
      << "showing the page gives the picture the focus";
  auto* slider = ex->findChild<QAbstractSlider*>(QStringLiteral("explainStage"));
  ASSERT_NE(slider, nullptr);
  QList<QWidget*> holders{ex->canvas(), slider};
  for (auto* b : ex->findChildren<QPushButton*>())
    if (b->isVisible()) holders << b;
  ASSERT_GE(holders.size(), 3);
  for (QWidget* h : holders) {
    SCOPED_TRACE(h->metaObject()->className());
    h->setFocus();
    ex->setStage(0);
    QTest::keyClick(h, Qt::Key_PageDown);
    EXPECT_EQ(ex->stage(), 1);
    QTest::keyClick(h, Qt::Key_Right);
    EXPECT_EQ(ex->stage(), 2) << "one stage per press, not the slider's step as well";
    QTest::keyClick(h, Qt::Key_Space);
    EXPECT_EQ(ex->stage(), 3);
    QTest::keyClick(h, Qt::Key_PageUp);
    EXPECT_EQ(ex->stage(), 2);
    QTest::keyClick(h, Qt::Key_Left);
    EXPECT_EQ(ex->stage(), 1);
    QTest::keyClick(h, Qt::Key_End);
    EXPECT_EQ(ex->stage(), n - 1);
    QTest::keyClick(h, Qt::Key_PageDown);
    EXPECT_EQ(ex->stage(), n - 1) << "the last stage stays";
    QTest::keyClick(h, Qt::Key_Home);
    EXPECT_EQ(ex->stage(), 0);
  }

  TraceView* tv = w->traceView();
  tv->setModel(taggedTrace("", 7));
  w->setView(QStringLiteral("timeline"));
  QApplication::processEvents();
  TimelineWidget* tl = tv->timeline();
  auto* bar = tv->findChild<QToolBar*>(QStringLiteral("traceTools"));
  ASSERT_NE(bar, nullptr);
  QToolButton* fit = nullptr;
  for (auto* b : bar->findChildren<QToolButton*>())
    if (b->text() == QStringLiteral("Fit all")) fit = b;
  ASSERT_NE(fit, nullptr);
  for (Qt::Key key : {Qt::Key_W, Qt::Key_S, Qt::Key_A, Qt::Key_D}) {
    tv->filterEdit()->setFocus();  // the focus somewhere else first, as after typing a filter
    QTest::mouseClick(fit, Qt::LeftButton);
    QApplication::processEvents();
    TimelineViewport v = tl->viewport();
    v.zoom_at(v.width_px / 2.0, 8);  // room to pan
    tl->setViewport(v);
    const TimelineViewport before = tl->viewport();
    QWidget* target = QApplication::focusWidget() ? QApplication::focusWidget() : fit;
    QTest::keyClick(target, key);
    QApplication::processEvents();
    const TimelineViewport after = tl->viewport();
    if (key == Qt::Key_W) {
      EXPECT_LT(after.ns_per_px, before.ns_per_px) << "W zooms in";
    }
    if (key == Qt::Key_S) {
      EXPECT_GT(after.ns_per_px, before.ns_per_px) << "S zooms out";
    }
    if (key == Qt::Key_A) {
      EXPECT_LT(after.t0_ns, before.t0_ns) << "A pans left";
    }
    if (key == Qt::Key_D) {
      EXPECT_GT(after.t0_ns, before.t0_ns) << "D pans right";
    }
    // Sent to the tool button itself (a button that kept the focus): the trace page passes it on.
    const TimelineViewport again = tl->viewport();
    QTest::keyClick(fit, key);
    EXPECT_NE(tl->viewport(), again) << "key " << int(key) << " on the button";
  }
}

// Slides (docs/STUDIO.md): the notes beside the picture hide and show with N and the Notes
// button, from the picture, a button or the stage slider, and the state is remembered (a new
// window starts with it); N typed into the explainer's settings fields is no toggle.
TEST_F(Hands, ExplainerNotesHideAndShowByKeyAndButtonAndAreRemembered) {
  w->setView(QStringLiteral("explain"));
  QApplication::processEvents();
  auto* ex = w->findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  auto* notes = ex->findChild<QScrollArea*>(QStringLiteral("explainCaption"));
  auto* button = ex->findChild<QPushButton*>(QStringLiteral("explainNotesButton"));
  auto* slider = ex->findChild<QAbstractSlider*>(QStringLiteral("explainStage"));
  auto* sp = ex->findChild<QSpinBox*>(QStringLiteral("explainSp"));
  ASSERT_TRUE(notes && button && slider && sp);
  EXPECT_TRUE(ex->notesShown()) << "shown the first time";
  EXPECT_TRUE(notes->isVisible());
  EXPECT_TRUE(button->isChecked());
  const int canvasWithNotes = ex->canvas()->width();
  for (QWidget* h :
       {static_cast<QWidget*>(ex->canvas()), static_cast<QWidget*>(slider), static_cast<QWidget*>(button)}) {
    SCOPED_TRACE(h->metaObject()->className());
    h->setFocus();
    const int stage = ex->stage();
    QTest::keyClick(h, Qt::Key_N);
    QApplication::processEvents();
    EXPECT_FALSE(ex->notesShown());
    EXPECT_FALSE(notes->isVisible());
    EXPECT_FALSE(button->isChecked());
    EXPECT_GT(ex->canvas()->width(), canvasWithNotes) << "the picture takes the room";
    QTest::keyClick(h, Qt::Key_N);
    QApplication::processEvents();
    EXPECT_TRUE(ex->notesShown());
    EXPECT_TRUE(notes->isVisible());
    EXPECT_EQ(ex->stage(), stage) << "N steps nothing";
  }
  QTest::mouseClick(button, Qt::LeftButton);
  EXPECT_FALSE(ex->notesShown());
  EXPECT_FALSE(notes->isVisible());
  sp->setFocus();
  QTest::keyClick(sp, Qt::Key_N);
  EXPECT_FALSE(ex->notesShown()) << "typing in a settings field";
  {  // the next session starts as this one left it
    MainWindow again;
    auto* ex2 = again.findChild<ExplainView*>();
    ASSERT_NE(ex2, nullptr);
    EXPECT_FALSE(ex2->notesShown());
  }
  QTest::mouseClick(button, Qt::LeftButton);
  EXPECT_TRUE(ex->notesShown());
  MainWindow third;
  EXPECT_TRUE(third.findChild<ExplainView*>()->notesShown());
}

// The explainer's own controls: keys typed into them redraw the explainer (not the launcher's
// form); a refused combination says why; PgDn in a field still steps (a clicker).
TEST_F(Hands, ExplainerOwnControlsSetWhatItDrawsAndLeaveTheLauncherAlone) {
  w->setView(QStringLiteral("explain"));
  QApplication::processEvents();
  auto* ex = w->findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  auto* sp = ex->findChild<QSpinBox*>(QStringLiteral("explainSp"));
  auto* heads = ex->findChild<QSpinBox*>(QStringLiteral("explainHeads"));
  auto* kv = ex->findChild<QSpinBox*>(QStringLiteral("explainKvHeads"));
  auto* ring = ex->findChild<QSpinBox*>(QStringLiteral("explainRing"));
  auto* zero = ex->findChild<QComboBox*>(QStringLiteral("explainZero"));
  ASSERT_TRUE(sp && heads && kv && ring && zero);
  const nlohmann::json launcherBefore = w->launcher()->configJson();
  const int64_t sp0 = ex->explanation().P;
  EXPECT_EQ(sp->value(), sp0) << "the controls start from the launcher's config";
  EXPECT_EQ(heads->value(), ex->explanation().H);
  EXPECT_EQ(kv->value(), ex->explanation().Hkv);
  auto type = [](QSpinBox* box, const QString& digits) {
    box->setFocus();
    box->selectAll();
    QTest::keyClicks(box, digits);
    QTest::keyClick(box, Qt::Key_Enter);
    QApplication::processEvents();
  };
  type(heads, QStringLiteral("8"));
  type(kv, QStringLiteral("2"));
  type(sp, QStringLiteral("4"));
  ASSERT_TRUE(ex->explanation().ok) << (ex->explanation().problems.empty() ? "" : ex->explanation().problems[0]);
  EXPECT_EQ(ex->explanation().P, 4);
  EXPECT_EQ(ex->explanation().H, 8);
  EXPECT_EQ(ex->explanation().Hkv, 2);
  EXPECT_TRUE(ex->explanation().kv_replicated) << "2 kv heads over 4 ranks";
  EXPECT_EQ(w->launcher()->configJson(), launcherBefore) << "the launcher's form is not the explainer's";
  // Up on the ring field: a ring stage appears; the ZeRO combo: the weights stage follows.
  ring->setFocus();
  QTest::keyClick(ring, Qt::Key_Up);
  EXPECT_EQ(ex->explanation().R, 2);
  EXPECT_TRUE(ex->isRingStage(3));
  zero->setFocus();
  QTest::keyClick(zero, Qt::Key_Down);
  QTest::keyClick(zero, Qt::Key_Down);
  EXPECT_EQ(zero->currentIndex(), 2);
  EXPECT_EQ(ex->weights().zero_stage, 2);
  // Left / Right / Home in a field edit it; PgDn steps the stage.
  ex->setStage(0);
  sp->setFocus();
  QTest::keyClick(sp, Qt::Key_Right);
  EXPECT_EQ(ex->stage(), 0);
  QTest::keyClick(sp, Qt::Key_PageDown);
  EXPECT_EQ(ex->stage(), 1);
  // 3 ranks cannot split 8 heads: the refusal is said, the picture gone.
  type(sp, QStringLiteral("3"));
  EXPECT_FALSE(ex->explanation().ok);
  const auto problems = ex->findChildren<QLabel*>();
  bool said = false;
  for (QLabel* l : problems) said = said || (l->isVisible() && l->text().contains(QLatin1String("sp_size (3)")));
  EXPECT_TRUE(said);
  // A launcher edit is a new base: the controls follow it.
  ASSERT_TRUE(w->launcher()->setFieldText(QStringLiteral("parallel.sp_size"), QStringLiteral("1")));
  EXPECT_EQ(sp->value(), 1);
  EXPECT_EQ(ex->explanation().P, 1);
  EXPECT_EQ(heads->value(), launcherBefore["model"]["num_attention_heads"].get<int>());
}

// Opening a run whose config draws another picture asks first (the real dialog, answered with a
// click; then the answer injected, through the window): No keeps the explainer's settings and
// shows no times of the run; Yes shows the run's. A run that draws the same is shown unasked.
TEST_F(Hands, OpeningARunAsksBeforeReplacingTheExplainersSettings) {
  auto* ex = w->findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  const std::string dir = tmp.filePath(QStringLiteral("runs/a_sp4_run")).toStdString();
  ulysses::test::FixtureOptions fo;
  fo.config_patch = {{"parallel", {{"sp_size", 4}, {"ring_size", 1}, {"dp_size", 1}}}};
  write_fixture_run(dir, 4, std::vector<FixtureStep>(4, FixtureStep{10.0, 2.0, 1 << 20}), fo);
  const auto cfgOf = [&] {
    std::ifstream f(dir + "/config.json");
    return RunConfig::from_json(nlohmann::json::parse(f));
  };
  const RunConfig runCfg = cfgOf();
  ASSERT_EQ(runCfg.parallel.sp_size, 4);
  ASSERT_TRUE(w->launcher()->setFieldText(QStringLiteral("parallel.sp_size"), QStringLiteral("2")));
  ASSERT_EQ(ex->explanation().P, 2);
  // The real dialog: "No" clicked.
  QString asked;
  int tries = 0;
  std::function<void()> answer = [&] {
    if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
      asked = box->text();
      QTest::mouseClick(box->button(QMessageBox::No), Qt::LeftButton);
    } else if (++tries < 100) {
      QTimer::singleShot(50, answer);
    }
  };
  QTimer::singleShot(50, answer);
  EXPECT_FALSE(ex->offerConfig(runCfg, QStringLiteral("a_sp4_run")));
  EXPECT_TRUE(asked.contains(QLatin1String("sp 4"))) << asked.toStdString();
  EXPECT_TRUE(asked.contains(QLatin1String("sp 2"))) << asked.toStdString();
  EXPECT_EQ(ex->explanation().P, 2);
  // Through the window, the answer injected: No, then Yes.
  QStringList questions;
  bool yes = false;
  ex->setReplaceAsker([&](const QString& q) {
    questions << q;
    return yes;
  });
  QString err;
  ASSERT_TRUE(w->openPath(QString::fromStdString(dir), &err)) << err.toStdString();
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(dir), &err)) << err.toStdString();
  QApplication::processEvents();
  ASSERT_GE(questions.size(), 1);
  EXPECT_EQ(ex->explanation().P, 2) << "No keeps the explainer's settings";
  EXPECT_TRUE(ex->stageTimes().empty()) << "and shows no times measured with another config";
  yes = true;
  questions.clear();
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(dir), &err)) << err.toStdString();
  QApplication::processEvents();
  ASSERT_GE(questions.size(), 1);
  EXPECT_EQ(ex->explanation().P, 4) << "Yes shows the run's";
  EXPECT_FALSE(ex->stageTimes().empty());
  EXPECT_TRUE(ex->settingsBar()->source().contains(QLatin1String("a_sp4_run")));
  auto* sp = ex->findChild<QSpinBox*>(QStringLiteral("explainSp"));
  ASSERT_NE(sp, nullptr);
  EXPECT_EQ(sp->value(), 4);
  questions.clear();
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(dir), &err)) << err.toStdString();
  QApplication::processEvents();
  EXPECT_TRUE(questions.isEmpty()) << "the same picture: nothing to ask";
}

// The all-to-all stages animate (a timer, or stepped by hand in tests): Next into seq→head
// starts at the picture of the stage before and lands on the stage's own; head→seq likewise
// from attention; half way the pieces are between (a picture of neither).
TEST_F(Hands, AllToAllStagesAnimateFromSequenceToHeadLayoutAndBack) {
  w->setView(QStringLiteral("explain"));
  QApplication::processEvents();
  auto* ex = w->findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  ASSERT_TRUE(w->launcher()->setFieldText(QStringLiteral("parallel.sp_size"), QStringLiteral("2")));
  ASSERT_TRUE(ex->explanation().ok);
  ASSERT_EQ(ex->explanation().R, 1);
  auto picture = [&] { return ex->canvas()->grab().toImage(); };
  auto* motion = ex->findChild<QAbstractSlider*>(QStringLiteral("explainMotion"));
  ASSERT_NE(motion, nullptr);
  for (int a2a : {2, 4}) {
    SCOPED_TRACE("stage " + std::to_string(a2a));
    ASSERT_TRUE(ex->isAllToAllStage(a2a));
    ex->setStage(a2a);
    EXPECT_DOUBLE_EQ(ex->motion(), 1.0) << "jumped to: where it ends";
    EXPECT_FALSE(ex->motionPlaying());
    const QImage after = picture();
    ex->setStage(a2a - 1);
    EXPECT_FALSE(motion->isVisibleTo(ex));
    const QImage before = picture();
    ASSERT_NE(before, after);
    ex->canvas()->setFocus();
    QTest::keyClick(ex->canvas(), Qt::Key_PageDown);  // the clicker's Next
    EXPECT_EQ(ex->stage(), a2a);
    EXPECT_TRUE(motion->isVisibleTo(ex));
    EXPECT_TRUE(ex->motionPlaying());
    EXPECT_DOUBLE_EQ(ex->motion(), 0.0);
    ex->setMotionPlaying(false);
    EXPECT_EQ(picture(), before) << "at 0: the stage before";
    for (int i = 0; i < 10; ++i) ex->stepMotion();
    EXPECT_NEAR(ex->motion(), 0.5, 1e-9);
    EXPECT_EQ(motion->value(), 50);
    const QImage half = picture();
    EXPECT_NE(half, before);
    EXPECT_NE(half, after);
    motion->setValue(25);  // the slider scrubs
    EXPECT_NEAR(ex->motion(), 0.25, 1e-9);
    EXPECT_NE(picture(), half);
    ex->setMotion(0.5);
    EXPECT_EQ(picture(), half) << "the same progress, the same picture";
    for (int i = 0; i < 10; ++i) ex->stepMotion();
    EXPECT_DOUBLE_EQ(ex->motion(), 1.0);
    EXPECT_EQ(picture(), after) << "at 1: the stage";
    // Play runs it again on the timer, to the end, and stops.
    auto* play = ex->findChild<QPushButton*>(QStringLiteral("explainPlayMotion"));
    ASSERT_NE(play, nullptr);
    QTest::mouseClick(play, Qt::LeftButton);
    EXPECT_TRUE(ex->motionPlaying());
    EXPECT_LT(ex->motion(), 0.5);
    for (int i = 0; i < 100 && ex->motionPlaying(); ++i) QTest::qWait(ExplainView::kMotionTickMs);
    EXPECT_FALSE(ex->motionPlaying());
    EXPECT_DOUBLE_EQ(ex->motion(), 1.0);
    EXPECT_EQ(picture(), after);
  }
}

TEST_F(Hands, HelpMenuShowsTheSheetAndTheMarkdownListsEveryBinding) {
  auto* a = w->findChild<QAction*>(QStringLiteral("keyboardShortcuts"));
  ASSERT_NE(a, nullptr);
  a->trigger();
  auto* sheet = w->findChild<QWidget*>(QStringLiteral("shortcutsSheet"));
  ASSERT_NE(sheet, nullptr);
  EXPECT_TRUE(sheet->isVisible());
  const QString md = shortcuts_markdown();
  for (const auto& b : bindings()) EXPECT_TRUE(md.contains(QString::fromUtf8(b.what))) << b.what;
  // docs/STUDIO.md carries the same table.
  QFile doc(QStringLiteral(ULYSSES_SOURCE_DIR "/docs/STUDIO.md"));
  ASSERT_TRUE(doc.open(QIODevice::ReadOnly));
  const QString text = QString::fromUtf8(doc.readAll());
  for (const auto& b : bindings())
    EXPECT_TRUE(text.contains(QStringLiteral("`%1`").arg(keys_text(b)))) << "docs/STUDIO.md lacks " << b.keys;
}

// ---- 5. no stale state ------------------------------------------------------------------

TEST_F(Hands, OpeningTraceBLeavesNoFigureOfTraceAInAnyPanel) {
  TraceView* tv = w->traceView();
  tv->setModel(taggedTrace("alphaA_", 3));
  w->setView(QStringLiteral("timeline"));
  QApplication::processEvents();
  TimelineWidget* tl = tv->timeline();
  // Everything A can put in a panel: a selected range (details, kernels), a dragged window
  // (range statistics), a filter (matches), a comparison run (report's comparison tab).
  const auto& ma = tl->index()->model();
  int64_t sel = -1;
  for (size_t i = 0; i < ma.ranges.size() && sel < 0; ++i)
    if (ma.ranges[i].duration() > 0 && ma.ranges[i].rank == 0) sel = int64_t(i);
  tl->selectRange(sel);
  emit tl->timeRangeSelected(tl->index()->t_min(), tl->index()->t_max());
  tv->filterEdit()->setText(QStringLiteral("alphaA_"));
  QTest::keyClick(tv->filterEdit(), Qt::Key_Return);
  tv->setCompareModel(taggedTrace("alphaA_", 4));
  auto mentionsA = [&](QString* where) {
    for (auto* m : tv->findChildren<QAbstractItemModel*>())
      for (int r = 0; r < m->rowCount(); ++r)
        for (int c = 0; c < m->columnCount(); ++c) {
          const QString s = m->data(m->index(r, c)).toString();
          if (s.contains(QLatin1String("alphaA_"))) {
            *where = QStringLiteral("%1 (%2): %3").arg(m->metaObject()->className(), m->objectName(), s);
            return true;
          }
        }
    return false;
  };
  QString where;
  ASSERT_TRUE(mentionsA(&where)) << "the set-up filled the panels with A";
  int filled = 0;
  for (auto* m : {tv->reportView()->compareModel()}) filled += m->rowCount() > 0;
  ASSERT_EQ(filled, 1) << "the comparison is shown";

  tv->setModel(taggedTrace("betaB_", 5));
  QApplication::processEvents();
  EXPECT_FALSE(mentionsA(&where)) << where.toStdString();
  EXPECT_EQ(tv->reportView()->compareModel()->rowCount(), 0) << "the comparison of A is gone";
  EXPECT_EQ(tl->selectedRange(), -1);
  EXPECT_EQ(tl->selectedWindow().second, -1);
  auto* stats = tv->findChild<QAbstractItemView*>(QStringLiteral("rangeStats"));
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->model()->rowCount(), 0) << "the range statistics of A are gone";
}

// ---- 4. comparing runs ------------------------------------------------------------------

TEST_F(Hands, CompareListsEveryConfigSectionWithFaultsAndFillsBMinusAAndBOverA) {
  const std::string a = tmp.filePath(QStringLiteral("runs/a")).toStdString(),
                    b = tmp.filePath(QStringLiteral("runs/b")).toStdString();
  std::vector<FixtureStep> sa(4), sb(4);
  for (int i = 0; i < 4; ++i) {
    sa[size_t(i)] = {10.0 + i, 2.0 - 0.1 * i, 1 << 20};
    sb[size_t(i)] = {69.0 + i, 2.0 - 0.1 * i, 3 << 20};
  }
  write_fixture_run(a, 2, sa);
  write_fixture_run(b, 2, sb);
  {  // B was run with a slow rank (the cause of its 6.9x slower step)
    auto cfg = nlohmann::json::parse(std::ifstream(b + "/config.json"));
    cfg["faults"] = {{"slow_rank", 1}, {"slow_ms", 50}};
    std::ofstream(b + "/config.json") << cfg.dump(2);
  }
  CompareModel m;
  m.setRuns(loadRunSummary(QString::fromStdString(a)), loadRunSummary(QString::fromStdString(b)));
  const int slow = m.rowOfField(QStringLiteral("faults.slow_rank"));
  ASSERT_GE(slow, 0) << "the faults section is compared";
  EXPECT_TRUE(m.data(m.index(slow, CompareModel::RunA), CompareModel::DiffersRole).toBool());
  EXPECT_EQ(m.data(m.index(slow, CompareModel::RunB)).toString(), QStringLiteral("1"));
  EXPECT_GE(m.rowOfField(QStringLiteral("faults.slow_ms")), 0);
  // Every section of either config shows up.
  for (const char* sec : {"model.", "parallel.", "train.", "faults."}) {
    bool any = false;
    for (int r = 0; r < m.rowCount(); ++r) any = any || m.data(m.index(r, 0)).toString().startsWith(QLatin1String(sec));
    EXPECT_TRUE(any) << sec;
  }
  // Every figure with numbers on both sides has B - A and B / A.
  int numeric = 0;
  for (int r = 0; r < m.rowCount(); ++r) {
    const QVariant va = m.data(m.index(r, CompareModel::RunA), CompareModel::ValueRole),
                   vb = m.data(m.index(r, CompareModel::RunB), CompareModel::ValueRole);
    const QString field = m.data(m.index(r, 0)).toString();
    if (!va.isValid() || !vb.isValid()) continue;
    ++numeric;
    EXPECT_FALSE(m.data(m.index(r, CompareModel::Diff)).toString().isEmpty()) << field.toStdString();
    if (va.toDouble() != 0) {
      EXPECT_FALSE(m.data(m.index(r, CompareModel::Ratio)).toString().isEmpty()) << field.toStdString();
    }
  }
  EXPECT_GE(numeric, 8);
  for (const char* f : {"median step", "tokens/s", "duration", "max memory / rank", "final loss"}) {
    const int r = m.rowOfField(QString::fromLatin1(f));
    ASSERT_GE(r, 0) << f;
    EXPECT_FALSE(m.data(m.index(r, CompareModel::Diff)).toString().isEmpty()) << f;
    EXPECT_FALSE(m.data(m.index(r, CompareModel::Ratio)).toString().isEmpty()) << f;
  }
  // median step: B / A from the fixture's own figures (true median leaving out step 0).
  const int ms = m.rowOfField(QStringLiteral("median step"));
  EXPECT_EQ(m.data(m.index(ms, CompareModel::Ratio)).toString(), QString::number(71.0 / 12.0, 'f', 3));
}

// ---- 8. files -----------------------------------------------------------------------------

TEST_F(Hands, OpenTakesTraceFilesConfigsAndFoldersAndADropOpensToo) {
  const std::string run = tmp.filePath(QStringLiteral("runs/r1")).toStdString();
  write_fixture_run(run, 2, std::vector<FixtureStep>(3, FixtureStep{10.0, 2.0, 1 << 20}));
  QString err;
  // A rank trace file (.sqlite) opens the trace page.
  const QString rank0 = QString::fromStdString(run + "/trace/rank0.sqlite");
  ASSERT_TRUE(w->openPath(rank0, &err)) << err.toStdString();
  EXPECT_EQ(w->currentPage(), QStringLiteral("trace"));
  // A compressed PyTorch trace goes to the loader, which says to unpack it.
  const QString gz = tmp.filePath(QStringLiteral("trace.json.gz"));
  {
    QFile f(gz);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(QByteArray::fromHex("1f8b0800000000000003"));
  }
  QSignalSpy failed(w->traceView(), &TraceView::loadFailed);
  ASSERT_TRUE(w->openPath(gz, &err)) << err.toStdString();
  ASSERT_TRUE(failed.wait(20000) || failed.count() > 0);
  EXPECT_TRUE(failed.front().front().toString().contains(QLatin1String("gunzip")))
      << failed.front().front().toString().toStdString();
  // A run folder, dropped on the window.
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(QString::fromStdString(run))});
  w->setView(QStringLiteral("launch"));
  QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(w.get(), &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(w.get(), &drop);
  EXPECT_EQ(w->currentPage(), QStringLiteral("monitor"));
  EXPECT_TRUE(w->recentFiles().contains(QFileInfo(QString::fromStdString(run)).absoluteFilePath()));
  // The name filters of File ▸ Open.
  for (const char* pat : {"*.sqlite", "*.json", "*.json.gz"})
    EXPECT_TRUE(MainWindow::openFileFilters().contains(QLatin1String(pat))) << pat;
}

namespace {
// Every entry of a folder with its size and modification time (ns), recursively.
std::map<std::string, std::pair<uintmax_t, int64_t>> snapshot(const fs::path& dir) {
  std::map<std::string, std::pair<uintmax_t, int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = {uintmax_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}
const char* kRealData = ULYSSES_SOURCE_DIR "/../shared/realdata/mfu_2gpu_before.sqlite";
}  // namespace

TEST_F(Hands, AnNsightExportsFolderIsLeftExactlyAsItWasItsCachesGoToTheUserCacheFolder) {
  if (!fs::exists(kRealData)) GTEST_SKIP() << kRealData << " is absent (shared/realdata, see its README)";
  QTemporaryDir cache;
  qputenv("XDG_CACHE_HOME", cache.path().toUtf8());
  unsetenv("ULYSSES_TRACE_NO_CACHE");
  // The user's folder: a copy of the export, settled (an hour old: past the caches' racy window).
  const fs::path user = fs::path(tmp.path().toStdString()) / "exports";
  fs::create_directories(user);
  const fs::path file = user / "mfu_2gpu_before.sqlite";
  fs::copy_file(kRealData, file);
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  const struct timespec ts[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, file.c_str(), ts, 0), 0);
  const auto before = snapshot(user);

  QString err;
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(file.string()), &err)) << err.toStdString();
  EXPECT_EQ(snapshot(user), before) << "the studio wrote into the export's folder";
  // Once more (a second open reads the caches) and the folder as a folder of exports.
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(file.string()), &err)) << err.toStdString();
  const auto cached = snapshot(cache.path().toStdString());
  EXPECT_FALSE(cached.empty()) << "the caches went to $XDG_CACHE_HOME/ulysses/traces";
  EXPECT_TRUE(w->traceView()->summaryFromCache()) << "...and are read from there";
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(user.string()), &err)) << err.toStdString();
  EXPECT_EQ(snapshot(user), before);

#ifdef ULYSSES_TRACE_PATH
  if (QFileInfo(QStringLiteral(ULYSSES_TRACE_PATH)).isExecutable()) {
    for (const fs::path& p : {file, user}) {
      QProcess pr;
      pr.start(QStringLiteral(ULYSSES_TRACE_PATH), {QStringLiteral("summary"), QString::fromStdString(p.string())});
      ASSERT_TRUE(pr.waitForFinished(120000));
      EXPECT_EQ(pr.exitCode(), 0) << pr.readAllStandardError().toStdString();
      EXPECT_EQ(snapshot(user), before) << "ulysses-trace summary wrote into the export's folder";
    }
  }
#endif
  qunsetenv("XDG_CACHE_HOME");
}

// ---- 9. projector -------------------------------------------------------------------------

TEST_F(Hands, PresentationModeFitsA1280x720Screen) {
  // A 4-rank run in a folder with a long name (the status line names it).
  const std::string run =
      tmp.filePath(QStringLiteral("runs/a_rather_long_run_folder_name_as_the_launcher_makes_them_20261203-101010"))
          .toStdString();
  write_fixture_run(run, 4, std::vector<FixtureStep>(4, FixtureStep{10.0, 2.0, 1 << 20}));
  QString err;
  ASSERT_TRUE(w->openPath(QString::fromStdString(run), &err)) << err.toStdString();
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(run), &err)) << err.toStdString();
  w->setView(QStringLiteral("timeline"));
  auto* a = w->findChild<QAction*>(QStringLiteral("presentationMode"));
  ASSERT_NE(a, nullptr);
  a->setChecked(true);
  QApplication::processEvents();
  // Every page: the window's minimum size stays within the projector's screen.
  for (const char* page : {"launch", "monitor", "runs", "explain", "timeline", "headmap", "memory", "report"}) {
    w->setView(QString::fromLatin1(page));
    QApplication::processEvents();
    const QSize min = w->minimumSizeHint().expandedTo(w->minimumSize());
    std::printf("presentation mode, %s: minimum %dx%d\n", page, min.width(), min.height());
    EXPECT_LE(min.width(), 1280) << page;
    EXPECT_LE(min.height(), 720) << page;
  }
  w->resize(1280, 720);
  QApplication::processEvents();
  EXPECT_LE(w->width(), 1280);
  EXPECT_LE(w->height(), 720);
  // On a real screen of at least 1280x720 (Xvfb -screen 0 1280x720x24): the window, frame
  // included, lies within it after F5.
  const QRect avail = w->screen()->availableGeometry();
  if (avail.width() >= 1280 && avail.height() >= 720) {
    a->setChecked(false);
    w->resize(avail.size());
    a->setChecked(true);
    QTest::qWait(500);
    EXPECT_TRUE(avail.contains(w->frameGeometry())) << w->frameGeometry().width() << "x" << w->frameGeometry().height();
  }
  a->setChecked(false);
}

// Presentation mode (F5) on a 1280x720 projector and a 1024x768 one, with and without a run
// open (a ring run, so the ring stage is shown): every page and every explainer stage lies
// within the window, no widget over another, no wrapped label cut, and every text the
// explainer's picture writes inside its box, inside the picture and over no other text.
namespace {
// Visible widgets of `page` that show something (text, a control, a picture), outside scroll
// areas and item views (whose contents scroll), in window coordinates.
std::vector<std::pair<QWidget*, QRect>> shown_leaves(QWidget* page, QWidget* window) {
  std::vector<std::pair<QWidget*, QRect>> out;
  for (QWidget* c : page->findChildren<QWidget*>()) {
    if (!c->isVisibleTo(window) || c->width() <= 0 || c->height() <= 0) continue;
    bool inside_scroller = false;
    for (QWidget* a = c->parentWidget(); a && a != page; a = a->parentWidget())
      if (qobject_cast<QAbstractScrollArea*>(a) || qobject_cast<QToolBar*>(a) || qobject_cast<QTabBar*>(a))
        inside_scroller = true;
    if (inside_scroller) continue;
    const bool leaf = qobject_cast<QLabel*>(c) || qobject_cast<QAbstractButton*>(c) || qobject_cast<QLineEdit*>(c) ||
                      qobject_cast<QComboBox*>(c) || qobject_cast<QAbstractSpinBox*>(c) ||
                      qobject_cast<QAbstractSlider*>(c) || c->objectName() == QLatin1String("explainCanvas");
    if (!leaf) continue;
    out.push_back({c, QRect(c->mapTo(window, QPoint(0, 0)), c->size())});
  }
  return out;
}

void expect_laid_out(QWidget* page, QWidget* window, const std::string& where) {
  const auto leaves = shown_leaves(page, window);
  const QRect inside = window->rect();
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto& [wi, ri] = leaves[i];
    const std::string name = std::string(wi->metaObject()->className()) + " '" + wi->objectName().toStdString() + "'";
    EXPECT_TRUE(inside.contains(ri)) << where << ": " << name << " leaves the window";
    if (auto* l = qobject_cast<QLabel*>(wi); l && l->wordWrap() && !l->text().isEmpty()) {
      EXPECT_LE(l->heightForWidth(l->width()), l->height() + 2)
          << where << ": " << name << " is cut: " << l->text().left(60).toStdString();
    }
    for (size_t j = i + 1; j < leaves.size(); ++j) {
      const auto& [wj, rj] = leaves[j];
      if (wi->isAncestorOf(wj) || wj->isAncestorOf(wi)) continue;
      const QRect both = ri.intersected(rj);
      EXPECT_TRUE(both.isEmpty() || both.width() * both.height() <= 1)
          << where << ": " << name << " and " << wj->metaObject()->className() << " '" << wj->objectName().toStdString()
          << "' overlap";
    }
  }
}

void expect_texts_apart(const ExplainView* ex, const std::string& where) {
  const auto& t = ex->drawnTexts();
  const QRectF pic(QPointF(0, 0), QSizeF(ex->canvas()->size()));
  EXPECT_FALSE(t.empty()) << where;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_TRUE(pic.adjusted(-1, -1, 1, 1).contains(t[i].needed))
        << where << ": '" << t[i].text.toStdString() << "' leaves the picture";
    EXPECT_TRUE(t[i].given.adjusted(-1, -1, 1, 1).contains(t[i].needed))
        << where << ": '" << t[i].text.toStdString() << "' overflows its box";
    for (size_t j = i + 1; j < t.size(); ++j) {
      const QRectF both = t[i].needed.intersected(t[j].needed);
      EXPECT_TRUE(both.isEmpty() || both.width() * both.height() <= 1)
          << where << ": '" << t[i].text.toStdString() << "' over '" << t[j].text.toStdString() << "'";
    }
  }
}
}  // namespace

TEST_F(Hands, PresentationModeFitsEveryPageAndExplainerStageWithoutOverlaps) {
  auto* present = w->findChild<QAction*>(QStringLiteral("presentationMode"));
  ASSERT_NE(present, nullptr);
  auto* ex = w->findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  // Without a run: the launcher's config with a ring (the ring stage), ZeRO 3 (the weights stage).
  ASSERT_TRUE(w->launcher()->setFieldText(QStringLiteral("parallel.ring_size"), QStringLiteral("2")));
  EXPECT_TRUE(w->launcher()->setFieldText(QStringLiteral("train.zero_stage"), QStringLiteral("3")));
  QApplication::processEvents();
  present->setChecked(true);
  for (bool run : {false, true}) {
    if (run) {  // a 4-rank ring run (sp 2 x ring 2) opened: its config and measured stage times
      const std::string dir =
          tmp.filePath(QStringLiteral("runs/ring_run_with_a_long_folder_name_20261207-101010")).toStdString();
      ulysses::test::FixtureOptions fo;
      fo.config_patch = {{"parallel", {{"sp_size", 2}, {"ring_size", 2}, {"dp_size", 1}}},
                         {"train", {{"zero_stage", 3}}}};
      write_fixture_run(dir, 4, std::vector<FixtureStep>(4, FixtureStep{10.0, 2.0, 1 << 20}), fo);
      QString err;
      ASSERT_TRUE(w->openPath(QString::fromStdString(dir), &err)) << err.toStdString();
      ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(dir), &err)) << err.toStdString();
      QApplication::processEvents();
    }
    for (const QSize screen : {QSize(1280, 720), QSize(1024, 768)}) {
      w->resize(screen);
      QApplication::processEvents();
      const std::string at =
          std::to_string(screen.width()) + "x" + std::to_string(screen.height()) + (run ? ", a run open" : ", no run");
      for (const char* page : {"launch", "monitor", "runs", "explain", "timeline", "headmap", "memory", "report"}) {
        ASSERT_TRUE(w->setView(QString::fromLatin1(page)));
        QApplication::processEvents();
        const QSize min = w->minimumSizeHint().expandedTo(w->minimumSize());
        EXPECT_LE(min.width(), screen.width()) << page << ", " << at;
        EXPECT_LE(min.height(), screen.height()) << page << ", " << at;
        EXPECT_LE(w->width(), screen.width()) << page << ", " << at;
        EXPECT_LE(w->height(), screen.height()) << page << ", " << at;
        expect_laid_out(w->centralWidget(), w.get(), std::string(page) + ", " + at);
      }
      ASSERT_TRUE(w->setView(QStringLiteral("explain")));
      QApplication::processEvents();
      EXPECT_TRUE(ex->isRingStage(3)) << at;
      // Every stage with the notes shown and hidden; the all-to-all stages half way through
      // their movement too.
      for (bool notes : {true, false}) {
        ex->setNotesShown(notes);
        for (int st = 0; st < ex->stageCount(); ++st) {
          ex->setStage(st);
          for (double motion : ex->isAllToAllStage(st) ? std::vector<double>{0.5, 1.0} : std::vector<double>{1.0}) {
            ex->setMotionPlaying(false);
            ex->setMotion(motion);
            QApplication::processEvents();
            (void)ex->canvas()->grab();  // paints: the texts it writes
            const std::string where = "stage " + std::to_string(st) + (notes ? ", notes shown" : ", notes hidden") +
                                      (motion < 1 ? ", moving" : "") + ", " + at;
            EXPECT_EQ(ex->findChild<QScrollArea*>(QStringLiteral("explainCaption"))->isVisible(), notes) << where;
            expect_laid_out(w->centralWidget(), w.get(), where);
            expect_texts_apart(ex, where);
            // ULYSSES_SCREENSHOT_DIR=docs/images: the ring and ZeRO stages as a projector shows
            // them (docs/STUDIO.md), with the run open at 1280x720, notes hidden; the seq->head
            // all-to-all half way, notes hidden and shown.
            const QString shots = qEnvironmentVariable("ULYSSES_SCREENSHOT_DIR");
            if (shots.isEmpty() || !run || screen != QSize(1280, 720)) continue;
            QString name;
            if (!notes && ex->isRingStage(st)) name = QStringLiteral("explain-ring-f5-1280x720.png");
            if (!notes && ex->isWeightsStage(st)) name = QStringLiteral("explain-zero-f5-1280x720.png");
            if (st == 2 && motion < 1)
              name = notes ? QStringLiteral("explain-notes-f5-1280x720.png")
                           : QStringLiteral("explain-a2a-moving-f5-1280x720.png");
            if (!name.isEmpty()) {
              EXPECT_TRUE(w->grab().save(QDir(shots).filePath(name)));
            }
          }
        }
      }
      ex->setNotesShown(true);
    }
  }
  present->setChecked(false);
}

// Presentation mode enlarges the charts (Qt Charts keeps fonts of its own: the monitor's, the
// report's and the memory view's follow the window's now) and the head map's header, rank and
// time columns; at 1024x768 the status bar elides a long message and a long run name instead
// of running off the screen or widening the window.
TEST_F(Hands, PresentationModeScalesChartsAndHeadMapAndTheStatusBarNeverOverflows) {
  const std::string dir =
      tmp.filePath(QStringLiteral("runs/a_run_whose_folder_name_is_long_enough_to_fill_a_status_bar_20261207-101010"))
          .toStdString();
  write_fixture_run(dir, 4, std::vector<FixtureStep>(4, FixtureStep{10.0, 2.0, 1 << 20}));
  QString err;
  ASSERT_TRUE(w->openPath(QString::fromStdString(dir), &err)) << err.toStdString();
  ASSERT_TRUE(w->traceView()->openTraceAndWait(QString::fromStdString(dir), &err)) << err.toStdString();
  for (const char* page : {"monitor", "headmap", "memory", "report"}) {  // every chart shown once
    ASSERT_TRUE(w->setView(QString::fromLatin1(page)));
    QApplication::processEvents();
  }
  const auto views = w->findChildren<QChartView*>();
  ASSERT_GE(views.size(), 3);
  auto* grid = w->findChild<HeadGridWidget*>();
  ASSERT_NE(grid, nullptr);
  auto sizes = [&] {
    std::vector<double> v;
    for (QChartView* c : views) {
      v.push_back(c->chart()->titleFont().pointSizeF());
      for (QAbstractAxis* a : c->chart()->axes()) v.push_back(a->labelsFont().pointSizeF());
    }
    return v;
  };
  const std::vector<double> normal = sizes();
  const double appNormal = QApplication::font().pointSizeF();
  for (double pt : normal) EXPECT_NEAR(pt, appNormal, 0.01) << "the charts use the window's font";
  const int header = grid->headerHeight(), rankCol = grid->rankColumnWidth(), timeCol = grid->timeColumnWidth();
  auto* present = w->findChild<QAction*>(QStringLiteral("presentationMode"));
  ASSERT_NE(present, nullptr);
  present->setChecked(true);
  QApplication::processEvents();
  for (const char* page : {"monitor", "headmap", "memory", "report"}) {
    ASSERT_TRUE(w->setView(QString::fromLatin1(page)));
    QApplication::processEvents();
  }
  const std::vector<double> big = sizes();
  ASSERT_EQ(big.size(), normal.size());
  for (size_t i = 0; i < big.size(); ++i) EXPECT_NEAR(big[i], 1.5 * normal[i], 0.01) << "font " << i;
  const QFontMetrics fm = grid->fontMetrics();
  EXPECT_GT(grid->headerHeight(), header);
  EXPECT_GE(grid->headerHeight(), fm.height());
  EXPECT_GT(grid->rankColumnWidth(), rankCol);
  EXPECT_GE(grid->rankColumnWidth(), fm.horizontalAdvance(QStringLiteral("rank 3")));
  EXPECT_GT(grid->timeColumnWidth(), timeCol);
  EXPECT_GE(grid->rowHeight(), fm.height());
  // The status bar at 1024x768: a long message and the run's long name, elided.
  w->resize(1024, 768);
  QApplication::processEvents();
  auto* status = qobject_cast<StatusLine*>(w->statusBar());
  ASSERT_NE(status, nullptr);
  const QString longName = QStringLiteral("finished: ") + QString::fromStdString(fs::path(dir).filename().string());
  status->setRunText(longName);
  const QString msg = QStringLiteral("Trace not opened: ") + QString(40, QLatin1Char('x')) +
                      QStringLiteral(
                          " is not a trace this studio reads, nor a folder of exports; the end of the "
                          "message says what to do about it");
  status->showMessage(msg);
  QApplication::processEvents();
  EXPECT_LE(w->minimumSizeHint().width(), 1024);
  EXPECT_LE(w->width(), 1024);
  EXPECT_LE(status->width(), 1024);
  EXPECT_EQ(status->currentMessage(), msg);
  const QRect room = status->messageRect();
  const QString shown = status->shownMessage();
  EXPECT_NE(shown, msg) << "elided";
  EXPECT_LE(status->fontMetrics().horizontalAdvance(shown), room.width());
  EXPECT_EQ(status->toolTip(), msg) << "the whole message on hover";
  QLabel* run = status->runLabel();
  EXPECT_TRUE(run->isVisible());
  EXPECT_LE(room.right(), run->geometry().left()) << "the message stops before the run's name";
  EXPECT_LE(run->geometry().right(), status->width());
  EXPECT_LE(run->fontMetrics().horizontalAdvance(run->text()), run->width()) << run->text().toStdString();
  EXPECT_NE(run->text(), longName) << "elided";
  EXPECT_EQ(run->toolTip(), longName);
  status->clearMessage();
  present->setChecked(false);
}

// ---- 5. the launcher's Measured column: only against the run's own config ---------------

TEST_F(Hands, MeasuredFiguresAreSetOnlyAgainstTheRunsOwnConfigAndCpuMemoryIsSaidToBeResident) {
  const std::string run = tmp.filePath(QStringLiteral("runs/measured")).toStdString();
  write_fixture_run(run, 2, std::vector<FixtureStep>(4, FixtureStep{10.0, 2.0, 1 << 20}));
  EstimateModel* est = w->launcher()->estimateModel();
  auto measuredStep = [&] {
    return est->data(est->index(EstimateModel::StepTime, EstimateModel::Measured)).toString();
  };
  // The launcher holds the tiny preset (another config): nothing measured is set beside it.
  QString err;
  ASSERT_TRUE(w->openPath(QString::fromStdString(run), &err)) << err.toStdString();
  EXPECT_TRUE(measuredStep().isEmpty()) << measuredStep().toStdString();
  EXPECT_TRUE(w->statusBar()->currentMessage().contains(QLatin1String("another config")))
      << w->statusBar()->currentMessage().toStdString();
  // With the run's own config in the launcher, its figures are set.
  ASSERT_TRUE(w->launcher()->loadConfigFile(QString::fromStdString(run + "/config.json"), &err)) << err.toStdString();
  ASSERT_TRUE(w->openPath(QString::fromStdString(run), &err)) << err.toStdString();
  EXPECT_FALSE(measuredStep().isEmpty());
  if (!qEnvironmentVariableIsSet("ULYSSES_TEST_HAS_GPU")) {  // "auto" on a machine without GPUs: CPU
    const QModelIndex mem = est->index(EstimateModel::TotalMem, EstimateModel::Measured);
    EXPECT_TRUE(est->data(mem).toString().endsWith(QLatin1String("RSS"))) << est->data(mem).toString().toStdString();
    EXPECT_EQ(est->data(est->index(EstimateModel::TotalMem, EstimateModel::Ratio)).toString(), QStringLiteral("(RSS)"));
    EXPECT_TRUE(est->data(mem, Qt::ToolTipRole).toString().contains(QLatin1String("resident")));
  }
}
