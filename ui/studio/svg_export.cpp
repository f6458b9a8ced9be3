// A QPaintEngine that writes SVG (see svg_export.hpp).
#include "svg_export.hpp"

#include <algorithm>

#include <QBuffer>
#include <QFile>
#include <QImage>
#include <QPaintEngine>
#include <QPainter>
#include <QPainterPath>
#include <QPixmap>
#include <QSaveFile>
#include <QTextItem>
#include <QWidget>

#include "native_path.hpp"
#include "run_data.hpp"

namespace ulysses::ui {

namespace {

QString num(double v) { return QString::number(v, 'g', 6); }

QString colour(const QColor& c) { return c.name(QColor::HexRgb); }

QString escape(const QString& s) {
  QString o = s.toHtmlEscaped();
  // XML 1.0 refuses most control characters; drop them.
  o.erase(
      std::remove_if(o.begin(), o.end(), [](QChar ch) { return ch.unicode() < 0x20 && ch != u'\t' && ch != u'\n'; }),
      o.end());
  return o;
}

QString pathData(const QPainterPath& p) {
  QString d;
  d.reserve(p.elementCount() * 16);
  for (int i = 0; i < p.elementCount(); ++i) {
    const QPainterPath::Element& e = p.elementAt(i);
    switch (e.type) {
      case QPainterPath::MoveToElement:
        d += QLatin1Char('M');
        break;
      case QPainterPath::LineToElement:
        d += QLatin1Char('L');
        break;
      case QPainterPath::CurveToElement:
        d += QLatin1Char('C');
        break;
      case QPainterPath::CurveToDataElement:
        d += QLatin1Char(' ');
        break;
    }
    d += num(e.x) + QLatin1Char(' ') + num(e.y);
  }
  return d;
}

class SvgEngine : public QPaintEngine {
 public:
  SvgEngine()
      : QPaintEngine(QPaintEngine::PaintEngineFeatures(QPaintEngine::AllFeatures) &
                     ~QPaintEngine::PaintEngineFeatures(QPaintEngine::PerspectiveTransform |
                                                        QPaintEngine::ConicalGradientFill | QPaintEngine::PorterDuff)) {
  }
  QString body;

  bool begin(QPaintDevice*) override {
    open_ = false;
    dirty_ = true;
    return true;
  }
  bool end() override {
    closeGroup();
    return true;
  }
  Type type() const override { return QPaintEngine::User; }

  void updateState(const QPaintEngineState& s) override {
    if (s.state() & DirtyPen) pen_ = s.pen();
    if (s.state() & DirtyBrush) brush_ = s.brush();
    if (s.state() & DirtyTransform) transform_ = s.transform();
    if (s.state() & DirtyOpacity) opacity_ = s.opacity();
    if (s.state() & DirtyFont) font_ = s.font();
    // Pen, brush and font go on each element; a new <g> only for transform, opacity and clip.
    if (s.state() & (DirtyTransform | DirtyOpacity | DirtyClipPath | DirtyClipRegion | DirtyClipEnabled)) dirty_ = true;
  }

  void drawPath(const QPainterPath& path) override {
    if (path.isEmpty()) return;
    ensureGroup();
    body += QStringLiteral("<path d=\"%1\"%2%3/>\n")
                .arg(pathData(path), fillAttrs(path.fillRule() == Qt::WindingFill), strokeAttrs());
  }

  void drawPolygon(const QPointF* pts, int n, PolygonDrawMode mode) override {
    if (n <= 0) return;
    ensureGroup();
    QString d;
    for (int i = 0; i < n; ++i)
      d += (i ? QStringLiteral(" ") : QString()) + num(pts[i].x()) + QLatin1Char(',') + num(pts[i].y());
    if (mode == PolylineMode)
      body += QStringLiteral("<polyline points=\"%1\" fill=\"none\"%2/>\n").arg(d, strokeAttrs());
    else
      body += QStringLiteral("<polygon points=\"%1\"%2%3/>\n").arg(d, fillAttrs(mode == WindingMode), strokeAttrs());
  }

  void drawPixmap(const QRectF& r, const QPixmap& pm, const QRectF& sr) override {
    drawImage(r, pm.toImage(), sr, Qt::AutoColor);
  }

  void drawImage(const QRectF& r, const QImage& img, const QRectF& sr, Qt::ImageConversionFlags) override {
    if (img.isNull() || r.isEmpty()) return;
    ensureGroup();
    const QImage part = sr.toRect() == img.rect() ? img : img.copy(sr.toRect());
    QByteArray png;
    QBuffer buf(&png);
    buf.open(QIODevice::WriteOnly);
    part.save(&buf, "PNG");
    body += QStringLiteral(
                "<image x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" preserveAspectRatio=\"none\" "
                "xlink:href=\"data:image/png;base64,%5\"/>\n")
                .arg(num(r.x()), num(r.y()), num(r.width()), num(r.height()), QString::fromLatin1(png.toBase64()));
  }

  void drawTextItem(const QPointF& p, const QTextItem& ti) override {
    const QString text = escape(ti.text());
    if (text.trimmed().isEmpty()) return;
    ensureGroup();
    const QFont f = ti.font();
    const double px = f.pixelSize() > 0 ? f.pixelSize() : f.pointSizeF() * 96.0 / 72.0;
    body += QStringLiteral(
                "<text x=\"%1\" y=\"%2\" font-family=\"%3\" font-size=\"%4\"%5%6 fill=\"%7\"%8 "
                "xml:space=\"preserve\">%9</text>\n")
                .arg(num(p.x()), num(p.y()), escape(f.family()), num(px),
                     f.bold() ? QStringLiteral(" font-weight=\"bold\"") : QString(),
                     f.italic() ? QStringLiteral(" font-style=\"italic\"") : QString(), colour(pen_.color()),
                     pen_.color().alphaF() < 1 ? QStringLiteral(" fill-opacity=\"%1\"").arg(num(pen_.color().alphaF()))
                                               : QString(),
                     text);
  }

 private:
  QString fillAttrs(bool winding) const {
    if (brush_.style() == Qt::NoBrush) return QStringLiteral(" fill=\"none\"");
    QColor c = brush_.color();
    if (const QGradient* g = brush_.gradient(); g && !g->stops().isEmpty()) c = g->stops().front().second;
    double a = c.alphaF();
    if (brush_.style() >= Qt::Dense1Pattern && brush_.style() <= Qt::DiagCrossPattern) a *= 0.4;  // hatching: a tint
    QString s = QStringLiteral(" fill=\"%1\"").arg(colour(c));
    if (a < 1) s += QStringLiteral(" fill-opacity=\"%1\"").arg(num(a));
    if (!winding) s += QStringLiteral(" fill-rule=\"evenodd\"");
    return s;
  }
  QString strokeAttrs() const {
    if (pen_.style() == Qt::NoPen || pen_.brush().style() == Qt::NoBrush) return QStringLiteral(" stroke=\"none\"");
    const QColor c = pen_.color();
    QString s = QStringLiteral(" stroke=\"%1\" stroke-width=\"%2\"")
                    .arg(colour(c), num(pen_.widthF() > 0 ? pen_.widthF() : 1.0));
    if (pen_.isCosmetic()) s += QStringLiteral(" vector-effect=\"non-scaling-stroke\"");
    if (c.alphaF() < 1) s += QStringLiteral(" stroke-opacity=\"%1\"").arg(num(c.alphaF()));
    if (pen_.style() == Qt::DashLine)
      s += QStringLiteral(" stroke-dasharray=\"4 2\"");
    else if (pen_.style() == Qt::DotLine)
      s += QStringLiteral(" stroke-dasharray=\"1 2\"");
    return s;
  }
  void closeGroup() {
    if (open_) body += QStringLiteral("</g></g>\n");
    open_ = false;
  }
  // One <g> per painter state: transform, opacity and clip.
  void ensureGroup() {
    if (!dirty_ && open_ && systemClip() == sysClip_) return;
    closeGroup();
    // The widget's own area (QWidget::render sets it per child, in device coordinates): an
    // outer group, so a style that paints past its widget is cut where the screen cuts it.
    sysClip_ = systemClip();
    QString sys;
    if (!sysClip_.isEmpty()) {
      QPainterPath p;
      p.addRegion(sysClip_);
      sys = QStringLiteral("c%1").arg(++clips_);
      body += QStringLiteral("<clipPath id=\"%1\" clipPathUnits=\"userSpaceOnUse\"><path d=\"%2\"/></clipPath>\n")
                  .arg(sys, pathData(p));
    }
    body += sys.isEmpty() ? QStringLiteral("<g>") : QStringLiteral("<g clip-path=\"url(#%1)\">").arg(sys);
    // The clip in the painter's logical coordinates: the group's user space (after its transform).
    clipPathId_.clear();
    if (painter() && painter()->hasClipping()) {
      clipPathId_ = QStringLiteral("c%1").arg(++clips_);
      body += QStringLiteral("<clipPath id=\"%1\" clipPathUnits=\"userSpaceOnUse\"><path d=\"%2\"/></clipPath>\n")
                  .arg(clipPathId_, pathData(painter()->clipPath()));
    }
    body += QStringLiteral("<g transform=\"%1\"%2%3>\n")
                .arg(matrix(), opacity_ < 1 ? QStringLiteral(" opacity=\"%1\"").arg(num(opacity_)) : QString(),
                     clipPathId_.isEmpty() ? QString() : QStringLiteral(" clip-path=\"url(#%1)\"").arg(clipPathId_));
    open_ = true;
    dirty_ = false;
  }
  QString matrix() const {
    const QTransform& t = transform_;
    return QStringLiteral("matrix(%1 %2 %3 %4 %5 %6)")
        .arg(num(t.m11()), num(t.m12()), num(t.m21()), num(t.m22()), num(t.dx()), num(t.dy()));
  }

  QPen pen_;
  QBrush brush_;
  QTransform transform_;
  QFont font_;
  double opacity_ = 1;
  bool open_ = false, dirty_ = true;
  QString clipPathId_;
  QRegion sysClip_;
  int clips_ = 0;
};

class SvgDevice : public QPaintDevice {
 public:
  explicit SvgDevice(QSize size) : size_(size) {}
  ~SvgDevice() override = default;
  QPaintEngine* paintEngine() const override { return &engine_; }
  SvgEngine& engine() { return engine_; }

 protected:
  int metric(PaintDeviceMetric m) const override {
    switch (m) {
      case PdmWidth:
        return size_.width();
      case PdmHeight:
        return size_.height();
      case PdmWidthMM:
        return qRound(size_.width() * 25.4 / 96.0);
      case PdmHeightMM:
        return qRound(size_.height() * 25.4 / 96.0);
      case PdmNumColors:
        return 0x7FFFFFFF;
      case PdmDepth:
        return 32;
      case PdmDpiX:
      case PdmDpiY:
      case PdmPhysicalDpiX:
      case PdmPhysicalDpiY:
        return 96;
      case PdmDevicePixelRatio:
        return 1;
      case PdmDevicePixelRatioScaled:
        return static_cast<int>(devicePixelRatioFScale());
      default:
        return 0;
    }
  }

 private:
  QSize size_;
  mutable SvgEngine engine_;
};

}  // namespace

QString widgetSvg(QWidget* w) {
  if (!w) return {};
  const QSize size = w->size().expandedTo(QSize(1, 1));
  SvgDevice dev(size);
  w->render(&dev, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
  return QStringLiteral(
             "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" version=\"1.1\" "
             "width=\"%1\" height=\"%2\" viewBox=\"0 0 %1 %2\">\n<title>%3</title>\n")
             .arg(size.width())
             .arg(size.height())
             .arg(escape(w->windowTitle().isEmpty() ? w->objectName() : w->windowTitle())) +
         dev.engine().body + QStringLiteral("</svg>\n");
}

bool exportWidgetSvg(QWidget* w, const QString& path, QString* error) {
  if (!w) {
    if (error) *error = QStringLiteral("nothing to export");
    return false;
  }
  const QString svg = widgetSvg(w);
  // Renamed over `path` only when whole (a full disk keeps the old file), under the exact name
  // asked for, bytes that are not UTF-8 included (native_path.hpp).
  QString why;
  if (!writeFileWhole(path, svg.toUtf8(), &why)) {
    if (error) *error = QStringLiteral("cannot write %1 (a writable folder?): %2").arg(display_path(path), why);
    return false;
  }
  return true;
}

}  // namespace ulysses::ui
