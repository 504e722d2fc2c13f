// GPU op speed against the library underneath, in one process on one GPU: a bf16 (and f16, f32)
// matrix product through tandem's bmm against cublasGemmEx called directly on the same buffers,
// and tandem's memory-bound ops (f32 and bf16 adds, a bf16 channels-last add and batch norm)
// against a device-to-device copy of the same bytes (the bandwidth an elementwise op can reach).
// Each timing is the median of --repeats runs of --iters calls, timed
// with CUDA events. Prints one JSON object.
//   bench_gpu_ops --size 8192 --repeats 5
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "guarded_main.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds per call of f over `repeats` runs of `iters` calls.
double time_ms(const std::function<void()>& f, int iters, int repeats) {
  f();  // warm-up: handles, workspaces, cached blocks
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    cudaEventRecord(start);
    for (int i = 0; i < iters; ++i) f();
    cudaEventRecord(stop);
    check(cudaEventSynchronize(stop), "timing");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t / iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app("GPU ops: tandem against cuBLAS and a device-to-device copy");
  int64_t size = 8192;
  int repeats = 5, iters = 10;
  int64_t add_mib = 1024;
  app.add_option("--size", size, "m = n = k of the matrix products")->check(CLI::PositiveNumber);
  app.add_option("--add-mib", add_mib, "MiB per operand of the add")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  app.add_option("--iters", iters)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_gpu_ops: no GPU\n");
    return 1;
  }
  const Device gpu("cuda:0");
  nlohmann::json out{{"size", size}, {"build", cuda::build_info()}};

  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    Tensor a = randn({1, size, size}, TensorOptions(dt).device(gpu));
    Tensor b = randn({1, size, size}, TensorOptions(dt).device(gpu));
    Tensor c = empty({1, size, size}, TensorOptions(dt).device(gpu));
    const double flop = 2.0 * size * size * size;
    const double tandem_ms = time_ms([&] { c = bmm(a, b); }, iters, repeats);
    const float one = 1.0f, zero = 0.0f;
    const int n = static_cast<int>(size);
    const double cublas_ms = time_ms(
        [&] {
          cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.raw_data(),
                       cuda_type(dt), n, a.raw_data(), cuda_type(dt), n, &zero, c.raw_data(),
                       cuda_type(dt), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        },
        iters, repeats);
    out["gemm"][dtype_name(dt)] = {{"tandem_ms", tandem_ms},
                                   {"cublas_ms", cublas_ms},
                                   {"tandem_tflops", flop / tandem_ms / 1e9},
                                   {"cublas_tflops", flop / cublas_ms / 1e9},
                                   {"tandem_vs_cublas", cublas_ms / tandem_ms}};
  }
  cublasDestroy(handle);

  // Memory-bound ops against a device-to-device copy of the same bytes. `passes` counts the
  // bytes an ideal kernel moves, in operand-sized units: an add reads two and writes one; a
  // copy reads one and writes one. ResNet-50's bf16 channels-last tensors are the case that
  // matters; the f32 add is the bar (85% of the copy's bandwidth).
  enum class Layout { flat, nchw, nhwc };  // a vector, or (N, 256, 56, 56) maps laid out so
  const auto memory_bound = [&](const char* name, DType dt, Layout layout, double passes,
                                const std::function<Tensor(const Tensor&, const Tensor&)>& op) {
    const int64_t count = add_mib * 1024 * 1024 / element_size(dt);
    // (N, 256, 56, 56)-like maps: a layer-1 ResNet-50 activation.
    const int64_t n = std::max<int64_t>(1, count / (256 * 56 * 56));
    const Shape shape = layout == Layout::flat ? Shape{count} : Shape{n, 256, 56, 56};
    const auto make = [&] {
      Tensor t = randn(shape, TensorOptions(DType::f32).device(gpu)).to(dt);
      return layout == Layout::nhwc ? t.contiguous(MemoryFormat::ChannelsLast) : t;
    };
    Tensor x = make(), y = make(), z;
    const double op_ms = time_ms([&] { z = op(x, y); }, iters, repeats);
    const double bytes = static_cast<double>(x.numel()) * element_size(dt);
    const double copy_ms = time_ms(
        [&] { cudaMemcpyAsync(y.raw_data(), x.raw_data(), bytes, cudaMemcpyDeviceToDevice); },
        iters, repeats);
    out[name] = {{"mib", bytes / (1024 * 1024)},
                 {"shape", shape},
                 {"tandem_ms", op_ms},
                 {"copy_ms", copy_ms},
                 {"tandem_gb_per_s", passes * bytes / op_ms / 1e6},
                 {"copy_gb_per_s", 2 * bytes / copy_ms / 1e6},
                 {"tandem_vs_copy_bandwidth", (passes * bytes / op_ms) / (2 * bytes / copy_ms)},
                 {"result_channels_last",
                  z.suggest_memory_format() == MemoryFormat::ChannelsLast}};
  };
  const auto sum = [](const Tensor& a, const Tensor& b) { return add(a, b); };
  memory_bound("add_f32", DType::f32, Layout::flat, 3, sum);
  memory_bound("add_bf16", DType::bf16, Layout::flat, 3, sum);
  memory_bound("add_bf16_nhwc", DType::bf16, Layout::nhwc, 3, sum);
  // The same adds loading element by element (the kernels' loop for strided operands).
  cuda::set_vectorized_elementwise(false);
  memory_bound("add_f32_elementwise_loads", DType::f32, Layout::flat, 3, sum);
  memory_bound("add_bf16_elementwise_loads", DType::bf16, Layout::flat, 3, sum);
  cuda::set_vectorized_elementwise(true);
  // Training batch norm + relu, bf16 channels-last, f32 statistics: an ideal kernel reads x
  // once and writes y once (PyTorch's reads x twice: statistics, then normalize).
  const Tensor w = ones({256}, TensorOptions(DType::f32).device(gpu));
  const Tensor b = zeros({256}, TensorOptions(DType::f32).device(gpu));
  Tensor running_mean = zeros({256}, TensorOptions(DType::f32).device(gpu));
  Tensor running_var = ones({256}, TensorOptions(DType::f32).device(gpu));
  const auto bn_relu = [&](const Tensor& x, const Tensor&) {
    return batch_norm_relu(x, running_mean, running_var, w, b, true);
  };
  memory_bound("batch_norm_relu_bf16_nhwc", DType::bf16, Layout::nhwc, 2, bn_relu);
  // A ResNet block's tail, forward and backward: batch norm + residual + relu, the gradient to
  // the input and to the residual. An ideal pair of passes each way: statistics (x), output
  // (x, residual, y), the gradient's sums (dy, x, y), the gradients (dy, x, y, dx, dresidual):
  // 12 operand-sized passes.
  const auto block_tail = [&](const Tensor& x, const Tensor& r) {
    Tensor xi = x.detach().requires_grad_(), ri = r.detach().requires_grad_();
    Tensor y = batch_norm_relu(xi, running_mean, running_var, w, b, true, 0.1, 1e-5, ri);
    y.backward(x);
    return xi.grad();
  };
  memory_bound("batch_norm_relu_residual_fwd_bwd_bf16_nhwc", DType::bf16, Layout::nhwc, 12,
               block_tail);
  // Row-major (PyTorch's default layout, autocast's bf16 and plain f32): planes of 56 x 56
  // values, a multiple of the vector width, so every kernel reads 16-byte vectors of a plane.
  memory_bound("batch_norm_relu_residual_fwd_bwd_bf16_nchw", DType::bf16, Layout::nchw, 12,
               block_tail);
  memory_bound("batch_norm_relu_residual_fwd_bwd_f32_nchw", DType::f32, Layout::nchw, 12,
               block_tail);
  // All again with element-by-element loads, where the maps take the one-element kernels
  // instead of the channel tiles or planes (channels-last sums too: one channel a thread):
  // which is faster on this GPU (the vectors were written without one). The forward row tells
  // the statistics' share apart.
  cuda::set_vectorized_elementwise(false);
  memory_bound("batch_norm_relu_bf16_nhwc_elementwise_loads", DType::bf16, Layout::nhwc, 2,
               bn_relu);
  memory_bound("batch_norm_relu_residual_fwd_bwd_bf16_nhwc_elementwise_loads", DType::bf16,
               Layout::nhwc, 12, block_tail);
  memory_bound("batch_norm_relu_residual_fwd_bwd_bf16_nchw_elementwise_loads", DType::bf16,
               Layout::nchw, 12, block_tail);
  memory_bound("batch_norm_relu_residual_fwd_bwd_f32_nchw_elementwise_loads", DType::f32,
               Layout::nchw, 12, block_tail);
  cuda::set_vectorized_elementwise(true);
  const auto stats = cuda::memory_stats(0);
  out["cuda_mallocs"] = stats.device_allocs;
  out["peak_allocated_bytes"] = stats.peak_allocated_bytes;
  std::cout << out.dump() << std::endl;
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_gpu_ops", argc, argv, run); }
