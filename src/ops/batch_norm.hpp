// What nn's batch norm modules call (not a public op): batch norm that also counts a module's
// num_batches_tracked, + 1 when training, in the launch that updates the running statistics,
// where a separate add_ was a launch and an op's host time per layer per step.
#pragma once

#include "tandem/ops/nn_ops.hpp"

namespace tandem::detail {

/// batch_norm (`relu` false, no residual), batch_norm_relu, or with `group` sync_batch_norm
/// (training only), and num_batches_tracked (undefined: none) + 1 when `training`.
Tensor batch_norm_module(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& num_batches_tracked, const Tensor& weight,
                         const Tensor& bias, bool training, double momentum, double eps,
                         const Tensor& residual, bool relu, const StatsAllreduce* group);

}  // namespace tandem::detail
