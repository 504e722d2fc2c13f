// The host side of torch.linalg's factorizations (decompositions.cpp, spectral.cpp): a batch of
// matrices copied to the host as row-major f64 for Eigen, and the results back to the input's
// dtype and device; the checks every factorization makes of its operands.
#pragma once

#include <Eigen/Core>
#include <initializer_list>
#include <vector>

#include "common.hpp"

namespace tandem::ops_detail {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;

inline void check_matrices(const Tensor& a, const char* op, const char* name) {
  check_defined(a, op, name);
  TANDEM_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, op, ": expected ", name,
               " of dtype f32 or f64, got ", a.dtype(),
               " (as torch, the factorizations take no integers nor f16/bf16)");
  TANDEM_CHECK(a.dim() >= 2, op, ": ", name, " must have at least 2 dimensions, got shape ",
               shape_str(a.shape()));
}

inline void check_square(const Tensor& a, const char* op, const char* name = "A") {
  check_matrices(a, op, name);
  TANDEM_CHECK(a.size(-1) == a.size(-2), op, ": ", name,
               " must be batches of square matrices, but they are ", a.size(-2), " by ", a.size(-1),
               " matrices");
}

inline Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

// The batch dims of a (..., rows, cols).
inline Shape batch_of(const Tensor& a) { return Shape(a.shape().begin(), a.shape().end() - 2); }

// The batch dims followed by `dims`.
inline Shape with_dims(Shape batch, std::initializer_list<int64_t> dims) {
  batch.insert(batch.end(), dims);
  return batch;
}

// a's elements as row-major f64 matrices on the host (a copy; no history).
inline std::vector<double> host_matrices(const Tensor& a) {
  NoGradGuard no_grad;
  return a.detach().to(kCPU).to(DType::f64).contiguous().to_vector<double>();
}

// Host values back to a tensor of `shape` with `like`'s dtype and device (no history).
inline Tensor from_host(const std::vector<double>& values, const Shape& shape, const Tensor& like) {
  NoGradGuard no_grad;
  return from_vector(values, shape).to(like.dtype()).to(like.device());
}

// The n x n identity in like's dtype, on its device.
inline Tensor identity_like(int64_t n, const Tensor& like) {
  return eye(n, TensorOptions(like.dtype()).device(like.device()));
}

// Runs f(k, matrix) for each n x m matrix of the host values, k counting from 0.
template <typename F>
void each_matrix(std::vector<double>& values, int64_t n, int64_t m, F&& f) {
  const int64_t size = n * m;
  if (size == 0) return;
  for (int64_t k = 0; k * size < static_cast<int64_t>(values.size()); ++k)
    f(k, MatrixMap(values.data() + k * size, n, m));
}

}  // namespace tandem::ops_detail
