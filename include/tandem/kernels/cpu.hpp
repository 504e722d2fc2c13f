// The CPU kernels behind the ops. They trust their caller (the op layer checked shapes, dtypes
// and devices): inputs are already broadcast to the output's shape (stride 0 where expanded),
// floating math sees f32 or f64, and outputs are allocated.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.hpp"
#include "tandem/kernels/functors.hpp"

namespace tandem::kernels::cpu {

// --- elementwise (src/cpu/elementwise.cpp) -------------------------------------------------
/// out = op(in); in and out have the same shape, any strides. out is bool for logical_not.
void unary(UnaryOp op, const OpArgs& args, const Tensor& out, const Tensor& in);
/// out = op(a, b); out is bool for comparisons.
void binary(BinaryOp op, const OpArgs& args, const Tensor& out, const Tensor& a, const Tensor& b);
/// out = cond ? a : b
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
/// dst = src converted to dst's dtype; any strides, any two dtypes.
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);

// --- random (src/cpu/random.cpp): element i draws from Philox word (seed, offset, i) ---------
void uniform(const Tensor& out, uint64_t seed, uint64_t offset);  // [0, 1)
void normal(const Tensor& out, uint64_t seed, uint64_t offset);
void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset);

// --- reductions (src/cpu/reduce.cpp): in is contiguous (rows, cols); one result per row -----
enum class ReduceOp { sum, max, min, argmax, argmin };
void reduce_rows(ReduceOp op, const Tensor& out, const Tensor& in, int64_t rows, int64_t cols);

// --- GEMM (src/cpu/gemm.cpp): row-major C = alpha * op(A) op(B) + beta * C ----------------
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// --- convolution (src/cpu/conv.cpp) ---------------------------------------------------------
struct Conv2dParams {
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
};
/// out (N, Co, Ho, Wo) = conv(in (N, Ci, H, W), weight (Co, Ci/g, kh, kw)) + bias; contiguous.
void conv2d_forward(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p);
/// Any of grad_in, grad_weight, grad_bias may be undefined (not wanted).
void conv2d_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                     const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                     const Conv2dParams& p);

// --- batch norm (src/cpu/norm.cpp): contiguous (N, C, S) views -------------------------------
/// Per-channel batch mean and biased variance of in (N, C, S), two passes (no cancellation).
void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& in);
/// out = (in - mean) * invstd * weight + bias.
void batch_norm_forward_stats(const Tensor& out, const Tensor& in, const Tensor& mean,
                              const Tensor& invstd, const Tensor& weight, const Tensor& bias);
/// training = true: gradients through the batch statistics; false: statistics are constants.
void batch_norm_backward(const Tensor& grad_in, const Tensor& grad_weight,
                         const Tensor& grad_bias, const Tensor& grad_out, const Tensor& in,
                         const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         bool training);

// --- pooling (src/cpu/pool.cpp): contiguous (N*C, H, W) planes -------------------------------
struct Pool2dParams {
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};
void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& in,
                        const Pool2dParams& p);
void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices);
void avg_pool2d_forward(const Tensor& out, const Tensor& in, const Pool2dParams& p);
void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Pool2dParams& p);
void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& in);
void adaptive_avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out);

}  // namespace tandem::kernels::cpu
