// Meta-device dry run of one training step and the memory plan built on it
// (see meta_dry_run.hpp).
#include "meta_dry_run.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <type_traits>

#include <c10/core/Allocator.h>

#include "comm.hpp"
#include "torch_compat.hpp"
#include "cost_model.hpp"
#include "device_decision.hpp"
#include "local_attention.hpp"
#include "memory_categories.hpp"
#include "model.hpp"
#include "reductions.hpp"
#include "trainer.hpp"
#include "zero3.hpp"
#include "zero_optimizer.hpp"

namespace ulysses::plan {

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

// Returns no memory, like libtorch's own meta allocator; the size travels in the
// deleter context so freeing a tensor's storage subtracts exactly what it added.
// The context holds the bytes (low 56 bits) and the category they were charged to (high 8).
constexpr int kCategoryShift = 56;
void counted_free(void* ctx) {
  const auto v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx));
  const auto n = static_cast<int64_t>(v & ((uint64_t{1} << kCategoryShift) - 1));
  g_live.fetch_sub(n);
  mem::meta().sub(static_cast<mem::MemCategory>(v >> kCategoryShift), n);
}

struct CountingMetaAllocator final : public compat::AllocatorBase {
  c10::DataPtr allocate_bytes(size_t nbytes) override {
    const int64_t now = g_live.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t p = g_peak.load();
    while (now > p && !g_peak.compare_exchange_weak(p, now)) {
    }
    const mem::MemCategory cat = mem::current();
    mem::meta().add(cat, static_cast<int64_t>(nbytes));
    const uint64_t ctx = static_cast<uint64_t>(nbytes) | (static_cast<uint64_t>(cat) << kCategoryShift);
    return {nullptr, reinterpret_cast<void*>(static_cast<uintptr_t>(ctx)), &counted_free,
            c10::Device(c10::DeviceType::Meta)};
  }
};

CountingMetaAllocator g_counting;
std::once_flag g_install;
std::mutex g_dry_run;  // one dry run at a time: the counters are process-wide

AttentionKernel plan_kernel(const RunConfig& cfg, bool cuda) {
  AttentionKernel k = attention_kernel_for(cfg.train.attention, cfg.train.attention_block, cuda);
  // SDPA picks flash on CUDA, and on the CPU in libtorch 2.x
  if ((cuda || compat::cpu_sdpa_is_flash()) && k.kind == AttentionKernel::Kind::Sdpa)
    k.kind = AttentionKernel::Kind::FlashShapes;
  return k;
}

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
  std::vector<prof::PlannedMemoryPoint> curve;  // the last step's, at the model's range edges
};

// The dry run's tracer: records nothing but the meta categories at both edges of every range the
// model pushes, while `on` (the steady-state step). Ranges recorded whole (record_range: comm
// rows) take no sample, as in a real run.
class CurveTracer final : public prof::Tracer {
 public:
  bool on = false;
  std::vector<prof::PlannedMemoryPoint> points;
  void begin_step(int64_t) override {}
  void end_step(const prof::StepRecord&) override {}
  bool active() const override { return on; }
  void push(const prof::RangeInfo& info) override {
    stack_.push_back(info);
    sample(info, true);
  }
  void pop() override {
    if (stack_.empty()) return;
    sample(stack_.back(), false);
    stack_.pop_back();
  }
  void record_range(const prof::RangeInfo&, int64_t, int64_t, int32_t) override {}
  void record_range_later(const prof::RangeInfo&, std::function<bool(int64_t*, int64_t*)>, int32_t) override {}
  void sample_memory(const char*, const prof::MemorySample&) override {}
  void set_metric(const std::string&, double) override {}
  void close() override {}

 private:
  void sample(const prof::RangeInfo& info, bool begin) {
    prof::PlannedMemoryPoint p;
    p.phase = static_cast<int32_t>(info.phase);
    p.layer = info.layer;
    p.begin = begin;
    p.c = mem::meta().live();
    points.push_back(p);
  }
  std::vector<prof::RangeInfo> stack_;
};

// Trainer::setup_zero / the Trainer's constructor for the dry run: AdamW (stage 0), the flat
// parameter buffer with the shard's state (stages 1, 2) or Zero3Params (stage 3), charged to the
// optimizer category as the trainer charges them; `params` become the views the stage makes.
struct PlanState {
  std::unique_ptr<torch::optim::AdamW> opt;
  std::unique_ptr<ShardedAdamW> zopt;
  std::unique_ptr<Zero3Params> z3;
  at::Tensor pflat, gshard;
  int64_t tail = 0;
};
PlanState plan_state(LlamaModel& model, Comm& comm, const TrainConfig& t, const ZeroLayout& layout, int64_t grad_numel,
                     const torch::Device& meta, std::vector<at::Tensor>& params) {
  const int64_t Z = t.zero_stage;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(meta);
  PlanState ps;
  auto& opt = ps.opt;
  auto& zopt = ps.zopt;
  auto& z3 = ps.z3;
  at::Tensor& pflat = ps.pflat;
  at::Tensor& gshard = ps.gshard;
  int64_t tail = grad_numel;
  std::optional<mem::Scope> zero_mem;
  if (Z > 0) zero_mem.emplace(mem::MemCategory::Optimizer);  // Trainer::setup_zero's scope
  if (Z >= 3) {
    // Trainer::setup_zero3: the parameters become views of per-unit buffers that exist only
    // while gathered (the trainer's own Zero3Params, over the shape-only Comm: gathers and
    // reduce-scatters allocate what they allocate on a GPU rank and move nothing).
    z3 = std::make_unique<Zero3Params>(model, comm, nullptr);
    params = model.parameters();  // the views (the full tensors taken apart are freed)
    std::vector<bool> decay;
    for (auto& [name, p] : model.named_parameters()) decay.push_back(p.dim() >= 2);
    if (!t.offload_optimizer)
      zopt = std::make_unique<ShardedAdamW>(z3->layout().shard, z3->layout().decay_runs(z3->param_numel(), decay),
                                            ZeroAdamWOptions{}, meta);
  } else if (Z == 0) {
    opt = make_adamw(model, t);  // the Trainer's own construction
  } else {
    pflat = torch::empty({layout.padded()}, f32);
    std::vector<std::pair<int64_t, bool>> sizes;
    for (auto& [name, p] : model.named_parameters()) sizes.emplace_back(p.numel(), p.dim() >= 2);
    move_params_into(model, pflat, /*copy_values=*/false);  // the Trainer's own (meta: no values)
    params = model.parameters();
    if (!t.offload_optimizer) zopt = std::make_unique<ShardedAdamW>(layout, sizes, ZeroAdamWOptions{}, meta);
    if (Z >= 2) gshard = torch::empty({layout.shard}, f32);
    tail = layout.padded();
  }

  zero_mem.reset();
  ps.tail = tail;
  return ps;
}

// Runs `steps` training steps of cfg (num_hidden_layers = layers) on meta and measures the
// last one. forward_only: one forward, no backward or optimizer.
Measured dry_run(const RunConfig& cfg, int64_t layers, bool cuda, int sp_rank, int steps, bool forward_only) {
  MetaMemory::install();
  std::lock_guard<std::mutex> lock(g_dry_run);
  torch::NoGradGuard outer_off;  // building the model and inputs records nothing
  const torch::Device meta(torch::kMeta);
  RunConfig c = cfg;
  c.model.num_hidden_layers = layers;
  const auto& t = c.train;
  // With ring attention the sequence is split over sp x ring ranks (ring rank 0 planned: every
  // ring rank holds the same shapes).
  const int64_t P = c.parallel.sp_size, R = c.parallel.ring_size, n = t.seq_length / (P * R), B = t.micro_batch_size;
  const auto dtype = t.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  Comm comm = Comm::shape_only(sp_rank, static_cast<int>(P), static_cast<int>(c.parallel.dp_size), static_cast<int>(R));

  Measured m;
  m.base = MetaMemory::live();
  std::optional<mem::Scope> built(mem::MemCategory::Parameters);  // as Trainer's constructor charges them
  LlamaModel model(c.model, c.parallel, dtype, &comm, meta);
  CurveTracer curve;  // the last step's categories at the model's range edges
  model.set_tracer(&curve);
  model.set_attention_kernel(plan_kernel(c, cuda));
  model.set_memory_options(MemoryOptions::from(c.train));  // the run's long-sequence techniques, as Trainer sets them
  m.techniques = true;
  for (const auto& p : model.parameters()) m.params += p.numel();
  built.reset();
  auto ids = torch::empty({B, n}, torch::TensorOptions().dtype(torch::kInt64).device(meta));     // (B, n)
  auto labels = torch::empty({B, n}, torch::TensorOptions().dtype(torch::kInt64).device(meta));  // (B, n)
  m.inputs = 2 * B * n * 8;                                                                      // ids + labels
  const int64_t pos0 = sp_rank * n;
  auto params = model.parameters();
  int64_t grad_numel = 0;
  for (const auto& p : params) grad_numel += p.numel();

  // Trainer::setup_zero (stages 1, 2): the parameters become views of one flat buffer padded to
  // W x S; AdamW state of this rank's S elements (none on the device with offload_optimizer).
  const int64_t Z = t.zero_stage;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(meta);
  ZeroLayout layout(grad_numel, c.parallel.world_size(), sp_rank);
  PlanState st = plan_state(model, comm, t, layout, grad_numel, meta, params);
  auto& opt = st.opt;
  auto& zopt = st.zopt;
  auto& z3 = st.z3;
  at::Tensor& pflat = st.pflat;
  at::Tensor& gshard = st.gshard;
  const int64_t tail = st.tail;
  // Trainer: every parameter's .grad is a view into one flat fp32 gradient buffer (padded at
  // ZeRO stages) that autograd accumulates into and that is all-reduced in place.
  at::Tensor flat;
  auto bind = [&] {
    mem::Scope g(mem::MemCategory::Gradients);
    flat = torch::zeros({tail}, f32);
    bind_flat_grads(params, flat);  // the Trainer's own
  };
  if (!z3) bind();

  for (int s = 0; s < steps; ++s) {
    if (z3) {
      z3->begin_step();
    } else {
      if (!flat.defined()) bind();  // stage 2 freed it after the last step
      flat.zero_();
    }
    curve.on = s + 1 == steps;
    curve.points.clear();
    const int64_t start = MetaMemory::live();
    MetaMemory::reset_peak();
    mem::meta().reset_peak();
    if (z3) z3->reset_peak();
    torch::AutoGradMode on(true);
    at::Tensor loss_sum;
    {
      mem::Scope act(mem::MemCategory::Activations);  // Trainer::loss_and_grads' scope
      loss_sum = model.forward_loss_sum(ids, labels, pos0);
    }
    // Stage 3 keeps the head's weights gathered for its backward: gathered, not activations.
    m.after_forward = MetaMemory::live() - start - (z3 ? z3->gathered_bytes() : 0);
    if (z3) {
      if (!forward_only) {
        // Trainer (stage 3): each unit's gradients reduce-scattered during backward, the
        // fp64 partial norm, AdamW on the shard; no all-gather after the step.
        loss_sum.backward();
        z3->finish_backward();
        torch::NoGradGuard ng;
        loss_sum = at::Tensor();
        at::Tensor& g = z3->grad_shard();
        g.div_(1.0);
        auto sq = sum_of_squares_fp64(g);
        sq = at::Tensor();
        g.mul_(0.5);
        mem::Scope o(mem::MemCategory::Optimizer);
        if (zopt) zopt->step(z3->shard(), g, 1e-3);
      }
      m.curve = curve.points;
      m.gathered_peak = z3->peak_gathered_bytes();
      m.peak = MetaMemory::peak();
      m.at_peak = mem::meta().at_peak();
      m.peak_above_start = m.peak - start;
      m.after_step = MetaMemory::live();
      continue;
    }
    if (!forward_only) {
      loss_sum.backward();
      torch::NoGradGuard ng;
      // Trainer::loss_and_grads: the loss sum and token count in their own (tiny) all-reduce,
      // one all-reduce of the gradients, divided in place (the .grad views see it).
      loss_sum = at::Tensor();
      if (Z >= 2) {
        // Trainer (stage 2): reduce-scatter into the shard, fp64 partial norm, sharded AdamW,
        // all-gather into the parameters, the full gradient buffer freed.
        auto grads = flat.narrow(0, 0, tail);
        comm.reduce_scatter_sum(gshard, grads);
        gshard.div_(1.0);
        auto sq = sum_of_squares_fp64(gshard);
        sq = at::Tensor();
        gshard.mul_(0.5);
      } else {
        comm.all_reduce_sum(flat);
        flat.narrow(0, 0, grad_numel).div_(1.0);
        // Trainer::step: one fp32 norm over the buffer, clipping in place, then AdamW.
        auto norm = flat.narrow(0, 0, grad_numel).norm();
        norm = at::Tensor();
        flat.narrow(0, 0, grad_numel).mul_(0.5);
      }
      mem::Scope o(mem::MemCategory::Optimizer);  // Trainer::step's scope
      if (opt) opt->step();
      if (Z >= 1) {
        auto own = pflat.narrow(0, layout.begin(), layout.shard);
        at::Tensor g = Z >= 2 ? gshard : flat.narrow(0, layout.begin(), layout.shard);
        if (zopt) zopt->step(own, g, 1e-3);
        comm.all_gather(pflat, own);
      }
      if (Z >= 2) {
        for (auto& p : params) p.mutable_grad() = at::Tensor();
        flat = at::Tensor();
      }
    }
    m.peak = MetaMemory::peak();
    m.at_peak = mem::meta().at_peak();
    m.peak_above_start = m.peak - start;
    m.after_step = MetaMemory::live();
    m.curve = curve.points;
  }
  model.set_tracer(nullptr);
  return m;
}

}  // namespace

void MetaMemory::install() {
  std::call_once(g_install, [] { c10::SetAllocator(c10::DeviceType::Meta, &g_counting, /*priority=*/1); });
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
  p.attention = kernel_name(plan_kernel(cfg, cuda));
  p.sp_size = cfg.parallel.sp_size;
  p.ring_size = cfg.parallel.ring_size;
  p.dp_size = cfg.parallel.dp_size;
  p.sp_rank = opt.sp_rank;
  p.seq_length = cfg.train.seq_length;
  p.local_tokens = cfg.train.seq_length / cfg.parallel.seq_ranks();
  p.micro_batch_size = cfg.train.micro_batch_size;
  p.layers = cfg.model.num_hidden_layers;

  const cost::CostEstimate est = cost::estimate(cfg);
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
  const Measured full = dry_run(run_cfg, L, cuda, opt.sp_rank, 2, false);
  p.params = full.params;
  p.memory_techniques_applied = full.techniques;
  p.activation_bytes = full.after_forward;
  p.peak_bytes = full.peak - full.base;
  p.peak_categories = full.at_peak;
  p.curve = full.curve;
  p.measured_static_bytes = full.after_step - full.base - full.inputs;
  if (zero3) {
    p.gathered_param_bytes = full.gathered_peak;  // measured: this engine's fp32 units
    if (cfg.train.offload_params) {
      // The parameter shard (S fp32) lives in CPU memory between uses (pinned): off the device.
      // (The dry run keeps it on meta: a CPU shard of a real model's size would be allocated.)
      const int64_t W = cfg.parallel.world_size();
      int64_t shard = 0;
      {
        std::vector<int64_t> numel;
        std::vector<int> unit_of;
        for (const auto& prm : cfg.model.parameters()) {
          int64_t n = 1;
          for (int64_t d : prm.shape) n *= d;
          numel.push_back(n);
          unit_of.push_back(zero3_unit_of(prm.name, L));
        }
        shard = Zero3Layout(numel, unit_of, W, opt.sp_rank).shard;
      }
      p.peak_bytes -= shard * 4;
      p.measured_static_bytes -= shard * 4;
    }
  }
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
    g.tracing = cfg.profile.enabled;
    p.gpu = cost::gpu_reserve(g);
    p.has_gpu_reserve = true;
  }
  p.dry_run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
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
    const MemoryPlan q = plan_memory(c, o);
    if (q.has_gpu_reserve)  // on a GPU: everything the device holds, with the stated headroom
      return q.gpu.device_bytes() <=
             static_cast<int64_t>(static_cast<double>(limit_bytes) * (1.0 - cost::kGpuHeadroom));
    return q.peak_bytes <= limit_bytes;
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
         {"peak_bytes", p.peak_bytes},
         {"memory_techniques_applied", p.memory_techniques_applied},
         {"dry_run_s", p.dry_run_s}};
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
                {"max_seq_headroom", cost::kGpuHeadroom}};
  }
  // What is alive at the peak, by category (the same scopes as a real run's trace).
  json cats = json::object();
  for (int k = 0; k < prof::kMemCategories; ++k) cats[prof::kMemCategoryNames[k]] = p.peak_categories.bytes[k];
  j["peak_categories"] = cats;
  return j;
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
  line("transient at peak", format_bytes(double(p.transient_bytes())));
  line("peak total", format_bytes(double(p.peak_bytes)) + "  (" + std::to_string(p.peak_bytes) + " bytes)");
  if (p.has_gpu_reserve) {  // cost/gpu_reserve.hpp
    const cost::GpuReserve& g = p.gpu;
    if (g.offloaded_host_bytes)
      line("offloaded inputs (pinned host)", format_bytes(double(g.offloaded_host_bytes)) + "  (off the device)");
    if (g.prefetch_bytes) line("offload prefetch (2 inputs)", format_bytes(double(g.prefetch_bytes)));
    line("allocator peak on the GPU", format_bytes(double(g.allocator_peak_bytes)));
    line("allocator rounding", format_bytes(double(g.rounding_bytes)));
    line("CUDA context + modules", format_bytes(double(g.context_bytes)) + "  (ULYSSES_GPU_CONTEXT_MIB)");
    line("cuBLAS, NCCL, CUPTI buffers", format_bytes(double(g.cublas_bytes)) + " + " +
                                            format_bytes(double(g.nccl_bytes)) + " + " +
                                            format_bytes(double(g.cupti_bytes)));
    line("GPU total", format_bytes(double(g.device_bytes())) + "  (" + std::to_string(g.device_bytes()) + " bytes)");
  }
  if (!p.memory_techniques_applied)
    s += "  (this build's model has no activation checkpointing / tiled loss / TiledMLP: those settings were not "
         "applied)\n";
  char buf[96];
  std::snprintf(buf, sizeof buf, "  (meta-device dry run of the real step, %.2f s)\n", p.dry_run_s);
  s += buf;
  return s;
}

}  // namespace ulysses::plan
