// Matrix products: matmul with torch's rules (1-D, 2-D and broadcast batches), bmm and linear.
#pragma once

#include "tandem/core/tensor.hpp"

namespace tandem {

Tensor matmul(const Tensor& a, const Tensor& b);
/// (B, M, K) x (B, K, N) -> (B, M, N)
Tensor bmm(const Tensor& a, const Tensor& b);
/// (M, K) x (K, N) -> (M, N)
Tensor mm(const Tensor& a, const Tensor& b);
/// input (*, in) x weight (out, in)^T + bias (out) -> (*, out)
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tandem
