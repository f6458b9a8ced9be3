// Named peak tables (see peak_tensor_table.hpp).
#include "trace/peak_tensor_table.hpp"

#include "trace/phase_style.hpp"

namespace ulysses::ui {

TableData peak_tensor_table(const std::vector<prof::PeakTensor>& rows, int64_t peak_bytes) {
  TableData t;
  t.headers = {QStringLiteral("name"),  QStringLiteral("category"), QStringLiteral("dtype"),
               QStringLiteral("shape"), QStringLiteral("bytes"),    QStringLiteral("share")};
  int64_t total = peak_bytes;
  if (total <= 0)
    for (const auto& r : rows) total += r.bytes;
  for (const auto& r : rows) {
    const double share = total > 0 ? 100.0 * double(r.bytes) / double(total) : 0.0;
    t.add({QString::fromStdString(r.name), QString::fromStdString(r.category),
           r.dtype.empty() ? QStringLiteral("-") : QString::fromStdString(r.dtype),
           r.shape.empty() ? QStringLiteral("-") : QString::fromStdString(r.shape),
           QString::fromStdString(format_bytes(double(r.bytes))), QStringLiteral("%1%").arg(share, 0, 'f', 1)},
          {QString::fromStdString(r.name), QString::fromStdString(r.category), QString::fromStdString(r.dtype),
           QString::fromStdString(r.shape), qint64(r.bytes), share});
  }
  t.sort_column = 4;
  t.sort_order = Qt::DescendingOrder;
  return t;
}

}  // namespace ulysses::ui
