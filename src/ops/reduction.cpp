// Reductions: the reduced dims are moved last and made contiguous, so every kernel reduces the
// rows of a (kept, reduced) matrix.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;
using kernels::ReduceOp;

namespace {

struct Plan {
  std::vector<bool> reduced;  // per input dim
  Shape out_shape;            // with keepdim applied
  Shape keep_shape;           // reduced dims as size 1 (for broadcasting gradients back)
  int64_t rows = 1, cols = 1;
};

Plan plan_reduction(const Tensor& t, const Shape& dims, bool keepdim, const char* op) {
  const int64_t nd = t.dim();
  Plan p;
  p.reduced.assign(nd, dims.empty());  // no dims: reduce everything, as torch's sum(dim=[])
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, op);
    if (nd == 0) continue;  // a 0-dim tensor's dim 0 (or -1) is itself, as torch takes it
    TANDEM_CHECK(!p.reduced[w] || dims.empty(), op, ": dim ", w, " appears more than once");
    p.reduced[w] = true;
  }
  for (int64_t d = 0; d < nd; ++d) {
    int64_t size = t.shape()[d];
    if (p.reduced[d]) {
      p.cols *= size;
      p.keep_shape.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.rows *= size;
      p.keep_shape.push_back(size);
      p.out_shape.push_back(size);
    }
  }
  return p;
}

// The input as a contiguous (rows, cols) matrix in dtype `dt`.
Tensor as_rows(const Tensor& t, const Plan& p, DType dt) {
  NoGradGuard guard;
  Shape order;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (!p.reduced[d]) order.push_back(d);
  for (int64_t d = 0; d < t.dim(); ++d)
    if (p.reduced[d]) order.push_back(d);
  return as_dtype(t, dt).permute(order).contiguous();
}

// Whether t is row-major contiguous and the reduced dims are its leading ones, some kept.
bool leading(const Tensor& t, const Plan& p) {
  if (!t.is_contiguous() || p.rows <= 1 || p.cols <= 1) return false;
  int64_t d = 0;
  while (d < t.dim() && p.reduced[d]) ++d;
  for (int64_t e = d; e < t.dim(); ++e)
    if (p.reduced[e]) return false;
  return d > 0 && d < t.dim();
}

// Whether the reduced dims of a contiguous t are its last ones (its rows need no copy).
bool trailing(const Tensor& t, const Plan& p) {
  if (!t.is_contiguous()) return false;
  int64_t d = t.dim();
  while (d > 0 && p.reduced[d - 1]) --d;
  for (int64_t e = 0; e < d; ++e)
    if (p.reduced[e]) return false;
  return true;
}

// The dims of t from the outermost in memory to the innermost (by stride, size-1 dims where they
// stand), where t is a permuted view of a dense tensor (a transpose): else empty.
Shape memory_order(const Tensor& t) {
  Shape wide;  // the dims of more than one element, by falling stride
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) wide.push_back(d);
  std::stable_sort(wide.begin(), wide.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  Shape order;
  auto next = wide.begin();
  for (int64_t d = 0; d < t.dim(); ++d) order.push_back(t.size(d) > 1 ? *next++ : d);
  return t.permute(order).is_contiguous() ? order : Shape{};
}

Tensor reduce(ReduceOp op, const Tensor& t, const Plan& p, DType out_dtype, const char* name);

// A transposed view reduced in its memory order, where that order makes the reduced dims its
// leading ones (a CPU sum: sum_columns) or its last ones (any reduction: rows as they lie): no
// transposed copy of the input (summing a transposed (128, 4096) took 18x PyTorch's time, the
// copy all of it). The result's kept dims come back in t's order. Undefined where not so.
Tensor reduce_in_memory_order(ReduceOp op, const Tensor& t, const Plan& p, DType out_dtype,
                              const char* name) {
  if (t.dim() < 2 || t.numel() == 0 || t.is_contiguous()) return Tensor();
  const Shape order = memory_order(t);
  if (order.empty()) return Tensor();
  const Tensor base = t.permute(order);
  Plan pb;
  Shape kept;  // base's kept dims, as dims of t
  for (int64_t d : order) {
    pb.reduced.push_back(p.reduced[d]);
    if (p.reduced[d]) {
      pb.cols *= t.size(d);
    } else {
      pb.rows *= t.size(d);
      pb.out_shape.push_back(t.size(d));
      kept.push_back(d);
    }
  }
  const bool sum_columns = op == ReduceOp::sum && t.is_cpu() && leading(base, pb);
  if (!sum_columns && !trailing(base, pb)) return Tensor();
  Tensor out = reduce(op, base, pb, out_dtype, name);
  Shape back(kept.size());  // out's dims in t's order
  for (size_t i = 0; i < kept.size(); ++i)
    back[i] = std::count_if(kept.begin(), kept.end(), [&](int64_t d) { return d < kept[i]; });
  Shape inverse(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) inverse[back[i]] = static_cast<int64_t>(i);
  return out.permute(inverse).contiguous().reshape(p.out_shape);
}

Tensor reduce(ReduceOp op, const Tensor& t, const Plan& p, DType out_dtype, const char* name) {
  check_defined(t, name, "input");
  if (Tensor r = reduce_in_memory_order(op, t, p, out_dtype, name); r.defined()) return r;
  if (op != ReduceOp::sum)
    TANDEM_CHECK(p.cols > 0, name, ": cannot reduce over a zero-size dim (no identity), input ",
                 "shape ", shape_str(t.shape()));
  kernels::reduce_rows.at(t, name);
  bool index = op == ReduceOp::argmax || op == ReduceOp::argmin;
  // Floats reduce into their own dtype (f16/bf16 accumulate wider inside the kernel); integer
  // sums into i64.
  DType kernel_out = index ? DType::i64 : (is_floating(t.dtype()) ? t.dtype() : out_dtype);
  Tensor out = empty(p.out_shape, TensorOptions(kernel_out).device(t.device()));
  if (op == ReduceOp::sum && t.is_cpu() && leading(t, p)) {
    kernels::sum_columns(out, t, p.cols, p.rows);  // no transposed copy
  } else {
    kernels::reduce_rows(out, op, as_rows(t, p, t.dtype()), p.rows, p.cols);
  }
  return index ? out : as_dtype(out, out_dtype);
}

DType sum_dtype(DType t) { return is_floating(t) ? t : DType::i64; }

// The gradient of a reduction that picks extreme elements (amax, max over all): split evenly
// among the elements equal to the result, as torch. g and y have the reduced dims kept as 1.
Tensor extreme_backward(const Tensor& g, const Tensor& x, const Tensor& y, const Plan& p,
                        bool nan_picks = false) {
  // nan_picks (max() and min() of all elements, torch's evenly_distribute_backward): a NaN
  // result's gradient is shared by the NaN elements; amax/amin's compare with ==, so a NaN
  // result's gradient is NaN, as torch's.
  Tensor mask = (nan_picks ? where(isnan(y), isnan(x), eq(x, y)) : eq(x, y)).to(g.dtype());
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (p.reduced[d]) dims.push_back(d);
  Tensor count = dims.empty() ? mask : sum(mask, dims, true);
  return div(mul(mask, g), count);
}

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims, bool keepdim) {
  if (autocast_changes("sum", {t})) return sum(autocast_input("sum", t), dims, keepdim);
  check_defined(t, "sum", "input");
  Plan p = plan_reduction(t, dims, keepdim, "sum");
  Tensor out = reduce(ReduceOp::sum, t, p, sum_dtype(t.dtype()), "sum");
  Shape in_shape = t.shape(), keep_shape = p.keep_shape;
  autograd::record("sum", {t}, out, [in_shape, keep_shape](const Tensor& g) -> std::vector<Tensor> {
    return {expand(reshape(g, keep_shape), in_shape)};
  }, kDifferentiable);
  return out;
}

Tensor sum(const Tensor& t) { return sum(t, {}, false); }

Tensor mean(const Tensor& t, const Shape& dims, bool keepdim) {
  if (autocast_changes("mean", {t})) return mean(autocast_input("mean", t), dims, keepdim);
  check_defined(t, "mean", "input");
  check_floating(t, "mean");
  Plan p = plan_reduction(t, dims, keepdim, "mean");
  // An empty reduction gives NaN, as torch (0 / 0).
  return mul(sum(t, dims, keepdim), 1.0 / static_cast<double>(p.cols));
}

Tensor mean(const Tensor& t) { return mean(t, {}, false); }

Tensor std(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  return root_of_variance(var(t, dims, correction, keepdim));
}

Tensor var(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  if (autocast_changes("var", {t})) return var(autocast_input("var", t), dims, correction, keepdim);
  check_defined(t, "var", "input");
  check_floating(t, "var");
  // f16/bf16 in f32, rounded once at the end into the input's dtype, as torch's (their squares
  // summed in f16 pass 65504 soon).
  if (is_reduced_float(t.dtype()))
    return var(t.to(DType::f32), dims, correction, keepdim).to(t.dtype());
  Plan p = plan_reduction(t, dims, keepdim, "var");
  const double denom = std::max<double>(0.0, static_cast<double>(p.cols - correction));
  Tensor out;
  {
    NoGradGuard no_grad;  // one node, below
    const Tensor centered = sub(t, mean(t, dims, true));
    out = div(sum(mul(centered, centered), dims, keepdim),
              full({}, denom, TensorOptions(t.dtype()).device(t.device())));
  }
  // torch's var_backward, 2 / (N - correction) g (t - mean): with no dof left, infinite where t
  // is off its mean (differentiating through the mean as well would make those NaN).
  autograd::record(
      "var", {t}, out,
      [t, dims, keep_shape = p.keep_shape, scale = 2.0 / denom](const Tensor& g) {
        return std::vector<Tensor>{
            mul(mul(g.reshape(keep_shape), scale), sub(t, mean(t, dims, true)))};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {t});
  return out;
}

namespace {
// How many elements are nonzero (NaN counts, as in torch), with no history: norm's p = 0, and
// all/any against the count.
Tensor nonzero_count(const Tensor& t, const Shape& dims, bool keepdim, const char* name) {
  check_defined(t, name, "input");
  NoGradGuard no_grad;
  return sum(ne(t, zeros({}, TensorOptions(t.dtype()).device(t.device()))), dims, keepdim);
}
}  // namespace

Tensor norm(const Tensor& t) { return norm(t, 2.0, {}, false); }

Tensor norm(const Tensor& t, double p, const Shape& dims, bool keepdim) {
  if (autocast_changes("norm", {t})) return norm(autocast_input("norm", t), p, dims, keepdim);
  check_defined(t, "norm", "input");
  check_floating(t, "norm");
  TANDEM_CHECK(p >= 0, "norm: p must be a number >= 0 or inf, got ", p);  // NaN fails too
  if (std::isinf(p)) return amax(abs(t), dims, keepdim);
  if (p == 0) {  // the number of nonzero elements: a gradient of zeros, as torch
    Tensor count = nonzero_count(t, dims, keepdim, "norm").to(t.dtype());
    const Shape shape = t.shape();
    autograd::record("norm", {t}, count, [shape](const Tensor& g) -> std::vector<Tensor> {
      return {zeros(shape, TensorOptions(g.dtype()).device(g.device()))};
    }, kDifferentiable);
    return count;
  }
  if (p == 1) return sum(abs(t), dims, keepdim);
  const Plan plan = plan_reduction(t, dims, keepdim, "norm");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = p == 2 ? sqrt(sum(mul(t, t), dims, keepdim))
                 : pow(sum(pow(abs(t), p), dims, keepdim), 1.0 / p);
  }
  Tensor y = out.detach();
  const Shape keep = plan.keep_shape;
  autograd::record("norm", {t}, out, [t, y, p, keep](const Tensor& g) -> std::vector<Tensor> {
    // g t |t|^(p-2) / y^(p-1), and 0 where the norm is 0 (every element 0) instead of 0 / 0,
    // and (p < 1, where |t|^(p-1) is infinite at 0) at zero elements, as torch.
    Tensor yk = reshape(autograd::saved_output(y), keep);
    Tensor zero = zeros({}, TensorOptions(yk.dtype()).device(yk.device()));
    Tensor scale = where(eq(yk, zero), zero,
                         div(reshape(g, keep), p == 2 ? yk : pow(yk, p - 1)));
    Tensor direction = p == 2 ? t : mul(sign(t), pow(abs(t), p - 1));
    if (p < 1) direction = where(eq(t, zero), zero, direction);
    return {mul(direction, scale)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {t, out});
  return out;
}

namespace {
// all's and any's verdict in torch's dtype: bool, or u8 for a u8 input.
Tensor verdict(const Tensor& result, const Tensor& t) {
  return t.dtype() == DType::u8 ? result.to(DType::u8) : result;
}
}  // namespace

Tensor all(const Tensor& t) {
  return verdict(
      eq(nonzero_count(t, {}, false, "all"),
         full({}, static_cast<double>(t.numel()), TensorOptions(DType::i64).device(t.device()))),
      t);
}
Tensor all(const Tensor& t, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, t.dim(), "all");
  const int64_t n = t.dim() == 0 ? 1 : t.size(d);
  return verdict(eq(nonzero_count(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, "all"),
                    full({}, static_cast<double>(n), TensorOptions(DType::i64).device(t.device()))),
                 t);
}
Tensor any(const Tensor& t) {
  return verdict(gt(nonzero_count(t, {}, false, "any"),
                    zeros({}, TensorOptions(DType::i64).device(t.device()))),
                 t);
}
Tensor any(const Tensor& t, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, t.dim(), "any");
  return verdict(gt(nonzero_count(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, "any"),
                    zeros({}, TensorOptions(DType::i64).device(t.device()))),
                 t);
}

namespace {
// The largest (smallest) values over dims; the gradient is split among the elements equal to
// the result, as torch's amax/amin and max()/min() of all elements.
Tensor extreme_over(ReduceOp op, const Tensor& t, const Shape& dims, bool keepdim, const char* name,
                    bool nan_picks = false) {
  check_defined(t, name, "input");
  Plan p = plan_reduction(t, dims, keepdim, name);
  Tensor out = reduce(op, t, p, t.dtype(), name);
  Tensor y = out.detach();
  autograd::record(
      name, {t}, out,
      [t, y, p, nan_picks](const Tensor& g) -> std::vector<Tensor> {
        return {
            extreme_backward(reshape(g, p.keep_shape), t, reshape(y, p.keep_shape), p, nan_picks)};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {t, out});
  return out;
}
}  // namespace

Tensor amax(const Tensor& t, const Shape& dims, bool keepdim) {
  return extreme_over(ReduceOp::max, t, dims, keepdim, "amax");
}

Tensor amin(const Tensor& t, const Shape& dims, bool keepdim) {
  return extreme_over(ReduceOp::min, t, dims, keepdim, "amin");
}

Tensor max(const Tensor& t) {
  check_defined(t, "max", "input");
  TANDEM_CHECK(t.numel() > 0, "max: an empty tensor has no largest value (give a dim to reduce)");
  return extreme_over(ReduceOp::max, t, {}, false, "max", /*nan_picks=*/true);
}

Tensor min(const Tensor& t) {
  check_defined(t, "min", "input");
  TANDEM_CHECK(t.numel() > 0, "min: an empty tensor has no smallest value (give a dim to reduce)");
  return extreme_over(ReduceOp::min, t, {}, false, "min", /*nan_picks=*/true);
}

namespace {
// max/min along one dim with indices; the gradient goes to the selected element only.
std::pair<Tensor, Tensor> extreme_dim(bool is_max, const Tensor& t, int64_t dim, bool keepdim) {
  const char* name = is_max ? "max" : "min";
  check_defined(t, name, "input");
  int64_t d = wrap_dim(dim, t.dim(), name);
  Plan p = plan_reduction(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, name);
  Tensor values = reduce(is_max ? ReduceOp::max : ReduceOp::min, t, p, t.dtype(), name);
  Tensor indices = reduce(is_max ? ReduceOp::argmax : ReduceOp::argmin, t, p, DType::i64, name);
  Shape in_shape = t.shape(), keep_shape = p.keep_shape;
  autograd::record(name, {t}, values, [=](const Tensor& g) -> std::vector<Tensor> {
    if (in_shape.empty()) return {g};
    // one-hot of the index along d, broadcast against the gradient
    Shape iota_shape(in_shape.size(), 1);
    iota_shape[d] = in_shape[d];
    Tensor iota = reshape(
        arange(static_cast<double>(in_shape[d]), TensorOptions(DType::i64).device(g.device())),
        iota_shape);
    Tensor hit = eq(iota, reshape(indices, keep_shape));
    Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
    return {where(hit, reshape(g, keep_shape), zero)};
  }, kDifferentiable);
  autograd::save_for_backward(values, {indices});
  return {values, indices};
}
}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& t, int64_t dim, bool keepdim) {
  return extreme_dim(true, t, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& t, int64_t dim, bool keepdim) {
  return extreme_dim(false, t, dim, keepdim);
}

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined(t, "argmax", "input");
  int64_t d = wrap_dim(dim, t.dim(), "argmax");
  Plan p = plan_reduction(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, "argmax");
  return reduce(ReduceOp::argmax, t, p, DType::i64, "argmax");
}

Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined(t, "argmin", "input");
  int64_t d = wrap_dim(dim, t.dim(), "argmin");
  Plan p = plan_reduction(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, "argmin");
  return reduce(ReduceOp::argmin, t, p, DType::i64, "argmin");
}

Tensor argmax(const Tensor& t) {
  check_defined(t, "argmax", "input");
  Tensor flat = reshape(t, {-1});
  return argmax(flat, 0, false);
}

Tensor argmin(const Tensor& t) {
  check_defined(t, "argmin", "input");
  return argmin(reshape(t, {-1}), 0, false);
}

// --- along one dim: scans, products, sorts ---------------------------------------------------

namespace {

// A tensor seen as (rows, cols) rows along `dim`: the dim moved last (a 0-dim tensor is one row
// of one), and the way back for a (rows, k) result.
struct Along {
  Shape moved;  // the shape with `dim` and the last dim swapped
  int64_t dim = 0, rows = 1, cols = 1;
  bool scalar = false;
};

Along along(const Tensor& t, int64_t dim, const char* name) {
  check_defined(t, name, "input");
  Along a;
  a.scalar = t.dim() == 0;
  a.dim = wrap_dim(dim, t.dim(), name);
  a.moved = a.scalar ? Shape{1} : t.shape();
  if (!a.scalar) std::swap(a.moved[a.dim], a.moved.back());
  a.cols = a.moved.back();
  a.rows = numel_of(Shape(a.moved.begin(), a.moved.end() - 1));
  return a;
}

Tensor rows_of(const Tensor& t, const Along& a) {
  NoGradGuard guard;
  return a.scalar ? t.reshape({1, 1}) : t.transpose(a.dim, -1).contiguous();
}

// A (rows, k) result in t's layout, with k in place of the dim's size.
Tensor put_back(const Tensor& r, const Along& a, int64_t k) {
  Shape s = a.moved;
  s.back() = k;
  return a.scalar ? r.reshape({}) : r.reshape(s).transpose(a.dim, -1);
}

// The kernel's scan along dim, not recorded.
Tensor scan(const Tensor& t, int64_t dim, kernels::ScanOp op, bool reverse, bool exclusive,
            const char* name) {
  const Along a = along(t, dim, name);
  kernels::scan_rows.at(t, name);
  const Tensor in = rows_of(t, a);
  Tensor out = empty(in.shape(), TensorOptions(t.dtype()).device(t.device()));
  if (a.rows > 0 && a.cols > 0) kernels::scan_rows(out, in, a.rows, a.cols, op, reverse, exclusive);
  return put_back(out, a, a.cols).contiguous();
}

// Integers and bool sum and multiply in i64, as torch's cumsum and prod.
DType widened(const Tensor& t, std::optional<DType> dtype) {
  if (dtype) return *dtype;
  return is_floating(t.dtype()) ? t.dtype() : DType::i64;
}

Tensor cumsum_recorded(const Tensor& t, int64_t dim, bool reverse) {
  Tensor out = scan(t, dim, kernels::ScanOp::sum, reverse, false, "cumsum");
  autograd::record(
      "cumsum", {t}, out,
      [dim, reverse](const Tensor& g) -> std::vector<Tensor> {
        return {cumsum_recorded(g, dim, !reverse)};  // each element reaches the sums after it
      },
      kDifferentiable);
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  check_defined(t, "cumsum", "input");
  return cumsum_recorded(as_dtype(t, widened(t, dtype)), dim, false);
}

namespace {

// d out_j / d x_i = the product of x_m over m <= j but i, for j >= i. Before a row's first
// zero that is out_j / x_i for the j before the zero too (the later products hold the zero, so
// their terms are 0, also where an infinity after it made out_j NaN: torch's gradient), so the
// gradient is the reverse running sum of g out over those j, over x; at the first zero it is the
// reverse running sum of g times the running products with that zero taken as 1; after it every
// product has the zero in it. Composed of recorded ops, so create_graph differentiates it again;
// no host read of whether there is a zero.
Tensor cumprod_backward(const Tensor& g, const Tensor& x, const Tensor& out, int64_t dim) {
  const TensorOptions o = TensorOptions(x.dtype()).device(x.device());
  const Tensor one = ones({}, o), zero = zeros({}, o);
  Tensor before, first_zero;  // bool masks
  {
    NoGradGuard no_grad;
    const Tensor is_zero = eq(x, zero).to(DType::i64);
    const Tensor zeros_so_far = cumsum(is_zero, dim);  // counts, i64
    before = eq(zeros_so_far, zeros({}, TensorOptions(DType::i64)));
    first_zero = eq(mul(zeros_so_far, is_zero), ones({}, TensorOptions(DType::i64)));
  }
  Tensor grad = where(
      before,
      div(cumsum_recorded(where(before, mul(g, out), zero), dim, true), where(before, x, one)),
      zero);
  const Tensor from_zero = cumprod(where(first_zero, one, x), dim);
  return where(first_zero, cumsum_recorded(mul(g, from_zero), dim, true), grad);
}

}  // namespace

Tensor cumprod(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  check_defined(t, "cumprod", "input");
  const Tensor x = as_dtype(t, widened(t, dtype));
  Tensor out = scan(x, dim, kernels::ScanOp::prod, false, false, "cumprod");
  const Tensor y = out.detach();
  autograd::record(
      "cumprod", {x}, out,
      [x, y, dim](const Tensor& g) -> std::vector<Tensor> {
        return {cumprod_backward(g, x, autograd::saved_output(y), dim)};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {x, out});
  return out;
}

Tensor prod(const Tensor& t, int64_t dim, bool keepdim, std::optional<DType> dtype) {
  check_defined(t, "prod", "input");
  const Tensor x = as_dtype(t, widened(t, dtype));
  const Along a = along(x, dim, "prod");
  Shape keep_shape = x.shape();  // the dim kept as size 1
  if (!a.scalar) keep_shape[a.dim] = 1;
  Tensor out;
  if (a.cols == 0) {
    out = ones(keep_shape, TensorOptions(x.dtype()).device(x.device()));
  } else {
    const Tensor running = scan(x, dim, kernels::ScanOp::prod, false, false, "prod");
    out = a.scalar ? running : running.narrow(a.dim, a.cols - 1, 1).contiguous();
  }
  if (!keepdim && !a.scalar) out = out.squeeze(a.dim);
  const int64_t d = a.dim;
  autograd::record("prod", {x}, out, [x, d, keep_shape](const Tensor& g) -> std::vector<Tensor> {
    // d prod / d x_i = the product of the others: the running products before and after i,
    // which holds where x has zeros too.
    const Tensor before = scan(x, d, kernels::ScanOp::prod, false, true, "prod");
    const Tensor after = scan(x, d, kernels::ScanOp::prod, true, true, "prod");
    return {mul(reshape(g, keep_shape), mul(before, after))};
  });
  autograd::save_for_backward(out, {x});
  return out;
}

Tensor prod(const Tensor& t, std::optional<DType> dtype) {
  check_defined(t, "prod", "input");
  return prod(t.reshape({-1}), 0, false, dtype);
}

Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim) {
  check_defined(t, "logsumexp", "input");
  check_floating(t, "logsumexp");
  const Plan p = plan_reduction(t, dims, false, "logsumexp");
  // The largest element taken out first keeps exp finite; an infinite one is left in, as
  // torch's (all -inf rows give -inf, not NaN). Computed unrecorded, in place where it can be,
  // with one node whose gradient is softmax's: g exp(x - out). Composed of eight recorded ops
  // it took 1.6x PyTorch's time (ops_compare.py).
  Tensor out;
  {
    NoGradGuard no_grad;
    // (an empty input: no max, and the empty sum's log is -inf, as torch's)
    Tensor m = t.numel() == 0 ? sum(t, dims, true) : amax(t, dims, true);
    m = where(isinf(m), zeros({}, TensorOptions(m.dtype()).device(m.device())), m);
    out = sum(sub(t, m).exp_(), dims, true).log_().add_(m);
  }
  const Tensor y = out.detach();
  autograd::record(
      "logsumexp", {t}, out,
      [t, y](const Tensor& g) -> std::vector<Tensor> {
        return {mul(g, exp(sub(t, autograd::saved_output(y))))};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {t, out});
  return keepdim ? out : reshape(out, p.out_shape);
}

std::pair<Tensor, Tensor> topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
  (void)sorted;  // always sorted, which torch's sorted=false allows
  check_defined(t, "topk", "input");
  if (t.dim() == 0) {
    auto [values, idx] = topk(t.reshape({1}), k, dim == -1 ? 0 : dim, largest);
    return {values.reshape({}), idx.reshape({})};
  }
  const Along a = along(t, dim, "topk");
  TANDEM_CHECK_INDEX(k >= 0 && k <= a.cols, "topk: k (", k, ") out of range for dim ", a.dim,
                     " of size ", a.cols, " (shape ", shape_str(t.shape()), ")");
  kernels::sort_rows.at(t, "topk");
  Tensor idx = empty({a.rows, k}, TensorOptions(DType::i64).device(t.device()));
  if (a.rows > 0 && k > 0) kernels::sort_rows(idx, rows_of(t, a), a.rows, a.cols, k, largest);
  idx = put_back(idx, a, k).contiguous();
  return {gather(t, a.dim, idx), idx};  // values, with gather's gradient
}

std::pair<Tensor, Tensor> sort(const Tensor& t, int64_t dim, bool descending) {
  const Along a = along(t, dim, "sort");
  return topk(t, a.cols, dim, descending);
}

Tensor argsort(const Tensor& t, int64_t dim, bool descending) {
  return sort(t.detach(), dim, descending).second;
}

// An integer or bool dtype is the result's too, as torch's: the sum wraps (or is true when
// any element is) as the dtype's own arithmetic would.
Tensor sum(const Tensor& t, const Shape& dims, bool keepdim, DType dtype) {
  Tensor out = sum(t.to(dtype), dims, keepdim);
  return out.dtype() == dtype ? out : out.to(dtype);
}
Tensor sum(const Tensor& t, DType dtype) { return sum(t, {}, false, dtype); }
Tensor mean(const Tensor& t, DType dtype) { return mean(t.to(dtype)); }
Tensor mean(const Tensor& t, const Shape& dims, bool keepdim, DType dtype) {
  return mean(t.to(dtype), dims, keepdim);
}

std::pair<Tensor, Tensor> kthvalue(const Tensor& t, int64_t k, int64_t dim, bool keepdim) {
  const Along a = along(t, dim, "kthvalue");
  TANDEM_CHECK(k >= 1 && k <= a.cols, "kthvalue: k (", k, ") must be in [1, ", a.cols,
               "], the size of the dim");
  if (t.dim() == 0) return {t.clone(), zeros({}, TensorOptions(DType::i64).device(t.device()))};
  const int64_t d = a.dim;
  auto [values, indices] = topk(t, k, d, /*largest=*/false);
  values = narrow(values, d, k - 1, 1);
  indices = narrow(indices, d, k - 1, 1);
  if (keepdim) return {values, indices};
  return {squeeze(values, d), squeeze(indices, d)};
}

Tensor median(const Tensor& t) {
  check_defined(t, "median", "input");
  if (t.numel() == 0) {
    TANDEM_CHECK(t.is_floating_point(), "median: an empty ", dtype_name(t.dtype()),
                 " tensor has no median");
    return full({}, std::nan(""), TensorOptions(t.dtype()).device(t.device()));
  }
  return median(flatten(t), 0).first;
}

std::pair<Tensor, Tensor> median(const Tensor& t, int64_t dim, bool keepdim) {
  const Along a = along(t, dim, "median");
  TANDEM_CHECK(a.cols > 0, "median: the dim is empty");
  auto [values, indices] = kthvalue(t, (a.cols - 1) / 2 + 1, dim, keepdim);
  if (!t.is_floating_point() || t.dim() == 0) return {values, indices};
  // A row with a NaN: NaN, at the first NaN's position (argmax finds the first largest).
  const int64_t d = a.dim;
  const Tensor nan_at = isnan(t.detach());
  const Tensor has_nan = any(nan_at, d, keepdim);
  const Tensor first_nan = argmax(nan_at.to(DType::i64), d, keepdim);
  // The value is gathered at the index, so the gradient goes to the NaN picked, as torch's.
  const Tensor index = where(has_nan, first_nan, indices);
  const Tensor picked = gather(t, d, keepdim ? index : index.unsqueeze(d));
  return {keepdim ? picked : picked.squeeze(d), index};
}

std::pair<Tensor, Tensor> var_mean(const Tensor& t, const Shape& dims, bool unbiased,
                                   bool keepdim) {
  return {var(t, dims, unbiased ? 1 : 0, keepdim), mean(t, dims, keepdim)};
}

Tensor ops_detail::root_of_variance(const Tensor& v) {
  // sqrt, with the gradient 0 (not inf) where the variance is exactly 0, as torch's; a NaN
  // variance (one element, none, an infinite one) stays NaN.
  const Tensor zero = v.eq(0.0);
  return where(zero, 0.0, sqrt(where(zero, 1.0, v)));
}

std::pair<Tensor, Tensor> std_mean(const Tensor& t, const Shape& dims, bool unbiased,
                                   bool keepdim) {
  auto [v, m] = var_mean(t, dims, unbiased, keepdim);
  return {root_of_variance(v), m};
}

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32,
                    bool right) {
  check_defined(sorted_sequence, "searchsorted", "sorted_sequence");
  check_defined(values, "searchsorted", "values");
  check_inputs({sorted_sequence, values}, "searchsorted");
  TANDEM_CHECK(sorted_sequence.dim() >= 1, "searchsorted: sorted_sequence must have a dim");
  const bool one_d = sorted_sequence.dim() == 1;
  TANDEM_CHECK(
      one_d || (values.dim() == sorted_sequence.dim() &&
                Shape(values.shape().begin(), values.shape().end() - 1) ==
                    Shape(sorted_sequence.shape().begin(), sorted_sequence.shape().end() - 1)),
      "searchsorted: sorted_sequence ", shape_str(sorted_sequence.shape()),
      " must be 1-d or share all but its last dim with values ", shape_str(values.shape()));
  NoGradGuard no_grad;
  const Tensor v = values.detach().unsqueeze(-1);  // (..., K, 1)
  const Tensor b = one_d ? sorted_sequence.detach() : sorted_sequence.detach().unsqueeze(-2);
  // Left: the boundaries below v; right: those at or below it; NaN above every number and equal
  // to NaN, as sort orders them (NumPy's rule). So a NaN value goes after every number, and a
  // NaN boundary is after every number.
  const Tensor b_nan = isnan(b), v_nan = isnan(v);
  const Tensor before = right ? logical_or(v_nan, logical_and(logical_not(b_nan), b.le(v)))
                              : logical_and(logical_not(b_nan), logical_or(v_nan, b.lt(v)));
  return sum(before, {-1}).to(out_int32 ? DType::i32 : DType::i64);
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32, bool right) {
  check_defined(boundaries, "bucketize", "boundaries");
  TANDEM_CHECK(boundaries.dim() == 1, "bucketize: boundaries must be 1-d, got ",
               shape_str(boundaries.shape()));
  return searchsorted(boundaries, input, out_int32, right);
}

}  // namespace tandem
