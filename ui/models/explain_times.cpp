// Measured stage times and the range -> stage mapping of the explainer (see explain_times.hpp).
#include "explain_times.hpp"

#include <algorithm>
#include <cctype>

#include "ulysses/common/step_stats.hpp"

namespace ulysses::ui {

namespace {
// The layer table's time of one explainer stage; nullptr for the shard stage.
const int64_t* stage_slot(const prof::LayerRow& r, int stage) {
  switch (stage) {
    case 1:
      return &r.qkv_proj_ns;
    case 2:
      return &r.a2a_seq_to_head_ns;
    case 3:
      return &r.attention_ns;
    case 4:
      return &r.a2a_head_to_seq_ns;
    case 5:
      return &r.out_proj_ns;
    default:
      return nullptr;
  }
}
}  // namespace

std::vector<StageTime> stage_times(const std::vector<prof::LayerRow>& layers) {
  std::vector<StageTime> out(kExplainStageCount);
  for (int s = 0; s < kExplainStageCount; ++s) {
    std::vector<double> per_layer;
    for (const auto& row : layers) {
      if (row.dir != prof::Direction::Forward || row.samples <= 0) continue;
      const int64_t* ns = stage_slot(row, s);
      if (ns && *ns > 0) per_layer.push_back(static_cast<double>(*ns) / static_cast<double>(row.samples));
    }
    auto& t = out[static_cast<size_t>(s)];
    t.measured = !per_layer.empty();
    t.layers = static_cast<int>(per_layer.size());
    t.median_ns = ulysses::true_median(per_layer);
  }
  return out;
}

StageTime ring_hop_time(const prof::TraceModel& m) {
  std::vector<double> d;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    const bool copy = r.lane >= 0 && static_cast<size_t>(r.lane) < m.lanes.size() &&
                      m.lanes[static_cast<size_t>(r.lane)].kind == prof::LaneKind::HeadRange;
    if (r.phase == prof::Phase::RingStep && r.dir == prof::Direction::Forward && !r.is_kernel && !copy)
      d.push_back(static_cast<double>(r.duration()));
  }
  StageTime t;
  t.measured = !d.empty();
  t.layers = static_cast<int>(d.size());  // here: the exchanges the median is over
  t.median_ns = ulysses::true_median(d);
  return t;
}

int explain_stage_of_phase(prof::Phase phase) {
  switch (phase) {
    case prof::Phase::QkvProj:
      return 1;
    case prof::Phase::A2ASeqToHead:
      return 2;
    case prof::Phase::Attention:
    case prof::Phase::RingStep:  // ring attention's block exchanges
      return 3;
    case prof::Phase::A2AHeadToSeq:
      return 4;
    case prof::Phase::OutProj:
      return 5;
    default:
      return -1;
  }
}

int explain_stage_of_range(prof::Phase phase, const std::string& name) {
  const int by_phase = explain_stage_of_phase(phase);
  if (by_phase >= 0 || phase != prof::Phase::Other) return by_phase;
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  prof::Phase exact;
  if (prof::phase_from_name(n, &exact)) return explain_stage_of_phase(exact);
  if (has("seq_to_head") || has("seq->head") || has("seq2head")) return 2;
  if (has("head_to_seq") || has("head->seq") || has("head2seq")) return 4;
  if (has("o_proj") || has("out_proj")) return 5;
  if (has("qkv") || has("q_proj") || has("k_proj") || has("v_proj")) return 1;
  if (has("attention") || has("attn") || has("sdpa") || has("flash")) return 3;
  return -1;
}

}  // namespace ulysses::ui
