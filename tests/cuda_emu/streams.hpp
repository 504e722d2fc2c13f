// What the CUDA emulation's library stand-ins (cublas.cpp, cudnn.cpp, nccl.cpp) take from its
// runtime (runtime.cpp): the streams' queues and the device memory's bookkeeping.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace tandem_emu {

/// Runs `op` on `stream` after the work queued there before it, and returns once it ran: a
/// library call whose host arguments (alpha, beta, descriptors) are read during the call.
void run_on_stream(cudaStream_t stream, const std::function<void()>& op);

/// TANDEM_CUDA_EMU_HOST_ONLY=1: kernels and library calls return at once without computing
/// anything (memory keeps what copies and memsets put there): a step's time is then the host's
/// side of it, tandem's dispatch and the emulated runtime's calls, to time and profile on a
/// machine without a GPU. Results are meaningless, and a check read back from the device reads
/// whatever the memory holds (bench_resnet runs so; the example stops at cross_entropy's target
/// check). Tests must not run so.
bool host_only();

/// run_on_stream for a library call: `call()` on `stream`, its status returned.
template <typename Call>
auto call_on_stream(cudaStream_t stream, Call call) {
  decltype(call()) status{};
  if (host_only()) return status;  // success, nothing computed
  run_on_stream(stream, [&] { status = call(); });
  return status;
}

/// Queues `op` on `stream` and returns at once: work that waits for other threads (an NCCL
/// collective waiting for its peers), so it always runs on the stream's own thread, holding back
/// the stream's later work as a GPU's kernel would.
void enqueue_waiting(cudaStream_t stream, std::function<void()> op);

/// The device a stream belongs to.
int device_of_stream(cudaStream_t stream);

/// The device whose cudaMalloc'd allocation holds all of [p, p + bytes), or -1.
int device_of_memory(const void* p, size_t bytes);

}  // namespace tandem_emu
