// CUPTI activity source (the only file that includes CUPTI). Kineto practice: the timestamp
// and buffer callbacks registered before any kind is enabled; CONCURRENT_KERNEL, MEMCPY,
// MEMSET, RUNTIME and EXTERNAL_CORRELATION; cuptiActivityFlushAll called without our own
// locks held. Timestamps: CUPTI asks Tracer::now_ns (CLOCK_MONOTONIC) through
// cuptiActivityRegisterTimestampCallback, so every record is on the host ranges' clock; if
// that registration fails, a cuptiGetTimestamp calibration shifts CUPTI's clock instead.
#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "ulysses/profiler/gpu_activity.hpp"

namespace ulysses::prof {

namespace {

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
    // The timestamp callback must be in place before any kind is enabled.
    if (cuptiActivityRegisterTimestampCallback(&CuptiSource::host_timestamp) == CUPTI_SUCCESS) {
      offset_ = 0;
    } else {
      calibrate();
    }
    CUptiResult r = cuptiActivityRegisterCallbacks(&CuptiSource::buffer_requested, &CuptiSource::buffer_completed);
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                        CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
    for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof kinds / sizeof kinds[0]; ++i) {
      r = cuptiActivityEnable(kinds[i]);
      if (r == CUPTI_SUCCESS) enabled_ = i + 1;
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

  void stop() override {
    if (g_active.load() != this) return;
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                        CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
    if (started_) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (size_t i = 0; i < enabled_; ++i) cuptiActivityDisable(kinds[i]);
    enabled_ = 0;
    started_ = false;
    g_active.store(nullptr);
  }

  void push_external_id(uint64_t id) override {
    if (started_) cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
  }
  void pop_external_id() override {
    uint64_t id = 0;
    if (started_) cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
  }

 private:
  // offset_ = host - cupti, measured as the midpoint of two host reads around one CUPTI read.
  void calibrate() {
    uint64_t gpu = 0;
    int64_t h0 = Tracer::now_ns();
    cuptiGetTimestamp(&gpu);
    int64_t h1 = Tracer::now_ns();
    offset_ = (h0 + (h1 - h0) / 2) - static_cast<int64_t>(gpu);
  }
  int64_t host(uint64_t t) const { return static_cast<int64_t>(t) + offset_; }
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
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
          KernelRecord out;
          out.start_ns = host(k->start);
          out.end_ns = host(k->end);
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
          auto* c = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
          MemcpyRecord out;
          out.start_ns = host(c->start);
          out.end_ns = host(c->end);
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
          auto* s = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
          MemcpyRecord out;
          out.start_ns = host(s->start);
          out.end_ns = host(s->end);
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
        case CUPTI_ACTIVITY_KIND_RUNTIME: {
          auto* a = reinterpret_cast<CUpti_ActivityAPI*>(rec);
          RuntimeRecord out;
          out.start_ns = host(a->start);
          out.end_ns = host(a->end);
          out.tid = a->threadId;
          out.correlation = a->correlationId;
          const char* name = nullptr;
          cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
          out.name = name ? name : "cudaRuntime";
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
  int64_t offset_ = 0;
  size_t enabled_ = 0;
  bool started_ = false;
};

}  // namespace

bool have_cupti() { return true; }

std::unique_ptr<GpuActivitySource> make_cupti_source(GpuActivitySink* sink) {
  return std::make_unique<CuptiSource>(sink);
}

}  // namespace ulysses::prof
