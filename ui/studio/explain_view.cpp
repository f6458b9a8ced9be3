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
#include <QSlider>
#include <QTimer>
#include <QVBoxLayout>

#include "cost_model.hpp"
#include "trace/phase_style.hpp"
#include "trace/qt_text.hpp"
#include "mask_stage.hpp"
#include "trace/shortcuts.hpp"

#include <algorithm>

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
    const auto& st = e->stages[static_cast<size_t>(stage)];
    const int P = static_cast<int>(e->P), H = static_cast<int>(e->H), K = static_cast<int>(e->Hkv);
    const int margin = 16, gap = 18;
    const int colW = (width() - 2 * margin - gap * (P - 1)) / std::max(1, P);
    QFont small = font();
    small.setPointSizeF(std::max(7.0, font().pointSizeF() - 1));
    const int line = QFontMetrics(font()).height(), sline = QFontMetrics(small).height();
    // Rows of text from the fonts' heights: the rank over the grid, the heads under it, the bytes below.
    const int top = line + 8, bottom = sline * (st.bytes_sent > 0 ? 3 : 1) + 12;
    const int gridH = std::max(60, height() - top - bottom);
    const double rowH = double(gridH) / P;  // one row per token shard of N/P tokens
    const int kvW = std::max(18, colW * K / (H + K + 1));
    const int qW = colW - kvW - 6;
    const double cellQ = double(qW) / H, cellK = double(kvW) / K;
    for (int r = 0; r < P; ++r) {
      const int x0 = margin + r * (colW + gap);
      p.setPen(fg);
      p.setFont(font());
      text(p, QRectF(x0, 0, colW, top - 4), Qt::AlignCenter, QStringLiteral("rank %1").arg(r));
      // grid outlines
      p.setPen(QPen(palette().color(QPalette::Mid), 1));
      p.setBrush(Qt::NoBrush);
      p.drawRect(QRectF(x0, top, qW, gridH));
      p.drawRect(QRectF(x0 + qW + 6, top, kvW, gridH));
      for (const auto& b : st.ranks[static_cast<size_t>(r)]) {
        const double y = top + rowH * double(b.tok_begin) / double(e->n);
        const double h = rowH * double(b.tok_end - b.tok_begin) / double(e->n);
        QRectF rect;
        QColor c;
        if (b.kind == HeadBlock::KV) {
          rect = QRectF(x0 + qW + 6 + cellK * double(b.head_begin), y, cellK * double(b.head_end - b.head_begin), h);
          c = kKv;
        } else {
          rect = QRectF(x0 + cellQ * double(b.head_begin), y, cellQ * double(b.head_end - b.head_begin), h);
          c = b.kind == HeadBlock::Hidden ? kHidden : b.kind == HeadBlock::Q ? kQ : kOut;
        }
        // one shade per token shard of origin, so the shards can be followed through the exchange
        for (int64_t t = b.tok_begin; t < b.tok_end; t += e->n) {
          const int shard = static_cast<int>(t / e->n);
          const double sy = top + rowH * double(t) / double(e->n);
          const QRectF cell(rect.left(), sy, rect.width(), rowH);
          p.setPen(QPen(c.darker(150), 1));
          p.setBrush(c.lighter(100 + 25 * (shard % 3)));
          p.drawRect(cell.adjusted(1, 1, -1, -1));
        }
        // head boundaries
        const double cw = b.kind == HeadBlock::KV ? cellK : cellQ;
        p.setPen(QPen(c.darker(130), 1, Qt::DotLine));
        for (int64_t hd = b.head_begin + 1; hd < b.head_end; ++hd) {
          const double hx = rect.left() + cw * double(hd - b.head_begin);
          p.drawLine(QPointF(hx, rect.top() + 1), QPointF(hx, rect.bottom() - 1));
        }
        p.setBrush(Qt::NoBrush);
        if (b.replicated) {  // a copy of a kv head: hatched
          p.setBrush(QBrush(c.darker(170), Qt::BDiagPattern));
          p.drawRect(rect.adjusted(1, 1, -1, -1));
        }
      }
      // heads axis labels
      p.setPen(fg);
      p.setFont(small);
      const QString heads = QFontMetrics(small).horizontalAdvance(QStringLiteral("q heads 0..%1").arg(H - 1)) < qW
                                ? QStringLiteral("q heads 0..%1").arg(H - 1)
                                : QStringLiteral("q 0..%1").arg(H - 1);
      text(p, QRectF(x0, top + gridH + 2, qW, sline + 2), Qt::AlignCenter, heads);
      text(p, QRectF(x0 + qW + 6, top + gridH + 2, kvW, sline + 2), Qt::AlignCenter, QStringLiteral("kv"));
      if (st.bytes_sent > 0)
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
  connect(title_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link == QLatin1String("memory")) emit memoryRequested();
  });
  problems_ = new QLabel(this);
  problems_->setWordWrap(true);
  problems_->setStyleSheet(QStringLiteral("color: #c0392b; font-weight: bold"));
  canvas_ = new ExplainCanvas(this);
  auto* bar = new QHBoxLayout;
  prev_ = new QPushButton(tr("◀ Previous"), this);
  next_ = new QPushButton(tr("Next ▶"), this);
  slider_ = new QSlider(Qt::Horizontal, this);
  slider_->setObjectName(QStringLiteral("explainStage"));
  bar->addWidget(prev_);
  bar->addWidget(slider_, 1);
  bar->addWidget(next_);
  // Ring attention's hops (shown on the ring stage only).
  hopBar_ = new QWidget(this);
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
  // The caption scrolls when it is longer than the room left beside the picture (presentation
  // mode on a 1280x720 projector cut its last lines), never under two lines high.
  auto* captionScroll = new QScrollArea(this);
  captionScroll->setObjectName(QStringLiteral("explainCaption"));
  captionScroll->setWidget(title_);
  captionScroll->setWidgetResizable(true);
  captionScroll->setFrameShape(QFrame::NoFrame);
  captionScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  captionScroll->setMinimumHeight(2 * QFontMetrics(title_->font()).lineSpacing() + 4);
  lay->addWidget(captionScroll);
  lay->addWidget(problems_);
  lay->addWidget(canvas_, 1);
  lay->addWidget(legend);
  lay->addWidget(hopBar_);
  lay->addLayout(bar);
  connect(slider_, &QSlider::valueChanged, this, [this](int v) { setStage(v); });
  connect(prev_, &QPushButton::clicked, this, [this] { setStage(stage_ - 1); });
  connect(next_, &QPushButton::clicked, this, [this] { setStage(stage_ + 1); });
  canvas_->setObjectName(QStringLiteral("explainCanvas"));
  canvas_->setFocusPolicy(Qt::StrongFocus);
  setFocusPolicy(Qt::StrongFocus);
  for (QWidget* c : findChildren<QWidget*>()) c->installEventFilter(this);  // the keys before the slider's own
  refresh();
}

QWidget* ExplainView::canvas() const { return canvas_; }

const std::vector<ExplainText>& ExplainView::drawnTexts() const { return canvas_->texts; }

bool ExplainView::stepByKey(const QKeyEvent* k) {
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
  if (ev->type() == QEvent::KeyPress && stepByKey(static_cast<QKeyEvent*>(ev))) return true;
  return QWidget::eventFilter(o, ev);
}

void ExplainView::keyPressEvent(QKeyEvent* e) {
  if (stepByKey(e))
    e->accept();
  else
    QWidget::keyPressEvent(e);
}

void ExplainView::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (!isAncestorOf(QApplication::focusWidget())) canvas_->setFocus(Qt::OtherFocusReason);
}

void ExplainView::setConfigJson(const nlohmann::json& j) {
  Explanation e;
  WeightPlacement w;
  try {
    const RunConfig cfg = RunConfig::from_json(j);
    e = explain(cfg);
    if (e.ok) w = weight_placement(cfg);
    mask_ = e.ok ? document_mask_picture(cfg) : DocumentMaskPicture{};
  } catch (const std::exception& ex) {
    e.problems.push_back(ex.what());
  }
  w_ = w;
  setExplanation(e);
}

void ExplainView::setConfig(const RunConfig& cfg) {
  const Explanation e = explain(cfg);
  w_ = e.ok ? weight_placement(cfg) : WeightPlacement{};
  mask_ = e.ok ? document_mask_picture(cfg) : DocumentMaskPicture{};
  setExplanation(e);
}

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
  stage_ = stage;
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
  const bool ring = isRingStage(stage_);
  // With a ring the hop bar keeps its place on the other stages, so Previous / Next do not move
  // under the pointer when the ring stage shows it.
  QSizePolicy keep = hopBar_->sizePolicy();
  keep.setRetainSizeWhenHidden(e_.ok && e_.R > 1);
  hopBar_->setSizePolicy(keep);
  hopBar_->setVisible(ring);
  if (!ring && timer_->isActive()) setPlaying(false);
  if (ring) {
    hopSlider_->blockSignals(true);
    hopSlider_->setRange(0, static_cast<int>(rh_.R) - 1);
    hopSlider_->setValue(hop_);
    hopSlider_->blockSignals(false);
    hopLabel_->setText(tr("hop %1 of %2").arg(hop_).arg(rh_.R - 1));
  }
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
