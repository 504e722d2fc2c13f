// Elementwise ops with NumPy broadcasting. Floating ops on f16/bf16 compute in f32.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tandem/core/tensor.hpp"

namespace tandem {

/// The dtype a binary op computes a and b in, as torch::result_type: the wider of the two
/// (promote_types), except that a 0-dim operand beside a sized one decides only where it is of
/// a higher category (bool < integer < floating): `f16_tensor * full({}, 2.0)` is f16,
/// `i32_tensor * full({}, 2.5)` f32.
DType result_type(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
/// Division rounded as `rounding_mode` says, as torch's: "floor" (Python's //) or "trunc"
/// (toward zero); none is true division. Integers stay integers (division by zero is an
/// error); floats divide by zero to inf or NaN. The gradient is zero (torch's).
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode);
Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode);
/// div(a, b, "floor"), as torch 1.13's floor_divide; not differentiable.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, Scalar b);
Tensor neg(const Tensor& a);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
/// base ** exponent for a number base (torch.pow(2.0, x)).
Tensor pow(Scalar base, const Tensor& exponent);
Tensor square(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
/// log(1 + a), accurate near 0.
Tensor log1p(const Tensor& a);
/// 1 / sqrt(a).
Tensor rsqrt(const Tensor& a);
/// exp(a) - 1 (accurate near 0), tan, arctan, the error function, logarithms to bases 2 and 10,
/// and 1 / a.
Tensor expm1(const Tensor& a);
Tensor tan(const Tensor& a);
Tensor atan(const Tensor& a);
Tensor erf(const Tensor& a);
Tensor log2(const Tensor& a);
Tensor log10(const Tensor& a);
Tensor reciprocal(const Tensor& a);
/// Rounded toward zero (gradient 0).
Tensor trunc(const Tensor& a);
/// The angle of the point (b, a), in (-pi, pi]: torch.atan2(a, b).
Tensor atan2(const Tensor& a, const Tensor& b);
/// The remainder of a / b with a's sign (C's fmod), or with b's sign (Python's %); integers
/// too, where a divisor of 0 is refused.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, Scalar b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, Scalar b);
/// Rounded down, up, and to the nearest whole number (halves to even, as torch.round); their
/// gradient is 0.
Tensor floor(const Tensor& a);
Tensor ceil(const Tensor& a);
Tensor round(const Tensor& a);
/// Bool tensors: where a is NaN; where it is +inf or -inf (never, for integers).
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);
/// The inverse and hyperbolic trigonometric functions and the inverse error function, as
/// torch's (integers compute in f32; outside the domain NaN, at its ends +-inf), differentiable
/// with torch's derivatives.
Tensor asin(const Tensor& a);
Tensor acos(const Tensor& a);
Tensor sinh(const Tensor& a);
Tensor cosh(const Tensor& a);
Tensor asinh(const Tensor& a);
Tensor acosh(const Tensor& a);
Tensor atanh(const Tensor& a);
Tensor erfinv(const Tensor& a);
/// log(exp(a) + exp(b)) without overflow (two equal infinities give themselves).
Tensor logaddexp(const Tensor& a, const Tensor& b);
/// x log(y), 0 where x is 0 (unless y is NaN), as torch.xlogy; its gradients are torch's.
Tensor xlogy(const Tensor& x, const Tensor& y);
Tensor xlogy(const Tensor& x, Scalar y);
Tensor xlogy(Scalar x, const Tensor& y);
/// NaN, +inf and -inf replaced by `nan` (0), `posinf` and `neginf` (the dtype's largest and
/// lowest finite values by default), as torch's; integers and bool are returned as they are
/// (a copy). The replaced elements get no gradient.
Tensor nan_to_num(const Tensor& a, std::optional<double> nan = std::nullopt,
                  std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
/// Limits to [min, max]; either bound may be absent.
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp_min(const Tensor& a, Scalar min);
Tensor clamp_max(const Tensor& a, Scalar max);
/// Bounds as tensors (broadcast; the result of the three's promoted dtype), as torch's
/// clamp(Tensor, Tensor): min(max(a, min), max), NaN where a or a bound is NaN; the gradient
/// goes to a within the bounds, to a bound where it applies.
Tensor clamp(const Tensor& a, const std::optional<Tensor>& min, const std::optional<Tensor>& max);
Tensor clamp_min(const Tensor& a, const Tensor& min);
Tensor clamp_max(const Tensor& a, const Tensor& max);
/// clamp under numpy's name (torch.clip).
Tensor clip(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor relu(const Tensor& a);
/// approximate: "none" (erf, torch's default) or "tanh".
Tensor gelu(const Tensor& a, const std::string& approximate = "none");
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
/// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// With a number on one side, in the tensor's dtype (`where(x > 0, x, 0.0)`).
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
/// Two numbers: f32 where either is floating, bool where both are bool, else i64 (torch 1.13).
Tensor where(const Tensor& cond, Scalar a, Scalar b);
/// `value` where mask is true, t elsewhere (Tensor::masked_fill).
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
Tensor masked_fill(const Tensor& t, const Tensor& mask, const Tensor& value);
/// start + weight * (end - start); self + value * t1 * t2; self + value * t1 / t2.
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
/// libtorch's elementwise `torch::max(a, b)` and `torch::min(a, b)`: maximum and minimum.
inline Tensor max(const Tensor& a, const Tensor& b) { return maximum(a, b); }
inline Tensor min(const Tensor& a, const Tensor& b) { return minimum(a, b); }

// Comparisons return bool tensors and have no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
/// Bool tensors: the truth (nonzero) of each element of a and b, combined; any dtypes.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
/// The bits of integer and bool tensors (floating ones are refused), promoted as arithmetic is.
/// On bool tensors they are the logical ops; `&`, `|`, `^` and `~` on tensors call them.
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& a);

/// Bool tensors: where a is finite (neither NaN nor infinite); where a is within
/// atol + rtol * |b| of b, broadcast (NaNs equal each other when equal_nan).
Tensor isfinite(const Tensor& a);
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
               bool equal_nan = false);
/// True when every element of a and b is within atol + rtol * |b| (a and b broadcast, as torch's).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// True when a and b have the same shape and dtype and identical values.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace tandem
