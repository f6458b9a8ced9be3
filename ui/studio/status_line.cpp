// The status bar that never overflows (see status_line.hpp).
#include "status_line.hpp"

#include <QEvent>
#include <QLabel>
#include <QPainter>
#include <QStyle>
#include <QStyleOption>
#include <algorithm>

namespace ulysses::ui {

StatusLine::StatusLine(QWidget* parent) : QStatusBar(parent) {
  setObjectName(QStringLiteral("statusLine"));
  runLabel_ = new QLabel(this);
  runLabel_->setObjectName(QStringLiteral("statusRun"));
  runLabel_->setMinimumWidth(1);  // its whole text is no minimum: it is elided
  addPermanentWidget(runLabel_);
  connect(this, &QStatusBar::messageChanged, this, [this](const QString& m) {
    setToolTip(shownMessage() == m ? QString() : m);  // the whole message on hover when elided
  });
}

void StatusLine::setRunText(const QString& text) {
  run_ = text;
  fitRun();
}

void StatusLine::fitRun() {
  const int most = std::max(40, width() / 3);
  runLabel_->setMaximumWidth(most);
  const QString shown = runLabel_->fontMetrics().elidedText(run_, Qt::ElideMiddle, most - 4);
  runLabel_->setText(shown);
  runLabel_->setToolTip(shown == run_ ? QString() : run_);
}

void StatusLine::resizeEvent(QResizeEvent* e) {
  QStatusBar::resizeEvent(e);
  fitRun();
}

void StatusLine::changeEvent(QEvent* e) {
  QStatusBar::changeEvent(e);
  if (e->type() == QEvent::FontChange) fitRun();  // presentation mode's larger font
}

QRect StatusLine::messageRect() const {
  // From the left margin QStatusBar draws its message at to the first permanent widget shown.
  int right = width() - 4;
  for (QWidget* c : findChildren<QWidget*>(QString(), Qt::FindDirectChildrenOnly))
    if (c->isVisible() && c->width() > 0) right = std::min(right, c->geometry().left() - 6);
  return QRect(6, 0, std::max(0, right - 6), height());
}

QString StatusLine::shownMessage() const {
  return fontMetrics().elidedText(currentMessage(), Qt::ElideRight, messageRect().width());
}

void StatusLine::paintEvent(QPaintEvent* e) {
  if (currentMessage().isEmpty()) return QStatusBar::paintEvent(e);
  QPainter p(this);
  QStyleOption opt;
  opt.initFrom(this);
  style()->drawPrimitive(QStyle::PE_PanelStatusBar, &opt, &p, this);
  p.setPen(palette().windowText().color());
  p.drawText(messageRect(), Qt::AlignLeading | Qt::AlignVCenter | Qt::TextSingleLine, shownMessage());
}

}  // namespace ulysses::ui
