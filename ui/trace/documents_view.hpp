// Documents per rank shard (data.kind = "documents", docs/STUDIO.md): for one step and sequence,
// a strip per rank over the packed sequence's positions, each document a coloured block (the
// same colour on every rank), the rank's own pieces drawn solid and the rest faded, so a cut at a
// shard border shows at a glance; below it the table of every recorded row, one line per
// (step, sequence, rank, piece) with the documents as `ulysses-trace summary` writes them.
#pragma once

#include <QWidget>
#include <vector>

#include "trace/trace_models.hpp"

class QLabel;
class QSpinBox;

namespace ulysses::ui {

// One block of a rank's strip: a document part [begin, end) of the sequence, the part the rank
// holds [held_begin, held_end) (empty: another rank's), its document (-1: padding).
struct DocumentBlock {
  int64_t document = -1;
  int64_t begin = 0, end = 0, held_begin = 0, held_end = 0;
};
struct DocumentStripRow {
  int32_t rank = 0;
  std::vector<DocumentBlock> blocks;  // by begin; one per (piece, part) the rank's pieces overlap
};
// The strip rows of (step, sequence), ranks ascending; *length = the sequence's length (the
// largest position seen). Empty when the trace has no such rows.
std::vector<DocumentStripRow> document_strip_rows(const std::vector<prof::DocumentShard>& d, int64_t step,
                                                  int64_t sequence, int64_t* length);
// step, sequence, packed, rank, piece, shard, documents (document_part_text); key = the
// first row's index in `d`.
TableData documents_table(const std::vector<prof::DocumentShard>& d);

class DocumentStripWidget : public QWidget {
  Q_OBJECT
 public:
  explicit DocumentStripWidget(QWidget* parent = nullptr);
  void setRows(std::vector<DocumentStripRow> rows, int64_t length);
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  std::vector<DocumentStripRow> rows_;
  int64_t length_ = 0;
};

class DocumentsView : public QWidget {
  Q_OBJECT
 public:
  explicit DocumentsView(QWidget* parent = nullptr);
  void setDocuments(std::vector<prof::DocumentShard> d);
  TableModel* tableModel() const { return table_; }
  DocumentStripWidget* strip() const { return strip_; }
  QSpinBox* stepBox() const { return step_; }
  QSpinBox* sequenceBox() const { return sequence_; }

 private:
  void redraw();
  std::vector<prof::DocumentShard> d_;
  DocumentStripWidget* strip_;
  QSpinBox *step_, *sequence_;
  QLabel* caption_;
  TableModel* table_;
};

}  // namespace ulysses::ui
