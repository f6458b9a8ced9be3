// Every libtorch-version difference lives here: Debian's libtorch 1.13 (CPU, Gloo) and
// CUDA libtorch 2.x (NCCL, flash SDPA). Nothing else in the engine tests TORCH_VERSION.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(ULYSSES_WITH_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(ULYSSES_WITH_NCCL)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include <unistd.h>

#include "host_copy.hpp"
#include "listen_address.hpp"

namespace ulysses::compat {

#if TORCH_VERSION_MAJOR >= 2
// 2.x: process groups are Backends; SDPA is public and picks flash/efficient kernels.
using Backend = c10d::Backend;
inline at::Tensor sdpa_causal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
}
// SDPA with an additive float mask (B or 1, 1, N, N): packed documents (document_mask.hpp).
inline at::Tensor sdpa_masked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias) {
  return at::scaled_dot_product_attention(q, k, v, bias, 0.0, /*is_causal=*/false);
}
#else
// 1.13: ProcessGroupGloo derives from ProcessGroup; SDPA is the private math kernel.
using Backend = c10d::ProcessGroup;
inline at::Tensor sdpa_causal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, /*is_causal=*/true));
}
inline at::Tensor sdpa_masked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias) {
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, bias, 0.0, false, /*is_causal=*/false));
}
#endif

// Flash attention's varlen entry for packed documents: q, k, v (T, H, dh) with the documents
// laid end to end, cu_seqlens (documents + 1) int32 on their device, causal within each
// document -> (T, H, dh); differentiable (autograd's FlashAttentionBackward0 runs
// _flash_attention_backward with the same offsets). CUDA libtorch 2.x only, fp16/bf16, head
// dim a multiple of 8 up to 256 (flash_varlen_supports); elsewhere the caller keeps SDPA with
// an N x N bias. libtorch 1.13 has no flash kernel at all.
#if TORCH_VERSION_MAJOR >= 2
inline constexpr bool kHasFlashVarlen = true;
inline at::Tensor flash_varlen_causal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& cu_seqlens, int64_t max_seqlen) {
  // (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask):
  // the positional prefix every 2.x release shares; the first result is the output.
  return std::get<0>(at::_flash_attention_forward(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 0.0,
                                                  /*is_causal=*/true, /*return_debug_mask=*/false));
}
#else
inline constexpr bool kHasFlashVarlen = false;
inline at::Tensor flash_varlen_causal(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      int64_t) {
  throw std::logic_error("flash_varlen_causal: libtorch 1.13 has no flash attention (check flash_varlen_supports)");
}
#endif
inline bool flash_varlen_supports(const at::Tensor& q) {
  const auto dt = q.scalar_type();
  return kHasFlashVarlen && q.is_cuda() && (dt == at::kHalf || dt == at::kBFloat16) && q.size(-1) % 8 == 0 &&
         q.size(-1) <= 256;
}

// Whether SDPA on CPU tensors runs a fused flash kernel: libtorch 2.x has one, which saves q,
// k, v, out and the log-sum-exp for backward, where 1.13's math path saves the N x N
// probabilities. The memory planner counts attention accordingly. Probed once, by the
// backward node autograd records for a tiny causal SDPA.
inline bool cpu_sdpa_is_flash() {
  static const bool flash = [] {
    torch::AutoGradMode grad(true);
    auto q = torch::zeros({1, 1, 4, 8}, torch::TensorOptions().dtype(torch::kFloat32)).requires_grad_(true);
    const auto out = sdpa_causal(q, q, q);
    const auto fn = out.grad_fn();
    return fn != nullptr && fn->name().find("Flash") != std::string::npos;
  }();
  return flash;
}

// The key of a parameter in an optimizer's per-parameter state map (the TensorImpl's
// address: as a string in 1.13, the pointer itself in 2.x). Used to save/restore AdamW state.
template <class Map>
typename Map::key_type optimizer_state_key(const Map&, const at::Tensor& p) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<typename Map::key_type>(p.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(p.unsafeGetTensorImpl());
#endif
}

// Type of the total_allocated / total_reserved arguments of
// c10::MemoryReportingInfoBase::reportMemoryUsage (int64_t in 1.13, size_t in 2.x), read off
// the base class's own signature so that an override matches every version.
namespace detail {
template <typename F>
struct MemReportArgs;
template <typename C, typename T>
struct MemReportArgs<void (C::*)(void*, int64_t, T, T, c10::Device)> {
  using Total = T;
};
}  // namespace detail
using MemReportTotal = detail::MemReportArgs<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::Total;

// c10::Allocator's interface changed in libtorch 2.x: allocate() lost its const and a pure
// virtual copy_data() appeared. Both are detected from the base class itself (no version
// numbers to get wrong), so an allocator written as
//   struct A final : compat::AllocatorBase { c10::DataPtr allocate_bytes(size_t n) override; };
// overrides the right allocate() on every version. copy_data is a plain memcpy, as
// c10::Allocator::default_copy_data does.
namespace detail {
template <typename F>
struct AllocateIsConst;
template <typename C>
struct AllocateIsConst<c10::DataPtr (C::*)(size_t) const> : std::true_type {};
template <typename C>
struct AllocateIsConst<c10::DataPtr (C::*)(size_t)> : std::false_type {};
template <typename A, typename = void>
struct HasCopyData : std::false_type {};
template <typename A>
struct HasCopyData<A, std::void_t<decltype(&A::copy_data)>> : std::true_type {};

// Base is a template parameter so that each override is checked only in the version that is
// instantiated.
template <typename Base, bool ConstAllocate, bool CopyData>
struct AllocatorShim;
template <typename Base>
struct AllocatorShim<Base, true, false> : Base {  // 1.13 .. 2.2
  virtual c10::DataPtr allocate_bytes(size_t n) = 0;
  c10::DataPtr allocate(size_t n) const override { return const_cast<AllocatorShim*>(this)->allocate_bytes(n); }
};
template <typename Base>
struct AllocatorShim<Base, false, true> : Base {  // 2.3 and later
  virtual c10::DataPtr allocate_bytes(size_t n) = 0;
  c10::DataPtr allocate(size_t n) override { return allocate_bytes(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }
};
template <typename Base>
struct AllocatorShim<Base, false, false> : Base {
  virtual c10::DataPtr allocate_bytes(size_t n) = 0;
  c10::DataPtr allocate(size_t n) override { return allocate_bytes(n); }
};
template <typename Base>
struct AllocatorShim<Base, true, true> : Base {
  virtual c10::DataPtr allocate_bytes(size_t n) = 0;
  c10::DataPtr allocate(size_t n) const override { return const_cast<AllocatorShim*>(this)->allocate_bytes(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }
};
}  // namespace detail
using AllocatorBase =
    detail::AllocatorShim<c10::Allocator, detail::AllocateIsConst<decltype(&c10::Allocator::allocate)>::value,
                          detail::HasCopyData<c10::Allocator>::value>;

// libtorch 2.x's TCPStore asks for libuv by default (TCPStoreOptions::useLibUV), and a build
// without it (Debian's 2.6) throws "use_libuv was requested but PyTorch was build without
// libuv support" before it opens any socket. Whether the build has libuv is not in its
// headers, so the store is made as the build prefers and, on that one refusal, again with
// libtorch's own TCP server.
namespace detail {
template <typename O, typename = void>
struct HasUseLibUV : std::false_type {};
template <typename O>
struct HasUseLibUV<O, std::void_t<decltype(std::declval<O&>().useLibUV)>> : std::true_type {};
template <typename O>
bool asks_for_libuv(const O& o) {
  if constexpr (HasUseLibUV<O>::value)
    return o.useLibUV;
  else
    return false;
}
template <typename O>
void no_libuv(O& o) {
  if constexpr (HasUseLibUV<O>::value) o.useLibUV = false;
}

// libtorch >= 2.3's TCPStoreOptions::masterListenFd: the server takes a socket already bound
// and listening. 1.13 has no such option and listens on every interface.
template <typename O, typename = void>
struct HasMasterListenFd : std::false_type {};
template <typename O>
struct HasMasterListenFd<O, std::void_t<decltype(std::declval<O&>().masterListenFd)>> : std::true_type {};

// A store made with options `o`, its server (if any) listening on `listen_on` only when given.
// A template so that only the branch of this libtorch's options is compiled.
template <typename Options>
c10::intrusive_ptr<c10d::Store> tcp_store_as_asked(const std::string& host, Options o, const ListenAddress* listen_on) {
  if (!listen_on || !o.isServer) return c10::make_intrusive<c10d::TCPStore>(host, o);
  if constexpr (HasMasterListenFd<Options>::value) {
    // libtorch 2.x: the store takes a socket bound there (masterListenFd). Only its own TCP
    // server takes one (the libuv server refuses it, and a build without libuv refuses libuv),
    // so that server is asked for before the socket exists: a socket opened for a store that
    // then refused it listened, was closed, and reset the connection of any rank that reached
    // it meanwhile (rank threads in one process at 4+ ranks: "it reset the connection
    // without answering", then the others waited out the timeout).
    no_libuv(o);
    std::string error;
    const int fd = listen_socket(*listen_on, &error);
    if (fd < 0) throw std::runtime_error(error);
    o.masterListenFd = fd;
    // From here the store owns fd: its listening Socket closes it on every path, a thrown one
    // included, so it is never closed here (a second close could end another thread's socket).
    return c10::make_intrusive<c10d::TCPStore>(host, o);
  } else {
    BindRedirect redirect(*listen_on);
    auto s = c10::make_intrusive<c10d::TCPStore>(host, o);
    if (redirect.redirected() == 0)
      throw std::runtime_error("rank 0's store did not bind through bind() on this thread, so it cannot be kept to " +
                               listen_on->text + " (a libtorch this build does not know)");
    return s;
  }
}
}  // namespace detail

// Rank 0's store listens on `listen_on` only when given (listen_address.hpp): where the options
// take a listening socket (masterListenFd), one bound there is handed over; otherwise (1.13)
// the store's own wildcard bind is steered there by BindRedirect. A store that took neither
// throws, so it never listens wider than asked without saying so.
inline c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, uint16_t port, bool is_server, int world,
                                                 std::chrono::milliseconds timeout,
                                                 const ListenAddress* listen_on = nullptr) {
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = is_server;
  o.numWorkers = static_cast<size_t>(world);
  // No wait for the other ranks here: the groups' connections wait for them (each rank's
  // address is a store key), within the timeout. Waiting here too made rank 0 wait 2x timeout_s
  // for a peer that never came: libtorch's wait for workers ends at the timeout without an
  // error, and the group's connection then waited the full timeout again.
  o.waitWorkers = false;
  o.timeout = timeout;
  try {
    return detail::tcp_store_as_asked(host, o, listen_on);
  } catch (const std::exception& e) {
    if (!detail::asks_for_libuv(o) || std::string(e.what()).find("libuv") == std::string::npos) throw;
    detail::no_libuv(o);
    return detail::tcp_store_as_asked(host, o, listen_on);
  }
}

// Whether `e` is a TCPStore client's "the store closed this connection": libtorch 2.x throws
// DistNetworkError "failed to recv, got 0 bytes"; 1.13 a std::system_error ECONNRESET (or a
// failed send's EPIPE). Used where a rank joins the store, to say what happened in our words.
inline bool store_connection_closed(const std::exception& e) {
  if (const auto* se = dynamic_cast<const std::system_error*>(&e))
    return se->code().value() == ECONNRESET || se->code().value() == EPIPE;
  const std::string what = e.what();
  return what.find("failed to recv") != std::string::npos || what.find("Connection reset by peer") != std::string::npos;
}

inline c10::intrusive_ptr<c10d::Store> prefix_store(const std::string& prefix, c10::intrusive_ptr<c10d::Store> s) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(s));
}

// The TCPStore wire format of this libtorch, for the worker's probe of MASTER_PORT
// (launch::StoreWire, engine/launch/store_probe.hpp): 1.13's queries start at SET = 0;
// 2.1 put VALIDATE (0, followed by a magic number) first, so SET = 1 and GET = 3.
struct TcpStoreWire {
  uint8_t set, get;
  bool validate;
  uint32_t magic;
};
inline TcpStoreWire tcp_store_wire() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return {1, 3, true, 0x3C85F7CEu};
#else
  return {0, 2, false, 0u};
#endif
}

#if defined(ULYSSES_WITH_GLOO)
// `address`: the numeric address the device binds (listen_address.hpp: loopback for one
// machine, the interface that reaches MASTER_ADDR across machines); GLOO_SOCKET_IFNAME
// (PyTorch's variable), when set, names the interface instead.
inline c10::intrusive_ptr<Backend> make_gloo(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                             std::chrono::milliseconds timeout, const std::string& address) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  o->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                         : c10d::ProcessGroupGloo::createDeviceForHostname(address));
  o->threads = 1;  // one worker thread: collectives run in issue order (FIFO), as on one NCCL stream
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
}
#endif
#if defined(ULYSSES_WITH_NCCL)
// NCCL's error handling: a collective that fails or outlives the group timeout makes the
// watchdog abort the communicators and end the process, so no rank waits past
// parallel.timeout_s for a dead peer (the launcher then stops the others). libtorch >= 2.2
// reads TORCH_NCCL_ASYNC_ERROR_HANDLING (3 = tear down without cleanup, its default);
// older ones read NCCL_ASYNC_ERROR_HANDLING (1 = tear down; off by default). A value the
// user set is kept. Must run before the first ProcessGroupNCCL is made.
inline void enable_nccl_error_handling() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", /*overwrite=*/0);
#else
  ::setenv("NCCL_ASYNC_ERROR_HANDLING", "1", /*overwrite=*/0);
#endif
}

inline c10::intrusive_ptr<Backend> make_nccl(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                             std::chrono::milliseconds timeout) {
  enable_nccl_error_handling();
  // A start event on the NCCL stream for every collective (nccl_start_event: the traced
  // range's device start mark), unless the user set it: one cudaEventRecord per collective.
  ::setenv("TORCH_NCCL_ENABLE_TIMING", "1", /*overwrite=*/0);
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
}
#endif

#if defined(ULYSSES_WITH_NCCL)
// The event ProcessGroupNCCL records on its NCCL stream just before it launches the collective
// (libtorch >= 2.3, with TORCH_NCCL_ENABLE_TIMING=1, which make_nccl sets: WorkNCCL's protected
// ncclStartEvent_, read through a derived class's member pointer), so a traced range starts
// when NCCL does rather than when the compute stream issued it (NCCL's stream may still be
// busy with the previous collective). nullptr for other work, older libtorch or timing off:
// the caller keeps its own mark at issue.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
namespace detail {
struct WorkNcclStart : c10d::ProcessGroupNCCL::WorkNCCL {
  static std::shared_ptr<at::cuda::CUDAEvent> of(const c10d::ProcessGroupNCCL::WorkNCCL& w) {
    return w.*(&WorkNcclStart::ncclStartEvent_);
  }
};
}  // namespace detail
inline std::shared_ptr<at::cuda::CUDAEvent> nccl_start_event(c10d::Work& work) {
  const auto* w = dynamic_cast<const c10d::ProcessGroupNCCL::WorkNCCL*>(&work);
  if (!w) return nullptr;
  auto ev = detail::WorkNcclStart::of(*w);
  return ev && ev->isCreated() ? ev : nullptr;
}
#else
inline std::shared_ptr<at::cuda::CUDAEvent> nccl_start_event(c10d::Work&) { return nullptr; }
#endif
#endif

// End of a process group's life. shutdown: clean exit after the last collective (NCCL
// destroys its communicators; libtorch 2.x warns at exit when this was not done).
// abort: failure path, never blocks on peers (ncclCommAbort). ProcessGroupNCCL has both
// (no-argument calls; 2.3/2.4 take an optional reason) from libtorch 2.3; before that, and
// for Gloo (no abort API), nothing is called here and Comm drops the group without
// destroying it on abort. Returns whether the backend did something.
inline bool shutdown_backend(const c10::intrusive_ptr<Backend>& pg) {
#if defined(ULYSSES_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg.get())) {
    nccl->shutdown();
    return true;
  }
#else
  (void)pg;
#endif
  return false;
}
inline bool abort_backend(const c10::intrusive_ptr<Backend>& pg) {
#if defined(ULYSSES_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg.get())) {
    nccl->abort();
    return true;
  }
#else
  (void)pg;
#endif
  return false;
}

// Makes CUDA device `index` this process's current device (before any process group or
// CUDA tensor exists, so NCCL and the caching allocator use it, not GPU 0).
inline void set_cuda_device(int index) {
#if defined(ULYSSES_WITH_NCCL)
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  throw std::runtime_error("cuda:" + std::to_string(index) + " requested but this engine was built without CUDA");
#endif
}

// CUDA's caching allocator as memory counting needs it (memory_categories.cpp). Its trace hook
// attaches to the per-device allocators that exist when it is called, and those exist only
// once CUDA is initialised (lazily, at the first CUDA tensor): cuda_lazy_init first.
// libtorch >= 2.1 CUDA builds; elsewhere no hook (false, "").
inline constexpr bool cuda_block_tracker_exists() {
#if defined(ULYSSES_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
  return true;
#else
  return false;
#endif
}
// Initialises CUDA and its caching allocator for cuda:`device` (a 1-byte tensor made there).
inline void cuda_lazy_init(int device) {
#if defined(ULYSSES_WITH_NCCL)
  (void)at::empty({1}, at::TensorOptions().dtype(at::kByte).device(
                           torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device))));
#else
  (void)device;
#endif
}
// Whether the caching allocator has been initialised, and its backend's name ("native",
// "cudaMallocAsync", "pluggable"); "" where there is none.
inline bool cuda_allocator_initialized() {
#if defined(ULYSSES_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
  auto* a = c10::cuda::CUDACachingAllocator::get();
  return a != nullptr && a->initialized();
#else
  return false;
#endif
}
inline std::string cuda_allocator_name() {
#if defined(ULYSSES_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
  auto* a = c10::cuda::CUDACachingAllocator::get();
  return a ? a->name() : std::string();
#else
  return std::string();
#endif
}

// Every block the CUDA caching allocator hands out or takes back, as it happens, on the thread
// that asked (libtorch >= 2.1: attachAllocatorTraceTracker; its callbacks run under the
// allocator's lock and must not call into PyTorch). `on_block(device, addr, bytes, alloc)`:
// alloc = true for a block given out (TraceEntry ALLOC), false when its free completes
// (FREE_COMPLETED: a block still used by another stream is freed later than requested).
// Returns false where the hook does not exist (CPU builds, libtorch 1.13): no categories there.
// Only for the native backend, after cuda_lazy_init (the cudaMallocAsync backend throws).
inline bool attach_cuda_block_tracker(std::function<void(int, uintptr_t, int64_t, bool)> on_block) {
#if defined(ULYSSES_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
  namespace cca = c10::cuda::CUDACachingAllocator;
  cca::attachAllocatorTraceTracker([on_block](const cca::TraceEntry& te) {
    if (te.action_ == cca::TraceEntry::ALLOC || te.action_ == cca::TraceEntry::FREE_COMPLETED)
      on_block(static_cast<int>(te.device_), static_cast<uintptr_t>(te.addr_), static_cast<int64_t>(te.size_),
               te.action_ == cca::TraceEntry::ALLOC);
  });
  return true;
#else
  (void)on_block;
  return false;
#endif
}

// Device memory of a CUDA device: caching allocator's allocated / reserved / peak bytes.
// Returns false on CPU builds or devices.
inline bool cuda_memory(const torch::Device& d, int64_t* allocated, int64_t* reserved, int64_t* peak) {
#if defined(ULYSSES_WITH_NCCL)
  if (!d.is_cuda()) return false;
  const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
  // Index 0 is the aggregate of every pool in every version (StatType is not exported
  // by libtorch 2.x headers).
  constexpr size_t all = 0;
  *allocated = st.allocated_bytes[all].current;
  *reserved = st.reserved_bytes[all].current;
  *peak = st.allocated_bytes[all].peak;
  return true;
#else
  (void)d;
  (void)allocated;
  (void)reserved;
  (void)peak;
  return false;
#endif
}

// Activation offload's copies (host_copy.hpp): CUDA's streams and events on CUDA builds.
#if defined(ULYSSES_WITH_NCCL)
struct CudaCopyOps {
  static constexpr bool kDevice = true;
  using Stream = c10::cuda::CUDAStream;
  using Event = std::shared_ptr<c10::Event>;
  static bool on_device(const at::Tensor& x) { return x.is_cuda(); }
  static int device_of(const at::Tensor& x) { return x.device().index(); }
  static Stream current(int dev) { return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(dev)); }
  // A stream of its own (not one of the pool's, which NCCL's and other side work share round robin).
  static Stream new_side_stream(int dev) {
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(dev));
    cudaStream_t s = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return c10::cuda::getStreamFromExternal(s, static_cast<c10::DeviceIndex>(dev));  // kept for the process
  }
  static Event record(const Stream& s) {
    auto e = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
    e->record(s);
    return e;
  }
  static void wait(const Event& e, const Stream& s) { e->block(s); }
  static at::Tensor to_host(const Stream& s, const at::Tensor& x) {
    auto h = at::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
    c10::cuda::CUDAStreamGuard g(s);
    h.copy_(x, /*non_blocking=*/true);
    return h;
  }
  static at::Tensor empty_on_device(const at::Tensor& host, int dev) {
    // allocated on the current stream (the consumer's pool)
    return at::empty(host.sizes(),
                     host.options().device(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dev))));
  }
  static void copy(const Stream& s, at::Tensor& dst, const at::Tensor& src) {
    c10::cuda::CUDAStreamGuard g(s);
    dst.copy_(src, /*non_blocking=*/true);
  }
  static void record_stream(const at::Tensor& t, const Stream& s) { t.record_stream(s); }
};
using HostCopy = HostCopyOn<CudaCopyOps>;
#else
using HostCopy = HostCopyOn<HostOnlyCopyOps>;
#endif

inline void synchronize(const torch::Device& d) {
#if defined(ULYSSES_WITH_NCCL)
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
#else
  (void)d;
#endif
}

}  // namespace ulysses::compat
