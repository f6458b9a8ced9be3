// Host tracer: the Tracer the engine calls. Each thread records into its own buffer
// (registered once, found again through a thread_local cache), so push/pop take no lock:
// a push touches only the thread's stack, a pop appends to a single-producer chunk queue
// that end_step drains from the stepping thread. Ranges are also NVTX push/pop ranges when
// built with NVTX. end_step writes all drained ranges, the step row and memory samples in
// one SQLite transaction, so a killed process keeps every finished step.
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#if defined(ULYSSES_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

#include "ulysses/profiler/gpu_activity.hpp"
#include "ulysses/profiler/trace_writer.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses::prof {

Tracer::~Tracer() = default;

int64_t Tracer::now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
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
  bool comm_lane;
  bool push_pop;
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
  template <class F>
  void drain(F&& f) {
    for (;;) {
      uint32_t n = head->count.load(std::memory_order_acquire);
      for (; head_pos < n; ++head_pos) f(head->ev[head_pos]);
      if (n == Chunk::kSize) {
        Chunk* nx = head->next.load(std::memory_order_acquire);
        if (nx) {
          delete head;
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
  // Moves everything collected so far into the writer's open transaction.
  void write_to(TraceWriter& w) {
    std::vector<KernelRecord> k;
    std::vector<MemcpyRecord> m;
    std::vector<RuntimeRecord> r;
    {
      std::lock_guard<std::mutex> lk(mu_);
      k.swap(kernels_);
      m.swap(copies_);
      r.swap(runtime_);
    }
    for (const auto& x : k) w.write_kernel(x);
    for (const auto& x : m) w.write_memcpy(x);
    for (const auto& x : r) w.write_runtime(x);
  }

 private:
  std::mutex mu_;
  std::vector<KernelRecord> kernels_;
  std::vector<MemcpyRecord> copies_;
  std::vector<RuntimeRecord> runtime_;
};

class HostTracer final : public Tracer {
 public:
  explicit HostTracer(const TracerOptions& o)
      : opts_(o), id_(g_next_tracer_id.fetch_add(1)), writer_(o) {
    main_tid_ = current_tid();
    writer_.name_thread(main_tid_, "main");
    auto factory = o.gpu_source;
    if (!factory && o.device.rfind("cuda", 0) == 0 && have_cupti()) factory = make_cupti_source;
    if (factory) {
      gpu_ = factory(&gpu_buf_);
      std::string err;
      if (gpu_ && !gpu_->start(&err)) {
        std::fprintf(stderr, "ulysses profiler: GPU activity tracing is off (%s); host ranges are still recorded\n", err.c_str());
        gpu_.reset();
      }
    }
  }
  ~HostTracer() override {
    try {
      close();
    } catch (...) {
    }
  }

  void begin_step(int64_t step) override {
    step_.store(step, std::memory_order_relaxed);
    step_start_ = now_ns();
    active_.store(in_window(step), std::memory_order_release);
  }

  void end_step(const StepRecord& rec) override {
    int64_t end = now_ns();
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    bool was_active = active_.load(std::memory_order_acquire);
    flush_locked(was_active ? &rec : nullptr, end);
  }

  bool active() const override { return active_.load(std::memory_order_acquire); }

  void push(const RangeInfo& info) override {
    ThreadBuffer* b = buffer();
    b->stack.push_back({info, now_ns(), step_.load(std::memory_order_relaxed)});
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
    b->append(Event{o.start_ns, end, o.step, o.info, false, true});
    b->stack.pop_back();
  }

  void record_range(const RangeInfo& info, int64_t start_ns, int64_t end_ns, int32_t lane) override {
    if (!active() || end_ns < start_ns) return;
    ThreadBuffer* b = buffer();
    b->append(Event{start_ns, end_ns, step_.load(std::memory_order_relaxed), info, lane == kCommLane, false});
  }

  void sample_memory(const char* label, const MemorySample& m) override {
    if (!opts_.memory || !active()) return;
    std::lock_guard<std::mutex> lk(mem_mu_);
    mem_.push_back({now_ns(), step_.load(std::memory_order_relaxed), label ? label : "", m});
  }

  void set_metric(const std::string& name, double value) override {
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    writer_.begin();
    writer_.set_metric(name, value);
    writer_.commit();
  }

  void set_thread_name(const std::string& name) override {
    ThreadBuffer* b = buffer();
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    writer_.begin();
    writer_.name_thread(b->tid, name);
    writer_.commit();
  }

  void close() override {
    std::lock_guard<std::mutex> lk(write_mu_);
    if (closed_) return;
    flush_locked(nullptr, now_ns());
    if (gpu_) gpu_->stop();
    writer_.close();
    closed_ = true;
  }

 private:
  struct MemEntry {
    int64_t t, step;
    std::string label;
    MemorySample m;
  };

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

  void flush_locked(const StepRecord* rec, int64_t end) {
    if (gpu_) gpu_->flush();  // delivers into gpu_buf_, which takes only its own lock
    writer_.begin();
    gpu_buf_.write_to(writer_);
    {
      std::lock_guard<std::mutex> lk(reg_mu_);
      for (auto& b : buffers_) {
        const int64_t tid = b->tid;
        b->drain([&](const Event& e) {
          RangeRecord r;
          r.start_ns = e.start_ns;
          r.end_ns = e.end_ns;
          r.tid = e.comm_lane ? kCommTid : tid;
          r.push_pop = e.push_pop;
          r.step = e.step;
          r.info = e.info;
          writer_.write_range(r);
        });
      }
    }
    std::vector<MemEntry> mem;
    {
      std::lock_guard<std::mutex> lk(mem_mu_);
      mem.swap(mem_);
    }
    for (const auto& m : mem) writer_.write_memory(m.t, m.step, m.label, m.m);
    if (rec) writer_.write_step(*rec, step_start_, end);
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
  bool closed_ = false;
  GpuBuffer gpu_buf_;
  std::unique_ptr<GpuActivitySource> gpu_;  // declared after gpu_buf_: destroyed first
};

}  // namespace

std::unique_ptr<Tracer> Tracer::open(const TracerOptions& opts) {
  return std::make_unique<HostTracer>(opts);
}

}  // namespace ulysses::prof
