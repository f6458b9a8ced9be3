// Phase palettes (ui/trace/phase_style): the colour-blind-safe palette gives every phase its
// own colour, differs from the default palette for every phase, and keeps the attention
// layer's phases apart for viewers with deuteranopia or protanopia, simulated with Machado,
// Oliveira & Fernandes (2009), severity 1, in linear RGB: its smallest pairwise distance there
// is at least 45 (sRGB units, 0-255 per channel) and larger than the default palette's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "trace/phase_style.hpp"

using namespace ulysses;
using prof::Phase;
using ui::PhasePalette;

namespace {
using Mat = double[3][3];
const Mat kDeuteranopia = {
    {0.367322, 0.860646, -0.227968}, {0.280085, 0.672501, 0.047413}, {-0.011820, 0.042940, 0.968881}};
const Mat kProtanopia = {
    {0.152286, 1.052583, -0.204868}, {0.114503, 0.786281, 0.099216}, {-0.003882, -0.048116, 1.051998}};

double to_linear(double c) {
  c /= 255;
  return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
}
double to_srgb(double v) {
  v = std::min(1.0, std::max(0.0, v));
  return 255 * (v <= 0.0031308 ? 12.92 * v : 1.055 * std::pow(v, 1 / 2.4) - 0.055);
}
std::vector<double> simulate(const Mat& m, uint32_t argb) {
  const double rgb[3] = {to_linear((argb >> 16) & 0xFF), to_linear((argb >> 8) & 0xFF), to_linear(argb & 0xFF)};
  std::vector<double> out(3);
  for (int i = 0; i < 3; ++i) out[size_t(i)] = to_srgb(m[i][0] * rgb[0] + m[i][1] * rgb[1] + m[i][2] * rgb[2]);
  return out;
}
// The phases a lecturer points at: the attention layer's five stages, the MLP, the all-reduce.
const Phase kKey[] = {Phase::QkvProj, Phase::A2ASeqToHead, Phase::Attention,    Phase::A2AHeadToSeq,
                      Phase::OutProj, Phase::Mlp,          Phase::GradAllReduce};
double min_pair_distance(const Mat& m, PhasePalette pal) {
  double best = 1e9;
  for (size_t i = 0; i < std::size(kKey); ++i)
    for (size_t j = i + 1; j < std::size(kKey); ++j) {
      const auto a = simulate(m, ui::phase_argb(kKey[i], prof::Direction::Forward, pal));
      const auto b = simulate(m, ui::phase_argb(kKey[j], prof::Direction::Forward, pal));
      best = std::min(best, std::hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]));
    }
  return best;
}
}  // namespace

TEST(PhasePalette, ColorBlindColoursDistinctAndNotTheDefaults) {
  std::set<uint32_t> cb;
  for (int i = 0; i < int(Phase::Count); ++i) {
    const auto p = Phase(i);
    const uint32_t c = ui::phase_argb(p, prof::Direction::Forward, PhasePalette::ColorBlind);
    EXPECT_TRUE(cb.insert(c).second) << "colour-blind palette repeats a colour at " << prof::phase_name(p);
    EXPECT_NE(c, ui::phase_argb(p, prof::Direction::Forward, PhasePalette::Default)) << prof::phase_name(p);
    EXPECT_EQ(c >> 24, 0xFFu);  // opaque
    // Backward ranges stay a distinct, darker shade.
    EXPECT_NE(ui::phase_argb(p, prof::Direction::Backward, PhasePalette::ColorBlind), c);
  }
  EXPECT_NE(cb.count(0xFF0072B2u), 0u);  // Okabe-Ito blue: attention
  EXPECT_EQ(ui::phase_argb(Phase::Attention, prof::Direction::Forward, PhasePalette::ColorBlind), 0xFF0072B2u);
}

TEST(PhasePalette, SurvivesSimulatedDeuteranopiaAndProtanopia) {
  for (const Mat* m : {&kDeuteranopia, &kProtanopia}) {
    const double cb = min_pair_distance(*m, PhasePalette::ColorBlind),
                 def = min_pair_distance(*m, PhasePalette::Default);
    std::printf("%s: smallest distance between key phases: colour-blind safe %.0f, default %.0f (ratio %.2f)\n",
                m == &kDeuteranopia ? "deuteranopia" : "protanopia", cb, def, cb / def);
    EXPECT_GE(cb, 45.0) << (m == &kDeuteranopia ? "deuteranopia" : "protanopia");
    EXPECT_GT(cb, def) << "default " << def << ", colour-blind safe " << cb;
  }
}

TEST(PhasePalette, CurrentPaletteAndNames) {
  ASSERT_EQ(ui::phase_palette(), PhasePalette::Default);
  const uint32_t def = ui::phase_argb(Phase::Attention);
  ui::set_phase_palette(PhasePalette::ColorBlind);
  EXPECT_EQ(ui::phase_argb(Phase::Attention), 0xFF0072B2u);
  ui::set_phase_palette(PhasePalette::Default);
  EXPECT_EQ(ui::phase_argb(Phase::Attention), def);
  PhasePalette p = PhasePalette::Default;
  EXPECT_TRUE(ui::phase_palette_from_name("cb", &p));
  EXPECT_EQ(p, PhasePalette::ColorBlind);
  EXPECT_TRUE(ui::phase_palette_from_name("default", &p));
  EXPECT_EQ(p, PhasePalette::Default);
  EXPECT_FALSE(ui::phase_palette_from_name("rainbow", &p));
}

// Name families (docs/STUDIO.md): foreign ranges are coloured by a stable hash of their name's
// family, so the same name has the same colour in every view and run.
TEST(NameFamily, NormalisesKernelAndRangeNames) {
  EXPECT_EQ(ui::name_family("void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, "
                            "at::native::AddFunctor<float>>(int, float*)"),
            "vectorized_elementwise_kernel");
  EXPECT_EQ(ui::name_family("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), "nccldevkernel_sendrecv");
  EXPECT_EQ(ui::name_family("ProfilerStep#12"), "profilerstep");
  EXPECT_EQ(ui::name_family("ProfilerStep#12"), ui::name_family("ProfilerStep#7"));
  EXPECT_EQ(ui::name_family("Memcpy HtoD (Pageable -> Device)"), "memcpy htod");
  EXPECT_EQ(ui::name_family("aten::mm"), "mm");
  EXPECT_EQ(ui::name_family("sm90_gemm_128x64"), ui::name_family("sm90_gemm_256x128"));
  EXPECT_NE(ui::name_family("aten::mm"), ui::name_family("aten::bmm"));
  EXPECT_EQ(ui::name_family("1234"), "1234");  // nothing left: the name itself
}

TEST(NameFamily, ColourIsAStableHashNotTheOrderOfAppearance) {
  // FNV-1a 32-bit test vectors (Fowler, Noll, Vo: the published reference values).
  EXPECT_EQ(ui::fnv1a32(""), 0x811C9DC5u);
  EXPECT_EQ(ui::fnv1a32("a"), 0xE40C292Cu);
  EXPECT_EQ(ui::fnv1a32("foobar"), 0xBF9CF968u);
  constexpr size_t n = sizeof(ui::kNameFamilyPalette) / sizeof(ui::kNameFamilyPalette[0]);
  const char* names[] = {"aten::mm",
                         "aten::bmm",
                         "ncclDevKernel_SendRecv(x)",
                         "void gemm<128>(float*)",
                         "cudaLaunchKernel",
                         "aten::add_",
                         "Memcpy DtoH",
                         "aten::softmax"};
  std::set<uint32_t> colours;
  for (const char* name : names) {
    const uint32_t c = ui::name_family_argb(name);
    EXPECT_EQ(c, ui::kNameFamilyPalette[ui::fnv1a32(ui::name_family(name)) % n]) << name;
    EXPECT_EQ(c >> 24, 0xFFu) << name;
    const uint32_t r = (c >> 16) & 0xFF, g = (c >> 8) & 0xFF, b = c & 0xFF;
    EXPECT_FALSE(r == g && g == b) << name << ": a grey";
    colours.insert(c);
  }
  EXPECT_GE(colours.size(), 5u) << "eight common names in fewer than five colours";
  EXPECT_EQ(ui::name_family_argb("void gemm<64>(float*)"), ui::name_family_argb("void gemm<128>(double*)"));
}
