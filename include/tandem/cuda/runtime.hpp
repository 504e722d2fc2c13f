// The CUDA runtime seen from the rest of tandem: availability, devices, streams and copies.
// Every function exists in every build; without the CUDA backend they report "not available"
// or throw NotImplementedError, so callers need no #ifdefs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tandem/core/generator.hpp"
#include "tandem/core/storage.hpp"
#include "tandem/cuda/caching_allocator.hpp"

namespace tandem::cuda {

/// True when tandem was built with its CUDA backend.
bool compiled_with_cuda();
/// True when built with CUDA and a driver and at least one GPU are present. The first call on a
/// CUDA build that finds no GPU prints one line saying tandem falls back to the CPU.
bool is_available();
/// libtorch's torch::cuda::manual_seed(_all). GPU ops draw from the one default generator, the
/// CPU's too (the same Philox stream on every device), so these seed it, as manual_seed does.
inline void manual_seed(uint64_t seed) { tandem::manual_seed(seed); }
inline void manual_seed_all(uint64_t seed) { tandem::manual_seed(seed); }
/// Whether cuDNN can run: the CUDA backend is always built with it, so whether a GPU is there.
inline bool cudnn_is_available() { return is_available(); }
/// Number of visible GPUs (0 without CUDA, driver or GPU).
int device_count();
/// GPU `device`'s PCI bus id ("0000:3b:00.0"), what NVML finds it by; empty when it cannot say.
std::string pci_bus_id(int device);
/// Makes `device` the calling thread's current GPU (cudaSetDevice). A rank's thread sets its
/// GPU once, so that each op's device guard finds it current instead of switching to it and back.
void set_device(int device);
/// The calling thread's current GPU (cudaGetDevice; libtorch's c10::cuda::current_device()).
/// tandem's ops switch to their tensors' GPU and back: they never leave it changed.
int current_device();
/// libtorch's torch::cuda::synchronize: waits until every stream of GPU `device` (the current
/// one for -1) has finished its work, as timing code does before reading a clock. Throws
/// without a GPU.
void synchronize(int device = -1);
/// A one-line description of the CUDA build (runtime, cuBLAS, cuDNN and NCCL versions).
std::string build_info();

/// The caching allocator of GPU `index` (tandem/cuda/caching_allocator.hpp): freed blocks are
/// kept and reused, so the training loop does not call cudaMalloc/cudaFree every step.
Allocator& caching_allocator(int index);
/// Its statistics: bytes allocated and reserved (and their peaks), cudaMalloc calls, retries.
AllocatorStats memory_stats(int device);
/// Gives GPU `device`'s cached, unused segments back to the driver.
void empty_cache(int device);
/// Page-locked host memory: cudaHostAlloc'd segments kept and reused through the caching
/// allocator's bookkeeping, so a loader's staging buffers cost no cudaHostAlloc/cudaFreeHost per
/// batch; a block an asynchronous copy reads is not handed out again before that copy is done.
Allocator& pinned_host_allocator();
/// Its statistics (device_allocs: cudaHostAlloc calls).
AllocatorStats pinned_memory_stats();
/// Whether `block` is the start of a block the pinned allocator handed out (false without a GPU).
bool is_pinned(const void* block);

/// TensorFloat-32 for f32 matrix products (off by default) and convolutions (on by default), as
/// PyTorch's torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32.
void set_allow_tf32_matmul(bool allow);
bool allow_tf32_matmul();
void set_allow_tf32_conv(bool allow);
bool allow_tf32_conv();
/// cuDNN algorithms chosen by timing each once per convolution shape (off: cuDNN's heuristics),
/// as PyTorch's torch.backends.cudnn.benchmark.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();
/// The most elements a cuDNN convolution call's input or output may hold (default 2^31 - 1:
/// cuDNN indexes with 32 bits). A batch whose tensors hold more is convolved in slices of the
/// batch, as PyTorch does; one sample that large is refused with NotImplementedError. Tests
/// lower it to run the slicing on small tensors.
void set_cudnn_max_elements(int64_t elements);
int64_t cudnn_max_elements();
/// Elementwise kernels over dense, aligned f32/f16/bf16 operands (and max pooling over
/// channels-last maps) move 16-byte vectors (on by default); off, every element is loaded alone,
/// as for strided operands (for comparisons).
void set_vectorized_elementwise(bool on);
bool vectorized_elementwise();

/// Starts and stops the collection of an attached CUDA profiler (cudaProfilerStart/Stop; ncu
/// --profile-from-start off, as torch.cuda.profiler.start/stop): profile a chosen step of a
/// program, not its warm-up. No-ops without a GPU.
void profiler_start();
void profiler_stop();

/// A check of values a kernel computed (cross_entropy's targets against the class count) that
/// does not stop the host: `verdict`, 8 bytes on GPU `device` that a kernel wrote (an int64, or
/// a double's bits), is copied to page-locked memory behind the calling thread's queued work,
/// and `report(bytes)`, which throws when they say the input was bad, runs at this thread's
/// next check_deferred().
/// A check read at once would make the host wait for the GPU mid-step (cross_entropy's, between
/// the forward and the backward of every training step).
void defer_check(const void* verdict, int device, std::function<void(int64_t)> report);
/// Runs the calling thread's deferred reports, oldest first, each once its copy is done (long
/// done, in a training step). tandem calls it before an optimizer changes any parameter, after
/// each read of GPU data by the host (item(), cpu()) and in Stream::synchronize(), so a bad
/// input stops the step before it changes anything. The first failing report is rethrown once
/// every report has run. No-op without a GPU.
void check_deferred();

/// Copies bytes between any two devices (host-host included); synchronous.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
/// Copies `nbytes` from host memory `src` to `dst` on GPU `dst_device`. When `src` lies in a
/// block of the pinned allocator that starts at `src_block` (the storage's data pointer), the
/// copy is queued on the device's compute stream and this returns at once; the block is not
/// reused until the copy is done. Otherwise the same as copy_bytes.
void copy_to_device_async(void* dst, Device dst_device, const void* src, const void* src_block,
                          size_t nbytes);

/// A CUDA handle (a cudaStream_t, a cudaEvent_t) and the call that releases it when its owner
/// goes: what makes Stream and Event movable, not copyable.
using CudaHandle = std::unique_ptr<void, void (*)(void*)>;

/// A CUDA stream owned by tandem (compute or communication). Movable, not copyable.
class Stream {
 public:
  explicit Stream(int device);
  void* handle() const { return handle_.get(); }  // a cudaStream_t
  int device() const { return device_; }
  void synchronize() const;

 private:
  CudaHandle handle_{nullptr, nullptr};
  int device_ = 0;
};

/// A CUDA event of GPU `device` for timing its work (torch.cuda.Event(enable_timing=True)).
/// Movable, not copyable.
class Event {
 public:
  explicit Event(int device);
  void* handle() const { return handle_.get(); }  // a cudaEvent_t
  /// Marks the point the compute stream has reached: what tandem queued there so far.
  void record();
  /// Whether the device has passed the last record (cudaEventQuery); waits for nothing.
  bool query() const;
  /// Seconds of the device's time from `earlier` to this event, once both are recorded; waits
  /// until this one has passed (cudaEventSynchronize, then cudaEventElapsedTime).
  double seconds_since(const Event& earlier) const;

 private:
  CudaHandle handle_{nullptr, nullptr};  // a cudaEvent_t
  int device_ = 0;
};

/// Marks the caching-allocator block at `ptr` (GPU `device`) as used on `stream` too: when it
/// is freed, it is not reused until the work queued on `stream` by then has finished.
void record_stream(void* ptr, int device, const Stream& stream);

}  // namespace tandem::cuda
