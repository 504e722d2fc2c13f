// The CUDA emulation's kernel side: force-included (-include) into each .cu file of src/cuda/,
// compiled by the host compiler after rewrite_launches.py turned its launches into
// tandem_emu::launch calls. Every thread of a block runs on a fiber of its own (runtime.cpp), so
// __syncthreads and warp shuffles have their real meaning: a barrier waits for the whole block, a
// shuffle for its warp. A kernel bug a GPU might run through anyway (a barrier some threads of
// the block exited before, a shuffle naming lanes that are not there; runtime.cpp lists them, a
// few stricter than CUDA) stops the program with a message instead, as does dynamic shared
// memory (not emulated). Device memory is host memory (runtime.cpp), so AddressSanitizer sees a
// kernel's access past a cudaMalloc'd segment; not one inside a segment the caching allocator
// carves into blocks (unless TANDEM_NO_CUDA_MEMORY_CACHING=1 makes every tensor a cudaMalloc of
// its own), nor one past a __shared__ array (thread-local statics).
#pragma once

#define TANDEM_CUDA_EMULATED 1  // for the kernels' few figures that the emulation sizes down
#define __host__
#define __device__
#define __global__
#define __shared__ static thread_local  // one per OS thread; a block runs on one at a time
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace tandem_emu {

/// The built-in variables of the thread running now.
struct ThreadIds {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
};
const ThreadIds& ids();

/// __syncthreads: waits until every thread of the block is here.
void sync_threads();

/// One step of a warp shuffle: publishes this lane's 64 bits, waits for the lanes of `mask`,
/// returns lane `lane + delta`'s (this lane's own when that is past the warp).
uint64_t shuffle_down(unsigned mask, uint64_t bits, unsigned delta);

/// Queues body(state) as every thread of a grid x block launch on `stream`, its blocks one after
/// another on the thread that runs the stream's work (the calling one when the stream is idle);
/// a bad configuration is the launch's error (cudaGetLastError). `name` (the kernel's, for
/// messages) must outlive the program's kernels.
void run(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, const char* name,
         void (*body)(void*), std::shared_ptr<void> state);

/// What `kernel<<<grid, block, shared_bytes, stream>>>(args...)` becomes (rewrite_launches.py):
/// the arguments evaluated once (and kept until the kernel ran), `call` applying the kernel to
/// them in each thread.
/// The state is held through a plain function-pointer deleter, so that every launch shares one
/// shared_ptr control block type: each kernel instantiation adds only its own few functions,
/// which keeps the emulated build of ~400 launches a file from compiling shared_ptr's machinery
/// for each.
template <typename Tuple, typename F>
void launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Tuple args, F call) {
  using State = std::pair<Tuple, F>;
  void (*destroy)(void*) = [](void* p) { delete static_cast<State*>(p); };
  std::shared_ptr<void> state(static_cast<void*>(new State(std::move(args), call)), destroy);
  run(
      grid, block, shared_bytes, stream, name,
      [](void* p) {
        auto& s = *static_cast<State*>(p);
        std::apply(s.second, s.first);
      },
      std::move(state));
}

}  // namespace tandem_emu

#define threadIdx (::tandem_emu::ids().thread)
#define blockIdx (::tandem_emu::ids().block)
#define blockDim (::tandem_emu::ids().block_dim)
#define gridDim (::tandem_emu::ids().grid_dim)

inline void __syncthreads() { ::tandem_emu::sync_threads(); }

// Device memory is host memory, coherent between the OS threads that run kernels: a fence is the
// host's, and a load past the SMs' L1 a plain one.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  if (width != 32) __builtin_trap();  // not emulated (nothing uses it)
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = ::tandem_emu::shuffle_down(mask, bits, delta);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// Atomics: real ones, as two OS threads may run kernels on the same memory.
template <typename T>
T atomicAdd(T* address, T v) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(address, v, __ATOMIC_RELAXED);
  } else {  // f32, f64; f16 and bf16 through f32, rounded once
    T old = *address;
    T want;
    do {
      if constexpr (std::is_floating_point_v<T>) {
        want = old + v;
      } else {
        want = static_cast<T>(static_cast<float>(old) + static_cast<float>(v));
      }
    } while (!__atomic_compare_exchange(address, &old, &want, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
    return old;
  }
}
template <typename T>
T atomicMin(T* address, T v) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(address, &old, v, false, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T v) {
  __atomic_compare_exchange_n(address, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}

// Float intrinsics with an explicit rounding: the host's IEEE operations (the build does not
// contract them).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
