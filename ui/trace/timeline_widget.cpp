// Timeline widget: input handling and painting of the draw list.
#include "trace/timeline_widget.hpp"

#include <QContextMenuEvent>
#include <QCursor>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMenu>
#include <QMouseEvent>
#include <QPainter>
#include <QRegularExpression>
#include <QFontMetrics>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "trace/phase_style.hpp"
#include "trace/range_label.hpp"
#include "trace/qt_text.hpp"
#include "trace/shortcuts.hpp"

namespace ulysses::ui {

namespace {
QColor argb(uint32_t c) { return QColor::fromRgba(c); }
}  // namespace

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  qRegisterMetaType<ulysses::ui::TimelineViewport>("ulysses::ui::TimelineViewport");
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setMinimumSize(400, 200);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

int TimelineWidget::timeWidth() const { return std::max(1, width() - gutter_); }

void TimelineWidget::setIndex(std::shared_ptr<const TimelineIndex> index) {
  index_ = std::move(index);
  selected_ = -1;
  window_ = {0, -1};
  flowFor_ = -1;
  launchIndex_ = nullptr;
  launch_ = {};
  y_scroll_ = 0;
  match_.clear();
  filter_on_ = false;
  rank_flags_.assign(index_ ? index_->ranks().size() : 0, 0);
  layout_ = index_ ? compute_layout(*index_, {}, rank_flags_) : TimelineLayout{};
  updateGutter();
  fitAll();
}

QString TimelineWidget::rankLabel(int32_t rank) const {
  QString label = tr("rank %1").arg(rank);
  if (!index_) return label;
  for (const auto& ri : index_->model().ranks)
    if (ri.rank == rank && !ri.device.empty()) label += QStringLiteral(" (%1)").arg(QString::fromStdString(ri.device));
  return label;
}

QString TimelineWidget::headerText(const RankLayout& rl, const QFontMetrics& bold) const {
  const QString label = (rl.collapsed ? QStringLiteral("\u25B8 ") : QStringLiteral("\u25BE ")) + rankLabel(rl.rank) +
                        (rl.pinned ? tr(" [pinned]") : QString());
  return bold.elidedText(label, Qt::ElideMiddle, gutter_ - 8);
}

QString TimelineWidget::gutterText(int32_t rank) const {
  const RankLayout* rl = layout_.find_rank(rank);
  if (!rl) return {};
  QFont f = font();
  f.setBold(true);
  return headerText(*rl, QFontMetrics(f));
}

QString TimelineWidget::gutterToolTip(const QPoint& pos) const {
  const int32_t rank = rankAt(pos);
  if (rank < 0 || !index_) return {};
  QString s = rankLabel(rank);
  for (const auto& ri : index_->model().ranks) {
    if (ri.rank != rank) continue;
    if (ri.pid > 0) s += tr("\npid %1").arg(ri.pid);
    if (!ri.hostname.empty()) s += tr("\nhost %1").arg(QString::fromStdString(ri.hostname));
  }
  const auto [lane, depth] = layout_.row_at(*index_, layout_.layout_y(float(pos.y() - ruler_h_), y_scroll_));
  (void)depth;
  if (lane >= 0) s += tr("\nlane %1").arg(QString::fromStdString(index_->model().lanes[size_t(lane)].name));
  return s;
}

void TimelineWidget::updateGutter() {
  int want = 150;
  if (index_) {
    QFont bf = font();
    bf.setBold(true);
    const QFontMetrics bold(bf), plain(font());
    const int arrow = bold.horizontalAdvance(QStringLiteral("\u25BE "));
    for (const auto& rk : index_->ranks())
      want = std::max(want, arrow + bold.horizontalAdvance(rankLabel(rk.rank)) + 12);
    for (const auto& lane : index_->model().lanes)
      want = std::max(want, plain.horizontalAdvance(QString::fromStdString(lane.name)) + 20);
  }
  const int g = std::clamp(want, 150, std::max(150, std::min(360, width() / 3)));
  if (g == gutter_) return;
  const int64_t a = vp_.t0_ns, b = vp_.t1_ns();
  gutter_ = g;
  TimelineViewport v = vp_;
  v.set_width(timeWidth());
  if (index_ && b > a) v.fit(a, b);
  dirty_ = true;
  changeViewport(v);
}

void TimelineWidget::changeEvent(QEvent* e) {
  if (e->type() == QEvent::FontChange) updateGutter();
  QWidget::changeEvent(e);
}

float TimelineWidget::maxScroll() const { return std::max(0.0f, layout_.total_h - float(height() - ruler_h_)); }

void TimelineWidget::setYScroll(float y) {
  y_scroll_ = std::clamp(y, 0.0f, maxScroll());
  dirty_ = true;
  update();
}

void TimelineWidget::relayout() {
  layout_ = index_ ? compute_layout(*index_, {}, rank_flags_) : TimelineLayout{};
  setYScroll(y_scroll_);
}

void TimelineWidget::setRankFlag(int32_t rank, uint8_t flag, bool on) {
  if (!index_) return;
  const auto& rks = index_->ranks();
  for (size_t i = 0; i < rks.size() && i < rank_flags_.size(); ++i) {
    if (rks[i].rank != rank) continue;
    const uint8_t f = on ? uint8_t(rank_flags_[i] | flag) : uint8_t(rank_flags_[i] & ~flag);
    if (f == rank_flags_[i]) return;
    rank_flags_[i] = f;
    relayout();
    if ((f & kRankHidden) && selected_ >= 0 && size_t(selected_) < index_->model().ranges.size() &&
        index_->model().ranges[size_t(selected_)].rank == rank)
      selectRange(-1);
    return;
  }
}

void TimelineWidget::setRankPinned(int32_t rank, bool on) { setRankFlag(rank, kRankPinned, on); }
void TimelineWidget::setRankCollapsed(int32_t rank, bool on) { setRankFlag(rank, kRankCollapsed, on); }
void TimelineWidget::setRankHidden(int32_t rank, bool on) { setRankFlag(rank, kRankHidden, on); }

void TimelineWidget::showAllRanks() {
  bool any = false;
  for (auto& f : rank_flags_) {
    any = any || (f & kRankHidden);
    f = uint8_t(f & ~kRankHidden);
  }
  if (any) relayout();
}

uint8_t TimelineWidget::rankFlags(int32_t rank) const {
  if (!index_) return 0;
  const auto& rks = index_->ranks();
  for (size_t i = 0; i < rks.size() && i < rank_flags_.size(); ++i)
    if (rks[i].rank == rank) return rank_flags_[i];
  return 0;
}

int32_t TimelineWidget::rankAt(const QPoint& pos) const {
  if (pos.y() < ruler_h_ || hiddenStripRect().contains(pos)) return -1;
  const RankLayout* rl = layout_.rank_at(layout_.layout_y(float(pos.y() - ruler_h_), y_scroll_));
  return rl ? rl->rank : -1;
}

QRect TimelineWidget::hiddenStripRect() const {
  if (layout_.hidden_ranks == 0) return {};
  return QRect(0, height() - 20, gutter_, 20);
}

QMenu* TimelineWidget::rankMenu(int32_t rank, QWidget* parent) {
  auto* menu = new QMenu(parent);
  if (rank >= 0) {
    const uint8_t f = rankFlags(rank);
    QAction* pin = menu->addAction(tr("Pin rank %1 at the top").arg(rank));
    pin->setObjectName(QStringLiteral("pin"));
    pin->setCheckable(true);
    pin->setChecked(f & kRankPinned);
    connect(pin, &QAction::toggled, this, [this, rank](bool on) { setRankPinned(rank, on); });
    QAction* col = menu->addAction(tr("Collapse rank %1 to one row").arg(rank));
    col->setObjectName(QStringLiteral("collapse"));
    col->setCheckable(true);
    col->setChecked(f & kRankCollapsed);
    connect(col, &QAction::toggled, this, [this, rank](bool on) { setRankCollapsed(rank, on); });
    QAction* hide = menu->addAction(tr("Hide rank %1").arg(rank));
    hide->setObjectName(QStringLiteral("hide"));
    connect(hide, &QAction::triggered, this, [this, rank] { setRankHidden(rank, true); });
    menu->addSeparator();
  }
  QAction* all = menu->addAction(tr("Show all ranks (%1 hidden)").arg(layout_.hidden_ranks));
  all->setObjectName(QStringLiteral("showAll"));
  all->setEnabled(layout_.hidden_ranks > 0);
  connect(all, &QAction::triggered, this, &TimelineWidget::showAllRanks);
  return menu;
}

void TimelineWidget::contextMenuEvent(QContextMenuEvent* e) {
  if (!index_ || e->pos().x() >= gutter_ || e->pos().y() < ruler_h_) {
    QWidget::contextMenuEvent(e);
    return;
  }
  QMenu* menu = rankMenu(rankAt(e->pos()), this);
  menu->setAttribute(Qt::WA_DeleteOnClose);
  menu->popup(e->globalPos());
  e->accept();
}

void TimelineWidget::changeViewport(TimelineViewport vp) {
  vp.set_width(timeWidth());
  if (index_) vp.clamp_to(index_->t_min(), index_->t_max());
  if (vp == vp_) return;
  vp_ = vp;
  dirty_ = true;
  update();
  emit viewportChanged(vp_);
}

void TimelineWidget::setViewport(const TimelineViewport& vp) {
  TimelineViewport v = vp;
  // Keep the time range when the other view has a different width.
  if (v.width_px != timeWidth()) {
    const int64_t a = v.t0_ns, b = v.t1_ns();
    v.set_width(timeWidth());
    v.fit(a, b);
  }
  changeViewport(v);
}

void TimelineWidget::fitAll() {
  TimelineViewport v = vp_;
  v.set_width(timeWidth());
  if (index_) v.fit(index_->t_min(), index_->t_max(), 0.01);
  changeViewport(v);
  dirty_ = true;
  update();
}

int64_t TimelineWidget::stepCount() const { return index_ ? int64_t(index_->steps().size()) : 0; }

int64_t TimelineWidget::currentStep() const {
  if (!index_) return -1;
  const auto& st = index_->steps();
  const int64_t c = vp_.t_of(vp_.width_px / 2.0);
  for (size_t i = 0; i < st.size(); ++i)
    if (c >= st[i].start_ns && c < st[i].end_ns) return int64_t(i);
  // nearest step starting after the centre, else the last one before it
  for (size_t i = 0; i < st.size(); ++i)
    if (st[i].start_ns > c) return int64_t(i) - (i > 0 ? 1 : 0);
  return st.empty() ? -1 : int64_t(st.size()) - 1;
}

void TimelineWidget::fitStep(int pos) {
  if (!index_ || pos < 0 || size_t(pos) >= index_->steps().size()) return;
  const auto& s = index_->steps()[size_t(pos)];
  TimelineViewport v = vp_;
  v.set_width(timeWidth());
  v.fit(s.start_ns, s.end_ns, 0.02);
  changeViewport(v);
}

void TimelineWidget::nextStep() {
  const auto& st = index_ ? index_->steps() : std::vector<StepSpan>{};
  if (st.empty()) return;
  const int64_t c = vp_.t_of(vp_.width_px / 2.0);
  for (size_t i = 0; i < st.size(); ++i)
    if (st[i].start_ns > c) {
      fitStep(int(i));
      return;
    }
  fitStep(int(st.size()) - 1);
}

void TimelineWidget::prevStep() {
  const auto& st = index_ ? index_->steps() : std::vector<StepSpan>{};
  if (st.empty()) return;
  const int64_t c = vp_.t_of(vp_.width_px / 2.0);
  for (size_t i = st.size(); i-- > 0;)
    if (st[i].end_ns < c) {
      fitStep(int(i));
      return;
    }
  fitStep(0);
}

void TimelineWidget::selectRange(qint64 r) {
  if (r == selected_) return;
  selected_ = r;
  dirty_ = true;
  update();
  emit rangeSelected(r);
}

void TimelineWidget::setCursorTime(qint64 t_ns) {
  if (t_ns == cursor_ns_) return;
  cursor_ns_ = t_ns;
  update();
}

void TimelineWidget::refreshColours() {
  dirty_ = true;
  update();
}

void TimelineWidget::fitRange(qint64 r) {
  if (!index_ || r < 0 || size_t(r) >= index_->model().ranges.size()) return;
  const auto& rg = index_->model().ranges[size_t(r)];
  TimelineViewport v = vp_;
  v.set_width(timeWidth());
  v.fit(rg.start_ns, rg.end_ns, 0.25);
  changeViewport(v);
  scrollToLaneOf(r);
  selectRange(r);
}

void TimelineWidget::scrollToLaneOf(qint64 r) {
  if (!index_ || r < 0 || size_t(r) >= index_->model().ranges.size()) return;
  const auto& rg = index_->model().ranges[size_t(r)];
  // show its rank when hidden, and scroll the lane into view (pinned lanes always show)
  if (size_t(rg.lane) < layout_.lanes.size()) {
    if (layout_.lanes[size_t(rg.lane)].hidden) setRankHidden(layout_.lanes[size_t(rg.lane)].rank, false);
    const float ly = layout_.lanes[size_t(rg.lane)].y;
    const float vis = float(height() - ruler_h_);
    const float sy = layout_.screen_y(ly, y_scroll_);
    if (ly >= layout_.pinned_h && (sy < layout_.pinned_h || sy > vis - layout_.opt.row_h))
      setYScroll(ly - layout_.pinned_h - (vis - layout_.pinned_h) / 3);
  }
}

void TimelineWidget::fitCollective(qint64 r) {
  if (!index_ || r < 0 || size_t(r) >= index_->model().ranges.size()) return;
  const auto& m = index_->model();
  const CollectiveArrivals c = collective_arrivals(m, r);
  if (c.arrivals.empty()) {
    fitRange(r);
    return;
  }
  int64_t end = c.last_ns;
  for (const auto& a : c.arrivals) end = std::max(end, m.ranges[size_t(a.range)].end_ns);
  TimelineViewport v = vp_;
  v.set_width(timeWidth());
  v.fit(c.first_ns, std::max(end, c.first_ns + 1), 0.25);
  changeViewport(v);
  scrollToLaneOf(r);
  selectRange(r);
}

bool TimelineWidget::nextCollective() {
  if (!index_) return false;
  const int64_t k = next_collective_instance(index_->model(), selected_, true);
  if (k >= 0) fitCollective(k);
  return k >= 0;
}

bool TimelineWidget::prevCollective() {
  if (!index_) return false;
  const int64_t k = next_collective_instance(index_->model(), selected_, false);
  if (k >= 0) fitCollective(k);
  return k >= 0;
}

std::vector<LaunchFlow> TimelineWidget::launchFlows() {
  if (!index_ || (selected_ < 0 && window_.second <= window_.first)) return {};
  if (launchIndex_ != index_.get()) {
    launch_ = build_launch_index(index_->model());
    launchIndex_ = index_.get();
  }
  std::vector<LaunchFlow> out = launch_flows(*index_, launch_, layout_, vp_, y_scroll_, selected_, 0, -1);
  // A dragged window's launches, when they are few enough to read (a busy window would bury the
  // timeline under hundreds of arrows).
  if (window_.second > window_.first) {
    auto w =
        launch_flows(*index_, launch_, layout_, vp_, y_scroll_, -1, window_.first, window_.second, kMaxWindowFlows + 1);
    if (w.size() <= kMaxWindowFlows) out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

std::vector<std::vector<FlowPoint>> TimelineWidget::flowsDrawn() {
  std::vector<std::vector<FlowPoint>> out;
  if (!index_) return out;
  ensureDrawList();
  if (selected_ >= 0) {
    auto f = collective_flow(*index_, layout_, vp_, y_scroll_, selected_);
    if (f.size() > 1) out.push_back(std::move(f));
  }
  if (all_flows_)
    for (auto& g : flows_in_view(*index_, dl_)) out.push_back(std::move(g));
  return out;
}

void TimelineWidget::centreOn(int64_t t) {
  TimelineViewport v = vp_;
  v.t0_ns = TimelineViewport::sat_ns(double(t) - v.ns_per_px * v.width_px / 2);
  changeViewport(v);
}

int TimelineWidget::setFilter(const QString& text) {
  match_.clear();
  match_phase_.clear();
  filter_on_ = !text.trimmed().isEmpty();
  int n = 0;
  if (filter_on_ && index_) {
    const auto& m = index_->model();
    const QString needle = text.trimmed();
    match_.assign(m.strings.size(), 0);
    for (size_t i = 0; i < m.strings.size(); ++i) {
      if (QString::fromStdString(m.strings[i]).contains(needle, Qt::CaseInsensitive)) {
        match_[i] = 1;
        ++n;
      }
    }
    // Phase names: kernels carry the phase of the range that launched them.
    match_phase_.assign(size_t(prof::Phase::Count) + 1, 0);
    for (int p = 0; p < int(prof::Phase::Count); ++p) {
      if (QString(phase_label(prof::Phase(p))).contains(needle, Qt::CaseInsensitive)) {
        match_phase_[size_t(p)] = 1;
        ++n;
      }
    }
  }
  dirty_ = true;
  update();
  return n;
}

bool TimelineWidget::jumpToMatch(bool forward) {
  if (!index_ || !filter_on_) return false;
  const auto& m = index_->model();
  int64_t ref = vp_.t_of(vp_.width_px / 2.0);
  int64_t ref_idx = -1;
  if (selected_ >= 0 && size_t(selected_) < m.ranges.size()) {
    ref = m.ranges[size_t(selected_)].start_ns;
    ref_idx = selected_;
  }
  int64_t best = -1;
  DrawParams fp;
  fp.match = &match_;
  fp.match_phase = &match_phase_;
  // One pass over the ranges: acceptable on a user action (not per frame).
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const auto& r = m.ranges[i];
    if (!range_matches(fp, r)) continue;
    if (int64_t(i) == ref_idx) continue;
    const bool after = r.start_ns > ref || (r.start_ns == ref && int64_t(i) > ref_idx);
    const bool before = r.start_ns < ref || (r.start_ns == ref && int64_t(i) < ref_idx);
    if (forward ? !after : !before) continue;
    if (best < 0) {
      best = int64_t(i);
      continue;
    }
    const auto& b = m.ranges[size_t(best)];
    if (forward ? r.start_ns < b.start_ns : r.start_ns > b.start_ns) best = int64_t(i);
  }
  if (best < 0) return false;
  const auto& r = m.ranges[size_t(best)];
  if (vp_.px_of(r.duration()) > vp_.width_px * 0.8 || vp_.px_of(r.duration()) < 2)
    fitRange(best);
  else {
    centreOn((r.start_ns + r.end_ns) / 2);
    selectRange(best);
  }
  return true;
}

void TimelineWidget::setAllFlowsInView(bool on) {
  all_flows_ = on;
  update();
}

void TimelineWidget::ensureDrawList() {
  if (!dirty_) return;
  dl_.clear();
  if (index_) {
    DrawParams p;
    p.vp = vp_;
    p.vp.set_width(timeWidth());
    p.y_scroll = y_scroll_;
    p.height = float(height() - ruler_h_);
    p.match = filter_on_ ? &match_ : nullptr;
    p.match_phase = filter_on_ ? &match_phase_ : nullptr;
    p.selected = selected_;
    compute_draw_list(*index_, layout_, p, &dl_);
  }
  dirty_ = false;
}

const DrawList& TimelineWidget::drawList() {
  ensureDrawList();
  return dl_;
}

QString TimelineWidget::describe(const DrawItem& it) const {
  const auto& m = index_->model();
  if (it.count > 1) {
    const int64_t dur = TimelineViewport::sat_ns(it.w * vp_.ns_per_px);
    return tr("%1 ranges folded (about %2); zoom in to see them")
        .arg(it.count)
        .arg(to_qs(format_duration_ns(double(dur))));
  }
  if (it.range < 0 || size_t(it.range) >= m.ranges.size()) return {};
  const auto& r = m.ranges[size_t(it.range)];
  QString name =
      (r.name_id >= 0 && size_t(r.name_id) < m.strings.size()) ? to_qs(m.strings[size_t(r.name_id)]) : QString();
  QString s =
      QStringLiteral("<b>%1</b><br>%2 %3").arg(name.toHtmlEscaped(), phase_label(r.phase), direction_label(r.dir));
  if (r.layer >= 0) s += tr("<br>layer %1").arg(r.layer);
  if (r.head_begin >= 0) s += tr("<br>heads %1-%2").arg(r.head_begin).arg(r.head_end - 1);
  if (r.chunk >= 0) s += tr(" (chunk %1)").arg(r.chunk);
  const prof::RangeExtra& x = m.extra(r);
  if (x.bytes_sent || x.bytes_recv)
    s += tr("<br>sent %1, received %2").arg(to_qs(format_bytes(x.bytes_sent)), to_qs(format_bytes(x.bytes_recv)));
  s += tr("<br>duration %1").arg(to_qs(format_duration_ns(double(r.duration()))));
  if (r.step >= 0) s += tr("<br>step %1, rank %2").arg(r.step).arg(r.rank);
  return s;
}

bool TimelineWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && index_) {
    auto* he = static_cast<QHelpEvent*>(e);
    ensureDrawList();
    if (he->pos().x() < gutter_) {  // the gutter: a rank's whole name
      const QString tip = gutterToolTip(he->pos());
      if (tip.isEmpty())
        QToolTip::hideText();
      else
        QToolTip::showText(he->globalPos(), tip, this);
      return true;
    }
    const int64_t hit = hit_test(dl_, float(he->pos().x() - gutter_), float(he->pos().y() - ruler_h_));
    if (hit >= 0)
      QToolTip::showText(he->globalPos(), describe(dl_.items[size_t(hit)]), this);
    else
      QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

void TimelineWidget::resizeEvent(QResizeEvent*) {
  // Keep the visible time range across resizes (the window opening, splitters moving).
  updateGutter();
  TimelineViewport v = vp_;
  const int64_t a = vp_.t0_ns, b = vp_.t1_ns();
  v.set_width(timeWidth());
  if (index_) v.fit(a, b);
  dirty_ = true;
  changeViewport(v);
}

void TimelineWidget::wheelEvent(QWheelEvent* e) {
  // Perfetto / Nsight conventions (shortcuts.hpp): Ctrl+wheel zooms at the pointer, Shift+wheel
  // (or a horizontal wheel) pans, the plain wheel scrolls the lanes; setWheelZooms(true) makes
  // the plain wheel zoom instead.
  const QPoint a = e->angleDelta();
  const Qt::KeyboardModifiers mods = e->modifiers();
  const bool zoom = (mods & Qt::ControlModifier) || (wheel_zooms_ && !(mods & Qt::ShiftModifier));
  if (zoom) {
    const double steps = (a.y() != 0 ? a.y() : a.x()) / 120.0;
    TimelineViewport v = vp_;
    v.zoom_at(e->position().x() - gutter_, std::pow(1.25, steps));
    changeViewport(v);
  } else if ((mods & Qt::ShiftModifier) || (a.x() != 0 && a.y() == 0)) {
    // Some platforms turn a shifted vertical wheel into a horizontal one: either pans.
    const double steps = (a.y() != 0 ? a.y() : a.x()) / 120.0;
    TimelineViewport v = vp_;
    v.pan_px(-steps * vp_.width_px / 10.0);
    changeViewport(v);
  } else {
    setYScroll(y_scroll_ - float(a.y() / 120.0 * 60));
  }
  e->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* e) {
  press_pos_ = last_pos_ = e->pos();
  if (e->pos().x() < gutter_ && e->button() == Qt::LeftButton && hiddenStripRect().contains(e->pos())) {
    showAllRanks();
    return;
  }
  if (e->pos().x() < gutter_ && e->button() == Qt::RightButton) return;  // the rank menu (contextMenuEvent)
  if (e->button() == Qt::RightButton || (e->button() == Qt::LeftButton && (e->modifiers() & Qt::ShiftModifier))) {
    selecting_ = true;
    drag_x_ = e->pos().x();
  } else if (e->button() == Qt::LeftButton) {
    panning_ = true;
  }
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* e) {
  hover_x_ = e->pos().x();
  if (panning_) {
    const QPoint d = e->pos() - last_pos_;
    last_pos_ = e->pos();
    y_scroll_ = std::clamp(y_scroll_ - float(d.y()), 0.0f, maxScroll());
    TimelineViewport v = vp_;
    v.pan_px(-d.x());
    dirty_ = true;
    changeViewport(v);
    update();
  } else if (selecting_) {
    drag_x_ = e->pos().x();
    update();
  }
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* e) {
  if (selecting_) {
    selecting_ = false;
    const int a = std::min(press_pos_.x(), e->pos().x()) - gutter_,
              b = std::max(press_pos_.x(), e->pos().x()) - gutter_;
    if (b - a >= 3) {  // a window selected (F fits it, Esc clears it); the zoom stays
      window_ = {vp_.t_of(a), vp_.t_of(b)};
      emit timeRangeSelected(window_.first, window_.second);
    }
    update();
    return;
  }
  if (panning_) {
    panning_ = false;
    if ((e->pos() - press_pos_).manhattanLength() < 4 && index_) {  // a click: select
      // An arrow (drawn over the ranges) jumps to its collective instance.
      const int64_t arrow = hit_flow(flowsDrawn(), float(e->pos().x() - gutter_), float(e->pos().y() - ruler_h_));
      if (arrow >= 0) {
        fitCollective(arrow);
        return;
      }
      ensureDrawList();
      const int64_t hit = hit_test(dl_, float(e->pos().x() - gutter_), float(e->pos().y() - ruler_h_));
      if (hit >= 0 && dl_.items[size_t(hit)].count > 1) {  // clicking a fold zooms into it
        const auto& it = dl_.items[size_t(hit)];
        TimelineViewport v = vp_;
        v.fit(vp_.t_of(it.x), vp_.t_of(it.x + it.w), 0.1);
        changeViewport(v);
      } else {
        selectRange(hit >= 0 ? dl_.items[size_t(hit)].range : -1);
      }
    }
  }
}

double TimelineWidget::zoomAnchorX() const {
  // The mouse pointer's time when it is over the time area, else the centre.
  int x = hover_x_;
  if (x < 0) {  // no move seen since the widget appeared under a still pointer
    const QPoint p = mapFromGlobal(QCursor::pos());
    if (rect().contains(p)) x = p.x();
  }
  if (x >= gutter_ && x < width()) return double(x - gutter_);
  return vp_.width_px / 2.0;
}

void TimelineWidget::leaveEvent(QEvent* e) {
  hover_x_ = -1;
  QWidget::leaveEvent(e);
}

void TimelineWidget::fitSelection() {
  if (window_.second > window_.first) {
    TimelineViewport v = vp_;
    v.set_width(timeWidth());
    v.fit(window_.first, window_.second, 0.02);
    changeViewport(v);
  } else if (index_ && selected_ >= 0 && size_t(selected_) < index_->model().ranges.size()) {
    fitRange(selected_);
  } else {
    fitStep(int(std::max<int64_t>(0, currentStep())));
  }
}

bool TimelineWidget::clearSelection() {
  const bool any = selected_ >= 0 || window_.second > window_.first;
  window_ = {0, -1};
  selectRange(-1);
  update();
  return any;
}

bool TimelineWidget::runCommand(Command c) {
  TimelineViewport v = vp_;
  switch (c) {
    case Command::ZoomIn:
      v.zoom_at(zoomAnchorX(), 1.5);
      changeViewport(v);
      return true;
    case Command::ZoomOut:
      v.zoom_at(zoomAnchorX(), 1 / 1.5);
      changeViewport(v);
      return true;
    case Command::PanLeft:
      v.pan_px(-vp_.width_px / 8.0);
      changeViewport(v);
      return true;
    case Command::PanRight:
      v.pan_px(vp_.width_px / 8.0);
      changeViewport(v);
      return true;
    case Command::FitAll:
      fitAll();
      return true;
    case Command::FitSelection:
      fitSelection();
      return true;
    case Command::NextStep:
      nextStep();
      return true;
    case Command::PrevStep:
      prevStep();
      return true;
    case Command::NextCollective:
      nextCollective();
      return true;
    case Command::PrevCollective:
      prevCollective();
      return true;
    default:
      return false;
  }
}

void TimelineWidget::keyPressEvent(QKeyEvent* e) {
  // The keys come from the binding table (shortcuts.hpp), as the shortcut sheet lists them.
  for (const Binding& b : bindings()) {
    if (b.scope != BindingScope::Timeline || b.mouse || !key_matches(b.cmd, e)) continue;
    if (runCommand(b.cmd)) {
      e->accept();
      return;
    }
  }
  QWidget::keyPressEvent(e);
}

namespace {
// Launch -> kernel flows of the selection (cyan): from the CUDA runtime call to the kernel,
// the head at the kernel.
void paint_launch_flows(QPainter& p, const std::vector<LaunchFlow>& flows) {
  if (flows.empty()) return;
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QPen(QColor(0x4D, 0xD0, 0xE1), 2.0));
  for (const LaunchFlow& f : flows) {
    const QPointF a(f.x0, f.y0), b(f.x1, f.y1);
    p.drawLine(a, b);
    const double ang = std::atan2(a.y() - b.y(), a.x() - b.x());
    for (double s : {0.45, -0.45}) p.drawLine(b, b + QPointF(std::cos(ang + s) * 7, std::sin(ang + s) * 7));
  }
  p.setRenderHint(QPainter::Antialiasing, false);
}
}  // namespace

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor(0x1E, 0x1F, 0x24));
  if (!index_) {
    p.setPen(Qt::lightGray);
    p.drawText(rect(), Qt::AlignCenter, tr("No trace loaded"));
    return;
  }
  ensureDrawList();
  const int W = width(), H = height();
  const QFontMetrics fm = p.fontMetrics();

  // Items, translated to the time area (right of the gutter, under the ruler).
  p.save();
  p.setClipRect(gutter_, ruler_h_, W - gutter_, H - ruler_h_);
  p.translate(gutter_, ruler_h_);
  paintBackgrounds(p, W, H);
  paintShades(p);
  paintItems(p, fm);
  paintAllFlows(p);
  paintSelectedFlow(p);
  paint_launch_flows(p, launchFlows());
  paintWindow(p, H);
  p.restore();

  paintGutter(p, fm, H);
  paintRuler(p, W);
}

// Rank group backgrounds: scrolled ranks cut off under the pinned band, then pinned ones.
void TimelineWidget::paintBackgrounds(QPainter& p, int W, int H) {
  const float band = layout_.pinned_h;
  p.save();
  p.setClipRect(QRectF(0, band, W, H), Qt::IntersectClip);
  for (const auto& rl : layout_.ranks)
    if (!rl.pinned) p.fillRect(QRectF(0, rl.y - y_scroll_, W, rl.h), QColor(0x26, 0x28, 0x2E));
  p.restore();
  for (const auto& rl : layout_.ranks)
    if (rl.pinned) p.fillRect(QRectF(0, rl.y, W, rl.h), QColor(0x2A, 0x2C, 0x36));
  if (band > 0) {
    p.setPen(QColor(0x90, 0x90, 0xA0));
    p.drawLine(QPointF(0, band - 1), QPointF(W, band - 1));
  }
}

// Communication overlapping computation: translucent band over the rank's lanes and a
// solid marker under the rank header.
void TimelineWidget::paintShades(QPainter& p) {
  for (const auto& s : dl_.shades) {
    p.fillRect(QRectF(s.x, s.y, s.w, s.h), argb(kOverlapShadeArgb));
    p.fillRect(QRectF(s.x, s.y - 4, s.w, 3), QColor(0x00, 0xC8, 0x53));
  }
}

// The draw list's items: folds hatched with their count, ranges with their selection frame
// and label.
void TimelineWidget::paintItems(QPainter& p, const QFontMetrics& fm) {
  const auto& m = index_->model();
  for (const auto& it : dl_.items) {
    QColor c = argb(it.argb);
    if (it.flags & kDimmed) c.setAlpha(60);
    const QRectF r(it.x, it.y, std::max(it.w, 1.0f), it.h);
    if (it.flags & kFolded) {
      p.fillRect(r, c);
      p.fillRect(r, QBrush(QColor(0x50, 0x50, 0x50), Qt::BDiagPattern));
      if (it.w > 24) {
        p.setPen(Qt::white);
        p.drawText(r.adjusted(2, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft,
                   fm.elidedText(QString::number(it.count), Qt::ElideRight, int(it.w) - 4));
      }
      continue;
    }
    p.fillRect(r, c);
    if (it.flags & kSelected) {
      p.setPen(QPen(Qt::white, 2));
      p.drawRect(r.adjusted(1, 1, -1, -1));
    }
    if (it.w > 30 && it.name_id >= 0 && size_t(it.name_id) < m.strings.size()) {
      p.setPen(it.flags & kDimmed ? QColor(200, 200, 200, 90) : QColor(Qt::white));
      const QRectF tr2 = r.intersected(QRectF(0, r.y(), vp_.width_px, r.height())).adjusted(3, 0, -2, 0);
      // A label that would be only "…" (every all-to-all on a projector) gives way to the name's
      // first word when that fits ("a2a"), else to nothing.
      const QString name = QString::fromStdString(timeline_range_label(m, it.range));
      QString label = fm.elidedText(name, Qt::ElideRight, int(tr2.width()));
      if (label.size() <= 2 && label != name) {
        static const QRegularExpression sep(QStringLiteral("[\\s_:(/]"));
        const QString word = name.section(sep, 0, 0, QString::SectionSkipEmpty);
        label = fm.horizontalAdvance(word) <= int(tr2.width()) ? word : QString();
      }
      if (!label.isEmpty()) p.drawText(tr2, Qt::AlignVCenter | Qt::AlignLeft, label);
    }
  }
}

// Every collective in view: thin arrows from each arrival to the last one (no labels).
void TimelineWidget::paintAllFlows(QPainter& p) {
  if (all_flows_) {
    p.setRenderHint(QPainter::Antialiasing, true);
    p.setPen(QPen(QColor(255, 235, 59, 140), 1.0));
    for (const auto& g : flows_in_view(*index_, dl_)) {
      const QPointF b(g.back().x, g.back().y);
      for (size_t i = 0; i + 1 < g.size(); ++i) p.drawLine(QPointF(g[i].x, g[i].y), b);
    }
    p.setRenderHint(QPainter::Antialiasing, false);
  }
}

// Flow arrows: the selected collective's instances on every rank, each arrival -> the last
// arrival (the straggler); an arrow's length is the time that rank waited.
void TimelineWidget::paintSelectedFlow(QPainter& p) {
  if (selected_ >= 0) {
    // The instance's ranges are found once per selection (a pass over every range per repaint).
    if (flowFor_ != selected_ || flowIndex_ != index_.get()) {
      flowInstance_ = collective_instance(*index_, selected_);
      flowFor_ = selected_;
      flowIndex_ = index_.get();
    }
    FlowSummary sum;
    const auto flow = collective_flow(*index_, layout_, vp_, y_scroll_, flowInstance_, &sum);
    if (flow.size() > 1 || (!flow.empty() && sum.ranks > 1)) {
      const FlowPoint& last = flow.back();
      p.setRenderHint(QPainter::Antialiasing, true);
      p.setPen(QPen(QColor(255, 235, 59), 1.5));
      for (size_t i = 0; i + 1 < flow.size(); ++i) {
        const QPointF a(flow[i].x, flow[i].y), b(last.x, last.y);
        p.drawLine(a, b);
        const QLineF ln(b, a);  // arrow head at the last arrival
        const double ang = std::atan2(ln.dy(), ln.dx());
        for (double s : {0.45, -0.45}) p.drawLine(b, b + QPointF(std::cos(ang + s) * 8, std::sin(ang + s) * 8));
      }
      p.setPen(QColor(255, 235, 59));
      // Over every rank of the instance, hidden ones too; an instance a member rank lacks is
      // said (the analysis leaves it out).
      QString label = tr("last: rank %1%2, skew %3")
                          .arg(sum.last_rank)
                          .arg(sum.last_hidden ? tr(" (hidden)") : QString())
                          .arg(QString::fromStdString(format_duration_ns(double(sum.skew_ns))));
      if (sum.ranks < sum.group_ranks)
        label += tr("; incomplete: %1 of %2 ranks have it").arg(sum.ranks).arg(sum.group_ranks);
      p.drawText(QPointF(last.x + 4, last.y - 4), label);
      p.setRenderHint(QPainter::Antialiasing, false);
    }
  }
}

// The replay cursor, the selected window and the window being selected.
void TimelineWidget::paintWindow(QPainter& p, int H) {
  if (cursor_ns_ >= 0) {  // replay cursor: a line over every lane, with the time in the ruler's colour
    const double x = vp_.x_of(cursor_ns_);
    p.setPen(QPen(QColor(0xFF, 0xEB, 0x3B), 2));
    p.drawLine(QPointF(x, 0), QPointF(x, H));
  }
  if (!selecting_ && window_.second > window_.first) {  // the selected window, with its length
    const double a = vp_.x_of(window_.first), b = vp_.x_of(window_.second);
    p.fillRect(QRectF(a, 0, b - a, H), QColor(120, 170, 255, 45));
    p.setPen(QColor(120, 170, 255));
    p.drawLine(QPointF(a, 0), QPointF(a, H));
    p.drawLine(QPointF(b, 0), QPointF(b, H));
    p.setPen(Qt::white);
    p.drawText(QPointF(std::max(a, 0.0) + 4, 14),
               QString::fromStdString(format_duration_ns(double(window_.second - window_.first))));
  }
  if (selecting_) {
    const int a = std::min(press_pos_.x(), drag_x_) - gutter_, b = std::max(press_pos_.x(), drag_x_) - gutter_;
    p.fillRect(QRect(a, 0, b - a, H), QColor(120, 170, 255, 60));
    p.setPen(Qt::white);
    p.drawText(QRect(a, 4, std::max(b - a, 120), 16), Qt::AlignLeft,
               QString::fromStdString(format_duration_ns(double(b - a) * vp_.ns_per_px)));
  }
}

// Gutter: rank headers and lane names.
void TimelineWidget::paintGutter(QPainter& p, const QFontMetrics& fm, int H) {
  const auto& m = index_->model();
  const float band = layout_.pinned_h;
  p.fillRect(QRect(0, ruler_h_, gutter_, H - ruler_h_), QColor(0x2B, 0x2D, 0x33));
  // Two passes: the scrolled ranks (cut off under the pinned band), then the pinned ones.
  for (const bool pinned_pass : {false, true}) {
    p.save();
    p.setClipRect(0, ruler_h_, gutter_, H - ruler_h_);
    p.translate(0, ruler_h_ - (pinned_pass ? 0.0f : y_scroll_));
    if (!pinned_pass) p.setClipRect(QRectF(0, band + y_scroll_, gutter_, H), Qt::IntersectClip);
    for (const auto& rl : layout_.ranks) {
      if (rl.pinned != pinned_pass) continue;
      QFont f = p.font();
      f.setBold(true);
      p.setFont(f);
      p.setPen(QColor(230, 230, 230));
      p.drawText(QRectF(4, rl.y, gutter_ - 6, layout_.opt.rank_header_h), Qt::AlignVCenter | Qt::AlignLeft,
                 headerText(rl, QFontMetrics(f)));
      f.setBold(false);
      p.setFont(f);
      if (rl.collapsed && size_t(rl.pos) < index_->ranks().size()) {
        p.setPen(QColor(190, 190, 190));
        p.drawText(QRectF(12, rl.lanes_y, gutter_ - 14, layout_.opt.row_h), Qt::AlignVCenter | Qt::AlignLeft,
                   tr("%1 lanes, collapsed").arg(index_->ranks()[size_t(rl.pos)].lanes.size()));
      }
    }
    p.setPen(QColor(190, 190, 190));
    for (const auto& ll : layout_.lanes) {
      if (ll.hidden || ll.collapsed || (ll.y < band) != pinned_pass) continue;
      const auto& lane = m.lanes[size_t(ll.lane)];
      p.drawText(QRectF(12, ll.y, gutter_ - 14, layout_.opt.row_h), Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(QString::fromStdString(lane.name), Qt::ElideMiddle, gutter_ - 16));
    }
    p.restore();
  }
  if (band > 0) {
    p.setPen(QColor(0x90, 0x90, 0xA0));
    p.drawLine(QPointF(0, ruler_h_ + band - 1), QPointF(gutter_, ruler_h_ + band - 1));
  }
  if (layout_.hidden_ranks > 0) {  // "N ranks hidden - show all" (a click shows them)
    const QRect strip = hiddenStripRect();
    p.fillRect(strip, QColor(0x44, 0x4A, 0x5A));
    p.setPen(QColor(0xFF, 0xEB, 0x3B));
    const int n = layout_.hidden_ranks;
    p.drawText(strip.adjusted(4, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText((n == 1 ? tr("1 rank hidden") : tr("%1 ranks hidden").arg(n)) +
                                 QStringLiteral(" \u2014 ") + tr("show all"),
                             Qt::ElideRight, strip.width() - 6));
  }
}

// Ruler: ticks every 1/2/5 x 10^k ns, at least ~90 px and a label apart, labels that differ at
// every zoom (ruler_ticks); times from the trace start.
void TimelineWidget::paintRuler(QPainter& p, int W) {
  p.fillRect(QRect(0, 0, W, ruler_h_), QColor(0x33, 0x35, 0x3B));
  const int64_t base = index_->t_min();
  p.setPen(QColor(210, 210, 210));
  const double char_px = p.fontMetrics().horizontalAdvance(QStringLiteral("0000000000")) / 10.0;
  for (const RulerTick& tk :
       ruler_ticks(double(vp_.t0_ns - base), double(vp_.t1_ns() - base), vp_.ns_per_px, 90, char_px)) {
    const double x = gutter_ + vp_.x_of(base + int64_t(tk.t_ns));
    if (x < gutter_) continue;
    p.drawLine(QPointF(x, ruler_h_ - 8), QPointF(x, ruler_h_));
    p.drawText(QPointF(x + 3, ruler_h_ - 10), QString::fromStdString(tk.label));
  }
  p.drawText(QRect(4, 0, gutter_ - 8, ruler_h_), Qt::AlignVCenter | Qt::AlignLeft,
             tr("view %1").arg(QString::fromStdString(format_duration_ns(vp_.duration_ns()))));
}

}  // namespace ulysses::ui
