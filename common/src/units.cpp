// Byte counts in binary units (see units.hpp).
#include "ulysses/common/units.hpp"

#include <cmath>
#include <cstdio>

namespace ulysses {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else
    std::snprintf(buf, sizeof buf, std::fabs(v) >= 100 ? "%.0f %s" : (std::fabs(v) >= 10 ? "%.1f %s" : "%.2f %s"), v,
                  units[u]);
  return buf;
}

}  // namespace ulysses
