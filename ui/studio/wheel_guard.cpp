// The wheel guard (wheel_guard.hpp).
#include "wheel_guard.hpp"

#include <QAbstractSlider>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QScrollBar>
#include <QEvent>
#include <QWheelEvent>

namespace ulysses::ui {

namespace {
void strip_wheel_focus(QWidget* w) {
  if (w->focusPolicy() & Qt::WheelFocus & ~Qt::StrongFocus) w->setFocusPolicy(Qt::StrongFocus);
}
}  // namespace

bool WheelGuard::guards(const QWidget* w) {
  // Scroll bars are sliders too, and the wheel is theirs.
  return qobject_cast<const QComboBox*>(w) || qobject_cast<const QAbstractSpinBox*>(w) ||
         (qobject_cast<const QAbstractSlider*>(w) && !qobject_cast<const QScrollBar*>(w));
}

void WheelGuard::install() {
  auto* app = QCoreApplication::instance();
  if (!app || app->findChild<WheelGuard*>(QString(), Qt::FindDirectChildrenOnly)) return;
  app->installEventFilter(new WheelGuard(app));
  for (QWidget* w : QApplication::allWidgets())
    if (guards(w)) strip_wheel_focus(w);
}

bool WheelGuard::eventFilter(QObject* o, QEvent* e) {
  const QEvent::Type t = e->type();
  if (t != QEvent::Wheel && t != QEvent::Polish) return false;
  if (!o->isWidgetType()) return false;
  auto* w = static_cast<QWidget*>(o);
  if (!guards(w)) return false;
  if (t == QEvent::Polish) {
    strip_wheel_focus(w);
    return false;
  }
  // A spin box's line edit has the focus when the spin box is being edited.
  if (w->hasFocus() || (w->focusProxy() && w->focusProxy()->hasFocus())) return false;
  // Not delivered to the field; ignored, so QApplication passes it on to the parents (the
  // scroll area scrolls).
  e->ignore();
  return true;
}

}  // namespace ulysses::ui
