// The CUDA emulation's own checks, built as the kernel files are (launches rewritten, emu.hpp
// force-included): `selftest ok` reduces with warp shuffles, shared memory and __syncthreads and
// must get the closed form; `selftest nccl` (two devices) checks streams, events and the NCCL
// stand-in against closed forms; `selftest order` that TANDEM_CUDA_EMU_ORDER sets the order of
// the threads' and blocks' turns; each other scenario is a kernel bug the emulation must stop
// with its message (tests/CMakeLists.txt matches them).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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

// A race on purpose: each thread writes its index into shared memory, then reads its
// neighbour's without a barrier between, so what it sees is the order of the threads' turns
// (-1 when the neighbour has not written yet). Each block also takes a ticket, the order of the
// blocks' turns.
constexpr int kRaceThreads = 64, kRaceBlocks = 1000;
__global__ void neighbour_race(int* seen_out, unsigned* tickets, unsigned* counter) {
  __shared__ int seen[kRaceThreads];
  seen[threadIdx.x] = -1;
  __syncthreads();
  seen[threadIdx.x] = static_cast<int>(threadIdx.x);
  seen_out[blockIdx.x * kRaceThreads + threadIdx.x] = seen[(threadIdx.x + 1) % kRaceThreads];
  if (threadIdx.x == 0) tickets[blockIdx.x] = atomicAdd(counter, 1u);
}

__global__ void scale(float* x, int n, float factor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::printf("%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

// Two ranks on cuda:0 and cuda:1. Rank 0's allreduce holds its stream until rank 1 calls, while
// the host goes on: the kernel queued behind it has not run, its event is not ready (which is
// also the thread's last error, as with CUDA), and the legacy stream that waits on that event
// holds its copy back. Once rank 1 calls, both get the closed form. Then the ranks call
// different collectives as the same one: both communicators report it, naming both calls, and
// their aborts let the streams go on.
int nccl_check() {
  constexpr int n = 1000;
  int devices = 0;
  EXPECT(cudaGetDeviceCount(&devices) == cudaSuccess && devices >= 2);
  ncclUniqueId id;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comms[2];
  cudaStream_t streams[2];
  float* x[2];
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclGroupStart();
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(r);
    const ncclResult_t init = ncclCommInitRankConfig(&comms[r], 2, id, r, &config);
    EXPECT(init == ncclSuccess || init == ncclInProgress);
  }
  EXPECT(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ncclResult_t state = ncclInProgress;
    EXPECT(ncclCommGetAsyncError(comms[r], &state) == ncclSuccess && state == ncclSuccess);
    cudaSetDevice(r);
    EXPECT(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess);
    EXPECT(cudaMalloc(reinterpret_cast<void**>(&x[r]), n * sizeof(float)) == cudaSuccess);
    for (int i = 0; i < n; ++i) x[r][i] = static_cast<float>(i * (r + 1));  // host memory here
  }
  float* copy = nullptr;
  cudaSetDevice(0);
  EXPECT(cudaMalloc(reinterpret_cast<void**>(&copy), n * sizeof(float)) == cudaSuccess);
  cudaEvent_t reduced;
  EXPECT(cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming) == cudaSuccess);
  EXPECT(ncclAllReduce(x[0], x[0], n, ncclFloat32, ncclSum, comms[0], streams[0]) == ncclSuccess);
  scale<<<(n + 127) / 128, 128, 0, streams[0]>>>(x[0], n, 2.0f);
  EXPECT(cudaEventRecord(reduced, streams[0]) == cudaSuccess);
  EXPECT(cudaStreamWaitEvent(cudaStreamLegacy, reduced, 0) == cudaSuccess);
  EXPECT(cudaMemcpyAsync(copy, x[0], n * sizeof(float), cudaMemcpyDeviceToDevice,
                         cudaStreamLegacy) == cudaSuccess);
  EXPECT(cudaEventQuery(reduced) == cudaErrorNotReady);
  EXPECT(cudaGetLastError() == cudaErrorNotReady);
  EXPECT(cudaGetLastError() == cudaSuccess);
  EXPECT(x[0][7] == 7.0f && copy[7] != 14.0f * 3);  // neither the kernel nor the copy ran
  // An event recorded again, on an idle stream: a query sees the new record, done; a stream that
  // waited on the first record still waits.
  cudaStream_t waiter, idle;
  EXPECT(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamWaitEvent(waiter, reduced, 0) == cudaSuccess);
  int* flag = nullptr;
  EXPECT(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)) == cudaSuccess);
  *flag = 1;  // host memory here; nothing else uses it
  EXPECT(cudaMemsetAsync(flag, 0, sizeof(int), waiter) == cudaSuccess);
  EXPECT(cudaEventRecord(reduced, idle) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(idle) == cudaSuccess && cudaEventQuery(reduced) == cudaSuccess);
  EXPECT(*flag == 1);  // the memset still waits for the allreduce
  cudaSetDevice(1);
  EXPECT(ncclAllReduce(x[1], x[1], n, ncclFloat32, ncclSum, comms[1], streams[1]) == ncclSuccess);
  EXPECT(cudaStreamSynchronize(streams[1]) == cudaSuccess);
  cudaSetDevice(0);
  EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  EXPECT(cudaEventQuery(reduced) == cudaSuccess);
  for (int i = 0; i < n; ++i) {
    EXPECT(x[1][i] == static_cast<float>(3 * i));
    EXPECT(x[0][i] == static_cast<float>(6 * i) && copy[i] == x[0][i]);
  }
  EXPECT(*flag == 0 && cudaFree(flag) == cudaSuccess);
  EXPECT(cudaStreamDestroy(waiter) == cudaSuccess && cudaStreamDestroy(idle) == cudaSuccess);

  // Different collectives as the same number: NCCL would hang or corrupt.
  EXPECT(ncclAllReduce(x[0], x[0], n, ncclFloat32, ncclSum, comms[0], streams[0]) == ncclSuccess);
  cudaSetDevice(1);
  EXPECT(ncclBroadcast(x[1], x[1], n, ncclFloat32, 0, comms[1], streams[1]) == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ncclResult_t state = ncclSuccess;
    for (int i = 0; i < 10000 && state == ncclSuccess; ++i) {  // until the streams got there
      EXPECT(ncclCommGetAsyncError(comms[r], &state) == ncclSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT(state == ncclInvalidUsage);
    const std::string why = ncclGetLastError(comms[r]);
    EXPECT(why.find("collective #2: ranks called ") != std::string::npos);
    EXPECT(why.find("ncclAllReduce(count 1000") != std::string::npos);
    EXPECT(why.find("ncclBroadcast(count 1000") != std::string::npos);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT(ncclCommAbort(comms[r]) == ncclSuccess);
    EXPECT(cudaStreamSynchronize(streams[r]) == cudaSuccess);
    EXPECT(cudaStreamDestroy(streams[r]) == cudaSuccess);
    EXPECT(cudaFree(x[r]) == cudaSuccess);
  }
  EXPECT(cudaFree(copy) == cudaSuccess && cudaEventDestroy(reduced) == cudaSuccess);
  // ncclCommInitAll's blocking communicators (the raw-NCCL benchmark's): one thread calls both
  // ranks' allreduce in a group, and ncclCommDestroy waits for what is queued.
  ncclComm_t all[2];
  EXPECT(ncclCommInitAll(all, 2, nullptr) == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(r);
    EXPECT(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess);
    EXPECT(cudaMalloc(reinterpret_cast<void**>(&x[r]), n * sizeof(float)) == cudaSuccess);
    for (int i = 0; i < n; ++i) x[r][i] = static_cast<float>(i + r);
  }
  ncclGroupStart();
  for (int r = 0; r < 2; ++r)
    EXPECT(ncclAllReduce(x[r], x[r], n, ncclFloat32, ncclSum, all[r], streams[r]) == ncclSuccess);
  EXPECT(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < 2; ++r) EXPECT(ncclCommDestroy(all[r]) == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < n; ++i) EXPECT(x[r][i] == static_cast<float>(2 * i + 1));
    EXPECT(cudaStreamDestroy(streams[r]) == cudaSuccess && cudaFree(x[r]) == cudaSuccess);
  }
  std::printf("ok\n");
  return 0;
}

// TANDEM_CUDA_EMU_ORDER takes effect: ascending, a thread reads its neighbour before it wrote
// (all but the last, whose neighbour is thread 0) and blocks take tickets by index; descending,
// the other way round; shuffled, neither (at random, but seeded: the same every run).
int order_check() {
  const char* v = std::getenv("TANDEM_CUDA_EMU_ORDER");
  const std::string order = v != nullptr ? v : "ascending";
  int* seen = nullptr;
  unsigned *tickets = nullptr, *counter = nullptr;
  EXPECT(cudaMalloc(reinterpret_cast<void**>(&seen), kRaceBlocks * kRaceThreads * sizeof(int)) ==
         cudaSuccess);
  EXPECT(cudaMalloc(reinterpret_cast<void**>(&tickets), kRaceBlocks * sizeof(unsigned)) ==
         cudaSuccess);
  EXPECT(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(unsigned)) == cudaSuccess);
  *counter = 0;
  neighbour_race<<<kRaceBlocks, kRaceThreads, 0, nullptr>>>(seen, tickets, counter);
  EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  int stale = 0;  // in block 0
  for (int t = 0; t < kRaceThreads; ++t) stale += seen[t] == -1;
  bool ascending = true, descending = true;
  std::vector<bool> taken(kRaceBlocks, false);
  for (unsigned b = 0; b < kRaceBlocks; ++b) {
    EXPECT(tickets[b] < kRaceBlocks && !taken[tickets[b]]);  // every block ran once
    taken[tickets[b]] = true;
    ascending = ascending && tickets[b] == b;
    descending = descending && tickets[b] == kRaceBlocks - 1 - b;
  }
  std::printf("%s: %d of %d threads read their neighbour before it wrote; blocks %s\n",
              order.c_str(), stale, kRaceThreads,
              ascending ? "ascending" : descending ? "descending" : "in another order");
  if (order == "ascending") EXPECT(stale == kRaceThreads - 1 && ascending);
  if (order == "descending") EXPECT(stale == 1 && descending);
  if (order == "shuffled")
    EXPECT(stale > 1 && stale < kRaceThreads - 1 && !ascending && !descending);
  EXPECT(cudaFree(seen) == cudaSuccess && cudaFree(tickets) == cudaSuccess &&
         cudaFree(counter) == cudaSuccess);
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "ok";
  if (std::strcmp(what, "nccl") == 0) return nccl_check();
  if (std::strcmp(what, "order") == 0) return order_check();
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
    cudaDeviceSynchronize();  // before the host reads what the kernel wrote
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
  cudaDeviceSynchronize();  // the kernel may run on the stream's thread
  std::printf("%s: the emulation did not stop the kernel\n", what);
  return 1;
}
