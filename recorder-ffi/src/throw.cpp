// PyTorch's pluggable allocator has no error channel: a NULL from the
// allocation function becomes a tensor whose data pointer is NULL
// (pytorch/pytorch#133280), and the first kernel that touches it faults the
// whole CUDA context. An exception thrown from the allocation function is
// what its own caching allocator does on OOM; PyTorch's bindings turn a
// std::exception into a Python RuntimeError carrying what().
//
// Called from Rust frames declared "C-unwind", which let a foreign exception
// pass through them.
#include <stdexcept>
#include <string>

namespace {
struct VramtraceOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace

extern "C" [[noreturn]] void vramtrace_throw_oom(const char* message) {
  throw VramtraceOutOfMemory(std::string(message));
}
