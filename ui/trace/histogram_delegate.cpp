// Histogram sparkline cells of the range statistics table.
#include "trace/histogram_delegate.hpp"

#include <QApplication>
#include <QPainter>
#include <algorithm>

#include "trace/trace_models.hpp"

namespace ulysses::ui {

void HistogramDelegate::paint(QPainter* p, const QStyleOptionViewItem& opt, const QModelIndex& index) const {
  const QVariantList counts = index.data(TableModel::HistogramRole).toList();
  if (counts.isEmpty()) {
    QStyledItemDelegate::paint(p, opt, index);
    return;
  }
  // Background (selection) without the text: the text ("min .. max") is the tooltip.
  QStyleOptionViewItem o = opt;
  initStyleOption(&o, index);
  o.text.clear();
  const QWidget* w = opt.widget;
  (w ? w->style() : QApplication::style())->drawControl(QStyle::CE_ItemViewItem, &o, p, w);
  qint64 top = 0;
  for (const QVariant& c : counts) top = std::max(top, c.toLongLong());
  if (top <= 0) return;
  const QRectF r = QRectF(opt.rect).adjusted(2, 2, -2, -2);
  const double bw = r.width() / double(counts.size());
  p->save();
  const QColor bar =
      (opt.state & QStyle::State_Selected) ? opt.palette.highlightedText().color() : opt.palette.text().color();
  for (int i = 0; i < counts.size(); ++i) {
    const qint64 c = counts[i].toLongLong();
    if (c <= 0) continue;
    const double h = std::max(1.0, r.height() * double(c) / double(top));
    p->fillRect(QRectF(r.left() + bw * i, r.bottom() - h, std::max(1.0, bw - 1), h), bar);
  }
  p->restore();
}

QSize HistogramDelegate::sizeHint(const QStyleOptionViewItem& opt, const QModelIndex& index) const {
  QSize s = QStyledItemDelegate::sizeHint(opt, index);
  const int n = int(index.data(TableModel::HistogramRole).toList().size());
  if (n > 0) s.setWidth(std::max(s.width(), n * 5 + 4));
  return s;
}

}  // namespace ulysses::ui
