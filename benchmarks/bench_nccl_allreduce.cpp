// The peer of bench_allreduce --backend nccl: raw NCCL (ncclCommInitAll over every visible GPU,
// one thread, in-place f32 sum) timed the same way: per size a warm-up, then `iters` times one
// allreduce on every GPU and a synchronize of every stream; the median. Prints one JSON object.
// Usage: bench_nccl_allreduce [max_mib] [iters]
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(expr, what)                                              \
  do {                                                                 \
    if (!(expr)) {                                                     \
      std::fprintf(stderr, "bench_nccl_allreduce: %s failed\n", what); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

int main(int argc, char** argv) {
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
  std::string rows;
  for (long long bytes = 8; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / 4;
    allreduce(count);  // warm-up
    const int reps = bytes >= (64ll << 20) ? std::max(5, iters / 4) : iters;
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      allreduce(count);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    char row[160];
    std::snprintf(row, sizeof row, "%s{\"bytes\": %lld, \"time_us\": %.3f, \"algbw_gbps\": %.4f}",
                  rows.empty() ? "" : ", ", bytes, t * 1e6, bytes / t / 1e9);
    rows += row;
  }
  std::printf("{\"backend\": \"nccl-raw\", \"world\": %d, \"sizes\": [%s]}\n", n, rows.c_str());
  for (int d = 0; d < n; ++d) {
    ncclCommDestroy(comms[d]);
    cudaFree(bufs[d]);
  }
  return 0;
}
