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
/// input (*, in) x weight (out, in)^T + bias (out) -> (*, out)
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());
/// Einstein summation, as torch.einsum: "bij,bjk->bik", "bhqd,bhkd->bhqk", "ij->ji", "i,i->",
/// "...ij,...jk" (an implicit output: the broadcast dims, then the subscripts used once, in
/// alphabetical order). Operands are contracted left to right, each pair as one bmm; size-1
/// dims broadcast. A subscript repeated within one operand (a diagonal) is refused.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

}  // namespace tandem
