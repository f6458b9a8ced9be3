// The explainer's own controls (docs/STUDIO.md): the few settings its picture draws (sp, q heads,
// kv heads, ring, ZeRO stage), laid over a base config (the launcher's form, or an opened run's
// config), and the name of where that base came from.
#pragma once

#include <QWidget>

#include "run_config.hpp"

class QComboBox;
class QLabel;
class QSpinBox;

namespace ulysses::ui {

struct ExplainSettings {
  int64_t sp = 1, heads = 1, kv_heads = 1, ring = 1, zero = 0;
  bool operator==(const ExplainSettings& o) const {
    return sp == o.sp && heads == o.heads && kv_heads == o.kv_heads && ring == o.ring && zero == o.zero;
  }
  bool operator!=(const ExplainSettings& o) const { return !(*this == o); }
};

ExplainSettings explain_settings_of(const RunConfig& cfg);
// `cfg` with the settings' fields replaced (the rest of the config as it was).
RunConfig with_explain_settings(RunConfig cfg, const ExplainSettings& s);
// "sp 2, 8 heads, 2 kv heads, ring 1, ZeRO 0" (the ask-before-replacing dialog names both).
QString describe(const ExplainSettings& s);

class ExplainSettingsBar : public QWidget {
  Q_OBJECT
 public:
  explicit ExplainSettingsBar(QWidget* parent = nullptr);
  // Shows `s` (no edited() signal).
  void setSettings(const ExplainSettings& s);
  ExplainSettings settings() const;
  // "the launcher's config", "run NAME": said beside the controls (elided, full text on hover).
  void setSource(const QString& text);
  QString source() const { return source_; }

 signals:
  // The user changed one of the controls.
  void edited();

 protected:
  void resizeEvent(QResizeEvent* e) override;
  void changeEvent(QEvent* e) override;

 private:
  void showSource();
  QSpinBox *sp_, *heads_, *kv_, *ring_;
  QComboBox* zero_;
  QLabel* from_;
  QString source_;
};

}  // namespace ulysses::ui
