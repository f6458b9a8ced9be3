// Documents per rank shard: strip and table (documents_view.hpp).
#include "trace/documents_view.hpp"

#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <map>
#include <tuple>

#include "ulysses/profiler/report.hpp"

namespace ulysses::ui {

namespace {
constexpr int kStripLabelPx = 64, kStripRowPx = 28, kStripTopPx = 22, kStripPadPx = 6;

// A document's colour: the same on every rank, neighbours apart (golden-angle hues).
QColor document_colour(int64_t document) {
  if (document < 0) return QColor(200, 200, 200);
  const int hue = int((document * 137) % 360);
  return QColor::fromHsv(hue, 150, 225);
}
}  // namespace

std::vector<DocumentStripRow> document_strip_rows(const std::vector<prof::DocumentShard>& d, int64_t step,
                                                  int64_t sequence, int64_t* length) {
  std::map<int32_t, DocumentStripRow> by_rank;
  int64_t len = 0;
  for (const auto& x : d) {
    if (x.step != step || x.sequence != sequence) continue;
    auto& row = by_rank[x.rank];
    row.rank = x.rank;
    row.blocks.push_back({x.document, x.begin, x.end, x.held_begin(), x.held_end()});
    len = std::max({len, x.end, x.shard_end});
  }
  std::vector<DocumentStripRow> out;
  for (auto& [rank, row] : by_rank) {
    std::sort(row.blocks.begin(), row.blocks.end(), [](const DocumentBlock& a, const DocumentBlock& b) {
      return std::tie(a.begin, a.held_begin) < std::tie(b.begin, b.held_begin);
    });
    out.push_back(std::move(row));
  }
  if (length) *length = len;
  return out;
}

TableData documents_table(const std::vector<prof::DocumentShard>& d) {
  TableData t;
  t.headers = {"step", "sequence", "packed", "rank", "piece", "shard", "documents"};
  for (size_t i = 0; i < d.size();) {
    const auto& h = d[i];
    QString docs;
    size_t k = i;
    for (; k < d.size() && d[k].step == h.step && d[k].sequence == h.sequence && d[k].rank == h.rank &&
           d[k].piece == h.piece;
         ++k)
      docs += (k == i ? QString() : QStringLiteral("; ")) + QString::fromStdString(prof::document_part_text(d[k]));
    t.add({qint64(h.step), qint64(h.sequence), qint64(h.packed), h.rank, h.piece,
           QStringLiteral("[%1, %2)").arg(h.shard_begin).arg(h.shard_end), docs},
          {qint64(h.step), qint64(h.sequence), qint64(h.packed), h.rank, h.piece, qint64(h.shard_begin), docs},
          qint64(i));
    i = k;
  }
  return t;
}

DocumentStripWidget::DocumentStripWidget(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("documentStrip"));
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

void DocumentStripWidget::setRows(std::vector<DocumentStripRow> rows, int64_t length) {
  rows_ = std::move(rows);
  length_ = length;
  updateGeometry();
  update();
}

QSize DocumentStripWidget::sizeHint() const {
  return {480, kStripTopPx + kStripRowPx * std::max<int>(1, int(rows_.size())) + kStripPadPx};
}
QSize DocumentStripWidget::minimumSizeHint() const { return {240, sizeHint().height()}; }

void DocumentStripWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  p.setPen(palette().text().color());
  if (rows_.empty() || length_ <= 0) {
    p.drawText(rect(), Qt::AlignCenter, tr("No documents recorded for this step and sequence."));
    return;
  }
  const double x0 = kStripLabelPx, w = std::max(1.0, double(width() - kStripLabelPx - kStripPadPx));
  auto px = [&](int64_t pos) { return x0 + w * double(pos) / double(length_); };
  // The axis: positions 0 and N, and the borders of rank 0's first piece for scale.
  p.drawText(QRectF(x0, 2, 80, kStripTopPx - 4), Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("0"));
  p.drawText(QRectF(x0 + w - 80, 2, 80, kStripTopPx - 4), Qt::AlignRight | Qt::AlignVCenter, QString::number(length_));
  p.drawText(QRectF(x0, 2, w, kStripTopPx - 4), Qt::AlignHCenter | Qt::AlignVCenter,
             tr("positions in the packed sequence"));
  const QFontMetrics fm(font());
  for (size_t r = 0; r < rows_.size(); ++r) {
    const double y = kStripTopPx + double(r) * kStripRowPx;
    p.setPen(palette().text().color());
    p.drawText(QRectF(2, y, kStripLabelPx - 6, kStripRowPx - 4), Qt::AlignRight | Qt::AlignVCenter,
               tr("rank %1").arg(rows_[r].rank));
    for (const auto& b : rows_[r].blocks) {
      const QRectF whole(px(b.begin), y + 2, px(b.end) - px(b.begin), kStripRowPx - 8);
      QColor faded = document_colour(b.document);
      faded.setAlpha(60);
      p.fillRect(whole, faded);  // the document's part in the sequence, another rank's where faded
      const QRectF held(px(b.held_begin), y + 2, px(b.held_end) - px(b.held_begin), kStripRowPx - 8);
      p.fillRect(held, document_colour(b.document));
      p.setPen(QColor(60, 60, 60));
      p.drawRect(whole);
      const QString label = b.document < 0 ? tr("pad") : QStringLiteral("#%1").arg(b.document);
      if (fm.horizontalAdvance(label) + 4 < held.width()) p.drawText(held, Qt::AlignCenter, label);
    }
  }
}

DocumentsView::DocumentsView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("documentsView"));
  auto* lay = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  step_ = new QSpinBox(this);
  step_->setObjectName(QStringLiteral("documentsStep"));
  sequence_ = new QSpinBox(this);
  sequence_->setObjectName(QStringLiteral("documentsSequence"));
  bar->addWidget(new QLabel(tr("Step"), this));
  bar->addWidget(step_);
  bar->addWidget(new QLabel(tr("Sequence"), this));
  bar->addWidget(sequence_);
  bar->addStretch(1);
  lay->addLayout(bar);
  caption_ = new QLabel(this);
  caption_->setWordWrap(true);
  lay->addWidget(caption_);
  strip_ = new DocumentStripWidget(this);
  lay->addWidget(strip_);
  table_ = new TableModel(this);
  auto* view = make_sorted_table(table_, this);
  view->setObjectName(QStringLiteral("documentsTable"));
  lay->addWidget(view, 1);
  connect(step_, qOverload<int>(&QSpinBox::valueChanged), this, [this] { redraw(); });
  connect(sequence_, qOverload<int>(&QSpinBox::valueChanged), this, [this] { redraw(); });
  // A row of the table shows its step and sequence in the strip.
  connect(view, &QTableView::activated, this, [this, view](const QModelIndex& ix) {
    const qint64 i = view->model()->data(ix, TableModel::KeyRole).toLongLong();
    if (i < 0 || size_t(i) >= d_.size()) return;
    step_->setValue(int(d_[size_t(i)].step));
    sequence_->setValue(int(d_[size_t(i)].sequence));
  });
}

void DocumentsView::setDocuments(std::vector<prof::DocumentShard> d) {
  d_ = std::move(d);
  int64_t s0 = 0, s1 = 0, q1 = 0;
  for (size_t i = 0; i < d_.size(); ++i) {
    s0 = i == 0 ? d_[i].step : std::min(s0, d_[i].step);
    s1 = i == 0 ? d_[i].step : std::max(s1, d_[i].step);
    q1 = std::max(q1, d_[i].sequence);
  }
  const QSignalBlocker b1(step_), b2(sequence_);
  step_->setRange(int(s0), int(s1));
  step_->setValue(int(s0));
  sequence_->setRange(0, int(q1));
  sequence_->setValue(0);
  table_->setTable(documents_table(d_));
  redraw();
}

void DocumentsView::redraw() {
  int64_t length = 0;
  auto rows = document_strip_rows(d_, step_->value(), sequence_->value(), &length);
  std::map<int64_t, bool> docs;
  for (const auto& r : rows)
    for (const auto& b : r.blocks)
      if (b.document >= 0) docs[b.document] = true;
  caption_->setText(
      rows.empty()
          ? tr("No documents recorded for step %1, sequence %2.").arg(step_->value()).arg(sequence_->value())
          : tr("Step %1, sequence %2: %3 document(s) over %4 rank(s). Solid: the part of a document in the rank's "
               "own shard; faded: the same document on another rank (after the sequence-to-head all-to-all "
               "every rank attends over the whole sequence).")
                .arg(step_->value())
                .arg(sequence_->value())
                .arg(qint64(docs.size()))
                .arg(qint64(rows.size())));
  strip_->setRows(std::move(rows), length);
}

}  // namespace ulysses::ui
