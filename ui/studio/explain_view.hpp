// Explainer view (`ulysses-studio --view explain [--stage N]`): P rank columns, each a grid
// of [token shards × heads], stepping through one Ulysses attention layer (shard → q/k/v
// projection → seq→head all-to-all → attention → head→seq all-to-all → output projection)
// for the launcher's current config, with shapes and the bytes each rank sends and receives;
// a last stage shows where the weights, gradients and optimizer state are (ZeRO, offload).
// All numbers come from ui/models/explain_model (tested there); this widget only draws.
#pragma once

#include <QRectF>
#include <QString>
#include <QWidget>
#include <functional>
#include <vector>

#include "explain_model.hpp"
#include "explain_times.hpp"
#include "mask_model.hpp"
#include "weights_model.hpp"

class QLabel;
class QTimer;
class QPushButton;
class QSlider;
class QScrollArea;

namespace ulysses::ui {

class ExplainCanvas;
class ExplainSettingsBar;

// A text the explainer's picture wrote: the rectangle it was given, the one its words took (at
// the size it was written in) and the text (the layout check: within the picture, inside its
// rectangle, over no other text).
struct ExplainText {
  QRectF given, needed;
  QString text;
};

class ExplainView : public QWidget {
  Q_OBJECT
 public:
  explicit ExplainView(QWidget* parent = nullptr);
  // The config to explain, as the launcher's form JSON (refusals are shown, not thrown).
  void setConfigJson(const nlohmann::json& j);
  void setExplanation(const Explanation& e);
  // A run's config (an opened trace's): the explanation and the weights stage from it.
  void setConfig(const RunConfig& cfg);
  const Explanation& explanation() const { return e_; }
  // The last stage, after the attention layer's six: where each rank's weights, gradients and
  // optimizer state are (weights_model.hpp), under the config's ZeRO stage.
  const WeightPlacement& weights() const { return w_; }
  bool isWeightsStage(int stage) const { return e_.ok && w_.ok && stage == static_cast<int>(e_.stages.size()); }
  // 0-based stage; clamped. False when out of range.
  bool setStage(int stage);
  int stage() const { return stage_; }
  int stageCount() const {
    return static_cast<int>(e_.stages.size()) + (e_.ok && w_.ok ? 1 : 0) + (e_.ok && mask_.ok ? 1 : 0);
  }
  // The last stage: the document mask of a packed sequence and the work it saves, for Ulysses
  // and the ring (mask_model.hpp, mask_stage.hpp).
  bool isMaskStage(int stage) const { return e_.ok && mask_.ok && stage == stageCount() - 1; }
  const DocumentMaskPicture& documentMask() const { return mask_; }
  // With a run open: the run's measured time of each stage (explain_times.hpp), shown beside
  // the stage names; an empty vector clears them. `run` names the run in the caption.
  void setStageTimes(const std::vector<StageTime>& times, const QString& run);
  const std::vector<StageTime>& stageTimes() const { return times_; }
  // The stage of the range selected in the timeline (explain_stage_of_range): shown and
  // marked; -1 clears the mark.
  void highlightStage(int stage);
  int highlightedStage() const { return highlight_; }
  // Ring attention (ring_size > 1): the attention stage is drawn hop by hop (ring_hops): hop 0
  // computes each ring rank's own K/V, hop k the K/V that travelled k ranks. Play steps through
  // the hops on a timer. With a run open, the measured median K/V exchange (ring_hop_time).
  bool isRingStage(int stage) const { return e_.ok && e_.R > 1 && stage == 3; }
  const RingHops& ringHops() const { return rh_; }
  int hop() const { return hop_; }
  bool setHop(int hop);
  void setRingHopTime(const StageTime& t) {
    ringHop_ = t;
    refresh();
  }
  void setPlaying(bool on);
  bool playing() const;
  // The notes (rich text): the config, the stage list with times, the stage's detail, shapes and
  // bytes. Shown beside the picture in a panel the presenter hides and shows (N, the Notes button);
  // whether it is shown is remembered (QSettings "explainer/notes").
  QString captionText() const;
  void setNotesShown(bool on);
  bool notesShown() const { return notesShown_; }
  // The slide's short caption, over the picture: the stage and one line on what happens in it.
  QString slideCaption() const;

  // The all-to-all stages (2 and 4) animate the movement of the pieces from the rank that held
  // them to the rank that holds them (stage_pieces): `motion` 0 draws the stage before, 1 the
  // stage; Next into an all-to-all stage plays it, a timer (kMotionTickMs) stepping kMotionStep a
  // tick; the Play button plays it again, the slider scrubs it. Tests set it or step it.
  bool isAllToAllStage(int stage) const { return is_all_to_all_stage(e_, stage); }
  void setMotion(double progress);  // clamped to [0, 1]
  double motion() const { return motion_; }
  void stepMotion();  // one tick of the timer: kMotionStep on; at 1 the play stops
  void setMotionPlaying(bool on);
  bool motionPlaying() const;
  static constexpr double kMotionStep = 0.05;
  static constexpr int kMotionTickMs = 40;

  // The explainer's own settings (sp, heads, kv heads, ring, ZeRO stage), over the config set
  // last (the launcher's, or a run's).
  ExplainSettingsBar* settingsBar() const { return settings_; }
  // An opened run's config. When it draws what the explainer draws now it is shown at once;
  // otherwise the presenter is asked first (a dialog; the asker's answer where one is set; with
  // `mayAsk` false and no asker, replaced: scripted screenshots). True when it is shown; when the
  // presenter says no, the run's measured times are cleared too (they are not of this config).
  bool offerConfig(const RunConfig& cfg, const QString& run, bool mayAsk = true);
  // The answer to "replace the explainer's settings with the run's?" (tests inject it; null:
  // the dialog).
  void setReplaceAsker(std::function<bool(const QString& question)> asker) { asker_ = std::move(asker); }

  // The picture (it takes the focus when the page is shown, so a presenter's clicker works at once).
  QWidget* canvas() const;
  // What the picture's last paint wrote (paint it first: canvas()->grab()).
  const std::vector<ExplainText>& drawnTexts() const;

 signals:
  // The weights stage's link to the opened run's measured memory by category.
  void memoryRequested();

 protected:
  // The explainer's keys (shortcuts.hpp, scope Explainer: Right/PgDn/Space, Left/PgUp, Home,
  // End) step the stages whatever in the view holds the focus: the picture, the slider, a button.
  bool eventFilter(QObject* o, QEvent* ev) override;
  void keyPressEvent(QKeyEvent* e) override;
  void showEvent(QShowEvent* e) override;

 private:
  bool stepByKey(const QObject* o, const QKeyEvent* e);
  void refresh();
  void refreshBars();
  QWidget* makePlayBar();
  void applySettings();
  QString weightsCaption() const;
  QString ringCaption() const;
  Explanation e_;
  WeightPlacement w_;
  DocumentMaskPicture mask_;
  RingHops rh_;
  int hop_ = 0;
  StageTime ringHop_;
  QWidget* hopBar_ = nullptr;
  QSlider* hopSlider_ = nullptr;
  QLabel* hopLabel_ = nullptr;
  QPushButton* play_ = nullptr;
  QTimer* timer_ = nullptr;
  int stage_ = 0;
  std::vector<StageTime> times_;
  QString timesRun_;
  int highlight_ = -1;
  ExplainCanvas* canvas_ = nullptr;
  ExplainSettingsBar* settings_ = nullptr;
  RunConfig base_;  // the config set last; the settings bar's fields over it are drawn
  bool baseOk_ = false;
  QString baseProblem_;
  QLabel* slide_ = nullptr;
  QScrollArea* notes_ = nullptr;
  QPushButton* notesButton_ = nullptr;
  bool notesShown_ = true;
  std::function<bool(const QString&)> asker_;
  double motion_ = 1.0;
  QTimer* motionTimer_ = nullptr;
  QWidget* motionBar_ = nullptr;
  QSlider* motionSlider_ = nullptr;
  QLabel* motionLabel_ = nullptr;
  QPushButton* playMotion_ = nullptr;
  QWidget* playBar_ = nullptr;
  QLabel* title_ = nullptr;
  QLabel* problems_ = nullptr;
  QLabel* legend_ = nullptr;
  QString layerLegend_, weightsLegend_;
  QSlider* slider_ = nullptr;
  QPushButton* prev_ = nullptr;
  QPushButton* next_ = nullptr;
};

}  // namespace ulysses::ui
