// The CUDA emulation's own checks, built as the kernel files are (launches rewritten, emu.hpp
// force-included): `selftest ok` reduces with warp shuffles, shared memory and __syncthreads and
// must get the closed form; each other scenario is a kernel bug the emulation must stop with its
// message (tests/CMakeLists.txt matches them).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

constexpr int kThreads = 128;

// Sum of in[0, n) into *out: a block reduction per grid-stride pass, one atomic per block.
__global__ void block_sum(unsigned long long* out, const unsigned* in, int n) {
  __shared__ unsigned long long warps[kThreads / 32];
  unsigned long long v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    v += in[i];
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) v += warps[w];
    atomicAdd(out, v);
  }
}

// Half the block leaves before the barrier the other half waits at.
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Thread 0 leaves at once; the others meet at a barrier.
__global__ void barrier_thread0_skips(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// A full-warp shuffle in a block of 48 threads: lanes 16 to 31 of its second warp are not there.
__global__ void shuffle_past_block(int* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "ok";
  int* flags = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&flags), 64 * sizeof(int));
  if (std::strcmp(what, "ok") == 0) {
    const int n = 100003;
    unsigned* in = nullptr;
    unsigned long long* sum = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&in), n * sizeof(unsigned));
    cudaMalloc(reinterpret_cast<void**>(&sum), sizeof(unsigned long long));
    for (int i = 0; i < n; ++i) in[i] = static_cast<unsigned>(i);  // device memory is host memory
    *sum = 0;
    block_sum<<<37, kThreads, 0, nullptr>>>(sum, in, n);
    const unsigned long long want = static_cast<unsigned long long>(n) * (n - 1) / 2;
    if (cudaGetLastError() != cudaSuccess || *sum != want) {
      std::printf("block_sum: got %llu, want %llu\n", *sum, want);
      return 1;
    }
    block_sum<<<1, 2048, 0, nullptr>>>(sum, in, n);  // more threads than a block may have
    if (cudaGetLastError() != cudaErrorInvalidConfiguration) {
      std::printf("a block of 2048 threads was not refused\n");
      return 1;
    }
    std::printf("ok\n");
    return 0;
  }
  if (std::strcmp(what, "divergent") == 0) divergent_barrier<<<2, 64, 0, nullptr>>>(flags);
  if (std::strcmp(what, "thread0") == 0) barrier_thread0_skips<<<1, 64, 0, nullptr>>>(flags);
  if (std::strcmp(what, "shuffle") == 0) shuffle_past_block<<<1, 48, 0, nullptr>>>(flags);
  std::printf("%s: the emulation did not stop the kernel\n", what);
  return 1;
}
