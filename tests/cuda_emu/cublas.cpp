// A CPU stand-in for the cuBLAS functions tandem calls, for the CUDA emulation tests: device
// memory is host memory, and each call does its work on the handle's stream, after the work
// queued there, before it returns (streams.hpp).
// GEMMs follow cuBLAS's documented semantics (column-major operands, op N/T/C, strided batches,
// alpha and beta in the compute type's scale type, C not read when beta is 0) and accumulate in
// double, rounding once to the output type. Arguments are checked as cuBLAS checks them: sizes,
// leading dimensions, operations, algorithms and type combinations answer INVALID_VALUE or
// NOT_SUPPORTED, a null handle NOT_INITIALIZED.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "streams.hpp"
#include "values.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// The types the callers pass (scale_type below refuses the others).
tandem_emu::Real real(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return tandem_emu::Real::f32;
    case CUDA_R_64F: return tandem_emu::Real::f64;
    case CUDA_R_16F: return tandem_emu::Real::f16;
    default: return tandem_emu::Real::bf16;
  }
}

double load(const void* p, int64_t i, cudaDataType t) { return tandem_emu::load(p, i, real(t)); }

void store(void* p, int64_t i, cudaDataType t, double v) { tandem_emu::store(p, i, real(t), v); }

// Whether cuBLAS's table for cublasGemmEx (its real f16, bf16, f32 and f64 rows) has the
// combination, and the scale type (of alpha and beta) it gives.
bool scale_type(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute,
                cudaDataType* scale) {
  if (a != b) return false;
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      *scale = CUDA_R_16F;
      return a == CUDA_R_16F && c == CUDA_R_16F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      *scale = CUDA_R_32F;
      return (a == CUDA_R_32F && c == CUDA_R_32F) ||
             ((a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      *scale = CUDA_R_32F;
      return a == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      *scale = CUDA_R_64F;
      return a == CUDA_R_64F && c == CUDA_R_64F;
    default: return false;
  }
}

bool valid_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

bool valid_algo(cublasGemmAlgo_t algo) {
  return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

// rows x cols doubles, element (i, j) read at offset + i + j * ld of column-major X, or at
// offset + j + i * ld when `across` (X's rows lie along its memory).
void gather(std::vector<double>& out, const void* x, cudaDataType t, int64_t offset, int64_t ld,
            bool across, int64_t rows, int64_t cols) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(i * cols + j)] =
          load(x, offset + (across ? j + i * ld : i + j * ld), t);
}

cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                    int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                    int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                    long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                    long long strideC, int batch, cublasComputeType_t compute,
                    cublasGemmAlgo_t algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !valid_op(transa) || !valid_op(transb) ||
      lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m) ||
      alpha == nullptr || beta == nullptr || !valid_algo(algo))
    return CUBLAS_STATUS_INVALID_VALUE;
  cudaDataType scale{};
  if (!scale_type(Atype, Btype, Ctype, compute, &scale)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  // Stricter than cuBLAS, whose kernel would fault on these.
  if (C == nullptr || (k > 0 && (A == nullptr || B == nullptr))) return CUBLAS_STATUS_INVALID_VALUE;
  const double al = load(alpha, 0, scale), be = load(beta, 0, scale);
  std::vector<double> a, bt;  // op(A) (m x k) and op(B)^T (n x k), row-major
  for (int64_t p = 0; p < batch; ++p) {
    if (k > 0) {
      gather(a, A, Atype, p * strideA, lda, transa != CUBLAS_OP_N, m, k);
      gather(bt, B, Btype, p * strideB, ldb, transb == CUBLAS_OP_N, n, k);
      if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) {  // the operands as tensor cores take them
        tandem_emu::round_to_tf32(a);
        tandem_emu::round_to_tf32(bt);
      }
    }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += a[static_cast<size_t>(i * k + l)] * bt[static_cast<size_t>(j * k + l)];
        const int64_t c = p * strideC + i + j * ldc;
        store(C, c, Ctype, be == 0 ? al * sum : al * sum + be * load(C, c, Ctype));
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext;
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "the function requires an architectural feature absent from the device";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the function failed to launch on the GPU";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the license check failed";
  }
  return "unrecognized status";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return tandem_emu::call_on_stream(handle->stream, [&] {
    return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta,
                C, Ctype, ldc, 0, 1, computeType, algo);
  });
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return tandem_emu::call_on_stream(handle->stream, [&] {
    return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
  });
}

}  // extern "C"
