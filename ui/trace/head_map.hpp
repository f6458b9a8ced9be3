// Head map: which rank owns which attention heads after the seq->head all-to-all (rank r
// owns heads [r*H/P, (r+1)*H/P)), drawn as a rank x head grid shaded by measured attention
// time, with the per-(rank, head range) table and the analysis core's head-range table.
#pragma once

#include <QWidget>
#include <memory>
#include <vector>

#include "trace/trace_models.hpp"

class QTableView;
class QLabel;

namespace ulysses::ui {

// Largest claims the head map draws (a trace file is input: it may claim anything).
inline constexpr int kMaxHeadMapHeads = 4096;
inline constexpr int kMaxHeadMapRanks = 1024;

class HeadGridWidget : public QWidget {
  Q_OBJECT
 public:
  explicit HeadGridWidget(QWidget* parent = nullptr);
  void setRows(std::vector<HeadMapRow> rows, int num_heads, int sp_size);
  QSize sizeHint() const override;
  // The header row, the rank and time columns and a row's height (at most), from the font:
  // they grow with presentation mode's font.
  int headerHeight() const;
  int rankColumnWidth() const;
  int timeColumnWidth() const;
  int rowHeight() const;

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;
  void changeEvent(QEvent* e) override;  // a font change (presentation mode) re-sizes the margins

 private:
  QRectF cellRect(int row, int head) const;
  std::vector<HeadMapRow> rows_;
  std::vector<int32_t> ranks_;
  int heads_ = 0, sp_ = 1;
};

class HeadMapView : public QWidget {
  Q_OBJECT
 public:
  explicit HeadMapView(QWidget* parent = nullptr);
  void setTrace(std::shared_ptr<const prof::TraceModel> model, std::shared_ptr<const prof::Summary> summary);
  TableModel* ownershipModel() const { return own_; }
  TableModel* headRangeModel() const { return ranges_; }

 signals:
  // The caption's link to the memory view (shown when the trace has memory by category).
  void memoryRequested();

 private:
  HeadGridWidget* grid_;
  QLabel* caption_;
  TableModel* own_;
  TableModel* ranges_;
};

}  // namespace ulysses::ui
