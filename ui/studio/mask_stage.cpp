// The explainer's document-mask stage (mask_stage.hpp).
#include "mask_stage.hpp"

#include <QFontMetrics>
#include <QPainter>
#include <algorithm>

namespace ulysses::ui {

namespace {
const QColor kMaskLive(0x00, 0x72, 0xB2);  // Okabe-Ito blue: attention computed
const QColor kMaskDoc(0xE6, 0x9F, 0x00);   // documents along the axes

// The documents along an axis: alternating shades, numbered when there is room.
void document_axis(QPainter& p, const QRectF& r, bool horizontal, const DocumentMaskPicture& m) {
  int64_t pos = 0;
  for (size_t i = 0; i < m.docs.size(); ++i) {
    const double a = double(pos) / double(m.N), b = double(pos + m.docs[i]) / double(m.N);
    const QRectF d = horizontal ? QRectF(r.left() + a * r.width(), r.top(), (b - a) * r.width(), r.height())
                                : QRectF(r.left(), r.top() + a * r.height(), r.width(), (b - a) * r.height());
    const bool pad = m.padding > 0 && i + 1 == m.docs.size();
    p.setPen(QPen(kMaskDoc.darker(150), 1));
    p.setBrush(pad ? QColor(200, 200, 200) : (i % 2 ? kMaskDoc.lighter(130) : kMaskDoc));
    p.drawRect(d);
    pos += m.docs[i];
  }
}
}  // namespace

void paint_document_mask(QPainter& p, const QRectF& area, const DocumentMaskPicture& m, const QPalette& pal,
                         const MaskText& text) {
  if (!m.ok || m.G <= 0) return;
  const QColor fg = pal.color(QPalette::WindowText);
  // Every label in the text colour, whatever the last drawing's pen was.
  const auto say = [&](const QRectF& r, int flags, const QString& s) {
    p.setPen(fg);
    text(p, r, flags, s);
  };
  const double line = QFontMetrics(p.font()).height();
  const bool ring = m.R > 1 && !m.ring.empty();
  // Left: the mask; right (a ring): the hops.
  const double leftW = ring ? area.width() * 0.5 : area.width();
  const double side = std::max(40.0, std::min(leftW - 40, area.height() - 2 * line - 24));
  const QRectF grid(area.left() + 28, area.top() + line + 14, side, side);
  say(QRectF(area.left(), area.top(), leftW, line + 4), Qt::AlignCenter,
      QStringLiteral("mask of one sequence (queries down, keys across), %1 x %1 blocks").arg(m.G));
  document_axis(p, QRectF(grid.left(), grid.top() - 8, grid.width(), 6), true, m);
  document_axis(p, QRectF(grid.left() - 8, grid.top(), 6, grid.height()), false, m);
  const double cw = grid.width() / double(m.G);
  int64_t skipped = 0, causal_blocks = 0;
  for (const auto& c : m.cells) {
    if (c.causal == 0) continue;  // above the diagonal: never computed
    ++causal_blocks;
    const int64_t qb = c.q0 * m.G / m.N, kb = c.k0 * m.G / m.N;
    const QRectF r(grid.left() + double(kb) * cw, grid.top() + double(qb) * cw, cw, cw);
    p.setPen(QPen(pal.color(QPalette::Mid), 1));
    if (c.skipped()) {
      ++skipped;
      p.setBrush(Qt::NoBrush);
      p.drawRect(r);
      p.drawLine(r.topLeft(), r.bottomRight());  // crossed out: the kernel skips it
      continue;
    }
    QColor fill = kMaskLive;
    if (!c.full()) fill.setAlpha(int(60 + 160 * double(c.live) / double((c.q1 - c.q0) * (c.k1 - c.k0))));
    p.setBrush(fill);
    p.drawRect(r);
  }
  say(QRectF(area.left(), grid.bottom() + 6, leftW, line + 4), Qt::AlignCenter,
      QStringLiteral("%1 of %2 causal blocks skipped; %3% of the causal pairs kept")
          .arg(skipped)
          .arg(causal_blocks)
          .arg(100.0 * m.kept(), 0, 'f', 1));
  if (!ring) return;
  // Right: one row per ring rank, one column per hop; in each cell the (q, kv) chunk blocks it
  // computes, crossed out where the mask empties them.
  const QRectF hops(area.left() + leftW + 16, grid.top(), area.width() - leftW - 24, grid.height());
  say(QRectF(hops.left(), area.top(), hops.width(), line + 4), Qt::AlignCenter,
      QStringLiteral("ring of %1%2: blocks per rank and hop")
          .arg(m.R)
          .arg(m.zigzag ? QStringLiteral(", zigzag") : QString()));
  const double labelW = 56, rowH = (hops.height() - line - 4) / double(m.R),
               colW = (hops.width() - labelW) / double(m.R);
  for (int64_t h = 0; h < m.R; ++h)
    say(QRectF(hops.left() + labelW + double(h) * colW, hops.top(), colW, line + 2), Qt::AlignCenter,
        QStringLiteral("hop %1").arg(h));
  for (int64_t r = 0; r < m.R; ++r) {
    const double y = hops.top() + line + 4 + double(r) * rowH;
    say(QRectF(hops.left(), y, labelW - 4, rowH), Qt::AlignRight | Qt::AlignVCenter, QStringLiteral("rank %1").arg(r));
    for (int64_t h = 0; h < m.R; ++h) {
      std::vector<const MaskRingCell*> cells;
      for (const auto& c : m.ring)
        if (c.rank == r && c.hop == h) cells.push_back(&c);
      const QRectF cell(hops.left() + labelW + double(h) * colW + 2, y + 2, colW - 4, rowH - 4);
      p.setPen(QPen(pal.color(QPalette::Mid), 1));
      p.setBrush(Qt::NoBrush);
      p.drawRect(cell);
      const double bw = cell.width() / double(std::max<size_t>(1, cells.size()));
      for (size_t i = 0; i < cells.size(); ++i) {
        const QRectF b(cell.left() + double(i) * bw + 2, cell.top() + 2, bw - 4, cell.height() - 4);
        if (cells[i]->live == 0) {
          p.setPen(QPen(fg, 1));
          p.drawLine(b.topLeft(), b.bottomRight());
          p.drawLine(b.bottomLeft(), b.topRight());
        } else {
          QColor fill = kMaskLive;
          fill.setAlpha(int(60 + 160 * double(cells[i]->live) / double(std::max<int64_t>(1, cells[i]->causal))));
          p.setPen(QPen(kMaskLive.darker(150), 1));
          p.setBrush(fill);
          p.drawRect(b);
        }
        // Which block: query chunk and K/V chunk, where the words fit.
        const QString name = QStringLiteral("q%1 kv%2").arg(cells[i]->q_chunk).arg(cells[i]->kv_chunk);
        const QFontMetrics fm(p.font());
        if (fm.horizontalAdvance(name) + 6 < b.width() && fm.height() + 4 < b.height())
          say(QRectF(b.left(), b.bottom() - fm.height() - 2, b.width(), fm.height() + 2), Qt::AlignCenter, name);
      }
    }
  }
  say(QRectF(hops.left(), grid.bottom() + 6, hops.width(), line + 4), Qt::AlignCenter,
      QStringLiteral("%1 of %2 hop blocks skipped (crossed)").arg(m.ring_skipped).arg(m.ring_blocks));
}

QString document_mask_caption(const DocumentMaskPicture& m) {
  if (!m.ok) return {};
  QStringList docs;
  for (size_t i = 0; i < m.docs.size() && i < 12; ++i)
    docs << ((m.padding > 0 && i + 1 == m.docs.size()) ? QStringLiteral("%1 padding").arg(m.docs[i])
                                                       : QString::number(m.docs[i]));
  if (m.docs.size() > 12) docs << QStringLiteral("…");
  QString s = QStringLiteral(
                  "Packed documents (data.kind = documents): %1, documents of %2 tokens. Each token attends "
                  "only to earlier tokens of its own document, so the mask is block-diagonal: attention keeps "
                  "%3% of the causal (query, key) pairs, and the kernels skip the blocks it empties.")
                  .arg(m.source.toHtmlEscaped(), docs.join(QStringLiteral(", ")))
                  .arg(100.0 * m.kept(), 0, 'f', 1);
  s += QStringLiteral(
      " With Ulysses every rank holds the whole sequence after the all-to-all, so the mask is the same on every "
      "rank (its heads differ).");
  if (m.R > 1)
    s += QStringLiteral(
             " With the ring, %1 of the %2 (query chunk, K/V chunk) blocks of the hops are empty and skipped.")
             .arg(m.ring_skipped)
             .arg(m.ring_blocks);
  return s;
}

}  // namespace ulysses::ui
