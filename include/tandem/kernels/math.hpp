// Scalar math shared by the kernels of every backend and by the communicators, on host and
// device alike (g++ and nvcc): the NaN-propagating max and min.
#pragma once

#include "tandem/core/macros.hpp"

namespace tandem::kernels {

/// The larger of a and b, NaN when either is NaN (as torch.maximum), whichever side it is on:
/// a reduction's result then does not depend on which rank or element held the NaN.
/// `a != a` is the NaN test for any T (never true for integers); a NaN b fails `a > b` and is
/// returned.
template <typename T>
TANDEM_HD T max_nan(T a, T b) {
  return (a != a || a > b) ? a : b;
}
/// The smaller of a and b, NaN when either is NaN.
template <typename T>
TANDEM_HD T min_nan(T a, T b) {
  return (a != a || a < b) ? a : b;
}

}  // namespace tandem::kernels
