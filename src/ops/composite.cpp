// libtorch's ops that are compositions of others here: the inverse and hyperbolic trigonometric
// functions and erfinv (values from stable forms, gradients from torch's formulas), logaddexp,
// xlogy, the counting and index helpers (count_nonzero, bincount, tril_indices, take_along_dim,
// index_fill, fill_diagonal_), rot90, diff, nansum and nanmean, cummax and cummin, index_copy
// and masked_scatter. They run on every device the ops they use run on.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

// Integers and bool compute in f32, as torch's float functions.
Tensor as_floating(const Tensor& t, const char* op) {
  check_defined(t, op, "input");
  return t.is_floating_point() ? t : t.to(DType::f32);
}

// f(x) computed by `value` (no history), recorded with torch's derivative `derivative(x)`.
template <typename Value, typename Derivative>
Tensor composite_unary(const char* op, const Tensor& x0, Value value, Derivative derivative) {
  const Tensor x = as_floating(x0, op);
  Tensor out;
  {
    NoGradGuard guard;
    out = value(x);
  }
  autograd::record(
      op, {x}, out,
      [x, derivative](const Tensor& g) { return std::vector<Tensor>{mul(g, derivative(x))}; },
      kDifferentiable);
  autograd::save_for_backward(out, {x});
  return out;
}

const double kLn2 = std::log(2.0);

// 1 - x (+0 at 1, where -(x - 1) would be -0).
Tensor one_minus(const Tensor& x) { return add(neg(x), 1.0); }

// sqrt((1 - x)(1 + x)): 1 - x^2 without its cancellation near |x| = 1.
Tensor one_minus_square_root(const Tensor& x) { return sqrt(mul(one_minus(x), add(x, 1.0))); }

}  // namespace

Tensor asin(const Tensor& x) {
  return composite_unary(
      "asin", x, [](const Tensor& v) { return atan2(v, one_minus_square_root(v)); },
      [](const Tensor& v) { return reciprocal(one_minus_square_root(v)); });
}
Tensor acos(const Tensor& x) {
  return composite_unary(
      "acos", x, [](const Tensor& v) { return atan2(one_minus_square_root(v), v); },
      [](const Tensor& v) { return neg(reciprocal(one_minus_square_root(v))); });
}
Tensor sinh(const Tensor& x) {
  return composite_unary(
      "sinh", x, [](const Tensor& v) { return mul(sub(expm1(v), expm1(neg(v))), 0.5); },
      [](const Tensor& v) { return cosh(v); });
}
Tensor cosh(const Tensor& x) {
  return composite_unary(
      "cosh", x, [](const Tensor& v) { return mul(add(exp(v), exp(neg(v))), 0.5); },
      [](const Tensor& v) { return sinh(v); });
}
Tensor asinh(const Tensor& x) {
  return composite_unary(
      "asinh", x,
      [](const Tensor& v) {
        // log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), or log(2 |x|) where x^2 would overflow.
        const Tensor a = abs(v), sq = mul(a, a);
        const Tensor near = log1p(add(a, div(sq, add(sqrt(add(sq, 1.0)), 1.0))));
        return mul(sign(v), where(gt(a, 1e8), add(log(a), kLn2), near));
      },
      [](const Tensor& v) { return rsqrt(add(mul(v, v), 1.0)); });
}
Tensor acosh(const Tensor& x) {
  return composite_unary(
      "acosh", x,
      [](const Tensor& v) {
        // log1p(t + sqrt(2t + t^2)) with t = x - 1, or log(2x) where x^2 would overflow.
        const Tensor t = sub(v, 1.0);
        const Tensor near = log1p(add(t, sqrt(mul(t, add(t, 2.0)))));
        return where(gt(v, 1e8), add(log(v), kLn2), near);
      },
      [](const Tensor& v) { return rsqrt(mul(sub(v, 1.0), add(v, 1.0))); });
}
Tensor atanh(const Tensor& x) {
  return composite_unary(
      "atanh", x, [](const Tensor& v) { return mul(log1p(div(mul(v, 2.0), one_minus(v))), 0.5); },
      [](const Tensor& v) { return reciprocal(mul(one_minus(v), add(v, 1.0))); });
}

Tensor erfinv(const Tensor& x) {
  return composite_unary(
      "erfinv", x,
      [](const Tensor& narrow) {
        // In f64 whatever the dtype: Newton's step divides by erf's slope, tiny in the tails.
        const Tensor y = narrow.to(DType::f64);
        // Giles's single-precision approximation ("Approximating the erfinv function", 2010),
        // then two Newton steps on erf: f64 to a few ulps. +-1 give +-inf, |y| > 1 NaN.
        const Tensor w = neg(log(mul(one_minus(y), add(y, 1.0))));
        auto poly = [](const Tensor& t, std::initializer_list<double> c) {
          Tensor p = full_like(t, *c.begin());
          for (auto it = c.begin() + 1; it != c.end(); ++it) p = add(mul(p, t), *it);
          return p;
        };
        const Tensor central = poly(
            sub(w, 2.5), {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                          0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941});
        const Tensor tail = poly(sub(sqrt(w), 3.0), {-0.000200214257, 0.000100950558, 0.00134934322,
                                                     -0.00367342844, 0.00573950773, -0.0076224613,
                                                     0.00943887047, 1.00167406, 2.83297682});
        Tensor r = mul(where(lt(w, 5.0), central, tail), y);
        const double two_over_root_pi = 2.0 / std::sqrt(M_PI);
        for (int step = 0; step < 2; ++step) {
          const Tensor slope = mul(exp(neg(mul(r, r))), two_over_root_pi);
          const Tensor next = sub(r, div(sub(erf(r), y), slope));
          r = where(isfinite(next), next, r);  // +-1: the approximation's inf stays
        }
        return where(ge(abs(y), 1.0), where(eq(abs(y), 1.0), mul(sign(y), INFINITY), NAN), r)
            .to(narrow.dtype());
      },
      [](const Tensor& v) { return mul(exp(pow(erfinv(v), 2.0)), std::sqrt(M_PI) / 2.0); });
}

Tensor logaddexp(const Tensor& a0, const Tensor& b0) {
  check_defined(a0, "logaddexp", "first operand");
  check_defined(b0, "logaddexp", "second operand");
  const Tensor a = as_floating(a0, "logaddexp"), b = as_floating(b0, "logaddexp");
  // max + log1p(exp(-|a - b|)); two equal infinities are themselves (their difference is NaN).
  const Tensor m = maximum(a, b);
  const Tensor same_inf = logical_and(isinf(a), eq(a, b));
  return where(same_inf, m, add(m, log1p(exp(neg(abs(sub(a, b)))))));
}

Tensor xlogy(const Tensor& x0, const Tensor& y0) {
  check_defined(x0, "xlogy", "x");
  check_defined(y0, "xlogy", "y");
  const Tensor x = as_floating(x0, "xlogy"), y = as_floating(y0, "xlogy");
  Tensor out;
  {
    NoGradGuard guard;  // x log(y), 0 where x is 0 unless y is NaN
    out = where(logical_and(eq(x, 0.0), logical_not(isnan(y))), 0, mul(x, log(y)));
  }
  autograd::record(
      "xlogy", {x, y}, out,
      [x, y](const Tensor& g) -> std::vector<Tensor> {  // torch's formulas
        const Tensor zero_x = logical_and(eq(x, 0.0), le(y, 0.0));
        return {x.requires_grad() ? reduce_grad(where(zero_x, 0, mul(g, log(y))), x) : Tensor(),
                y.requires_grad() ? reduce_grad(div(mul(g, x), y), y) : Tensor()};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {x, y});
  return out;
}
Tensor xlogy(const Tensor& x, Scalar y) {
  check_defined(x, "xlogy", "x");
  return xlogy(x, scalar_operand(x, y));
}
Tensor xlogy(Scalar x, const Tensor& y) {
  check_defined(y, "xlogy", "y");
  return xlogy(scalar_operand(y, x), y);
}

Tensor count_nonzero(const Tensor& t, const Shape& dims) {
  check_defined(t, "count_nonzero", "input");
  NoGradGuard guard;
  return sum(ne(t, 0.0), dims, false, DType::i64);
}

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  check_defined(x, "bincount", "input");
  TANDEM_CHECK(x.dim() == 1, "bincount: the input must be 1-d, got shape ", shape_str(x.shape()));
  TANDEM_CHECK(!x.is_floating_point() && x.dtype() != DType::boolean,
               "bincount: the input must hold integers, got ", x.dtype());
  TANDEM_CHECK(minlength >= 0, "bincount: minlength must be non-negative, got ", minlength);
  NoGradGuard guard;
  const Tensor index = x.to(DType::i64);
  int64_t length = minlength;
  if (x.numel() > 0) {
    const auto [lo, hi] = host_extremes(index);
    TANDEM_CHECK(lo >= 0, "bincount: the input must be non-negative");
    length = std::max(length, hi + 1);
  }
  const TensorOptions on = TensorOptions(DType::i64).device(x.device());
  if (!weights.defined()) return scatter_add(zeros({length}, on), 0, index, ones({x.numel()}, on));
  TANDEM_CHECK(weights.shape() == x.shape(), "bincount: weights of shape ",
               shape_str(weights.shape()), " for an input of shape ", shape_str(x.shape()));
  // f32 and f64 weights keep their dtype; others count in f64, as torch's.
  const DType dt =
      weights.dtype() == DType::f32 || weights.dtype() == DType::f64 ? weights.dtype() : DType::f64;
  return scatter_add(zeros({length}, on.dtype(dt)), 0, index, weights.to(dt));
}

namespace {
Tensor triangle_indices(int64_t rows, int64_t cols, int64_t offset, TensorOptions options,
                        bool lower, const char* op) {
  TANDEM_CHECK(rows >= 0 && cols >= 0, op, ": the sizes must be non-negative, got ", rows, " and ",
               cols);
  std::vector<int64_t> r, c;
  for (int64_t i = 0; i < rows; ++i) {
    // lower: columns [0, i + offset]; upper: columns [i + offset, cols).
    const int64_t from = lower ? 0 : std::clamp<int64_t>(i + offset, 0, cols);
    const int64_t to = lower ? std::clamp<int64_t>(i + offset + 1, 0, cols) : cols;
    for (int64_t j = from; j < to; ++j) {
      r.push_back(i);
      c.push_back(j);
    }
  }
  const auto n = static_cast<int64_t>(r.size());
  r.insert(r.end(), c.begin(), c.end());
  const DType dt = options.has_dtype() ? options.dtype() : DType::i64;
  return from_vector(r, {2, n}).to(options.device(), dt);
}
}  // namespace

Tensor tril_indices(int64_t row, int64_t col, int64_t offset, TensorOptions options) {
  return triangle_indices(row, col, offset, options, true, "tril_indices");
}
Tensor triu_indices(int64_t row, int64_t col, int64_t offset, TensorOptions options) {
  return triangle_indices(row, col, offset, options, false, "triu_indices");
}

Tensor take_along_dim(const Tensor& t, const Tensor& indices, std::optional<int64_t> dim) {
  check_defined(t, "take_along_dim", "input");
  check_defined(indices, "take_along_dim", "indices");
  if (!dim) return gather(t.reshape({-1}), 0, indices.reshape({-1}));
  TANDEM_CHECK(t.dim() == indices.dim(), "take_along_dim: the input (", t.dim(),
               " dims) and the indices (", indices.dim(), " dims) must have as many dims");
  const int64_t d = wrap_dim(*dim, t.dim(), "take_along_dim");
  // Both broadcast in every dim but d, as torch's.
  Shape sizes = t.shape();
  sizes[d] = indices.size(d);
  const Shape shape = broadcast_shapes(sizes, indices.shape(), "take_along_dim");
  Shape input_shape = shape;
  input_shape[d] = t.size(d);
  return gather(t.expand(input_shape), d, indices.expand(shape));
}

Tensor index_fill(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& value) {
  check_defined(t, "index_fill", "input");
  check_defined(index, "index_fill", "index");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(t.dim(), 1), "index_fill");
  TANDEM_CHECK(index.dim() <= 1, "index_fill: the index must be 0-d or 1-d, got shape ",
               shape_str(index.shape()));
  const int64_t size = t.dim() == 0 ? 1 : t.size(d);
  Tensor mask;
  {
    NoGradGuard guard;
    const Tensor i = as_dtype(index, DType::i64).reshape({-1}).to(t.device());
    const Tensor wrapped = where(lt(i, 0.0), add(i, size), i);
    if (i.numel() > 0) {
      const auto [lo, hi] = host_extremes(i);
      TANDEM_CHECK_INDEX(lo >= -size && hi < size, "index_fill: index ", lo < -size ? lo : hi,
                         " is out of bounds for dimension ", d, " with size ", size);
    }
    Shape along(static_cast<size_t>(t.dim()), 1);
    if (t.dim() > 0) along[d] = size;
    mask = scatter(zeros({size}, TensorOptions(DType::boolean).device(t.device())), 0, wrapped, 1.0)
               .view(along);
  }
  return t.masked_fill(mask, value);
}
Tensor index_fill(const Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  check_defined(t, "index_fill", "input");
  return index_fill(t, dim, index, full({}, value.toDouble(), t.options()));
}

Tensor rot90(const Tensor& t, int64_t k, const Shape& dims) {
  check_defined(t, "rot90", "input");
  TANDEM_CHECK(dims.size() == 2, "rot90: expected two dims, got ", dims.size());
  TANDEM_CHECK(t.dim() >= 2, "rot90: expected a tensor of at least 2 dims, got ", t.dim());
  const int64_t d0 = wrap_dim(dims[0], t.dim(), "rot90"), d1 = wrap_dim(dims[1], t.dim(), "rot90");
  TANDEM_CHECK(d0 != d1, "rot90: the two dims must differ, got ", dims[0], " and ", dims[1]);
  switch (((k % 4) + 4) % 4) {  // counter-clockwise from d0 towards d1, as torch's
    case 1: return t.flip({d1}).transpose(d0, d1);
    case 2: return t.flip({d0, d1});
    case 3: return t.flip({d0}).transpose(d0, d1);
    default: return t.clone();
  }
}

Tensor diff(const Tensor& t, int64_t n, int64_t dim, const Tensor& prepend, const Tensor& append) {
  check_defined(t, "diff", "input");
  TANDEM_CHECK(t.dim() >= 1, "diff: expected a tensor of at least 1 dim, got a 0-dim tensor");
  TANDEM_CHECK(n >= 0, "diff: the order n must be nonnegative, got ", n);
  dim = wrap_dim(dim, t.dim(), "diff");
  std::vector<Tensor> parts;
  for (const Tensor* part : {&prepend, &t, &append}) {
    if (!part->defined()) continue;
    TANDEM_CHECK(part->dim() == t.dim(), "diff: prepend and append must have the input's ", t.dim(),
                 " dims, got shape ", shape_str(part->shape()));
    parts.push_back(*part);
  }
  Tensor x = parts.size() == 1 ? t : cat(parts, dim);
  for (int64_t k = 0; k < n && x.size(dim) > 0; ++k) {
    const int64_t len = x.size(dim) - 1;
    const Tensor later = x.narrow(dim, 1, len), earlier = x.narrow(dim, 0, len);
    x = x.dtype() == DType::boolean ? logical_xor(later, earlier) : sub(later, earlier);
  }
  return x;
}

Tensor nansum(const Tensor& t, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  check_defined(t, "nansum", "input");
  const Tensor x = t.is_floating_point() ? t.masked_fill(isnan(t), 0.0) : t;
  return dtype ? sum(x, dims, keepdim, *dtype) : sum(x, dims, keepdim);
}

Tensor nanmean(const Tensor& t, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  check_defined(t, "nanmean", "input");
  const Tensor x = dtype ? t.to(*dtype) : t;
  TANDEM_CHECK(x.is_floating_point(),
               "nanmean: expected a floating-point input (or dtype), got dtype ", x.dtype());
  const Tensor count = sum(logical_not(isnan(x)), dims, keepdim);
  return div(nansum(x, dims, keepdim), count.to(x.dtype()));
}

namespace {
// (values, indices) of the running maximum or minimum along dim: a doubling scan (Hillis and
// Steele) over (value, index) pairs. A later pair wins when its value is NaN, or when neither is
// NaN and it is at least (at most) as large: associative, so the scan gives torch's sequential
// result. The values are gathered from t at the indices, so their gradient is torch's.
std::pair<Tensor, Tensor> cumulative_extreme(const Tensor& t, int64_t dim, bool largest,
                                             const char* op) {
  check_defined(t, op, "input");
  dim = wrap_dim(dim, t.dim(), op);
  const Tensor x = t.dim() == 0 ? t.reshape({1}) : t;
  const int64_t n = x.size(dim);
  Tensor index;
  {
    NoGradGuard guard;
    Shape along(static_cast<size_t>(x.dim()), 1);
    along[static_cast<size_t>(dim)] = n;
    Tensor v = x.dtype() == DType::boolean ? x.to(DType::u8) : x.detach();
    index =
        arange(n, TensorOptions(DType::i64).device(x.device())).reshape(along).expand(x.shape());
    for (int64_t step = 1; step < n; step *= 2) {
      const Tensor ev = v.narrow(dim, 0, n - step), ei = index.narrow(dim, 0, n - step);
      const Tensor lv = v.narrow(dim, step, n - step), li = index.narrow(dim, step, n - step);
      const Tensor later = logical_or(
          isnan(lv), logical_and(logical_not(isnan(ev)), largest ? ge(lv, ev) : le(lv, ev)));
      v = cat({v.narrow(dim, 0, step), where(later, lv, ev)}, dim);
      index = cat({index.narrow(dim, 0, step), where(later, li, ei)}, dim);
    }
    index = index.contiguous();
  }
  Tensor values = gather(x, dim, index);
  if (t.dim() == 0) return {values.reshape({}), index.reshape({})};
  return {values, index};
}
}  // namespace

std::pair<Tensor, Tensor> cummax(const Tensor& t, int64_t dim) {
  return cumulative_extreme(t, dim, true, "cummax");
}
std::pair<Tensor, Tensor> cummin(const Tensor& t, int64_t dim) {
  return cumulative_extreme(t, dim, false, "cummin");
}

Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  check_defined(self, "index_copy", "self");
  check_defined(index, "index_copy", "index");
  check_defined(source, "index_copy", "source");
  TANDEM_CHECK(index.dim() <= 1, "index_copy: index must be 0-d or 1-d, got shape ",
               shape_str(index.shape()));
  TANDEM_CHECK(source.dtype() == self.dtype(), "index_copy: source's dtype ", source.dtype(),
               " differs from self's ", self.dtype());
  dim = wrap_dim(dim, self.dim(), "index_copy");
  Shape expected = self.shape();
  if (self.dim() > 0) expected[static_cast<size_t>(dim)] = index.numel();
  TANDEM_CHECK(source.shape() == expected || (self.dim() == 0 && source.numel() == index.numel()),
               "index_copy: source must have shape ", shape_str(expected), " (self's, with ",
               index.numel(), " along dim ", dim, "), got ", shape_str(source.shape()));
  if (self.dtype() == DType::boolean)  // index_add adds, which bool does not
    return index_copy(self.to(DType::u8), dim, index, source.to(DType::u8)).to(DType::boolean);
  // The slices cleared, then the source's added: the gradients are torch's (self's without the
  // slices, source's the slices of the output's).
  return index_add(index_fill(self, dim, index, 0), dim, index, source);
}

Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& src) {
  check_defined(self, "masked_scatter", "self");
  check_defined(mask, "masked_scatter", "mask");
  check_defined(src, "masked_scatter", "source");
  TANDEM_CHECK(mask.dtype() == DType::boolean,
               "masked_scatter: the mask must be a bool tensor, got ", mask.dtype());
  TANDEM_CHECK(src.dtype() == self.dtype(), "masked_scatter: source's dtype ", src.dtype(),
               " differs from self's ", self.dtype());
  check_inputs({self, mask, src}, "masked_scatter");
  const Shape shape = broadcast_shapes(self.shape(), mask.shape(), "masked_scatter");
  const Tensor m = mask.expand(shape);
  const int64_t count = sum(m).item<int64_t>();  // (a host read, as torch's)
  TANDEM_CHECK(src.numel() >= count, "masked_scatter: the mask has ", count,
               " true elements but source has only ", src.numel());
  return self.expand(shape).index_put({m}, src.reshape({-1}).narrow(0, 0, count));
}

// In place (Tensor methods), through views and fill_, so recorded in a graph as those are.
Tensor& Tensor::fill_diagonal_(Scalar value, bool wrap) {
  check_defined(*this, "fill_diagonal_", "self");
  TANDEM_CHECK(dim() >= 2, "fill_diagonal_: expected a tensor of at least 2 dims, got ", dim());
  if (dim() > 2)
    for (int64_t d = 1; d < dim(); ++d)
      TANDEM_CHECK(size(d) == size(0), "fill_diagonal_: all dims must be of one size, got shape ",
                   shape_str(shape()));
  auto main_diagonal = [](Tensor v) {
    while (v.dim() > 1) v = v.diagonal(0, 0, 1).movedim(-1, 0);
    return v;
  };
  const int64_t rows = size(0), cols = size(1);
  // A tall matrix with wrap starts the diagonal again after each cols + 1 rows.
  const int64_t step = wrap && dim() == 2 && rows > cols + 1 ? cols + 1 : rows;
  for (int64_t start = 0; start < rows; start += step)
    main_diagonal(slice(0, start, rows)).fill_(value.toDouble());
  return *this;
}

Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, Scalar value) {
  return copy_(tandem::index_fill(*this, dim, index, value));
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, const Tensor& value) {
  return copy_(tandem::index_fill(*this, dim, index, value));
}

}  // namespace tandem
