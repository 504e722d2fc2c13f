// The autocast policy: which ops run in the autocast dtype (f16 or bf16) and which in f32 while
// autocast is on in the current execution context (amp::autocast turns it on). One table, here,
// because the ops apply it (the ops layer cannot see amp).
#pragma once

#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem {

enum class AutocastPolicy {
  lower,  // floating inputs cast to the autocast dtype; the kernels accumulate in f32
  fp32,   // floating inputs cast to f32
  widest, // floating inputs cast to the widest of them (batch norm: its input and residual)
};

struct AutocastRule {
  const char* op;
  AutocastPolicy policy;
};

/// Every op autocast changes, in one table. Ops not listed (elementwise, views, pooling, relu)
/// run in the widest dtype of their inputs, as without autocast; `widest` rows do so too where
/// they would otherwise refuse mixed dtypes.
const std::vector<AutocastRule>& autocast_policy();

namespace ops_detail {
/// `t` as op `op` takes it under the current autocast state: cast (differentiably) when autocast
/// is on, `t` is f32, f16 or bf16 (f64 is left alone, as in PyTorch) and the policy says so;
/// else `t` itself. `with` are the op's other floating inputs, which a `widest` row looks at.
Tensor autocast_input(const char* op, const Tensor& t, const std::vector<Tensor>& with = {});
/// Whether autocast would cast any of `ts` for `op` (then the op casts and calls itself again).
bool autocast_changes(const char* op, const std::vector<Tensor>& ts);
}  // namespace ops_detail

}  // namespace tandem
