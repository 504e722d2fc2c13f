// Batched matrix products on the GPU through cuBLAS: out (B, M, N) = a (B, M, K) @ b (B, K, N)
// in f32, f64, f16 and bf16, accumulating in f32 (f64 for f64; for f16 and bf16 cuBLAS may add
// split-K partial sums in the narrow type, which PyTorch allows by default too). Row-major
// products are column-major ones transposed: out^T = b^T a^T, so each operand whose rows or
// columns are unit-strided goes in as it lies, transposed through cuBLAS's op flag where needed,
// and only other layouts are copied first. TF32 for f32 products is off unless
// cuda::set_allow_tf32_matmul(true) (PyTorch's default).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>

#include "../kernels/kernels.hpp"
#include "check.hpp"
#include "handles.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::cuda {
namespace {

std::atomic<bool> g_tf32_matmul{false};
std::atomic<bool> g_tf32_conv{true};

#define TANDEM_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                      \
    const cublasStatus_t status_ = (expr);                                                  \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                                   \
      throw ::tandem::CudaError(#expr, std::string("cuBLAS error ") +                       \
                                           cublasGetStatusString(status_),                  \
                                ::tandem::detail::base_name(__FILE__), __LINE__);           \
  } while (0)

cublasHandle_t create_handle() {
  cublasHandle_t h = nullptr;
  TANDEM_CUBLAS_CHECK(cublasCreate(&h));
  return h;
}

// An operand as cuBLAS takes it: `op` and leading dimension over its memory, or nothing when
// neither its rows nor its columns are unit-strided.
struct Layout {
  bool ok = false;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0;
};

// X (rows, cols) with strides (sr, sc), to appear transposed (col-major X^T) in the product.
Layout as_transposed(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if (sc == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : sr;
    if (ld >= std::max<int64_t>(cols, 1)) return {true, CUBLAS_OP_N, ld};
  }
  if (sr == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : sc;
    if (ld >= std::max<int64_t>(rows, 1)) return {true, CUBLAS_OP_T, ld};
  }
  return {};
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default:
      TANDEM_THROW(NotImplementedError, "bmm (cuda): cuBLAS multiplies f32, f64, f16 and bf16, "
                   "got ", t);
  }
}

void bmm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  if (batch * m * n == 0) return;
  const cudaDataType_t type = data_type(out.dtype());
  if (k == 0) {
    kernels::fill(out, 0.0);
    return;
  }
  // out^T (n x m) = b^T (n x k) a^T (k x m), column-major.
  Tensor a = a_in, b = b_in;
  Layout la = as_transposed(m, k, a.stride(1), a.stride(2));
  if (!la.ok) {
    a = a.contiguous();
    la = as_transposed(m, k, a.stride(1), a.stride(2));
  }
  Layout lb = as_transposed(k, n, b.stride(1), b.stride(2));
  if (!lb.ok) {
    b = b.contiguous();
    lb = as_transposed(k, n, b.stride(1), b.stride(2));
  }
  // Written in place when its rows are unit-strided and neither rows nor matrices overlap.
  const bool out_direct = out.stride(2) == 1 && (m == 1 || out.stride(1) >= n) &&
                          (batch == 1 || out.stride(0) >= (m - 1) * out.stride(1) + n);
  Tensor c = out_direct ? out : make_tensor(out.shape(), out.dtype(), out.device());
  const int device = out.device().index();
  DeviceGuard guard(device);
  cublasHandle_t h = thread_handle(device, &create_handle);
  TANDEM_CUBLAS_CHECK(cublasSetStream(h, current_stream()));
  const bool f64 = out.dtype() == DType::f64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F
          : (out.dtype() == DType::f32 && g_tf32_matmul.load() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                               : CUBLAS_COMPUTE_32F);
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.0f, zero32 = 0.0f;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  auto narrow = [](int64_t v, const char* what) {
    TANDEM_CHECK_T(NotImplementedError, v <= INT32_MAX, "bmm (cuda): ", what, " ", v,
                   " exceeds cuBLAS's 32-bit sizes");
    return static_cast<int>(v);
  };
  TANDEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, lb.op, la.op, narrow(n, "n"), narrow(m, "m"), narrow(k, "k"), alpha, b.raw_data(), type,
      narrow(lb.ld, "leading dimension"), b.stride(0), a.raw_data(), type,
      narrow(la.ld, "leading dimension"), a.stride(0), beta, c.raw_data(), type,
      narrow(m == 1 ? n : c.stride(1), "leading dimension"), c.stride(0), narrow(batch, "batch"),
      compute, CUBLAS_GEMM_DEFAULT));
  if (!out_direct) kernels::copy(out, c);
}

}  // namespace

void set_allow_tf32_matmul(bool allow) { g_tf32_matmul = allow; }
bool allow_tf32_matmul() { return g_tf32_matmul; }
void set_allow_tf32_conv(bool allow) { g_tf32_conv = allow; }
bool allow_tf32_conv() { return g_tf32_conv; }

}  // namespace tandem::cuda

namespace tandem::kernels::cuda_backend {
TANDEM_REGISTER_CUDA(bmm, ::tandem::cuda::bmm);
}  // namespace tandem::kernels::cuda_backend
