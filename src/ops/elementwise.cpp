// Elementwise ops: checks, dtype promotion and broadcasting, the kernel, and the backward
// closure (written with the same ops, run under no-grad by the engine).
#include <algorithm>
#include <cmath>
#include <limits>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;
using kernels::BinaryOp;
using kernels::OpArgs;
using kernels::UnaryOp;

namespace {

// An elementwise result of `shape`, laid out as PyTorch's TensorIterator lays it out:
// - the operands' strides when they all have the result's shape and one dense layout;
// - channels-last when an operand of the result's shape is (tandem keeps it for a mix of
//   layouts, where torch follows the first operand: ARCHITECTURE.md);
// - else dense in the order the operands lay the dims out, the first deciding where it can
//   (infer_dense_strides). So sigmoid(a.t()) is itself transposed, read and written in memory
//   order, and a.t() + b is transposed where b + a.t() is row-major, as torch's.
Tensor elementwise_result(const Shape& shape, DType dtype, Device device,
                          std::initializer_list<const Tensor*> operands) {
  Tensor out = make_tensor(shape, dtype, device);
  if (std::all_of(operands.begin(), operands.end(), [&](const Tensor* t) {
        return t->shape() == shape && t->is_contiguous() &&
               t->suggest_memory_format() == MemoryFormat::Contiguous;
      }))
    return out;  // the common case, in few steps (torch's too: broadcast operands' size-1
                 // dims take part in the order below)
  const Tensor& first = **operands.begin();
  bool same = first.shape() == shape && first.is_non_overlapping_and_dense();
  for (const Tensor* t : operands) {
    if (t->shape() == shape && t->suggest_memory_format() == MemoryFormat::ChannelsLast)
      return make_tensor(out.storage(), shape, channels_last_strides(shape), 0, dtype);
    same = same && t->shape() == shape && t->strides() == first.strides();
  }
  if (same) return make_tensor(out.storage(), shape, first.strides(), 0, dtype);
  // Each operand's strides over the result's dims, 0 where it is broadcast.
  std::vector<Shape> strides;
  for (const Tensor* t : operands) {
    Shape st(shape.size(), 0);
    const size_t lead = shape.size() - t->shape().size();
    for (size_t d = 0; d < t->shape().size(); ++d)
      if (t->shape()[d] == shape[lead + d]) st[lead + d] = t->strides()[d];
    strides.push_back(std::move(st));
  }
  return make_tensor(out.storage(), shape, infer_dense_strides(shape, strides), 0, dtype);
}

// torch's integer-to-float functions: an integer or bool input computes in f32 (`exp(i64)`).
bool promotes_int_to_float(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp:
    case UnaryOp::log:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
    case UnaryOp::sigmoid:
    case UnaryOp::tanh:
    case UnaryOp::sin:
    case UnaryOp::cos:
    case UnaryOp::tan:
    case UnaryOp::atan:
    case UnaryOp::erf:
    case UnaryOp::log1p:
    case UnaryOp::expm1:
    case UnaryOp::log2:
    case UnaryOp::log10:
    case UnaryOp::reciprocal: return true;
    default: return false;
  }
}

Tensor unary_forward(UnaryOp op, const OpArgs& args, const Tensor& x0, const char* name) {
  check_defined(x0, name, "input");
  const Tensor x = !x0.is_floating_point() && promotes_int_to_float(op) ? x0.to(DType::f32) : x0;
  if (kernels::needs_floating(op)) check_floating(x, name);
  check_not_bool_for(op, x, name);
  kernels::unary.at(x, name);
  Tensor out = elementwise_result(
      x.shape(), op == UnaryOp::logical_not ? DType::boolean : x.dtype(), x.device(), {&x});
  kernels::unary(out, op, args, x);
  return out;
}

Tensor binary_forward(BinaryOp op, const OpArgs& args, const Tensor& a0, const Tensor& b0,
                      const char* name) {
  check_defined(a0, name, "first operand");
  check_defined(b0, name, "second operand");
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  check_inputs({a, b}, name);
  DType dt = result_type(a, b);
  // True division, and atan2, of integers are f32, as torch's.
  if ((op == BinaryOp::div || op == BinaryOp::atan2) && !is_floating(dt)) dt = DType::f32;
  if (kernels::needs_floating(op))
    TANDEM_CHECK(is_floating(dt), name, ": expected floating-point operands, got ", a.dtype(),
                 " and ", b.dtype());
  if (kernels::is_bitwise(op))
    TANDEM_CHECK(!is_floating(dt), name, ": expected integer or bool operands, got ", a.dtype(),
                 " and ", b.dtype());
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  kernels::binary.at(a, name);
  bool cmp = kernels::is_comparison(op);
  // Operands of another dtype are promoted (a copy laid out as the operand, which is where the
  // result's layout comes from, as on torch's CPU); f16/bf16 ones reach the kernel as they are.
  const Tensor a_dt = as_dtype(a, dt), b_dt = as_dtype(b, dt);
  Tensor out = elementwise_result(shape, cmp ? DType::boolean : dt, a.device(), {&a_dt, &b_dt});
  kernels::binary(out, op, args, broadcast_view(a_dt, shape), broadcast_view(b_dt, shape));
  return out;
}

// The gradient of an elementwise op through a backward functor: functor(grad, saved).
Tensor backward_functor(BinaryOp op, const Tensor& g, const Tensor& saved, OpArgs args = {}) {
  return binary_forward(op, args, g, saved, "backward");
}

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  check_defined(a, "result_type", "first operand");
  check_defined(b, "result_type", "second operand");
  if ((a.dim() == 0) == (b.dim() == 0)) return promote_types(a.dtype(), b.dtype());
  const DType sized = a.dim() == 0 ? b.dtype() : a.dtype();
  const DType zero_dim = a.dim() == 0 ? a.dtype() : b.dtype();
  // torch's combine_categories: a floating sized operand keeps its dtype; a bool one, or an
  // integer one beside a floating 0-dim one, promotes; an integer one beside an integer one stays.
  if (is_floating(sized)) return sized;
  if (sized == DType::boolean || is_floating(zero_dim)) return promote_types(sized, zero_dim);
  return sized;
}

Tensor add(const Tensor& a0, const Tensor& b0, double alpha) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  if (a.defined() && b.defined()) check_alpha(alpha, a.dtype(), b.dtype(), "add");
  Tensor out = binary_forward(BinaryOp::add, {alpha}, a, b, "add");
  autograd::record("add", {a, b}, out, [a, b, alpha](const Tensor& g) -> std::vector<Tensor> {
    return {a.requires_grad() ? reduce_grad(g, a) : Tensor(),
            b.requires_grad() ? reduce_grad(alpha == 1.0 ? g : mul(g, alpha), b) : Tensor()};
  }, kDifferentiable);
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  check_no_bool(a, "sub");
  check_no_bool(b, "sub");
  return add(a, b, -alpha);
}

Tensor mul(const Tensor& a0, const Tensor& b0) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  Tensor out = binary_forward(BinaryOp::mul, {}, a, b, "mul");
  autograd::record("mul", {a, b}, out, [a, b](const Tensor& g) -> std::vector<Tensor> {
    return {a.requires_grad() ? reduce_grad(mul(g, b), a) : Tensor(),
            b.requires_grad() ? reduce_grad(mul(g, a), b) : Tensor()};
  }, kDifferentiable);
  autograd::save_for_backward(out,
                              {b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()});
  return out;
}

Tensor div(const Tensor& a0, const Tensor& b0) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  Tensor out = binary_forward(BinaryOp::div, {}, a, b, "div");
  autograd::record("div", {a, b}, out, [a, b](const Tensor& g) -> std::vector<Tensor> {
    return {a.requires_grad() ? reduce_grad(div(g, b), a) : Tensor(),
            b.requires_grad() ? reduce_grad(neg(div(mul(g, a), mul(b, b))), b) : Tensor()};
  }, kDifferentiable);
  autograd::save_for_backward(out, {b.requires_grad() ? a : Tensor(), b});
  return out;
}

Tensor add(const Tensor& a, Scalar b) {
  // bool with a bool number stays bool (logical or), as torch's: the tensor form computes it.
  if (a.defined() && a.dtype() == DType::boolean && b.isBoolean())
    return add(a, scalar_operand(a, b));
  Tensor out = unary_forward(UnaryOp::add_scalar, {b}, with_scalar(a, b), "add");
  autograd::record("add", {a}, out, [](const Tensor& g) -> std::vector<Tensor> {
    return {g};
  }, kDifferentiable);
  return out;
}

Tensor mul(const Tensor& a, Scalar b) {
  if (a.defined() && a.dtype() == DType::boolean && b.isBoolean())
    return mul(a, scalar_operand(a, b));
  Tensor out = unary_forward(UnaryOp::mul_scalar, {b}, with_scalar(a, b), "mul");
  autograd::record("mul", {a}, out, [b](const Tensor& g) -> std::vector<Tensor> {
    return {mul(g, b)};
  }, kDifferentiable);
  return out;
}

Tensor neg(const Tensor& a) {
  check_no_bool(a, "neg");
  Tensor out = unary_forward(UnaryOp::neg, {}, a, "neg");
  autograd::record("neg", {a}, out, [](const Tensor& g) -> std::vector<Tensor> {
    return {neg(g)};
  }, kDifferentiable);
  return out;
}

Tensor pow(const Tensor& a, Scalar exponent) {
  const Tensor x = with_scalar(a, exponent);
  TANDEM_CHECK(!x.defined() || x.is_floating_point() || exponent >= 0,
               "pow: integers to negative integer powers are not allowed (", a.dtype(),
               " to the power ", exponent, ")");
  Tensor out = unary_forward(UnaryOp::pow_scalar, {exponent}, x, "pow");
  autograd::record("pow", {a}, out, [a, exponent](const Tensor& g) -> std::vector<Tensor> {
    if (exponent == 0.0) return {zeros_like(g)};
    return {mul(g, mul(pow(a, exponent - 1.0), exponent))};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor pow(const Tensor& a0, const Tensor& exponent0) {
  const Tensor a = beside(a0, {&exponent0}), exponent = beside(exponent0, {&a0});
  TANDEM_CHECK(!a.defined() || !exponent.defined() || result_type(a, exponent) != DType::boolean,
               "pow: not implemented for bool operands");
  Tensor out = binary_forward(BinaryOp::pow, {}, a, exponent, "pow");
  Tensor y = out.detach();
  autograd::record("pow", {a, exponent}, out, [a, exponent, y](const Tensor& g) -> std::vector<Tensor> {
    Tensor ga, gb;
    if (a.requires_grad()) {  // 0 where the exponent is 0 (not 0 * 0^-1 = NaN), as torch's
      const Tensor d = mul(exponent, pow(a, sub(exponent, ones_like(exponent))));
      ga = reduce_grad(mul(g, where(eq(exponent, 0.0), 0.0, d)), a);
    }
    if (exponent.requires_grad()) {
      // d/db a^b = a^b log a; taken as 0 where a == 0 (the limit for b > 0), as torch.
      Tensor zero = zeros_like(y);
      Tensor d = where(eq(a, zeros_like(a)), zero, mul(autograd::saved_output(y), log(a)));
      gb = reduce_grad(mul(g, d), exponent);
    }
    return {ga, gb};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a, exponent, exponent.requires_grad() ? out : Tensor()});
  return out;
}

Tensor exp(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::exp, {}, a, "exp");
  Tensor y = out.detach();
  autograd::record("exp", {a}, out, [y](const Tensor& g) -> std::vector<Tensor> {
    return {mul(g, autograd::saved_output(y))};
  }, kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}

Tensor log(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::log, {}, a, "log");
  autograd::record("log", {a}, out, [a](const Tensor& g) -> std::vector<Tensor> {
    return {div(g, a)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::sqrt, {}, a, "sqrt");
  Tensor y = out.detach();
  autograd::record("sqrt", {a}, out, [y](const Tensor& g) -> std::vector<Tensor> {
    return {div(g, mul(autograd::saved_output(y), 2.0))};
  }, kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}

Tensor abs(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::abs, {}, a, "abs");
  autograd::record("abs", {a}, out, [a](const Tensor& g) -> std::vector<Tensor> {
    return {mul(g, sign(a))};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor sign(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::sign, {}, a, "sign");
  autograd::record("sign", {a}, out, [](const Tensor& g) -> std::vector<Tensor> {
    return {zeros_like(g)};
  }, kDifferentiable);
  return out;
}

Tensor sin(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::sin, {}, a, "sin");
  autograd::record(
      "sin", {a}, out, [a](const Tensor& g) -> std::vector<Tensor> { return {mul(g, cos(a))}; },
      kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor cos(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::cos, {}, a, "cos");
  autograd::record(
      "cos", {a}, out,
      [a](const Tensor& g) -> std::vector<Tensor> { return {neg(mul(g, sin(a)))}; },
      kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor log1p(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::log1p, {}, a, "log1p");
  autograd::record(
      "log1p", {a}, out,
      [a](const Tensor& g) -> std::vector<Tensor> { return {div(g, add(a, 1.0))}; },
      kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor rsqrt(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::rsqrt, {}, a, "rsqrt");
  Tensor y = out.detach();
  autograd::record(
      "rsqrt", {a}, out,
      [y](const Tensor& g) -> std::vector<Tensor> {
        const Tensor s = autograd::saved_output(y);  // d/da a^(-1/2) = -y^3 / 2
        return {mul(g, mul(pow(s, 3.0), -0.5))};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}

namespace {
// floor, ceil and round: piecewise constant, so their gradient is 0.
Tensor rounding(UnaryOp op, const Tensor& a, const char* name) {
  Tensor out = unary_forward(op, {}, a, name);
  autograd::record(
      name, {a}, out, [](const Tensor& g) -> std::vector<Tensor> { return {zeros_like(g)}; },
      kDifferentiable);
  return out;
}
}  // namespace

Tensor floor(const Tensor& a) { return rounding(UnaryOp::floor, a, "floor"); }
Tensor ceil(const Tensor& a) { return rounding(UnaryOp::ceil, a, "ceil"); }
Tensor round(const Tensor& a) { return rounding(UnaryOp::round, a, "round"); }

Tensor isnan(const Tensor& a) {
  check_defined(a, "isnan", "input");
  return ne(a, a);  // only NaN differs from itself
}

Tensor isinf(const Tensor& a) {
  check_defined(a, "isinf", "input");
  if (!a.is_floating_point())
    return zeros(a.shape(), TensorOptions(DType::boolean).device(a.device()));
  return eq(abs(a), full({}, INFINITY, TensorOptions(a.dtype()).device(a.device())));
}

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  TANDEM_CHECK(min || max, "clamp: at least one of min and max must be given");
  // An integer tensor is clamped as it is by integer bounds; a floating bound makes the result
  // f32, as a number does in arithmetic; bool is clamped as i64, as torch promotes it.
  if (a.defined() && !a.is_floating_point()) {
    if (floating_bound(min, max)) return clamp(a.to(DType::f32), min, max);
    if (a.dtype() == DType::boolean) return clamp(a.to(DType::i64), min, max);
  }
  // A NaN bound makes every element NaN, with gradient 0, as torch's.
  if (nan_bound(min, max)) return add(mul(a, 0.0), std::nan(""));
  OpArgs args{min.value_or(-std::numeric_limits<double>::infinity()),
              max.value_or(std::numeric_limits<double>::infinity())};
  Tensor out = unary_forward(UnaryOp::clamp, args, a, "clamp");
  autograd::record("clamp", {a}, out, [a, args](const Tensor& g) -> std::vector<Tensor> {
    if (grad_mode_enabled()) {  // create_graph: g where lo <= a <= hi, differentiable in g
      const TensorOptions o = TensorOptions(a.dtype()).device(a.device());
      Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
      return {where(ge(a, full({}, args.a, o)), where(le(a, full({}, args.b, o)), g, zero), zero)};
    }
    return {backward_functor(BinaryOp::clamp_backward, g, a, args)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor relu(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::relu, {}, a, "relu");
  Tensor y = out.detach();  // y > 0 exactly where x > 0; saving y lets x be freed
  autograd::record("relu", {a}, out, [y](const Tensor& g) -> std::vector<Tensor> {
    if (grad_mode_enabled()) {  // create_graph: the same gradient, differentiable in g
      Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
      return {where(gt(y, zero), g, zero)};
    }
    return {backward_functor(BinaryOp::relu_backward, g, y)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}

namespace {

// gelu'(x), recorded so that create_graph can differentiate it again. Exact form: Phi(x) +
// x phi(x) from the backward kernel (there is no erf op to compose it of), its own derivative
// phi(x) (2 - x^2) composed of recorded ops. Tanh form: with u = k (x + c x^3), t = tanh(u),
// 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), composed of recorded ops throughout.
Tensor gelu_derivative(const Tensor& x, bool tanh_form) {
  if (tanh_form) {
    constexpr double k = kernels::kSqrt2OverPi, c = kernels::kGeluC;
    Tensor x2 = mul(x, x);
    Tensor t = tanh(mul(mul(x, add(mul(x2, c), 1.0)), k));
    Tensor dt = mul(add(mul(mul(t, t), -1.0), 1.0), mul(add(mul(x2, 3.0 * c), 1.0), k));
    return mul(add(add(t, 1.0), mul(x, dt)), 0.5);
  }
  Tensor d = backward_functor(BinaryOp::gelu_backward, ones_like(x), x.detach());
  autograd::record("gelu_backward", {x}, d, [x](const Tensor& g) -> std::vector<Tensor> {
    Tensor x2 = mul(x, x);
    Tensor phi = mul(exp(mul(x2, -0.5)), kernels::kInvSqrt2Pi);
    return {mul(g, mul(phi, add(mul(x2, -1.0), 2.0)))};
  }, kDifferentiable);
  autograd::save_for_backward(d, {x});
  return d;
}

}  // namespace

Tensor gelu(const Tensor& a, const std::string& approximate) {
  TANDEM_CHECK(approximate == "none" || approximate == "tanh",
               "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  bool tanh_form = approximate == "tanh";
  Tensor out = unary_forward(tanh_form ? UnaryOp::gelu_tanh : UnaryOp::gelu, {}, a, "gelu");
  autograd::record("gelu", {a}, out, [a, tanh_form](const Tensor& g) -> std::vector<Tensor> {
    if (grad_mode_enabled()) return {mul(g, gelu_derivative(a, tanh_form))};  // create_graph
    return {backward_functor(tanh_form ? BinaryOp::gelu_tanh_backward : BinaryOp::gelu_backward,
                             g, a)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

namespace {

// An op of one functor whose gradient is composed of recorded ops of the input, so that
// create_graph differentiates it again: grad(g, x) -> the input's gradient. With `fused` (a
// backward functor of (g, x) with the op's args), a backward without create_graph is that one
// kernel instead.
template <typename Grad>
Tensor unary_op(UnaryOp op, const OpArgs& args, const Tensor& a, const char* name, Grad grad,
                std::optional<BinaryOp> fused = std::nullopt) {
  Tensor out = unary_forward(op, args, a, name);
  autograd::record(
      name, {a}, out,
      [a, grad, fused, args](const Tensor& g) -> std::vector<Tensor> {
        if (fused && !grad_mode_enabled()) return {backward_functor(*fused, g, a, args)};
        return {grad(g, a)};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {a});
  return out;
}

Tensor scalar_like(double v, const Tensor& t) {
  return full({}, v, TensorOptions(t.dtype()).device(t.device()));
}

// g where lo < x < hi, else 0.
Tensor inside(const Tensor& x, double lo, double hi, const Tensor& g) {
  const Tensor zero = scalar_like(0.0, g);
  return where(gt(x, scalar_like(lo, x)), where(lt(x, scalar_like(hi, x)), g, zero), zero);
}

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

}  // namespace

Tensor expm1(const Tensor& a) {
  return unary_op(UnaryOp::expm1, {}, a, "expm1",
                  [](const Tensor& g, const Tensor& x) { return mul(g, exp(x)); });
}

Tensor tan(const Tensor& a) {
  return unary_op(UnaryOp::tan, {}, a, "tan", [](const Tensor& g, const Tensor& x) {
    return mul(g, add(pow(tan(x), 2.0), 1.0));
  });
}

Tensor atan(const Tensor& a) {
  return unary_op(UnaryOp::atan, {}, a, "atan",
                  [](const Tensor& g, const Tensor& x) { return div(g, add(pow(x, 2.0), 1.0)); });
}

Tensor erf(const Tensor& a) {
  return unary_op(UnaryOp::erf, {}, a, "erf", [](const Tensor& g, const Tensor& x) {
    return mul(g, mul(exp(neg(pow(x, 2.0))), kTwoOverSqrtPi));
  });
}

Tensor log2(const Tensor& a) {
  return unary_op(UnaryOp::log2, {}, a, "log2",
                  [](const Tensor& g, const Tensor& x) { return div(g, mul(x, M_LN2)); });
}

Tensor log10(const Tensor& a) {
  return unary_op(UnaryOp::log10, {}, a, "log10",
                  [](const Tensor& g, const Tensor& x) { return div(g, mul(x, M_LN10)); });
}

Tensor trunc(const Tensor& a) { return rounding(UnaryOp::trunc, a, "trunc"); }

Tensor atan2(const Tensor& a0, const Tensor& b0) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  Tensor out = binary_forward(BinaryOp::atan2, {}, a, b, "atan2");
  autograd::record(
      "atan2", {a, b}, out,
      [a, b](const Tensor& g) -> std::vector<Tensor> {
        const Tensor scaled = div(g, add(mul(a, a), mul(b, b)));  // g / (a^2 + b^2)
        return {a.requires_grad() ? reduce_grad(mul(scaled, b), a) : Tensor(),
                b.requires_grad() ? reduce_grad(neg(mul(scaled, a)), b) : Tensor()};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {a, b});
  return out;
}

namespace {
// fmod and remainder: a - q b with q = a / b rounded toward zero (fmod) or down (remainder).
// An integer divisor of 0 is refused, as torch's "ZeroDivisionError" (read on the host: one wait
// on a GPU); floats give NaN there.
Tensor modulo(BinaryOp op, UnaryOp rounding_op, const Tensor& a0, const Tensor& b0,
              const char* name) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  if (!is_floating(promote_types(a.dtype(), b.dtype()))) {
    NoGradGuard guard;
    TANDEM_CHECK(!any(eq(b, zeros({}, TensorOptions(b.dtype()).device(b.device())))).item<bool>(),
                 name, ": integer division by zero");
  }
  Tensor out = binary_forward(op, {}, a, b, name);
  autograd::record(
      name, {a, b}, out,
      [a, b, rounding_op](const Tensor& g) -> std::vector<Tensor> {
        Tensor gb;
        if (b.requires_grad()) {
          const Tensor q = unary_forward(rounding_op, {}, div(a, b), "modulo");
          gb = reduce_grad(neg(mul(g, q)), b);
        }
        return {a.requires_grad() ? reduce_grad(g, a) : Tensor(), gb};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {a, b});
  return out;
}

}  // namespace

Tensor fmod(const Tensor& a, const Tensor& b) {
  return modulo(BinaryOp::fmod, UnaryOp::trunc, a, b, "fmod");
}
Tensor remainder(const Tensor& a, const Tensor& b) {
  return modulo(BinaryOp::remainder, UnaryOp::floor, a, b, "remainder");
}
Tensor fmod(const Tensor& a, Scalar b) {
  check_defined(a, "fmod", "first operand");
  return fmod(a, scalar_operand(a, b));
}
Tensor remainder(const Tensor& a, Scalar b) {
  check_defined(a, "remainder", "first operand");
  return remainder(a, scalar_operand(a, b));
}

Tensor reciprocal(const Tensor& a) {
  return unary_op(UnaryOp::reciprocal, {}, a, "reciprocal",
                  [](const Tensor& g, const Tensor& x) { return neg(div(g, pow(x, 2.0))); });
}

// --- activations (declared in nn_ops.hpp) ----------------------------------------------------

Tensor silu(const Tensor& a) {
  return unary_op(
      UnaryOp::silu, {}, a, "silu",
      [](const Tensor& g, const Tensor& x) {
        const Tensor s = sigmoid(x);  // s (1 + x (1 - s))
        return mul(g, mul(s, add(mul(x, sub(scalar_like(1.0, s), s)), 1.0)));
      },
      BinaryOp::silu_backward);
}

Tensor elu(const Tensor& a, double alpha, double scale) {
  return unary_op(
      UnaryOp::elu, {alpha, scale}, a, "elu",
      [alpha, scale](const Tensor& g, const Tensor& x) {
        return mul(g, where(gt(x, scalar_like(0.0, x)), scalar_like(scale, x),
                            mul(exp(x), scale * alpha)));
      },
      BinaryOp::elu_backward);
}

Tensor selu(const Tensor& a) {
  return elu(a, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946);
}

Tensor softplus(const Tensor& a, double beta, double threshold) {
  TANDEM_CHECK(beta != 0.0, "softplus: beta must be nonzero");
  return unary_op(
      UnaryOp::softplus, {beta, threshold}, a, "softplus",
      [beta, threshold](const Tensor& g, const Tensor& x) {
        const Tensor bx = mul(x, beta);
        return where(gt(bx, scalar_like(threshold, x)), g, mul(g, sigmoid(bx)));
      },
      BinaryOp::softplus_backward);
}

Tensor mish(const Tensor& a) {
  return unary_op(
      UnaryOp::mish, {}, a, "mish",
      [](const Tensor& g, const Tensor& x) {
        const Tensor t = tanh(softplus(x));  // t + x sigmoid(x) (1 - t^2)
        return mul(g, add(t, mul(mul(x, sigmoid(x)), sub(scalar_like(1.0, t), mul(t, t)))));
      },
      BinaryOp::mish_backward);
}

Tensor hardswish(const Tensor& a) {
  return unary_op(
      UnaryOp::hardswish, {}, a, "hardswish",
      [](const Tensor& g, const Tensor& x) {
        // torch's: 0 below -3, x / 3 + 1/2 up to 3 (both ends included), 1 above
        const Tensor zero = scalar_like(0.0, x);
        return where(
            lt(x, scalar_like(-3.0, x)), zero,
            where(le(x, scalar_like(3.0, x)), mul(g, add(div(x, scalar_like(3.0, x)), 0.5)), g));
      },
      BinaryOp::hardswish_backward);
}

Tensor hardsigmoid(const Tensor& a) {
  return unary_op(
      UnaryOp::hardsigmoid, {}, a, "hardsigmoid",
      [](const Tensor& g, const Tensor& x) {  // 1/6 strictly inside (-3, 3)
        return inside(x, -3.0, 3.0, div(g, scalar_like(6.0, g)));
      },
      BinaryOp::hardsigmoid_backward);
}

Tensor log_sigmoid(const Tensor& a) {
  return unary_op(
      UnaryOp::log_sigmoid, {}, a, "log_sigmoid",
      [](const Tensor& g, const Tensor& x) { return mul(g, sigmoid(neg(x))); },
      BinaryOp::log_sigmoid_backward);
}

Tensor hardtanh(const Tensor& a, double min_val, double max_val) {
  check_defined(a, "hardtanh", "input");
  check_floating(a, "hardtanh");
  TANDEM_CHECK(min_val <= max_val, "hardtanh: min_val (", min_val,
               ") must not be greater than max_val (", max_val, ")");
  // clamp's values; the gradient is 0 at and beyond the bounds, as torch's (so a NaN passes it)
  return unary_op(
      UnaryOp::clamp, {min_val, max_val}, a, "hardtanh",
      [min_val, max_val](const Tensor& g, const Tensor& x) {
        const Tensor zero = scalar_like(0.0, g);
        return where(le(x, scalar_like(min_val, x)), zero,
                     where(ge(x, scalar_like(max_val, x)), zero, g));
      },
      BinaryOp::hardtanh_backward);
}

Tensor relu6(const Tensor& a) { return hardtanh(a, 0.0, 6.0); }

Tensor softsign(const Tensor& a) {
  check_defined(a, "softsign", "input");
  if (!is_floating(a.dtype())) return softsign(a.to(DType::f32));  // as torch's true division
  return unary_op(
      UnaryOp::softsign, {}, a, "softsign",
      [](const Tensor& g, const Tensor& x) {  // 1 / (1 + |x|)^2
        return div(g, pow(add(abs(x), 1.0), 2.0));
      },
      BinaryOp::softsign_backward);
}

Tensor leaky_relu(const Tensor& a, double negative_slope) {
  check_defined(a, "leaky_relu", "input");
  check_floating(a, "leaky_relu");
  return unary_op(
      UnaryOp::leaky_relu, {negative_slope}, a, "leaky_relu",
      [negative_slope](const Tensor& g, const Tensor& x) {
        return where(gt(x, scalar_like(0.0, x)), g, mul(g, negative_slope));
      },
      BinaryOp::leaky_relu_backward);
}

// One kernel forward (x or weight x, the weight broadcast over the channel dim) and two
// functors backward: each input's slope, and each weight's term summed over its channel.
// Composed of gt, mul and where it took 1.13x PyTorch's time forward + backward (0.48x now).
Tensor prelu(const Tensor& input, const Tensor& weight) {
  check_defined(input, "prelu", "input");
  check_defined(weight, "prelu", "weight");
  check_floating(input, "prelu");
  check_inputs({input, weight}, "prelu");
  TANDEM_CHECK(weight.dtype() == input.dtype(), "prelu: weight (", weight.dtype(),
               ") must have the input's dtype (", input.dtype(), ")");
  const int64_t channels = input.dim() >= 2 ? input.size(1) : 1;
  TANDEM_CHECK(weight.numel() == 1 || weight.numel() == channels, "prelu: weight has ",
               weight.numel(), " elements, expected 1 or the input's ", channels,
               " channels (dim 1 of shape ", shape_str(input.shape()), ")");
  Shape w_shape(static_cast<size_t>(std::max<int64_t>(input.dim(), 1)), 1);
  if (weight.numel() > 1) w_shape[1] = channels;
  const Tensor w = weight.numel() == 1 ? weight.reshape({}) : weight.reshape(w_shape);
  Tensor out = binary_forward(BinaryOp::prelu, {}, input, w, "prelu");
  autograd::record(
      "prelu", {input, w}, out,
      [input, w](const Tensor& g) -> std::vector<Tensor> {
        Tensor gx, gw;
        if (grad_mode_enabled()) {  // create_graph: the same, of recorded ops
          const Tensor positive = gt(input, scalar_like(0.0, input));
          if (input.requires_grad()) gx = where(positive, g, mul(g, w));
          if (w.requires_grad()) gw = where(positive, scalar_like(0.0, g), mul(g, input));
        } else {
          if (input.requires_grad())
            gx = mul(g, binary_forward(BinaryOp::prelu_slope, {}, input, w, "prelu_backward"));
          if (w.requires_grad())
            gw = binary_forward(BinaryOp::prelu_weight_term, {}, g, input, "prelu_backward");
        }
        return {gx, gw.defined() ? reduce_grad(gw, w) : Tensor()};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {input, w});
  return out;
}

Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::sigmoid, {}, a, "sigmoid");
  Tensor y = out.detach();
  autograd::record("sigmoid", {a}, out, [y](const Tensor& g) -> std::vector<Tensor> {
    if (grad_mode_enabled()) {  // create_graph: g y (1 - y), differentiated through y too
      Tensor s = autograd::saved_output(y);
      return {mul(g, mul(s, sub(ones_like(s), s)))};
    }
    return {backward_functor(BinaryOp::sigmoid_backward, g, y)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}

Tensor tanh(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::tanh, {}, a, "tanh");
  Tensor y = out.detach();
  autograd::record("tanh", {a}, out, [y](const Tensor& g) -> std::vector<Tensor> {
    if (grad_mode_enabled()) {  // create_graph: g (1 - y^2), differentiated through y too
      Tensor t = autograd::saved_output(y);
      return {mul(g, sub(ones_like(t), mul(t, t)))};
    }
    return {backward_functor(BinaryOp::tanh_backward, g, y)};
  }, kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}

Tensor where(const Tensor& cond0, const Tensor& a0, const Tensor& b0) {
  check_defined(cond0, "where", "condition");
  check_defined(a0, "where", "first value");
  check_defined(b0, "where", "second value");
  const Tensor cond = beside(cond0, {&a0, &b0}), a = beside(a0, {&cond0, &b0}),
               b = beside(b0, {&cond0, &a0});
  check_inputs({cond, a, b}, "where");
  TANDEM_CHECK(cond.dtype() == DType::boolean, "where: condition must be a bool tensor, got ",
               cond.dtype());
  DType dt = result_type(a, b);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(),
                                 "where");
  kernels::where.at(a, "where");
  const Tensor a_dt = as_dtype(a, dt), b_dt = as_dtype(b, dt);
  Tensor out = elementwise_result(shape, dt, a.device(), {&cond, &a_dt, &b_dt});
  kernels::where(out, broadcast_view(cond, shape), broadcast_view(a_dt, shape),
                 broadcast_view(b_dt, shape));
  autograd::record("where", {a, b}, out, [cond, a, b](const Tensor& g) -> std::vector<Tensor> {
    Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
    return {a.requires_grad() ? reduce_grad(where(cond, g, zero), a) : Tensor(),
            b.requires_grad() ? reduce_grad(where(cond, zero, g), b) : Tensor()};
  }, kDifferentiable);
  autograd::save_for_backward(out, {cond});
  return out;
}

namespace {
// maximum/minimum: the gradient goes to the chosen operand, split evenly on ties (torch).
Tensor extremum(BinaryOp op, const Tensor& a0, const Tensor& b0, const char* name) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  Tensor out = binary_forward(op, {}, a, b, name);
  autograd::record(name, {a, b}, out, [op, a, b](const Tensor& g) -> std::vector<Tensor> {
    Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
    // torch's rule: a tie splits g, the losing side gets 0, and where either is NaN (neither
    // wins nor ties) both get g.
    Tensor share = where(eq(a, b), mul(g, 0.5), g);
    Tensor a_loses = op == BinaryOp::maximum ? lt(a, b) : gt(a, b);
    Tensor b_loses = op == BinaryOp::maximum ? gt(a, b) : lt(a, b);
    return {a.requires_grad() ? reduce_grad(where(a_loses, zero, share), a) : Tensor(),
            b.requires_grad() ? reduce_grad(where(b_loses, zero, share), b) : Tensor()};
  }, kDifferentiable);
  autograd::save_for_backward(out, {a, b});
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::maximum, a, b, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::minimum, a, b, "minimum"); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::eq, {}, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::ne, {}, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::lt, {}, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::le, {}, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::gt, {}, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::ge, {}, a, b, "ge"); }
Tensor logical_not(const Tensor& a) { return unary_forward(UnaryOp::logical_not, {}, a, "logical_not"); }

Tensor eq(const Tensor& a, double b) { return a.eq(b); }
Tensor ne(const Tensor& a, double b) { return a.ne(b); }
Tensor lt(const Tensor& a, double b) { return a.lt(b); }
Tensor le(const Tensor& a, double b) { return a.le(b); }
Tensor gt(const Tensor& a, double b) { return a.gt(b); }
Tensor ge(const Tensor& a, double b) { return a.ge(b); }

Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::bitwise_and, {}, a, b, "bitwise_and");
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::bitwise_or, {}, a, b, "bitwise_or");
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::bitwise_xor, {}, a, b, "bitwise_xor");
}
Tensor bitwise_not(const Tensor& a) {
  check_defined(a, "bitwise_not", "operand");
  TANDEM_CHECK(!is_floating(a.dtype()), "bitwise_not: expected an integer or bool tensor, got ",
               a.dtype());
  if (a.dtype() == DType::boolean) return logical_not(a);
  return sub(neg(a), scalar_like(1.0, a));  // ~x == -x - 1 in two's complement (u8 wraps too)
}

namespace {
// The truth of each element: a itself when bool, a != 0 otherwise.
Tensor truth(const Tensor& a, const char* name) {
  check_defined(a, name, "operand");
  return a.dtype() == DType::boolean ? a : a.ne(0.0);
}
}  // namespace

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::bitwise_and, {}, truth(a, "logical_and"), truth(b, "logical_and"),
                        "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::bitwise_or, {}, truth(a, "logical_or"), truth(b, "logical_or"),
                        "logical_or");
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::bitwise_xor, {}, truth(a, "logical_xor"), truth(b, "logical_xor"),
                        "logical_xor");
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "allclose");  // as torch's isclose
  auto x = a.expand(shape).contiguous().to_vector<double>();
  auto y = b.expand(shape).contiguous().to_vector<double>();
  // torch's isclose: equal, or a finite difference within the tolerance (so inf and -inf are
  // not close, and inf is close to itself).
  for (size_t i = 0; i < x.size(); ++i) {
    const double error = std::fabs(x[i] - y[i]);
    if (!(x[i] == y[i] || (std::isfinite(error) && error <= atol + rtol * std::fabs(y[i]))))
      return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

Tensor sub(const Tensor& a, Scalar b) {
  check_no_bool(a, "sub");
  return add(a, -b);
}
Tensor div(const Tensor& a, Scalar b) { return a / b; }

namespace {
// The rounded quotient a / b (BinaryOp::div_floor or div_trunc), integers refusing a zero
// divisor as torch's ZeroDivisionError; `record` gives it torch's zero gradient.
Tensor rounded_quotient(const Tensor& a0, const Tensor& b0, bool floor, bool record,
                        const char* name) {
  const Tensor a = beside(a0, {&b0}), b = beside(b0, {&a0});
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  const DType dt = result_type(a, b);
  TANDEM_CHECK(dt != DType::boolean, name, ": bool operands cannot be divided (", a.dtype(),
               " and ", b.dtype(), ")");
  if (!is_floating(dt)) {
    NoGradGuard guard;
    TANDEM_CHECK(!any(eq(b, zeros({}, TensorOptions(b.dtype()).device(b.device())))).item<bool>(),
                 name, ": integer division by zero");
  }
  Tensor out = binary_forward(floor ? BinaryOp::div_floor : BinaryOp::div_trunc, {}, a, b, name);
  if (record)
    autograd::record(
        name, {a, b}, out,
        [sa = a.shape(), sb = b.shape(), oa = a.options(), ob = b.options()](const Tensor&) {
          return std::vector<Tensor>{zeros(sa, oa), zeros(sb, ob)};
        });
  return out;
}

bool floor_mode(std::string_view mode) {
  TANDEM_CHECK(mode == "floor" || mode == "trunc",
               "div: rounding_mode must be \"floor\", \"trunc\" or none, got \"", mode, "\"");
  return mode == "floor";
}
}  // namespace

Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode) {
  if (!rounding_mode) return div(a, b);
  return rounded_quotient(a, b, floor_mode(*rounding_mode), true, "div");
}
Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode) {
  if (!rounding_mode) return div(a, b);
  check_defined(a, "div", "first operand");
  return div(a, scalar_operand(a, b), rounding_mode);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return rounded_quotient(a, b, true, false, "floor_divide");
}
Tensor floor_divide(const Tensor& a, Scalar b) {
  check_defined(a, "floor_divide", "first operand");
  return floor_divide(a, scalar_operand(a, b));
}
Tensor square(const Tensor& a) {  // of bool: i64, as torch's (its square is pow(a, 2))
  return a.defined() && a.dtype() == DType::boolean ? pow(a, 2) : mul(a, a);
}
Tensor clamp_min(const Tensor& a, Scalar min) { return clamp(a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, Scalar max) { return clamp(a, std::nullopt, max); }
Tensor clip(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  return clamp(a, min, max);
}

Tensor pow(Scalar base, const Tensor& exponent) {
  check_defined(exponent, "pow", "exponent");
  return pow(scalar_operand(exponent, base), exponent);
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  check_defined(a, "where", "tensor");
  return where(cond, a, scalar_operand(a, b));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  check_defined(b, "where", "tensor");
  return where(cond, scalar_operand(b, a), b);
}

Tensor where(const Tensor& cond, Scalar a, Scalar b) {
  check_defined(cond, "where", "condition");
  const DType d = a.isFloatingPoint() || b.isFloatingPoint() ? DType::f32
                  : a.isBoolean() && b.isBoolean()           ? DType::boolean
                                                             : DType::i64;
  const TensorOptions options = TensorOptions(d).device(cond.device());
  return where(cond, full({}, a.toDouble(), options), full({}, b.toDouble(), options));
}

Tensor clamp(const Tensor& a, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  check_defined(a, "clamp", "input");
  const Tensor lo = min ? *min : Tensor(), hi = max ? *max : Tensor();
  TANDEM_CHECK(lo.defined() || hi.defined(), "clamp: at least one of min and max must be given");
  Tensor out;
  {
    NoGradGuard guard;  // maximum and minimum carry NaN through, and min > max gives max
    out = lo.defined() ? maximum(a, lo) : a;
    if (hi.defined()) out = minimum(out, hi);
  }
  // torch's clamp_backward_min_max: a's gradient within the bounds, a bound's where it applies.
  autograd::record(
      "clamp", {a, lo, hi}, out,
      [a, lo, hi](const Tensor& g) -> std::vector<Tensor> {
        const Tensor zero = zeros({}, g.options());
        auto pass = [&](const Tensor& where_, const Tensor& to) {
          return to.defined() && to.requires_grad() ? reduce_grad(where(where_, g, zero), to)
                                                    : Tensor();
        };
        if (!hi.defined()) return {pass(ge(a, lo), a), pass(lt(a, lo), lo), Tensor()};
        if (!lo.defined()) return {pass(le(a, hi), a), Tensor(), pass(gt(a, hi), hi)};
        return {pass(logical_and(ge(a, lo), le(a, hi)), a),
                pass(logical_and(lt(a, lo), lt(lo, hi)), lo),
                pass(logical_or(gt(a, hi), lt(hi, lo)), hi)};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {a, lo, hi});
  return out;
}
Tensor clamp_min(const Tensor& a, const Tensor& min) { return clamp(a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, const Tensor& max) { return clamp(a, std::nullopt, max); }

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  check_defined(t, "masked_fill", "input");
  return t.masked_fill(mask, value);
}
Tensor masked_fill(const Tensor& t, const Tensor& mask, const Tensor& value) {
  check_defined(t, "masked_fill", "input");
  return t.masked_fill(mask, value);
}

Tensor nan_to_num(const Tensor& a, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  check_defined(a, "nan_to_num", "input");
  if (!a.is_floating_point()) return a.clone();
  double largest = std::numeric_limits<double>::max();
  switch (a.dtype()) {
    case DType::f16: largest = 65504.0; break;
    case DType::bf16: largest = 3.3895313892515355e38; break;
    case DType::f32: largest = std::numeric_limits<float>::max(); break;
    default: break;
  }
  const double inf = std::numeric_limits<double>::infinity();
  return a.masked_fill(isnan(a), nan.value_or(0.0))
      .masked_fill(eq(a, inf), posinf.value_or(largest))
      .masked_fill(eq(a, -inf), neginf.value_or(-largest));
}

Tensor lerp(const Tensor& start, const Tensor& end, double weight) {
  // torch's two forms: exact at both ends of [0, 1].
  return std::fabs(weight) < 0.5 ? add(start, mul(sub(end, start), weight))
                                 : sub(end, mul(sub(end, start), 1.0 - weight));
}
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  return add(start, mul(weight, sub(end, start)));
}
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return add(self, mul(t1, t2), value);
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  check_addcdiv(t1, t2, "addcdiv");
  return add(self, div(t1, t2), value);
}

Tensor isfinite(const Tensor& a) {
  check_defined(a, "isfinite", "input");
  if (!a.is_floating_point())
    return ones(a.shape(), TensorOptions(DType::boolean).device(a.device()));
  NoGradGuard guard;
  return eq(sub(a, a), scalar_like(0.0, a));  // x - x is 0 for finite x, NaN for inf and NaN
}

Tensor isclose(const Tensor& a0, const Tensor& b0, double rtol, double atol, bool equal_nan) {
  check_defined(a0, "isclose", "first operand");
  check_defined(b0, "isclose", "second operand");
  TANDEM_CHECK(rtol >= 0 && atol >= 0, "isclose: rtol and atol must be nonnegative, got ", rtol,
               " and ", atol);
  NoGradGuard guard;
  // Integers compare in f64 (exact below 2^53), floats in their promoted dtype.
  const DType dt = promote_types(a0.dtype(), b0.dtype());
  const Tensor a = is_floating(dt) ? a0.to(dt) : a0.to(DType::f64);
  const Tensor b = is_floating(dt) ? b0.to(dt) : b0.to(DType::f64);
  // Equal values (infinities included), or a finite difference within the tolerance.
  const Tensor diff = abs(sub(a, b));
  Tensor close =
      bitwise_or(eq(a, b), bitwise_and(isfinite(diff), le(diff, add(mul(abs(b), rtol), atol))));
  if (equal_nan) close = bitwise_or(close, bitwise_and(isnan(a), isnan(b)));
  return close;
}

}  // namespace tandem
