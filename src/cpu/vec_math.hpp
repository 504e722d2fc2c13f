// Vectorized f32 exp, expm1, log1p, tanh and erf, and the activations built on them, for the
// CPU's elementwise
// loops (elementwise_loops.hpp): 16 lanes on AVX-512, 8 on AVX2, written once over GCC's generic
// vectors. The scalar functors call libm one element at a time (gelu's erf and exp took 13x
// PyTorch's time, `bench_ops --ops`). Every element of a tensor goes through the same vector
// code (a tail is padded), so results do not depend on where an element lies.
// Accuracy, against f64 libm (tests/ops/test_ops.cpp, "f32 exp, sigmoid, ..."): exp within 2 ulp
// (Cephes' polynomial on [-ln2/2, ln2/2], 2^n applied in two halves so subnormal results and
// overflow to inf come out right), tanh within 3 ulp (Cephes' odd polynomial below 0.625,
// 1 - 2 / (e^2x + 1) above), erf a few ulp below 1 (Cephes' odd polynomial) and within 1.5e-7
// absolute above (Abramowitz and Stegun 7.1.26, as PyTorch's vectorized erf; it is used only
// inside gelu, where that is 1.5e-7 of |x| / 2); expm1 within 4 ulp (its Taylor polynomial below
// |x| = 1, exp(x) - 1 above), log within 1 (Cephes' polynomial), log2 and log10 within 2 (log
// times a constant), log1p within 3 (log of w = 1 + u, times u / (w - 1), which corrects w's
// rounding), atan2 within 4 (atan of the ratio of the smaller magnitude to the larger, moved to
// its quadrant). NaN stays NaN, +-inf give the limits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tandem/kernels/functors.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace vec {

#if defined(__AVX2__) && defined(__FMA__)
#if defined(__AVX512F__)
constexpr int64_t kWidth = 16;
#else
constexpr int64_t kWidth = 8;
#endif
using VF = float __attribute__((vector_size(kWidth * 4)));
using VI = int32_t __attribute__((vector_size(kWidth * 4)));

inline VF splat(float v) { return VF{} + v; }
inline VF select(VI mask, VF a, VF b) { return mask ? a : b; }
inline VF abs(VF x) { return (VF)((VI)x & 0x7fffffff); }
inline VF copysign(VF magnitude, VF sign) {
  return (VF)(((VI)magnitude & 0x7fffffff) | ((VI)sign & int32_t(0x80000000)));
}
inline VF keep_nan(VF x, VF r) { return select(x != x, x, r); }

inline VF exp(VF x) {
  VF xc = select(x < -104.0f, splat(-104.0f), x);  // below: 0; above 89: inf
  xc = select(xc > 89.0f, splat(89.0f), xc);
  xc = select(x != x, splat(0.0f), xc);  // NaN lanes (their result is x) convert no NaN to int
  const VF magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const VF n = (xc * 1.44269504088896341f + magic) - magic;
  VF r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VF p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const VF y = p * (r * r) + r + 1.0f;
  const VI ni = __builtin_convertvector(n, VI);  // in [-150, 129]
  const VI half = ni >> 1;  // both halves' biased exponents lie in [52, 192]: positive shifts
  const VF s1 = (VF)((half + 127) << 23), s2 = (VF)((ni - half + 127) << 23);
  return keep_nan(x, y * s1 * s2);
}

inline VF tanh(VF x) {
  const VF a = abs(x);
  const VF z = x * x;
  VF p = splat(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const VF small = copysign(p * z * x + x, x);                  // tanh(-0) = -0
  const VF e = exp(2.0f * select(a > 10.0f, splat(10.0f), a));  // tanh(10) is 1 in f32
  const VF large = copysign(1.0f - 2.0f / (e + 1.0f), x);
  return keep_nan(x, select(a < 0.625f, small, large));
}

// erf(u) given e = exp(-u^2) (gelu's derivative has it already: exp(-x^2 / 2) for u = x / sqrt 2).
// Below 1: Cephes' odd polynomial (a few ulp); above: A&S 7.1.26, 1 - poly(t) * e.
inline VF erf_given(VF u, VF e) {
  const VF z = u * u;
  VF q = splat(7.853861353153693e-5f);
  q = q * z - 8.010193625184903e-4f;
  q = q * z + 5.188327685732524e-3f;
  q = q * z - 2.685381193529856e-2f;
  q = q * z + 1.128358514861418e-1f;
  q = q * z - 3.761262582423300e-1f;
  q = q * z + 1.128379165726710f;
  const VF a = select(abs(u) > 4.0f, splat(4.0f), abs(u));  // erf(4) is 1 in f32
  const VF t = 1.0f / (1.0f + 0.3275911f * a);
  VF p = splat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const VF large = copysign(1.0f - p * t * e, u);
  return keep_nan(u, select(abs(u) < 1.0f, u * q, large));
}

// e^x - 1 without exp(x) - 1's cancellation near 0: the Taylor series to x^10 for |x| < 1 (its
// remainder is below 3e-8 of x there), exp(x) - 1 beyond, where it loses under 2 bits.
inline VF expm1(VF x) {
  VF p = splat(1.0f / 39916800);  // 1 / 11!
  p = p * x + 1.0f / 3628800;
  p = p * x + 1.0f / 362880;
  p = p * x + 1.0f / 40320;
  p = p * x + 1.0f / 5040;
  p = p * x + 1.0f / 720;
  p = p * x + 1.0f / 120;
  p = p * x + 1.0f / 24;
  p = p * x + 1.0f / 6;
  p = p * x + 0.5f;
  return select(abs(x) < 1.0f, x + x * x * p, exp(x) - 1.0f);  // exp keeps NaN
}

// log(w) for a positive normal w: Cephes' logf, w = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log(m) from its polynomial in m - 1, e ln 2 added in two parts.
inline VF log_normal(VF w) {
  const VI bits = (VI)w;
  VI e = ((bits >> 23) & 0xff) - 126;  // w = m 2^e, m in [1/2, 1)
  VF m = (VF)((bits & 0x007fffff) | 0x3f000000);
  const VI low = m < 0.707106781186547524f;  // then m -> 2m, e -> e - 1
  e = e + low;                               // (a true mask lane is -1)
  m = m + select(low, m, splat(0.0f)) - 1.0f;
  const VF ef = __builtin_convertvector(e, VF), z = m * m;
  VF y = splat(7.0376836292e-2f);
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z + ef * -2.12194440e-4f - 0.5f * z;
  return m + y + ef * 0.693359375f;
}

// log(x) for every x: subnormals scaled by 2^23 first, log(0) = -inf, log(inf) = inf, NaN below
// 0 and for NaN.
inline VF log(VF x) {
  const VI tiny = x < 1.17549435e-38f;
  const VF r = log_normal(select(tiny, x * 8388608.0f, x)) -
               select(tiny, splat(15.942385152878742f), splat(0.0f));  // 23 ln 2
  const VF inf = splat(__builtin_inff());
  const VF special = select(x == 0.0f, -inf, select(x == inf, inf, splat(__builtin_nanf(""))));
  return keep_nan(x, select((x > 0.0f) & (x < inf), r, special));
}

// log(1 + u) for every u: log(w) u / (w - 1) for w = 1 + u, which undoes w's rounding, and u
// itself where w rounds to 1 (log1p(inf) = inf, -1 gives -inf, below it NaN).
inline VF log1p(VF u) {
  const VF w = 1.0f + u;
  const VF r = select(w == 1.0f, u, log(w) * (u / (w - 1.0f)));
  return keep_nan(u, select(u == __builtin_inff(), u, r));
}

inline VF erf(VF u) {
  const VF a = select(abs(u) > 4.0f, splat(4.0f), abs(u));  // erf(4) is 1 in f32
  return erf_given(u, exp(-(a * a)));
}

// The vector form of a functor, where it has one: unary F(x) or binary F(g, x).
template <typename F>
struct Form {
  static constexpr bool kUnary = false, kBinary = false;
};
template <>
struct Form<Exp> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Exp&, VF x) { return exp(x); }
};
template <>
struct Form<Sigmoid> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Sigmoid&, VF x) { return 1.0f / (1.0f + exp(-x)); }
};
template <>
struct Form<Tanh> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Tanh&, VF x) { return tanh(x); }
};
template <>
struct Form<Gelu> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Gelu&, VF x) { return 0.5f * x * (1.0f + erf(x * float(kSqrt1_2))); }
};
template <>
struct Form<GeluTanh> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const GeluTanh&, VF x) {
    const VF inner = float(kSqrt2OverPi) * (x + float(kGeluC) * x * x * x);
    return 0.5f * x * (1.0f + tanh(inner));
  }
};
template <>
struct Form<GeluBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const GeluBackward&, VF g, VF x) {
    const VF e = exp(-0.5f * x * x);  // the pdf's, and erf's at x / sqrt 2: one exp for both
    const VF cdf = 0.5f * (1.0f + erf_given(x * float(kSqrt1_2), e));
    return g * (cdf + x * (float(kInvSqrt2Pi) * e));
  }
};
template <>
struct Form<GeluTanhBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const GeluTanhBackward&, VF g, VF x) {
    const VF x2 = x * x;
    const VF t = tanh(float(kSqrt2OverPi) * (x + float(kGeluC) * x2 * x));
    const VF dinner = float(kSqrt2OverPi) * (1.0f + float(3 * kGeluC) * x2);
    return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
  }
};

// sigmoid from exp(-|x|), as the scalar stable_sigmoid: silu stays x e^x far below 0.
inline VF stable_sigmoid(VF x) {
  const VF e = exp(-abs(x)), r = 1.0f / (1.0f + e);
  return select(x >= 0.0f, r, e * r);
}
template <>
struct Form<Silu> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Silu&, VF x) { return x * stable_sigmoid(x); }
};
template <>
struct Form<SiluBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const SiluBackward&, VF g, VF x) {
    const VF s = stable_sigmoid(x);
    return g * s * (1.0f + x * (1.0f - s));
  }
};

// ELU (and SELU): scale x above 0, scale alpha (e^x - 1) below, as the functor.
template <>
struct Form<Elu> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Elu& f, VF x) {
    const float scale = float(f.scale), negative = scale * float(f.alpha);
    return select(x > 0.0f, scale * x, negative * expm1(x));
  }
};
template <>
struct Form<EluBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const EluBackward& f, VF g, VF x) {
    const float scale = float(f.scale), negative = scale * float(f.alpha);
    return select(x > 0.0f, g * scale, g * negative * exp(x));
  }
};
// softplus: log(1 + e^(beta x)) / beta, x itself where beta x > threshold, as the functor.
template <>
struct Form<Softplus> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Softplus& f, VF x) {
    const float beta = float(f.beta);
    const VF bx = x * beta;
    return select(bx > float(f.threshold), x, log1p(exp(bx)) / beta);
  }
};
template <>
struct Form<SoftplusBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const SoftplusBackward& f, VF g, VF x) {
    const VF bx = x * float(f.beta);
    return select(bx > float(f.threshold), g, g / (1.0f + exp(-bx)));
  }
};
// mish: x tanh(softplus(x)), softplus linear above 20, as the functor.
inline VF tanh_softplus(VF x) { return tanh(select(x > 20.0f, x, log1p(exp(x)))); }
template <>
struct Form<Mish> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Mish&, VF x) { return x * tanh_softplus(x); }
};
template <>
struct Form<MishBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const MishBackward&, VF g, VF x) {
    const VF t = tanh_softplus(x), s = stable_sigmoid(x);
    return g * (t + x * s * (1.0f - t * t));
  }
};

// log_sigmoid: min(x, 0) - log1p(e^-|x|), and its derivative sigmoid(-x), as the functors.
template <>
struct Form<LogSigmoid> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const LogSigmoid&, VF x) {
    return select(x < 0.0f, x, splat(0.0f)) - log1p(exp(-abs(x)));
  }
};
template <>
struct Form<LogSigmoidBackward> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const LogSigmoidBackward&, VF g, VF x) { return g * stable_sigmoid(-x); }
};

// sin, cos and tan (Cephes' sinf and cosf): |x| reduced by j pi/4, j even, in three parts (exact
// below |x| = 8192), then the sine or the cosine polynomial of the remainder by octant. Lanes
// beyond 8192 (and +-inf) take libm's function, one element at a time.
inline VF sin_poly(VF r, VF z) {
  return ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
}
inline VF cos_poly(VF z) {
  return ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
         0.5f * z + 1.0f;
}
struct QuarterTurns {
  VF r, z;  // the remainder in [-pi/4, pi/4] and its square
  VI j;     // the even multiple of pi/4 taken off
};
inline QuarterTurns reduce_quarter_turns(VF x) {
  const VF a = abs(x);
  const VF clipped = select(a > 8192.0f, splat(0.0f), a);           // (the lanes libm takes)
  VI j = __builtin_convertvector(clipped * 1.27323954473516f, VI);  // 4 / pi, truncated
  j = (j + 1) & ~1;
  const VF y = __builtin_convertvector(j, VF);
  const VF r =
      ((clipped - y * 0.78515625f) - y * 2.4187564849853515625e-4f) - y * 3.77489497744594108e-8f;
  return {r, r * r, j};
}
// result, with lane(i) in the lanes `mask` holds (the few a vector form does not cover, for
// libm to take one by one).
template <typename Lane>
VF with_lanes(VI mask, VF result, Lane lane) {
  int any = 0;
  for (int64_t i = 0; i < kWidth; ++i) any |= mask[i];
  if (any) {
    for (int64_t i = 0; i < kWidth; ++i)
      if (mask[i]) result[i] = lane(i);
  }
  return result;
}
// result, with libm's scalar(x) in the lanes beyond |x| = 8192; NaN stays NaN.
template <typename Scalar>
VF with_libm_beyond_8192(VF x, VF result, Scalar scalar) {
  return keep_nan(x, with_lanes(abs(x) > 8192.0f, result, [&](int64_t i) { return scalar(x[i]); }));
}
inline VF sin(VF x) {
  const QuarterTurns q = reduce_quarter_turns(x);
  const VF v = select((q.j & 2) == 0, sin_poly(q.r, q.z), cos_poly(q.z));
  const VI negative = ((q.j & 4) != 0) ^ (x < 0.0f);  // octants 4-7, and x < 0
  return with_libm_beyond_8192(x, select(negative, -v, v), [](float v) { return std::sin(v); });
}
inline VF cos(VF x) {
  const QuarterTurns q = reduce_quarter_turns(x);
  const VI j = q.j - 2;  // cos(x) = sin(x + pi/2)
  const VF v = select((j & 2) == 0, sin_poly(q.r, q.z), cos_poly(q.z));
  return with_libm_beyond_8192(x, select((j & 4) == 0, -v, v), [](float v) { return std::cos(v); });
}
// tan(r) = sin(r) / cos(r) in even quarter-periods, -cot(r) in odd ones; x's sign.
inline VF tan(VF x) {
  const QuarterTurns q = reduce_quarter_turns(x);
  const VF s = sin_poly(q.r, q.z), c = cos_poly(q.z);
  const VF t = select((q.j & 2) == 0, s / c, -c / s);
  return with_libm_beyond_8192(x, select(x < 0.0f, -t, t), [](float v) { return std::tan(v); });
}

// atan (Cephes' atanf): |x| reduced to below tan(pi/8) by atan(x) = pi/2 - atan(1/x) above
// tan(3pi/8) and pi/4 + atan((x - 1) / (x + 1)) between, then its odd polynomial; x's sign.
inline VF atan(VF x) {
  const VF a = abs(x);
  const VI high = a > 2.414213562373095f, mid = (a > 0.4142135623730950f) & ~high;
  const VF base = select(high, splat(1.5707963267948966f),
                         select(mid, splat(0.7853981633974483f), splat(0.0f)));
  const VF u = select(high, -1.0f / a, select(mid, (a - 1.0f) / (a + 1.0f), a));
  const VF z = u * u;
  const VF p = (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z -
                3.33329491539e-1f) *
                   z * u +
               u;
  return keep_nan(x, copysign(base + p, x));
}

// atan2(y, x), C's quadrants and signed zeros: atan of the smaller magnitude over the larger (1
// when both are infinite, 0 when both are 0), pi/2 minus it when |y| is the larger, pi minus that
// when x is negative (-0 included), with y's sign; NaN in either gives NaN.
inline VF atan2(VF y, VF x) {
  const VF ay = abs(y), ax = abs(x), inf = splat(__builtin_inff());
  const VI swap = ay > ax;
  const VF num = select(swap, ax, ay), den = select(swap, ay, ax);
  const VF t =
      select(den == 0.0f, splat(0.0f), select((ax == inf) & (ay == inf), splat(1.0f), num / den));
  VF a = atan(t);
  a = select(swap, (1.57079637f - a) - 4.37113883e-8f, a);  // pi/2 in two parts
  a = select((VI)x < 0, (3.14159274f - a) - 8.74227766e-8f, a);
  return keep_nan(y, keep_nan(x, copysign(a, y)));
}
template <>
struct Form<Atan2> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const Atan2&, VF y, VF x) { return atan2(y, x); }
};

// fmod(a, b), exact as C's: in f64, where the quotient's magnitude is below 2^28, n = trunc(a / b)
// is the true quotient's integer part (a quotient m - g / b just below an integer m has
// g / b >= 2^-24 of |m|, past the division's rounding of m 2^-53), n b is exact (28 + 24 bits)
// and so is a - n b (the true remainder, an f32 value). The lanes' masks stay f32 (f64 compares
// of a whole f32 vector's lanes do not stay vector code): the range is told by the f32 quotient,
// below 2^27. Other lanes (a larger quotient, an infinite a, a zero b, NaN) take libm's fmod one
// by one; an infinite b gives a.
inline VF fmod(VF a, VF b) {
  using VD = double __attribute__((vector_size(kWidth * 8)));
  const VF qf = abs(a / b);
  const VI fast = qf < 134217728.0f;  // false for NaN
  const VD x = __builtin_convertvector(select(fast, a, splat(0.0f)), VD),
           y = __builtin_convertvector(select(fast, b, splat(1.0f)), VD);
  const VD n = __builtin_convertvector(__builtin_convertvector(x / y, VI), VD);
  VF out = copysign(__builtin_convertvector(x - n * y, VF), a);  // a zero remainder: a's sign
  out = select(abs(b) == __builtin_inff(), a, out);
  return with_lanes(~fast, out, [&](int64_t i) { return std::fmod(a[i], b[i]); });
}
template <>
struct Form<Fmod> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const Fmod&, VF a, VF b) { return fmod(a, b); }
};
// Remainder: fmod moved by b where the signs differ, as the scalar functor rounds it.
template <>
struct Form<Remainder> {
  static constexpr bool kUnary = false, kBinary = true;
  static VF apply(const Remainder&, VF a, VF b) {
    const VF r = fmod(a, b);
    return select((r != 0.0f) & ((r < 0.0f) != (b < 0.0f)), r + b, r);
  }
};

// The logarithms and expm1 as ops (log2 and log10 as log times a constant: one rounding more).
template <>
struct Form<Sin> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Sin&, VF x) { return sin(x); }
};
template <>
struct Form<Cos> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Cos&, VF x) { return cos(x); }
};
template <>
struct Form<Tan> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Tan&, VF x) { return tan(x); }
};
template <>
struct Form<Atan> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Atan&, VF x) { return atan(x); }
};
template <>
struct Form<Erf> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Erf&, VF x) { return erf(x); }
};
template <>
struct Form<Log> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Log&, VF x) { return log(x); }
};
template <>
struct Form<Log2> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Log2&, VF x) { return log(x) * 1.44269504088896341f; }
};
template <>
struct Form<Log10> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Log10&, VF x) { return log(x) * 0.434294481903251828f; }
};
template <>
struct Form<Log1p> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Log1p&, VF x) { return log1p(x); }
};
template <>
struct Form<Expm1> {
  static constexpr bool kUnary = true, kBinary = false;
  static VF apply(const Expm1&, VF x) { return expm1(x); }
};

// Whether functor F on accumulation type A has a vector form here.
template <typename F, typename A>
constexpr bool kUnary = Form<F>::kUnary&& std::is_same_v<A, float>;
template <typename F, typename A>
constexpr bool kBinary = Form<F>::kBinary&& std::is_same_v<A, float>;

inline VF load(const float* p, int64_t n) {
  VF v{};
  std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
  return v;
}
inline void store(float* p, VF v, int64_t n) {
  std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
}

// Whole vectors: a copy of constant size, one unaligned load or store (the variable-size copies
// above stay calls to memcpy, which cost more than the function itself: exp ran at 2.3x
// PyTorch's time).
inline VF load(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof(VF));
  return v;
}
inline void store(float* p, VF v) { std::memcpy(p, &v, sizeof(VF)); }

// o[0, n) = F(x[0, n)), contiguous f32; the tail through a zero-padded vector.
template <typename F>
void unary(const F& f, float* o, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(o + i, Form<F>::apply(f, load(x + i)));
  if (i < n) store(o + i, Form<F>::apply(f, load(x + i, n - i)), n - i);
}
template <typename F>
void binary(const F& f, float* o, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(o + i, Form<F>::apply(f, load(a + i), load(b + i)));
  if (i < n) store(o + i, Form<F>::apply(f, load(a + i, n - i), load(b + i, n - i)), n - i);
}
#else
template <typename F, typename A>
constexpr bool kUnary = false;
template <typename F, typename A>
constexpr bool kBinary = false;
template <typename F>
void unary(const F&, float*, const float*, int64_t) {}
template <typename F>
void binary(const F&, float*, const float*, const float*, int64_t) {}
#endif

}  // namespace vec
}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
