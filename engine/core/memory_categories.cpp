// Memory by category (see memory_categories.hpp).
#include "memory_categories.hpp"

#include <atomic>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>

#include "torch_compat.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses::mem {

namespace {
thread_local MemCategory t_category = MemCategory::Other;
}  // namespace

Scope::Scope(MemCategory c) : prev_(t_category) { t_category = c; }
Scope::~Scope() { t_category = prev_; }
MemCategory current() { return t_category; }

thread_local int32_t t_layer = -1;
LayerScope::LayerScope(int32_t layer) : prev_(t_layer) { t_layer = layer; }
LayerScope::~LayerScope() { t_layer = prev_; }
int32_t current_layer() { return t_layer; }

thread_local bool t_host = false;
HostScope::HostScope() : prev_(t_host) { t_host = true; }
HostScope::~HostScope() { t_host = prev_; }
bool in_host_scope() { return t_host; }

namespace {
// A layer index worth a slot (the trace readers keep layers below kMaxTraceLayers too).
bool per_layer(MemCategory c, int32_t layer) { return c == MemCategory::Activations && layer >= 0 && layer < 4096; }
}  // namespace

void Counters::add(MemCategory c, int64_t n, int32_t layer, int32_t group) {
  std::lock_guard<std::mutex> g(mu_);
  live_.bytes[static_cast<int>(c)] += n;
  if (group >= 0) {
    if (groups_live_.size() <= static_cast<size_t>(group)) groups_live_.resize(static_cast<size_t>(group) + 1);
    groups_live_[static_cast<size_t>(group)].bytes += n;
    ++groups_live_[static_cast<size_t>(group)].blocks;
  }
  if (per_layer(c, layer)) {
    if (layers_live_.size() <= static_cast<size_t>(layer)) layers_live_.resize(static_cast<size_t>(layer) + 1, 0);
    layers_live_[static_cast<size_t>(layer)] += n;
  }
  total_ += n;
  ++allocations_;
  counted_ = true;
  if (total_ > peak_) {
    peak_ = total_;
    at_peak_ = live_;
    layers_at_peak_ = layers_live_;
    groups_at_peak_ = groups_live_;
    peak_t_ = prof::Tracer::now_ns();
  }
}

void Counters::sub(MemCategory c, int64_t n, int32_t layer, int32_t group) {
  std::lock_guard<std::mutex> g(mu_);
  live_.bytes[static_cast<int>(c)] -= n;
  if (group >= 0 && static_cast<size_t>(group) < groups_live_.size()) {
    groups_live_[static_cast<size_t>(group)].bytes -= n;
    --groups_live_[static_cast<size_t>(group)].blocks;
  }
  if (per_layer(c, layer) && static_cast<size_t>(layer) < layers_live_.size())
    layers_live_[static_cast<size_t>(layer)] -= n;
  total_ -= n;
}

std::vector<int64_t> Counters::taken_peak_layers() const {
  std::lock_guard<std::mutex> g(mu_);
  return layers_taken_;
}
std::vector<GroupLive> Counters::at_peak_groups() const {
  std::lock_guard<std::mutex> g(mu_);
  return groups_at_peak_;
}
std::vector<GroupLive> Counters::taken_peak_groups() const {
  std::lock_guard<std::mutex> g(mu_);
  return groups_taken_;
}

MemoryCategories Counters::live() const {
  std::lock_guard<std::mutex> g(mu_);
  return live_;
}
int64_t Counters::allocations() const {
  std::lock_guard<std::mutex> g(mu_);
  return allocations_;
}
int64_t Counters::peak() const {
  std::lock_guard<std::mutex> g(mu_);
  return peak_;
}
MemoryCategories Counters::at_peak() const {
  std::lock_guard<std::mutex> g(mu_);
  return at_peak_;
}

bool Counters::take_peak(MemoryCategories* out, int64_t* t_ns) {
  std::lock_guard<std::mutex> g(mu_);
  if (!counted_) return false;
  *out = at_peak_;
  layers_taken_ = layers_at_peak_;
  groups_taken_ = groups_at_peak_;
  *t_ns = peak_t_;
  peak_ = total_;
  at_peak_ = live_;
  layers_at_peak_ = layers_live_;
  groups_at_peak_ = groups_live_;
  peak_t_ = prof::Tracer::now_ns();
  return true;
}

void Counters::reset_peak() {
  std::lock_guard<std::mutex> g(mu_);
  peak_ = total_;
  at_peak_ = live_;
  layers_at_peak_ = layers_live_;
  groups_at_peak_ = groups_live_;
  peak_t_ = prof::Tracer::now_ns();
}

Counters& cpu() {
  static Counters c;
  return c;
}
Counters& meta() {
  static Counters c;
  return c;
}
Counters& cuda() {
  static Counters c;
  return c;
}

namespace {

// libtorch's CPU allocator with every storage counted in cpu() under the allocating thread's
// category. The DataPtr keeps data == context (c10's raw_allocate asserts it: a context of our
// own failed "dptr.get() == dptr.get_context()" in runs that reached it), so the original
// DataPtr, the bytes and the category wait in a table keyed by the data pointer.
std::atomic<c10::Allocator*> g_base{nullptr};
std::atomic<bool> g_counting{true};

struct CategoryCpuAllocator final : public compat::AllocatorBase {
  c10::Allocator* base = nullptr;
  struct Rec {
    c10::DataPtr inner;
    int64_t n;
    MemCategory cat;
    int32_t layer;
    int32_t group;
    bool described = false;  // DescribeCpuTensors gave its group a dtype and shape from it
  };
  static std::mutex& table_mu() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void*, Rec>& table() {
    static auto* t = new std::unordered_map<void*, Rec>();  // never destroyed: frees at exit still find it
    return *t;
  }
  static void free_ptr(void* p) {
    c10::DataPtr inner;  // destroyed (the memory freed) outside the lock
    {
      std::lock_guard<std::mutex> g(table_mu());
      auto it = table().find(p);
      if (it == table().end()) {  // raw_allocate'd while counting was off: the base allocator's
        auto* base = g_base.load();
        if (c10::DeleterFnPtr del = base ? base->raw_deleter() : nullptr) del(p);
        return;
      }
      cpu().sub(it->second.cat, it->second.n, it->second.layer, it->second.group);
      inner = std::move(it->second.inner);
      table().erase(it);
    }
  }
  c10::DataPtr allocate_bytes(size_t n) override {
    c10::DataPtr inner = base->allocate(n);
    void* data = inner.get();
    // Nothing to count (and no unique key), or counting switched off (set_cpu_counting).
    if (n == 0 || data == nullptr || !g_counting.load(std::memory_order_relaxed)) return inner;
    const auto dev = inner.device();
    const MemCategory cat = current();
    const int32_t layer = current_layer();
    const int32_t group = current_group(cat);
    {
      std::lock_guard<std::mutex> g(table_mu());
      table().insert_or_assign(data, Rec{std::move(inner), static_cast<int64_t>(n), cat, layer, group});
    }
    cpu().add(cat, static_cast<int64_t>(n), layer, group);
    return {data, data, &free_ptr, dev};
  }
  // raw_allocate / raw_deallocate (used by some ATen kernels) free through this.
  c10::DeleterFnPtr raw_deleter() const override { return &free_ptr; }
};

CategoryCpuAllocator g_cpu_allocator;
std::atomic<bool> g_installed{false};
std::once_flag g_install_once;

class CpuProbe final : public prof::MemoryProbe {
 public:
  void live(MemoryCategories* out) override { *out = cpu().live(); }
  bool take_peak(MemoryCategories* out, int64_t* t_ns) override { return cpu().take_peak(out, t_ns); }
  std::vector<int64_t> taken_peak_layers() override { return cpu().taken_peak_layers(); }
  void enter_range(prof::Phase phase, prof::Direction dir, int32_t layer) override { push_range(phase, dir, layer); }
  void leave_range() override { pop_range(); }
  std::vector<prof::PeakTensor> taken_peak_tensors() override {
    std::vector<prof::PeakTensor> out;
    for (const TensorGroup& g : name_groups(cpu().taken_peak_groups())) out.push_back(peak_tensor(g));
    return out;
  }
};

// A CPU tensor an op returned: its counted block's group takes its dtype and shape (once per block).
void describe_cpu_tensor(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.has_storage()) return;
  const c10::DataPtr& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &CategoryCpuAllocator::free_ptr) return;
  int32_t group = -1;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> g(CategoryCpuAllocator::table_mu());
    auto it = CategoryCpuAllocator::table().find(dp.get());
    if (it == CategoryCpuAllocator::table().end() || it->second.described) return;
    it->second.described = true;
    group = it->second.group;
    bytes = it->second.n;
  }
  describe_block(group, bytes, dtype_words(t.scalar_type()), t.sizes().vec());
}
std::unique_ptr<at::ObserverContext> describe_nothing_at_start(const at::RecordFunction&) { return nullptr; }
void describe_op_outputs(const at::RecordFunction& fn, at::ObserverContext*) {
  for (const c10::IValue& v : fn.outputs()) {
    if (v.isTensor()) {
      describe_cpu_tensor(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) describe_cpu_tensor(t);
    }
  }
}

class CudaProbe final : public prof::MemoryProbe {
 public:
  void live(MemoryCategories* out) override { *out = cuda().live(); }
  bool take_peak(MemoryCategories* out, int64_t* t_ns) override { return cuda().take_peak(out, t_ns); }
  std::vector<int64_t> taken_peak_layers() override { return cuda().taken_peak_layers(); }
  void enter_range(prof::Phase phase, prof::Direction dir, int32_t layer) override { push_range(phase, dir, layer); }
  void leave_range() override { pop_range(); }
};

// The CUDA blocks counted (install_cuda_counting): address -> bytes and category.
struct CudaBlocks {
  std::mutex mu;
  struct Block {
    int64_t bytes;
    MemCategory cat;
    int32_t layer;
    int32_t group;
  };
  std::unordered_map<uintptr_t, Block> live;
  int device = -1;
};
CudaBlocks& cuda_blocks() {
  static auto* b = new CudaBlocks();  // never destroyed: the allocator may call back at exit
  return *b;
}

}  // namespace

void install_cpu_counting() {
  std::call_once(g_install_once, [] {
    g_cpu_allocator.base = c10::GetCPUAllocator();
    g_base.store(g_cpu_allocator.base);
    c10::SetCPUAllocator(&g_cpu_allocator, /*priority=*/1);
    g_installed.store(true);
  });
}

bool cpu_counting_installed() { return g_installed.load(); }

void set_cpu_counting(bool on) { g_counting.store(on); }

void note_offload(const at::Tensor& t, bool off) {
  if (!t.defined() || !t.has_storage()) return;
  const c10::DataPtr& dp = t.storage().data_ptr();
  note_offload_storage(dp.get_context(), reinterpret_cast<void*>(dp.get_deleter()), off);
}

at::Tensor comm_buffer_like(const at::Tensor& t) {
  Scope s(MemCategory::Communication);
  Label l("receive buffer");
  return at::empty_like(t);
}

std::shared_ptr<prof::MemoryProbe> cpu_probe() { return std::make_shared<CpuProbe>(); }

std::string dtype_words(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "fp32";
    case c10::ScalarType::BFloat16:
      return "bf16";
    case c10::ScalarType::Half:
      return "fp16";
    case c10::ScalarType::Double:
      return "fp64";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Bool:
      return "bool";
    default:
      return c10::toString(t);
  }
}

DescribeCpuTensors::DescribeCpuTensors()
    : handle_(at::addGlobalCallback(at::RecordFunctionCallback(&describe_nothing_at_start, &describe_op_outputs)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION}))) {}
DescribeCpuTensors::~DescribeCpuTensors() { at::removeCallback(handle_); }
std::shared_ptr<prof::MemoryProbe> cuda_probe() { return std::make_shared<CudaProbe>(); }

void count_cuda_block(int device, uintptr_t addr, int64_t bytes, bool alloc) {
  CudaBlocks& b = cuda_blocks();
  std::lock_guard<std::mutex> g(b.mu);
  if (device != b.device) return;
  if (alloc) {
    const MemCategory cat = current();
    const int32_t layer = current_layer();
    const int32_t group = current_group(cat);
    b.live[addr] = {bytes, cat, layer, group};
    cuda().add(cat, bytes, layer, group);
    return;
  }
  auto it = b.live.find(addr);
  if (it == b.live.end()) return;  // given out before counting began
  cuda().sub(it->second.cat, it->second.bytes, it->second.layer, it->second.group);
  b.live.erase(it);
}

CudaCounting install_cuda_counting_with(int device, const CudaAllocatorAccess& cuda) {
  CudaCounting r;
  cuda.lazy_init(device);
  if (!cuda.initialized())
    throw std::runtime_error("memory categories on cuda:" + std::to_string(device) +
                             ": CUDA's caching allocator is not initialised after CUDA's lazy initialisation, so its "
                             "trace hook would count nothing; set profile.memory=false to train without categories");
  r.backend = cuda.name();
  if (r.backend == "cudaMallocAsync") {
    r.why_not =
        "the cudaMallocAsync allocator backend (PYTORCH_CUDA_ALLOC_CONF backend:cudaMallocAsync) has no "
        "trace hook: no memory categories on this rank (allocated/reserved samples remain)";
    return r;
  }
  {
    std::lock_guard<std::mutex> g(cuda_blocks().mu);
    cuda_blocks().device = device;
  }
  if (!cuda.attach(&count_cuda_block)) {
    r.why_not = "this libtorch has no caching-allocator trace hook (libtorch >= 2.1 CUDA builds have one)";
    return r;
  }
  r.counting = true;
  return r;
}

CudaCounting install_cuda_counting(int device) {
  static std::once_flag once;
  static CudaCounting result;
  std::call_once(once, [device] {
    if (!compat::cuda_block_tracker_exists()) {  // CPU builds, libtorch 1.13: nothing to initialise
      result.why_not = "this libtorch has no caching-allocator trace hook (libtorch >= 2.1 CUDA builds have one)";
      return;
    }
    result = install_cuda_counting_with(device, {&compat::cuda_lazy_init, &compat::cuda_allocator_initialized,
                                                 &compat::cuda_allocator_name, &compat::attach_cuda_block_tracker});
  });
  return result;
}

}  // namespace ulysses::mem
