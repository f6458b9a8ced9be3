// The explainer's own controls (see explain_controls.hpp).
#include "explain_controls.hpp"

#include <QComboBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <algorithm>

namespace ulysses::ui {

ExplainSettings explain_settings_of(const RunConfig& cfg) {
  return {cfg.parallel.sp_size, cfg.model.num_attention_heads, cfg.model.num_key_value_heads, cfg.parallel.ring_size,
          cfg.train.zero_stage};
}

RunConfig with_explain_settings(RunConfig cfg, const ExplainSettings& s) {
  cfg.parallel.sp_size = s.sp;
  cfg.model.num_attention_heads = s.heads;
  cfg.model.num_key_value_heads = s.kv_heads;
  cfg.parallel.ring_size = s.ring;
  cfg.train.zero_stage = s.zero;
  return cfg;
}

QString describe(const ExplainSettings& s) {
  return QObject::tr("sp %1, %2 heads, %3 kv heads, ring %4, ZeRO %5")
      .arg(s.sp)
      .arg(s.heads)
      .arg(s.kv_heads)
      .arg(s.ring)
      .arg(s.zero);
}

ExplainSettingsBar::ExplainSettingsBar(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("explainSettings"));
  auto* lay = new QHBoxLayout(this);
  lay->setContentsMargins(0, 0, 0, 0);
  auto spin = [&](const QString& label, const char* name, int lo, int hi, const QString& tip) {
    auto* l = new QLabel(label, this);
    auto* s = new QSpinBox(this);
    s->setObjectName(QString::fromLatin1(name));
    s->setRange(lo, hi);
    s->setToolTip(tip);
    l->setBuddy(s);
    lay->addWidget(l);
    lay->addWidget(s);
    connect(s, &QSpinBox::valueChanged, this, [this] { emit edited(); });
    return s;
  };
  sp_ = spin(tr("&sp"), "explainSp", 1, 64, tr("parallel.sp_size: the ranks of one Ulysses group"));
  heads_ = spin(tr("&heads"), "explainHeads", 1, 256, tr("model.num_attention_heads (q heads)"));
  kv_ = spin(tr("&kv heads"), "explainKvHeads", 1, 256, tr("model.num_key_value_heads (GQA when fewer than heads)"));
  ring_ = spin(tr("&ring"), "explainRing", 1, 16, tr("parallel.ring_size: ring attention over this many groups"));
  auto* zl = new QLabel(tr("&ZeRO"), this);
  zero_ = new QComboBox(this);
  zero_->setObjectName(QStringLiteral("explainZero"));
  for (int z = 0; z <= 3; ++z) zero_->addItem(QString::number(z));
  zero_->setToolTip(tr("train.zero_stage (the last stage: where the weights are)"));
  zl->setBuddy(zero_);
  lay->addWidget(zl);
  lay->addWidget(zero_);
  connect(zero_, &QComboBox::currentIndexChanged, this, [this] { emit edited(); });
  from_ = new QLabel(this);
  from_->setObjectName(QStringLiteral("explainSource"));
  from_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // a long run name must not widen the window
  from_->setMinimumWidth(1);
  lay->addWidget(from_, 1);
}

void ExplainSettingsBar::setSettings(const ExplainSettings& s) {
  const QSignalBlocker b0(sp_), b1(heads_), b2(kv_), b3(ring_), b4(zero_);
  sp_->setValue(static_cast<int>(s.sp));
  heads_->setValue(static_cast<int>(s.heads));
  kv_->setValue(static_cast<int>(s.kv_heads));
  ring_->setValue(static_cast<int>(s.ring));
  zero_->setCurrentIndex(static_cast<int>(std::clamp<int64_t>(s.zero, 0, 3)));
}

ExplainSettings ExplainSettingsBar::settings() const {
  return {sp_->value(), heads_->value(), kv_->value(), ring_->value(), zero_->currentIndex()};
}

void ExplainSettingsBar::setSource(const QString& text) {
  source_ = text;
  showSource();
}

void ExplainSettingsBar::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  showSource();
}

void ExplainSettingsBar::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::FontChange) showSource();  // presentation mode's larger font
}

void ExplainSettingsBar::showSource() {
  const QString full = source_.isEmpty() ? QString() : tr("drawing %1").arg(source_);
  from_->setText(from_->fontMetrics().elidedText(full, Qt::ElideMiddle, std::max(0, from_->width() - 4)));
  from_->setToolTip(full);
}

}  // namespace ulysses::ui
