// Process groups for one rank: the world group (gradient all-reduce over all ranks), this
// rank's SP group (consecutive ranks) for the Ulysses all-to-alls and, with ring attention
// (parallel.ring_size > 1), its ring group for the K/V block exchange. Rank layout:
//   rank = dp_rank x (sp x ring) + ring_rank x sp + sp_rank
// so an SP group is sp consecutive ranks (as without a ring) and a ring group is the ring
// ranks of one (dp_rank, sp_rank), stride sp; all three groups are made in the constructor. Built on c10d
// (Gloo on CPU, NCCL on GPU; one CommBackend each, comm_backend.hpp); every collective carries
// parallel.timeout_s. The device and backend come from one DeviceDecision
// (engine/config/device_decision.hpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm_backend.hpp"
#include "comm_timing.hpp"
#include "device_decision.hpp"
#include "dist_env.hpp"
#include "torch_compat.hpp"

namespace ulysses::prof {
class Tracer;
struct RangeInfo;
struct ClockOffset;
}  // namespace ulysses::prof

namespace ulysses {

class Comm {
 public:
  // Collective handle: wait() blocks (with the group timeout), done_ns() is when the
  // transfer completed (host clock), or 0 when not known.
  // pg / seq: the collective's identity (process group id, see pg_id(), and the group's
  // sequence number, equal on every member rank; -1 when no group was involved);
  // issued_ns: when this rank handed it to the group (after any injected fault delay).
  struct Work {
    c10::intrusive_ptr<c10d::Work> work;
    std::shared_ptr<std::atomic<int64_t>> done_ns;
    int32_t pg = -1;
    int64_t seq = -1;
    int64_t issued_ns = 0;
    // GPU ranks (a device timer): the collective's start and end as the device ran them;
    // done_ns then says only when the host saw it enqueued.
    std::shared_ptr<DeviceSpan> span;
    // Runs once, on the waiting thread, after the transfer (Gloo's reduce-scatter: the local sum).
    std::function<void()> after;
    void wait();
  };

  // Device timing of collectives (comm_timing.hpp): a CUDA event timer on NCCL groups, a test's
  // fake, or none (host clocks: CPU ranks). Traced all-to-alls and all-reduces on a rank with
  // one are timed by its marks.
  void set_device_timer(std::shared_ptr<DeviceTimer> t) { timer_ = std::move(t); }
  DeviceTimer* device_timer() const { return timer_.get(); }
  std::shared_ptr<DeviceTimer> device_timer_ptr() const { return timer_; }

  // Process group ids in traces: 0 = the world group, 1 + g = SP group g (ranks
  // g*sp_size .. g*sp_size + sp_size - 1), then 1 + world/sp + j = ring group j
  // (j = dp_rank x sp + sp_rank).
  static constexpr int32_t kWorldPg = 0;
  int32_t sp_pg() const { return 1 + env_.rank / sp_size_; }
  int32_t ring_pg() const { return 1 + env_.world_size / sp_size_ + dp_rank() * sp_size_ + sp_rank(); }

  // Fault injection (faults.slow_rank / faults.delay_ms): when this rank is `slow_rank`,
  // sleep `delay_ms` before issuing each collective (all-to-all, all-reduce, barrier).
  void set_fault_delay(int slow_rank, double delay_ms);

  // The tracer of what this rank blocks in that no caller traces: all_reduce_sum without a
  // range of its own (the loss sum and token count, ZeRO's norm), all_reduce_max and barrier
  // (phase collective, with the world group's (pg, seq)), and the injected fault delay (phase
  // fault_delay, a range of its own). Null (the default): none of these is traced.
  void set_tracer(prof::Tracer* t) { tracer_ = t; }

  // This rank's trace clock (prof::Tracer::now_ns) against rank 0's, by ping-pong through
  // the c10d store (prof::sync_clock, `rounds` rounds, best round trip). Every rank calls it
  // with the same tag; rank 0 and a run without groups get a zero offset.
  prof::ClockOffset sync_clock(const std::string& tag, int rounds = 10);

  // Groups on the decided backend; device() is the decided device (where the model lives
  // and where tensors passed to collectives must be).
  // ring_size > 1: ring groups too (world = sp x ring x dp).
  Comm(const DistEnv& env, int sp_size, int dp_size, const DeviceDecision& decision, std::chrono::milliseconds timeout,
       int ring_size = 1);
  // Shorthand for tests: backend gloo = CPU; auto / nccl are decided with train.device auto /
  // cuda on this host (DeviceFacts::detect).
  Comm(const DistEnv& env, int sp_size, int dp_size, const std::string& backend, std::chrono::milliseconds timeout,
       int ring_size = 1);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&&) = default;  // shape_only() returns by value

  // Shape-only stand-in for one rank of an sp_size x ring_size x dp_size run (meta-device dry
  // runs, the memory planner): no process group; all_to_all leaves the pre-allocated output
  // as it is (shapes and allocations as in a real run, no data moved), all-reduces and
  // barrier do nothing; with ring_size > 1 the model passes its ring blocks through a
  // transport that moves nothing (make_shape_only_ring_transport). rank = sp_rank (ring and
  // DP rank 0); device() is meta.
  static Comm shape_only(int sp_rank, int sp_size, int dp_size, int ring_size = 1);
  bool is_shape_only() const { return !backend_->moves_data(); }

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int sp_rank() const { return env_.rank % sp_size_; }
  int sp_size() const { return sp_size_; }
  int dp_rank() const { return env_.rank / (sp_size_ * ring_size_); }
  int dp_size() const { return dp_size_; }
  int ring_rank() const { return (env_.rank / sp_size_) % ring_size_; }
  int ring_size() const { return ring_size_; }
  // The ring group (nullptr when ring_size is 1 or there are no groups) and the timeout every
  // wait on it takes (ring_attention.hpp's transport).
  const c10::intrusive_ptr<compat::Backend>& ring_group() const { return ring_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& backend_name() const { return backend_->name(); }
  const torch::Device& device() const { return device_; }
  bool has_groups() const { return static_cast<bool>(world_); }  // false: one rank, no c10d groups

  // Clean end after the last collective (NCCL destroys its communicators).
  void shutdown();
  // Failure path: aborts NCCL communicators and drops the groups without waiting on peers
  // (a Gloo group is leaked on purpose: its destructor would wait for queued work). The
  // process is expected to exit soon after. Idempotent; no collective works afterwards.
  void abort();

  // Equal-split all-to-all over the SP group along dim 0 of a contiguous tensor whose
  // dim 0 equals sp_size. Asynchronous: the result is valid after wait().
  Work all_to_all_async(at::Tensor& out, at::Tensor& in);
  void all_to_all(at::Tensor& out, at::Tensor& in) { all_to_all_async(out, in).wait(); }

  // Sum in place over all ranks (SP x DP). Every tensor given to a collective must be on
  // device() when the backend is NCCL (std::invalid_argument otherwise, also at one rank,
  // so a single-GPU run catches a host tensor that NCCL would reject).
  // With a tracer, the all-reduce is traced as a range with `info` plus its identity
  // (pg, seq), starting when this rank issues it (after any injected fault delay).
  void all_reduce_sum(at::Tensor& t, prof::Tracer* tracer = nullptr, const prof::RangeInfo* info = nullptr);
  void all_reduce_max(at::Tensor& t);
  void barrier();

  // ZeRO collectives over all ranks (SP x DP), traced like all_reduce_sum (with `info` and
  // the world group's (pg, seq)). `full` is a contiguous 1-D tensor of world_size() x S
  // elements, `shard` a contiguous 1-D tensor of S; rank r's shard is full[r*S, (r+1)*S).
  //   reduce_scatter_sum: shard = the sum over ranks of their full[r*S, (r+1)*S).
  //   all_gather:         full[q*S, (q+1)*S) = rank q's shard, for every q.
  // NCCL runs its own reduce-scatter and all-gather. Gloo (libtorch 1.13 and 2.x) has no
  // reduce-scatter: it is an equal-split all-to-all of `full` (rank r receives every rank's
  // r-th slice) and a local sum in rank order: (W-1) x S elements sent and received per rank,
  // the bytes of a ring reduce-scatter. Gloo's all-gather is its allgather (list outputs).
  void reduce_scatter_sum(at::Tensor& shard, at::Tensor& full, prof::Tracer* tracer = nullptr,
                          const prof::RangeInfo* info = nullptr);
  void all_gather(at::Tensor& full, at::Tensor& shard, prof::Tracer* tracer = nullptr,
                  const prof::RangeInfo* info = nullptr);
  // The same two, asynchronous (ZeRO stage 3's per-layer gathers and reduce-scatters,
  // engine/core/zero3.hpp): the result is valid after wait(), which takes the group timeout;
  // the caller traces the range from the Work (issued_ns, done_ns or span, pg, seq). `full`
  // and `shard` must stay alive until then (the Work holds Gloo's receive buffer itself).
  Work all_gather_async(at::Tensor& full, at::Tensor& shard);
  Work reduce_scatter_sum_async(at::Tensor& shard, at::Tensor& full);

 private:
  // The prologue of every collective on a group, once: the fault delay, then the group's
  // identity (pg, the group's next seq) and the issue time, and with `device_span` and a device
  // timer the device's start mark.
  Work begin_collective(int32_t pg, int64_t& seq, bool device_span);
  // An asynchronous collective as issued: its work, the device's end mark, the completion stamp.
  Work issued(Work w, IssuedCollective c);
  // A collective without a group (one rank; sp 1): dst = src as the backend copies, done now.
  Work without_group(at::Tensor& dst, const at::Tensor& src) const;
  // A blocking collective on the world group, traced as `info` (when given) with its (pg, seq):
  // on a rank with a DeviceTimer and an active tracer by the device's marks, resolved at the
  // end of the step (ProcessGroupNCCL's futures complete at enqueue, so host clocks would time
  // the issue); else by the host's clock, from this rank's arrival (after the fault delay) to
  // the work's completion and what the backend runs after it.
  void world_op(prof::Tracer* tracer, const prof::RangeInfo* info, const std::function<IssuedCollective()>& issue);
  // The constructor's rendezvous: the store, this rank's claim on RANK, the groups.
  void join(std::chrono::milliseconds timeout);
  DistEnv env_;
  int sp_size_ = 1, dp_size_ = 1, ring_size_ = 1;
  std::unique_ptr<CommBackend> backend_;
  torch::Device device_ = torch::kCPU;
  std::chrono::milliseconds timeout_;
  Comm() = default;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<compat::Backend> world_, sp_, ring_;
  int64_t world_seq_ = 0, sp_seq_ = 0;  // collectives issued so far on each group
  int64_t fault_delay_us_ = 0;          // > 0 on the slow rank only
  std::shared_ptr<DeviceTimer> timer_;
  prof::Tracer* tracer_ = nullptr;  // set_tracer
  void check_device(const at::Tensor& t, const char* op) const { backend_->check_device(t, device_, op); }
  void fault_delay() const;
};

}  // namespace ulysses
