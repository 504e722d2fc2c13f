// The index math of strided, broadcast operands, written once for every backend: the dims of an
// N-operand elementwise loop merged wherever every operand steps over them contiguously, so the
// CPU loop runs long inner runs and a CUDA kernel divides by few sizes per element.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "tandem/core/shape.hpp"

namespace tandem::kernels {

/// The loop over `sizes` (outermost first, at least one dim) with each operand's element
/// strides; size-1 dims dropped, the rest ordered as operand 0 (the one written) lays them out,
/// largest stride first, and dim d merged into the next when every operand's stride there is
/// its stride at the next times the size there. So a layout that is not row-major, such as
/// channels-last, runs as one long run when every operand has it. The loop visits each element
/// once in some order: elementwise kernels only.
template <size_t N>
struct CollapsedDims {
  Shape sizes;
  std::array<Shape, N> strides;
};

template <size_t N>
CollapsedDims<N> collapse_dims(const Shape& shape, const std::array<Shape, N>& strides) {
  CollapsedDims<N> c;
  std::vector<size_t> order;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[0][a] > strides[0][b]; });
  for (size_t d : order) {
    bool merge = !c.sizes.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = c.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      c.sizes.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) c.strides[k].back() = strides[k][d];
    } else {
      c.sizes.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) c.strides[k].push_back(strides[k][d]);
    }
  }
  if (c.sizes.empty()) {  // a single element
    c.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) c.strides[k].push_back(0);
  }
  return c;
}

}  // namespace tandem::kernels
