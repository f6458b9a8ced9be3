// Display names and colours of trace phases, shared by every trace view (one palette).
// All-to-alls (orange, magenta) and attention (blue) are deliberately far apart.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/common/units.hpp"

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
// Name families (Perfetto colours slices by name the same way): ranges of no known phase
// (foreign traces' kernels and NVTX ranges, mostly) take a colour from their name's family, so
// the same name has the same colour in every view and every run, whatever order the names
// appear in. The family: template arguments <...> and argument lists (...) removed, then the
// last "::" component, digits dropped, lower case, spaces and _#.:- trimmed at the ends
// ("void at::native::(anonymous namespace)::elementwise_kernel<4, ...>(int, ...)" ->
// "elementwise_kernel", "ProfilerStep#12" -> "profilerstep", "ncclDevKernel_SendRecv(...)" ->
// "ncclDevKernel_SendRecv" lowered). A name with nothing left is its own family, lowered.
std::string name_family(std::string_view name);
// FNV-1a, 32-bit (a hash that is the same on every machine and build, unlike std::hash).
uint32_t fnv1a32(std::string_view s);
// The family's colour: kNameFamilyPalette[fnv1a32(family) % size], 0xAARRGGBB.
uint32_t name_family_argb(std::string_view name);
// Mid-light hues that read on the timeline's dark background with white labels; no greys (grey
// means folded or unknown).
inline constexpr uint32_t kNameFamilyPalette[] = {
    0xFFE57373, 0xFFF06292, 0xFFBA68C8, 0xFF9575CD, 0xFF7986CB, 0xFF64B5F6, 0xFF4FC3F7, 0xFF4DD0E1,
    0xFF4DB6AC, 0xFF81C784, 0xFFAED581, 0xFFDCE775, 0xFFFFD54F, 0xFFFFB74D, 0xFFFF8A65, 0xFFA1887F,
    0xFFD81B60, 0xFF3949AB, 0xFF00897B, 0xFF7CB342, 0xFFF4511E, 0xFF8E24AA, 0xFF1E88E5, 0xFFC0CA33};
// "1.25 ms", "830 ns", "2.5 s": 3 significant digits.
std::string format_duration_ns(double ns);
// Byte counts as "1.20 MiB": the one byte formatter (common/, units.hpp).
using ulysses::format_bytes;

constexpr uint32_t kFoldedArgb = 0xFF707070;
constexpr uint32_t kOverlapShadeArgb = 0x4000C853;  // translucent green

}  // namespace ulysses::ui
