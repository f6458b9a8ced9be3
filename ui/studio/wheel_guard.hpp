// One policy for every form in the studio: a combo box, spin box or slider changes on the
// mouse wheel only while it has the keyboard focus (click or Tab into it first). Without the
// focus the wheel goes on to the scroll area around it, so scrolling a form never edits it
// (the launcher's Dtype, Device and LR schedule changed as the pointer passed over them).
// Installed once on the application (MainWindow does); it also keeps such fields from taking
// the focus by the wheel (Qt::WheelFocus becomes Qt::StrongFocus).
#pragma once

#include <QObject>

class QWidget;

namespace ulysses::ui {

class WheelGuard : public QObject {
  Q_OBJECT
 public:
  // Installs the guard on the application once (later calls do nothing) and applies the focus
  // policy to the widgets that already exist.
  static void install();
  // The fields the guard protects: QComboBox, QAbstractSpinBox, QAbstractSlider but QScrollBar.
  static bool guards(const QWidget* w);

 protected:
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  using QObject::QObject;
};

}  // namespace ulysses::ui
