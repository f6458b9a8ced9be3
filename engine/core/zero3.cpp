// ZeRO stage 3: sharded parameters gathered per unit, gradients reduce-scattered per unit
// (see zero3.hpp).
#include "zero3.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "memory_categories.hpp"

namespace ulysses {

using prof::Direction;
using prof::Phase;

namespace {

// A released unit keeps its tensors (the parameters and what autograd saved of them are views
// of the unit's storage) but not its bytes: the storage's memory is freed and allocated again,
// through the same allocator, by the next gather.
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void alloc_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  s->set_data_ptr_noswap(s->allocator()->allocate(n));
  s->set_nbytes(n);
}

bool contains(const std::vector<size_t>& v, size_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// A view of a unit's bf16 buffer with a version counter of its own (the gathers write the
// buffer between a forward and its backward) and no autograd history.
at::Tensor fresh_alias(const at::Tensor& view) {
  at::Tensor a = view.detach();
  a.unsafeGetTensorImpl()->set_version_counter(c10::VariableVersion(0));
  return a;
}

// The gathered bf16 weight as the model's weight: forward hands out the unit's bf16 view (no
// copy), backward takes its gradient to the fp32 parameter (cast as the .to's backward did).
struct GatheredWeight : public torch::autograd::Function<GatheredWeight> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& param, const at::Tensor& view) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(param.scalar_type());
    return fresh_alias(view);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto dt = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g[0].defined() ? g[0].to(dt) : g[0], at::Tensor()};
  }
};

}  // namespace

int zero3_unit_of(const std::string& name, int64_t layers) {
  if (name.rfind("model.embed_tokens.", 0) == 0) return 0;
  const std::string pre = "model.layers.";
  if (name.rfind(pre, 0) == 0) {
    const size_t dot = name.find('.', pre.size());
    return 1 + std::stoi(name.substr(pre.size(), dot - pre.size()));
  }
  return static_cast<int>(layers) + 1;
}

Zero3Params::Zero3Params(LlamaModel& model, Comm& comm, prof::Tracer* tracer, bool offload_params, torch::Device host,
                         bool grads_on_host, torch::Dtype grad_dtype, torch::Dtype reduce_dtype,
                         torch::Dtype gather_dtype)
    : model_(model),
      comm_(comm),
      tracer_(tracer),
      offload_(offload_params),
      grads_on_host_(grads_on_host),
      grad_dtype_(grad_dtype),
      reduce_dtype_(reduce_dtype),
      gather_dtype_(gather_dtype),
      half_(gather_dtype != torch::kFloat32) {
  torch::NoGradGuard ng;
  auto& named = model.named_parameters();
  const int64_t L = model.config().num_hidden_layers;
  std::vector<int64_t> numel;
  std::vector<int> unit_of;
  for (auto& [name, p] : named) {
    numel.push_back(p.numel());
    unit_of.push_back(zero3_unit_of(name, L));
  }
  layout_ = Zero3Layout(numel, unit_of, comm.world_size(), comm.rank());
  if (static_cast<int64_t>(layout_.units.size()) != L + 2)
    throw std::logic_error("ZeRO-3: " + std::to_string(layout_.units.size()) + " gather units for " +
                           std::to_string(L) + " layers (want embedding, layers, head)");
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(named.front().second.device());
  const bool cuda = f32.device().is_cuda();
  if (offload_) {
    mem::HostScope in_host;  // CPU memory, off the device
    shard_ =
        torch::zeros({layout_.shard}, torch::TensorOptions().dtype(torch::kFloat32).device(host).pinned_memory(cuda));
  } else {
    shard_ = torch::zeros({layout_.shard}, f32);  // (S)
  }
  if (grads_on_host_) {
    mem::HostScope in_host;
    gshard_ = torch::zeros({layout_.shard},
                           torch::TensorOptions().dtype(torch::kFloat32).device(host).pinned_memory(cuda));  // (S)
  } else {
    gshard_ = torch::zeros({layout_.shard}, f32);  // (S) on the device
  }
  const int64_t W = layout_.world, r = layout_.rank;
  units_.resize(layout_.units.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const Zero3Unit& U = layout_.units[u];
    Unit& st = units_[u];
    st.layer = u >= 1 && static_cast<int64_t>(u) <= L ? static_cast<int32_t>(u - 1) : -1;
    st.full = torch::zeros({W * U.shard}, f32);  // (W*S_u), padding zero
    int64_t off = 0;
    for (size_t i = U.first_param; i < U.end_param; ++i) {
      at::Tensor& p = named[i].second;
      const int64_t n = p.numel();
      st.full.narrow(0, off, n).copy_(p.reshape({-1}));
      // A view of the unit's storage with a version counter of its own: the gathers write the
      // buffer between a forward and its backward, which must not read as an in-place change
      // of a tensor autograd saved.
      at::Tensor v = st.full.narrow(0, off, n).view(p.sizes()).detach();
      v.unsafeGetTensorImpl()->set_version_counter(c10::VariableVersion(0));
      v.set_requires_grad(true);
      p = v;
      where_[p.unsafeGetTensorImpl()] = {u, i - U.first_param};
      off += n;
    }
    if (half_) {  // the bf16 gathers' buffer and each parameter's view of it
      st.half = torch::empty({W * U.shard}, f32.dtype(gather_dtype_));  // (W*S_u)
      int64_t o = 0;
      for (size_t i = U.first_param; i < U.end_param; ++i) {
        st.half_views.push_back(st.half.narrow(0, o, named[i].second.numel()).view(named[i].second.sizes()));
        o += named[i].second.numel();
      }
      free_storage(st.half);
    }
    shard_.narrow(0, U.shard_offset, U.shard).copy_(st.full.narrow(0, r * U.shard, U.shard));
    free_storage(st.full);
  }
  uses_.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) uses_[u] = {u};
  if (model.config().tie_word_embeddings) uses_.back().push_back(0);  // lm_head = the embedding
  reduced_.assign(units_.size(), false);
  model.set_param_hooks(this);
}

Zero3Params::~Zero3Params() {
  if (model_.param_hooks() == this) model_.set_param_hooks(nullptr);
  // Gone with a collective still in flight (an exception mid-step, the run failing): its buffers
  // are left allocated rather than freed under the transfer; waiting could take the whole
  // timeout on a dead peer, and the process ends soon after.
  auto keep = [](const Pending& p, std::initializer_list<at::Tensor> ts) {
    if (!p.work.work || p.work.work->isCompleted()) return;
    for (const auto& t : ts) (void)new at::Tensor(t);  // NOLINT: leaked on purpose
    if (p.source.defined()) (void)new at::Tensor(p.source);
  };
  for (auto& st : units_)
    if (st.gather) keep(*st.gather, {st.full});
  if (reduce_) keep(reduce_->p, {reduce_->grad, reduce_->sum});
}

std::vector<int64_t> Zero3Params::param_numel() const {
  std::vector<int64_t> v;
  for (const auto& [name, p] : model_.named_parameters()) v.push_back(p.numel());
  return v;
}

prof::RangeInfo Zero3Params::info_for(size_t u, bool gather, bool prefetch) const {
  prof::RangeInfo r;
  r.phase = Phase::GradAllReduce;
  r.dir = gather ? Direction::None : Direction::Backward;
  r.layer = units_[u].layer;
  r.chunk = gather ? (prefetch ? 1 : 0) : -1;
  // the wire dtype: bf16 gathers in bf16 training (gather_all's fp32 ones are not traced apart)
  const int64_t elem = c10::elementSize(gather ? gather_dtype_ : reduce_dtype_);
  r.bytes_sent = r.bytes_recv = (layout_.world - 1) * layout_.units[u].shard * elem;  // ring volume
  return r;
}

// Gathers on the "zero gather" row, reduce-scatters on "zero reduce-scatter" (their own rows:
// a prefetched gather runs beside the layer computing and beside the other kind).
static int32_t lane_of(const prof::RangeInfo& r) {
  return r.dir == Direction::None ? prof::Tracer::kZeroGatherLane : prof::Tracer::kZeroReduceLane;
}

void Zero3Params::record(Pending& p) {
  if (!tracer_ || !tracer_->active()) return;
  if (p.work.span) {  // a GPU rank: the device's times, at the end of the step
    auto span = p.work.span;
    tracer_->record_range_later(
        p.info, [span](int64_t* s, int64_t* e) { return span->times(s, e); }, lane_of(p.info));
    return;
  }
  // From when the world group's queue reached it (Gloo runs one collective at a time, in
  // order) to its completion.
  int64_t start = p.work.issued_ns;
  if (p.prev_done) start = std::max(start, p.prev_done->load());
  const int64_t done = p.work.done_ns && p.work.done_ns->load() > 0 ? p.work.done_ns->load() : prof::Tracer::now_ns();
  tracer_->record_range(p.info, start, std::max(start, done), lane_of(p.info));
}

void Zero3Params::issue_gather(size_t u, bool prefetch, bool fp32) {
  Unit& st = units_[u];
  const Zero3Unit& U = layout_.units[u];
  mem::Label unit_label(prefetch ? "gathered unit, prefetched" : "gathered unit",
                        st.layer >= 0 ? st.layer : mem::kNoLayer);
  st.in_half = half_ && !fp32;
  at::Tensor& buf = st.in_half ? st.half : st.full;
  {
    // Weights, wherever the gather is issued: in the forward the caller's scope is the layer's
    // activations (or the head's logits), in the backward none.
    mem::Scope weights(prof::MemCategory::Parameters);
    alloc_storage(buf);
  }
  account(buf.numel() * buf.element_size());
  size_t from = u;
  if (prefetch && fault_ == Zero3Fault::PrefetchWrongUnit && u + 1 < units_.size() &&
      layout_.units[u + 1].shard == U.shard)
    from = u + 1;  // test fault: the shards of the unit after it
  at::Tensor src = shard_.narrow(0, layout_.units[from].shard_offset, U.shard);  // (S_u)
  Pending p;
  if (src.device() != buf.device()) {  // offload_params on a GPU: the piece goes up first
    mem::Scope piece(prof::MemCategory::Communication);
    src = src.to(buf.device(), /*non_blocking=*/true);
    p.source = src;
  }
  if (st.in_half) {  // bf16: the piece is cast before it goes (alive until sent)
    torch::NoGradGuard ng;
    mem::Scope piece(prof::MemCategory::Communication);
    src = src.to(gather_dtype_);
    p.source = src;
  }
  p.info = info_for(u, true, prefetch);
  p.prev_done = last_issued_done_;
  {
    prof::ScopedCorrelation corr(tracer_, p.info);  // GPU: its kernels carry the range
    p.work = comm_.all_gather_async(buf, src);
  }
  p.info.pg = p.work.pg;
  p.info.seq = p.work.seq;
  last_issued_done_ = p.work.done_ns;
  st.gather = std::move(p);
  st.gathered = true;
  ++(prefetch ? prefetches_ : on_demand_);
}

void Zero3Params::ensure_gathered(size_t u) {
  Unit& st = units_[u];
  if (st.gathered && st.in_half != half_) release(u);  // gathered in fp32 by gather_all: again in bf16
  if (!st.gathered) issue_gather(u, /*prefetch=*/false);
  if (st.gather) {
    st.gather->work.wait();
    record(*st.gather);
    st.gather.reset();
  }
}

void Zero3Params::release(size_t u) {
  Unit& st = units_[u];
  if (st.gather) {  // never free a buffer a transfer still writes into
    st.gather->work.wait();
    record(*st.gather);
    st.gather.reset();
  }
  if (st.gathered) {
    at::Tensor& buf = st.in_half ? st.half : st.full;
    account(-buf.numel() * buf.element_size());
    free_storage(buf);
  }
  st.gathered = false;
  st.in_half = false;
}

void Zero3Params::prefetch_use(int use) {
  if (use < 0 || use >= static_cast<int>(uses_.size())) return;
  for (size_t u : uses_[static_cast<size_t>(use)])
    if (!units_[u].gathered) issue_gather(u, /*prefetch=*/true);
}

void Zero3Params::bind_grads(size_t u) {
  Unit& st = units_[u];
  if (st.grad.defined()) return;
  const Zero3Unit& U = layout_.units[u];
  mem::Label unit_label("unit's gradient buffer", st.layer >= 0 ? st.layer : mem::kNoLayer);
  mem::Scope grads(prof::MemCategory::Gradients);
  // (W*S_u) on the device, grad_dtype_ (the fp32 gradient of each use, cast by its .to's
  // backward, is added into the bf16 view in place: one rounding per use)
  st.grad = torch::zeros({layout_.world * U.shard}, gshard_.options().device(st.full.device()).dtype(grad_dtype_));
  account(st.grad.nbytes());
  auto& named = model_.named_parameters();
  int64_t off = 0;
  for (size_t i = U.first_param; i < U.end_param; ++i) {
    at::Tensor& p = named[i].second;
    p.mutable_grad() = st.grad.narrow(0, off, p.numel()).view(p.sizes());  // autograd adds into it in place
    off += p.numel();
  }
}

void Zero3Params::finish_reduce() {
  if (!reduce_) return;
  reduce_->p.work.wait();  // Gloo: the sum of what arrived, in rank order
  record(reduce_->p);
  const Zero3Unit& U = layout_.units[reduce_->unit];
  torch::NoGradGuard ng;
  // micro-batches add up; with the shard in CPU memory the (S_u) sums go down first
  gshard_.narrow(0, U.shard_offset, U.shard).add_(reduce_->sum.to(gshard_.device()));
  account(-static_cast<int64_t>(reduce_->grad.nbytes() + reduce_->sum.nbytes()));
  reduce_.reset();
}

void Zero3Params::reduce_scatter(size_t u) {
  finish_reduce();  // one in flight at a time: the one before is summed and its buffers freed
  Unit& st = units_[u];
  bind_grads(u);  // a unit no gradient reached still takes part, with zeros
  const Zero3Unit& U = layout_.units[u];
  auto& named = model_.named_parameters();
  // The parameters let go of the buffer: a gradient arriving later makes a .grad of its own,
  // which finish_backward reports.
  for (size_t i = U.first_param; i < U.end_param; ++i) named[i].second.mutable_grad() = at::Tensor();
  reduced_[u] = true;
  if (fault_ == Zero3Fault::SkipReduceScatter && st.layer == 0) {  // test fault: dropped
    account(-static_cast<int64_t>(st.grad.nbytes()));
    st.grad = at::Tensor();
    return;
  }
  PendingReduce pr;
  pr.unit = u;
  if (st.grad.scalar_type() != reduce_dtype_) {  // bf16 gradients, an fp32 wire: cast, then the bf16 buffer goes
    mem::Label cast_label("unit's gradient buffer, cast for the wire", st.layer >= 0 ? st.layer : mem::kNoLayer);
    torch::NoGradGuard ng;
    pr.grad = st.grad.to(reduce_dtype_);
    account(pr.grad.nbytes());
    account(-static_cast<int64_t>(st.grad.nbytes()));
  } else {
    pr.grad = st.grad;
  }
  st.grad = at::Tensor();
  mem::Label unit_label("reduce-scatter result", st.layer >= 0 ? st.layer : mem::kNoLayer);
  {
    mem::Scope grads(prof::MemCategory::Gradients);
    pr.sum = torch::empty({U.shard}, pr.grad.options());  // (S_u), the wire dtype
  }
  account(pr.sum.nbytes());
  pr.p.info = info_for(u, false, false);
  pr.p.prev_done = last_issued_done_;
  {
    prof::ScopedCorrelation corr(tracer_, pr.p.info);
    pr.p.work = comm_.reduce_scatter_sum_async(pr.sum, pr.grad);
  }
  pr.p.info.pg = pr.p.work.pg;
  pr.p.info.seq = pr.p.work.seq;
  last_issued_done_ = pr.p.work.done_ns;
  reduce_ = std::move(pr);
}

void Zero3Params::begin_step() {
  torch::NoGradGuard ng;
  gshard_.zero_();
}

void Zero3Params::forward_begin(int use) {
  const auto& mine = uses_.at(static_cast<size_t>(use));
  if (use == 0)  // a new pass: what an unfinished one left gathered goes (a forward without backward)
    for (size_t u = 0; u < units_.size(); ++u)
      if (!contains(mine, u)) release(u);
  for (size_t u : mine) ensure_gathered(u);
  prefetch_use(use + 1);  // while this unit computes
}

void Zero3Params::forward_end(int use) {
  const size_t last = uses_.size() - 1;
  // The head's backward comes right after its forward: it keeps its weights.
  if (static_cast<size_t>(use) == last && torch::GradMode::is_enabled()) return;
  const size_t next = static_cast<size_t>(use) + 1;
  for (size_t u : uses_.at(static_cast<size_t>(use)))
    if (next >= uses_.size() || !contains(uses_[next], u)) release(u);
}

void Zero3Params::backward_begin(int use) {
  for (size_t u : uses_.at(static_cast<size_t>(use))) {
    if (use != 0) ensure_gathered(u);  // the embedding's backward needs only the ids
    bind_grads(u);
  }
  if (use - 1 >= 1) prefetch_use(use - 1);  // while this unit's backward runs
}

void Zero3Params::backward_end(int use) {
  if (use <= 0) return;
  reduce_scatter(static_cast<size_t>(use));
  for (size_t u : uses_.at(static_cast<size_t>(use))) release(u);
}

void Zero3Params::finish_backward() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (!reduced_[u]) reduce_scatter(u);  // the embedding (its backward has no end boundary)
  finish_reduce();
  for (size_t u = 0; u < units_.size(); ++u) release(u);
  reduced_.assign(units_.size(), false);
  for (auto& [name, p] : model_.named_parameters())
    if (p.grad().defined())
      throw std::logic_error("ZeRO-3: a gradient of " + name +
                             " arrived after its unit's reduce-scatter (a unit boundary out of order)");
}

at::Tensor Zero3Params::compute_weight(const at::Tensor& p) {
  if (!half_) return {};
  const auto it = where_.find(p.unsafeGetTensorImpl());
  if (it == where_.end()) return {};
  const Unit& st = units_[it->second.first];
  if (!st.gathered || !st.in_half) return {};  // gather_all's fp32 weights, or released: the model decides
  return GatheredWeight::apply(p, st.half_views[it->second.second]);
}

void Zero3Params::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].gathered && units_[u].in_half) release(u);  // the full fp32 weights, not the bf16 ones
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u].gathered) issue_gather(u, /*prefetch=*/false, /*fp32=*/true);
  for (auto& st : units_)
    if (st.gather) {  // (not ensure_gathered: that would gather in bf16 again)
      st.gather->work.wait();
      record(*st.gather);
      st.gather.reset();
    }
}

void Zero3Params::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void Zero3Params::copy_full_into_shard() {
  torch::NoGradGuard ng;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Zero3Unit& U = layout_.units[u];
    if (!units_[u].gathered || units_[u].in_half)
      throw std::logic_error("ZeRO-3: copy_full_into_shard needs every unit gathered in fp32 (gather_all)");
    shard_.narrow(0, U.shard_offset, U.shard).copy_(units_[u].full.narrow(0, layout_.rank * U.shard, U.shard));
  }
}

}  // namespace ulysses
