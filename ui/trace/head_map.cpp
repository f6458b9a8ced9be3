// Head map view.
#include "trace/head_map.hpp"

#include <QHeaderView>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <set>

#include "trace/phase_style.hpp"

namespace ulysses::ui {

// The margins come from the font (presentation mode's 1.5x bold font): the head numbers' row over
// the grid, the rank names at the left, each rank's attention time at the right.
int HeadGridWidget::headerHeight() const { return fontMetrics().height() + 10; }
int HeadGridWidget::rankColumnWidth() const {
  return fontMetrics().horizontalAdvance(tr("rank %1").arg(ranks_.empty() ? 0 : ranks_.back())) + 16;
}
int HeadGridWidget::timeColumnWidth() const {
  return fontMetrics().horizontalAdvance(QStringLiteral("000.00 ms")) + 16;
}
int HeadGridWidget::rowHeight() const { return std::max(28, fontMetrics().height() + 8); }

HeadGridWidget::HeadGridWidget(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(120);
  setMouseTracking(true);
}

QSize HeadGridWidget::sizeHint() const {
  return QSize(800, headerHeight() + rowHeight() * std::max<int>(1, int(ranks_.size())) + 10);
}

void HeadGridWidget::setRows(std::vector<HeadMapRow> rows, int num_heads, int sp_size) {
  // A trace's claims are bounded before anything loops over them (2e9 heads would hang the loop).
  if (num_heads > kMaxHeadMapHeads || rows.size() > size_t(kMaxHeadMapRanks) * 64) {
    rows.clear();
    num_heads = 0;
  }
  rows_ = std::move(rows);
  heads_ = num_heads;
  sp_ = std::max(1, sp_size);
  std::set<int32_t> rk;
  for (const auto& r : rows_) rk.insert(r.rank);
  ranks_.assign(rk.begin(), rk.end());
  updateGeometry();
  update();
}

QRectF HeadGridWidget::cellRect(int row, int head) const {
  const int left = rankColumnWidth(), top = headerHeight();
  const double w = std::max(1.0, double(width() - left - timeColumnWidth()) / std::max(1, heads_));
  const double h =
      std::min(double(rowHeight()), std::max(8.0, double(height() - top - 6) / std::max<size_t>(1, ranks_.size())));
  return QRectF(left + head * w, top + row * h, w, h);
}

void HeadGridWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (heads_ <= 0 || ranks_.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("The trace names no attention heads (num_heads unknown)."));
    return;
  }
  int64_t max_att = 1;
  for (const auto& r : rows_) max_att = std::max(max_att, r.attention_ns);
  const QColor att = QColor::fromRgba(phase_argb(prof::Phase::Attention));
  // header: head numbers (every k-th when narrow: a number's width apart, at any font)
  const double cw = cellRect(0, 1).x() - cellRect(0, 0).x();
  const int numW = fontMetrics().horizontalAdvance(QString::number(std::max(0, heads_ - 1))) + 8;
  const int every = std::max(1, int(std::ceil(double(numW) / std::max(1.0, cw))));
  p.setPen(palette().text().color());
  for (int h = 0; h < heads_; h += every)
    p.drawText(QRectF(cellRect(0, h).x(), 4, numW, headerHeight() - 6), Qt::AlignLeft | Qt::AlignTop,
               QString::number(h));
  for (size_t ri = 0; ri < ranks_.size(); ++ri) {
    const int32_t rank = ranks_[ri];
    int64_t total = 0;
    for (int h = 0; h < heads_; ++h) {
      const QRectF c = cellRect(int(ri), h);
      QColor fill(235, 235, 235);
      for (const auto& r : rows_) {
        if (r.rank != rank) continue;
        const bool owned = h >= r.owned_begin && h < r.owned_end;
        const bool measured = r.head_begin < 0 ? owned : (h >= r.head_begin && h < r.head_end);
        if (!measured) continue;
        const double k = 0.25 + 0.75 * double(r.attention_ns) / double(max_att);
        fill = owned ? QColor::fromRgbF(1 - k * (1 - att.redF()), 1 - k * (1 - att.greenF()), 1 - k * (1 - att.blueF()))
                     : QColor(230, 60, 60);  // measured outside the owned heads
      }
      p.fillRect(c.adjusted(0.5, 0.5, -0.5, -0.5), fill);
    }
    for (const auto& r : rows_)
      if (r.rank == rank) total += r.attention_ns;
    // owned range outline
    for (const auto& r : rows_) {
      if (r.rank != rank || r.owned_end <= r.owned_begin) continue;
      p.setPen(QPen(QColor(40, 40, 40), 1.5));
      p.drawRect(cellRect(int(ri), r.owned_begin).united(cellRect(int(ri), r.owned_end - 1)));
      break;
    }
    p.setPen(palette().text().color());
    const QRectF c0 = cellRect(int(ri), 0);
    p.drawText(QRectF(4, c0.y(), rankColumnWidth() - 8, c0.height()), Qt::AlignVCenter | Qt::AlignLeft,
               tr("rank %1").arg(rank));
    p.drawText(QRectF(width() - timeColumnWidth() + 6, c0.y(), timeColumnWidth() - 8, c0.height()),
               Qt::AlignVCenter | Qt::AlignLeft, QString::fromStdString(format_duration_ns(double(total))));
  }
}

void HeadGridWidget::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::FontChange) {
    updateGeometry();
    update();
  }
}

bool HeadGridWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    for (size_t ri = 0; ri < ranks_.size(); ++ri) {
      for (int h = 0; h < heads_; ++h) {
        if (!cellRect(int(ri), h).contains(he->pos())) continue;
        QString s = tr("rank %1, head %2").arg(ranks_[ri]).arg(h);
        for (const auto& r : rows_) {
          if (r.rank != ranks_[ri]) continue;
          const bool in =
              r.head_begin < 0 ? (h >= r.owned_begin && h < r.owned_end) : (h >= r.head_begin && h < r.head_end);
          if (!in) continue;
          s += tr("<br>owned heads %1-%2<br>attention %3<br>a2a seq->head %4<br>a2a head->seq %5")
                   .arg(r.owned_begin)
                   .arg(r.owned_end - 1)
                   .arg(QString::fromStdString(format_duration_ns(double(r.attention_ns))),
                        QString::fromStdString(format_duration_ns(double(r.a2a_seq_to_head_ns))),
                        QString::fromStdString(format_duration_ns(double(r.a2a_head_to_seq_ns))));
        }
        QToolTip::showText(he->globalPos(), s, this);
        return true;
      }
    }
    QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

HeadMapView::HeadMapView(QWidget* parent) : QWidget(parent) {
  auto* lay = new QVBoxLayout(this);
  caption_ = new QLabel(this);
  caption_->setObjectName(QStringLiteral("headMapCaption"));
  caption_->setWordWrap(true);
  caption_->setTextFormat(Qt::RichText);
  connect(caption_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link == QLatin1String("memory")) emit memoryRequested();
  });
  grid_ = new HeadGridWidget(this);
  own_ = new TableModel(this);
  ranges_ = new TableModel(this);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(grid_);
  split->addWidget(make_sorted_table(own_, this));
  split->addWidget(make_sorted_table(ranges_, this));
  lay->addWidget(caption_);
  lay->addWidget(split, 1);
}

void HeadMapView::setTrace(std::shared_ptr<const prof::TraceModel> model,
                           std::shared_ptr<const prof::Summary> summary) {
  if (!model) {
    grid_->setRows({}, 0, 1);
    own_->setTable({});
    ranges_->setTable({});
    caption_->clear();
    return;
  }
  const int H = trace_num_heads(*model);
  if (H > kMaxHeadMapHeads || H < 0 || model->ranks.size() > size_t(kMaxHeadMapRanks) ||
      model->sp_size > kMaxHeadMapRanks) {
    // Claims no real run makes: refuse to draw (and to compute owned ranges, whose
    // products overflow) instead of looping over billions of cells.
    grid_->setRows({}, 0, 1);
    own_->setTable({});
    ranges_->setTable(summary ? head_range_table_data(*summary) : TableData{});
    caption_->setText(tr("The trace claims %1 attention heads over %2 ranks (sp_size %3); the head map draws at most "
                         "%4 heads and %5 ranks.")
                          .arg(H)
                          .arg(model->ranks.size())
                          .arg(model->sp_size)
                          .arg(kMaxHeadMapHeads)
                          .arg(kMaxHeadMapRanks));
    return;
  }
  auto rows = head_map_rows(*model);
  // Heads the ranges name past the model's count get columns of their own, red (measured where
  // no rank owns heads): without them such heads fall off the grid and the rank's row looks blank.
  int grid_heads = H;
  for (const auto& r : rows) grid_heads = std::max(grid_heads, std::min<int>(r.head_end, kMaxHeadMapHeads));
  QString caption =
      tr("sp_size %1, %2 attention heads: after the seq->head all-to-all, rank r owns heads [r*%2/%1, (r+1)*%2/%1). "
         "Cells are shaded by measured attention time; red cells were measured outside the owned heads.")
          .arg(std::max(1, model->sp_size))
          .arg(H);
  if (grid_heads > H)
    caption += tr(" Heads %1-%2 are past the model's %3: the trace names heads the model does not have.")
                   .arg(H)
                   .arg(grid_heads - 1)
                   .arg(H);
  if (!model->memory_categories.empty())  // memory by category recorded: say where it is
    caption += tr(" <a href=\"memory\">Memory by category over the step ▸</a>");
  caption_->setText(caption);
  grid_->setRows(rows, grid_heads, model->sp_size);
  own_->setTable(head_map_table(rows));
  ranges_->setTable(summary ? head_range_table_data(*summary) : TableData{});
}

}  // namespace ulysses::ui
