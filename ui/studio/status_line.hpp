// The main window's status bar, which never overflows (docs/STUDIO.md): a message longer than
// the room left of the permanent widgets is elided at its end (the whole of it on hover), and the
// run's name at the right is elided in its middle to at most a third of the bar, so no message
// and no folder name widens the window or runs off a 1024x768 projector.
#pragma once

#include <QStatusBar>

class QLabel;

namespace ulysses::ui {

class StatusLine : public QStatusBar {
  Q_OBJECT
 public:
  explicit StatusLine(QWidget* parent = nullptr);
  // The permanent text at the right ("running: RUN", "finished: RUN").
  void setRunText(const QString& text);
  QString runText() const { return run_; }
  QLabel* runLabel() const { return runLabel_; }
  // The message as drawn (elided to its room) and that room, in the bar's pixels.
  QString shownMessage() const;
  QRect messageRect() const;

 protected:
  void paintEvent(QPaintEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;
  void changeEvent(QEvent* e) override;

 private:
  void fitRun();
  QLabel* runLabel_;
  QString run_;
};

}  // namespace ulysses::ui
