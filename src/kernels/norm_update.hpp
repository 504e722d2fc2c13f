// Batch norm's per-channel update after its statistics (kernels::batch_norm_update), written once
// for the CPU loop (src/cpu/norm.cpp) and the CUDA kernel (src/cuda/norm_pool.cu): in f64,
// rounded once to the statistics' type P, so both devices give the same bits from the same
// statistics.
#pragma once

#include <math.h>

#include "kernels.hpp"

namespace tandem::kernels {

/// Channel c: invstd[c] from var[c]; with u.running, the running statistics moved toward the
/// batch's (var unbiased), as torch's running_mean = (1 - momentum) running_mean + momentum mean.
template <typename P>
TANDEM_HD void batch_norm_update_one(P* invstd, P* running_mean, P* running_var, const P* mean,
                                     const P* var, const BatchNormUpdate& u, int64_t c) {
  const double v = static_cast<double>(var[c]);
  invstd[c] = static_cast<P>(1.0 / sqrt(v + u.eps));
  const double count = u.group_count ? *u.group_count : u.count;
  if (!u.running || !(count > 1)) return;
  const double keep = 1.0 - u.momentum;
  running_mean[c] = static_cast<P>(static_cast<double>(running_mean[c]) * keep +
                                   static_cast<double>(mean[c]) * u.momentum);
  running_var[c] = static_cast<P>(static_cast<double>(running_var[c]) * keep +
                                  v * (count / (count - 1.0)) * u.momentum);
}

}  // namespace tandem::kernels
