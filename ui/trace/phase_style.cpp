// Phase names and palette.
#include "trace/phase_style.hpp"

#include <cmath>
#include <cstdio>

namespace ulysses::ui {

using prof::Direction;
using prof::Phase;

const char* phase_label(Phase p) { return prof::phase_name(p); }

const char* direction_label(Direction d) { return prof::direction_name(d); }

uint32_t phase_argb(Phase p, Direction d) {
  uint32_t c = 0xFFBDBDBD;
  switch (p) {
    case Phase::Step: c = 0xFF9E9E9E; break;
    case Phase::Embedding: c = 0xFF8D6E63; break;
    case Phase::QkvProj: c = 0xFF4DB6AC; break;
    case Phase::A2ASeqToHead: c = 0xFFFF8F00; break;
    case Phase::Attention: c = 0xFF1E63E5; break;
    case Phase::A2AHeadToSeq: c = 0xFFE0205E; break;
    case Phase::OutProj: c = 0xFF26A69A; break;
    case Phase::Mlp: c = 0xFF66BB6A; break;
    case Phase::Norm: c = 0xFFC0CA33; break;
    case Phase::LmHead: c = 0xFF7E57C2; break;
    case Phase::Loss: c = 0xFFA1887F; break;
    case Phase::Backward: c = 0xFF90A4AE; break;
    case Phase::GradAllReduce: c = 0xFF9C27B0; break;
    case Phase::Optimizer: c = 0xFFFBC02D; break;
    default: break;
  }
  if (d == Direction::Backward || d == Direction::Recompute) {
    const double k = d == Direction::Backward ? 0.75 : 0.6;
    uint32_t r = uint32_t(((c >> 16) & 0xFF) * k), g = uint32_t(((c >> 8) & 0xFF) * k), b = uint32_t((c & 0xFF) * k);
    c = 0xFF000000u | (r << 16) | (g << 8) | b;
  }
  return c;
}

std::string format_duration_ns(double ns) {
  if (ns == 0) return "0";
  const double a = std::fabs(ns);
  const char* unit = "ns";
  double v = ns;
  if (a >= 1e9) { v = ns / 1e9; unit = "s"; }
  else if (a >= 1e6) { v = ns / 1e6; unit = "ms"; }
  else if (a >= 1e3) { v = ns / 1e3; unit = "us"; }
  char buf[64];
  const double av = std::fabs(v);
  std::snprintf(buf, sizeof buf, av >= 100 ? "%.0f %s" : av >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return buf;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace ulysses::ui
