// The elementwise math of tandem, written once: each functor runs in the CPU loops (g++) and in
// CUDA grid-stride kernels (nvcc). Floating functors see f32 or f64; f16/bf16 are widened first.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "tandem/core/macros.hpp"
#include "tandem/kernels/math.hpp"  // max_nan, min_nan

namespace tandem::kernels {

enum class UnaryOp {
  neg,
  exp,
  log,
  sqrt,
  abs,
  sign,
  relu,
  sigmoid,
  tanh,
  gelu,
  gelu_tanh,
  pow_scalar,
  clamp,
  add_scalar,
  mul_scalar,
  logical_not,
  sin,
  cos,
  floor,
  ceil,
  round,
  log1p,
  rsqrt,
  expm1,
  tan,
  atan,
  erf,
  log2,
  log10,
  reciprocal,
  silu,
  elu,
  softplus,
  mish,
  hardswish,
  hardsigmoid,
  log_sigmoid,
  trunc,
  leaky_relu,
  softsign
};
enum class BinaryOp {
  add,
  mul,
  div,
  pow,
  maximum,
  minimum,  // arithmetic (add: a + alpha * b)
  atan2,
  fmod,
  remainder,
  div_floor,
  div_trunc,  // a / b rounded down, toward zero (integers stay integers)
  eq,
  ne,
  lt,
  le,
  gt,
  ge,  // comparisons (bool output)
  bitwise_and,
  bitwise_or,
  bitwise_xor,  // integers and bool only
  relu_backward,
  sigmoid_backward,
  tanh_backward,
  gelu_backward,
  gelu_tanh_backward,
  clamp_backward,
  silu_backward,
  elu_backward,
  softplus_backward,
  mish_backward,
  hardtanh_backward,
  hardswish_backward,
  hardsigmoid_backward,
  log_sigmoid_backward,
  leaky_relu_backward,
  softsign_backward,  // (grad, saved) -> grad_input
  prelu,              // (x, weight) -> x or weight x
  prelu_slope,        // (x, weight) -> d prelu / dx: 1 or weight
  prelu_weight_term   // (grad, x) -> grad times d prelu / d weight: 0 or grad x
};

/// Scalar parameters of a functor (alpha for add, the exponent for pow, the bounds of clamp).
struct OpArgs {
  double a = 0.0;
  double b = 0.0;
};

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluC = 0.044715;

/// A double scalar as a T. Integers go through int64_t, so that a negative one wraps in an
/// unsigned type as in PyTorch (5 - 7 is 254 in u8): a double converted to an unsigned type
/// directly is undefined, and a GPU makes it 0 (cvt.rzi clamps) where the CPU wraps.
template <typename T>
TANDEM_HD T scalar_as(double s) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<int64_t>(s));
  } else {
    return T(s);
  }
}

/// Signed integer arithmetic wraps around, as torch's does (INT64_MAX + 1 is INT64_MIN):
/// computed in the unsigned type, where overflow is defined (in the signed one it is undefined
/// behaviour). Other types compute as they are.
template <typename T>
TANDEM_HD T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename T>
TANDEM_HD T wrap_mul(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}
template <typename T>
TANDEM_HD T wrap_neg(T x) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(x));
  } else {
    return -x;
  }
}

// --- unary ---------------------------------------------------------------------------------
struct Neg {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return wrap_neg(x);
  }
};
struct Exp { template <typename T> TANDEM_HD T operator()(T x) const { return exp(x); } };
struct Log { template <typename T> TANDEM_HD T operator()(T x) const { return log(x); } };
struct Sqrt { template <typename T> TANDEM_HD T operator()(T x) const { return sqrt(x); } };
struct Abs {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else if constexpr (std::is_floating_point_v<T>) {
      return fabs(x);  // abs(-0.0) is +0.0, as torch's
    } else {
      return x < T(0) ? wrap_neg(x) : x;
    }
  }
};
struct Sign {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {  // bool and u8
      return x > T(0) ? T(1) : T(0);
    } else {
      return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    }
  }
};
struct Relu {  // NaN stays NaN, as torch; integers too (the op refuses bool)
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD T operator()(T x) const { return x > T(0) || x != x ? x : T(0); }
};
struct Sigmoid {
  template <typename T> TANDEM_HD T operator()(T x) const { return T(1) / (T(1) + exp(-x)); }
};
struct Tanh { template <typename T> TANDEM_HD T operator()(T x) const { return tanh(x); } };
struct Gelu {  // x * Phi(x), exact
  template <typename T> TANDEM_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf(x * T(kSqrt1_2)));
  }
};
struct GeluTanh {
  template <typename T> TANDEM_HD T operator()(T x) const {
    T inner = T(kSqrt2OverPi) * (x + T(kGeluC) * x * x * x);
    return T(0.5) * x * (T(1) + tanh(inner));
  }
};
/// a^b for integers, as torch's: by squaring, wrapping on overflow; a negative b (signed types)
/// gives the quotient 1 / a^|b| truncated: 1 for a = 1, +-1 for a = -1, else 0.
template <typename T>
TANDEM_HD T int_pow(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < T(0)) {
      if (a == T(1)) return T(1);
      if (a == T(-1)) return (b & T(1)) ? T(-1) : T(1);
      return T(0);
    }
  }
  T result = T(1);
  for (; b != T(0); b = static_cast<T>(b >> 1)) {
    if (b & T(1)) result = wrap_mul(result, a);
    a = wrap_mul(a, a);
  }
  return result;
}
struct PowScalar {  // integer tensors meet whole, non-negative exponents only (the op's check)
  static constexpr bool kIntegers = true;
  double e;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return x || e == 0.0;
    } else if constexpr (std::is_integral_v<T>) {
      return int_pow(x, scalar_as<T>(e));
    } else {
      return pow(x, T(e));
    }
  }
};
// The exponents pow_scalar computes without pow (as PyTorch's): x^2 and x^3 as products, x^0.5
// and x^-0.5 as Sqrt and Rsqrt, x^-1 as Reciprocal. libm's pow took 80x the product's time.
struct Square {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else {
      return wrap_mul(x, x);
    }
  }
};
struct Cube {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else {
      return wrap_mul(wrap_mul(x, x), x);
    }
  }
};
/// v as the integer type T, saturating at T's range (v is finite).
template <typename T>
TANDEM_HD T saturated(double v) {
  using U = std::make_unsigned_t<T>;
  constexpr T top = static_cast<T>(static_cast<U>(~U(0)) >> (std::is_signed_v<T> ? 1 : 0));
  constexpr T bottom = std::is_signed_v<T> ? static_cast<T>(-top - 1) : T(0);
  return v >= static_cast<double>(top) ? top : v <= static_cast<double>(bottom) ? bottom : T(v);
}
struct Clamp {  // bounds given as +/-inf when absent; NaN propagates; min(max(x, lo), hi), as
                // torch: where lo > hi, hi wins. Integers compare as doubles, and a bound past
                // their range saturates (the op makes bool i64, and f32 for a fractional bound).
  static constexpr bool kIntegers = true;
  double lo, hi;
  template <typename T> TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return x;  // not reached: the op promotes bool
    } else if constexpr (std::is_integral_v<T>) {
      const double v = static_cast<double>(x);
      const double y = v < lo ? lo : v;
      const double z = y > hi ? hi : y;
      return z == v ? x : saturated<T>(z);
    } else {
      const T y = x < T(lo) ? T(lo) : x;
      const T z = y > T(hi) ? T(hi) : y;
      return x != x ? x : z;
    }
  }
};
struct AddScalar {
  static constexpr bool kIntegers = true;
  double s;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return wrap_add(x, scalar_as<T>(s));
  }
};
struct MulScalar {
  static constexpr bool kIntegers = true;
  double s;
  template <typename T> TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return x && s != 0.0;  // bool * bool is logical and, as torch
    } else {
      return wrap_mul(x, scalar_as<T>(s));
    }
  }
};
struct Sin {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return sin(x);
  }
};
struct Cos {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return cos(x);
  }
};
struct Floor {
  static constexpr bool kIntegers = true;  // integers are whole: themselves
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return x;
    } else {
      return floor(x);
    }
  }
};
struct Ceil {
  static constexpr bool kIntegers = true;  // integers are whole: themselves
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return x;
    } else {
      return ceil(x);
    }
  }
};
struct Round {  // halves to even, as torch.round; integers are themselves
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return x;
    } else {
      return rint(x);
    }
  }
};
struct Log1p {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return log1p(x);
  }
};
struct Rsqrt {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return T(1) / sqrt(x);
  }
};
struct Expm1 {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return expm1(x);
  }
};
struct Tan {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return tan(x);
  }
};
struct Atan {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return atan(x);
  }
};
struct Erf {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return erf(x);
  }
};
struct Log2 {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return log2(x);
  }
};
struct Log10 {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return log10(x);
  }
};
struct Trunc {  // rounded toward zero
  static constexpr bool kIntegers = true;  // integers are whole: themselves
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return x;
    } else {
      return trunc(x);
    }
  }
};
struct Reciprocal {
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return T(1) / x;
  }
};
// The activations, in torch's formulas (its CPU kernels'), so that values agree to rounding.
/// sigmoid(x) from exp(-|x|), which never overflows: below about -88 (f32) the result stays a
/// small number (e^x) instead of 1 / (1 + inf) = 0, which silu would multiply by x.
template <typename T>
TANDEM_HD T stable_sigmoid(T x) {
  const T e = exp(-fabs(x)), r = T(1) / (T(1) + e);
  return x >= T(0) ? r : e * r;
}
struct Silu {  // x * sigmoid(x)
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return x * stable_sigmoid(x);
  }
};
struct Elu {  // scale * (x > 0 ? x : alpha * (exp(x) - 1)); SELU is ELU with its constants
  double alpha, scale;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return x > T(0) ? T(scale) * x : T(scale) * T(alpha) * expm1(x);
  }
};
struct Softplus {  // log(1 + exp(beta x)) / beta, linear where beta x > threshold
  double beta, threshold;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    const T bx = x * T(beta);
    return bx > T(threshold) ? x : log1p(exp(bx)) / T(beta);
  }
};
struct Mish {  // x * tanh(softplus(x)), softplus with beta 1 and threshold 20
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return x * tanh(x > T(20) ? x : log1p(exp(x)));
  }
};
// The piecewise functors below compute every piece and then select: a piece under a condition
// is floating-point math the compiler may not run speculatively, so it kept a branch per element
// (unpredictable on data of either sign: leaky_relu took 26x PyTorch's time) instead of vector
// selects.
struct Hardswish {  // x * relu6(x + 3) / 6
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    const T ramp = x * (x + T(3)) / T(6);
    return x <= T(-3) ? T(0) : (x >= T(3) ? x : ramp);
  }
};
struct Hardsigmoid {  // relu6(x + 3) / 6
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    const T ramp = x / T(6) + T(0.5);
    return x <= T(-3) ? T(0) : (x >= T(3) ? T(1) : ramp);
  }
};
struct LogSigmoid {  // -softplus(-x) = min(x, 0) - log1p(exp(-|x|)), finite for every x
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return (x < T(0) ? x : T(0)) - log1p(exp(-fabs(x)));
  }
};
struct LeakyRelu {  // x above 0, slope x elsewhere (NaN stays NaN)
  double slope;
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    const T scaled = x * T(slope);
    return x > T(0) ? x : scaled;
  }
};
struct Softsign {  // x / (1 + |x|)
  template <typename T>
  TANDEM_HD T operator()(T x) const {
    return x / (T(1) + fabs(x));
  }
};
struct LogicalNot {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T x) const { return !x; } };

// --- binary --------------------------------------------------------------------------------
struct Add {
  static constexpr bool kIntegers = true;
  double alpha;
  template <typename T> TANDEM_HD T operator()(T a, T b) const {
    return alpha == 1.0 ? wrap_add(a, b) : wrap_add(a, wrap_mul(scalar_as<T>(alpha), b));
  }
};
struct Mul {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else {
      return wrap_mul(a, b);
    }
  }
};
struct Div { template <typename T> TANDEM_HD T operator()(T a, T b) const { return a / b; } };
struct Pow {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a || !b;  // the op refuses bool, as torch's
    } else if constexpr (std::is_integral_v<T>) {
      return int_pow(a, b);
    } else {
      return pow(a, b);
    }
  }
};
struct Atan2 {
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    return atan2(a, b);
  }
};
/// The remainder of a / b with a's sign (C's fmod, torch.fmod). An integer b of 0 gives 0 here
/// (the op refuses it first: C's % would trap), and -1 gives 0 (% of the smallest integer by
/// -1 traps too).
struct Fmod {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return false;  // a % true; the op refuses a false divisor
    } else if constexpr (std::is_integral_v<T>) {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return static_cast<T>(a % b);
    } else {
      return fmod(a, b);
    }
  }
};
/// The remainder with b's sign (Python's %, torch.remainder): fmod, moved by b when the signs
/// differ.
struct Remainder {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    const T r = Fmod{}(a, b);
    if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>) {
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) return static_cast<T>(r + b);
    }
    return r;
  }
};
// Integer quotients: b == 0 gives 0 (the ops refuse it first); INT_MIN / -1 wraps, as torch's.
template <typename T>
TANDEM_HD T int_quotient(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));
  }
  return static_cast<T>(a / b);
}
struct DivFloor {  // torch's div(rounding_mode="floor") and floor_divide
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a;  // the op refuses bool
    } else if constexpr (std::is_integral_v<T>) {
      const T q = int_quotient(a, b);
      if constexpr (std::is_signed_v<T>) {
        if (b != T(0) && b != T(-1) && a % b != T(0) && ((a < T(0)) != (b < T(0))))
          return static_cast<T>(q - T(1));
      }
      return q;
    } else {
      // torch's div_floor_floating: the quotient of a - fmod(a, b), exact, then rounded.
      if (b == T(0)) return a / b;
      const T mod = fmod(a, b);
      T div = (a - mod) / b;
      if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div = div - T(1);
      if (div == T(0)) return T(0) * (a / b);  // a signed zero, as the true quotient's
      T floor_div = floor(div);
      if (div - floor_div > T(0.5)) floor_div = floor_div + T(1);
      return floor_div;
    }
  }
};
struct DivTrunc {  // torch's div(rounding_mode="trunc")
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a;  // the op refuses bool
    } else if constexpr (std::is_integral_v<T>) {
      return int_quotient(a, b);
    } else {
      return trunc(a / b);
    }
  }
};
struct Maximum {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD T operator()(T a, T b) const { return max_nan(a, b); } };
struct Minimum {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD T operator()(T a, T b) const { return min_nan(a, b); } };
struct Eq {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T a, T b) const { return a == b; } };
struct Ne {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T a, T b) const { return a != b; } };
struct Lt {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T a, T b) const { return a < b; } };
struct Le {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T a, T b) const { return a <= b; } };
struct Gt {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T a, T b) const { return a > b; } };
struct Ge {
  static constexpr bool kIntegers = true;
  template <typename T> TANDEM_HD bool operator()(T a, T b) const { return a >= b; } };
// Bitwise ops: integers and bool only (floating operands are refused before a kernel runs; the
// floating instantiations, which every dtype switch makes, return a).
struct BitwiseAnd {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(a & b);
    else
      return a;
  }
};
struct BitwiseOr {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(a | b);
    else
      return a;
  }
};
struct BitwiseXor {
  static constexpr bool kIntegers = true;
  template <typename T>
  TANDEM_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(a ^ b);
    else
      return a;
  }
};

// Backward functors take (grad_output, saved) where saved is the input x or the output y.
struct ReluBackward {  // saved: x
  template <typename T> TANDEM_HD T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};
struct SigmoidBackward {  // saved: y
  template <typename T> TANDEM_HD T operator()(T g, T y) const { return g * y * (T(1) - y); }
};
struct TanhBackward {  // saved: y
  template <typename T> TANDEM_HD T operator()(T g, T y) const { return g * (T(1) - y * y); }
};
struct GeluBackward {  // saved: x
  template <typename T> TANDEM_HD T operator()(T g, T x) const {
    T cdf = T(0.5) * (T(1) + erf(x * T(kSqrt1_2)));
    T pdf = T(kInvSqrt2Pi) * exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhBackward {  // saved: x
  template <typename T> TANDEM_HD T operator()(T g, T x) const {
    T x2 = x * x;
    T t = tanh(T(kSqrt2OverPi) * (x + T(kGeluC) * x2 * x));
    T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * x2);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
  }
};
struct SiluBackward {  // saved: x; s (1 + x (1 - s)) with s = sigmoid(x)
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const T s = stable_sigmoid(x);
    return g * s * (T(1) + x * (T(1) - s));
  }
};
struct EluBackward {  // saved: x
  double alpha, scale;
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    return x > T(0) ? g * T(scale) : g * T(scale) * T(alpha) * exp(x);
  }
};
struct SoftplusBackward {  // saved: x; sigmoid(beta x), 1 where beta x > threshold
  double beta, threshold;
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const T bx = x * T(beta);
    return bx > T(threshold) ? g : g / (T(1) + exp(-bx));
  }
};
struct MishBackward {  // saved: x; t + x sigmoid(x) (1 - t^2) with t = tanh(softplus(x))
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    // (sigmoid from exp(-|x|): below x = -88, torch's 1 / (1 + exp(-x)) is 0 and drops x s)
    const T t = tanh(x > T(20) ? x : log1p(exp(x)));
    const T s = stable_sigmoid(x);
    return g * (t + x * s * (T(1) - t * t));
  }
};
struct HardtanhBackward {  // saved: x; 0 at and beyond the bounds, as torch's (NaN passes g)
  double lo, hi;
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const bool outside = (x <= T(lo)) | (x >= T(hi));
    return outside ? T(0) : g;
  }
};
struct HardswishBackward {  // saved: x; 0 below -3, x / 3 + 1/2 up to 3 (both included), 1 above
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const T ramp = g * (x / T(3) + T(0.5));
    return x < T(-3) ? T(0) : (x <= T(3) ? ramp : g);
  }
};
struct HardsigmoidBackward {  // saved: x; 1/6 strictly inside (-3, 3)
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const T inside = g / T(6);
    return ((x > T(-3)) & (x < T(3))) ? inside : T(0);
  }
};
struct LogSigmoidBackward {  // saved: x; sigmoid(-x), from exp(-|x|)
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    return g * stable_sigmoid(-x);
  }
};
struct LeakyReluBackward {  // saved: x
  double slope;
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const T scaled = g * T(slope);
    return x > T(0) ? g : scaled;
  }
};
struct Prelu {  // (x, weight); a NaN x stays NaN (weight NaN)
  template <typename T>
  TANDEM_HD T operator()(T x, T w) const {
    return x > T(0) ? x : w * x;
  }
};
struct PreluSlope {  // (x, weight)
  template <typename T>
  TANDEM_HD T operator()(T x, T w) const {
    return x > T(0) ? T(1) : w;
  }
};
struct PreluWeightTerm {  // (grad, x)
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    return x > T(0) ? T(0) : g * x;
  }
};
struct SoftsignBackward {  // saved: x; 1 / (1 + |x|)^2
  template <typename T>
  TANDEM_HD T operator()(T g, T x) const {
    const T d = T(1) + fabs(x);
    return g / (d * d);
  }
};
struct ClampBackward {  // saved: x; gradient passes where lo <= x <= hi, as torch
  double lo, hi;
  template <typename T> TANDEM_HD T operator()(T g, T x) const {
    return ((x >= T(lo)) & (x <= T(hi))) ? g : T(0);
  }
};

/// Functors marked kIntegers also run on integer and bool tensors; the rest need f32/f64.
template <typename F, typename = void>
struct accepts_integers : std::false_type {};
template <typename F>
struct accepts_integers<F, std::void_t<decltype(F::kIntegers)>> : std::true_type {};

/// Calls f(functor) with the functor for `op`; the one switch both backends share.
template <typename F>
decltype(auto) with_unary(UnaryOp op, const OpArgs& args, F&& f) {
  switch (op) {
    case UnaryOp::neg: return f(Neg{});
    case UnaryOp::exp: return f(Exp{});
    case UnaryOp::log: return f(Log{});
    case UnaryOp::sqrt: return f(Sqrt{});
    case UnaryOp::abs: return f(Abs{});
    case UnaryOp::sign: return f(Sign{});
    case UnaryOp::relu: return f(Relu{});
    case UnaryOp::sigmoid: return f(Sigmoid{});
    case UnaryOp::tanh: return f(Tanh{});
    case UnaryOp::gelu: return f(Gelu{});
    case UnaryOp::gelu_tanh: return f(GeluTanh{});
    case UnaryOp::pow_scalar:
      if (args.a == 2.0) return f(Square{});
      if (args.a == 3.0) return f(Cube{});
      if (args.a == 0.5) return f(Sqrt{});
      if (args.a == -0.5) return f(Rsqrt{});
      if (args.a == -1.0) return f(Reciprocal{});
      return f(PowScalar{args.a});
    case UnaryOp::clamp: return f(Clamp{args.a, args.b});
    case UnaryOp::add_scalar: return f(AddScalar{args.a});
    case UnaryOp::mul_scalar: return f(MulScalar{args.a});
    case UnaryOp::logical_not: return f(LogicalNot{});
    case UnaryOp::sin: return f(Sin{});
    case UnaryOp::cos: return f(Cos{});
    case UnaryOp::floor: return f(Floor{});
    case UnaryOp::ceil: return f(Ceil{});
    case UnaryOp::round: return f(Round{});
    case UnaryOp::log1p: return f(Log1p{});
    case UnaryOp::rsqrt: return f(Rsqrt{});
    case UnaryOp::expm1: return f(Expm1{});
    case UnaryOp::tan: return f(Tan{});
    case UnaryOp::atan: return f(Atan{});
    case UnaryOp::erf: return f(Erf{});
    case UnaryOp::log2: return f(Log2{});
    case UnaryOp::log10: return f(Log10{});
    case UnaryOp::reciprocal: return f(Reciprocal{});
    case UnaryOp::silu: return f(Silu{});
    case UnaryOp::elu: return f(Elu{args.a, args.b});
    case UnaryOp::softplus: return f(Softplus{args.a, args.b});
    case UnaryOp::mish: return f(Mish{});
    case UnaryOp::hardswish: return f(Hardswish{});
    case UnaryOp::hardsigmoid: return f(Hardsigmoid{});
    case UnaryOp::log_sigmoid: return f(LogSigmoid{});
    case UnaryOp::trunc: return f(Trunc{});
    case UnaryOp::leaky_relu: return f(LeakyRelu{args.a});
    case UnaryOp::softsign: return f(Softsign{});
  }
  return f(Neg{});
}

template <typename F>
decltype(auto) with_binary(BinaryOp op, const OpArgs& args, F&& f) {
  switch (op) {
    case BinaryOp::add: return f(Add{args.a});
    case BinaryOp::mul: return f(Mul{});
    case BinaryOp::div: return f(Div{});
    case BinaryOp::pow: return f(Pow{});
    case BinaryOp::maximum: return f(Maximum{});
    case BinaryOp::minimum: return f(Minimum{});
    case BinaryOp::atan2: return f(Atan2{});
    case BinaryOp::fmod: return f(Fmod{});
    case BinaryOp::remainder: return f(Remainder{});
    case BinaryOp::div_floor: return f(DivFloor{});
    case BinaryOp::div_trunc: return f(DivTrunc{});
    case BinaryOp::eq: return f(Eq{});
    case BinaryOp::ne: return f(Ne{});
    case BinaryOp::lt: return f(Lt{});
    case BinaryOp::le: return f(Le{});
    case BinaryOp::gt: return f(Gt{});
    case BinaryOp::ge: return f(Ge{});
    case BinaryOp::bitwise_and: return f(BitwiseAnd{});
    case BinaryOp::bitwise_or: return f(BitwiseOr{});
    case BinaryOp::bitwise_xor: return f(BitwiseXor{});
    case BinaryOp::relu_backward: return f(ReluBackward{});
    case BinaryOp::sigmoid_backward: return f(SigmoidBackward{});
    case BinaryOp::tanh_backward: return f(TanhBackward{});
    case BinaryOp::gelu_backward: return f(GeluBackward{});
    case BinaryOp::gelu_tanh_backward: return f(GeluTanhBackward{});
    case BinaryOp::clamp_backward: return f(ClampBackward{args.a, args.b});
    case BinaryOp::silu_backward: return f(SiluBackward{});
    case BinaryOp::elu_backward: return f(EluBackward{args.a, args.b});
    case BinaryOp::softplus_backward: return f(SoftplusBackward{args.a, args.b});
    case BinaryOp::mish_backward: return f(MishBackward{});
    case BinaryOp::hardtanh_backward: return f(HardtanhBackward{args.a, args.b});
    case BinaryOp::hardswish_backward: return f(HardswishBackward{});
    case BinaryOp::hardsigmoid_backward: return f(HardsigmoidBackward{});
    case BinaryOp::log_sigmoid_backward: return f(LogSigmoidBackward{});
    case BinaryOp::leaky_relu_backward: return f(LeakyReluBackward{args.a});
    case BinaryOp::softsign_backward: return f(SoftsignBackward{});
    case BinaryOp::prelu: return f(Prelu{});
    case BinaryOp::prelu_slope: return f(PreluSlope{});
    case BinaryOp::prelu_weight_term: return f(PreluWeightTerm{});
  }
  return f(Mul{});
}

/// Comparison ops produce bool.
inline bool is_comparison(BinaryOp op) {
  return op == BinaryOp::eq || op == BinaryOp::ne || op == BinaryOp::lt || op == BinaryOp::le ||
         op == BinaryOp::gt || op == BinaryOp::ge;
}
/// Ops on the bits of integers and bool.
inline bool is_bitwise(BinaryOp op) {
  return op == BinaryOp::bitwise_and || op == BinaryOp::bitwise_or || op == BinaryOp::bitwise_xor;
}
/// Ops that only make sense on floating inputs.
inline bool needs_floating(UnaryOp op) {
  return !with_unary(op, {}, [](auto f) { return accepts_integers<decltype(f)>::value; });
}
inline bool needs_floating(BinaryOp op) {
  return !with_binary(op, {}, [](auto f) { return accepts_integers<decltype(f)>::value; });
}

}  // namespace tandem::kernels
