// libtorch's ops built on a stable sort: the unique family, quantile and nanquantile, and
// scatter_reduce (its amax, amin and prod reduce runs of equal destinations after sorting). They
// are compositions of other ops, so they run on every device those run on; sizes that depend on
// the data (unique's count) are read on the host, as torch's.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

Tensor empty_i64(Device device) { return zeros({0}, TensorOptions(DType::i64).device(device)); }

// Where each of the n sorted rows starts a new run: true at 0 and where a row differs from the
// one before (any element of it; NaN differs from everything, as torch's).
Tensor run_starts(const Tensor& rows) {
  const int64_t n = rows.size(0);
  const Tensor head =
      ones({std::min<int64_t>(n, 1)}, TensorOptions(DType::boolean).device(rows.device()));
  if (n < 2) return head;
  Tensor differs = ne(rows.narrow(0, 1, n - 1), rows.narrow(0, 0, n - 1));
  if (differs.dim() > 1) differs = any(differs.reshape({n - 1, -1}), 1);
  return cat({head, differs});
}

// The unique family over the rows of `rows` ((n, ...), the dim of interest first): sorted
// lexicographically unless consecutive. Returns (the distinct rows, each row's run, the runs'
// lengths); the last two only where asked for (else empty).
std::tuple<Tensor, Tensor, Tensor> unique_rows(const Tensor& rows, bool consecutive,
                                               bool return_inverse, bool return_counts) {
  NoGradGuard guard;
  const int64_t n = rows.size(0);
  const Device device = rows.device();
  if (n == 0) return {rows, empty_i64(device), empty_i64(device)};
  Tensor order;  // the sorted rows' original positions
  Tensor sorted = rows;
  if (!consecutive) {
    // Lexicographic: stable sorts by each column, the last first (rows of no columns are all
    // equal, in their order).
    const Tensor flat = rows.reshape({n, -1});
    const int64_t columns = flat.size(1);
    order = columns == 0 ? arange(n, TensorOptions(DType::i64).device(device))
                         : argsort(flat.select(1, columns - 1));
    for (int64_t c = columns - 1; c-- > 0;)
      order = order.index_select(0, argsort(flat.select(1, c).index_select(0, order)));
    sorted = rows.index_select(0, order);
  }
  const Tensor starts = run_starts(sorted);
  const Tensor firsts = nonzero(starts).reshape({-1});
  const Tensor values = sorted.index_select(0, firsts);
  Tensor inverse = empty_i64(device), counts = empty_i64(device);
  if (return_inverse) {
    const Tensor run = sub(cumsum(starts, 0), 1);
    inverse = consecutive
                  ? run
                  : zeros({n}, TensorOptions(DType::i64).device(device)).scatter(0, order, run);
  }
  if (return_counts)
    counts = diff(firsts, 1, 0, {}, full({1}, n, TensorOptions(DType::i64).device(device)));
  return {values, inverse, counts};
}

std::tuple<Tensor, Tensor, Tensor> unique_all(const Tensor& t, bool consecutive,
                                              bool return_inverse, bool return_counts,
                                              const char* op) {
  check_defined(t, op, "input");
  auto [values, inverse, counts] =
      unique_rows(t.reshape({-1}), consecutive, return_inverse, return_counts);
  if (return_inverse) inverse = inverse.reshape(t.shape());
  return {values, inverse, counts};
}

std::tuple<Tensor, Tensor, Tensor> unique_along(const Tensor& t, int64_t dim, bool consecutive,
                                                bool return_inverse, bool return_counts,
                                                const char* op) {
  check_defined(t, op, "input");
  TANDEM_CHECK(t.dim() > 0, op, ": a 0-dim tensor has no dim to take unique slices along");
  dim = wrap_dim(dim, t.dim(), op);
  auto [values, inverse, counts] =
      unique_rows(t.movedim(dim, 0), consecutive, return_inverse, return_counts);
  return {values.movedim(0, dim), inverse, counts};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> _unique2(const Tensor& t, bool /*sorted*/, bool return_inverse,
                                            bool return_counts) {
  return unique_all(t, false, return_inverse, return_counts, "unique");
}
std::tuple<Tensor, Tensor> _unique(const Tensor& t, bool /*sorted*/, bool return_inverse) {
  auto [values, inverse, counts] = unique_all(t, false, return_inverse, false, "unique");
  return {values, inverse};
}
std::tuple<Tensor, Tensor, Tensor> unique_dim(const Tensor& t, int64_t dim, bool /*sorted*/,
                                              bool return_inverse, bool return_counts) {
  return unique_along(t, dim, false, return_inverse, return_counts, "unique_dim");
}
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& t, bool return_inverse,
                                                      bool return_counts,
                                                      std::optional<int64_t> dim) {
  if (dim) return unique_along(t, *dim, true, return_inverse, return_counts, "unique_consecutive");
  return unique_all(t, true, return_inverse, return_counts, "unique_consecutive");
}
std::tuple<Tensor, Tensor, Tensor> unique_dim_consecutive(const Tensor& t, int64_t dim,
                                                          bool return_inverse, bool return_counts) {
  return unique_along(t, dim, true, return_inverse, return_counts, "unique_dim_consecutive");
}

namespace {

// torch's quantile_compute: the sorted values along the last dim, the ranks q (n - 1) (with
// ignore_nan, q (the non-NaN count - 1); without, a row holding a NaN takes the last, NaN),
// rounded by `interpolation` or interpolated between the values below and above.
Tensor quantile_of(const Tensor& t, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   const std::string& interpolation, bool ignore_nan, const char* op) {
  check_defined(t, op, "input");
  check_defined(q, op, "q");
  TANDEM_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op,
               ": the input must be f32 or f64, got ", t.dtype());
  TANDEM_CHECK(q.dtype() == t.dtype(), op, ": q must have the input's dtype ", t.dtype(), ", got ",
               q.dtype());
  TANDEM_CHECK(q.dim() <= 1, op, ": q must be a number, or a 0-d or 1-d tensor, got shape ",
               shape_str(q.shape()));
  check_same_device(t, q, op);
  TANDEM_CHECK(t.numel() > 0, op, ": the input must not be empty");
  const bool linear = interpolation == "linear", midpoint = interpolation == "midpoint";
  TANDEM_CHECK(linear || midpoint || interpolation == "lower" || interpolation == "higher" ||
                   interpolation == "nearest",
               op, ": interpolation must be linear, lower, higher, midpoint or nearest, got '",
               interpolation, "'");
  if (q.numel() > 0) {
    NoGradGuard guard;  // (a host read, as torch's check on the CPU)
    TANDEM_CHECK(all(logical_and(ge(q, 0.0), le(q, 1.0))).item<bool>(), op,
                 ": q values must be in [0, 1]");
  }
  // The values to take quantiles of along the last dim; `kept`: the result's shape after q's.
  Tensor x;
  Shape kept;
  if (dim) {
    const int64_t d = wrap_dim(*dim, t.dim(), op);
    x = t.dim() == 0 ? t.reshape({1}) : t.movedim(d, -1);
    kept = t.shape();
    if (t.dim() > 0) {
      if (keepdim)
        kept[static_cast<size_t>(d)] = 1;
      else
        kept.erase(kept.begin() + d);
    }
  } else {
    x = t.reshape({-1});
    if (keepdim) kept.assign(static_cast<size_t>(t.dim()), 1);
  }
  const Tensor sorted = sort(x, -1).first;
  const int64_t n = sorted.size(-1);
  // q along a leading dim of its own, against every row.
  Shape q_shape(static_cast<size_t>(sorted.dim()) + 1, 1);
  q_shape[0] = q.numel();
  const Tensor qs = q.reshape(q_shape);
  const Tensor rows = sorted.unsqueeze(0);  // (1, rows..., n)
  Tensor ranks;
  if (ignore_nan) {
    const Tensor valid = sum(logical_not(isnan(rows)), Shape{-1}, true).to(t.dtype());
    ranks = mul(qs, sub(valid, 1.0));
    ranks = ranks.masked_fill(lt(ranks, 0.0), 0.0);
  } else {
    ranks = where(any(isnan(rows), -1, true), full({}, static_cast<double>(n - 1), t.options()),
                  mul(qs, static_cast<double>(n - 1)));
  }
  if (interpolation == "lower") ranks = floor(ranks);
  if (interpolation == "higher") ranks = ceil(ranks);
  if (interpolation == "nearest") ranks = round(ranks);
  Shape expanded = ranks.shape();
  expanded.back() = n;
  const Tensor values = rows.expand(expanded);
  const Tensor below = ranks.to(DType::i64);
  Tensor result = gather(values, -1, below);
  if (linear || midpoint) {
    const Tensor above = ceil(ranks).to(DType::i64);
    const Tensor weight = midpoint ? full_like(ranks, 0.5) : sub(ranks, below.to(t.dtype()));
    result = lerp(result, gather(values, -1, above), weight);
  }
  Shape out_shape = kept;
  if (q.dim() == 1) out_shape.insert(out_shape.begin(), q.numel());
  return result.reshape(out_shape);
}

Tensor q_tensor(const Tensor& t, double q, const char* op) {
  check_defined(t, op, "input");
  return scalar_tensor(q, t.options());
}

}  // namespace

Tensor quantile(const Tensor& t, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                const std::string& interpolation) {
  return quantile_of(t, q, dim, keepdim, interpolation, false, "quantile");
}
Tensor quantile(const Tensor& t, double q, std::optional<int64_t> dim, bool keepdim,
                const std::string& interpolation) {
  return quantile_of(t, q_tensor(t, q, "quantile"), dim, keepdim, interpolation, false, "quantile");
}
Tensor nanquantile(const Tensor& t, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   const std::string& interpolation) {
  return quantile_of(t, q, dim, keepdim, interpolation, true, "nanquantile");
}
Tensor nanquantile(const Tensor& t, double q, std::optional<int64_t> dim, bool keepdim,
                   const std::string& interpolation) {
  return quantile_of(t, q_tensor(t, q, "nanquantile"), dim, keepdim, interpolation, true,
                     "nanquantile");
}

namespace {

// Each element of index's extent of src: the position in self's contiguous order it goes to.
Tensor destinations(const Tensor& self, int64_t dim, const Tensor& index) {
  const Shape strides = contiguous_strides(self.shape());
  Tensor dest = mul(index, strides.empty() ? 1 : strides[static_cast<size_t>(dim)]);
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d == dim || index.size(d) == 1) continue;
    Shape along(static_cast<size_t>(index.dim()), 1);
    along[static_cast<size_t>(d)] = index.size(d);
    dest = add(
        dest,
        mul(arange(index.size(d), TensorOptions(DType::i64).device(index.device())).reshape(along),
            strides[static_cast<size_t>(d)]));
  }
  return dest;
}

// self with each position combined with every value sent to it (and with self's own value when
// include_self), by "amax", "amin" or "prod": the values sorted by destination (stably), then a
// segmented doubling scan within each run, whose last element is the run's result. No history.
Tensor reduce_by_destination(const Tensor& self, int64_t dim, const Tensor& index,
                             const Tensor& src, const std::string& reduce, bool include_self) {
  NoGradGuard guard;
  Tensor keys = destinations(self, dim, index).reshape({-1});
  Tensor values = src.reshape({-1});
  if (include_self) {
    keys = cat({arange(self.numel(), TensorOptions(DType::i64).device(self.device())), keys});
    values = cat({self.reshape({-1}), values});
  }
  const Tensor order = argsort(keys);
  keys = keys.index_select(0, order);
  values = values.index_select(0, order);
  const int64_t n = keys.numel();
  auto combine = [&](const Tensor& a, const Tensor& b) {
    if (reduce == "prod") return mul(a, b);
    return reduce == "amax" ? maximum(a, b) : minimum(a, b);
  };
  for (int64_t step = 1; step < n; step *= 2) {
    const Tensor same = eq(keys.narrow(0, step, n - step), keys.narrow(0, 0, n - step));
    const Tensor later = values.narrow(0, step, n - step);
    values = cat({values.narrow(0, 0, step),
                  where(same, combine(values.narrow(0, 0, n - step), later), later)});
  }
  Tensor out = self.contiguous().clone().reshape({-1});
  if (n == 0) return out.reshape(self.shape());
  const Tensor last = cat({ne(keys.narrow(0, 1, n - 1), keys.narrow(0, 0, n - 1)),
                           ones({1}, TensorOptions(DType::boolean).device(keys.device()))});
  const Tensor at = nonzero(last).reshape({-1});
  out.index_put_({keys.index_select(0, at)}, values.index_select(0, at));
  return out.reshape(self.shape());
}

// src's gradient from the gradient of index's extent of it: zeros beyond that extent.
Tensor grad_to_src(const Tensor& g, const Shape& src_shape) {
  if (g.shape() == src_shape) return g;
  Tensor out = zeros(src_shape, g.options());
  Tensor region = out;
  for (int64_t d = 0; d < g.dim(); ++d) region = region.narrow(d, 0, g.size(d));
  region.copy_(g);
  return out;
}

}  // namespace

Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self) {
  const char* op = "scatter_reduce";
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_defined(src, op, "src");
  const bool sum_like = reduce == "sum" || reduce == "mean";
  TANDEM_CHECK(sum_like || reduce == "prod" || reduce == "amax" || reduce == "amin", op,
               ": reduce must be sum, prod, mean, amax or amin, got '", reduce, "'");
  TANDEM_CHECK(index.dtype() == DType::i64, op, ": index must be i64, got ", index.dtype());
  TANDEM_CHECK(src.dtype() == self.dtype(), op, ": src's dtype ", src.dtype(),
               " differs from self's ", self.dtype());
  check_inputs({self, index, src}, op);
  dim = wrap_dim(dim, self.dim(), op);
  TANDEM_CHECK(index.dim() == self.dim() && src.dim() == self.dim(), op,
               ": index and src must have self's number of dims (", self.dim(), "), got ",
               index.dim(), " and ", src.dim());
  for (int64_t d = 0; d < self.dim(); ++d)
    TANDEM_CHECK(index.size(d) <= src.size(d) && (d == dim || index.size(d) <= self.size(d)), op,
                 ": index of shape ", shape_str(index.shape()), " is larger than src ",
                 shape_str(src.shape()), " in a dim, or than self ", shape_str(self.shape()),
                 " in a dim other than ", dim);
  if (index.numel() > 0) {  // (a host read, as one_hot's)
    const auto [lo, hi] = host_extremes(index);
    const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
    TANDEM_CHECK_INDEX(lo >= 0 && hi < n, op, ": index ", lo < 0 ? lo : hi,
                       " is out of bounds for dim ", dim, " of size ", n);
  }
  Tensor part = src;
  for (int64_t d = 0; d < src.dim(); ++d) part = part.narrow(d, 0, index.size(d));
  if (sum_like) {
    // Differentiable as the ops it is made of: self's value out where it is not included.
    const Tensor base = include_self ? self : scatter(self, dim, index, 0.0);
    const Tensor total = scatter_add(base, dim, index, part);
    if (reduce == "sum") return total;
    // Values per position, self's included; 1 where none (self's value stays).
    Tensor count =
        scatter_add(include_self ? ones_like(self) : zeros_like(self), dim, index, ones_like(part));
    count = count.masked_fill(eq(count, 0), 1);
    return self.is_floating_point() ? div(total, count) : div(total, count, "floor");
  }
  Tensor out = reduce_by_destination(self, dim, index, part, reduce, include_self);
  if (!self.is_floating_point() || !(self.requires_grad() || part.requires_grad())) return out;
  // torch's scatter_reduce_backward.
  autograd::record(
      op, {self, src}, out,
      [self = self.detach(), part = part.detach(), out_value = out.detach(), index, dim, reduce,
       include_self, src_shape = src.shape()](const Tensor& g) {
        Tensor g_self, g_part;
        if (reduce == "prod") {
          const Tensor masked_self = self.masked_fill(eq(self, 0.0), 1.0);
          g_self = div(
              mul(g, reduce_by_destination(masked_self, dim, index, part, reduce, include_self)),
              masked_self);
          const Tensor src_zero = eq(part, 0.0);
          const Tensor zeros_there = gather(
              scatter_add(zeros_like(self), dim, index, src_zero.to(self.dtype())), dim, index);
          const Tensor single_zero = logical_and(src_zero, eq(zeros_there, 1.0));
          const Tensor without_zero = reduce_by_destination(
              self, dim, index, part.masked_fill(single_zero, 1.0), reduce, include_self);
          g_part =
              where(single_zero, gather(mul(g, without_zero), dim, index),
                    div(gather(mul(g, out_value), dim, index), part.masked_fill(src_zero, 1.0)));
        } else {  // amax, amin: shared among the values equal to the result
          const Tensor value = gather(out_value, dim, index);
          const Tensor self_is = eq(self, out_value).to(self.dtype());
          const Tensor part_is = eq(part, value).to(self.dtype());
          const Tensor shared = div(g, scatter_add(self_is, dim, index, part_is));
          g_self = mul(self_is, shared);
          g_part = mul(part_is, gather(shared, dim, index));
        }
        if (!include_self) g_self = scatter(g_self, dim, index, 0.0);
        return std::vector<Tensor>{g_self, grad_to_src(g_part, src_shape)};
      });
  autograd::save_for_backward(out, {self, src});
  return out;
}

}  // namespace tandem
