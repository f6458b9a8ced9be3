// One rank's training step: gradient accumulation over micro-batches, one all-reduce,
// clipping, AdamW (HF betas/epsilon) and transformers' get_scheduler learning rates.
#include "trainer.hpp"

#include <chrono>
#include <cmath>
#include <optional>

#include "checkpoint.hpp"
#include "documents.hpp"
#include "reductions.hpp"
#include "ring_geometry.hpp"
#include "memory_categories.hpp"
#include "torch_compat.hpp"

namespace ulysses {

using prof::Direction;
using prof::Phase;

double learning_rate(const TrainConfig& t, int64_t s) {
  // transformers' get_scheduler lambdas (optimization.py), times the peak lr; step s is the
  // number of optimizer steps already taken, so warmup starts at 0 as in Hugging Face.
  const double W = static_cast<double>(t.warmup_steps), T = static_cast<double>(t.steps), x = static_cast<double>(s);
  if (s < t.warmup_steps) return t.lr * (x / std::max(1.0, W));
  const std::string& type = t.lr_scheduler_type;
  if (type == "constant_with_warmup") return t.lr;
  if (type == "linear") return t.lr * std::max(0.0, (T - x) / std::max(1.0, T - W));
  const double progress = (x - W) / std::max(1.0, T - W);
  double factor = 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress));  // num_cycles = 0.5
  if (type == "cosine_with_min_lr") {
    const double min_lr_rate = t.min_lr / t.lr;
    factor = factor * (1 - min_lr_rate) + min_lr_rate;
  }
  return t.lr * std::max(0.0, factor);
}

namespace {
// Memory at a phase boundary: the caching allocator on GPU, the process RSS on CPU.
prof::MemorySample memory_now(const torch::Device& d) {
  prof::MemorySample m;
  if (compat::cuda_memory(d, &m.allocated, &m.reserved, &m.peak)) return m;
  return prof::Tracer::process_memory();
}
}  // namespace

AttentionKernel trainer_attention_kernel(const TrainConfig& t, bool cuda, const torch::Device& runs_on) {
  AttentionKernel k = attention_kernel_for(t.attention, t.attention_block, cuda);
  // SDPA picks flash on CUDA, and on the CPU in libtorch 2.x
  if (runs_on.is_meta() && (cuda || compat::cpu_sdpa_is_flash()) && k.kind == AttentionKernel::Kind::Sdpa)
    k.kind = AttentionKernel::Kind::FlashShapes;
  return k;
}

Trainer::Trainer(const RunConfig& cfg, Comm& comm, prof::Tracer* tracer, const TrainerOptions& opt)
    : cfg_(cfg),
      comm_(comm),
      tracer_(tracer),
      device_(comm.device()),
      host_(device_.is_meta() ? device_ : torch::Device(torch::kCPU)) {
  const auto dtype = cfg.train.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  data_ = opt.data
              ? opt.data
              : TokenSource::open(cfg.data, cfg.model, cfg.train.seq_length, static_cast<uint64_t>(cfg.train.seed));
  std::optional<mem::Scope> built(mem::MemCategory::Parameters);  // the weights (memory_categories.hpp)
  // Built and initialised on the CPU (the same values whatever the device), then moved to a GPU;
  // a meta Trainer builds on meta (no values to initialise).
  model_ = std::make_unique<LlamaModel>(cfg.model, cfg.parallel, dtype, &comm, host_);
  if (!device_.is_meta()) model_->init_parameters(static_cast<uint64_t>(cfg.train.seed));
  if (!cfg.train.init_from.empty()) unused_init_ = load_checkpoint(*model_, cfg.train.init_from);
  if (device_.is_cuda()) {
    torch::NoGradGuard ng;
    for (auto& [name, p] : model_->named_parameters()) p = p.to(device_).detach().set_requires_grad(true);
  }
  model_->set_tracer(tracer);
  model_->set_attention_kernel(trainer_attention_kernel(cfg.train, device_.is_cuda() || opt.plan_for_cuda, device_));
  model_->set_memory_options(MemoryOptions::from(cfg.train));
  for (auto& p : model_->parameters()) grad_numel_ += p.numel();
  zero_stage_ = cfg.train.zero_stage;
  tail_ = grad_numel_;
  built.reset();
  if (zero_stage_ > 0) {
    mem::Scope s(mem::MemCategory::Optimizer);  // the shards of weights and AdamW state
    setup_zero();
    return;
  }
  {
    mem::Scope s(mem::MemCategory::Gradients);
    flat_ = torch::zeros({grad_numel_}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  }
  bind_grads();
  opt_ = make_adamw(*model_, cfg.train);
}

std::unique_ptr<torch::optim::AdamW> make_adamw(LlamaModel& model, const TrainConfig& t) {
  std::vector<at::Tensor> decay, no_decay;
  for (auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = torch::optim::AdamWOptions(t.lr)
                  .betas({t.adam_beta1, t.adam_beta2})
                  .eps(t.adam_epsilon)
                  .weight_decay(t.weight_decay);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts));
  auto nd = opts;
  nd.weight_decay(0.0);
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(nd));
  return std::make_unique<torch::optim::AdamW>(groups, opts);
}

Trainer::~Trainer() = default;

torch::optim::AdamW& Trainer::optimizer() {
  if (!opt_)
    throw std::logic_error("Trainer::optimizer: train.zero_stage " + std::to_string(zero_stage_) +
                           " steps a ShardedAdamW (zero_optimizer())");
  return *opt_;
}

ShardedAdamW& Trainer::zero_optimizer() {
  if (!zopt_) throw std::logic_error("Trainer::zero_optimizer: train.zero_stage is 0");
  return *zopt_;
}

at::Tensor Trainer::zero_master() {
  if (master_.defined()) return master_;
  return z3_ ? z3_->shard() : pflat_.narrow(0, layout_.begin(), layout_.shard);
}

void Trainer::zero_sync_masters_from_params() {
  torch::NoGradGuard ng;
  if (master_.defined()) master_.copy_(z3_ ? z3_->shard() : pflat_.narrow(0, layout_.begin(), layout_.shard));
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::gathered_parameters() {
  GatheredParameters full(*this);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, p] : model_->named_parameters()) out.emplace_back(name, p.detach().clone());
  return out;
}

GatheredParameters::GatheredParameters(Trainer& t) : z3_(t.zero3()) {
  if (z3_) z3_->gather_all();
}
GatheredParameters::~GatheredParameters() {
  if (z3_) z3_->release_all();
}

void Trainer::setup_zero() {
  const auto& t = cfg_.train;
  if (const std::string why = not_yet_trained(cfg_); !why.empty()) throw ConfigError(why);
  layout_ = ZeroLayout(grad_numel_, comm_.world_size(), comm_.rank());
  ZeroAdamWOptions o;
  o.beta1 = t.adam_beta1;
  o.beta2 = t.adam_beta2;
  o.eps = t.adam_epsilon;
  o.weight_decay = t.weight_decay;
  if (zero_stage_ >= 3) return setup_zero3(o);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  // The parameters move into one flat buffer (padding zero) and become views of it, so the
  // all-gather after each step writes every rank's updated shard straight into them.
  pflat_ = torch::zeros({layout_.padded()}, f32);  // (W*S)
  move_params_into(*model_, pflat_, /*copy_values=*/true);
  tail_ = layout_.padded();
  flat_ = torch::zeros({tail_}, f32);  // [gradients, padding]
  bind_grads();
  std::vector<std::pair<int64_t, bool>> sizes;
  for (auto& [name, p] : model_->named_parameters()) sizes.emplace_back(p.numel(), p.dim() >= 2);
  // offload_optimizer: masters and AdamW state in CPU memory (pinned when the device is a GPU).
  const bool off = t.offload_optimizer;
  const torch::Device state_dev = off ? host_ : device_;
  {
    std::optional<mem::HostScope> host;
    if (off) host.emplace();
    zopt_ = std::make_unique<ShardedAdamW>(layout_, sizes, o, state_dev, off && device_.is_cuda());
    if (off) {
      auto h = torch::TensorOptions().dtype(torch::kFloat32).device(host_).pinned_memory(device_.is_cuda());
      master_ = torch::empty({layout_.shard}, h);  // (S)
      zero_sync_masters_from_params();
    }
  }
  if (zero_stage_ >= 2) gshard_ = torch::zeros({layout_.shard}, f32);  // (S)
}

void Trainer::setup_zero3(const ZeroAdamWOptions& o) {
  // Stage 3 (zero3.hpp): this rank keeps its shard of every gather unit; the parameters are
  // views of per-unit buffers that exist only while gathered; no flat gradient buffer.
  // train.grad_accum_dtype / grad_reduce_dtype: bf16 unit gradients in bf16 training (the
  // fp32 shard is what they are reduced into), the wire as set.
  const auto bf16 = [](bool b) { return b ? torch::kBFloat16 : torch::kFloat32; };
  z3_ = std::make_unique<Zero3Params>(*model_, comm_, tracer_, cfg_.train.offload_params, host_,
                                      cfg_.train.offload_optimizer && cfg_.train.offload_gradients,
                                      bf16(cfg_.train.bf16_unit_grads()),
                                      bf16(cfg_.train.bf16_unit_grads() && cfg_.train.grad_reduce_dtype == "bfloat16"),
                                      bf16(cfg_.train.bf16_gathers()));
  std::vector<bool> decay;
  for (auto& [name, p] : model_->named_parameters()) decay.push_back(p.dim() >= 2);
  const int64_t S = z3_->layout().shard;
  const bool off = cfg_.train.offload_optimizer;
  const torch::Device state_dev = off ? host_ : device_;
  std::optional<mem::HostScope> host;
  if (off) host.emplace();
  zopt_ = std::make_unique<ShardedAdamW>(S, z3_->layout().decay_runs(z3_->param_numel(), decay), o, state_dev,
                                         off && device_.is_cuda());
  if (off) {
    auto h = torch::TensorOptions().dtype(torch::kFloat32).device(host_).pinned_memory(device_.is_cuda());
    master_ = torch::empty({S}, h);  // (S)
    zero_sync_masters_from_params();
  }
}

double Trainer::zero_optimizer_step(int64_t s, double* lr) {
  torch::NoGradGuard ng;
  const int64_t S = layout_.shard, b = layout_.begin();
  // This rank's mean gradients: reduce-scattered (stages 2, 3) or its slice of the all-reduced buffer.
  at::Tensor g = z3_ ? z3_->grad_shard() : zero_stage_ >= 2 ? gshard_ : flat_.narrow(0, b, S);  // (S)
  double norm = 0;
  // The optimizer's own work is a range of its own (a leaf beside the collectives inside the
  // step's optimizer range): otherwise its time, on the CPU with offloading, is nobody's.
  std::optional<prof::ScopedRange> work;
  work.emplace(tracer_, prof::RangeInfo{Phase::Optimizer, Direction::None});
  if (zero_stage_ >= 2) {
    // Global norm from the shards: each rank's fp64 sum of squares (reductions.hpp: no fp64
    // copy of the shard), all-reduced.
    std::optional<mem::HostScope> host;  // stage 3 with offload_gradients: the shard is in CPU memory
    if (z3_ && z3_->grads_on_host()) host.emplace();
    auto sq = sum_of_squares_fp64(g).reshape({1}).to(comm_.device());  // (1,) fp64
    host.reset();
    work.reset();
    comm_.all_reduce_sum(sq);  // traced by Comm (phase collective)
    work.emplace(tracer_, prof::RangeInfo{Phase::Optimizer, Direction::None});
    norm = std::sqrt(scalar_value(sq));
  } else {
    norm = l2_norm(flat_.narrow(0, 0, grad_numel_));  // every rank holds all gradients
  }
  const double clip = cfg_.train.grad_clip;
  if (clip > 0 && clip / (norm + 1e-6) < 1.0) g.mul_(clip / (norm + 1e-6));  // clip_grad_norm_'s coefficient
  *lr = learning_rate(cfg_.train, s);
  if (z3_) {  // stage 3: the shard is all this rank keeps; the next forward gathers it
    at::Tensor& own = z3_->shard();
    if (master_.defined()) {
      mem::HostScope host;  // the step runs in CPU memory
      zopt_->step(master_, g, *lr);
      own.copy_(master_);
    } else if (own.device() != zopt_->exp_avg.device()) {  // offload_params alone: step on the device
      at::Tensor d = own.to(zopt_->exp_avg.device());
      zopt_->step(d, g, *lr);
      own.copy_(d);
    } else {
      zopt_->step(own, g, *lr);
    }
    return norm;
  }
  at::Tensor own = pflat_.narrow(0, b, S);  // (S) this rank's slice of the parameters
  if (master_.defined()) {
    mem::HostScope host;           // the step runs in CPU memory
    zopt_->step(master_, g, *lr);  // on the CPU: the gradients go down, the weights come up
    own.copy_(master_);
  } else {
    zopt_->step(own, g, *lr);
  }
  work.reset();
  // Traced as a collective of the gradient-reduction phase (the trace format has no phase of
  // its own for it): dir none, the world group's (pg, seq), the bytes of a ring all-gather.
  prof::RangeInfo r;
  r.phase = Phase::GradAllReduce;
  r.dir = Direction::None;
  r.bytes_sent = S * 4 * (layout_.world - 1);
  r.bytes_recv = r.bytes_sent;
  comm_.all_gather(pflat_, own, tracer_, &r);  // every rank's updated shard into the parameters
  if (zero_stage_ >= 2) {
    // Stage 2 keeps only its gradient shard between steps: the full buffer is made again at
    // the next backward (it exists from backward to the reduce-scatter).
    for (auto& p : model_->parameters()) p.mutable_grad() = at::Tensor();
    flat_ = at::Tensor();
  }
  return norm;
}

void Trainer::bind_grads() { bind_flat_grads(model_->parameters(), flat_); }

void bind_flat_grads(const std::vector<at::Tensor>& params, const at::Tensor& flat) {
  // Parameters are fp32 (the masters in bf16 mode), so their gradients are fp32 views.
  int64_t off = 0;
  for (auto p : params) {
    auto g = flat.narrow(0, off, p.numel()).view(p.sizes());
    if (!p.grad().defined() || !p.grad().is_same(g)) p.mutable_grad() = g;
    off += p.numel();
  }
}

void move_params_into(LlamaModel& model, const at::Tensor& pflat, bool copy_values) {
  torch::NoGradGuard ng;
  int64_t off = 0;
  for (auto& [name, p] : model.named_parameters()) {
    auto v = pflat.narrow(0, off, p.numel());
    if (copy_values) v.copy_(p.reshape({-1}));
    p = v.view(p.sizes()).detach().set_requires_grad(true);
    off += p.numel();
  }
}

void record_backward_mark_ranges(prof::Tracer* tracer, const BackwardMarks& m, bool attention_window, int32_t heads) {
  if (!tracer || !tracer->active()) return;
  auto rec = [&](Phase ph, int32_t layer, int64_t s, int64_t e, int32_t h0 = -1, int32_t h1 = -1) {
    if (s <= 0 || e <= 0 || e < s) return;
    prof::RangeInfo r;
    r.phase = ph;
    r.dir = Direction::Backward;
    r.layer = layer;
    r.head_begin = h0;
    r.head_end = h1;
    tracer->record_range(r, s, e, 0);
  };
  rec(Phase::LmHead, -1, m.head_begin, m.head_end);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const auto& L = m.layers[l];
    const auto li = static_cast<int32_t>(l);
    rec(Phase::Mlp, li, L.mlp_begin, L.mlp_end);
    rec(Phase::OutProj, li, L.o_begin, L.o_end);
    if (attention_window) rec(Phase::Attention, li, L.o_end, L.qkv_begin, 0, heads);
    rec(Phase::QkvProj, li, L.qkv_begin, L.qkv_end);
  }
}

namespace {
// The backward's ends, which no marker sees: the loss's backward (from the start of backward to
// the logits' marker) and the embedding's (from layer 0's input-norm marker, where the layers'
// gradient reaches the embedding output, to the end of backward). CPU ranks: else untraced.
void record_backward_edge_ranges(prof::Tracer* tracer, const BackwardMarks& m, int64_t begin, int64_t end) {
  if (!tracer || !tracer->active()) return;
  auto rec = [&](Phase ph, int64_t s, int64_t e) {
    if (s <= 0 || e <= 0 || e < s) return;
    prof::RangeInfo r;
    r.phase = ph;
    r.dir = Direction::Backward;
    tracer->record_range(r, s, e, 0);
  };
  rec(Phase::Loss, begin, m.head_begin);
  if (!m.layers.empty()) rec(Phase::Embedding, m.layers.front().qkv_end, end);
}
}  // namespace

void Trainer::record_backward_marks() {
  // sp 1, one head chunk, no ring: attention_core runs plainly, with no backward range of its own
  const bool window = comm_.sp_size() == 1 && cfg_.parallel.head_chunks <= 1 && comm_.ring_size() <= 1;
  record_backward_mark_ranges(tracer_, model_->marks(), window, static_cast<int32_t>(cfg_.model.num_attention_heads));
}

double Trainer::loss_and_grads(int64_t s) {
  const auto& t = cfg_.train;
  const int64_t N = t.seq_length, B = t.micro_batch_size;
  if (z3_) {
    z3_->begin_step();  // stage 3: each unit's gradients are reduce-scattered during backward
  } else {
    if (!flat_.defined()) {  // ZeRO stage 2 released it after the last step
      mem::Scope g(mem::MemCategory::Gradients);
      flat_ = torch::zeros({tail_}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    }
    ULYSSES_RANGE(tracer_, Phase::Other, Direction::None);  // host work between ranges is traced too
    bind_grads();   // (again: a test or a checkpoint load may have replaced a .grad)
    flat_.zero_();  // autograd adds every parameter's gradient into its slice in place
  }

  // global batch: B * A * dp_size sequences; this DP rank takes sequences
  // [(dp_rank * A + a) * B, +B) in micro-step a, this SP rank its shard of each. Gradients
  // of the A backwards add up in flat_, loss sums and token counts in loss_acc / count_acc,
  // so dividing by the global token count below gives the one-big-batch mean (token-weighted).
  // The shard: N/P contiguous tokens at sp_rank x N/P; with a ring, the pieces of the ring
  // layout that (ring_rank, sp_rank) holds (seq_shard_ranges, ring_geometry.hpp).
  const int64_t A = std::max<int64_t>(1, t.gradient_accumulation_steps);
  const RingLayout ring{comm_.ring_size(), cfg_.parallel.ring_zigzag};
  const auto ranges = seq_shard_ranges(N, comm_.sp_size(), ring, comm_.ring_rank(), comm_.sp_rank());
  std::vector<at::Tensor> pos_parts;
  for (const auto& r : ranges) pos_parts.push_back(torch::arange(r.begin, r.end, torch::kInt64));
  const at::Tensor positions = pos_parts.size() == 1 ? pos_parts[0] : torch::cat(pos_parts);  // (n)
  auto shard = [&](const at::Tensor& x) {                                                     // (B, N) -> (B, n)
    if (ranges.size() == 1) return x.narrow(1, ranges[0].begin, ranges[0].end - ranges[0].begin).contiguous();
    std::vector<at::Tensor> parts;
    for (const auto& r : ranges) parts.push_back(x.narrow(1, r.begin, r.end - r.begin));
    return torch::cat(parts, 1);
  };
  at::Tensor loss_acc, count_acc;
  for (int64_t a = 0; a < A; ++a) {
    at::Tensor ids, labels;
    DocumentMask docs;  // data.kind = documents: the whole sequences' document mask (the model keeps a copy)
    {
      ULYSSES_RANGE(tracer_, Phase::Data, Direction::None);  // the host builds this micro-step's batch
      Batch batch = make_batch(*data_, N, s, (comm_.dp_rank() * A + a) * B, B, static_cast<uint64_t>(t.seed));
      ids = shard(batch.ids).to(device_);        // (B, n)
      labels = shard(batch.labels).to(device_);  // (B, n)
      if (batch.doc_start.defined()) docs = DocumentMask(batch.doc_start);
      // Which documents this rank's shard holds (ULYSSES_DOCUMENTS; the studio's Documents tab).
      if (const auto* dt = dynamic_cast<const DocumentTokens*>(data_.get()); dt && tracer_ && tracer_->active())
        tracer_->record_documents(document_shards(*dt, batch.packed, (comm_.dp_rank() * A + a) * B, s, ranges));
    }

    at::Tensor loss_sum;
    int64_t backward_begin = 0, backward_end = 0;
    {
      mem::Scope act(mem::MemCategory::Activations);  // the model's forward (its head: Logits)
      mem::Label forward("forward");                  // memory_labels.hpp: names the peak table's rows
      loss_sum = model_->forward_loss_sum(ids, labels, positions, docs.defined() ? &docs : nullptr);
    }
    if (tracer_ && tracer_->active() && cfg_.profile.memory) {
      ULYSSES_RANGE(tracer_, Phase::Other, Direction::None);  // the memory sample: the rank's own work
      tracer_->sample_memory("after_forward", memory_now(device_));
    }
    {
      ULYSSES_RANGE(tracer_, Phase::Backward, Direction::Backward);
      backward_begin = prof::Tracer::now_ns();
      loss_sum.backward();
      backward_end = prof::Tracer::now_ns();
      if (z3_) z3_->finish_backward();  // the embedding's reduce-scatter; every unit released
    }
    record_backward_marks();
    record_backward_edge_ranges(tracer_, model_->marks(), backward_begin, backward_end);
    {
      ULYSSES_RANGE(tracer_, Phase::Other, Direction::None);  // the memory sample, the loss and token sums
      if (tracer_ && tracer_->active() && cfg_.profile.memory)
        tracer_->sample_memory("after_backward", memory_now(device_));
      auto cnt = (labels != -100).sum();
      const auto l64 = loss_sum.detach().to(torch::kFloat64);  // micro-steps add up in fp64
      loss_acc = a == 0 ? l64 : loss_acc + l64;
      count_acc = a == 0 ? cnt : count_acc + cnt;
    }
  }

  // The loss sum and valid-token count: an fp64 all-reduce of their own (reductions.hpp: exact
  // counts, no fp32 rounding of the global sum); then one all-reduce of the gradients.
  double count = 0;
  const double loss = global_token_mean(loss_acc, count_acc, comm_, &count);
  if (z3_) {  // stage 3: the gradient shard holds this rank's sums already
    torch::NoGradGuard ng;
    z3_->grad_shard().div_(std::max(1.0, count));
    return loss;
  }
  at::Tensor& buf = flat_;
  if (zero_stage_ >= 2) {
    // Stage 2: each rank receives only its shard of the summed gradients (the loss sum and
    // token count were all-reduced above).
    prof::RangeInfo r;
    r.phase = Phase::GradAllReduce;
    r.dir = Direction::Backward;
    r.bytes_sent = r.bytes_recv = layout_.shard * 4 * (layout_.world - 1);  // ring reduce-scatter volume
    auto grads = flat_.narrow(0, 0, tail_);
    comm_.reduce_scatter_sum(gshard_, grads, tracer_, &r);
    torch::NoGradGuard ng;
    gshard_.div_(std::max(1.0, count));
    return loss;
  }
  {
    prof::RangeInfo r;
    r.phase = Phase::GradAllReduce;
    r.dir = Direction::Backward;
    const int64_t bytes =
        comm_.world_size() > 1 ? buf.numel() * 4 * 2 * (comm_.world_size() - 1) / comm_.world_size() : 0;
    r.bytes_sent = r.bytes_recv = bytes;     // ring all-reduce volume
    comm_.all_reduce_sum(buf, tracer_, &r);  // traced by Comm with the collective's (pg, seq)
  }
  torch::NoGradGuard ng;
  ULYSSES_RANGE(tracer_, Phase::Other, Direction::None);
  buf.narrow(0, 0, grad_numel_).div_(std::max(1.0, count));  // every .grad sees it: they are views
  return loss;
}

StepMetrics Trainer::step(int64_t s) {
  const auto t0 = std::chrono::steady_clock::now();
  StepMetrics m;
  m.step = s;
  {
    ULYSSES_RANGE(tracer_, Phase::Step, Direction::None);
    m.loss = loss_and_grads(s);
    ULYSSES_RANGE(tracer_, Phase::Optimizer, Direction::None);
    torch::NoGradGuard ng;
    mem::Scope opt_mem(mem::MemCategory::Optimizer);
    if (zero_stage_ > 0) {
      m.grad_norm = zero_optimizer_step(s, &m.lr);
    } else {
      // Hugging Face's global norm (clip_grad_norm_): fp32 chunks combined in fp64 (reductions.hpp),
      // identical on every rank after the all-reduce; clipped with clip_grad_norm_'s coefficient
      m.grad_norm = l2_norm(flat_.narrow(0, 0, grad_numel_));
      const double clip = cfg_.train.grad_clip;
      if (clip > 0 && clip / (m.grad_norm + 1e-6) < 1.0) {
        const double scale = clip / (m.grad_norm + 1e-6);
        flat_.narrow(0, 0, grad_numel_).mul_(scale);
      }
      m.lr = learning_rate(cfg_.train, s);
      for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(m.lr);
      opt_->step();
    }
  }
  compat::synchronize(device_);
  prof::MemorySample mem;
  at::Tensor peak;
  {
    ULYSSES_RANGE(tracer_, Phase::Other, Direction::None);
    mem = memory_now(device_);
    if (tracer_ && tracer_->active() && cfg_.profile.memory) tracer_->sample_memory("after_optimizer", mem);
    // Max over ranks, as an int64 on the communication device (NCCL takes CUDA tensors only).
    peak = torch::tensor({static_cast<int64_t>(mem.peak)}, torch::TensorOptions().dtype(torch::kInt64))
               .to(comm_.device());  // (1,)
  }
  comm_.all_reduce_max(peak);
  m.max_mem_bytes = static_cast<int64_t>(scalar_value(peak));
  m.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  m.tokens = cfg_.train.seq_length * cfg_.train.micro_batch_size * cfg_.train.gradient_accumulation_steps *
             cfg_.parallel.dp_size;
  m.tokens_per_s = m.tokens / std::max(1e-9, m.step_ms / 1000.0);
  return m;
}

}  // namespace ulysses
