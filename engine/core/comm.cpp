// c10d process groups: a rendezvous store (rendezvous.hpp), a world group and
// an SP group of consecutive ranks created through a PrefixStore.
#include "comm.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cuda_event_timer.hpp"
#include "listen_address.hpp"
#include "store_probe.hpp"
#include "rendezvous.hpp"
#include "run_config.hpp"
#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/tracer.hpp"
#include "memory_categories.hpp"

namespace ulysses {

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  // Digits only: " 1" and "+1" were read as 1 (strtoll skips blanks and takes a sign).
  if (!std::isdigit(static_cast<unsigned char>(v[0])))
    throw ConfigError(std::string("environment variable ") + name + "='" + v +
                      "' is not an integer from 0 to 2147483647");
  const long long x = std::strtoll(v, &end, 10);
  // Within int: RANK=2147483648 ran as rank -2147483648, 4294967297 as rank 1.
  if (*end != '\0' || x < 0 || errno == ERANGE || x > INT32_MAX)
    throw ConfigError(std::string("environment variable ") + name + "='" + v +
                      "' is not an integer from 0 to 2147483647");
  return static_cast<int>(x);
}
}  // namespace

DistEnv DistEnv::from_environment() {
  DistEnv e;
  e.rank = env_int("RANK", 0);
  e.world_size = env_int("WORLD_SIZE", 1);
  // Several ranks need each to say which it is: a missing or empty RANK was read as rank 0, and
  // the worker waited out the timeout for the rank 0 already there.
  if (e.world_size > 1 && !(std::getenv("RANK") && *std::getenv("RANK")))
    throw ConfigError(
        "WORLD_SIZE is " + std::to_string(e.world_size) +
        " but RANK is not set: give each worker its rank (torchrun and Slurm set RANK; ulysses-run does it "
        "for you)");
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", 29500);
  e.single_rank_groups = env_int("ULYSSES_SINGLE_RANK_GROUPS", 0) != 0;
  if (e.world_size < 1) throw ConfigError("WORLD_SIZE must be at least 1");
  if (e.rank >= e.world_size)
    throw ConfigError("RANK (" + std::to_string(e.rank) + ") must be smaller than WORLD_SIZE (" +
                      std::to_string(e.world_size) + ")");
  if (e.master_port <= 0 || e.master_port > 65535) throw ConfigError("MASTER_PORT must be a TCP port");
  // A name no resolver knows: said at once (c10d retried it once a second for timeout_s, a
  // warning each time). A resolver that is down for now (EAI_AGAIN) is left to c10d's retries.
  if (e.world_size > 1) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(e.master_addr.c_str(), nullptr, &hints, &res);
    if (res) ::freeaddrinfo(res);
    if (rc == EAI_NONAME)
      throw ConfigError("MASTER_ADDR '" + e.master_addr + "' is not a host name or address this machine can resolve");
  }
  return e;
}

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
  backend_ = decision.backend;
  if (backend_ != "gloo" && backend_ != "nccl")
    throw ConfigError("unknown backend '" + backend_ + "' (decide_device gives gloo or nccl)");
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
#if defined(ULYSSES_WITH_GLOO)
  // Gloo's listening sockets: loopback for ulysses-run's ranks and a loopback MASTER_ADDR, else
  // the interface that reaches MASTER_ADDR (said once per rank).
  std::string gloo_why;
  const std::string gloo_address = std::getenv(launch::kRendezvousDirEnv) && *std::getenv(launch::kRendezvousDirEnv)
                                       ? std::string("127.0.0.1")
                                       : gloo_listen_address(env.master_addr, &gloo_why);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (backend_ == "gloo" && !gloo_why.empty() && !(ifname && *ifname))
    std::fprintf(stderr, "rendezvous: rank %d: %s\n", env.rank, gloo_why.c_str());
#endif
  auto make = [&](const std::string& prefix, int rank, int size) -> c10::intrusive_ptr<compat::Backend> {
    auto s = compat::prefix_store(prefix, store_);
    if (backend_ == "gloo") {
#if defined(ULYSSES_WITH_GLOO)
      return compat::make_gloo(s, rank, size, timeout, gloo_address);
#else
      throw ConfigError("parallel.backend gloo is not available in this build (libtorch without Gloo headers)");
#endif
    }
    if (backend_ == "nccl") {
#if defined(ULYSSES_WITH_NCCL)
      return compat::make_nccl(s, rank, size, timeout);
#else
      throw ConfigError("parallel.backend nccl needs a build against a CUDA libtorch 2.x with NCCL");
#endif
    }
    throw ConfigError("unknown backend " + backend_);
  };
  world_ = make("world", env.rank, env.world_size);
#if defined(ULYSSES_WITH_NCCL)
  if (backend_ == "nccl") timer_ = std::make_shared<CudaEventTimer>(device_.index());
#endif
  const int group = env.rank / sp_size_;
  if (sp_size_ > 1) sp_ = make("sp" + std::to_string(group), env.rank % sp_size_, sp_size_);
  // Ring group j = dp_rank x sp + sp_rank: ranks dp_rank x sp x ring + i x sp + sp_rank, i < ring.
  if (ring_size_ > 1) {
    const int ring_group = dp_rank() * sp_size_ + sp_rank();
    ring_ = make("ring" + std::to_string(ring_group), ring_rank(), ring_size_);
  }
}

void Comm::check_device(const at::Tensor& t, const char* op) const {
  if (backend_ != "nccl" || t.device() == device_) return;
  throw std::invalid_argument(std::string("Comm::") + op + ": tensor on " + t.device().str() +
                              ", but NCCL communicates on " + device_.str() + " (move it there first)");
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
  c.backend_ = "shape-only";
  c.device_ = torch::kMeta;  // a dry run's tensors (a Trainer over it builds on meta)
  c.shape_only_ = true;
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

Comm::Work Comm::all_to_all_async(at::Tensor& out, at::Tensor& in) {
  check_device(in, "all_to_all");
  check_device(out, "all_to_all");
  Work w;
  w.done_ns = std::make_shared<std::atomic<int64_t>>(0);
  w.issued_ns = prof::Tracer::now_ns();
  if (shape_only_) {  // out already has the received shape; nothing moves
    w.done_ns->store(prof::Tracer::now_ns());
    return w;
  }
  if (sp_size_ == 1) {
    out.copy_(in);
    w.done_ns->store(prof::Tracer::now_ns());
    return w;
  }
  std::vector<int64_t> splits;  // empty = equal splits along dim 0
  fault_delay();
  w.pg = sp_pg();
  w.seq = sp_seq_++;
  w.issued_ns = prof::Tracer::now_ns();
  if (timer_) w.span = timer_->start();
  if (backend_ == "gloo" && in.scalar_type() == at::kBFloat16) {
    // Gloo (libtorch 1.13) has no bfloat16 all-to-all; an all-to-all only moves bytes, so
    // send the same 2-byte elements reinterpreted as float16.
    at::Tensor o = out.view(at::kHalf), i = in.view(at::kHalf);
    w.work = sp_->alltoall_base(o, i, splits, splits);
  } else {
    w.work = sp_->alltoall_base(out, in, splits, splits);
  }
  if (w.span) timer_->end(*w.span, *w.work);
  auto done = w.done_ns;
  auto fut = w.work->getFuture();
  if (fut) {
    fut->addCallback([done](c10::ivalue::Future&) { done->store(prof::Tracer::now_ns()); });
  }
  return w;
}

// A world collective's range. On a rank with a DeviceTimer (GPU) and an active tracer, the
// range is the device's: marks around the issued work, resolved at the end of the step
// (ProcessGroupNCCL's futures complete at enqueue, so host clocks would time the issue). Else
// the host's, from this rank's arrival (after the fault delay) to the work's completion.
// `issue` issues the collective and returns its work; `after` runs once it is done.
void Comm::traced_world_op(prof::Tracer* tracer, const prof::RangeInfo* info, const prof::RangeInfo& ri,
                           const std::function<c10::intrusive_ptr<c10d::Work>()>& issue,
                           const std::function<void()>& after) {
  if (timer_ && info && tracer && tracer->active()) {
    auto span = timer_->start();
    auto work = issue();
    timer_->end(*span, *work);
    work->wait();
    if (after) after();
    tracer->record_range_later(ri, [span](int64_t* s, int64_t* e) { return span->times(s, e); });
    return;
  }
  prof::ScopedRange range(info ? tracer : nullptr, ri);
  issue()->wait();
  if (after) after();
}

void Comm::all_reduce_sum(at::Tensor& t, prof::Tracer* tracer, const prof::RangeInfo* info) {
  check_device(t, "all_reduce_sum");
  const prof::RangeInfo own = untraced_collective(&t, env_.world_size);
  if (!info && !tracer && tracer_ && world_) {  // the caller traces nothing: a collective range
    tracer = tracer_;
    info = &own;
  }
  prof::RangeInfo ri = info ? *info : prof::RangeInfo{};
  if (!world_) {
    prof::ScopedRange range(info ? tracer : nullptr, ri);
    return;
  }
  fault_delay();
  ri.pg = kWorldPg;
  ri.seq = world_seq_++;
  std::vector<at::Tensor> v{t};
  traced_world_op(
      tracer, info, ri, [&] { return world_->allreduce(v); }, nullptr);
}

namespace {
void check_shard_pair(const at::Tensor& shard, const at::Tensor& full, int world, const char* op) {
  if (shard.dim() != 1 || full.dim() != 1 || !shard.is_contiguous() || !full.is_contiguous() ||
      full.numel() != shard.numel() * world || shard.scalar_type() != full.scalar_type())
    throw std::invalid_argument(
        std::string("Comm::") + op + ": needs contiguous 1-D tensors of one dtype, full = " + std::to_string(world) +
        " x shard elements (got " + std::to_string(full.numel()) + " and " + std::to_string(shard.numel()) + ")");
}
}  // namespace

void Comm::reduce_scatter_sum(at::Tensor& shard, at::Tensor& full, prof::Tracer* tracer, const prof::RangeInfo* info) {
  check_device(shard, "reduce_scatter_sum");
  check_device(full, "reduce_scatter_sum");
  check_shard_pair(shard, full, env_.world_size, "reduce_scatter_sum");
  prof::RangeInfo ri = info ? *info : prof::RangeInfo{};
  if (world_) {
    fault_delay();
    ri.pg = kWorldPg;
    ri.seq = world_seq_++;
  }
  if (shape_only_ || !world_) {
    prof::ScopedRange range(info ? tracer : nullptr, ri);
    if (!shape_only_ && !shard.is_same(full)) shard.copy_(full);  // shapes only: nothing moves
    return;
  }
  if (backend_ == "nccl") {
    traced_world_op(
        tracer, info, ri, [&] { return world_->_reduce_scatter_base(shard, full); }, nullptr);
    return;
  }
  // Gloo: all-to-all of the W slices, then the sum of what arrived, in rank order.
  const int64_t W = env_.world_size, S = shard.numel();
  at::Tensor recv = mem::comm_buffer_like(full);  // (W*S): slice q = rank q's slice for this rank
  std::vector<int64_t> splits;
  traced_world_op(
      tracer, info, ri, [&] { return world_->alltoall_base(recv, full, splits, splits); },
      [&] {
        at::sum_out(shard, recv.view({W, S}), {0});
      });
}

void Comm::all_gather(at::Tensor& full, at::Tensor& shard, prof::Tracer* tracer, const prof::RangeInfo* info) {
  check_device(shard, "all_gather");
  check_device(full, "all_gather");
  check_shard_pair(shard, full, env_.world_size, "all_gather");
  prof::RangeInfo ri = info ? *info : prof::RangeInfo{};
  if (world_) {
    fault_delay();
    ri.pg = kWorldPg;
    ri.seq = world_seq_++;
  }
  const int64_t S = shard.numel();
  if (shape_only_ || !world_) {
    prof::ScopedRange range(info ? tracer : nullptr, ri);
    if (!shape_only_ && !shard.is_same(full)) full.copy_(shard);  // shapes only: nothing moves
    return;
  }
  // The input may be this rank's slice of `full` itself (the trainer's parameters): NCCL's
  // all-gather is in place when sendbuff = recvbuff + rank x count, and Gloo copies the input
  // into its own flat buffer before any output is written, so no copy is made here.
  at::Tensor in = shard;
  if (backend_ == "nccl") {
    traced_world_op(
        tracer, info, ri, [&] { return world_->_allgather_base(full, in); }, nullptr);
    return;
  }
  std::vector<std::vector<at::Tensor>> outs(1);
  for (int q = 0; q < env_.world_size; ++q) outs[0].push_back(full.narrow(0, q * S, S));
  std::vector<at::Tensor> ins{in};
  traced_world_op(
      tracer, info, ri, [&] { return world_->allgather(outs, ins); }, nullptr);
}

namespace {
// A Work's completion time from its future (host clock), or at wait() when it has none.
void watch_done(Comm::Work& w) {
  auto done = w.done_ns;
  auto fut = w.work ? w.work->getFuture() : c10::intrusive_ptr<c10::ivalue::Future>();
  if (fut) fut->addCallback([done](c10::ivalue::Future&) { done->store(prof::Tracer::now_ns()); });
}
}  // namespace

Comm::Work Comm::all_gather_async(at::Tensor& full, at::Tensor& shard) {
  check_device(shard, "all_gather_async");
  check_device(full, "all_gather_async");
  check_shard_pair(shard, full, env_.world_size, "all_gather_async");
  Work w;
  w.done_ns = std::make_shared<std::atomic<int64_t>>(0);
  w.issued_ns = prof::Tracer::now_ns();
  if (shape_only_ || !world_) {  // one rank copies; shapes only: nothing moves
    if (!shape_only_ && !shard.is_same(full)) full.copy_(shard);
    w.done_ns->store(prof::Tracer::now_ns());
    return w;
  }
  fault_delay();
  w.pg = kWorldPg;
  w.seq = world_seq_++;
  w.issued_ns = prof::Tracer::now_ns();
  const int64_t S = shard.numel();
  if (timer_) w.span = timer_->start();
  if (backend_ == "nccl") {
    w.work = world_->_allgather_base(full, shard);
  } else {
    // bf16 (ZeRO-3's gathers in bf16 training) moves as bytes, as in reduce_scatter_sum_async
    const bool bf16 = full.scalar_type() == at::kBFloat16;
    const at::Tensor wire = bf16 ? full.view(at::kByte) : full;
    const int64_t Sw = bf16 ? 2 * S : S;  // the slice in wire elements
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int q = 0; q < env_.world_size; ++q) outs[0].push_back(wire.narrow(0, q * Sw, Sw));
    std::vector<at::Tensor> ins{bf16 ? shard.view(at::kByte) : shard};
    w.work = world_->allgather(outs, ins);
  }
  if (w.span) timer_->end(*w.span, *w.work);
  watch_done(w);
  return w;
}

Comm::Work Comm::reduce_scatter_sum_async(at::Tensor& shard, at::Tensor& full) {
  check_device(shard, "reduce_scatter_sum_async");
  check_device(full, "reduce_scatter_sum_async");
  check_shard_pair(shard, full, env_.world_size, "reduce_scatter_sum_async");
  Work w;
  w.done_ns = std::make_shared<std::atomic<int64_t>>(0);
  w.issued_ns = prof::Tracer::now_ns();
  if (shape_only_ || !world_) {
    if (!shape_only_ && !shard.is_same(full)) shard.copy_(full);
    w.done_ns->store(prof::Tracer::now_ns());
    return w;
  }
  fault_delay();
  w.pg = kWorldPg;
  w.seq = world_seq_++;
  w.issued_ns = prof::Tracer::now_ns();
  if (timer_) w.span = timer_->start();
  if (backend_ == "nccl") {
    w.work = world_->_reduce_scatter_base(shard, full);
  } else {
    // Gloo: all-to-all of the W slices (rank r receives every rank's r-th), summed in rank
    // order by wait(): the bytes of a ring reduce-scatter, as reduce_scatter_sum.
    const int64_t W = env_.world_size, S = shard.numel();
    at::Tensor recv = mem::comm_buffer_like(full);  // (W*S)
    std::vector<int64_t> splits;
    // bf16 (train.grad_reduce_dtype) moves as bytes: the all-to-all only moves them, and Gloo
    // has no bf16 (nor int16) kernels in libtorch 1.13; the W equal slices stay W equal slices.
    const bool bf16 = full.scalar_type() == at::kBFloat16;
    at::Tensor recv_wire = bf16 ? recv.view(at::kByte) : recv, send_wire = bf16 ? full.view(at::kByte) : full;
    w.work = world_->alltoall_base(recv_wire, send_wire, splits, splits);
    at::Tensor out = shard;
    w.after = [recv, out, W, S]() mutable { at::sum_out(out, recv.view({W, S}), {0}); };
  }
  if (w.span) timer_->end(*w.span, *w.work);
  watch_done(w);
  return w;
}

void Comm::all_reduce_max(at::Tensor& t) {
  check_device(t, "all_reduce_max");
  if (!world_) return;
  fault_delay();
  prof::RangeInfo ri = untraced_collective(&t, env_.world_size);
  ri.pg = kWorldPg;
  ri.seq = world_seq_++;
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  traced_world_op(
      tracer_, tracer_ ? &ri : nullptr, ri, [&] { return world_->allreduce(v, o); }, nullptr);
}

void Comm::barrier() {
  if (!world_) return;
  fault_delay();
  prof::RangeInfo ri = untraced_collective(nullptr, env_.world_size);
  ri.pg = kWorldPg;
  ri.seq = world_seq_++;
  traced_world_op(
      tracer_, tracer_ ? &ri : nullptr, ri, [&] { return world_->barrier(); }, nullptr);
}

}  // namespace ulysses
