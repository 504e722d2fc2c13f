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

Tensor reduce(ReduceOp op, const Tensor& t, const Plan& p, DType out_dtype, const char* name) {
  check_defined(t, name, "input");
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
Tensor extreme_backward(const Tensor& g, const Tensor& x, const Tensor& y, const Plan& p) {
  Tensor mask = eq(x, y).to(g.dtype());
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

Tensor var(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  if (autocast_changes("var", {t})) return var(autocast_input("var", t), dims, correction, keepdim);
  check_defined(t, "var", "input");
  check_floating(t, "var");
  Plan p = plan_reduction(t, dims, keepdim, "var");
  Tensor centered = sub(t, mean(t, dims, true));
  double denom = std::max<double>(0.0, static_cast<double>(p.cols - correction));
  return div(sum(mul(centered, centered), dims, keepdim),
             full({}, denom, TensorOptions(compute_dtype(t.dtype())).device(t.device())));
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

Tensor all(const Tensor& t) {
  return eq(nonzero_count(t, {}, false, "all"),
            full({}, static_cast<double>(t.numel()), TensorOptions(DType::i64).device(t.device())));
}
Tensor all(const Tensor& t, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, t.dim(), "all");
  const int64_t n = t.dim() == 0 ? 1 : t.size(d);
  return eq(nonzero_count(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, "all"),
            full({}, static_cast<double>(n), TensorOptions(DType::i64).device(t.device())));
}
Tensor any(const Tensor& t) {
  return gt(nonzero_count(t, {}, false, "any"),
            zeros({}, TensorOptions(DType::i64).device(t.device())));
}
Tensor any(const Tensor& t, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, t.dim(), "any");
  return gt(nonzero_count(t, t.dim() == 0 ? Shape{} : Shape{d}, keepdim, "any"),
            zeros({}, TensorOptions(DType::i64).device(t.device())));
}

Tensor amax(const Tensor& t, const Shape& dims, bool keepdim) {
  check_defined(t, "amax", "input");
  Plan p = plan_reduction(t, dims, keepdim, "amax");
  Tensor out = reduce(ReduceOp::max, t, p, t.dtype(), "amax");
  Tensor y = out.detach();
  autograd::record("amax", {t}, out, [t, y, p](const Tensor& g) -> std::vector<Tensor> {
    return {extreme_backward(reshape(g, p.keep_shape), t, reshape(y, p.keep_shape), p)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {t, out});
  return out;
}

Tensor max(const Tensor& t) {
  check_defined(t, "max", "input");
  TANDEM_CHECK(t.numel() > 0, "max: an empty tensor has no largest value (give a dim to reduce)");
  return amax(t, {}, false);
}

Tensor min(const Tensor& t) {
  check_defined(t, "min", "input");
  TANDEM_CHECK(t.numel() > 0, "min: an empty tensor has no smallest value (give a dim to reduce)");
  Plan p = plan_reduction(t, {}, false, "min");
  Tensor out = reduce(ReduceOp::min, t, p, t.dtype(), "min");
  Tensor y = out.detach();
  autograd::record("min", {t}, out, [t, y, p](const Tensor& g) -> std::vector<Tensor> {
    return {extreme_backward(reshape(g, p.keep_shape), t, reshape(y, p.keep_shape), p)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {t, out});
  return out;
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

}  // namespace tandem
