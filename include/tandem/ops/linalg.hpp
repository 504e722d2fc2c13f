// Matrix products: matmul with torch's rules (1-D, 2-D and broadcast batches), bmm and linear.
#pragma once

#include <string>
#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem {

Tensor matmul(const Tensor& a, const Tensor& b);
/// (B, M, K) x (B, K, N) -> (B, M, N)
Tensor bmm(const Tensor& a, const Tensor& b);
/// (M, K) x (K, N) -> (M, N)
Tensor mm(const Tensor& a, const Tensor& b);
/// (N) . (N) -> a 0-dim tensor.
Tensor dot(const Tensor& a, const Tensor& b);
/// (M, N) x (N) -> (M)
Tensor mv(const Tensor& mat, const Tensor& vec);
/// (M) x (N) -> (M, N): a_i b_j.
Tensor outer(const Tensor& a, const Tensor& b);
/// beta * self + alpha * mat1 mat2, self broadcast to (M, N).
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta = 1.0,
             double alpha = 1.0);
/// input (*, in) x weight (out, in)^T + bias (out) -> (*, out)
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());
/// Einstein summation, as torch.einsum: "bij,bjk->bik", "bhqd,bhkd->bhqk", "ij->ji", "i,i->",
/// "...ij,...jk" (an implicit output: the broadcast dims, then the subscripts used once, in
/// alphabetical order). Operands are contracted left to right, each pair as one bmm; size-1
/// dims broadcast. A subscript repeated within one operand (a diagonal) is refused.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

}  // namespace tandem
