// vramtrace's observer shim for PyTorch.
//
// Built by the vramtrace Python package against the installed torch (see
// vramtrace/_shim.py), loaded with ctypes, and handed the sink of
// libvramtrace_recorder (recorder-ffi/src/observe/). It changes nothing in
// PyTorch: it attaches a trace tracker to PyTorch's own CUDA caching
// allocator and forwards every entry, and a RecordFunction callback that
// turns record_function ranges into phases and tells which autograd node a
// backward thread runs. The tracker runs under the allocator's lock, so
// nothing here takes the GIL or calls into Python. It also watches the
// gradients of an optimizer's parameters (vramtrace_shim_watch_gradients)
// and tags each new one: the per-step part of the categories walk
// (vramtrace/_categories.py), which in Python cost a GPT-2 step 1%.
//
// The ABI with the library is plain C (vramtrace_sink.h, generated from
// observe/abi.rs, version kSinkAbi); the ABI with torch is whatever the headers
// it is compiled against say, which is why it is compiled on the user's
// machine.

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#if __has_include(<c10/util/ApproximateClock.h>)
#include <c10/util/ApproximateClock.h>
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace CCA = c10::cuda::CUDACachingAllocator;

// The sink's structures and constants, generated from observe/abi.rs by
// cbindgen (recorder-ffi/tests/sink_header.rs keeps it in step).
#include "vramtrace_sink.h"

// The layout observe/abi.rs asserts too: a header of another layout (an edited
// one, or a platform whose C ABI differs) fails here rather than at run time.
static_assert(sizeof(vt_event) == 64, "vt_event");
static_assert(offsetof(vt_event, device) == 4 && offsetof(vt_event, addr) == 8 &&
                  offsetof(vt_event, size) == 16 && offsetof(vt_event, stream) == 24 &&
                  offsetof(vt_event, counter) == 32 && offsetof(vt_event, context) == 40 &&
                  offsetof(vt_event, pool) == 48,
              "vt_event fields");
static_assert(sizeof(vt_block) == 24, "vt_block");
static_assert(offsetof(vt_block, requested) == 8 && offsetof(vt_block, state) == 16 &&
                  offsetof(vt_block, reserved) == 20,
              "vt_block fields");
static_assert(sizeof(vt_segment) == 64, "vt_segment");
static_assert(offsetof(vt_segment, expandable) == 4 && offsetof(vt_segment, addr) == 8 &&
                  offsetof(vt_segment, size) == 16 && offsetof(vt_segment, stream) == 24 &&
                  offsetof(vt_segment, blocks) == 32 && offsetof(vt_segment, block_count) == 40 &&
                  offsetof(vt_segment, pool) == 48,
              "vt_segment fields");
static_assert(sizeof(vt_sink) == 56, "vt_sink");
static_assert(offsetof(vt_sink, event) == 8 && offsetof(vt_sink, segment) == 16 &&
                  offsetof(vt_sink, snapshot_done) == 24 && offsetof(vt_sink, phase) == 32 &&
                  offsetof(vt_sink, tag) == 40 && offsetof(vt_sink, device_memory) == 48,
              "vt_sink fields");

namespace {

constexpr uint32_t kSinkAbi = VT_SINK_ABI;
// The category code of a gradient (vramtrace_format::Category::Gradient).
constexpr uint8_t kGradient = 2;
constexpr uint32_t kSnapshot = VT_KIND_SNAPSHOT;
constexpr uint32_t kIgnored = UINT32_MAX;
constexpr int kMaxNodes = 64;

std::atomic<const vt_sink*> g_sink{nullptr};
std::atomic<bool> g_phases{false};
std::atomic<bool> g_nodes{false};
std::once_flag g_tracker_once;
std::mutex g_callback_mutex;
// The scopes the RecordFunction callback is registered for (bit 0: user
// ranges, bit 1: backward nodes), 0 when none is.
int g_callback_scopes = 0;
at::CallbackHandle g_callback = 0;
std::string g_error;

// The autograd nodes this thread is running, innermost last.
thread_local const char* t_nodes[kMaxNodes];
thread_local int t_depth = 0;

// The event kinds of libvramtrace_recorder (format::EventKind codes).
uint32_t kind_of(CCA::TraceEntry::Action action) {
  switch (action) {
    case CCA::TraceEntry::ALLOC:
      return 0;
    case CCA::TraceEntry::FREE_REQUESTED:
      return 1;
    case CCA::TraceEntry::FREE_COMPLETED:
      return 2;
    case CCA::TraceEntry::SEGMENT_ALLOC:
      return 3;
    case CCA::TraceEntry::SEGMENT_FREE:
      return 4;
    case CCA::TraceEntry::SEGMENT_MAP:
      return 5;
    case CCA::TraceEntry::SEGMENT_UNMAP:
      return 6;
    case CCA::TraceEntry::OOM:
      return 7;
    case CCA::TraceEntry::SNAPSHOT:
      return kSnapshot;
    default:
      return kIgnored;
  }
}

// The time-stamp counter reading PyTorch stamped the entry with, where its
// approximate clock is that counter (then the library converts it instead
// of reading a clock again); 0 otherwise.
template <typename T, typename = void>
struct has_counter_time : std::false_type {};
template <typename T>
struct has_counter_time<T, std::void_t<decltype(std::declval<const T&>().time_.approx_t_)>>
    : std::true_type {};

template <typename T>
uint64_t counter_of(const T& te) {
#if defined(C10_RDTSC)
  if constexpr (has_counter_time<T>::value) {
    return static_cast<uint64_t>(te.time_.approx_t_);
  }
#endif
  (void)te;
  return 0;
}

// The pool PyTorch says the entry's block or segment belongs to
// (`TraceEntry::mempool_`, in torch 2.6 and later), as the sink's pair;
// (0, 0), the default pools, where the torch compiled against has no such
// field.
template <typename T, typename = void>
struct has_mempool : std::false_type {};
template <typename T>
struct has_mempool<T, std::void_t<decltype(std::declval<const T&>().mempool_)>>
    : std::true_type {};

template <typename T>
void pool_of(const T& te, uint64_t* pool) {
  if constexpr (has_mempool<T>::value) {
    pool[0] = static_cast<uint64_t>(te.mempool_.first);
    pool[1] = static_cast<uint64_t>(te.mempool_.second);
  } else {
    (void)te;
    pool[0] = 0;
    pool[1] = 0;
  }
}

// The same for a segment of the allocator's snapshot
// (`SegmentInfo::owner_private_pool_id`).
template <typename T, typename = void>
struct has_owner_pool : std::false_type {};
template <typename T>
struct has_owner_pool<T, std::void_t<decltype(std::declval<const T&>().owner_private_pool_id)>>
    : std::true_type {};

template <typename T>
void segment_pool_of(const T& segment, uint64_t* pool) {
  if constexpr (has_owner_pool<T>::value) {
    pool[0] = static_cast<uint64_t>(segment.owner_private_pool_id.first);
    pool[1] = static_cast<uint64_t>(segment.owner_private_pool_id.second);
  } else {
    (void)segment;
    pool[0] = 0;
    pool[1] = 0;
  }
}

// Measures `device`'s free and total memory (cudaMemGetInfo) and gives them
// to the sink. Runs in the tracker, on the thread that asked, under the
// allocator's lock: no GIL, no allocation. The device is normally current;
// if not, it is made current for the query and the caller's restored. A
// failed query records nothing and leaves no CUDA error behind for
// PyTorch's next check to find. `releasing`: the bytes the entry's segment
// gives back after the entry (PyTorch records segment_free just before its
// cudaFree), counted as free already, so that the sample is the card just
// after the event, as for the other kinds.
void sample_device_memory(const vt_sink* sink, int device, uint64_t releasing) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const bool switched = current != device;
  if (switched && cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (switched) {
    (void)cudaSetDevice(current);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  uint64_t free_after = static_cast<uint64_t>(free_bytes) + releasing;
  if (free_after > total_bytes) {
    free_after = static_cast<uint64_t>(total_bytes);
  }
  sink->device_memory(device, free_after, static_cast<uint64_t>(total_bytes));
}

void on_entry(const CCA::TraceEntry& te) {
  const vt_sink* sink = g_sink.load(std::memory_order_acquire);
  if (sink == nullptr) {
    return;
  }
  const uint32_t kind = kind_of(te.action_);
  if (kind == kIgnored) {
    return;
  }
  const int depth = t_depth;
  vt_event e{kind,
             static_cast<int32_t>(te.device_),
             static_cast<uint64_t>(te.addr_),
             static_cast<uint64_t>(te.size_),
             static_cast<uint64_t>(reinterpret_cast<uintptr_t>(te.stream_)),
             counter_of(te),
             depth > 0 && depth <= kMaxNodes ? t_nodes[depth - 1] : nullptr,
             {0, 0}};
  pool_of(te, e.pool);
  // After a segment event or an OOM (and a device's first event): the
  // card's memory right after it, next in the trace.
  if (sink->event(&e) != 0) {
    const bool freeing = te.action_ == CCA::TraceEntry::SEGMENT_FREE;
    sample_device_memory(sink, static_cast<int>(te.device_),
                         freeing ? static_cast<uint64_t>(te.size_) : 0);
  }
}

std::unique_ptr<at::ObserverContext> on_range_start(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    if (g_nodes.load(std::memory_order_relaxed)) {
      if (t_depth < kMaxNodes) {
        t_nodes[t_depth] = fn.name();
      }
      t_depth++;
    }
  } else if (g_phases.load(std::memory_order_relaxed)) {
    const vt_sink* sink = g_sink.load(std::memory_order_acquire);
    if (sink != nullptr) {
      sink->phase(1, fn.name());
    }
  }
  return nullptr;
}

void on_range_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    if (g_nodes.load(std::memory_order_relaxed) && t_depth > 0) {
      t_depth--;
    }
  } else if (g_phases.load(std::memory_order_relaxed)) {
    const vt_sink* sink = g_sink.load(std::memory_order_acquire);
    if (sink != nullptr) {
      sink->phase(0, fn.name());
    }
  }
}

int fail(const std::exception& e) {
  g_error = e.what();
  return -1;
}

// Registers the RecordFunction callback for exactly the scopes asked for:
// any global callback makes every operator check for callbacks, so none is
// registered when neither is wanted.
void set_callback_scopes(int scopes) {
  std::lock_guard<std::mutex> guard(g_callback_mutex);
  if (scopes == g_callback_scopes) {
    return;
  }
  if (g_callback_scopes != 0) {
    at::removeCallback(g_callback);
    g_callback_scopes = 0;
  }
  if (scopes != 0) {
    std::unordered_set<at::RecordScope, std::hash<at::RecordScope>> wanted;
    if (scopes & 1) {
      wanted.insert(at::RecordScope::USER_SCOPE);
    }
    if (scopes & 2) {
      wanted.insert(at::RecordScope::BACKWARD_FUNCTION);
    }
    g_callback = at::addGlobalCallback(
        at::RecordFunctionCallback(on_range_start, on_range_end).scopes(wanted));
    g_callback_scopes = scopes;
  }
}

using ImplPtr = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// A parameter whose gradient is watched, and the gradient last tagged, both
// held weakly: the watch keeps no tensor (nor its memory) alive, and a
// gradient still alive is the one tagged exactly when it is the same object.
struct Watched {
  WeakImpl param;
  WeakImpl grad;
};

struct GradientWatch {
  std::vector<Watched> params;
  std::vector<uint64_t> addrs;
  std::vector<uint8_t> codes;
};

}  // namespace

extern "C" {

// The sink ABI this shim speaks.
uint32_t vramtrace_shim_abi() { return kSinkAbi; }

// 1 if events carry PyTorch's time-stamp counter readings (see counter_of).
int vramtrace_shim_counter_time() {
#if defined(C10_RDTSC)
  return has_counter_time<CCA::TraceEntry>::value ? 1 : 0;
#else
  return 0;
#endif
}

// The message of the last failed call.
const char* vramtrace_shim_error() { return g_error.c_str(); }

// Starts forwarding to `sink`: attaches the trace tracker (once per
// process: trackers cannot be detached) and the RecordFunction callback for
// record_function ranges (`phases`) and backward nodes (`backward_names`).
// CUDA must be initialised. Returns 0; -2 for a sink of another ABI; -1 on
// a torch error (see vramtrace_shim_error).
int vramtrace_shim_attach(const vt_sink* sink, int phases, int backward_names) {
  if (sink == nullptr || sink->abi != kSinkAbi) {
    g_error = "libvramtrace_recorder's sink has another ABI than this shim";
    return -2;
  }
  try {
    g_phases.store(phases != 0, std::memory_order_relaxed);
    g_nodes.store(backward_names != 0, std::memory_order_relaxed);
    set_callback_scopes((phases != 0 ? 1 : 0) | (backward_names != 0 ? 2 : 0));
    g_sink.store(sink, std::memory_order_release);
    std::call_once(g_tracker_once, [] { CCA::attachAllocatorTraceTracker(&on_entry); });
    return 0;
  } catch (const std::exception& e) {
    g_sink.store(nullptr, std::memory_order_release);
    return fail(e);
  }
}

// Stops forwarding. The tracker stays attached (torch cannot detach one) and
// does nothing; the RecordFunction callback is removed.
void vramtrace_shim_detach() {
  g_sink.store(nullptr, std::memory_order_release);
  g_phases.store(false, std::memory_order_relaxed);
  g_nodes.store(false, std::memory_order_relaxed);
  try {
    set_callback_scopes(0);
  } catch (const std::exception&) {
  }
}

// Watches the gradients of `count` parameters, given as the addresses of
// their TensorImpl (Python's `tensor._cdata`, of plain tensors and
// parameters, alive during the call). Returns the watch, or NULL (see
// vramtrace_shim_error).
void* vramtrace_shim_watch_gradients(const uint64_t* impls, uint64_t count) {
  try {
    auto watch = std::make_unique<GradientWatch>();
    watch->params.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      auto* impl = reinterpret_cast<c10::TensorImpl*>(static_cast<uintptr_t>(impls[i]));
      if (impl == nullptr) {
        continue;
      }
      ImplPtr strong = ImplPtr::unsafe_reclaim_from_nonowning(impl);
      watch->params.push_back(Watched{WeakImpl(strong), WeakImpl(ImplPtr())});
    }
    return watch.release();
  } catch (const std::exception& e) {
    g_error = e.what();
    return nullptr;
  }
}

// Ends a watch.
void vramtrace_shim_unwatch(void* watch) { delete static_cast<GradientWatch*>(watch); }

// Tags, through the sink, the gradient of each watched parameter that is a
// new tensor since the last call (a gradient made by this step's backward,
// even where the last one was), at its storage's address: the block the
// allocator gave it. Returns the number tagged (0 while nothing records), or
// -1 (see vramtrace_shim_error).
int64_t vramtrace_shim_tag_new_gradients(void* opaque) {
  auto* watch = static_cast<GradientWatch*>(opaque);
  const vt_sink* sink = g_sink.load(std::memory_order_acquire);
  if (watch == nullptr || sink == nullptr) {
    return 0;
  }
  try {
    int64_t tagged = 0;
    int device = -1;
    auto flush = [&] {
      if (!watch->addrs.empty() && sink->tag(device, watch->addrs.data(), watch->codes.data(),
                                             watch->addrs.size()) > 0) {
        tagged += static_cast<int64_t>(watch->addrs.size());
      }
      watch->addrs.clear();
      watch->codes.clear();
    };
    for (auto& w : watch->params) {
      ImplPtr p = w.param.lock();
      if (!p) {
        continue;
      }
      const at::Tensor param(std::move(p));
      const at::Tensor& g = param.grad();
      if (!g.defined()) {
        w.grad.reset();
        continue;
      }
      if (w.grad.lock().get() == g.unsafeGetTensorImpl()) {
        continue;
      }
      w.grad = WeakImpl(g.getIntrusivePtr());
      if (!g.is_cuda() || !g.has_storage()) {
        continue;
      }
      const void* base = g.storage().data_ptr().get();
      if (base == nullptr) {
        continue;
      }
      const int d = g.device().index();
      if (d != device) {
        flush();
        device = d;
      }
      watch->addrs.push_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base)));
      watch->codes.push_back(kGradient);
    }
    flush();
    return tagged;
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1;
  }
}

// Takes the allocator's snapshot and gives its segments to the sink, then
// calls its snapshot_done. Taking it puts a snapshot marker into each
// device's event stream, under the lock it reads that device's state with,
// which is how the library knows which events the state already holds.
// Returns 0, or -1 (see vramtrace_shim_error).
int vramtrace_shim_snapshot() {
  const vt_sink* sink = g_sink.load(std::memory_order_acquire);
  if (sink == nullptr) {
    g_error = "not attached";
    return -1;
  }
  try {
    const CCA::SnapshotInfo info = CCA::snapshot();
    std::vector<vt_block> blocks;
    for (const auto& segment : info.segments) {
      blocks.clear();
      for (const auto& b : segment.blocks) {
        blocks.push_back(vt_block{static_cast<uint64_t>(b.size),
                                  static_cast<uint64_t>(b.requested_size),
                                  b.allocated ? 1u : (b.active ? 2u : 0u), 0});
      }
      vt_segment s{static_cast<int32_t>(segment.device),
                   segment.is_expandable ? 1u : 0u,
                   static_cast<uint64_t>(segment.address),
                   static_cast<uint64_t>(segment.total_size),
                   static_cast<uint64_t>(reinterpret_cast<uintptr_t>(segment.stream)),
                   blocks.data(),
                   blocks.size(),
                   {0, 0}};
      segment_pool_of(segment, s.pool);
      sink->segment(&s);
    }
    sink->snapshot_done();
    return 0;
  } catch (const std::exception& e) {
    sink->snapshot_done();
    return fail(e);
  }
}

}  // extern "C"
