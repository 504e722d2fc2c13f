// Collective test inputs: rank r's tensor is a pure function of (rank, size, dtype, salt), so
// every rank (thread or process) can build every other rank's input and the expected result.
#pragma once

#include "tandem/tandem.hpp"

namespace tandem::testing {

/// Uniform in [-20, 20), converted to `dtype` (integers truncate).
inline Tensor comm_input(int rank, int64_t n, DType dtype, int salt = 0) {
  Generator gen(static_cast<uint64_t>(1000 * rank + salt + 1));
  return add(mul(rand({n}, DType::f64, &gen), 40.0), -20.0).to(dtype);
}

}  // namespace tandem::testing
