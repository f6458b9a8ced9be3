// Meta-device dry run of one training step and the memory plan built on it
// (see meta_dry_run.hpp).
#include "meta_dry_run.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>

#include "allocator_model.hpp"
#include "comm.hpp"
#include "torch_compat.hpp"
#include "cost_model.hpp"
#include "device_decision.hpp"
#include "local_attention.hpp"
#include "memory_categories.hpp"
#include "memory_labels.hpp"
#include "model.hpp"
#include "reductions.hpp"
#include "trainer.hpp"
#include "zero3.hpp"

namespace ulysses::plan {

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

// One meta storage: its bytes, category and named group (memory_labels.hpp), and its number in
// the allocation stream the allocator model replays. The allocator returns no memory, like
// libtorch's own meta allocator; the record travels as the DataPtr's context, so freeing a
// tensor's storage subtracts exactly what it added.
struct MetaBlock {
  int64_t bytes;
  mem::MemCategory cat;
  int32_t group;
  uint64_t id;
  bool described;
};

// The allocation stream of the dry run being recorded (record_events), for the allocator model.
std::mutex g_events_mu;
std::vector<cost::AllocEvent> g_events;
std::atomic<bool> g_recording{false};
std::atomic<uint64_t> g_next_id{1};

void counted_free(void* ctx) {
  auto* b = static_cast<MetaBlock*>(ctx);
  g_live.fetch_sub(b->bytes);
  mem::meta().sub(b->cat, b->bytes, -1, b->bytes > 0 ? b->group : -1);
  if (b->bytes > 0 && g_recording.load()) {
    std::lock_guard<std::mutex> g(g_events_mu);
    g_events.push_back({b->id, b->bytes, false});
  }
  delete b;
}

// Activation offload on a GPU frees a layer input's block and makes it again for the backward;
// the dry run keeps it on meta (the plan takes offloaded inputs off afterwards), so the recorded
// stream frees it here and gives it out again, under a new number, when it comes back.
void offload_hook(void* ctx, void* deleter, bool off) {
  if (deleter != reinterpret_cast<void*>(&counted_free) || !ctx || !g_recording.load()) return;
  auto* b = static_cast<MetaBlock*>(ctx);
  if (b->bytes <= 0) return;
  std::lock_guard<std::mutex> g(g_events_mu);
  if (off) {
    g_events.push_back({b->id, b->bytes, false});
  } else {
    b->id = g_next_id.fetch_add(1);
    g_events.push_back({b->id, b->bytes, true});
  }
}

// Storage made in a mem::HostScope (a meta Trainer's offloaded state) is host memory: not counted.
struct CountingMetaAllocator final : public compat::AllocatorBase {
  c10::DataPtr allocate_bytes(size_t size) override {
    const size_t nbytes = mem::in_host_scope() ? 0 : size;
    const int64_t now = g_live.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t p = g_peak.load();
    while (now > p && !g_peak.compare_exchange_weak(p, now)) {
    }
    const mem::MemCategory cat = mem::current();
    const int32_t group = nbytes > 0 ? mem::current_group(cat) : -1;
    auto* b = new MetaBlock{static_cast<int64_t>(nbytes), cat, group, g_next_id.fetch_add(1), false};
    mem::meta().add(cat, b->bytes, -1, group);
    if (nbytes > 0 && g_recording.load()) {
      std::lock_guard<std::mutex> g(g_events_mu);
      g_events.push_back({b->id, b->bytes, true});
    }
    return {nullptr, b, &counted_free, c10::Device(c10::DeviceType::Meta)};
  }
};

// Gives a meta storage's group the dtype and shape of the tensor the op that made it returned:
// a RecordFunction observer of every op's outputs, on while a dry run records (RecordEvents).
void describe_tensor(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_meta() || !t.has_storage()) return;
  const c10::DataPtr& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &counted_free) return;
  auto* b = static_cast<MetaBlock*>(dp.get_context());
  if (!b || b->described || b->bytes <= 0) return;
  b->described = true;
  mem::describe_block(b->group, b->bytes, mem::dtype_words(t.scalar_type()), t.sizes().vec());
}
// A backward node's name names what its backward makes (mem::push_op), from its start to its end.
struct PushedOp final : at::ObserverContext {};
std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (fn.scope() != at::RecordScope::BACKWARD_FUNCTION) return nullptr;
  mem::push_op(fn.name());
  return std::make_unique<PushedOp>();
}
void on_op_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (ctx) mem::pop_op();
  for (const c10::IValue& v : fn.outputs()) {
    if (v.isTensor()) {
      describe_tensor(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) describe_tensor(t);
    }
  }
}

// Records the allocation stream and describes the blocks' tensors while alive.
class RecordEvents {
 public:
  explicit RecordEvents(bool on) : on_(on) {
    if (!on_) return;
    {
      std::lock_guard<std::mutex> g(g_events_mu);
      g_events.clear();
    }
    g_recording.store(true);
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_op_start, &on_op_end).needsOutputs(true));
  }
  ~RecordEvents() {
    if (!on_) return;
    at::removeCallback(handle_);
    g_recording.store(false);
  }
  RecordEvents(const RecordEvents&) = delete;
  RecordEvents& operator=(const RecordEvents&) = delete;
  std::vector<cost::AllocEvent> take() {
    std::lock_guard<std::mutex> g(g_events_mu);
    return std::move(g_events);
  }

 private:
  bool on_;
  at::CallbackHandle handle_ = 0;
};

CountingMetaAllocator g_counting;
std::once_flag g_install;
std::mutex g_dry_run;  // one dry run at a time: the counters are process-wide

std::string kernel_name(const AttentionKernel& k) {
  switch (k.kind) {
    case AttentionKernel::Kind::FlashShapes:
      return "flash";
    case AttentionKernel::Kind::Blocked:
      return "blocked(" + std::to_string(k.block) + ")";
    default:
      return "sdpa-math";
  }
}

struct Measured {
  int64_t params = 0;
  int64_t inputs = 0;              // ids + labels
  int64_t after_forward = 0;       // live - live before forward (steady-state step)
  int64_t peak_above_start = 0;    // peak - live before forward
  int64_t peak = 0;                // absolute peak of the measured step
  int64_t after_step = 0;          // live after the optimizer step
  int64_t base = 0;                // live before the model was built
  bool techniques = false;         // the model took the run's memory techniques
  int64_t gathered_peak = 0;       // stage 3: most bytes of gathered units (weights + gradients) in the step
  prof::MemoryCategories at_peak;  // what was alive at the measured step's peak, by category
  std::vector<mem::GroupLive> at_peak_groups;   // and by named group (memory_labels.hpp)
  std::vector<cost::AllocEvent> events;         // the allocation stream (record_events)
  std::vector<prof::PlannedMemoryPoint> curve;  // the last step's, at the model's range edges
};

// The dry run's tracer (the planner's Trainer's): while `on` (the steady-state step) it records
// the meta categories at both edges of every range the model pushes; the trainer's own ranges
// (step, backward, gradient reduction, optimizer) take no point, as a planned curve is the model's.
// Ranges recorded whole (record_range: comm rows) take no sample, as in a real run. The trainer's
// "after_forward" memory sample (profile.memory) records the live bytes there.
class CurveTracer final : public prof::Tracer {
 public:
  bool on = false;
  std::vector<prof::PlannedMemoryPoint> points;
  Zero3Params* z3 = nullptr;
  struct AfterForward {
    bool taken = false;                             // the step's first micro-batch's (accumulation: the others hold
                                                    // the micro-steps' loss sums too)
    int64_t live = 0, gradients = 0, gathered = 0;  // bytes: all, the Gradients category, stage 3's gathered units
  } after_forward;
  void begin_step(int64_t) override {}
  void end_step(const prof::StepRecord&) override {}
  bool active() const override { return on; }
  void push(const prof::RangeInfo& info) override {
    stack_.push_back(info);
    mem::push_range(info.phase, info.dir, info.layer);  // names what the range makes
    sample(info, true);
  }
  void pop() override {
    if (stack_.empty()) return;
    sample(stack_.back(), false);
    stack_.pop_back();
    mem::pop_range();
  }
  void record_range(const prof::RangeInfo&, int64_t, int64_t, int32_t) override {}
  void record_range_later(const prof::RangeInfo&, std::function<bool(int64_t*, int64_t*)>, int32_t) override {}
  void sample_memory(const char* label, const prof::MemorySample&) override {
    if (std::string(label) != "after_forward" || after_forward.taken) return;
    after_forward.taken = true;
    after_forward.live = MetaMemory::live();
    after_forward.gradients = mem::meta().live().bytes[static_cast<int>(prof::MemCategory::Gradients)];
    after_forward.gathered = z3 ? z3->gathered_bytes() : 0;
  }
  void set_metric(const std::string&, double) override {}
  void close() override {}

 private:
  void sample(const prof::RangeInfo& info, bool begin) {
    using prof::Phase;
    if (info.phase == Phase::Step || info.phase == Phase::Backward || info.phase == Phase::GradAllReduce ||
        info.phase == Phase::Optimizer || (info.phase == Phase::Other && info.dir == prof::Direction::None))
      return;  // the trainer's (its own host work: `other` with no direction)
    prof::PlannedMemoryPoint p;
    p.phase = static_cast<int32_t>(info.phase);
    p.layer = info.layer;
    p.begin = begin;
    p.c = mem::meta().live();
    points.push_back(p);
  }
  std::vector<prof::RangeInfo> stack_;
};

// The run the dry run makes of cfg: num_hidden_layers = layers; no init_from (no values to load
// on meta); the trainer's memory samples on (CurveTracer's after_forward). Its tokens are
// TokenSource::zeros (dry_run): the user's data file is not read.
RunConfig dry_run_config(const RunConfig& cfg, int64_t layers) {
  RunConfig c = cfg;
  c.model.num_hidden_layers = layers;
  c.train.init_from.clear();
  c.profile.memory = true;
  return c;
}

// The model's forward alone (the per-layer extrapolation): after_forward of the Trainer's model
// on inputs of the step's shapes.
void dry_forward(Trainer& tr, const RunConfig& c, int sp_rank, Measured& m) {
  const int64_t n = c.train.seq_length / c.parallel.seq_ranks(), B = c.train.micro_batch_size;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(torch::kMeta);
  auto ids = torch::empty({B, n}, i64);     // (B, n)
  auto labels = torch::empty({B, n}, i64);  // (B, n)
  Zero3Params* z3 = tr.zero3();
  if (z3) z3->begin_step();
  const int64_t start = MetaMemory::live();
  torch::AutoGradMode on(true);
  at::Tensor loss_sum;
  {
    mem::Scope act(mem::MemCategory::Activations);  // Trainer::loss_and_grads' scope
    loss_sum = tr.model().forward_loss_sum(ids, labels, sp_rank * n);
  }
  // Stage 3 keeps the head's weights gathered for its backward: gathered, not activations.
  m.after_forward = MetaMemory::live() - start - (z3 ? z3->gathered_bytes() : 0);
}

// Runs `steps` training steps of cfg (num_hidden_layers = layers) on meta with the Trainer (its
// construction, its step with the accumulation loop) and measures the last one. forward_only:
// one forward of its model, no backward or optimizer. record_events: keeps the allocation stream
// from the model's construction on (Measured::events) and describes the blocks' tensors.
Measured dry_run(const RunConfig& cfg, int64_t layers, bool cuda, int sp_rank, int steps, bool forward_only,
                 bool record_events = false) {
  MetaMemory::install();
  std::lock_guard<std::mutex> lock(g_dry_run);
  RecordEvents recording(record_events);
  const RunConfig c = dry_run_config(cfg, layers);
  // With ring attention the sequence is split over sp x ring ranks (ring rank 0 planned: every
  // ring rank holds the same shapes).
  const int64_t P = c.parallel.sp_size, R = c.parallel.ring_size;
  Comm comm = Comm::shape_only(sp_rank, static_cast<int>(P), static_cast<int>(c.parallel.dp_size), static_cast<int>(R));

  Measured m;
  m.base = MetaMemory::live();
  CurveTracer curve;  // the last step's categories at the model's range edges
  TrainerOptions o;
  o.plan_for_cuda = cuda;
  o.data = TokenSource::zeros(c.train.seq_length + 1);  // one sequence's shapes; make_batch picks offset 0
  Trainer tr(c, comm, &curve, o);  // the model, its gradient buffer, ZeRO state and optimizer, as a run builds them
  curve.z3 = tr.zero3();
  m.techniques = true;  // the Trainer gives the model the run's memory options
  for (const auto& p : tr.model().parameters()) m.params += p.numel();
  m.inputs = 2 * c.train.micro_batch_size * (c.train.seq_length / (P * R)) * 8;  // ids + labels (B, n) int64
  if (forward_only) {
    dry_forward(tr, c, sp_rank, m);
    return m;
  }
  int64_t start = 0, start_gradients = 0;
  for (int s = 0; s < steps; ++s) {
    curve.on = s + 1 == steps;
    curve.points.clear();
    start = MetaMemory::live();
    start_gradients = mem::meta().live().bytes[static_cast<int>(prof::MemCategory::Gradients)];
    MetaMemory::reset_peak();
    mem::meta().reset_peak();
    if (curve.z3) curve.z3->reset_peak();
    tr.step(s);
  }
  // Measured from before the forward: without the step's inputs and without the gradient buffer
  // that stage 2 makes again at the start of each step (it is not the forward's).
  const CurveTracer::AfterForward& af = curve.after_forward;
  const int64_t remade = af.gradients - start_gradients;
  m.after_forward = af.live - start - remade - m.inputs - af.gathered;
  m.peak = MetaMemory::peak();
  m.at_peak = mem::meta().at_peak();
  m.at_peak_groups = mem::meta().at_peak_groups();
  m.events = recording.take();
  m.peak_above_start = m.peak - start - remade - m.inputs;
  m.after_step = MetaMemory::live();
  m.curve = curve.points;
  m.gathered_peak = curve.z3 ? curve.z3->peak_gathered_bytes() : 0;
  return m;
}

}  // namespace

void MetaMemory::install() {
  std::call_once(g_install, [] {
    c10::SetAllocator(c10::DeviceType::Meta, &g_counting, /*priority=*/1);
    mem::set_offload_hook(&offload_hook);
  });
}
int64_t MetaMemory::live() { return g_live.load(); }
int64_t MetaMemory::peak() { return g_peak.load(); }
void MetaMemory::reset_peak() { g_peak.store(g_live.load()); }

std::string plan_device(const RunConfig& cfg) {
  if (cfg.train.device == "cuda" || cfg.train.device == "cpu") return cfg.train.device;
  // auto: as the workers decide it (every rank of a ulysses-run is local), so 2 ranks on 1 GPU
  // plan for the CPU they will train on
  DeviceFacts host = DeviceFacts::detect(0, static_cast<int>(cfg.parallel.world_size()));
  return decide_device(cfg, host, nullptr).cuda ? "cuda" : "cpu";
}

MemoryPlan plan_memory(const RunConfig& cfg, const PlanOptions& opt) {
  throw_if_invalid(validate(cfg));
  const auto t0 = std::chrono::steady_clock::now();
  MemoryPlan p;
  p.device = plan_device(cfg);
  const bool cuda = p.device == "cuda";
  p.dtype = cfg.train.dtype;
  p.attention = kernel_name(trainer_attention_kernel(cfg.train, cuda, torch::kMeta));
  p.sp_size = cfg.parallel.sp_size;
  p.ring_size = cfg.parallel.ring_size;
  p.dp_size = cfg.parallel.dp_size;
  p.sp_rank = opt.sp_rank;
  p.seq_length = cfg.train.seq_length;
  p.local_tokens = cfg.train.seq_length / cfg.parallel.seq_ranks();
  p.micro_batch_size = cfg.train.micro_batch_size;
  p.layers = cfg.model.num_hidden_layers;

  const cost::CostEstimate est = cost::estimate(cfg);
  // Compute per rank: the cost model's FLOPs (with the document mask's saving) and, for
  // comparison, the same step with every sequence one document.
  cost::CostOptions whole_opt;
  whole_opt.attention_fraction = 1;
  const cost::CostEstimate whole = cost::estimate(cfg, whole_opt);
  const double W = double(cfg.parallel.world_size());
  p.dense_flops_per_rank = est.dense_flops_per_step / W;
  p.attention_flops_per_rank = est.attention_flops_per_step / W;
  p.attention_flops_unmasked_per_rank = whole.attention_flops_per_step / W;
  p.attention_fraction = est.attention_fraction;
  p.tflops_per_rank = opt.tflops_per_rank;
  p.compute_s = opt.tflops_per_rank > 0 ? p.flops_per_rank() / (opt.tflops_per_rank * 1e12) : 0.0;
  p.param_bytes = est.param_bytes;
  p.grad_bytes = est.grad_bytes;
  p.master_bytes = est.master_bytes;
  p.optimizer_bytes = est.optimizer_bytes;
  p.zero_stage = cfg.train.zero_stage;
  p.gathered_param_bytes = est.gathered_param_bytes;
  p.host_bytes = est.host_bytes;

  // Every stage is dry-run as the trainer runs it; stage 3 with the trainer's Zero3Params, so
  // the peak holds the gathered unit and the prefetched next one (and the gradient buffers in
  // flight) live together, as they are.
  const RunConfig& run_cfg = cfg;
  const bool zero3 = cfg.train.zero_stage >= 3;
  const int64_t L = cfg.model.num_hidden_layers;
  const Measured full = dry_run(run_cfg, L, cuda, opt.sp_rank, 2, false, /*record_events=*/true);
  p.params = full.params;
  p.memory_techniques_applied = full.techniques;
  p.activation_bytes = full.after_forward;
  p.peak_bytes = full.peak - full.base;
  p.peak_categories = full.at_peak;
  p.peak_tensors = mem::name_groups(full.at_peak_groups);
  p.curve = full.curve;
  // After the step: its inputs are freed; offloaded state (mem::HostScope) was never counted.
  p.measured_static_bytes = full.after_step - full.base;
  if (zero3) p.gathered_param_bytes = full.gathered_peak;  // measured: the units as this engine gathers them
  if (opt.detail) {
    const Measured one_less = dry_run(run_cfg, L - 1, cuda, opt.sp_rank, 1, true);
    p.activation_per_layer_bytes = full.after_forward - one_less.after_forward;
    p.activation_other_bytes = full.after_forward - L * p.activation_per_layer_bytes;
    const Measured head = dry_run(run_cfg, 0, cuda, opt.sp_rank, 1, false);
    p.loss_peak_bytes = head.peak_above_start;
  }
  if (cuda) {  // what a GPU adds to the tensor storages counted above
    cost::GpuPlanInput g;
    g.peak_bytes = p.peak_bytes;
    g.activation_per_layer_bytes = std::max<int64_t>(p.activation_per_layer_bytes, 0);
    g.layers = L;
    g.offload_activations = cfg.train.offload_activations && cfg.train.activation_checkpointing == "layer";
    g.world_size = cfg.parallel.world_size();
    g.sp_size = cfg.parallel.sp_size;
    g.ring_size = cfg.parallel.ring_size;
    g.tracing = cfg.profile.enabled;
    p.gpu_flat = cost::gpu_reserve(g);  // the flat share, for comparison
    // The CUDA allocator's rounding and fragmentation, replayed on the dry run's allocations.
    p.allocator = cfg.train.allocator;
    // The allocator's own share of the device: the limit with its headroom, less what is not its own.
    const cost::GpuReserve& f = p.gpu_flat;
    const int64_t own = f.context_bytes + f.cublas_bytes + f.nccl_bytes + f.cupti_bytes;
    const int64_t limit =
        opt.gpu_limit_bytes > 0
            ? std::max<int64_t>(1, static_cast<int64_t>(double(opt.gpu_limit_bytes) * (1.0 - cost::kGpuHeadroom)) - own)
            : 0;
    p.allocator_replay = cost::replay_allocator(full.events, cost::allocator_kind(cfg.train.allocator), limit);
    // ULYSSES_GPU_ALLOCATOR_REPLAY=0: the flat share instead (to compare with plans before the replay)
    const char* replay = std::getenv("ULYSSES_GPU_ALLOCATOR_REPLAY");
    if (!replay || std::string(replay) != "0") g.allocator_overhead_bytes = p.allocator_replay.overhead();
    p.gpu = cost::gpu_reserve(g);
    p.has_gpu_reserve = true;
  }
  p.dry_run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

bool fits_device(const RunConfig& cfg, int64_t limit_bytes, PlanOptions opt, MemoryPlan* plan) {
  opt.gpu_limit_bytes = limit_bytes;  // the allocator replay frees its cache where the device is full
  MemoryPlan q = plan_memory(cfg, opt);
  const bool fits =
      q.has_gpu_reserve  // on a GPU: everything the device holds, with the stated headroom
          ? q.gpu.device_bytes() <= static_cast<int64_t>(static_cast<double>(limit_bytes) * (1.0 - cost::kGpuHeadroom))
          : q.peak_bytes <= limit_bytes;
  if (plan) *plan = std::move(q);
  return fits;
}

int64_t max_seq_length(const RunConfig& cfg, int64_t limit_bytes, int64_t upper_bound) {
  // Lengths validate() takes: multiples of the ranks the sequence is split over (twice that
  // with the ring's zigzag chunks).
  const int64_t P = cfg.parallel.seq_ranks() * (cfg.parallel.ring_size > 1 && cfg.parallel.ring_zigzag ? 2 : 1);
  PlanOptions o;
  // A GPU plan with offload needs the per-layer input (what moves to the host).
  o.detail = cfg.train.offload_activations && plan_device(cfg) == "cuda";
  auto fits = [&](int64_t k) {
    RunConfig c = cfg;
    c.train.seq_length = k * P;
    return fits_device(c, limit_bytes, o);
  };
  // Largest k with fits(k): grow to a bracket, then bisect (peak is monotone in N).
  const int64_t kmax = std::max<int64_t>(1, upper_bound / P);
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;
  while (hi <= kmax && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kmax) {
    if (fits(kmax)) return kmax * P;
    hi = kmax;
  }
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * P;
}

json plan_to_json(const MemoryPlan& p) {
  json j{{"device", p.device},
         {"dtype", p.dtype},
         {"attention", p.attention},
         {"sp_size", p.sp_size},
         {"ring_size", p.ring_size},
         {"dp_size", p.dp_size},
         {"sp_rank", p.sp_rank},
         {"seq_length", p.seq_length},
         {"local_tokens", p.local_tokens},
         {"micro_batch_size", p.micro_batch_size},
         {"layers", p.layers},
         {"params", p.params},
         {"param_bytes", p.param_bytes},
         {"grad_bytes", p.grad_bytes},
         {"master_bytes", p.master_bytes},
         {"optimizer_bytes", p.optimizer_bytes},
         {"static_bytes", p.static_bytes()},
         {"zero_stage", p.zero_stage},
         {"gathered_param_bytes", p.gathered_param_bytes},
         {"host_bytes", p.host_bytes},
         {"measured_static_bytes", p.measured_static_bytes},
         {"activation_bytes", p.activation_bytes},
         {"activation_per_layer_bytes", p.activation_per_layer_bytes},
         {"activation_other_bytes", p.activation_other_bytes},
         {"loss_peak_bytes", p.loss_peak_bytes},
         {"transient_bytes", p.transient_bytes()},
         {"transient_bytes_per_token", p.transient_bytes_per_token()},
         {"peak_bytes", p.peak_bytes},
         {"memory_techniques_applied", p.memory_techniques_applied},
         {"dry_run_s", p.dry_run_s},
         {"dense_flops_per_rank", p.dense_flops_per_rank},
         {"attention_flops_per_rank", p.attention_flops_per_rank},
         {"attention_flops_unmasked_per_rank", p.attention_flops_unmasked_per_rank},
         {"attention_fraction", p.attention_fraction},
         {"flops_per_rank", p.flops_per_rank()},
         {"tflops_per_rank", p.tflops_per_rank},
         {"compute_s", p.compute_s}};
  if (p.has_gpu_reserve) {
    const cost::GpuReserve& g = p.gpu;
    j["gpu"] = {{"allocator_peak_bytes", g.allocator_peak_bytes},
                {"offloaded_host_bytes", g.offloaded_host_bytes},
                {"prefetch_bytes", g.prefetch_bytes},
                {"rounding_bytes", g.rounding_bytes},
                {"context_bytes", g.context_bytes},
                {"cublas_bytes", g.cublas_bytes},
                {"nccl_bytes", g.nccl_bytes},
                {"cupti_bytes", g.cupti_bytes},
                {"reserve_bytes", g.reserve_bytes()},
                {"device_bytes", g.device_bytes()},
                {"max_seq_headroom", cost::kGpuHeadroom},
                {"allocator", p.allocator},
                {"rounding_replayed", g.rounding_replayed},
                {"allocator_requested_peak_bytes", p.allocator_replay.requested_peak},
                {"allocator_allocated_peak_bytes", p.allocator_replay.allocated_peak},
                {"allocator_reserved_peak_bytes", p.allocator_replay.reserved_peak},
                {"allocator_segments", p.allocator_replay.segments},
                {"allocator_cache_releases", p.allocator_replay.cache_releases},
                {"rounding_flat_bytes", p.gpu_flat.rounding_bytes},
                {"device_bytes_flat", p.gpu_flat.device_bytes()}};
  }
  // What is alive at the peak, by name: every group, largest first.
  json rows = json::array();
  for (const mem::TensorGroup& t : p.peak_tensors)
    rows.push_back({{"name", t.name},
                    {"category", t.category},
                    {"dtype", t.dtype},
                    {"shape", t.shape},
                    {"bytes", t.bytes},
                    {"blocks", t.blocks}});
  j["peak_tensors"] = rows;
  // What is alive at the peak, by category (the same scopes as a real run's trace).
  json cats = json::object();
  for (int k = 0; k < prof::kMemCategories; ++k) cats[prof::kMemCategoryNames[k]] = p.peak_categories.bytes[k];
  j["peak_categories"] = cats;
  return j;
}

std::string peak_table_text(const std::vector<mem::TensorGroup>& rows, size_t limit) {
  using cost::format_bytes;
  std::string s = "  Alive at the peak (largest " + std::to_string(std::min(limit, rows.size())) + " of " +
                  std::to_string(rows.size()) + " groups; --json lists all):\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "    %12s  %-13s  %-32s  %s\n", "bytes", "category", "dtype (shape)", "what");
  s += buf;
  for (size_t i = 0; i < rows.size() && i < limit; ++i) {
    const mem::TensorGroup& t = rows[i];
    std::string what = t.name;
    if (t.blocks > 1) what += "  (" + std::to_string(t.blocks) + " blocks)";
    std::snprintf(buf, sizeof buf, "    %12s  %-13s  %-32s  %s\n", format_bytes(double(t.bytes)).c_str(),
                  t.category.c_str(), mem::dtype_shape(t).c_str(), what.c_str());
    s += buf;
  }
  return s;
}

// The compute lines of plan_to_text: the cost model's FLOPs per rank and step, the document
// mask's saving, and the time at the throughput asked for.
std::string plan_compute_text(const MemoryPlan& p) {
  using cost::format_flops;
  std::string v = format_flops(p.flops_per_rank()) + "  (dense " + format_flops(p.dense_flops_per_rank) +
                  " + attention " + format_flops(p.attention_flops_per_rank) + ")";
  if (p.tflops_per_rank > 0) {
    char t[96];
    std::snprintf(t, sizeof t, ", %s at %g TFLOP/s", cost::format_seconds(p.compute_s).c_str(), p.tflops_per_rank);
    v += t;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-30s %s\n", "compute per step", v.c_str());
  std::string s = buf;
  if (p.attention_fraction < 1) {
    std::snprintf(buf, sizeof buf,
                  "  %-30s attention %s of %s: the document mask keeps %.1f%% of causal (query, key) pairs\n",
                  "  packed documents", format_flops(p.attention_flops_per_rank).c_str(),
                  format_flops(p.attention_flops_unmasked_per_rank).c_str(), 100.0 * p.attention_fraction);
    s += buf;
  }
  return s;
}

std::string plan_to_text(const MemoryPlan& p) {
  using cost::format_bytes;
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-30s %s\n", k.c_str(), v.c_str());
    s += buf;
  };
  s += "Memory plan per rank (every one of the " + std::to_string(p.sp_size * p.ring_size * p.dp_size) +
       " rank(s) holds the same), " + p.device + ", " + p.dtype + ", attention " + p.attention + ", seq_length " +
       std::to_string(p.seq_length) + " (" + std::to_string(p.local_tokens) + " tokens per rank, micro batch " +
       std::to_string(p.micro_batch_size) + ")\n";
  line("parameters", format_bytes(double(p.param_bytes)) + "  (" + std::to_string(p.params) + " params)");
  line("gradients", format_bytes(double(p.grad_bytes)));
  if (p.master_bytes) line("fp32 master weights", format_bytes(double(p.master_bytes)));
  line("optimizer state (AdamW m, v)", format_bytes(double(p.optimizer_bytes)));
  line("static total", format_bytes(double(p.static_bytes())) +
                           (p.zero_stage > 0 ? "  (ZeRO stage " + std::to_string(p.zero_stage) + ", sharded over " +
                                                   std::to_string(p.sp_size * p.ring_size * p.dp_size) + " ranks)"
                                             : std::string()));
  // The lines above are the cost model's layout (bf16 weights and gradients, fp32 masters); this
  // engine keeps fp32 weights (the masters) and fp32 gradients, replicated below stage 3.
  if (p.measured_static_bytes >= 0 &&
      std::abs(double(p.measured_static_bytes - p.static_bytes())) > 0.01 * double(p.static_bytes()))
    line("static held by this engine",
         format_bytes(double(p.measured_static_bytes)) + "  (fp32 weights and gradients; in the peak below)");
  if (p.gathered_param_bytes) line("gathered weights (ZeRO-3)", format_bytes(double(p.gathered_param_bytes)));
  if (p.host_bytes) line("offloaded to CPU memory", format_bytes(double(p.host_bytes)) + "  (not in the peak)");
  line("saved activations", format_bytes(double(p.activation_bytes)));
  if (p.activation_per_layer_bytes >= 0) {
    line("  per layer (x" + std::to_string(p.layers) + ")", format_bytes(double(p.activation_per_layer_bytes)));
    line("  embedding, head, loss", format_bytes(double(p.activation_other_bytes)));
  }
  if (p.loss_peak_bytes >= 0) line("loss/logits peak", format_bytes(double(p.loss_peak_bytes)));
  line("transient at peak",
       format_bytes(double(p.transient_bytes())) + "  (" + format_bytes(p.transient_bytes_per_token()) + " per token)");
  line("peak total", format_bytes(double(p.peak_bytes)) + "  (" + std::to_string(p.peak_bytes) + " bytes)");
  if (p.has_gpu_reserve) {  // cost/gpu_reserve.hpp
    const cost::GpuReserve& g = p.gpu;
    if (g.offloaded_host_bytes)
      line("offloaded inputs (pinned host)", format_bytes(double(g.offloaded_host_bytes)) + "  (off the device)");
    if (g.prefetch_bytes) line("offload prefetch (2 inputs)", format_bytes(double(g.prefetch_bytes)));
    line("allocator peak on the GPU", format_bytes(double(g.allocator_peak_bytes)));
    line("allocator rounding", format_bytes(double(g.rounding_bytes)) +
                                   (g.rounding_replayed ? "  (" + p.allocator + " allocator replayed; flat " +
                                                              format_bytes(double(p.gpu_flat.rounding_bytes)) + ")"
                                                        : std::string()));
    line("CUDA context + modules", format_bytes(double(g.context_bytes)) + "  (ULYSSES_GPU_CONTEXT_MIB)");
    line("cuBLAS, NCCL, CUPTI buffers", format_bytes(double(g.cublas_bytes)) + " + " +
                                            format_bytes(double(g.nccl_bytes)) + " + " +
                                            format_bytes(double(g.cupti_bytes)));
    line("GPU total", format_bytes(double(g.device_bytes())) + "  (" + std::to_string(g.device_bytes()) + " bytes)");
  }
  s += plan_compute_text(p);
  s += peak_table_text(p.peak_tensors, kPeakTableRows);
  if (!p.memory_techniques_applied)
    s += "  (this build's model has no activation checkpointing / tiled loss / TiledMLP: those settings were not "
         "applied)\n";
  char buf[96];
  std::snprintf(buf, sizeof buf, "  (meta-device dry run of the real step, %.2f s)\n", p.dry_run_s);
  s += buf;
  return s;
}

}  // namespace ulysses::plan
