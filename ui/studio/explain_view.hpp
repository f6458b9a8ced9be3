// Explainer view (`ulysses-studio --view explain [--stage N]`): P rank columns, each a grid
// of [token shards × heads], stepping through one Ulysses attention layer (shard → q/k/v
// projection → seq→head all-to-all → attention → head→seq all-to-all → output projection)
// for the launcher's current config, with shapes and the bytes each rank sends and receives.
// All numbers come from ui/models/explain_model (tested there); this widget only draws.
#pragma once

#include <QWidget>

#include "explain_model.hpp"

class QLabel;
class QPushButton;
class QSlider;

namespace ulysses::ui {

class ExplainCanvas;

class ExplainView : public QWidget {
  Q_OBJECT
 public:
  explicit ExplainView(QWidget* parent = nullptr);
  // The config to explain, as the launcher's form JSON (refusals are shown, not thrown).
  void setConfigJson(const nlohmann::json& j);
  void setExplanation(const Explanation& e);
  const Explanation& explanation() const { return e_; }
  // 0-based stage; clamped. False when out of range.
  bool setStage(int stage);
  int stage() const { return stage_; }
  int stageCount() const { return static_cast<int>(e_.stages.size()); }

 private:
  void refresh();
  Explanation e_;
  int stage_ = 0;
  ExplainCanvas* canvas_ = nullptr;
  QLabel* title_ = nullptr;
  QLabel* problems_ = nullptr;
  QSlider* slider_ = nullptr;
  QPushButton* prev_ = nullptr;
  QPushButton* next_ = nullptr;
};

}  // namespace ulysses::ui
