// Reductions over all elements or over dims (keepdim keeps reduced dims as size 1). Sums use a
// fixed blocking and a wide accumulator, so results do not depend on the thread count.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tandem/core/tensor.hpp"

namespace tandem {

Tensor sum(const Tensor& t);
Tensor sum(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const Shape& dims, bool keepdim = false);
/// The same computed in `dtype` (t converted first), as libtorch's dtype argument.
Tensor sum(const Tensor& t, DType dtype);
Tensor sum(const Tensor& t, const Shape& dims, bool keepdim, DType dtype);
Tensor mean(const Tensor& t, DType dtype);
Tensor mean(const Tensor& t, const Shape& dims, bool keepdim, DType dtype);
/// Variance over dims (all dims when empty) with Bessel's correction by default
/// (correction = 1), as torch.var.
Tensor var(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
/// The 2-norm of all elements, sqrt(sum(t^2)); its gradient t / norm is 0 where the norm is 0,
/// as torch's.
Tensor norm(const Tensor& t);
/// The p-norm over dims (all dims when empty): (sum |t|^p)^(1/p); p = 1, 2, any p > 0, inf
/// (largest |t|) or 0 (the number of nonzero elements, no gradient). Like the 2-norm, its
/// gradient is 0 where the norm is 0.
Tensor norm(const Tensor& t, double p, const Shape& dims = {}, bool keepdim = false);
/// Whether every (any) element is nonzero, as a bool tensor (u8 for a u8 input, as torch's):
/// over all elements or along dim.
Tensor all(const Tensor& t);
Tensor all(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor any(const Tensor& t);
Tensor any(const Tensor& t, int64_t dim, bool keepdim = false);
/// Largest element (NaN if any element is NaN).
Tensor max(const Tensor& t);
Tensor min(const Tensor& t);
/// (values, indices) along dim; indices are i64 and point at the first extreme element.
std::pair<Tensor, Tensor> max(const Tensor& t, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& t, int64_t dim, bool keepdim = false);
/// Largest (smallest) values over several dims (no indices); all dims for {}.
Tensor amax(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor amin(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
/// libtorch's one-dim forms, `sum(x, 1)`: templates, so that `sum(x, {})` (every dim) never
/// converts `{}` to dim 0.
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor sum(const Tensor& t, I dim, bool keepdim = false) {
  return sum(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor mean(const Tensor& t, I dim, bool keepdim = false) {
  return mean(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor sum(const Tensor& t, I dim, bool keepdim, DType dtype) {
  return sum(t, Shape{static_cast<int64_t>(dim)}, keepdim, dtype);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor mean(const Tensor& t, I dim, bool keepdim, DType dtype) {
  return mean(t, Shape{static_cast<int64_t>(dim)}, keepdim, dtype);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor amax(const Tensor& t, I dim, bool keepdim = false) {
  return amax(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor amin(const Tensor& t, I dim, bool keepdim = false) {
  return amin(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
/// torch.var(x, dim, unbiased, keepdim).
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor var(const Tensor& t, I dim, bool unbiased = true, bool keepdim = false) {
  return var(t, Shape{static_cast<int64_t>(dim)}, unbiased ? 1 : 0, keepdim);
}
/// torch.var(x, unbiased): over all elements (a template taking only bool, so that a dim or a
/// braced list never reads as the flag).
template <typename B, typename = std::enable_if_t<std::is_same_v<B, bool>>>
Tensor var(const Tensor& t, B unbiased) {
  return var(t, Shape{}, unbiased ? 1 : 0);
}
/// The standard deviation, the square root of var with var's arguments (torch.std); its
/// gradient is 0 where the variance is 0.
Tensor std(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor std(const Tensor& t, I dim, bool unbiased = true, bool keepdim = false) {
  return std(t, Shape{static_cast<int64_t>(dim)}, unbiased ? 1 : 0, keepdim);
}
template <typename B, typename = std::enable_if_t<std::is_same_v<B, bool>>>
Tensor std(const Tensor& t, B unbiased) {
  return std(t, Shape{}, unbiased ? 1 : 0);
}
/// The number of nonzero elements over dims (all when empty), i64; NaN counts (torch's).
Tensor count_nonzero(const Tensor& t, const Shape& dims = {});
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor count_nonzero(const Tensor& t, I dim) {
  return count_nonzero(t, Shape{static_cast<int64_t>(dim)});
}
/// sum and mean that skip NaN (torch.nansum, torch.nanmean; nanmean's count is of the non-NaN
/// elements: all NaN gives NaN). Integers: nansum is sum; nanmean refuses them, as torch's.
Tensor nansum(const Tensor& t, const Shape& dims = {}, bool keepdim = false,
              std::optional<DType> dtype = std::nullopt);
Tensor nanmean(const Tensor& t, const Shape& dims = {}, bool keepdim = false,
               std::optional<DType> dtype = std::nullopt);
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor nansum(const Tensor& t, I dim, bool keepdim = false) {
  return nansum(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor nanmean(const Tensor& t, I dim, bool keepdim = false) {
  return nanmean(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
/// (values, indices) of the running maximum (minimum) along dim, torch.cummax/cummin: among
/// equal values the last index; a NaN, once met, stays, with the last NaN's index. The
/// gradient goes to the index each value came from. log2(n) passes of elementwise ops: every
/// device.
std::pair<Tensor, Tensor> cummax(const Tensor& t, int64_t dim);
std::pair<Tensor, Tensor> cummin(const Tensor& t, int64_t dim);
/// The q-th quantiles (q in [0, 1], a number or a 0-d or 1-d tensor of t's dtype; a 1-d q's dim
/// comes first in the result) of all elements, or along dim, as torch.quantile: between the
/// sorted values by `interpolation` ("linear", "lower", "higher", "midpoint", "nearest"). A NaN
/// makes its row's quantiles NaN; nanquantile skips NaNs instead (all NaN: NaN).
Tensor quantile(const Tensor& t, const Tensor& q, std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false, const std::string& interpolation = "linear");
Tensor quantile(const Tensor& t, double q, std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false, const std::string& interpolation = "linear");
Tensor nanquantile(const Tensor& t, const Tensor& q, std::optional<int64_t> dim = std::nullopt,
                   bool keepdim = false, const std::string& interpolation = "linear");
Tensor nanquantile(const Tensor& t, double q, std::optional<int64_t> dim = std::nullopt,
                   bool keepdim = false, const std::string& interpolation = "linear");
/// torch.unique in libtorch's names: (the distinct elements in ascending order, where each
/// element went in them (t's shape; with return_inverse), how often each occurs (with
/// return_counts)); what was not asked for is an empty tensor. Always sorted (sorted = false
/// allows any order, as torch's). NaNs are each distinct, as torch's. Sizes are read on the host.
std::tuple<Tensor, Tensor, Tensor> _unique2(const Tensor& t, bool sorted = true,
                                            bool return_inverse = false,
                                            bool return_counts = false);
std::tuple<Tensor, Tensor> _unique(const Tensor& t, bool sorted = true,
                                   bool return_inverse = false);
/// The distinct slices along dim, in lexicographic order (torch.unique(t, dim=d)).
std::tuple<Tensor, Tensor, Tensor> unique_dim(const Tensor& t, int64_t dim, bool sorted = true,
                                              bool return_inverse = false,
                                              bool return_counts = false);
/// Only runs of equal elements (slices along dim) collapsed, in their order
/// (torch.unique_consecutive).
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& t, bool return_inverse = false,
                                                      bool return_counts = false,
                                                      std::optional<int64_t> dim = std::nullopt);
std::tuple<Tensor, Tensor, Tensor> unique_dim_consecutive(const Tensor& t, int64_t dim,
                                                          bool return_inverse = false,
                                                          bool return_counts = false);
/// Running sums along dim (integers and bool sum in i64, or in `dtype`).
Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype = std::nullopt);
/// Running products along dim (integers and bool multiply in i64, or in `dtype`). Its
/// gradient holds where there are zeros, as torch's.
Tensor cumprod(const Tensor& t, int64_t dim, std::optional<DType> dtype = std::nullopt);
/// The product of all elements, or along dim (integers and bool multiply in i64). Its gradient
/// is the product of the other elements, zeros included.
Tensor prod(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& t, int64_t dim, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
/// log(sum(exp(t))) over dims, computed without overflow.
Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim = false);
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor logsumexp(const Tensor& t, I dim, bool keepdim = false) {
  return logsumexp(t, Shape{static_cast<int64_t>(dim)}, keepdim);
}
/// (values, indices) of the k largest (smallest) elements along dim, in order. Equal elements
/// keep the order of their positions, and NaN counts as larger than any number, on every device.
/// The values' gradient goes back to the positions they came from.
std::pair<Tensor, Tensor> topk(const Tensor& t, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
/// (values, indices) sorted along dim, stable (see topk).
std::pair<Tensor, Tensor> sort(const Tensor& t, int64_t dim = -1, bool descending = false);
/// The indices that sort t along dim.
Tensor argsort(const Tensor& t, int64_t dim = -1, bool descending = false);
/// (values, indices) of the k-th smallest element along dim (k from 1; NaN counts as larger than
/// any number, as in sort).
std::pair<Tensor, Tensor> kthvalue(const Tensor& t, int64_t k, int64_t dim = -1,
                                   bool keepdim = false);
/// The lower median (of an even count, the smaller middle element), as torch.median: of all
/// elements (NaN for none), or along dim with its index. NaN where there is a NaN, with the
/// first NaN's index. The gradient goes to the element picked.
Tensor median(const Tensor& t);
std::pair<Tensor, Tensor> median(const Tensor& t, int64_t dim, bool keepdim = false);
/// (var, mean) and (std, mean) over dims (all dims when empty), as torch.var_mean.
std::pair<Tensor, Tensor> var_mean(const Tensor& t, const Shape& dims = {}, bool unbiased = true,
                                   bool keepdim = false);
std::pair<Tensor, Tensor> std_mean(const Tensor& t, const Shape& dims = {}, bool unbiased = true,
                                   bool keepdim = false);
/// For each value, the index at which it would be inserted into sorted_sequence (sorted along
/// its last dim; 1-d, or the values' leading dims then its own) to keep it sorted: before equal
/// elements, or after them when right. i64 (i32 with out_int32). NaN is above every number and
/// equal to NaN, as sort orders it (NumPy's rule; torch's binary search gives NaN boundaries
/// answers that depend on its probes): a NaN value goes after every number, a NaN boundary
/// after every number. Composed of a comparison of every value with every boundary: memory
/// grows as their product.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false,
                    bool right = false);
/// searchsorted(boundaries, input) for 1-d boundaries, as torch.bucketize.
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32 = false,
                 bool right = false);
/// Index into the flattened tensor.
Tensor argmax(const Tensor& t);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& t);

}  // namespace tandem
