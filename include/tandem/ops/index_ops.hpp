// Indexing by tensors of indices along one dim, as torch's: index_select, gather, scatter,
// scatter_add and index_add (embedding, built on them, is in nn_ops.hpp). Indices are i64 or
// i32 on the values' device; one outside the dim throws IndexError before anything is written.
// Differentiable in the values, not in the indices.
#pragma once

#include <optional>
#include <string>

#include "tandem/core/tensor.hpp"

namespace tandem {

/// The slices index[0], index[1], ... of `self` along dim: self's shape with that dim's size
/// index.numel(). index is 1-d (or a scalar).
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
/// How often each value of x (1-d, non-negative integers) occurs, i64, at least `minlength`
/// long; with weights, their sums (f32 or f64 as the weights, else f64), as torch.bincount.
Tensor bincount(const Tensor& x, const Tensor& weights = {}, int64_t minlength = 0);
/// gather after broadcasting self and indices in every dim but dim; without dim, of both
/// flattened (torch.take_along_dim).
Tensor take_along_dim(const Tensor& self, const Tensor& indices,
                      std::optional<int64_t> dim = std::nullopt);
/// self with the slices index names along dim set to value (a number or a 0-dim tensor,
/// differentiable in it and in self elsewhere).
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, Scalar value);
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value);
/// self with the order of its elements reversed along each of `dims`, as torch.flip (a copy).
Tensor flip(const Tensor& self, const Shape& dims);
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor flip(const Tensor& self, I dim) {
  return flip(self, Shape{static_cast<int64_t>(dim)});
}
/// out[...][j][...] = self[...][index[...][j][...]][...] along dim: out has index's shape;
/// index has self's rank and no larger sizes than self's in the other dims.
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
/// A copy of self with out[...][index[...][j][...]][...] = src[...][j][...] for every element of
/// index (index no larger than src in any dim, nor than self in the others); where index
/// repeats a position, one of the values wins.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
/// The same with `value` everywhere index points (one-hot: zeros(...).scatter(1, labels, 1)).
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, double value);
/// As scatter, adding instead (a repeated position sums every value sent to it).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
/// A copy of self with alpha * source[..][j][..] added to slice index[j] along dim; index 1-d,
/// source shaped as self but with index.numel() along dim. The gradient of index_select.
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha = 1.0);
/// The elements of self where mask (bool, broadcast with self) is true, in order, as one dim;
/// differentiable in self. Where the mask is true is read on the host (one wait on a GPU, as
/// in torch).
Tensor masked_select(const Tensor& self, const Tensor& mask);
/// A copy of self with slice index[j] along dim replaced by source's slice j (torch.index_copy;
/// index 1-d, source shaped as self but with index.numel() along dim). Where index repeats a
/// position, which slice wins is unspecified, as torch's.
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
/// A copy of self with the positions where mask (bool, broadcast with self) is true taking
/// source's elements in order (torch.masked_scatter; source needs at least as many elements as
/// the mask has trues, read on the host).
Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& src);
/// scatter with a reduction (torch.scatter_reduce): every value src sends to a position (index as
/// scatter's) is combined with "sum", "prod", "mean" (integers: floor division), "amax" or
/// "amin" (NaN wins), together with self's value there when include_self. Positions no index
/// names keep self's value. Gradients as torch's: amax and amin share a position's gradient
/// among the values equal to its result.
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self = true);
/// The positions of self's nonzero elements in order, (count, self.dim()) i64 on self's device
/// (read on the host, as masked_select's mask).
Tensor nonzero(const Tensor& self);

}  // namespace tandem
