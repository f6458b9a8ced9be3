// Item delegate that paints a row's histogram (TableModel::HistogramRole bucket counts) as a
// sparkline of bars, tallest = full cell height (Tracy's per-zone histogram, in a table cell).
// Cells without counts paint as usual.
#pragma once

#include <QStyledItemDelegate>

namespace ulysses::ui {

class HistogramDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  explicit HistogramDelegate(QObject* parent = nullptr) : QStyledItemDelegate(parent) {}
  void paint(QPainter* p, const QStyleOptionViewItem& opt, const QModelIndex& index) const override;
  QSize sizeHint(const QStyleOptionViewItem& opt, const QModelIndex& index) const override;
};

}  // namespace ulysses::ui
