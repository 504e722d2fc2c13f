// ExecutionContext: one rank's per-thread state (device, CPU thread pool, CUDA streams, grad mode,
// autocast state), current per thread, so that nothing in tandem is a process-wide "current".
#pragma once

#include <memory>
#include <mutex>

#include "tandem/core/device.hpp"
#include "tandem/core/dtype.hpp"

namespace tandem {

class ThreadPool;
namespace cuda {
class Stream;
}

/// The autocast state of a context: whether autocast is on, and the narrow dtype (f16 or bf16)
/// that conv and matmul then run in. A placeholder: the amp issue gives it its policy.
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::f16;
};

/// What a rank's thread works with. `comm::run_group` gives each rank's thread its own; a thread
/// that never made one current uses the process default context (`default_context()`).
///
/// A context is meant to be current on one thread at a time; while that thread is inside
/// `parallel_for`, the pool workers running its chunks see it as their current context too.
/// Several contexts may share one pool (give each its own pool for a slice of the cores).
/// Not copyable: it owns streams and is referred to by address.
class ExecutionContext {
 public:
  /// A context on `device` whose CPU work runs on `pool`; a null pool shares the default context's.
  explicit ExecutionContext(Device device = kCPU, std::shared_ptr<ThreadPool> pool = nullptr);
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  /// The device this context's new tensors go to when their inputs do not say.
  Device device() const { return device_; }
  /// The CPU threads this context's kernels use (`parallel_for`, `set_num_threads`).
  ThreadPool& pool() const { return *pool_; }
  const std::shared_ptr<ThreadPool>& pool_ptr() const { return pool_; }

  /// Whether ops record autograd history (default true); see `NoGradGuard`. The default context
  /// keeps this per thread, as every thread without a context of its own shares it.
  bool grad_mode() const;
  void set_grad_mode(bool enabled);
  /// The autocast state (default off); per thread in the default context, like grad mode.
  AutocastState autocast() const;
  void set_autocast(AutocastState state);

  /// The device's compute and communication streams, created on first use. Only for a CUDA
  /// device: throws ValueError on a CPU context (and NotImplementedError in a build without CUDA).
  cuda::Stream& compute_stream();
  cuda::Stream& comm_stream();

  /// True for the process default context.
  bool is_default() const { return is_default_; }

 private:
  struct DefaultTag {};
  ExecutionContext(DefaultTag, std::shared_ptr<ThreadPool> pool);
  friend ExecutionContext& default_context();
  cuda::Stream& stream(std::unique_ptr<cuda::Stream>& slot, const char* what);

  Device device_;
  std::shared_ptr<ThreadPool> pool_;
  bool is_default_ = false;
  bool grad_mode_ = true;
  AutocastState autocast_;
  std::mutex stream_mu_;  // streams are created lazily, possibly from a pool worker's chunk
  std::unique_ptr<cuda::Stream> compute_stream_, comm_stream_;
};

/// The process default context: the main thread's, and that of every thread that never made one
/// current. CPU, with a pool of TANDEM_NUM_THREADS threads (else the hardware concurrency).
ExecutionContext& default_context();

/// The calling thread's current context: the innermost ContextGuard's, else the default context.
ExecutionContext& current_context();

/// Makes `context` current on this thread for its scope and then restores the previous one.
/// `context` must outlive the guard.
class ContextGuard {
 public:
  explicit ContextGuard(ExecutionContext& context);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  ExecutionContext* previous_;
};

namespace detail {
/// The calling thread's explicitly set context (null: the default), and a swap of it; the thread
/// pool uses these to run a caller's chunks under the caller's context.
ExecutionContext* current_context_or_null();
ExecutionContext* exchange_current_context(ExecutionContext* context);
}  // namespace detail

}  // namespace tandem
