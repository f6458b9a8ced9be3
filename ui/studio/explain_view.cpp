// Explainer view: controls and painting (see explain_view.hpp).
#include "explain_view.hpp"

#include <QApplication>
#include <QFrame>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QFontMetrics>
#include <QPainter>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QMessageBox>
#include <QSlider>
#include <QTimer>
#include <QVBoxLayout>

#include "cost_model.hpp"
#include "explain_controls.hpp"
#include "trace/phase_style.hpp"
#include "trace/qt_text.hpp"
#include "mask_stage.hpp"
#include "trace/shortcuts.hpp"

#include <algorithm>
#include <cmath>

namespace ulysses::ui {

namespace {
const QColor kHidden(150, 150, 150);
const QColor kQ(0x00, 0x72, 0xB2);  // Okabe-Ito: safe for colour-blind viewers
const QColor kKv(0xE6, 0x9F, 0x00);
const QColor kOut(0x00, 0x9E, 0x73);
}  // namespace

// Draws the current stage: one column per rank; in each, P token-shard rows and H q-head
// columns (plus Hkv kv-head columns), filled where the rank holds data.
class ExplainCanvas : public QWidget {
 public:
  explicit ExplainCanvas(QWidget* parent) : QWidget(parent) { setMinimumSize(480, 200); }
  const Explanation* e = nullptr;
  const WeightPlacement* w = nullptr;
  const RingHops* rh = nullptr;
  const DocumentMaskPicture* mask = nullptr;
  bool mask_stage = false;
  int stage = 0, hop = 0;
  double motion = 1.0;             // the all-to-all stages' movement, 0 (before) .. 1 (after)
  std::vector<ExplainText> texts;  // what the last paint wrote (ExplainView::drawnTexts)

 protected:
  // Writes `s` in `r`; a text its rectangle cannot hold is written smaller (down to 6 pt), never
  // over its neighbours (presentation mode's 1.5x bold fonts overflowed the fixed boxes).
  void text(QPainter& p, const QRectF& r, int flags, const QString& s) {
    const QFont saved = p.font();
    QFont f = saved;
    QRectF need = p.boundingRect(r, flags, s);
    while ((need.width() > r.width() + 0.5 || need.height() > r.height() + 0.5) && f.pointSizeF() > 6.0) {
      f.setPointSizeF(std::max(6.0, f.pointSizeF() - 0.5));
      p.setFont(f);
      need = p.boundingRect(r, flags, s);
    }
    texts.push_back({r, need, s});
    p.drawText(r, flags, s);
    p.setFont(saved);
  }

  void paintEvent(QPaintEvent*) override {
    texts.clear();
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QColor fg = palette().color(QPalette::WindowText);
    if (!e || !e->ok || e->stages.empty()) return;
    if (mask_stage && mask)
      return paint_document_mask(p, QRectF(rect()).adjusted(8, 4, -8, -4), *mask, palette(),
                                 [this](QPainter& q, const QRectF& r, int f, const QString& s) { text(q, r, f, s); });
    if (stage >= static_cast<int>(e->stages.size())) {
      if (w && w->ok) paintWeights(p, fg);
      return;
    }
    if (e->R > 1 && stage == 3 && rh && !rh->hops.empty()) return paintRing(p, fg);
    paintLayer(p, fg);
  }

  // One stage of the layer: one column per rank, each a grid of token-shard rows and q-head
  // columns (plus kv-head columns), filled with the pieces the rank holds (stage_pieces). On an
  // all-to-all stage the pieces move from the rank that held them to the rank that holds them as
  // `motion` goes 0 -> 1 (a piece keeps its row and heads, so only its column changes); the stage
  // before an all-to-all is that all-to-all at 0, so its pieces are the ones about to move.
  void paintLayer(QPainter& p, const QColor& fg) {
    const auto& st = e->stages[static_cast<size_t>(stage)];
    const int P = static_cast<int>(e->P), H = static_cast<int>(e->H), K = static_cast<int>(e->Hkv);
    const int margin = 16, gap = 18;
    const int colW = (width() - 2 * margin - gap * (P - 1)) / std::max(1, P);
    QFont small = font();
    small.setPointSizeF(std::max(7.0, font().pointSizeF() - 1));
    const int line = QFontMetrics(font()).height(), sline = QFontMetrics(small).height();
    // Rows of text from the fonts' heights: the rank over the grid, the heads under it, the bytes
    // below (room kept on every stage, so the grids stay in place from stage to stage).
    const int top = line + 8, bottom = sline * 3 + 12;
    const int gridH = std::max(60, height() - top - bottom);
    const double rowH = double(gridH) / P;  // one row per token shard of N/P tokens
    const int kvW = std::max(18, colW * K / (H + K + 1));
    const int qW = colW - kvW - 6;
    const double cellQ = double(qW) / H, cellK = double(kvW) / K;
    auto colX = [&](int64_t r) { return double(margin + r * (colW + gap)); };
    for (int r = 0; r < P; ++r) {
      const double x0 = colX(r);
      p.setPen(fg);
      p.setFont(font());
      text(p, QRectF(x0, 0, colW, top - 4), Qt::AlignCenter, QStringLiteral("rank %1").arg(r));
      p.setPen(QPen(palette().color(QPalette::Mid), 1));
      p.setBrush(Qt::NoBrush);
      p.drawRect(QRectF(x0, top, qW, gridH));
      p.drawRect(QRectF(x0 + qW + 6, top, kvW, gridH));
    }
    const bool a2a = is_all_to_all_stage(*e, stage);
    const bool before_a2a = !a2a && is_all_to_all_stage(*e, stage + 1);
    const std::vector<MovedPiece> pieces = stage_pieces(*e, before_a2a ? stage + 1 : stage);
    const double t = a2a ? std::clamp(motion, 0.0, 1.0) : before_a2a ? 0.0 : 1.0;
    const double k = t * t * (3 - 2 * t);  // eased: starts and lands gently
    std::vector<QRectF> drawn;             // copies of a replicated kv head that start at one place: drawn once
    for (int pass = 0; pass < 2; ++pass)   // the pieces that stay, then those moving (over them)
      for (const MovedPiece& m : pieces) {
        const int64_t from = m.from < 0 ? m.to : m.from;
        if ((from != m.to) != (pass == 1)) continue;
        const double x = colX(from) + (colX(m.to) - colX(from)) * k;
        const double y = top + rowH * double(m.shard);
        const bool kv = m.kind == HeadBlock::KV;
        const double cw = kv ? cellK : cellQ;
        const QRectF rect(x + (kv ? qW + 6 : 0) + cw * double(m.head_begin), y, cw * double(m.head_end - m.head_begin),
                          rowH);
        if (std::find(drawn.begin(), drawn.end(), rect) != drawn.end()) continue;
        drawn.push_back(rect);
        const QColor c = kv ? kKv : m.kind == HeadBlock::Hidden ? kHidden : m.kind == HeadBlock::Q ? kQ : kOut;
        // one shade per token shard of origin, so the shards can be followed through the exchange
        p.setPen(QPen(c.darker(150), 1));
        p.setBrush(c.lighter(100 + 25 * static_cast<int>(m.shard % 3)));
        p.drawRect(rect.adjusted(1, 1, -1, -1));
        p.setPen(QPen(c.darker(130), 1, Qt::DotLine));  // head boundaries
        for (int64_t hd = m.head_begin + 1; hd < m.head_end; ++hd) {
          const double hx = rect.left() + cw * double(hd - m.head_begin);
          p.drawLine(QPointF(hx, rect.top() + 1), QPointF(hx, rect.bottom() - 1));
        }
        p.setBrush(Qt::NoBrush);
        if (m.replicated) {  // a copy of a kv head: hatched
          p.setBrush(QBrush(c.darker(170), Qt::BDiagPattern));
          p.drawRect(rect.adjusted(1, 1, -1, -1));
        }
      }
    for (int r = 0; r < P; ++r) {
      const double x0 = colX(r);
      p.setPen(fg);
      p.setFont(small);
      const QString heads = QFontMetrics(small).horizontalAdvance(QStringLiteral("q heads 0..%1").arg(H - 1)) < qW
                                ? QStringLiteral("q heads 0..%1").arg(H - 1)
                                : QStringLiteral("q 0..%1").arg(H - 1);
      text(p, QRectF(x0, top + gridH + 2, qW, sline + 2), Qt::AlignCenter, heads);
      text(p, QRectF(x0 + qW + 6, top + gridH + 2, kvW, sline + 2), Qt::AlignCenter, QStringLiteral("kv"));
      if (st.bytes_sent > 0 && t > 0)  // from the start of the exchange on
        text(p, QRectF(x0, top + gridH + sline + 6, colW, 2 * sline + 4), Qt::AlignHCenter | Qt::AlignTop,
             QStringLiteral("sends %1\nreceives %2")
                 .arg(to_qs(cost::format_bytes(double(st.bytes_sent))),
                      to_qs(cost::format_bytes(double(st.bytes_recv)))));
    }
  }

  // Ring attention hop by hop: one column per ring rank (of Ulysses rank 0's ring), the ring's
  // sequence cut into its chunks top to bottom; left, the rank's own query chunks; right, the
  // K/V chunks it holds at this hop (arrived from the rank `hop` places before it); below, the
  // (q, kv) blocks it computes now (diagonal: under the causal mask). Arrows: where each K/V
  // goes next.
  void paintRing(QPainter& p, const QColor& fg) {
    const RingHops& h = *rh;
    const int R = static_cast<int>(h.R), C = static_cast<int>(h.chunks);
    const int k = std::clamp(hop, 0, R - 1);
    const RingHop& now = h.hops[static_cast<size_t>(k)];
    QFont small = font();
    small.setPointSizeF(std::max(7.0, font().pointSizeF() - 1));
    const int line = QFontMetrics(font()).height(), sline = QFontMetrics(small).height();
    // From the fonts' heights: the rank, the column names, room for the wrap-around arrow; the
    // blocks computed below the bars in up to three lines.
    const int margin = 16, gap = 40, top = line + sline + 16, textH = 3 * sline + 4;
    const int colW = std::max(60, (width() - 2 * margin - gap * (R - 1)) / std::max(1, R));
    const int barH = std::max(80, height() - top - textH - 10);
    const double chunkH = double(barH) / C;
    const int half = (colW - 8) / 2;
    for (int r = 0; r < R; ++r) {
      const int x0 = margin + r * (colW + gap);
      p.setPen(fg);
      p.setFont(font());
      text(p, QRectF(x0, 0, colW, line + 2), Qt::AlignCenter, QStringLiteral("ring rank %1").arg(r));
      p.setFont(small);
      text(p, QRectF(x0, line + 2, half, sline + 2), Qt::AlignCenter, QStringLiteral("q"));
      text(p, QRectF(x0 + half + 8, line + 2, half, sline + 2), Qt::AlignCenter, QStringLiteral("K/V held"));
      auto fillChunks = [&](const std::vector<int64_t>& chunks, int x, const QColor& c) {
        for (int64_t ch : chunks) {
          const QRectF cell(x, top + chunkH * double(ch), half, chunkH);
          p.setPen(QPen(c.darker(150), 1));
          p.setBrush(c);
          p.drawRect(cell.adjusted(1, 1, -1, -1));
          p.setPen(Qt::white);
          text(p, cell.adjusted(1, 1, -1, -1), Qt::AlignCenter, QString::number(ch));
        }
      };
      p.setPen(QPen(palette().color(QPalette::Mid), 1));
      p.setBrush(Qt::NoBrush);
      p.drawRect(QRectF(x0, top, half, barH));
      p.drawRect(QRectF(x0 + half + 8, top, half, barH));
      fillChunks(h.q_chunks[static_cast<size_t>(r)], x0, kQ);
      fillChunks(now.kv_chunks[static_cast<size_t>(r)], x0 + half + 8, kKv);
      QStringList blocks;
      for (const auto& b : now.computed[static_cast<size_t>(r)])
        blocks << QStringLiteral("q%1×kv%2%3")
                      .arg(b.q_chunk)
                      .arg(b.kv_chunk)
                      .arg(b.diagonal ? QStringLiteral(" (diag)") : QString());
      p.setPen(fg);
      text(p, QRectF(x0, top + barH + 4, colW, textH), Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap,
           blocks.isEmpty() ? QStringLiteral("computes nothing (all masked)")
                            : QStringLiteral("computes ") + blocks.join(QStringLiteral(", ")));
      if (R > 1 && k + 1 < R) {  // where this rank's K/V goes for the next hop
        const int xn = margin + ((r + 1) % R) * (colW + gap);
        const double y = top + barH / 2.0;
        p.setPen(QPen(kKv.darker(130), 2));
        if (r + 1 < R) {
          p.drawLine(QPointF(x0 + colW, y), QPointF(xn - 4, y));
          p.drawLine(QPointF(xn - 4, y), QPointF(xn - 10, y - 5));
          p.drawLine(QPointF(xn - 4, y), QPointF(xn - 10, y + 5));
        } else {  // the last rank's K/V goes round to rank 0: a line above the columns
          p.drawLine(QPointF(x0 + colW - 10, top - 2), QPointF(x0 + colW - 10, top - 10));
          p.drawLine(QPointF(x0 + colW - 10, top - 10), QPointF(xn + 10, top - 10));
          p.drawLine(QPointF(xn + 10, top - 10), QPointF(xn + 10, top - 2));
        }
      }
    }
  }

 private:
  // "Where the weights are": one column per rank (the first kMaxRanks), one bar per kind of
  // state over all of the model's parameters, cut into the gather units; filled where the rank
  // holds that state (all of it, or its piece of every unit), hatched where it is in host memory.
  void paintWeights(QPainter& p, const QColor& fg) {
    constexpr int kMaxRanks = 8;
    const WeightPlacement& wp = *w;
    const int shown = static_cast<int>(std::min<int64_t>(wp.W, kMaxRanks));
    QFont small = font();
    small.setPointSizeF(std::max(7.0, font().pointSizeF() - 1));
    const int line = QFontMetrics(font()).height(), sline = QFontMetrics(small).height();
    // From the fonts: the rank names' row, bars two small lines high (a label may wrap), the gutter
    // as wide as the widest label needs (at most a quarter of the picture).
    const int margin = 16, gap = 14, top = line + 8, rowGap = 12, noteH = 3 * sline + 4;
    const int gutter = std::clamp(QFontMetrics(small).horizontalAdvance(QStringLiteral("fp32 master, AdamW m, v")) + 12,
                                  110, std::max(110, width() / 4));
    const int colW = std::max(40, (width() - 2 * margin - gutter - gap * (shown - 1)) / std::max(1, shown));
    struct Row {
      QString label;
      QColor color;
      bool sharded, host;
      bool gathered;  // stage 3's gathered units, not a kind of state
    };
    std::vector<Row> rows = {
        {QStringLiteral("weights (%1)").arg(wp.bf16 ? QStringLiteral("bf16") : QStringLiteral("fp32")), kQ,
         wp.params_sharded, wp.offload_params, false},
        {QStringLiteral("gradients"), kOut, wp.grads_sharded, false, false},
        {wp.bf16 ? QStringLiteral("fp32 master, AdamW m, v") : QStringLiteral("AdamW m, v"), kKv, wp.optimizer_sharded,
         wp.offload_optimizer, false}};
    if (wp.zero_stage >= 3)
      rows.push_back({QStringLiteral("gathered: layer 0 + next"), QColor(0xCC, 0x79, 0xA7), false, false, true});
    // Bars two small lines high (a label may wrap), less where the picture is short: the note
    // under them stays inside it.
    const int nrows = static_cast<int>(rows.size());
    const int barH = std::max(12, std::min(std::max(26, 2 * sline + 4), (height() - top - noteH) / nrows - rowGap));
    const double total = double(std::max<int64_t>(1, wp.params));
    const QColor mid = palette().color(QPalette::Mid);
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      const Row& row = rows[ri];
      const int y = top + static_cast<int>(ri) * (barH + rowGap);
      p.setPen(fg);
      p.setFont(small);
      text(p, QRectF(margin, y, gutter - 8, barH), Qt::AlignVCenter | Qt::AlignRight | Qt::TextWordWrap,
           row.label + (row.host ? QStringLiteral(" · host") : QString()));
      for (int r = 0; r < shown; ++r) {
        const double x0 = margin + gutter + r * (colW + gap);
        if (ri == 0) {
          p.setPen(fg);
          p.setFont(font());
          text(p, QRectF(x0, 0, colW, top - 4), Qt::AlignCenter, QStringLiteral("rank %1").arg(r));
          p.setFont(small);
        }
        double off = 0;
        for (size_t u = 0; u < wp.units.size(); ++u) {
          const WeightUnit& U = wp.units[u];
          const double ux = x0 + colW * off / total, uw = colW * double(U.numel) / total;
          off += double(U.numel);
          QRectF fill;
          if (row.gathered) {
            if (u == 1 || u == 2) fill = QRectF(ux, y, uw, barH);  // layer 0 computing, the next prefetched
          } else if (!row.sharded) {
            fill = QRectF(ux, y, uw, barH);
          } else if (U.numel > 0) {
            const auto [b, e2] = wp.piece_of(u, r);
            if (e2 > b)
              fill = QRectF(ux + uw * double(b) / double(U.numel), y, uw * double(e2 - b) / double(U.numel), barH);
          }
          if (!fill.isEmpty()) {
            const QColor c = row.gathered && u == 2 ? row.color.lighter(140) : row.color;
            p.fillRect(fill, c);
            if (row.host) p.fillRect(fill, QBrush(c.darker(180), Qt::BDiagPattern));
          }
          p.setPen(QPen(mid, 1));  // unit boundary
          p.drawLine(QPointF(ux, y), QPointF(ux, y + barH));
        }
        p.setPen(QPen(mid, 1));
        p.setBrush(Qt::NoBrush);
        p.drawRect(QRectF(x0, y, colW, barH));
      }
    }
    const int yb = top + static_cast<int>(rows.size()) * (barH + rowGap);
    p.setPen(fg);
    p.setFont(small);
    QString note = QStringLiteral("bars: all %1 parameters, cut into the gather units (embedding, %2 layer(s), %3)")
                       .arg(wp.params)
                       .arg(wp.units.size() - 2)
                       .arg(to_qs(wp.units.back().name));
    if (wp.W > shown) note += QStringLiteral("; ranks %1..%2 hold their pieces alike").arg(shown).arg(wp.W - 1);
    text(p, QRectF(margin, yb, width() - 2 * margin, std::max(noteH, height() - yb)),
         Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, note);
  }
};

ExplainView::ExplainView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("explainView"));
  auto* lay = new QVBoxLayout(this);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("explainTitle"));
  title_->setWordWrap(true);
  title_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // a path must not widen the window
  title_->setMinimumWidth(1);
  title_->setTextFormat(Qt::RichText);
  title_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  connect(title_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link == QLatin1String("memory")) emit memoryRequested();
  });
  problems_ = new QLabel(this);
  problems_->setWordWrap(true);
  problems_->setStyleSheet(QStringLiteral("color: #c0392b; font-weight: bold"));
  canvas_ = new ExplainCanvas(this);
  // The explainer's own settings, and the button that hides and shows the notes.
  auto* top = new QHBoxLayout;
  settings_ = new ExplainSettingsBar(this);
  connect(settings_, &ExplainSettingsBar::edited, this, [this] { applySettings(); });
  notesButton_ = new QPushButton(tr("&Notes"), this);
  notesButton_->setObjectName(QStringLiteral("explainNotesButton"));
  notesButton_->setCheckable(true);
  notesButton_->setToolTip(tr("Show or hide the notes: the stage's detail, shapes and bytes (N)"));
  connect(notesButton_, &QPushButton::toggled, this, [this](bool on) { setNotesShown(on); });
  top->addWidget(settings_, 1);
  top->addWidget(notesButton_);
  auto* bar = new QHBoxLayout;
  prev_ = new QPushButton(tr("◀ Previous"), this);
  next_ = new QPushButton(tr("Next ▶"), this);
  slider_ = new QSlider(Qt::Horizontal, this);
  slider_->setObjectName(QStringLiteral("explainStage"));
  bar->addWidget(prev_);
  bar->addWidget(slider_, 1);
  bar->addWidget(next_);
  playBar_ = makePlayBar();
  // The slide: its short caption over the picture, the picture, the legend; beside it the notes,
  // which scroll when longer than the picture is high.
  slide_ = new QLabel(this);
  slide_->setObjectName(QStringLiteral("explainSlideCaption"));
  slide_->setWordWrap(true);
  slide_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  slide_->setMinimumWidth(1);
  slide_->setTextFormat(Qt::RichText);
  auto* legend = legend_ = new QLabel(this);
  // Wraps, and never widens the window past the screen (presentation mode on a 1280x720
  // projector asked for 1802 px when a long text sat on one line).
  legend->setWordWrap(true);
  legend->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  legend->setMinimumWidth(1);
  legend->setTextFormat(Qt::RichText);
  layerLegend_ =
      QStringLiteral(
          "<span style='color:%1'>■</span> hidden states &nbsp; <span style='color:%2'>■</span> q &nbsp; "
          "<span style='color:%3'>■</span> k, v (hatched: replicated copy) &nbsp; "
          "<span style='color:%4'>■</span> attention output &nbsp; rows: token shards of N/P; columns: heads")
          .arg(kHidden.name(), kQ.name(), kKv.name(), kOut.name());
  weightsLegend_ = tr("<span style='color:%1'>■</span> weights &nbsp; <span style='color:%2'>■</span> gradients "
                      "&nbsp; <span style='color:%3'>■</span> optimizer state &nbsp; <span style='color:%4'>■</span> "
                      "gathered for the layer computing (lighter: the next, prefetched) &nbsp; hatched: in host "
                      "memory (offload) &nbsp; each bar: all parameters, thin lines between gather units")
                       .arg(kQ.name(), kOut.name(), kKv.name(), QColor(0xCC, 0x79, 0xA7).name());
  legend->setText(layerLegend_);
  notes_ = new QScrollArea(this);
  notes_->setObjectName(QStringLiteral("explainCaption"));
  notes_->setWidget(title_);
  notes_->setWidgetResizable(true);
  notes_->setFrameShape(QFrame::StyledPanel);
  notes_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  notes_->setMinimumWidth(1);
  auto* slideCol = new QVBoxLayout;
  slideCol->addWidget(slide_);
  slideCol->addWidget(canvas_, 1);
  slideCol->addWidget(legend);
  auto* body = new QHBoxLayout;
  body->addLayout(slideCol, 5);
  body->addWidget(notes_, 3);
  lay->addLayout(top);
  lay->addWidget(problems_);
  lay->addLayout(body, 1);
  lay->addWidget(playBar_);
  lay->addLayout(bar);
  connect(slider_, &QSlider::valueChanged, this, [this](int v) { setStage(v); });
  connect(prev_, &QPushButton::clicked, this, [this] { setStage(stage_ - 1); });
  connect(next_, &QPushButton::clicked, this, [this] { setStage(stage_ + 1); });
  canvas_->setObjectName(QStringLiteral("explainCanvas"));
  canvas_->setFocusPolicy(Qt::StrongFocus);
  setFocusPolicy(Qt::StrongFocus);
  for (QWidget* c : findChildren<QWidget*>()) c->installEventFilter(this);  // the keys before the slider's own
  setNotesShown(QSettings().value(QStringLiteral("explainer/notes"), true).toBool());
  refresh();
}

// Under the slide, one row: ring attention's hops on the ring stage, the all-to-all's movement
// on the all-to-all stages.
QWidget* ExplainView::makePlayBar() {
  auto* row = new QWidget(this);
  auto* rl = new QHBoxLayout(row);
  rl->setContentsMargins(0, 0, 0, 0);
  hopBar_ = new QWidget(row);
  auto* hb = new QHBoxLayout(hopBar_);
  hb->setContentsMargins(0, 0, 0, 0);
  hopLabel_ = new QLabel(hopBar_);
  hopSlider_ = new QSlider(Qt::Horizontal, hopBar_);
  hopSlider_->setObjectName(QStringLiteral("explainHop"));
  play_ = new QPushButton(tr("▶ Play hops"), hopBar_);
  play_->setObjectName(QStringLiteral("explainPlayHops"));
  play_->setCheckable(true);
  hb->addWidget(hopLabel_);
  hb->addWidget(hopSlider_, 1);
  hb->addWidget(play_);
  timer_ = new QTimer(this);
  timer_->setInterval(900);
  connect(timer_, &QTimer::timeout, this, [this] { setHop(rh_.R > 0 ? (hop_ + 1) % int(rh_.R) : 0); });
  connect(play_, &QPushButton::toggled, this, [this](bool on) { setPlaying(on); });
  connect(hopSlider_, &QSlider::valueChanged, this, [this](int v) { setHop(v); });
  motionBar_ = new QWidget(row);
  auto* mb = new QHBoxLayout(motionBar_);
  mb->setContentsMargins(0, 0, 0, 0);
  motionLabel_ = new QLabel(motionBar_);
  motionSlider_ = new QSlider(Qt::Horizontal, motionBar_);
  motionSlider_->setObjectName(QStringLiteral("explainMotion"));
  motionSlider_->setRange(0, 100);
  playMotion_ = new QPushButton(tr("▶ Play"), motionBar_);
  playMotion_->setObjectName(QStringLiteral("explainPlayMotion"));
  playMotion_->setCheckable(true);
  mb->addWidget(motionLabel_);
  mb->addWidget(motionSlider_, 1);
  mb->addWidget(playMotion_);
  motionTimer_ = new QTimer(this);
  motionTimer_->setInterval(kMotionTickMs);
  connect(motionTimer_, &QTimer::timeout, this, [this] { stepMotion(); });
  connect(playMotion_, &QPushButton::toggled, this, [this](bool on) { setMotionPlaying(on); });
  connect(motionSlider_, &QSlider::valueChanged, this, [this](int v) {
    setMotionPlaying(false);
    setMotion(v / 100.0);
  });
  rl->addWidget(hopBar_, 1);
  rl->addWidget(motionBar_, 1);
  return row;
}

QWidget* ExplainView::canvas() const { return canvas_; }

const std::vector<ExplainText>& ExplainView::drawnTexts() const { return canvas_->texts; }

bool ExplainView::stepByKey(const QObject* o, const QKeyEvent* k) {
  // In the settings' fields the arrows, Home, End and letters edit; a clicker's PgDn / PgUp step.
  const auto* w = qobject_cast<const QWidget*>(o);
  if (w && settings_->isAncestorOf(w) && k->key() != Qt::Key_PageDown && k->key() != Qt::Key_PageUp) return false;
  if (key_matches(Command::ExplainNotes, k)) {
    setNotesShown(!notesShown_);
    return true;
  }
  if (!e_.ok) return false;
  if (key_matches(Command::ExplainNext, k))
    setStage(stage_ + 1);
  else if (key_matches(Command::ExplainPrev, k))
    setStage(stage_ - 1);
  else if (key_matches(Command::ExplainFirst, k))
    setStage(0);
  else if (key_matches(Command::ExplainLast, k))
    setStage(stageCount() - 1);
  else
    return false;
  return true;  // taken at either end too: a clicker's extra press does nothing else
}

bool ExplainView::eventFilter(QObject* o, QEvent* ev) {
  if (ev->type() == QEvent::KeyPress && stepByKey(o, static_cast<QKeyEvent*>(ev))) return true;
  return QWidget::eventFilter(o, ev);
}

void ExplainView::keyPressEvent(QKeyEvent* e) {
  if (stepByKey(this, e))
    e->accept();
  else
    QWidget::keyPressEvent(e);
}

void ExplainView::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (!isAncestorOf(QApplication::focusWidget())) canvas_->setFocus(Qt::OtherFocusReason);
}

void ExplainView::setConfigJson(const nlohmann::json& j) {
  try {
    base_ = RunConfig::from_json(j);
    baseOk_ = true;
    settings_->setSettings(explain_settings_of(base_));
  } catch (const std::exception& ex) {
    baseOk_ = false;
    baseProblem_ = QString::fromUtf8(ex.what());
  }
  settings_->setSource(tr("over the launcher's config"));
  applySettings();
}

void ExplainView::setConfig(const RunConfig& cfg) {
  base_ = cfg;
  baseOk_ = true;
  settings_->setSettings(explain_settings_of(cfg));
  applySettings();
}

// The settings' fields over the config set last: the explanation and the weights stage.
void ExplainView::applySettings() {
  Explanation e;
  WeightPlacement w;
  mask_ = DocumentMaskPicture{};
  if (!baseOk_) {
    e.problems.push_back(baseProblem_.toStdString());
  } else {
    try {
      const RunConfig cfg = with_explain_settings(base_, settings_->settings());
      e = explain(cfg);
      if (e.ok) w = weight_placement(cfg);
      mask_ = e.ok ? document_mask_picture(cfg) : DocumentMaskPicture{};
    } catch (const std::exception& ex) {
      e = Explanation{};
      e.problems.push_back(ex.what());
    }
  }
  w_ = w;
  setExplanation(e);
}

bool ExplainView::offerConfig(const RunConfig& cfg, const QString& run, bool mayAsk) {
  const ExplainSettings now = settings_->settings(), theirs = explain_settings_of(cfg);
  const Explanation a = explain(cfg);
  const bool same = baseOk_ && e_.ok && now == theirs && a.N == e_.N && a.B == e_.B && a.d == e_.d && a.dh == e_.dh &&
                    a.elem_bytes == e_.elem_bytes && a.chunks == e_.chunks && a.zigzag == e_.zigzag;
  if (!same) {
    const QString q = tr("Show %1's settings in the explainer (%2) in place of the ones it draws now (%3)?")
                          .arg(run, describe(theirs), baseOk_ ? describe(now) : tr("none"));
    const bool yes = asker_   ? asker_(q)
                     : mayAsk ? QMessageBox::question(this, tr("Explainer"), q, QMessageBox::Yes | QMessageBox::No) ==
                                    QMessageBox::Yes
                              : true;
    if (!yes) {  // the run's measured times are not of the config drawn
      setStageTimes({}, QString());
      setRingHopTime({});
      return false;
    }
  }
  setConfig(cfg);
  settings_->setSource(tr("over %1's config").arg(run));
  return true;
}

void ExplainView::setNotesShown(bool on) {
  notesShown_ = on;
  notes_->setVisible(on);
  const QSignalBlocker b(notesButton_);
  notesButton_->setChecked(on);
  QSettings().setValue(QStringLiteral("explainer/notes"), on);
}

void ExplainView::setMotion(double progress) {
  // In thousandths: the same progress, however reached (ticks or the slider), the same picture.
  motion_ = std::round(std::clamp(progress, 0.0, 1.0) * 1000.0) / 1000.0;
  refresh();
}

void ExplainView::stepMotion() {
  setMotion(motion_ + kMotionStep);
  if (motion_ >= 1.0) setMotionPlaying(false);
}

void ExplainView::setMotionPlaying(bool on) {
  if (on && isAllToAllStage(stage_)) {
    if (motion_ >= 1.0) motion_ = 0.0;  // played again from the start
    motionTimer_->start();
  } else {
    motionTimer_->stop();
  }
  refreshBars();
  canvas_->motion = motion_;
  canvas_->update();
}

bool ExplainView::motionPlaying() const { return motionTimer_->isActive(); }

bool ExplainView::setHop(int hop) {
  if (hop < 0 || hop >= static_cast<int>(rh_.hops.size())) return false;
  hop_ = hop;
  refresh();
  return true;
}

void ExplainView::setPlaying(bool on) {
  if (on && isRingStage(stage_)) {
    timer_->start();
  } else {
    timer_->stop();
  }
  play_->blockSignals(true);
  play_->setChecked(timer_->isActive());
  play_->setText(timer_->isActive() ? tr("❚❚ Pause") : tr("▶ Play hops"));
  play_->blockSignals(false);
}

bool ExplainView::playing() const { return timer_->isActive(); }

void ExplainView::setExplanation(const Explanation& e) {
  e_ = e;
  rh_ = e_.ok && e_.R > 1 ? ring_hops(e_.R, e_.zigzag) : RingHops{};
  hop_ = std::clamp(hop_, 0, std::max(0, static_cast<int>(rh_.hops.size()) - 1));
  stage_ = std::clamp(stage_, 0, std::max(0, stageCount() - 1));
  refresh();
}

void ExplainView::setStageTimes(const std::vector<StageTime>& times, const QString& run) {
  times_ = times;
  timesRun_ = run;
  refresh();
}

void ExplainView::highlightStage(int stage) {
  highlight_ = stage >= 0 && stage < stageCount() ? stage : -1;
  if (highlight_ >= 0) stage_ = highlight_;
  refresh();
}

QString ExplainView::captionText() const { return title_->text(); }

bool ExplainView::setStage(int stage) {
  if (stage < 0 || stage >= stageCount()) return false;
  // Next into an all-to-all stage plays its movement; any other way there shows where it ends.
  const bool forward = isAllToAllStage(stage) && stage == stage_ + 1;
  stage_ = stage;
  motion_ = forward ? 0.0 : 1.0;
  if (forward)
    motionTimer_->start();
  else
    motionTimer_->stop();
  refresh();
  return true;
}

void ExplainView::refresh() {
  canvas_->e = &e_;
  canvas_->w = &w_;
  canvas_->rh = &rh_;
  canvas_->mask = &mask_;
  canvas_->mask_stage = isMaskStage(stage_);
  canvas_->stage = stage_;
  canvas_->hop = hop_;
  canvas_->motion = motion_;
  const bool ring = isRingStage(stage_);
  refreshBars();
  problems_->setVisible(!e_.problems.empty());
  QStringList why;
  for (const auto& p : e_.problems) why << to_qs(p);
  problems_->setText(why.isEmpty() ? QString()
                                   : tr("Cannot split this config over the ranks:\n") + why.join(QLatin1Char('\n')));
  slider_->blockSignals(true);
  slider_->setRange(0, std::max(0, stageCount() - 1));
  slider_->setValue(stage_);
  slider_->blockSignals(false);
  prev_->setEnabled(e_.ok && stage_ > 0);
  next_->setEnabled(e_.ok && stage_ + 1 < stageCount());
  slider_->setEnabled(e_.ok);
  const bool weights = isWeightsStage(stage_);
  legend_->setText(weights ? weightsLegend_
                   : isMaskStage(stage_)
                       ? tr("<span style='color:%1'>■</span> blocks computed (paler: partly masked) &nbsp; ╲ "
                            "skipped: no unmasked pair &nbsp; <span style='color:%2'>■</span> the documents")
                             .arg(QColor(0x00, 0x72, 0xB2).name(), QColor(0xE6, 0x9F, 0x00).name())
                   : isRingStage(stage_) ? tr("<span style='color:%1'>■</span> the ring rank's own query chunks "
                                              "&nbsp; <span style='color:%2'>■</span> the K/V chunks it holds at "
                                              "this hop &nbsp; arrows: where each rank's K/V go for the next hop; "
                                              "numbers: chunks of the ring's sequence, top to bottom")
                                               .arg(kQ.name(), kKv.name())
                                         : layerLegend_);
  slide_->setText(slideCaption());
  slide_->setVisible(e_.ok);
  if (e_.ok) {
    const auto& st = e_.stages[std::min(static_cast<size_t>(stage_), e_.stages.size() - 1)];
    // The group drawn: all ranks, or with a ring the Ulysses group of ring rank 0 (explain_model.hpp).
    const QString group = e_.R > 1 ? tr("<b>Ulysses × ring attention, one layer forward</b>: the Ulysses group of "
                                        "ring rank 0 (of R = %1): P = %2 ranks sharing N/R = %3 of N = %4 tokens "
                                        "(%5 each)")
                                         .arg(e_.R)
                                         .arg(e_.P)
                                         .arg(e_.Ng)
                                         .arg(e_.N)
                                         .arg(e_.n)
                                   : tr("<b>Ulysses attention, one layer forward</b>: P = %1 ranks, N = %2 tokens "
                                        "(N/P = %3)")
                                         .arg(e_.P)
                                         .arg(e_.N)
                                         .arg(e_.n);
    QString head = group + tr(", H = %1 heads, Hkv = %2 kv heads%3, dh = %4, %5 per element")
                               .arg(e_.H)
                               .arg(e_.Hkv)
                               .arg(e_.kv_replicated ? tr(" (replicated: each rank gets one copy)")
                                    : e_.Hkv < e_.H  ? tr(" (split: %1 per rank)").arg(e_.Hkv / e_.P)
                                                     : QString())
                               .arg(e_.dh)
                               .arg(e_.elem_bytes == 2 ? QStringLiteral("2 B") : QStringLiteral("4 B"));
    QString steps;
    auto measured = [this](int i) -> const StageTime* {
      return i < static_cast<int>(times_.size()) && times_[static_cast<size_t>(i)].measured
                 ? &times_[static_cast<size_t>(i)]
                 : nullptr;
    };
    for (int i = 0; i < stageCount(); ++i) {
      QString n = QStringLiteral("%1. %2").arg(i + 1).arg(isWeightsStage(i) ? tr("where the weights are")
                                                          : isMaskStage(i)  ? tr("document mask")
                                                                            : to_qs(e_.stages[size_t(i)].name));
      if (const StageTime* t = measured(i)) n += QStringLiteral(" (%1)").arg(to_qs(format_duration_ns(t->median_ns)));
      n = n.toHtmlEscaped();
      if (i == highlight_) n = QStringLiteral("<span style='background:#ffd54f; color:#000'>%1</span>").arg(n);
      steps += (i ? QStringLiteral(" → ") : QString()) + (i == stage_ ? QStringLiteral("<b><u>%1</u></b>").arg(n) : n);
    }
    if (!times_.empty())
      steps +=
          tr("<br><small>times: measured in %1, per layer forward, median over the layers of the mean per rank and "
             "step "
             "(the <tt>layers</tt> table of <tt>ulysses-trace summary</tt>)%2</small>")
              .arg(timesRun_.toHtmlEscaped(),
                   highlight_ >= 0 ? tr("; highlighted: the stage of the range selected in the timeline") : QString());
    if (const StageTime* t = measured(stage_))
      steps += tr("<br>measured: <b>%1</b> per layer (median over %2 layer(s))")
                   .arg(to_qs(format_duration_ns(t->median_ns)))
                   .arg(t->layers);
    if (isMaskStage(stage_)) {
      title_->setText(head + QStringLiteral("<br>") + steps + QStringLiteral("<br>") + document_mask_caption(mask_));
      canvas_->update();
      return;
    }
    if (weights) {
      title_->setText(head + QStringLiteral("<br>") + steps + QStringLiteral("<br>") + weightsCaption());
      canvas_->update();
      return;
    }
    if (ring) steps += QStringLiteral("<br>") + ringCaption();
    title_->setText(
        head + QStringLiteral("<br>") + steps + QStringLiteral("<br><i>") + to_qs(st.detail).toHtmlEscaped() +
        QStringLiteral("</i><br><tt>") + to_qs(st.shapes).toHtmlEscaped() + QStringLiteral("</tt>") +
        (st.bytes_sent && stage_ == 3 && e_.R > 1
             ? tr("<br>each rank sends %1 and receives %2 round its ring in this stage (K/V blocks, forward)")
                   .arg(to_qs(cost::format_bytes(double(st.bytes_sent))),
                        to_qs(cost::format_bytes(double(st.bytes_recv))))
         : st.bytes_sent
             ? tr("<br>each rank sends %1 and receives %2 in this all-to-all; %3 per layer forward (both all-to-alls)")
                   .arg(to_qs(cost::format_bytes(double(st.bytes_sent))),
                        to_qs(cost::format_bytes(double(st.bytes_recv))),
                        to_qs(cost::format_bytes(double(e_.a2a_bytes_per_layer_fwd))))
             : QString()));
  } else {
    title_->setText(tr("<b>Ulysses attention explainer</b>"));
  }
  canvas_->update();
}

// The row under the slide: the hops on the ring stage, the movement on the all-to-all stages;
// it keeps its place on the other stages, so Previous / Next do not move under the pointer.
void ExplainView::refreshBars() {
  const bool ring = isRingStage(stage_), a2a = isAllToAllStage(stage_);
  QSizePolicy keep = playBar_->sizePolicy();
  keep.setRetainSizeWhenHidden(e_.ok);
  playBar_->setSizePolicy(keep);
  playBar_->setVisible(ring || a2a);
  hopBar_->setVisible(ring);
  motionBar_->setVisible(a2a);
  if (!ring && timer_->isActive()) setPlaying(false);
  if (!a2a && motionTimer_->isActive()) motionTimer_->stop();
  if (ring) {
    hopSlider_->blockSignals(true);
    hopSlider_->setRange(0, static_cast<int>(rh_.R) - 1);
    hopSlider_->setValue(hop_);
    hopSlider_->blockSignals(false);
    hopLabel_->setText(tr("hop %1 of %2").arg(hop_).arg(rh_.R - 1));
  }
  if (a2a) {
    const QSignalBlocker b(motionSlider_), b2(playMotion_);
    motionSlider_->setValue(static_cast<int>(std::lround(motion_ * 100)));
    motionLabel_->setText(stage_ == 2 ? tr("sequence layout → head layout") : tr("head layout → sequence layout"));
    playMotion_->setChecked(motionTimer_->isActive());
    playMotion_->setText(motionTimer_->isActive() ? tr("❚❚ Pause") : tr("▶ Play"));
  }
}

QString ExplainView::slideCaption() const {
  if (!e_.ok) return {};
  auto B = [](int64_t b) { return to_qs(cost::format_bytes(double(b))).toHtmlEscaped(); };
  const bool weights = isWeightsStage(stage_), mask = isMaskStage(stage_);
  const QString name = weights ? tr("where the weights are")
                       : mask  ? tr("document mask")
                               : to_qs(e_.stages[size_t(stage_)].name).toHtmlEscaped();
  QString line;
  if (mask)
    line = mask_.ok ? tr("each token attends only within its own document: %1% of the causal pairs computed")
                          .arg(100.0 * mask_.kept(), 0, 'f', 1)
                    : tr("packed documents: attention within each document only");
  else if (weights)
    line = tr("ZeRO stage %1 over %2 rank(s): %3 of training state on each device")
               .arg(w_.zero_stage)
               .arg(w_.W)
               .arg(B(w_.device_static_bytes()));
  else if (stage_ == 0)
    line = tr("each rank holds %1 of the %2 tokens, every feature").arg(e_.n).arg(e_.Ng);
  else if (stage_ == 1)
    line = tr("each rank computes q, k, v for every head of its own tokens");
  else if (stage_ == 2)
    line = tr("each piece moves to the rank that owns its heads: %1 out of every rank").arg(B(e_.stages[2].bytes_sent));
  else if (isRingStage(stage_))
    line = tr("hop %1 of %2: K/V blocks travel round the ring while each is computed").arg(hop_).arg(rh_.R - 1);
  else if (stage_ == 3)
    line = tr("each rank attends over all %1 tokens for its %2 heads").arg(e_.Ng).arg(e_.H / e_.P);
  else if (stage_ == 4)
    line = tr("the output goes back to the rank of its tokens: %1 out of every rank").arg(B(e_.stages[4].bytes_sent));
  else
    line = tr("o_proj mixes the heads back into the hidden size, still sequence-sharded");
  QString s =
      QStringLiteral("<big><b>%1 / %2 · %3</b></big> &nbsp; %4").arg(stage_ + 1).arg(stageCount()).arg(name, line);
  if (stage_ < static_cast<int>(times_.size()) && times_[size_t(stage_)].measured)
    s += tr(" &nbsp; <b>measured %1</b>").arg(to_qs(format_duration_ns(times_[size_t(stage_)].median_ns)));
  return s;
}

QString ExplainView::ringCaption() const {
  const RingHop& now = rh_.hops[static_cast<size_t>(hop_)];
  int64_t blocks = 0;
  for (const auto& b : now.computed) blocks += static_cast<int64_t>(b.size());
  QString s = hop_ == 0 ? tr("<b>hop 0</b>: every ring rank computes its own K/V chunks (%1 blocks over the ring) "
                             "while sending them to the next ring rank")
                              .arg(blocks)
                        : tr("<b>hop %1 of %2</b>: ring rank r holds the K/V chunks of ring rank r−%1 and computes "
                             "%3 block(s) over the ring%4")
                              .arg(hop_)
                              .arg(rh_.R - 1)
                              .arg(blocks)
                              .arg(hop_ + 1 < rh_.R ? tr(", passing them on") : QString());
  s += tr("; the sequence of the ring in %1 chunks%2; each hop sends %3 per rank (K and V of its heads)")
           .arg(rh_.chunks)
           .arg(e_.zigzag ? tr(" (zigzag: ring rank r holds chunks r and 2R−1−r)") : QString())
           .arg(to_qs(
               cost::format_bytes(double(e_.ring_bytes_per_layer_fwd) / double(std::max<int64_t>(1, rh_.R - 1)))));
  if (ringHop_.measured)
    s += tr("<br>measured in %1: a K/V hop took <b>%2</b> (median of %3 forward ring exchanges)")
             .arg(timesRun_.toHtmlEscaped(), to_qs(format_duration_ns(ringHop_.median_ns)))
             .arg(ringHop_.layers);
  return s;
}

QString ExplainView::weightsCaption() const {
  const WeightPlacement& w = w_;
  auto B = [](int64_t b) { return to_qs(cost::format_bytes(double(b))).toHtmlEscaped(); };
  QString held = w.zero_stage == 0 ? tr("every rank holds all of the training state (16 B per parameter)")
                 : w.zero_stage == 1
                     ? tr("ZeRO stage 1: each rank holds 1/%1 of the optimizer state, all weights and gradients")
                 : w.zero_stage == 2 ? tr("ZeRO stage 2: each rank holds 1/%1 of the optimizer state and gradients, "
                                          "all weights")
                                     : tr("ZeRO stage 3: each rank holds 1/%1 of every gather unit's weights, "
                                          "gradients and optimizer state");
  if (w.zero_stage > 0) held = held.arg(w.W);
  QString s =
      tr("<i>%1, over W = sp × ring × dp = %2 rank(s); %3 parameters.</i><br>").arg(held).arg(w.W).arg(w.params);
  s += tr("per rank on the device: weights %1, gradients %2%3, AdamW m, v %4 = <b>%5</b>")
           .arg(B(w.param_bytes), B(w.grad_bytes),
                w.master_bytes ? tr(", fp32 master %1").arg(B(w.master_bytes)) : QString(), B(w.optimizer_bytes),
                B(w.device_static_bytes()));
  if (w.host_bytes) s += tr("; in host memory (offloaded): <b>%1</b>").arg(B(w.host_bytes));
  if (w.zero_stage >= 3)
    s += tr("<br>each decoder layer is all-gathered before its forward and again before its backward (each rank "
            "sends and receives %1 per gather), the next unit's gather prefetched while one computes; its gradients "
            "are reduce-scattered as soon as its backward is done (%2); gathered units and one unit's gradients in "
            "flight: %3 at most")
             .arg(B(w.gather_bytes_per_layer), B(w.reduce_scatter_bytes_per_layer), B(w.gathered_bytes));
  s += w.zero_stage >= 3
           ? tr("<br>per step, each rank sends %1 in these gathers and reduce-scatters (the rows \"zero gather\" "
                "and \"zero reduce-scatter\" of the run's trace)")
                 .arg(B(w.collective_bytes_per_step))
           : tr("<br>per step, each rank sends %1 in the gradient %2")
                 .arg(B(w.collective_bytes_per_step),
                      w.zero_stage == 0   ? tr("all-reduce")
                      : w.zero_stage == 1 ? tr("all-reduce and the all-gather of the updated parameters")
                                          : tr("reduce-scatter and the all-gather of the updated parameters"));
  if (!timesRun_.isEmpty())
    s += tr("<br><a href=\"memory\">%1's measured memory by category over the step ▸</a>")
             .arg(timesRun_.toHtmlEscaped());
  return s;
}

}  // namespace ulysses::ui
