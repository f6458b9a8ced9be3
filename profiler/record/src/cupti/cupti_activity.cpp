// CUPTI activity source (the only file that includes CUPTI). Kineto practice: system thread
// ids, then the timestamp and buffer callbacks, all before any kind is enabled;
// CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER and EXTERNAL_CORRELATION;
// cuptiActivityFlushAll called without our own locks held. What is asked of CUPTI and which
// record layouts are read follow cupti_setup.hpp (one place, also followed by the tests' fake).
// Timestamps: with the timestamp callback (CUPTI >= 13.1) CUPTI reports Tracer::now_ns itself;
// otherwise cuptiGetTimestamp calibrations, at start and at every step, shift CUPTI's clock
// onto the host's (GpuClock interpolates between them).
#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "ulysses/profiler/cupti_setup.hpp"
#include "ulysses/profiler/gpu_activity.hpp"

// ULYSSES_CUPTI_RECORDS_AS_API=N: read the record layouts of CUPTI API version N (a compile
// check of older toolkits' layouts against a newer header, whose deprecated structs keep them).
#if defined(ULYSSES_CUPTI_RECORDS_AS_API)
#define ULYSSES_CUPTI_API ULYSSES_CUPTI_RECORDS_AS_API
#else
#define ULYSSES_CUPTI_API CUPTI_API_VERSION
#endif

namespace ulysses::prof {

namespace {

#if ULYSSES_CUPTI_KERNEL_RECORD(ULYSSES_CUPTI_API) == 10
using KernelRec = CUpti_ActivityKernel10;
#elif ULYSSES_CUPTI_KERNEL_RECORD(ULYSSES_CUPTI_API) == 9
using KernelRec = CUpti_ActivityKernel9;
#else
#error "CUPTI before CUDA 12.0 (CUPTI_API_VERSION < 19) is not supported"
#endif
#if ULYSSES_CUPTI_MEMCPY_RECORD(ULYSSES_CUPTI_API) == 6
using MemcpyRec = CUpti_ActivityMemcpy6;
#elif ULYSSES_CUPTI_MEMCPY_RECORD(ULYSSES_CUPTI_API) == 5
using MemcpyRec = CUpti_ActivityMemcpy5;
#endif
#if ULYSSES_CUPTI_MEMSET_RECORD(ULYSSES_CUPTI_API) == 4
using MemsetRec = CUpti_ActivityMemset4;
#endif

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

constexpr size_t kBufferSize = 8 * 1024 * 1024;
constexpr size_t kAlign = 8;

class CuptiSource;
// CUPTI's buffer callbacks are plain functions: they reach the started source through this.
std::atomic<CuptiSource*> g_active{nullptr};

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

class CuptiSource final : public GpuActivitySource {
 public:
  explicit CuptiSource(GpuActivitySink* sink) : sink_(sink) {}
  ~CuptiSource() override { stop(); }

  bool start(std::string* error) override {
    CuptiSource* expected = nullptr;
    if (!g_active.compare_exchange_strong(expected, this)) {
      if (error) *error = "a CUPTI activity source is already running in this process";
      return false;
    }
    uint32_t version = 0;
    if (cuptiGetVersion(&version) != CUPTI_SUCCESS) version = 0;
    const CuptiSetup setup = cupti_setup(version);
    CUptiResult r = CUPTI_SUCCESS;
    // Launch records' threadId = gettid(), the id of the host ranges' rows (not pthread_self()).
    if (setup.system_thread_ids) r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    // The timestamp callback must be in place before any kind is enabled.
    if (!(setup.timestamp_callback &&
          cuptiActivityRegisterTimestampCallback(&CuptiSource::host_timestamp) == CUPTI_SUCCESS)) {
      calibrating_ = true;
      recalibrate();
    }
    if (r == CUPTI_SUCCESS)
      r = cuptiActivityRegisterCallbacks(&CuptiSource::buffer_requested, &CuptiSource::buffer_completed);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof kKinds / sizeof kKinds[0]; ++i) {
      if (kKinds[i] == CUPTI_ACTIVITY_KIND_RUNTIME && !setup.runtime_api) continue;
      if (kKinds[i] == CUPTI_ACTIVITY_KIND_DRIVER && !setup.driver_api) continue;
      r = cuptiActivityEnable(kKinds[i]);
      if (r == CUPTI_SUCCESS) enabled_[i] = true;
    }
    if (r != CUPTI_SUCCESS) {
      if (error) *error = "CUPTI: " + cupti_error(r) + " (is a GPU and driver present?)";
      stop();
      return false;
    }
    started_ = true;
    return true;
  }

  void flush() override {
    if (started_) cuptiActivityFlushAll(0);
  }

  // Every buffer, complete or not, is delivered to the sink before this returns (forced flush).
  void stop() override {
    if (g_active.load() != this) return;
    if (started_) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (size_t i = 0; i < sizeof kKinds / sizeof kKinds[0]; ++i) {
      if (enabled_[i]) cuptiActivityDisable(kKinds[i]);
      enabled_[i] = false;
    }
    started_ = false;
    g_active.store(nullptr);
  }

  // A calibration point per step (GpuClock): the GPU's clock drifts against the host's.
  void recalibrate() override {
    if (!calibrating_) return;
    std::lock_guard<std::mutex> lk(clock_mu_);
    clock_.recalibrate(&Tracer::now_ns, [] {
      uint64_t t = 0;
      cuptiGetTimestamp(&t);
      return t;
    });
  }

  void push_external_id(uint64_t id) override {
    if (started_) cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
  }
  void pop_external_id() override {
    uint64_t id = 0;
    if (started_) cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
  }

 private:
  static uint64_t CUPTIAPI host_timestamp() { return static_cast<uint64_t>(Tracer::now_ns()); }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferSize));
    *size = *buffer ? kBufferSize : 0;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CuptiSource* self = g_active.load();
    if (self && valid > 0) self->consume(buffer, valid);
    std::free(buffer);
  }

  void consume(uint8_t* buffer, size_t valid) {
    // This buffer's records convert with the points measured so far (recalibrate adds more;
    // CUPTI's thread and a flush may both be here).
    GpuClock clock;
    {
      std::lock_guard<std::mutex> lk(clock_mu_);
      clock = clock_;
    }
    auto to_host = [&clock](uint64_t t) { return clock.to_host(t); };
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          auto* k = reinterpret_cast<const KernelRec*>(rec);
          KernelRecord out;
          out.start_ns = to_host(k->start);
          out.end_ns = to_host(k->end);
          out.device = static_cast<int32_t>(k->deviceId);
          out.context = static_cast<int32_t>(k->contextId);
          out.stream = static_cast<int32_t>(k->streamId);
          out.correlation = k->correlationId;
          out.name = k->name ? k->name : "?";
          out.grid[0] = k->gridX;
          out.grid[1] = k->gridY;
          out.grid[2] = k->gridZ;
          out.block[0] = k->blockX;
          out.block[1] = k->blockY;
          out.block[2] = k->blockZ;
          out.registers = k->registersPerThread;
          out.static_smem = k->staticSharedMemory;
          out.dynamic_smem = k->dynamicSharedMemory;
          sink_->on_kernel(out);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          auto* c = reinterpret_cast<const MemcpyRec*>(rec);
          MemcpyRecord out;
          out.start_ns = to_host(c->start);
          out.end_ns = to_host(c->end);
          out.device = static_cast<int32_t>(c->deviceId);
          out.context = static_cast<int32_t>(c->contextId);
          out.stream = static_cast<int32_t>(c->streamId);
          out.correlation = c->correlationId;
          out.bytes = static_cast<int64_t>(c->bytes);
          out.copy_kind = c->copyKind;
          sink_->on_memcpy(out);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          auto* s = reinterpret_cast<const MemsetRec*>(rec);
          MemcpyRecord out;
          out.start_ns = to_host(s->start);
          out.end_ns = to_host(s->end);
          out.device = static_cast<int32_t>(s->deviceId);
          out.context = static_cast<int32_t>(s->contextId);
          out.stream = static_cast<int32_t>(s->streamId);
          out.correlation = s->correlationId;
          out.bytes = static_cast<int64_t>(s->bytes);
          out.is_memset = true;
          out.value = static_cast<int32_t>(s->value);
          sink_->on_memcpy(out);
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {  // the same record: cudaLaunchKernel or cuLaunchKernel
          const bool driver = rec->kind == CUPTI_ACTIVITY_KIND_DRIVER;
          auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
          RuntimeRecord out;
          out.start_ns = to_host(a->start);
          out.end_ns = to_host(a->end);
          out.tid = a->threadId;
          out.correlation = a->correlationId;
          const char* name = nullptr;
          cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
          out.name = name ? name : driver ? "cudaDriver" : "cudaRuntime";
          out.return_value = static_cast<int32_t>(a->returnValue);
          sink_->on_runtime(out);
          break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          auto* e = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec);
          sink_->on_external_correlation(e->correlationId, static_cast<int64_t>(e->externalId));
          break;
        }
        default:
          break;
      }
    }
  }

  GpuActivitySink* sink_;
  bool calibrating_ = false;  // no timestamp callback: CUPTI's own clock, converted by clock_
  std::mutex clock_mu_;       // recalibrate (stepping thread) against consume (CUPTI's thread)
  GpuClock clock_;
  bool enabled_[sizeof kKinds / sizeof kKinds[0]] = {};
  bool started_ = false;
};

}  // namespace

bool have_cupti() { return true; }

std::unique_ptr<GpuActivitySource> make_cupti_source(GpuActivitySink* sink) {
  return std::make_unique<CuptiSource>(sink);
}

}  // namespace ulysses::prof
