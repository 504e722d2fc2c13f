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

/// run_on_stream for a library call: `call()` on `stream`, its status returned.
template <typename Call>
auto call_on_stream(cudaStream_t stream, Call call) {
  decltype(call()) status{};
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
