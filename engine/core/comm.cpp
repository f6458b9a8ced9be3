// c10d process groups: a rendezvous store (rendezvous_store.hpp), a world group, an SP group of
// consecutive ranks and a ring group, each through a PrefixStore, on one CommBackend.
#include "comm.hpp"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "rendezvous_store.hpp"
#include "run_config.hpp"
#include "store_probe.hpp"
#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses {

Comm::~Comm() = default;

void Comm::shutdown() {
  for (auto* pg : {&ring_, &sp_, &world_}) {
    if (*pg) compat::shutdown_backend(*pg);
    pg->reset();
  }
}

void Comm::abort() {
  for (auto* pg : {&ring_, &sp_, &world_}) {
    if (!*pg) continue;
    compat::abort_backend(*pg);
    (void)pg->release();  // leaked on purpose: no destructor that could wait on a dead peer
  }
}

void Comm::Work::wait() {
  if (work) {
    work->wait();
    if (done_ns && done_ns->load() == 0) done_ns->store(prof::Tracer::now_ns());
  }
  if (after) {
    auto f = std::move(after);
    after = nullptr;
    f();
  }
}

namespace {
// A rank whose store connection closed while it joined (compat::store_connection_closed): rank
// 0's store went away under it. Said in our words, with libtorch's first line for reference.
std::string store_closed_message(const DistEnv& env, const std::string& what) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  return "rank " + std::to_string(env.rank) + " lost the c10d store on " + where +
         " while joining the run: the store closed the connection (" + what.substr(0, what.find('\n')) +
         "). The store's rank 0 is gone: another run's rank 0 on this port that finished or was refused as this "
         "rank connected (two runs sharing MASTER_PORT " +
         std::to_string(env.master_port) +
         "), or this run's rank 0 stopped (see its log). Give each run its own MASTER_PORT and start the ranks "
         "again";
}

DeviceDecision decision_for_backend(const DistEnv& env, const std::string& backend) {
  const std::string device = backend == "gloo" ? "cpu" : backend == "nccl" ? "cuda" : "auto";
  std::vector<ConfigIssue> issues;
  DeviceDecision d = decide_device(device, backend, DeviceFacts::detect(env.local_rank, env.local_world_size), &issues);
  throw_if_invalid(issues);
  return d;
}
}  // namespace

Comm::Comm(const DistEnv& env, int sp_size, int dp_size, const std::string& backend, std::chrono::milliseconds timeout,
           int ring_size)
    : Comm(env, sp_size, dp_size, decision_for_backend(env, backend), timeout, ring_size) {}

Comm::Comm(const DistEnv& env, int sp_size, int dp_size, const DeviceDecision& decision,
           std::chrono::milliseconds timeout, int ring_size)
    : env_(env), sp_size_(sp_size), dp_size_(dp_size), ring_size_(ring_size), timeout_(timeout) {
  if (ring_size != 1 && env.world_size != sp_size * ring_size * dp_size)
    throw ConfigError("WORLD_SIZE (" + std::to_string(env.world_size) +
                      ") must equal parallel.sp_size x parallel.ring_size x parallel.dp_size (" +
                      std::to_string(sp_size) + " x " + std::to_string(ring_size) + " x " + std::to_string(dp_size) +
                      " = " + std::to_string(sp_size * ring_size * dp_size) + ")");
  if (env.world_size != sp_size * ring_size * dp_size)
    throw ConfigError("WORLD_SIZE (" + std::to_string(env.world_size) +
                      ") must equal parallel.sp_size x parallel.dp_size (" + std::to_string(sp_size) + " x " +
                      std::to_string(dp_size) + " = " + std::to_string(sp_size * dp_size) + ")");
  backend_ = make_comm_backend(decision.backend, env);
  device_ = decision.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(decision.device_index))
                          : torch::Device(torch::kCPU);
  if (env.world_size == 1 && !env.single_rank_groups) return;  // no collectives needed
  try {
    join(timeout);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    const char* dir = std::getenv(launch::kRendezvousDirEnv);
    if ((dir && *dir) || !compat::store_connection_closed(e)) throw;
    throw std::runtime_error(store_closed_message(env, e.what()));
  }
}

void Comm::join(std::chrono::milliseconds timeout) {
  const DistEnv& env = env_;
  // A FileStore in the run folder for ulysses-run's local ranks, a probed TCPStore otherwise.
  store_ = make_rendezvous_store(env, timeout);
  // Each RANK is claimed once: two workers given the same RANK (a launcher script's mistake)
  // got Gloo's message, which names neither, after the timeout. (Two rank 0s cannot both hold
  // the store's port: the second's error says so.)
  if (store_->add("ulysses/rank-claim/" + std::to_string(env.rank), 1) > 1)
    throw ConfigError("RANK " + std::to_string(env.rank) + " is taken by another worker of this run (MASTER_ADDR " +
                      env.master_addr + ":" + std::to_string(env.master_port) +
                      "): every worker needs its own RANK, 0 to WORLD_SIZE-1 (" + std::to_string(env.world_size) +
                      " workers)");
  auto make = [&](const std::string& prefix, int rank, int size) {
    return backend_->make_group(compat::prefix_store(prefix, store_), rank, size, timeout);
  };
  world_ = make("world", env.rank, env.world_size);
  timer_ = backend_->make_device_timer(device_);
  const int group = env.rank / sp_size_;
  if (sp_size_ > 1) sp_ = make("sp" + std::to_string(group), env.rank % sp_size_, sp_size_);
  // Ring group j = dp_rank x sp + sp_rank: ranks dp_rank x sp x ring + i x sp + sp_rank, i < ring.
  if (ring_size_ > 1) {
    const int ring_group = dp_rank() * sp_size_ + sp_rank();
    ring_ = make("ring" + std::to_string(ring_group), ring_rank(), ring_size_);
  }
}

Comm Comm::shape_only(int sp_rank, int sp_size, int dp_size, int ring_size) {
  if (sp_size < 1 || dp_size < 1 || ring_size < 1 || sp_rank < 0 || sp_rank >= sp_size)
    throw ConfigError("shape-only Comm: sp_rank " + std::to_string(sp_rank) + " out of sp_size " +
                      std::to_string(sp_size) + " x ring_size " + std::to_string(ring_size) + " x dp_size " +
                      std::to_string(dp_size));
  Comm c;
  c.env_.rank = sp_rank;
  c.env_.world_size = sp_size * ring_size * dp_size;
  c.sp_size_ = sp_size;
  c.ring_size_ = ring_size;
  c.dp_size_ = dp_size;
  c.backend_ = make_shape_only_comm_backend();
  c.device_ = torch::kMeta;  // a dry run's tensors (a Trainer over it builds on meta)
  return c;
}

void Comm::set_fault_delay(int slow_rank, double delay_ms) {
  fault_delay_us_ = slow_rank == env_.rank && delay_ms > 0 ? static_cast<int64_t>(delay_ms * 1000.0) : 0;
}

void Comm::fault_delay() const {
  if (fault_delay_us_ <= 0) return;
  prof::RangeInfo ri;
  ri.phase = prof::Phase::FaultDelay;
  prof::ScopedRange range(tracer_, ri);  // the straggler's sleep, on the calling thread's row
  std::this_thread::sleep_for(std::chrono::microseconds(fault_delay_us_));
}

namespace {
// A world collective that its caller does not trace (set_tracer): phase collective, the bytes
// of a ring all-reduce of `t` (2 (W-1)/W of it each way; 0 for a barrier).
prof::RangeInfo untraced_collective(const at::Tensor* t, int world) {
  prof::RangeInfo ri;
  ri.phase = prof::Phase::Collective;
  if (t && world > 1)
    ri.bytes_sent = ri.bytes_recv = t->numel() * static_cast<int64_t>(t->element_size()) * 2 * (world - 1) / world;
  return ri;
}
}  // namespace

namespace {
// prof::ClockStore over the c10d store (get waits for the key, with the store's timeout).
class C10dClockStore final : public prof::ClockStore {
 public:
  explicit C10dClockStore(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::string& value) override {
    s_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override {
    const std::vector<uint8_t> v = s_->get(key);
    return std::string(v.begin(), v.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};
}  // namespace

prof::ClockOffset Comm::sync_clock(const std::string& tag, int rounds) {
  if (!store_ || env_.world_size < 2) {
    prof::ClockOffset c;
    c.measured_at_ns = prof::Tracer::now_ns();
    return c;
  }
  C10dClockStore s(store_);
  return prof::sync_clock(s, env_.rank, env_.world_size, rounds, tag);
}

namespace {
// A Work's completion time from its future (host clock), or at wait() when it has none.
void watch_done(Comm::Work& w) {
  auto done = w.done_ns;
  auto fut = w.work ? w.work->getFuture() : c10::intrusive_ptr<c10::ivalue::Future>();
  if (fut) fut->addCallback([done](c10::ivalue::Future&) { done->store(prof::Tracer::now_ns()); });
}

void check_shard_pair(const at::Tensor& shard, const at::Tensor& full, int world, const char* op) {
  if (shard.dim() != 1 || full.dim() != 1 || !shard.is_contiguous() || !full.is_contiguous() ||
      full.numel() != shard.numel() * world || shard.scalar_type() != full.scalar_type())
    throw std::invalid_argument(
        std::string("Comm::") + op + ": needs contiguous 1-D tensors of one dtype, full = " + std::to_string(world) +
        " x shard elements (got " + std::to_string(full.numel()) + " and " + std::to_string(shard.numel()) + ")");
}
}  // namespace

Comm::Work Comm::begin_collective(int32_t pg, int64_t& seq, bool device_span) {
  fault_delay();
  Work w;
  w.done_ns = std::make_shared<std::atomic<int64_t>>(0);
  w.pg = pg;
  w.seq = seq++;
  w.issued_ns = prof::Tracer::now_ns();
  if (timer_ && device_span) w.span = timer_->start();
  return w;
}

Comm::Work Comm::issued(Work w, IssuedCollective c) {
  w.work = std::move(c.work);
  w.after = std::move(c.after);
  if (w.span) timer_->end(*w.span, *w.work);
  watch_done(w);
  return w;
}

Comm::Work Comm::without_group(at::Tensor& dst, const at::Tensor& src) const {
  Work w;
  w.done_ns = std::make_shared<std::atomic<int64_t>>(0);
  w.issued_ns = prof::Tracer::now_ns();
  backend_->copy_local(dst, src);
  w.done_ns->store(prof::Tracer::now_ns());
  return w;
}

void Comm::world_op(prof::Tracer* tracer, const prof::RangeInfo* info, const std::function<IssuedCollective()>& issue) {
  prof::RangeInfo ri = info ? *info : prof::RangeInfo{};
  const Work w = begin_collective(kWorldPg, world_seq_, info && tracer && tracer->active());
  ri.pg = w.pg;
  ri.seq = w.seq;
  if (w.span) {
    IssuedCollective c = issue();
    timer_->end(*w.span, *c.work);
    c.work->wait();
    if (c.after) c.after();
    tracer->record_range_later(ri, [span = w.span](int64_t* s, int64_t* e) { return span->times(s, e); });
    return;
  }
  prof::ScopedRange range(info ? tracer : nullptr, ri);
  IssuedCollective c = issue();
  c.work->wait();
  if (c.after) c.after();
}

Comm::Work Comm::all_to_all_async(at::Tensor& out, at::Tensor& in) {
  check_device(in, "all_to_all");
  check_device(out, "all_to_all");
  if (!sp_) return without_group(out, in);  // sp 1; shapes only: out already has the received shape
  // The prologue (fault delay, sequence number, issue time, device mark) before the issue: as one
  // call's two arguments their order would be unspecified (GCC issued first, so a straggler's
  // sleep fell after its send and was timed twice by the others).
  Work w = begin_collective(sp_pg(), sp_seq_, true);
  return issued(std::move(w), backend_->all_to_all(*sp_, out, in));
}

void Comm::all_reduce_sum(at::Tensor& t, prof::Tracer* tracer, const prof::RangeInfo* info) {
  check_device(t, "all_reduce_sum");
  const prof::RangeInfo own = untraced_collective(&t, env_.world_size);
  // A shape-only Comm (the step simulator's dry run) records the collective where the real run
  // traces it and waits in it; nothing moves.
  const bool traced_here = world_ || (is_shape_only() && env_.world_size > 1);
  if (!info && !tracer && tracer_ && traced_here) {  // the caller traces nothing: a collective range
    tracer = tracer_;
    info = &own;
  }
  if (!world_) {
    prof::ScopedRange range(info ? tracer : nullptr, info ? *info : prof::RangeInfo{});
    return;
  }
  std::vector<at::Tensor> v{t};
  world_op(tracer, info, [&] { return IssuedCollective{world_->allreduce(v), nullptr}; });
}

void Comm::reduce_scatter_sum(at::Tensor& shard, at::Tensor& full, prof::Tracer* tracer, const prof::RangeInfo* info) {
  check_device(shard, "reduce_scatter_sum");
  check_device(full, "reduce_scatter_sum");
  check_shard_pair(shard, full, env_.world_size, "reduce_scatter_sum");
  if (!world_) {
    prof::ScopedRange range(info ? tracer : nullptr, info ? *info : prof::RangeInfo{});
    backend_->copy_local(shard, full);
    return;
  }
  world_op(tracer, info, [&] { return backend_->reduce_scatter_sum(*world_, shard, full, env_.world_size); });
}

void Comm::all_gather(at::Tensor& full, at::Tensor& shard, prof::Tracer* tracer, const prof::RangeInfo* info) {
  check_device(shard, "all_gather");
  check_device(full, "all_gather");
  check_shard_pair(shard, full, env_.world_size, "all_gather");
  if (!world_) {
    prof::ScopedRange range(info ? tracer : nullptr, info ? *info : prof::RangeInfo{});
    backend_->copy_local(full, shard);
    return;
  }
  world_op(tracer, info, [&] { return backend_->all_gather(*world_, full, shard, env_.world_size); });
}

Comm::Work Comm::all_gather_async(at::Tensor& full, at::Tensor& shard) {
  check_device(shard, "all_gather_async");
  check_device(full, "all_gather_async");
  check_shard_pair(shard, full, env_.world_size, "all_gather_async");
  if (!world_) return without_group(full, shard);         // one rank copies; shapes only: nothing moves
  Work w = begin_collective(kWorldPg, world_seq_, true);  // before the issue (all_to_all_async)
  return issued(std::move(w), backend_->all_gather(*world_, full, shard, env_.world_size));
}

Comm::Work Comm::reduce_scatter_sum_async(at::Tensor& shard, at::Tensor& full) {
  check_device(shard, "reduce_scatter_sum_async");
  check_device(full, "reduce_scatter_sum_async");
  check_shard_pair(shard, full, env_.world_size, "reduce_scatter_sum_async");
  if (!world_) return without_group(shard, full);
  Work w = begin_collective(kWorldPg, world_seq_, true);  // before the issue (all_to_all_async)
  return issued(std::move(w), backend_->reduce_scatter_sum(*world_, shard, full, env_.world_size));
}

void Comm::all_reduce_max(at::Tensor& t) {
  check_device(t, "all_reduce_max");
  if (!world_) {
    if (is_shape_only() && tracer_ && env_.world_size > 1) {  // the dry run records where the real run waits
      const prof::RangeInfo ri = untraced_collective(&t, env_.world_size);
      prof::ScopedRange range(tracer_, ri);
    }
    return;
  }
  const prof::RangeInfo ri = untraced_collective(&t, env_.world_size);
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  world_op(tracer_, tracer_ ? &ri : nullptr, [&] { return IssuedCollective{world_->allreduce(v, o), nullptr}; });
}

void Comm::barrier() {
  if (!world_) return;
  const prof::RangeInfo ri = untraced_collective(nullptr, env_.world_size);
  world_op(tracer_, tracer_ ? &ri : nullptr, [&] { return IssuedCollective{world_->barrier(), nullptr}; });
}

}  // namespace ulysses
