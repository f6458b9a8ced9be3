// Image export of the studio's views (see export_image.hpp).
#include "export_image.hpp"

#include <QBuffer>
#include <QFile>
#include <QFileInfo>
#include <QPixmap>
#include <QWidget>

#include "cost_model.hpp"
#include "explain_model.hpp"
#include "native_path.hpp"
#include "run_data.hpp"
#include "svg_export.hpp"

namespace ulysses::ui {

bool exportWidgetImage(QWidget* w, const QString& path, QString* error) {
  if (!w) {
    if (error) *error = QStringLiteral("nothing to export");
    return false;
  }
  if (QFileInfo(path).suffix().toLower() == QLatin1String("svg")) return exportWidgetSvg(w, path, error);
  // Encoded in memory, then written whole under the exact name asked for (QPixmap::save(path)
  // wrote a name that is not UTF-8 as another file, U+FFFD in place of its bytes).
  const QPixmap pm = w->grab();
  QByteArray bytes;
  QBuffer buf(&bytes);
  const QByteArray format = QFileInfo(path).suffix().toLower().toLatin1();
  QString why;
  if (pm.isNull() || format.isEmpty() || !buf.open(QIODevice::WriteOnly) || !pm.save(&buf, format.constData()) ||
      !writeFileWhole(path, bytes, &why)) {
    if (error)
      *error = QStringLiteral("cannot write %1 (use a .png or .jpg name in a writable folder)%2")
                   .arg(display_path(path), why.isEmpty() ? QString() : QStringLiteral(": ") + why);
    return false;
  }
  return true;
}

QString explainStageSvg(const Explanation& e, int stage) {
  if (!e.ok || stage < 0 || stage >= static_cast<int>(e.stages.size())) return {};
  const auto& st = e.stages[static_cast<size_t>(stage)];
  const int P = static_cast<int>(e.P), H = static_cast<int>(e.H), K = static_cast<int>(e.Hkv);
  const double colW = 260, gap = 24, gridH = 300, top = 70, margin = 16;
  const double kvW = std::max(24.0, colW * K / (H + K + 1)), qW = colW - kvW - 6;
  const double W = margin * 2 + P * colW + (P - 1) * gap, Hh = top + gridH + 70;
  const double rowH = gridH / P, cq = qW / H, ck = kvW / K;
  auto esc = [](QString s) { return s.toHtmlEscaped(); };
  QString o =
      QStringLiteral(
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%1\" height=\"%2\" viewBox=\"0 0 %1 %2\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n")
          .arg(W)
          .arg(Hh);
  o += QStringLiteral("<text x=\"%1\" y=\"20\" font-weight=\"bold\">%2. %3</text>\n<text x=\"%1\" y=\"38\">%4</text>\n")
           .arg(margin)
           .arg(stage + 1)
           .arg(esc(QString::fromStdString(st.name)), esc(QString::fromStdString(st.shapes)));
  const char* colors[] = {"#969696", "#0072B2", "#E69F00", "#009E73"};  // hidden, q, kv, out (Okabe-Ito)
  for (int r = 0; r < P; ++r) {
    const double x0 = margin + r * (colW + gap);
    o += QStringLiteral("<text x=\"%1\" y=\"%2\" text-anchor=\"middle\">rank %3</text>\n")
             .arg(x0 + colW / 2)
             .arg(top - 8)
             .arg(r);
    o += QStringLiteral("<rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" fill=\"none\" stroke=\"#aaa\"/>\n")
             .arg(x0)
             .arg(top)
             .arg(qW)
             .arg(gridH);
    o += QStringLiteral("<rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" fill=\"none\" stroke=\"#aaa\"/>\n")
             .arg(x0 + qW + 6)
             .arg(top)
             .arg(kvW)
             .arg(gridH);
    for (const auto& b : st.ranks[static_cast<size_t>(r)]) {
      const bool kv = b.kind == HeadBlock::KV;
      const double x = kv ? x0 + qW + 6 + ck * double(b.head_begin) : x0 + cq * double(b.head_begin);
      const double w = (kv ? ck : cq) * double(b.head_end - b.head_begin);
      const double y = top + rowH * double(b.tok_begin) / double(e.n),
                   h = rowH * double(b.tok_end - b.tok_begin) / double(e.n);
      o += QStringLiteral(
               "<rect class=\"block\" x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" fill=\"%5\" stroke=\"#333\"%6/>\n")
               .arg(x + 1)
               .arg(y + 1)
               .arg(std::max(1.0, w - 2))
               .arg(std::max(1.0, h - 2))
               .arg(QLatin1String(colors[b.kind]))
               .arg(b.replicated ? QStringLiteral(" fill-opacity=\"0.55\" stroke-dasharray=\"4 2\"") : QString());
    }
    if (st.bytes_sent > 0)
      o += QStringLiteral("<text x=\"%1\" y=\"%2\" text-anchor=\"middle\">sends %3, receives %4</text>\n")
               .arg(x0 + colW / 2)
               .arg(top + gridH + 22)
               .arg(QString::fromStdString(cost::format_bytes(double(st.bytes_sent))),
                    QString::fromStdString(cost::format_bytes(double(st.bytes_recv))));
  }
  return o + QStringLiteral("</svg>\n");
}

}  // namespace ulysses::ui
