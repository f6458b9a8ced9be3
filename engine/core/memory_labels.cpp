// Names of counted storage (see memory_labels.hpp): the thread-local label and range stacks, the
// group registry and the peak table's rows.
#include "memory_labels.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "memory_categories.hpp"

namespace ulysses::mem {

namespace {

constexpr int kMaxFrames = 8;

struct LabelFrame {
  const char* name;
  int32_t layer;
};
struct RangeFrame {
  prof::Phase phase;
  prof::Direction dir;
  int32_t layer;
};

// Frames past kMaxFrames are counted (so pops pair up) and not kept.
thread_local LabelFrame t_labels[kMaxFrames];
thread_local int t_label_depth = 0;
thread_local RangeFrame t_ranges[kMaxFrames];
thread_local int t_range_depth = 0;
thread_local const char* t_ops[kMaxFrames];
thread_local int t_op_depth = 0;

// What names a group: the two innermost labels, the innermost range, the layer, the category.
struct LabelKey {
  const char* outer = nullptr;
  const char* inner = nullptr;
  const char* op = nullptr;  // the backward node, where no label names the storage
  int32_t phase = -1;        // -1: no range
  int32_t dir = 0;
  int32_t layer = -1;
  int32_t category = 0;
  bool operator<(const LabelKey& o) const {
    return std::tie(outer, inner, op, phase, dir, layer, category) <
           std::tie(o.outer, o.inner, o.op, o.phase, o.dir, o.layer, o.category);
  }
  bool operator==(const LabelKey& o) const {
    return outer == o.outer && inner == o.inner && op == o.op && phase == o.phase && dir == o.dir && layer == o.layer &&
           category == o.category;
  }
};

struct LabelGroup {
  LabelKey key;
  int64_t described_bytes = -1;  // the largest described block's
  std::string dtype;
  std::vector<int64_t> shape;
};

struct LabelRegistry {
  std::mutex mu;
  std::map<LabelKey, int32_t> ids;
  std::vector<LabelGroup> groups;
  std::set<std::string> op_names;  // interned: a key holds a pointer into it
};
LabelRegistry& label_registry() {
  static auto* r = new LabelRegistry();  // never destroyed: frees at exit still look groups up
  return *r;
}

LabelKey current_key(prof::MemCategory c) {
  LabelKey k;
  k.category = static_cast<int32_t>(c);
  const int nl = std::min(t_label_depth, kMaxFrames);
  int32_t label_layer = -1;  // -1: no label names a layer
  if (nl >= 1) {
    k.inner = t_labels[nl - 1].name;
    label_layer = t_labels[nl - 1].layer;
  }
  if (nl >= 2) {
    k.outer = t_labels[nl - 2].name;
    if (label_layer == -1) label_layer = t_labels[nl - 2].layer;
  }
  if (label_layer != -1) {  // the storage of a layer (or none) other than the one computing: no range
    k.layer = std::max<int32_t>(label_layer, -1);
    return k;
  }
  const int nr = std::min(t_range_depth, kMaxFrames);
  int32_t range_layer = -1;
  if (nr >= 1) {
    const RangeFrame& r = t_ranges[nr - 1];
    k.phase = static_cast<int32_t>(r.phase);
    k.dir = static_cast<int32_t>(r.dir);
    range_layer = r.layer;
  }
  k.layer = range_layer >= 0 ? range_layer : current_layer();
  if (nl == 0 && t_op_depth > 0) k.op = t_ops[std::min(t_op_depth, kMaxFrames) - 1];
  return k;
}

// The cache of the last key this thread looked up.
thread_local LabelKey t_last_key;
thread_local int32_t t_last_id = -1;

const char* phase_words(prof::Phase p) {
  using prof::Phase;
  switch (p) {
    case Phase::Step:
      return "step";
    case Phase::Embedding:
      return "embedding";
    case Phase::QkvProj:
      return "q, k, v projections";
    case Phase::A2ASeqToHead:
      return "seq->head all-to-all";
    case Phase::Attention:
      return "attention";
    case Phase::A2AHeadToSeq:
      return "head->seq all-to-all";
    case Phase::OutProj:
      return "o projection";
    case Phase::Mlp:
      return "MLP";
    case Phase::Norm:
      return "norm";
    case Phase::LmHead:
      return "lm_head";
    case Phase::Loss:
      return "final norm, lm_head and loss";
    case Phase::Backward:
      return "backward";
    case Phase::GradAllReduce:
      return "gradient reduction";
    case Phase::Optimizer:
      return "optimizer step";
    case Phase::RingStep:
      return "ring step";
    default:
      return "other";
  }
}

std::string group_name(const LabelKey& k) {
  std::string head;
  if (k.layer >= 0) head = "layer " + std::to_string(k.layer);
  const auto dir = static_cast<prof::Direction>(k.dir);
  const char* dir_name = dir == prof::Direction::Forward     ? "forward"
                         : dir == prof::Direction::Backward  ? "backward"
                         : dir == prof::Direction::Recompute ? "recompute"
                                                             : nullptr;
  for (const char* l : {k.outer, k.inner})  // a "forward" / "recompute" label outside any range says the direction
    if (!dir_name && l && (std::strcmp(l, "recompute") == 0 || std::strcmp(l, "forward") == 0)) dir_name = l;
  const bool dir_in_head = dir_name && k.layer >= 0;
  if (dir_in_head) head += std::string(" ") + dir_name;
  if (k.phase >= 0) {
    const auto ph = static_cast<prof::Phase>(k.phase);
    // The trainer's own ranges name the moment; a model range inside a layer names the work.
    if (!head.empty()) head += ", ";
    head += phase_words(ph);
  }
  std::string labels;
  for (const char* l : {k.outer, k.inner, k.op}) {
    // "recompute" said in the head, "forward" implied by a range of the forward
    if (!l || ((dir_in_head || k.phase >= 0) && dir_name && std::strcmp(l, dir_name) == 0)) continue;
    if (!labels.empty()) labels += ": ";
    labels += l;
  }
  if (head.empty() && labels.empty()) {  // nothing in scope named it: what its category holds
    static const char* const kWhat[prof::kMemCategories] = {
        "weights",     "gradient buffer", "optimizer state (AdamW m, v, fp32 shards)",
        "activations", "logits",          "communication buffers",
        "(unlabelled)"};
    return kWhat[k.category];
  }
  if (head.empty()) return labels;
  return labels.empty() ? head : head + ": " + labels;
}

}  // namespace

Label::Label(const char* name, int32_t layer) {
  if (t_label_depth < kMaxFrames) t_labels[t_label_depth] = {name, layer};
  ++t_label_depth;
}
Label::~Label() { --t_label_depth; }

namespace {
std::atomic<OffloadHook> g_offload_hook{nullptr};
}  // namespace

void set_offload_hook(OffloadHook hook) { g_offload_hook.store(hook); }
void note_offload_storage(void* storage_context, void* deleter, bool off) {
  if (OffloadHook h = g_offload_hook.load()) h(storage_context, deleter, off);
}

void push_op(const char* name) {
  const char* interned = nullptr;
  if (name) {
    std::string n = name;
    const std::string prefix = "autograd::engine::evaluate_function: ";
    if (n.compare(0, prefix.size(), prefix) == 0) n.erase(0, prefix.size());
    LabelRegistry& r = label_registry();
    std::lock_guard<std::mutex> g(r.mu);
    interned = r.op_names.insert(n).first->c_str();
  }
  if (t_op_depth < kMaxFrames) t_ops[t_op_depth] = interned;
  ++t_op_depth;
}
void pop_op() {
  if (t_op_depth > 0) --t_op_depth;
}

void push_range(prof::Phase phase, prof::Direction dir, int32_t layer) {
  if (t_range_depth < kMaxFrames) t_ranges[t_range_depth] = {phase, dir, layer};
  ++t_range_depth;
}
void pop_range() {
  if (t_range_depth > 0) --t_range_depth;
}

int32_t current_group(prof::MemCategory c) {
  const LabelKey k = current_key(c);
  if (t_last_id >= 0 && k == t_last_key) return t_last_id;
  LabelRegistry& r = label_registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto [it, added] = r.ids.emplace(k, static_cast<int32_t>(r.groups.size()));
  if (added) r.groups.push_back(LabelGroup{k, -1, {}, {}});
  t_last_key = k;
  t_last_id = it->second;
  return it->second;
}

void describe_block(int32_t group, int64_t bytes, const std::string& dtype, const std::vector<int64_t>& shape) {
  LabelRegistry& r = label_registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (group < 0 || static_cast<size_t>(group) >= r.groups.size()) return;
  LabelGroup& gr = r.groups[static_cast<size_t>(group)];
  if (bytes <= gr.described_bytes) return;
  gr.described_bytes = bytes;
  gr.dtype = dtype;
  gr.shape = shape;
}

std::vector<TensorGroup> name_groups(const std::vector<GroupLive>& live) {
  std::vector<TensorGroup> out;
  {
    LabelRegistry& r = label_registry();
    std::lock_guard<std::mutex> g(r.mu);
    for (size_t i = 0; i < live.size() && i < r.groups.size(); ++i) {
      if (live[i].bytes <= 0) continue;
      const LabelGroup& gr = r.groups[i];
      TensorGroup t;
      t.name = group_name(gr.key);
      t.category = prof::kMemCategoryNames[gr.key.category];
      t.dtype = gr.dtype;
      t.shape = gr.shape;
      t.bytes = live[i].bytes;
      t.blocks = live[i].blocks;
      out.push_back(std::move(t));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TensorGroup& a, const TensorGroup& b) { return a.bytes > b.bytes; });
  return out;
}

std::string dtype_shape(const TensorGroup& g) {
  if (g.dtype.empty()) return "-";
  std::string s = g.dtype + " (";
  for (size_t i = 0; i < g.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(g.shape[i]);
  return s + ")";
}

prof::PeakTensor peak_tensor(const TensorGroup& g) {
  prof::PeakTensor t;
  t.name = g.name;
  t.category = g.category;
  t.dtype = g.dtype;
  if (!g.dtype.empty()) t.shape = dtype_shape(g).substr(g.dtype.size() + 1);  // "fp32 (8, 4096)" -> "(8, 4096)"
  t.bytes = g.bytes;
  t.blocks = g.blocks;
  return t;
}

}  // namespace ulysses::mem
