// Dark theme: Fusion style with a dark palette; light: the platform's palette.
#include "theme.hpp"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

namespace ulysses::ui {

void applyTheme(bool dark) {
  auto* app = qobject_cast<QApplication*>(QApplication::instance());
  if (!app) return;
  static const QString originalStyle = app->style()->objectName();
  static const QPalette original = app->palette();
  if (!dark) {
    if (auto* s = QStyleFactory::create(originalStyle)) app->setStyle(s);
    app->setPalette(original);
    return;
  }
  app->setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette p;
  const QColor window(0x2b, 0x2d, 0x31), base(0x1e, 0x1f, 0x22), text(0xe6, 0xe6, 0xe6), accent(0x3d, 0x8e, 0xd9);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, Qt::red);
  p.setColor(QPalette::Link, accent);
  p.setColor(QPalette::Highlight, accent);
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::PlaceholderText, QColor(0x88, 0x88, 0x88));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x77, 0x77, 0x77));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x77, 0x77, 0x77));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x77, 0x77, 0x77));
  app->setPalette(p);
}

}  // namespace ulysses::ui
