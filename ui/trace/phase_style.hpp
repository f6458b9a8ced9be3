// Display names and colours of trace phases, shared by every trace view (one palette).
// All-to-alls (orange, magenta) and attention (blue) are deliberately far apart.
#pragma once

#include <cstdint>
#include <string>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::ui {

// The profiler's names (prof::phase_name / direction_name): "a2a_seq_to_head", "fwd", ...
const char* phase_label(prof::Phase p);
const char* direction_label(prof::Direction d);
// Phase palettes: the default one, and a colour-blind-safe one (Okabe & Ito's eight colours
// for the attention layer's phases and the all-reduce, distinct greys for the rest), for
// viewers with deuteranopia / protanopia and for projectors.
enum class PhasePalette { Default, ColorBlind };
// The palette the trace views draw with. Process-wide, like QApplication's palette: the
// studio's View menu and `--palette` set it, and the views repaint after a change.
void set_phase_palette(PhasePalette p);
PhasePalette phase_palette();
// "default" / "cb" (also "colorblind", "okabe-ito"); false for anything else.
bool phase_palette_from_name(const std::string& name, PhasePalette* out);
// 0xAARRGGBB; backward ranges are a darker shade of their phase colour.
uint32_t phase_argb(prof::Phase p, prof::Direction d, PhasePalette palette);
// The same in the current palette.
uint32_t phase_argb(prof::Phase p, prof::Direction d = prof::Direction::Forward);
// "1.25 ms", "830 ns", "2.5 s": 3 significant digits.
std::string format_duration_ns(double ns);
// "1,234,567" style byte counts as "1.2 MiB".
std::string format_bytes(int64_t bytes);

constexpr uint32_t kFoldedArgb = 0xFF707070;
constexpr uint32_t kOverlapShadeArgb = 0x4000C853;  // translucent green

}  // namespace ulysses::ui
