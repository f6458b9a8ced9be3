// Host tracer: the Tracer the engine calls. Each thread records into its own buffer
// (registered once, found again through a thread_local cache), so push/pop take no lock:
// a push touches only the thread's stack, a pop appends to a single-producer chunk queue.
// Ranges are also NVTX push/pop ranges when built with NVTX.
// end_step (on the stepping thread) takes what every queue has published as (chunk, index
// range) segments, without copying a range, plus the memory samples, the GPU records and the
// step row, as one Batch; the writer thread writes each Batch in one SQLite transaction, so a
// killed process keeps every step whose batch committed. At most writer_queue_steps step
// batches are uncommitted at any time (end_step waits for room: back-pressure, no drops);
// writer_queue_steps = 0 writes the batch on the calling thread (same code, same rows).
// Chunks a batch fully consumed are freed by the writer after the batch is written.
// With a GPU activity source (CUPTI, or a test's fake), each range push and each
// push_correlation also pushes an external correlation id; the writer writes the kernels,
// copies and runtime calls of the profiled steps with the id -> (step, layer, phase, heads)
// table (ULYSSES_EXTERNAL_IDS) and CUPTI's correlation -> id records.
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#if defined(ULYSSES_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/gpu_activity.hpp"
#include "ulysses/profiler/trace_writer.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses::prof {

Tracer::~Tracer() = default;

namespace {
// ULYSSES_TEST_CLOCK_OFFSET="R:NS": NS when this process's RANK is R, else 0.
int64_t injected_clock_offset() {
  const char* v = std::getenv("ULYSSES_TEST_CLOCK_OFFSET");
  const char* rank = std::getenv("RANK");
  if (!v || !*v) return 0;
  long long r = -1, ns = 0;
  if (std::sscanf(v, "%lld:%lld", &r, &ns) != 2) return 0;
  return std::to_string(r) == (rank && *rank ? rank : "0") ? static_cast<int64_t>(ns) : 0;
}

// A step's peak table as the trace keeps it (kPeakTableRows): the largest groups, then one row
// for the rest, so the rows still add up to the peak.
std::vector<PeakTensor> peak_table(std::vector<PeakTensor> rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const PeakTensor& a, const PeakTensor& b) { return a.bytes > b.bytes; });
  if (rows.size() <= static_cast<size_t>(kPeakTableRows)) return rows;
  PeakTensor rest;
  rest.category = "several";
  const size_t keep = kPeakTableRows - 1;
  for (size_t i = keep; i < rows.size(); ++i) {
    rest.bytes += rows[i].bytes;
    rest.blocks += rows[i].blocks;
  }
  rest.name = "(" + std::to_string(rows.size() - keep) + " smaller groups)";
  rows.resize(keep);
  rows.push_back(std::move(rest));
  return rows;
}
}  // namespace

int64_t Tracer::now_ns() {
  static const int64_t injected = injected_clock_offset();
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec + injected;
}

MemorySample Tracer::process_memory() {
  MemorySample m;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long long kb = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kb) == 1) {
      m.allocated = m.reserved = kb * 1024;
    } else if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) {
      m.peak = kb * 1024;
    }
  }
  std::fclose(f);
  return m;
}

namespace {

int64_t current_tid() { return static_cast<int64_t>(::syscall(SYS_gettid)); }

std::atomic<uint64_t> g_next_tracer_id{1};

// One finished range as buffered in memory.
struct Event {
  int64_t start_ns, end_ns, step;
  RangeInfo info;
  int32_t lane;  // Tracer::kCommLane, kRingLane, kRingGradLane, or another value: the thread's row
  bool push_pop;
  uint64_t ext = 0;        // external correlation id pushed for it (0: none)
  bool corr_only = false;  // a push_correlation: no range, only an ULYSSES_EXTERNAL_IDS row
};

// Single-producer (the owning thread) / single-consumer (end_step) queue of events in
// fixed-size chunks; the count of each chunk is published with release stores.
struct Chunk {
  static constexpr uint32_t kSize = 4096;
  Event ev[kSize];
  std::atomic<uint32_t> count{0};
  std::atomic<Chunk*> next{nullptr};
};

struct OpenRange {
  RangeInfo info;
  int64_t start_ns;
  int64_t step;
  uint64_t ext;
};

struct ThreadBuffer {
  int64_t tid = 0;
  std::vector<OpenRange> stack;  // owner thread only
  Chunk* tail = nullptr;         // producer side
  Chunk* head = nullptr;         // consumer side
  uint32_t head_pos = 0;

  ThreadBuffer() : tail(new Chunk), head(tail) {}
  ~ThreadBuffer() {
    Chunk* c = head;
    while (c) {
      Chunk* n = c->next.load(std::memory_order_acquire);
      delete c;
      c = n;
    }
  }
  void append(const Event& e) {
    uint32_t n = tail->count.load(std::memory_order_relaxed);
    if (n == Chunk::kSize) {
      Chunk* c = new Chunk;
      tail->next.store(c, std::memory_order_release);
      tail = c;
      n = 0;
    }
    tail->ev[n] = e;
    tail->count.store(n + 1, std::memory_order_release);
  }
  // Segment of published events [begin, end) of one chunk, as end_step hands it on.
  struct Segment {
    int64_t tid;
    const Chunk* chunk;
    uint32_t begin, end;
  };
  // Consumer side: appends what the producer has published since the last take as segments;
  // chunks fully consumed (full, with a successor) go to `retired`, freed by whoever writes
  // the segments once written (the producer has moved on: it never touches them again).
  void take(std::vector<Segment>* segs, std::vector<Chunk*>* retired) {
    for (;;) {
      uint32_t n = head->count.load(std::memory_order_acquire);
      if (head_pos < n) segs->push_back({tid, head, head_pos, n});
      head_pos = n;
      if (n == Chunk::kSize) {
        Chunk* nx = head->next.load(std::memory_order_acquire);
        if (nx) {
          retired->push_back(head);
          head = nx;
          head_pos = 0;
          continue;
        }
      }
      return;
    }
  }
};

struct TlsCache {
  uint64_t tracer_id = 0;
  ThreadBuffer* buf = nullptr;
};
thread_local TlsCache t_cache;

// Collects GPU activity records between steps (CUPTI calls it from its own thread).
class GpuBuffer final : public GpuActivitySink {
 public:
  void on_kernel(const KernelRecord& k) override {
    std::lock_guard<std::mutex> lk(mu_);
    kernels_.push_back(k);
  }
  void on_memcpy(const MemcpyRecord& m) override {
    std::lock_guard<std::mutex> lk(mu_);
    copies_.push_back(m);
  }
  void on_runtime(const RuntimeRecord& r) override {
    std::lock_guard<std::mutex> lk(mu_);
    runtime_.push_back(r);
  }
  void on_external_correlation(int64_t correlation, int64_t external_id) override {
    std::lock_guard<std::mutex> lk(mu_);
    ext_.emplace_back(correlation, external_id);
  }
  struct Batch {
    std::vector<KernelRecord> kernels;
    std::vector<MemcpyRecord> copies;
    std::vector<RuntimeRecord> runtime;
    std::vector<std::pair<int64_t, int64_t>> ext;  // (correlation, external id)
  };
  // Everything collected so far.
  Batch take() {
    Batch b;
    std::lock_guard<std::mutex> lk(mu_);
    b.kernels.swap(kernels_);
    b.copies.swap(copies_);
    b.runtime.swap(runtime_);
    b.ext.swap(ext_);
    return b;
  }

 private:
  std::mutex mu_;
  std::vector<KernelRecord> kernels_;
  std::vector<MemcpyRecord> copies_;
  std::vector<RuntimeRecord> runtime_;
  std::vector<std::pair<int64_t, int64_t>> ext_;
};

class HostTracer final : public Tracer {
 public:
  explicit HostTracer(const TracerOptions& o) : opts_(o), id_(g_next_tracer_id.fetch_add(1)), writer_(o) {
    main_tid_ = current_tid();
    writer_.name_thread(main_tid_, "main");
    auto factory = o.gpu_source;
    if (!factory && o.device.rfind("cuda", 0) == 0 && have_cupti()) factory = make_cupti_source;
    std::string tool;
    if (factory && cuda_tool_injected(&tool)) {
      // One CUPTI activity client per process: let the other tool have it.
      std::fprintf(stderr,
                   "ulysses profiler: %s; GPU activity tracing stands down so the two do not fight over "
                   "CUPTI (that tool records the kernels; host ranges are still recorded here)\n",
                   tool.c_str());
      factory = nullptr;
    }
    if (factory) {
      gpu_ = factory(&gpu_buf_);
      std::string err;
      if (gpu_ && !gpu_->start(&err)) {
        std::fprintf(stderr, "ulysses profiler: GPU activity tracing is off (%s); host ranges are still recorded\n",
                     err.c_str());
        gpu_.reset();
      }
    }
    if (opts_.writer_queue_steps > 0) thread_ = std::thread([this] { writer_loop(); });
  }
  ~HostTracer() override {
    try {
      close();
    } catch (...) {
    }
    stop_writer();  // close() joined it unless something before that threw
  }

  void begin_step(int64_t step) override {
    step_.store(step, std::memory_order_relaxed);
    step_start_ = now_ns();
    if (opts_.memory_probe) {  // the step's peak counts from here
      MemoryCategories c;
      int64_t t = 0;
      opts_.memory_probe->take_peak(&c, &t);
    }
    const bool on = in_window(step);
    if (gpu_) {
      gpu_->recalibrate();  // the GPU clock drifts: a calibration point per step (GpuClock)
      std::lock_guard<std::mutex> lk(write_mu_);
      open_window_ = on ? step_start_ : -1;
    }
    active_.store(on, std::memory_order_release);
  }

  void end_step(const StepRecord& rec) override {
    resolve_later();
    int64_t end = now_ns();
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    bool was_active = active_.load(std::memory_order_acquire);
    std::optional<std::pair<int64_t, int64_t>> window;
    if (was_active && open_window_ >= 0) {
      window.emplace(open_window_, end);
      open_window_ = -1;
    }
    try {
      submit(take_batch(was_active ? &rec : nullptr, end, window));
    } catch (...) {
      end_step_ns_ += now_ns() - end;
      throw;
    }
    end_step_ns_ += now_ns() - end;
    throw_pending_error();
  }

  void flush() override {
    std::lock_guard<std::mutex> lk(write_mu_);
    if (thread_.joinable()) {
      std::unique_lock<std::mutex> q(q_mu_);
      done_cv_.wait(q, [&] { return in_flight_ == 0; });
    }
    throw_pending_error();
  }

  bool active() const override { return active_.load(std::memory_order_acquire); }

  void push(const RangeInfo& info) override {
    ThreadBuffer* b = buffer();
    uint64_t ext = 0;
    if (gpu_) {
      ext = next_ext_.fetch_add(1, std::memory_order_relaxed);
      gpu_->push_external_id(ext);
    }
    b->stack.push_back({info, now_ns(), step_.load(std::memory_order_relaxed), ext});
    sample_categories(info, MemEdge::Begin);
    if (opts_.memory_probe) opts_.memory_probe->enter_range(info.phase, info.dir, info.layer);
#if defined(ULYSSES_WITH_NVTX)
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.category = static_cast<uint32_t>(info.phase);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = phase_name(info.phase);
    nvtxRangePushEx(&a);
#endif
  }

  void pop() override {
    ThreadBuffer* b = buffer();
    if (b->stack.empty()) return;  // unbalanced pop: ignore rather than corrupt the trace
    int64_t end = now_ns();
#if defined(ULYSSES_WITH_NVTX)
    nvtxRangePop();
#endif
    const OpenRange& o = b->stack.back();
    sample_categories(o.info, MemEdge::End);
    if (opts_.memory_probe) opts_.memory_probe->leave_range();
    if (o.ext) gpu_->pop_external_id();
    b->append(Event{o.start_ns, end, o.step, o.info, 0, true, o.ext, false});
    b->stack.pop_back();
  }

  void record_range(const RangeInfo& info, int64_t start_ns, int64_t end_ns, int32_t lane) override {
    if (!active() || end_ns < start_ns) return;
    ThreadBuffer* b = buffer();
    b->append(Event{start_ns, end_ns, step_.load(std::memory_order_relaxed), info, lane, false});
  }

  void record_range_later(const RangeInfo& info, std::function<bool(int64_t*, int64_t*)> times, int32_t lane) override {
    if (!active() || !times) return;
    std::lock_guard<std::mutex> lk(later_mu_);
    later_.push_back({info, std::move(times), lane, step_.load(std::memory_order_relaxed)});
  }

  void push_correlation(const RangeInfo& info) override {
    if (!gpu_) return;  // ScopedCorrelation checked active(); pushing here keeps pop balanced
    const uint64_t ext = next_ext_.fetch_add(1, std::memory_order_relaxed);
    gpu_->push_external_id(ext);
    const int64_t t = now_ns();
    buffer()->append(Event{t, t, step_.load(std::memory_order_relaxed), info, 0, false, ext, true});
  }
  void pop_correlation() override {
    if (gpu_) gpu_->pop_external_id();
  }

  // Live memory by category at a range's edge (TracerOptions::memory_probe).
  void sample_categories(const RangeInfo& info, MemEdge edge) {
    if (!opts_.memory_probe || !opts_.memory || !active()) return;
    CategoryEntry e{now_ns(), step_.load(std::memory_order_relaxed), edge, static_cast<int32_t>(info.phase), info.layer,
                    {}};
    opts_.memory_probe->live(&e.c);
    std::lock_guard<std::mutex> lk(mem_mu_);
    cats_.push_back(e);
  }

  void record_planned_curve(const std::vector<PlannedMemoryPoint>& curve) override {
    if (!opts_.memory) return;
    const int64_t t0 = now_ns();
    std::lock_guard<std::mutex> lk(mem_mu_);
    for (size_t i = 0; i < curve.size(); ++i) {
      const auto& p = curve[i];
      cats_.push_back({t0 + static_cast<int64_t>(i), -1, p.begin ? MemEdge::PlannedBegin : MemEdge::PlannedEnd, p.phase,
                       p.layer, p.c});
    }
  }

  void record_planned_tensors(const std::vector<PeakTensor>& rows) override {
    if (!opts_.memory || rows.empty()) return;
    submit_op([t = peak_table(rows)](TraceWriter& w) { w.write_peak_tensors(-1, t); });
  }

  void record_planned_memory(const MemoryCategories& planned) override {
    if (!opts_.memory) return;
    std::lock_guard<std::mutex> lk(mem_mu_);
    cats_.push_back({now_ns(), -1, MemEdge::Planned, -1, -1, planned});
  }

  void sample_memory(const char* label, const MemorySample& m) override {
    if (!opts_.memory || !active()) return;
    std::lock_guard<std::mutex> lk(mem_mu_);
    mem_.push_back({now_ns(), step_.load(std::memory_order_relaxed), label ? label : "", m});
  }

  // Small writes of their own (one transaction each), in order with the steps' batches; they
  // do not count against writer_queue_steps.
  void set_metric(const std::string& name, double value) override {
    submit_op([name, value](TraceWriter& w) { w.set_metric(name, value); });
  }

  void set_thread_name(const std::string& name) override {
    const int64_t tid = buffer()->tid;
    submit_op([tid, name](TraceWriter& w) { w.name_thread(tid, name); });
  }

  void record_documents(const std::vector<DocumentShard>& rows) override {
    if (!active() || rows.empty()) return;
    submit_op([rows](TraceWriter& w) { w.write_documents(rows); });
  }

  void record_clock(const std::string& kind, const ClockOffset& c) override {
    submit_op([kind, c](TraceWriter& w) { w.write_clock(kind, c); });
  }

  void close() override {
    if (!closed_) resolve_later();
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    const int64_t end = now_ns();
    std::optional<std::pair<int64_t, int64_t>> window;
    if (open_window_ >= 0) {  // a step still open when the tracer closes
      window.emplace(open_window_, end);
      open_window_ = -1;
    }
    // The GPU source stops first: its forced flush delivers every CUPTI buffer, complete or
    // not, into gpu_buf_, so the last batch below carries them to the writer (stopped after it,
    // the flush came once the writer had gone and the last records were dropped).
    if (gpu_) gpu_->stop();
    std::string err;
    try {
      Batch b = take_batch(nullptr, end, window);
      b.is_step = false;  // the last batch: no wait for room, the drain below writes it
      submit(std::move(b));
    } catch (const std::exception& e) {
      err = e.what();
    }
    stop_writer();  // drains the queue
    const std::string pending = take_pending_error();
    if (err.empty()) err = pending;
    try {
      write_writer_stats();
      writer_.close();
    } catch (const std::exception& e) {
      if (err.empty()) err = "closing the trace " + opts_.path + ": " + e.what();
    }
    closed_ = true;
    if (!err.empty()) throw std::runtime_error(err);
  }

 private:
  struct MemEntry {
    int64_t t, step;
    std::string label;
    MemorySample m;
  };
  struct CategoryEntry {
    int64_t t, step;
    MemEdge edge;
    int32_t phase, layer;
    MemoryCategories c;
  };

  // What end_step (or close) hands to the writer: one transaction.
  struct Batch {
    bool is_step = false;  // an end_step batch: counts against writer_queue_steps
    int64_t step = -1;
    std::optional<std::pair<int64_t, int64_t>> window;  // profiled step window to add first
    bool has_gpu = false;
    GpuBuffer::Batch gpu;
    std::vector<ThreadBuffer::Segment> segs;
    std::vector<Chunk*> retired;  // freed once written
    std::vector<MemEntry> mem;
    std::vector<CategoryEntry> cats;
    std::vector<PeakTensor> peak_tensors;  // the step's peak table (MemoryProbe::taken_peak_tensors)
    std::optional<StepRecord> rec;
    int64_t start_ns = 0, end_ns = 0;
    std::function<void(TraceWriter&)> op;  // a small write instead (metric, thread name, clock)
  };

  // Stepping thread: the ranges given to record_range_later, with the times known now.
  void resolve_later() {
    std::vector<Later> v;
    {
      std::lock_guard<std::mutex> lk(later_mu_);
      v.swap(later_);
    }
    for (auto& l : v) {
      int64_t s = 0, e = 0;
      bool ok = false;
      try {
        ok = l.times(&s, &e);
      } catch (...) {
        ok = false;
      }
      if (ok && e >= s) buffer()->append(Event{s, e, l.step, l.info, l.lane, false});
    }
  }

  bool in_window(int64_t step) const {
    return step >= opts_.step_begin && (opts_.step_end < 0 || step <= opts_.step_end);
  }

  ThreadBuffer* buffer() {
    TlsCache& c = t_cache;
    if (c.tracer_id == id_) return c.buf;
    // Slow path, once per thread (or when one thread alternates between tracers).
    int64_t tid = current_tid();
    std::lock_guard<std::mutex> lk(reg_mu_);
    ThreadBuffer* found = nullptr;
    for (auto& b : buffers_) {
      if (b->tid == tid) found = b.get();
    }
    if (!found) {
      buffers_.push_back(std::make_unique<ThreadBuffer>());
      found = buffers_.back().get();
      found->tid = tid;
    }
    c.tracer_id = id_;
    c.buf = found;
    return found;
  }

  // Stepping thread (under write_mu_): everything to write for this step, nothing copied
  // but the GPU records and memory samples (moved) and the step row.
  Batch take_batch(const StepRecord* rec, int64_t end, std::optional<std::pair<int64_t, int64_t>> window) {
    Batch b;
    b.is_step = true;
    b.step = step_.load(std::memory_order_relaxed);
    b.window = window;
    if (gpu_) {
      gpu_->flush();  // delivers into gpu_buf_, which takes only its own lock
      b.has_gpu = true;
      b.gpu = gpu_buf_.take();
    }
    {
      std::lock_guard<std::mutex> lk(reg_mu_);
      for (auto& buf : buffers_) buf->take(&b.segs, &b.retired);
    }
    {
      std::lock_guard<std::mutex> lk(mem_mu_);
      b.mem.swap(mem_);
      b.cats.swap(cats_);
    }
    // The step's peak by category, when it happened (the probe restarts its peak from now).
    if (rec && opts_.memory_probe && opts_.memory) {
      CategoryEntry e{0, b.step, MemEdge::Peak, -1, -1, {}};
      if (opts_.memory_probe->take_peak(&e.c, &e.t)) {
        b.cats.push_back(e);
        const std::vector<int64_t> layers = opts_.memory_probe->taken_peak_layers();
        for (size_t l = 0; l < layers.size(); ++l) {
          if (layers[l] <= 0) continue;
          CategoryEntry le{e.t, b.step, MemEdge::PeakLayer, -1, static_cast<int32_t>(l), {}};
          le.c.bytes[static_cast<int>(MemCategory::Activations)] = layers[l];
          b.cats.push_back(le);
        }
        b.peak_tensors = peak_table(opts_.memory_probe->taken_peak_tensors());
      }
    }
    if (rec) {
      b.rec = *rec;
      b.start_ns = step_start_;
      b.end_ns = end;
    }
    return b;
  }

  void submit_op(std::function<void(TraceWriter&)> op) {
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    Batch b;
    b.op = std::move(op);
    submit(std::move(b));
  }

  // Under write_mu_. Synchronous: writes now (a write error throws here). Otherwise queues
  // the batch, first waiting while writer_queue_steps step batches are uncommitted.
  void submit(Batch&& b) {
    if (!thread_.joinable()) {
      write_batch(b);
      return;
    }
    std::unique_lock<std::mutex> lk(q_mu_);
    const int64_t cap = opts_.writer_queue_steps;
    if (b.is_step && pending_steps_ >= cap) {
      if (opts_.writer_test_on_full) {
        lk.unlock();
        opts_.writer_test_on_full();
        lk.lock();
      }
      const int64_t t0 = now_ns();
      room_cv_.wait(lk, [&] { return pending_steps_ < cap; });
      ++waits_;
      wait_ns_ += now_ns() - t0;
    }
    if (b.is_step) ++pending_steps_;
    ++in_flight_;
    queue_.push_back(std::move(b));
    work_cv_.notify_one();
  }

  void writer_loop() {
    std::unique_lock<std::mutex> lk(q_mu_);
    for (;;) {
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped and drained
      Batch b = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      const bool is_step = b.is_step;
      std::string err;
      try {
        write_batch(b);
      } catch (const std::exception& e) {
        err = e.what();
      } catch (...) {
        err = "writing the trace " + opts_.path + ": unknown error";
      }
      b = Batch{};  // freed outside the lock
      lk.lock();
      if (!err.empty()) errors_.push_back(std::move(err));
      if (is_step) --pending_steps_;
      --in_flight_;
      room_cv_.notify_all();
      done_cv_.notify_all();
    }
  }

  void stop_writer() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(q_mu_);
      stop_ = true;
    }
    work_cv_.notify_one();
    thread_.join();
  }

  // The writer's errors since the last report ("" if none): the first, and how many more.
  std::string take_pending_error() {
    std::lock_guard<std::mutex> lk(q_mu_);
    if (errors_.empty()) return {};
    std::string msg = errors_.front();
    if (errors_.size() > 1) msg += " (and " + std::to_string(errors_.size() - 1) + " more trace write errors)";
    errors_.clear();
    return msg;
  }
  void throw_pending_error() {
    std::string msg = take_pending_error();
    if (!msg.empty()) throw std::runtime_error(msg);
  }

  // At close (writer joined): how long the stepping thread spent in end_step and waiting
  // for the writer, as metrics; a line on stderr when end_step had to wait.
  void write_writer_stats() {
    writer_.begin();
    writer_.set_metric("profiler.end_step_ms", static_cast<double>(end_step_ns_) / 1e6);
    if (opts_.writer_queue_steps > 0) {
      writer_.set_metric("profiler.writer_waits", static_cast<double>(waits_));
      writer_.set_metric("profiler.writer_wait_ms", static_cast<double>(wait_ns_) / 1e6);
      if (waits_ > 0) {
        std::fprintf(stderr,
                     "ulysses profiler: end_step waited for the trace writer in %lld steps, %.1f ms in all "
                     "(writer_queue_steps = %d)\n",
                     static_cast<long long>(waits_), static_cast<double>(wait_ns_) / 1e6, opts_.writer_queue_steps);
      }
    }
    writer_.commit();
  }

  // Whether host time t lies in a profiled step ([begin_step, end_step] of an active step).
  bool in_profiled_step(int64_t t) const {
    auto it = std::upper_bound(windows_.begin(), windows_.end(), t,
                               [](int64_t v, const std::pair<int64_t, int64_t>& w) { return v < w.first; });
    return it != windows_.begin() && t <= std::prev(it)->second;
  }

  // GPU records of the profiled steps only. A record is kept when its launch carried one of
  // our external ids (ids are pushed only in profiled steps), else when its launch (the
  // runtime call with the same correlation id) or, unknown, its own start lies in a profiled
  // step. Correlation maps live two flushes (records of one launch may arrive in different
  // CUPTI buffers), then are dropped. Writer side.
  void write_gpu(const GpuBuffer::Batch& b) {
    for (const auto& [corr, ext] : b.ext) {
      ext_of_corr_[0][corr] = ext;
      writer_.write_external_correlation(corr, ext);
    }
    for (const auto& r : b.runtime) launch_of_corr_[0][r.correlation] = r.start_ns;
    auto find = [](const std::unordered_map<int64_t, int64_t>* maps, int64_t corr, int64_t* v) {
      for (int g = 0; g < 2; ++g) {
        auto it = maps[g].find(corr);
        if (it != maps[g].end()) {
          *v = it->second;
          return true;
        }
      }
      return false;
    };
    auto keep = [&](int64_t corr, int64_t start) {
      int64_t v = 0;
      if (corr != 0 && find(ext_of_corr_, corr, &v)) return true;
      if (corr != 0 && find(launch_of_corr_, corr, &v)) return in_profiled_step(v);
      return in_profiled_step(start);
    };
    for (const auto& k : b.kernels)
      if (keep(k.correlation, k.start_ns)) writer_.write_kernel(k);
    for (const auto& m : b.copies)
      if (keep(m.correlation, m.start_ns)) writer_.write_memcpy(m);
    for (const auto& r : b.runtime)
      if (keep(r.correlation, r.start_ns)) writer_.write_runtime(r);
    for (auto* maps : {ext_of_corr_, launch_of_corr_}) {
      maps[1] = std::move(maps[0]);
      maps[0].clear();
    }
  }

  // Writes a batch, naming the trace file in any error ("database or disk is full" alone names
  // no file), on the writer thread and in the synchronous mode alike.
  void write_batch(Batch& b) {
    try {
      write_batch_rows(b);
    } catch (const std::exception& e) {
      throw std::runtime_error("writing the trace " + opts_.path + ": " + e.what());
    }
  }

  // Writer side (the writer thread, or the stepping thread when synchronous): one batch, one
  // transaction. The chunks it consumed are freed even when writing throws.
  void write_batch_rows(Batch& b) {
    struct FreeChunks {
      std::vector<Chunk*>& c;
      ~FreeChunks() {
        for (Chunk* x : c) delete x;
        c.clear();
      }
    } free_chunks{b.retired};
    if (b.op) {
      writer_.begin();
      b.op(writer_);
      writer_.commit();
      return;
    }
    if (opts_.writer_test_before_commit) opts_.writer_test_before_commit(b.step);  // close's batch too
    if (b.window) windows_.push_back(*b.window);
    writer_.begin();
    if (b.has_gpu) write_gpu(b.gpu);
    for (const auto& s : b.segs) {
      for (uint32_t i = s.begin; i < s.end; ++i) {
        const Event& e = s.chunk->ev[i];
        if (e.corr_only) {
          writer_.write_external_id(static_cast<int64_t>(e.ext), -1, e.step, e.info);
          continue;
        }
        RangeRecord r;
        r.start_ns = e.start_ns;
        r.end_ns = e.end_ns;
        r.tid = e.lane == kCommLane         ? kCommTid
                : e.lane == kRingLane       ? kRingTid
                : e.lane == kRingGradLane   ? kRingGradTid
                : e.lane == kZeroGatherLane ? kZeroGatherTid
                : e.lane == kZeroReduceLane ? kZeroReduceTid
                                            : s.tid;
        r.push_pop = e.push_pop;
        r.step = e.step;
        r.info = e.info;
        const int64_t event_id = writer_.write_range(r);
        if (e.ext) writer_.write_external_id(static_cast<int64_t>(e.ext), event_id, e.step, e.info);
      }
    }
    for (const auto& m : b.mem) writer_.write_memory(m.t, m.step, m.label, m.m);
    for (const auto& c : b.cats) writer_.write_memory_categories(c.t, c.step, c.edge, c.phase, c.layer, c.c);
    if (!b.peak_tensors.empty()) writer_.write_peak_tensors(b.step, b.peak_tensors);
    if (b.rec) writer_.write_step(*b.rec, b.start_ns, b.end_ns);
    writer_.commit();
  }

  TracerOptions opts_;
  uint64_t id_;
  TraceWriter writer_;
  int64_t main_tid_ = 0;
  std::atomic<int64_t> step_{-1};
  std::atomic<bool> active_{false};
  int64_t step_start_ = 0;
  std::mutex write_mu_, reg_mu_, mem_mu_;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
  std::vector<MemEntry> mem_;
  std::vector<CategoryEntry> cats_;
  struct Later {
    RangeInfo info;
    std::function<bool(int64_t*, int64_t*)> times;
    int32_t lane;
    int64_t step;
  };
  std::mutex later_mu_;
  std::vector<Later> later_;  // record_range_later's ranges of this step (later_mu_)
  bool closed_ = false;
  int64_t end_step_ns_ = 0;   // stepping thread's time in end_step (write_mu_)
  int64_t open_window_ = -1;  // the open profiled step's begin (write_mu_)
  // Writer side (the writer thread; the stepping thread when synchronous or after join):
  // profiled step windows, sorted; GPU correlation maps.
  std::vector<std::pair<int64_t, int64_t>> windows_;
  std::unordered_map<int64_t, int64_t> ext_of_corr_[2], launch_of_corr_[2];  // [0] newest
  std::atomic<uint64_t> next_ext_{1};
  GpuBuffer gpu_buf_;
  std::unique_ptr<GpuActivitySource> gpu_;  // declared after gpu_buf_: destroyed first
  // The writer thread's queue (q_mu_).
  std::mutex q_mu_;
  std::condition_variable work_cv_, room_cv_, done_cv_;
  std::deque<Batch> queue_;
  int64_t pending_steps_ = 0;  // step batches queued or being written
  int64_t in_flight_ = 0;      // all batches queued or being written
  bool stop_ = false;
  std::vector<std::string> errors_;
  int64_t waits_ = 0, wait_ns_ = 0;  // end_steps that waited for room, and how long
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Tracer> Tracer::open(const TracerOptions& opts) { return std::make_unique<HostTracer>(opts); }

}  // namespace ulysses::prof
