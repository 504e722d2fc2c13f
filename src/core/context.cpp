// The execution context: the per-thread current pointer, the process default, lazy CUDA streams.
#include "tandem/core/context.hpp"

#include "tandem/core/tensor.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem {
namespace {

// The context made current by the innermost ContextGuard on this thread (null: the default).
thread_local ExecutionContext* t_current = nullptr;

// The default context is shared by every thread without a context of its own, so its modes are
// kept per thread: one thread's NoGradGuard must not switch off another's history.
struct Modes {
  bool grad_mode = true;
  AutocastState autocast;
};
thread_local Modes t_default_modes;

}  // namespace

ExecutionContext::ExecutionContext(Device device, std::shared_ptr<ThreadPool> pool)
    : device_(device), pool_(pool ? std::move(pool) : default_context().pool_ptr()) {}

ExecutionContext::ExecutionContext(DefaultTag, std::shared_ptr<ThreadPool> pool)
    : device_(kCPU), pool_(std::move(pool)), is_default_(true) {}

ExecutionContext::~ExecutionContext() = default;

bool ExecutionContext::grad_mode() const {
  return is_default_ ? t_default_modes.grad_mode : grad_mode_;
}

void ExecutionContext::set_grad_mode(bool enabled) {
  (is_default_ ? t_default_modes.grad_mode : grad_mode_) = enabled;
}

AutocastState ExecutionContext::autocast() const {
  return is_default_ ? t_default_modes.autocast : autocast_;
}

void ExecutionContext::set_autocast(AutocastState state) {
  (is_default_ ? t_default_modes.autocast : autocast_) = state;
}

cuda::Stream& ExecutionContext::stream(std::unique_ptr<cuda::Stream>& slot, const char* what) {
  TANDEM_CHECK(device_.is_cuda(), what, ": the context's device is ", device_.str(),
               ", which has no streams");
  std::lock_guard<std::mutex> lock(stream_mu_);
  if (!slot) slot = std::make_unique<cuda::Stream>(device_.index());
  return *slot;
}

cuda::Stream& ExecutionContext::compute_stream() {
  return stream(compute_stream_, "compute_stream");
}

cuda::Stream& ExecutionContext::comm_stream() { return stream(comm_stream_, "comm_stream"); }

ExecutionContext& default_context() {
  static ExecutionContext context(ExecutionContext::DefaultTag{},
                                  std::make_shared<ThreadPool>(default_num_threads()));
  return context;
}

ExecutionContext& current_context() { return t_current ? *t_current : default_context(); }

ContextGuard::ContextGuard(ExecutionContext& context) : previous_(t_current) {
  t_current = &context;
}

ContextGuard::~ContextGuard() { t_current = previous_; }

namespace detail {
ExecutionContext* current_context_or_null() { return t_current; }
ExecutionContext* exchange_current_context(ExecutionContext* context) {
  ExecutionContext* previous = t_current;
  t_current = context;
  return previous;
}
}  // namespace detail

Device TensorOptions::device() const { return device_ ? *device_ : current_context().device(); }

}  // namespace tandem
