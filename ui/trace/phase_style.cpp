// Phase names and palette.
#include "trace/phase_style.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace ulysses::ui {

using prof::Direction;
using prof::Phase;

const char* phase_label(Phase p) { return prof::phase_name(p); }

const char* direction_label(Direction d) { return prof::direction_name(d); }

namespace {
PhasePalette g_palette = PhasePalette::Default;

uint32_t default_argb(Phase p) {
  switch (p) {
    case Phase::Step:
      return 0xFF9E9E9E;
    case Phase::Embedding:
      return 0xFF8D6E63;
    case Phase::QkvProj:
      return 0xFF4DB6AC;
    case Phase::A2ASeqToHead:
      return 0xFFFF8F00;
    case Phase::Attention:
      return 0xFF1E63E5;
    case Phase::A2AHeadToSeq:
      return 0xFFE0205E;
    case Phase::OutProj:
      return 0xFF26A69A;
    case Phase::Mlp:
      return 0xFF66BB6A;
    case Phase::Norm:
      return 0xFFC0CA33;
    case Phase::LmHead:
      return 0xFF7E57C2;
    case Phase::Loss:
      return 0xFFA1887F;
    case Phase::Backward:
      return 0xFF90A4AE;
    case Phase::GradAllReduce:
      return 0xFF9C27B0;
    case Phase::RingStep:
      return 0xFF00ACC1;
    case Phase::Collective:
      return 0xFF6A1B9A;
    case Phase::Data:
      return 0xFF8D6E63;
    case Phase::FaultDelay:
      return 0xFFE53935;
    case Phase::Optimizer:
      return 0xFFFBC02D;
    default:
      return 0xFFBDBDBD;
  }
}

// Okabe & Ito (2008), "Color Universal Design": orange E69F00, sky blue 56B4E9, bluish green
// 009E73, yellow F0E442, blue 0072B2, vermillion D55E00, reddish purple CC79A7 (black is
// invisible on the timeline's dark background). The two all-to-alls (orange, vermillion)
// differ in lightness as well as hue; phases outside the attention layer are greys.
uint32_t color_blind_argb(Phase p) {
  switch (p) {
    case Phase::Step:
      return 0xFFB3B3B3;
    case Phase::Embedding:
      return 0xFF8A8A8A;
    case Phase::QkvProj:
      return 0xFF56B4E9;
    case Phase::A2ASeqToHead:
      return 0xFFE69F00;
    case Phase::Attention:
      return 0xFF0072B2;
    case Phase::A2AHeadToSeq:
      return 0xFFD55E00;
    case Phase::OutProj:
      return 0xFF009E73;
    case Phase::Mlp:
      return 0xFFF0E442;
    case Phase::Norm:
      return 0xFFDADADA;
    case Phase::LmHead:
      return 0xFF5E5E5E;
    case Phase::Loss:
      return 0xFF474747;
    case Phase::Backward:
      return 0xFFC6C6C6;
    case Phase::GradAllReduce:
      return 0xFFCC79A7;
    case Phase::RingStep:  // sky blue, lighter than qkv_proj's
      return 0xFFA6D8F5;
    case Phase::Collective:  // reddish purple, lighter than grad_allreduce's
      return 0xFFE8B4D0;
    case Phase::Data:
      return 0xFF6B6B6B;
    case Phase::FaultDelay:  // vermillion, darker than a2a_head_to_seq's
      return 0xFF8F3E00;
    case Phase::Optimizer:
      return 0xFF9C9C9C;
    default:
      return 0xFF7A7A7A;
  }
}
}  // namespace

void set_phase_palette(PhasePalette p) { g_palette = p; }
PhasePalette phase_palette() { return g_palette; }

bool phase_palette_from_name(const std::string& name, PhasePalette* out) {
  PhasePalette p;
  if (name == "default")
    p = PhasePalette::Default;
  else if (name == "cb" || name == "colorblind" || name == "color-blind" || name == "okabe-ito")
    p = PhasePalette::ColorBlind;
  else
    return false;
  if (out) *out = p;
  return true;
}

uint32_t phase_argb(Phase p, Direction d) { return phase_argb(p, d, g_palette); }

uint32_t phase_argb(Phase p, Direction d, PhasePalette palette) {
  uint32_t c = palette == PhasePalette::ColorBlind ? color_blind_argb(p) : default_argb(p);
  if (d == Direction::Backward || d == Direction::Recompute) {
    const double k = d == Direction::Backward ? 0.75 : 0.6;
    uint32_t r = uint32_t(((c >> 16) & 0xFF) * k), g = uint32_t(((c >> 8) & 0xFF) * k), b = uint32_t((c & 0xFF) * k);
    c = 0xFF000000u | (r << 16) | (g << 8) | b;
  }
  return c;
}

std::string name_family(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  int angle = 0, paren = 0;
  for (const char c : name) {
    if (c == '<') {
      ++angle;
      continue;
    }
    if (c == '(') {
      ++paren;
      continue;
    }
    if (c == '>' && angle > 0) {
      --angle;
      continue;
    }
    if (c == ')' && paren > 0) {
      --paren;
      continue;
    }
    if (angle > 0 || paren > 0 || std::isdigit(static_cast<unsigned char>(c))) continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (out.rfind("void ", 0) == 0) out.erase(0, 5);
  // The last "::" component that is not empty ("at::native::::kernel" -> "kernel").
  const size_t last = out.rfind("::");
  if (last != std::string::npos && last + 2 < out.size()) out.erase(0, last + 2);
  const char* trim = " _#.:-\t";
  const size_t a = out.find_first_not_of(trim);
  if (a == std::string::npos) {
    std::string raw(name);
    for (char& c : raw) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return raw;
  }
  return out.substr(a, out.find_last_not_of(trim) - a + 1);
}

uint32_t fnv1a32(std::string_view s) {
  uint32_t h = 2166136261u;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

uint32_t name_family_argb(std::string_view name) {
  constexpr size_t n = sizeof(kNameFamilyPalette) / sizeof(kNameFamilyPalette[0]);
  return kNameFamilyPalette[fnv1a32(name_family(name)) % n];
}

std::string format_duration_ns(double ns) {
  if (ns == 0) return "0";
  const double a = std::fabs(ns);
  const char* unit = "ns";
  double v = ns;
  if (a >= 1e9) {
    v = ns / 1e9;
    unit = "s";
  } else if (a >= 1e6) {
    v = ns / 1e6;
    unit = "ms";
  } else if (a >= 1e3) {
    v = ns / 1e3;
    unit = "us";
  }
  char buf[64];
  const double av = std::fabs(v);
  std::snprintf(buf, sizeof buf, av >= 100 ? "%.0f %s" : av >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return buf;
}

}  // namespace ulysses::ui
