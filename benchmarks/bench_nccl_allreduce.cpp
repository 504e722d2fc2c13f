// The peer of bench_allreduce --backend nccl: raw NCCL (ncclCommInitAll over every visible GPU,
// one thread, in-place f32 sum) timed the same way: per size a warm-up, then `iters` times one
// allreduce on every GPU and a synchronize of every stream; the median. Prints one JSON object.
// Usage: bench_nccl_allreduce [max_mib] [iters]
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "guarded_main.hpp"
#include "peer_sweep.hpp"

#define CHECK(expr, what)                                              \
  do {                                                                 \
    if (!(expr)) {                                                     \
      std::fprintf(stderr, "bench_nccl_allreduce: %s failed\n", what); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

static int run(int argc, char** argv) {
  const long long max_bytes = (argc > 1 ? std::atoll(argv[1]) : 256) << 20;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  int n = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n > 0, "finding a GPU");
  std::vector<ncclComm_t> comms(n);
  CHECK(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess, "ncclCommInitAll");
  std::vector<cudaStream_t> streams(n);
  std::vector<float*> bufs(n);
  for (int d = 0; d < n; ++d) {
    cudaSetDevice(d);
    CHECK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking) == cudaSuccess, "stream");
    CHECK(cudaMalloc(&bufs[d], max_bytes) == cudaSuccess, "cudaMalloc");
    cudaMemset(bufs[d], 0, max_bytes);
  }
  auto allreduce = [&](size_t count) {
    ncclGroupStart();
    for (int d = 0; d < n; ++d)
      ncclAllReduce(bufs[d], bufs[d], count, ncclFloat32, ncclSum, comms[d], streams[d]);
    CHECK(ncclGroupEnd() == ncclSuccess, "ncclAllReduce");
    for (int d = 0; d < n; ++d) cudaStreamSynchronize(streams[d]);
  };
  const std::string rows = peer_sweep(max_bytes, iters, [&](long long bytes) {
    const auto t0 = std::chrono::steady_clock::now();
    allreduce(bytes / 4);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  for (int d = 0; d < n; ++d) {
    ncclCommDestroy(comms[d]);
    cudaFree(bufs[d]);
  }
  // After the teardown: whatever NCCL prints (its messages go to stdout) comes before the JSON,
  // which bench_allreduce.py reads as the last line.
  std::printf("{\"backend\": \"nccl-raw\", \"world\": %d, \"sizes\": [%s]}\n", n, rows.c_str());
  std::fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  return bench::guarded_main("bench_nccl_allreduce", argc, argv, run);
}
