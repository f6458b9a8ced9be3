// Charts in the widget's font (see chart_fonts.hpp).
#include "trace/chart_fonts.hpp"

#include <QAbstractAxis>
#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QLegend>

namespace ulysses::ui {

void apply_chart_font(QChart* chart, const QFont& f) {
  if (!chart) return;
  QFont bold = f;
  bold.setBold(true);
  if (chart->titleFont() != bold) chart->setTitleFont(bold);
  if (chart->legend() && chart->legend()->font() != f) chart->legend()->setFont(f);
  for (QAbstractAxis* a : chart->axes()) {
    if (a->labelsFont() != f) a->setLabelsFont(f);
    if (a->titleFont() != f) a->setTitleFont(f);
  }
}

namespace {
// On the view: a font change applies the font; each paint applies it to axes added since (a
// view that reloads its data makes new axes, in the theme's fonts).
class ChartFontFollower : public QObject {
 public:
  explicit ChartFontFollower(QChartView* v) : QObject(v), view_(v) {}
  bool eventFilter(QObject* o, QEvent* e) override {
    if (e->type() == QEvent::FontChange || e->type() == QEvent::Paint || e->type() == QEvent::Show)
      apply_chart_font(view_->chart(), view_->font());
    return QObject::eventFilter(o, e);
  }

 private:
  QChartView* view_;
};
}  // namespace

void follow_widget_font(QChartView* view) {
  if (!view) return;
  auto* f = new ChartFontFollower(view);
  view->installEventFilter(f);
  view->viewport()->installEventFilter(f);
  apply_chart_font(view->chart(), view->font());
}

}  // namespace ulysses::ui
