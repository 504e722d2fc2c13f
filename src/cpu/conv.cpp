// CPU conv2d: im2col + GEMM per (group of samples, channel group) in general, and direct AVX-512
// or AVX2 kernels for 3x3 f32 convolutions (forward for stride 1 and 2, the stride-1 input
// gradient, and the weight gradient of any stride; the stride-1 forward and input gradient go
// through Winograd F(2x2, 3x3) instead where it is faster). Sample groups run in parallel;
// weight gradients are summed over at most kWeightChunks fixed chunks of samples, combined in
// order, so the bits do not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels.hpp"
#include "loops.hpp"
#include "tandem/kernels/cpu_isa.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

constexpr int64_t kWeightChunks = 16;

struct Geometry {
  int64_t n, ci, h, w, co, kh, kw, ho, wo, groups;
  int64_t cig() const { return ci / groups; }
  int64_t cog() const { return co / groups; }
  int64_t col_rows() const { return cig() * kh * kw; }
  int64_t col_cols() const { return ho * wo; }
  bool pointwise(const Conv2dParams& p) const {  // 1x1, stride 1, no padding: col == input
    return kh == 1 && kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
  }
};

Geometry geometry(const Tensor& in, const Tensor& weight, const Tensor& out, int64_t groups) {
  return {in.size(0),     in.size(1),     in.size(2),  in.size(3),  weight.size(0),
          weight.size(2), weight.size(3), out.size(2), out.size(3), groups};
}

// The output columns [lo, hi) whose input column ow * stride + shift lies inside the image.
std::pair<int64_t, int64_t> valid_columns(int64_t shift, const Geometry& g, const Conv2dParams& p) {
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  int64_t lo = std::clamp<int64_t>(ceil_div(-shift, p.stride_w), 0, g.wo);
  int64_t hi = std::clamp<int64_t>(ceil_div(g.w - shift, p.stride_w), lo, g.wo);
  return {lo, hi};
}

constexpr int64_t kShortRow = 8;  // output rows shorter than this: im2col gathers through a table
constexpr int64_t kShortRowTable = 1 << 16;  // of at most this many offsets (tall narrow maps copy)

// x (C, H, W) -> col (C * kh * kw, Ho * Wo), rows `ld` apart (several samples share a col
// matrix side by side). Channels innermost: a tap's valid columns are found once.
template <typename T>
void im2col(T* col, int64_t ld, const T* x, const Geometry& g, const Conv2dParams& p) {
  const int64_t hw = g.ho * g.wo, taps = g.kh * g.kw;
  if (g.pointwise(p)) {  // col rows are the input's planes
    for (int64_t c = 0; c < g.cig(); ++c) std::copy_n(x + c * hw, hw, col + c * ld);
    return;
  }
  if (g.wo < kShortRow && taps * hw <= kShortRowTable && g.h * g.w <= INT32_MAX) {
    // Rows too short for copies: a table of each tap's source offsets in a plane (-1: padding),
    // gathered channel by channel.
    int32_t* from = scratch<int32_t, 16>(taps * hw).data();
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          const int64_t ih = oh * p.stride_h - p.pad_h + (t / g.kw) * p.dil_h;
          const int64_t iw = ow * p.stride_w - p.pad_w + (t % g.kw) * p.dil_w;
          const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
          from[t * hw + oh * g.wo + ow] = inside ? static_cast<int32_t>(ih * g.w + iw) : -1;
        }
    for (int64_t c = 0; c < g.cig(); ++c) {
      const T* plane = x + c * g.h * g.w;
      for (int64_t t = 0; t < taps; ++t) {
        T* dst = col + (c * taps + t) * ld;
        const int32_t* f = from + t * hw;
        for (int64_t i = 0; i < hw; ++i) dst[i] = f[i] >= 0 ? plane[f[i]] : T(0);
      }
    }
    return;
  }
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int64_t shift = kj * p.dil_w - p.pad_w;
      const auto [lo, hi] = valid_columns(shift, g, p);
      for (int64_t c = 0; c < g.cig(); ++c) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
        const T* plane = x + c * g.h * g.w;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          T* dst = row + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.wo, T(0));
            continue;
          }
          const T* src = plane + ih * g.w;
          for (int64_t ow = 0; ow < lo; ++ow) dst[ow] = T(0);
          if (p.stride_w == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow + shift];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * p.stride_w + shift];
          }
          for (int64_t ow = hi; ow < g.wo; ++ow) dst[ow] = T(0);
        }
      }
    }
}

// dx (C, H, W) += col2im(dcol (C * kh * kw, Ho * Wo), rows `ld` apart). Channels innermost, as
// im2col; each input element still adds its taps in (ki, kj) order.
template <typename T>
void col2im(T* dx, const T* col, int64_t ld, const Geometry& g, const Conv2dParams& p) {
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int64_t shift = kj * p.dil_w - p.pad_w;
      const auto [lo, hi] = valid_columns(shift, g, p);
      for (int64_t c = 0; c < g.cig(); ++c) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
        T* plane = dx + c * g.h * g.w;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          if (ih < 0 || ih >= g.h) continue;
          const T* src = row + oh * g.wo;
          T* dst = plane + ih * g.w;
          if (p.stride_w == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow + shift] += src[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow * p.stride_w + shift] += src[ow];
          }
        }
      }
    }
}

// Samples are processed in groups of `group` side by side in one col matrix, so each GEMM has
// at least ~1024 columns even for 7x7 maps (small GEMMs waste the micro-kernel on packing and
// edge tiles). Groups depend on the shapes only, never on the thread count.
int64_t samples_per_group(const Geometry& g) {
  return std::max<int64_t>(1, std::min<int64_t>(g.n, 1024 / std::max<int64_t>(g.col_cols(), 1)));
}

// The group's col matrix (Cig*kh*kw, S * HoWo) for channel group gr; a view of the input itself
// when a single sample of a pointwise conv needs no copy.
template <typename T>
const T* group_cols(std::vector<T>& buf, const T* x, int64_t s0, int64_t s1, int64_t gr,
                    const Geometry& g, const Conv2dParams& p) {
  const int64_t hw = g.col_cols(), ld = (s1 - s0) * hw;
  if (g.pointwise(p) && s1 - s0 == 1) return x + (s0 * g.ci + gr * g.cig()) * g.h * g.w;
  buf.resize(g.col_rows() * ld);
  T* col = buf.data();
  // Samples side by side in parallel where the caller is not itself one of several chunks.
  parallel_for(s0, s1, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s)
      im2col(col + (s - s0) * hw, ld, x + (s * g.ci + gr * g.cig()) * g.h * g.w, g, p);
  });
  return col;
}

// c (ldc apart) = op(a) op(b), or += op(a) op(b) with `accumulate`, in T's accumulation type:
// the GEMM of f32/f64, or for bf16 the bf16 GEMM (vdpbf16ps; only where cpu_bf16_dot()).
template <typename T>
void gemm_acc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
              const T* b, int64_t ldb, acc_type<T>* c, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
#if defined(__AVX512F__)
    auto bits = [](const T* v) { return reinterpret_cast<const uint16_t*>(v); };
    if (!accumulate)
      return gemm_bf16(trans_a, trans_b, m, n, k, bits(a), lda, bits(b), ldb, c, ldc);
    float* product = scratch<float, 14>(m * n).data();
    gemm_bf16(trans_a, trans_b, m, n, k, bits(a), lda, bits(b), ldb, product, n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += product[i * n + j];
#endif
  } else {
    gemm<T>(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc);
  }
}

// im2col + GEMM over tensors of T (f32, f64, or bf16 on the bf16 GEMM), sums in acc_type<T>.
template <typename T>
void forward_impl(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                  const Conv2dParams& p) {
  using A = acc_type<T>;
  constexpr bool kWide = std::is_same_v<A, T>;
  Geometry g = geometry(in, weight, out, p.groups);
  const T* x = ptr<const T>(in);
  const T* w = ptr<const T>(weight);
  const T* b = bias.defined() ? ptr<const T>(bias) : nullptr;
  T* y = ptr<T>(out);
  const int64_t hw = g.col_cols(), per = samples_per_group(g), groups = (g.n + per - 1) / per;
  parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
    auto& col = scratch<T, 0>(0);
    auto& ybuf = scratch<A, 1>(0);
    for (int64_t grp = lo; grp < hi; ++grp) {
      const int64_t s0 = grp * per, s1 = std::min(g.n, s0 + per), ld = (s1 - s0) * hw;
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const T* cols = group_cols(col, x, s0, s1, gr, g, p);
        // One wide sample writes straight into the output; several, or narrow ones, go through
        // (Cog, S * HoWo) in A.
        A* dst = nullptr;
        if constexpr (kWide) dst = y + (s0 * g.co + gr * g.cog()) * hw;
        if (!kWide || s1 - s0 > 1) {
          ybuf.resize(g.cog() * ld);
          dst = ybuf.data();
        }
        gemm_acc(false, false, g.cog(), ld, g.col_rows(), w + gr * g.cog() * g.col_rows(),
                 g.col_rows(), cols, ld, dst, ld, false);
        parallel_for(s0, s1, 1, [&](int64_t s_lo, int64_t s_hi) {  // as group_cols
          for (int64_t s = s_lo; s < s_hi; ++s)
            for (int64_t c = 0; c < g.cog(); ++c) {
              const A* src = dst + c * ld + (s - s0) * hw;
              T* o = y + (s * g.co + gr * g.cog() + c) * hw;
              const A bc = b ? widen_one(b[gr * g.cog() + c]) : A(0);
              if (static_cast<const void*>(src) != o) {
                for (int64_t i = 0; i < hw; ++i) o[i] = narrow_one<T>(src[i] + bc);
              } else if (b) {
                if constexpr (kWide)
                  for (int64_t i = 0; i < hw; ++i) o[i] += bc;
              }
            }
        });
      }
    }
  });
}

// dy of a sample group and channel group as a (Cog, S * HoWo) matrix (a view for one sample).
template <typename T>
const T* group_grads(std::vector<T>& buf, const T* dy, int64_t s0, int64_t s1, int64_t gr,
                     const Geometry& g) {
  const int64_t hw = g.col_cols(), ld = (s1 - s0) * hw;
  if (s1 - s0 == 1) return dy + (s0 * g.co + gr * g.cog()) * hw;
  buf.resize(g.cog() * ld);
  parallel_for(s0, s1, 1, [&](int64_t lo, int64_t hi) {  // as group_cols
    for (int64_t s = lo; s < hi; ++s)
      for (int64_t c = 0; c < g.cog(); ++c)
        std::copy_n(dy + (s * g.co + gr * g.cog() + c) * hw, hw,
                    buf.data() + c * ld + (s - s0) * hw);
  });
  return buf.data();
}

// grad_bias (Co) = grad_out (N, Co, Ho, Wo) summed over all but channels, in f64, in order.
template <typename T>
void bias_grad(const Tensor& grad_bias, const Tensor& grad_out) {
  const int64_t n = grad_out.size(0), co = grad_out.size(1),
                hw = grad_out.size(2) * grad_out.size(3);
  const T* dy = ptr<const T>(grad_out);
  T* db = ptr<T>(grad_bias);
  parallel_for(0, co, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hw; ++j) s += widen_one(dy[(i * co + c) * hw + j]);
      db[c] = narrow_one<T>(static_cast<acc_type<T>>(s));
    }
  });
}

template <typename T>
void backward_impl(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                   const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                   const Conv2dParams& p) {
  using A = acc_type<T>;
  constexpr bool kWide = std::is_same_v<A, T>;
  Geometry g = geometry(in, weight, grad_out, p.groups);
  const T* x = ptr<const T>(in);
  const T* w = ptr<const T>(weight);
  const T* dy = ptr<const T>(grad_out);
  const int64_t hw = g.col_cols(), per = samples_per_group(g), groups = (g.n + per - 1) / per;

  if (grad_bias.defined()) bias_grad<T>(grad_bias, grad_out);

  if (grad_in.defined()) {
    T* dx = ptr<T>(grad_in);
    parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
      auto& dcol = scratch<A, 0>(0);
      auto& dybuf = scratch<T, 1>(0);
      for (int64_t grp = lo; grp < hi; ++grp) {
        const int64_t s0 = grp * per, s1 = std::min(g.n, s0 + per), ld = (s1 - s0) * hw;
        for (int64_t gr = 0; gr < g.groups; ++gr) {
          const T* dys = group_grads(dybuf, dy, s0, s1, gr, g);
          const T* wg = w + gr * g.cog() * g.col_rows();
          if constexpr (kWide) {
            if (g.pointwise(p) && s1 - s0 == 1) {  // dx = W^T dy directly
              gemm<T>(true, false, g.col_rows(), hw, g.cog(), T(1), wg, g.col_rows(), dys, hw, T(0),
                      dx + (s0 * g.ci + gr * g.cig()) * g.h * g.w, hw);
              continue;
            }
          }
          dcol.resize(g.col_rows() * ld);
          gemm_acc(true, false, g.col_rows(), ld, g.cog(), wg, g.col_rows(), dys, ld, dcol.data(),
                   ld, false);
          const int64_t sample = g.cig() * g.h * g.w;
          const A* dcols = dcol.data();
          parallel_for(s0, s1, 1, [&](int64_t s_lo, int64_t s_hi) {  // as group_cols
            for (int64_t s = s_lo; s < s_hi; ++s) {
              T* dxs = dx + (s * g.ci + gr * g.cig()) * g.h * g.w;
              A* sum = nullptr;  // narrow: summed in A, rounded once
              if constexpr (kWide) {
                sum = dxs;
              } else {
                auto& dxbuf = scratch<A, 15>(sample);
                sum = dxbuf.data();
              }
              std::fill(sum, sum + sample, A(0));
              col2im(sum, dcols + (s - s0) * hw, ld, g, p);
              if constexpr (!kWide) narrow_block(dxs, 1, sum, sample);
            }
          });
        }
      }
    });
  }

  if (grad_weight.defined()) {
    const int64_t wsize = weight.numel();
    const int64_t chunks = std::min(kWeightChunks, groups);
    A* partial = scratch<A, 5>(chunks * wsize).data();
    std::fill(partial, partial + chunks * wsize, A(0));
    parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      auto& col = scratch<T, 0>(0);
      auto& dybuf = scratch<T, 1>(0);
      for (int64_t c = lo; c < hi; ++c) {
        A* acc = partial + c * wsize;
        for (int64_t grp = groups * c / chunks; grp < groups * (c + 1) / chunks; ++grp) {
          const int64_t s0 = grp * per, s1 = std::min(g.n, s0 + per), ld = (s1 - s0) * hw;
          for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* cols = group_cols(col, x, s0, s1, gr, g, p);
            const T* dys = group_grads(dybuf, dy, s0, s1, gr, g);
            // dW_g (Cog, Cig*kh*kw) += dy_g (Cog, S*HoWo) x col^T (S*HoWo, Cig*kh*kw)
            gemm_acc(false, true, g.cog(), g.col_rows(), ld, dys, ld, cols, ld,
                     acc + gr * g.cog() * g.col_rows(), g.col_rows(), true);
          }
        }
      }
    });
    // The chunks' sums in order, chunk 0 + 1 + ..., added a whole chunk at a time (sequential,
    // vectorized) into chunk 0's.
    for (int64_t c = 1; c < chunks; ++c)
      for (int64_t i = 0; i < wsize; ++i) partial[i] += partial[c * wsize + i];
    T* dw = ptr<T>(grad_weight);
    for (int64_t i = 0; i < wsize; ++i) dw[i] = narrow_one<T>(partial[i]);
  }
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TANDEM_DIRECT_CONV 1
// The few vector operations the direct kernels use, for the widest instruction set compiled in.
// Both widths give the same bits: every output is summed in the same order whatever the width.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
using VecF = __m512;
inline VecF vzero() { return _mm512_setzero_ps(); }
inline VecF vload(const float* p) { return _mm512_loadu_ps(p); }
inline VecF vset1(float x) { return _mm512_set1_ps(x); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline VecF vadd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
inline VecF vsub(VecF a, VecF b) { return _mm512_sub_ps(a, b); }
inline void vstore(float* p, VecF v) { _mm512_storeu_ps(p, v); }
#else
constexpr int kLanes = 8;
using VecF = __m256;
inline VecF vzero() { return _mm256_setzero_ps(); }
inline VecF vload(const float* p) { return _mm256_loadu_ps(p); }
inline VecF vset1(float x) { return _mm256_set1_ps(x); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline VecF vadd(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline VecF vsub(VecF a, VecF b) { return _mm256_sub_ps(a, b); }
inline void vstore(float* p, VecF v) { _mm256_storeu_ps(p, v); }
#endif

// --- direct 3x3 convolution, stride 1 or 2 (f32, AVX-512 or AVX2) ---------------------------
// With 16 to 64 channels, im2col + GEMM spends most of its time moving the 9x larger col matrix
// (docs/PERFORMANCE.md). This kernel reads a zero-padded copy of the input directly: it keeps
// 8 output channels x 32 positions in 16 zmm accumulators (AVX2: x 8 positions in 8 ymm) and,
// for every (input channel, tap), loads the input vectors and broadcasts 8 weights. Each output
// is a sum in the fixed order (channel, ki, kj), so results do not depend on the thread count.
// Stride 1 takes the Winograd kernel below instead, except for large maps (and on AVX-512, for
// fewer than 32 input channels).
//
// Outputs are computed on a grid of row width grid_w, position q = oh * grid_w + ow, 32
// consecutive positions at a time, so that the input of tap t is simply src[q + tap_offset[t]]
// whatever the row width:
// - stride 1: src is the padded plane (hp, wp), grid_w = wp, offset ki * wp + kj;
// - stride 2: src holds the four parity planes of the padded plane (rows and columns split into
//   even and odd), each (hq, wq) = (ceil(hp / 2), ceil(wp / 2)); tap (ki, kj) reads plane
//   (ki % 2, kj % 2) at offset (ki / 2) * wq + kj / 2, and grid_w = wq.
// Grid columns ow >= wo are junk, dropped when storing (AVX-512: a compressing store): a 7-wide
// map keeps 7 of 9 lanes busy instead of 7 of 16.

constexpr int64_t kDirectCo = 8;      // output channels per block
constexpr int64_t kDirectSlack = 64;  // floats readable past the end of a sample's source

// Output maps of fewer positions go through im2col + GEMM: the direct kernels run whole vectors
// of grid positions (a 4x4 map pads to a 6-wide grid and 16-position tails) and Winograd tiles of
// 2x2, so on ResNet-50's 4x4 and 2x2 maps they ran at a third of the GEMM's rate.
constexpr int64_t kDirectMinPositions = 32;

bool use_direct(const Geometry& g, const Conv2dParams& p) {
  const bool stride_ok =
      (p.stride_h == 1 && p.stride_w == 1) || (p.stride_h == 2 && p.stride_w == 2);
  return g.kh == 3 && g.kw == 3 && stride_ok && p.dil_h == 1 && p.dil_w == 1 && p.groups == 1 &&
         p.pad_h <= 2 && p.pad_w <= 2 && g.wo >= 4 && g.ho * g.wo >= kDirectMinPositions;
}

// Tap t = 3 ki + kj of kernel (o, i) of the weights W (Co, Ci, 3, 3), or with flip_transpose
// of the input gradient's weights W'[ci][co][2-ki][2-kj].
float kernel_tap(const float* w, int64_t ci, int64_t o, int64_t i, int t, bool flip_transpose) {
  return flip_transpose ? w[(i * ci + o) * 9 + (8 - t)] : w[(o * ci + i) * 9 + t];
}

// Whether tensors of T take the bf16 kernels (vdpbf16ps): bf16 on a CPU with bf16 dot products.
// They then replace Winograd too (twice the f32 direct kernel's rate; the products are exact,
// but vdpbf16ps flushes subnormal inputs and results to zero, as oneDNN's bf16 kernels do).
template <typename T>
bool bf16_dot() {
#if defined(__AVX512F__)
  return std::is_same_v<T, Eigen::bfloat16> && cpu_bf16_dot();
#else
  return false;
#endif
}

// Input channels per element of the direct kernels' packed weights and prepared source: one for
// f32 (W = float), a pair for the bf16 kernel (W = uint32_t: two bf16, channel 2k in the low half).
template <typename W>
constexpr int64_t kChannelsPer = std::is_same_v<W, float> ? 1 : 2;

// Weights (Co, Ci, 3, 3) -> blocks of 8 output channels: [block][ci / kChannelsPer][tap][8], zero
// padded (flip_transpose: of W'); for the bf16 kernel rounded to bf16.
template <typename W>
std::vector<W> pack_direct_weights(const float* w, int64_t co, int64_t ci, bool flip_transpose) {
  constexpr int64_t kPer = kChannelsPer<W>;
  const int64_t out_ch = flip_transpose ? ci : co, in_ch = flip_transpose ? co : ci;
  const int64_t blocks = (out_ch + kDirectCo - 1) / kDirectCo, planes = (in_ch + kPer - 1) / kPer;
  std::vector<W> packed(blocks * planes * 9 * kDirectCo, W(0));
  for (int64_t o = 0; o < out_ch; ++o)
    for (int64_t i = 0; i < in_ch; ++i)
      for (int64_t t = 0; t < 9; ++t) {
        const float v = kernel_tap(w, ci, o, i, static_cast<int>(t), flip_transpose);
        W& dst = packed[((o / kDirectCo * planes + i / kPer) * 9 + t) * kDirectCo + o % kDirectCo];
        if constexpr (kPer == 1) {
          dst = v;
        } else {
          const auto bits = Eigen::numext::bit_cast<uint16_t>(narrow_one<Eigen::bfloat16>(v));
          dst |= static_cast<uint32_t>(bits) << (16 * (i % 2));
        }
      }
  return packed;
}

// Where a sample's prepared input lives and how the taps find their inputs in it.
struct DirectLayout {
  int64_t channel_size;  // floats per input channel in the prepared source
  int64_t grid_w;        // row width of the output grid
  int64_t tap_offset[9];
};

DirectLayout direct_layout(int64_t hp, int64_t wp, int64_t stride) {
  DirectLayout l{};
  if (stride == 1) {
    l.channel_size = hp * wp;
    l.grid_w = wp;
    for (int t = 0; t < 9; ++t) l.tap_offset[t] = (t / 3) * wp + t % 3;
  } else {
    const int64_t hq = (hp + 1) / 2, wq = (wp + 1) / 2;
    l.channel_size = 4 * hq * wq;
    l.grid_w = wq;
    for (int t = 0; t < 9; ++t) {
      const int ki = t / 3, kj = t % 3;
      l.tap_offset[t] = ((ki % 2) * 2 + kj % 2) * hq * wq + (ki / 2) * wq + kj / 2;
    }
  }
  return l;
}

// Writes sample x (in_ch, h, w), padded by (ph, pw), into src in the layout of `stride`, with kPer
// channels per plane: channel c's plane at c * channel_size (kPer 1), or channels 2k and 2k + 1
// interleaved element by element in plane k (kPer 2, the bf16 kernel's pairs: one 32-bit word per
// position, channel 2k in the low half). For an f32 src (D = float) an f16 or bf16 x is widened
// on the way (the copy is made anyway); a bf16 src takes bf16 as it is. Only the interior is
// written: the padding must already be zero.
template <int64_t kPer, typename D, typename T>
void prepare_direct_input(D* src, const T* x, int64_t in_ch, int64_t h, int64_t w, int64_t ph,
                          int64_t pw, int64_t stride, const DirectLayout& l) {
  static_assert(std::is_same_v<D, float> ? kPer == 1 : std::is_same_v<D, T>);
  const int64_t wp = w + 2 * pw;
  for (int64_t c = 0; c < in_ch; c += kPer) {
    D* dst = src + c * l.channel_size;
    for (int64_t r = 0; r < h; ++r) {
      const T* row = x + (c * h + r) * w;
      const T* next = c + 1 < in_ch ? row + h * w : nullptr;  // the pair's second channel
      // Elements first, first + step, ... (n of them) of the row to d[0], d[kPer], ...
      auto put = [&](D* d, int64_t first, int64_t step, int64_t n) {
        if constexpr (std::is_same_v<D, float>) {
          widen_block(d, row + first, step, n);
        } else if constexpr (kPer == 1) {
          for (int64_t i = 0; i < n; ++i) d[i] = row[first + i * step];
        } else {  // whole 32-bit words: a loop the compiler vectorizes
          auto bits = [](T v) { return uint32_t{Eigen::numext::bit_cast<uint16_t>(v)}; };
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = first + i * step;
            const uint32_t word = bits(row[k]) | (next ? bits(next[k]) << 16 : 0u);
            std::memcpy(static_cast<void*>(d + 2 * i), &word, sizeof word);
          }
        }
      };
      if (stride == 1) {
        put(dst + ((r + ph) * wp + pw) * kPer, 0, 1, w);
        continue;
      }
      // Padded column cp = col + pw goes to the even or odd plane at cp / 2.
      const int64_t rp = r + ph, wq = l.grid_w, plane = l.channel_size / 4;
      D* even = dst + ((rp % 2) * 2 * plane + (rp / 2) * wq) * kPer;
      D* odd = even + plane * kPer;
      const int64_t first_even = pw % 2, first_odd = 1 - pw % 2;
      put(even + (first_even + pw) / 2 * kPer, first_even, 2, (w - first_even + 1) / 2);
      put(odd + (first_odd + pw) / 2 * kPer, first_odd, 2, (w - first_odd + 1) / 2);
    }
  }
}

// Runs compute(dst) to write the n_out planes of hw f32 outputs of one block, adds each plane's
// bias (when given) and stores the block at y: in place for f32; else in per-thread scratch,
// rounded into y while it is in cache (no pass of its own over the output).
template <typename Out, typename Compute>
void output_block(Out* y, int64_t n_out, int64_t hw, const float* bias, const Compute& compute) {
  float* dst = nullptr;
  if constexpr (std::is_same_v<Out, float>)
    dst = y;
  else
    dst = scratch<float, 10>(n_out * hw).data();
  compute(dst);
  if (bias)
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t k = 0; k < hw; ++k) dst[o * hw + k] += bias[o];
  if constexpr (!std::is_same_v<Out, float>) narrow_block(y, 1, dst, n_out * hw);
}

// Stores the outputs of acc[o][v] (positions q0 + kLanes * v ... on the grid of width gw) into y
// (n_out, ho, wo), dropping the junk grid columns ow >= wo and the positions past the last.
// Inlined into both kernels (the bf16 one's target attribute would otherwise keep it a call).
template <int kNV>
inline __attribute__((always_inline)) void store_direct(float* y, const VecF (&acc)[kDirectCo][kNV],
                                                        int64_t q0, int64_t gw, int64_t ho,
                                                        int64_t wo, int64_t n_out) {
  const int64_t q_end = (ho - 1) * gw + wo;
  for (int v = 0; v < kNV; ++v) {
    const int64_t q = q0 + kLanes * v;
    if (q >= q_end) break;
    uint32_t mask = 0;
    for (int lane = 0; lane < kLanes; ++lane)
      if (q + lane < q_end && (q + lane) % gw < wo) mask |= 1u << lane;
    // Outputs before q in row-major (ho, wo) order: whole rows, then the valid part of q's row.
    const int64_t first = (q / gw) * wo + std::min(q % gw, wo);
    for (int64_t o = 0; o < n_out; ++o) {
#if defined(__AVX512F__)
      _mm512_mask_compressstoreu_ps(y + o * ho * wo + first, static_cast<__mmask16>(mask),
                                    acc[o][v]);
#else
      float* dst = y + o * ho * wo + first;
      if (mask == (1u << kLanes) - 1) {
        vstore(dst, acc[o][v]);
        continue;
      }
      alignas(32) float lanes[kLanes];
      vstore(lanes, acc[o][v]);
      for (int lane = 0; lane < kLanes; ++lane)
        if (mask >> lane & 1) *dst++ = lanes[lane];
#endif
    }
  }
}

// One sample, one block of up to 8 output channels: y (n_out, ho, wo).
void direct_block(float* y, const float* src, const float* wblock, int64_t in_ch,
                  const DirectLayout& l, int64_t ho, int64_t wo, int64_t n_out) {
  constexpr int kNV = kLanes == 16 ? 2 : 1;  // AVX2 has 16 registers: 8 accumulators, not 16
  const int64_t gw = l.grid_w, q_end = (ho - 1) * gw + wo;
  for (int64_t q0 = 0; q0 < q_end; q0 += kLanes * kNV) {
    VecF acc[kDirectCo][kNV];
    for (int o = 0; o < kDirectCo; ++o)
      for (int v = 0; v < kNV; ++v) acc[o][v] = vzero();
    const float* wc = wblock;
    for (int64_t c = 0; c < in_ch; ++c) {
      const float* xc = src + c * l.channel_size + q0;
      for (int t = 0; t < 9; ++t, wc += kDirectCo) {
        VecF xv[kNV];
        for (int v = 0; v < kNV; ++v) xv[v] = vload(xc + l.tap_offset[t] + kLanes * v);
        for (int o = 0; o < kDirectCo; ++o) {
          const VecF wv = vset1(wc[o]);
          for (int v = 0; v < kNV; ++v) acc[o][v] = vfma(wv, xv[v], acc[o][v]);
        }
      }
    }
    store_direct(y, acc, q0, gw, ho, wo, n_out);
  }
}

#if defined(__AVX512F__)
// The bf16 kernel on the CPU's bf16 dot products (AVX512_BF16): the grid and taps of direct_block
// with the input channels in pairs. Each 32-bit word of the source holds a position of two
// channels and each weight word the same two channels' taps, so one vdpbf16ps adds the exact
// products of both channels for 16 positions into f32: twice an f32 FMA's channels. Each output
// is an f32 sum in the fixed order (channel pair, ki, kj).
__attribute__((target("avx512bf16"))) void direct_block_bf16(float* y, const Eigen::bfloat16* src,
                                                             const uint32_t* wblock, int64_t planes,
                                                             const DirectLayout& l, int64_t ho,
                                                             int64_t wo, int64_t n_out) {
  constexpr int kNV = 2;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(src);
  const int64_t gw = l.grid_w, q_end = (ho - 1) * gw + wo;
  for (int64_t q0 = 0; q0 < q_end; q0 += kLanes * kNV) {
    VecF acc[kDirectCo][kNV];
    for (int o = 0; o < kDirectCo; ++o)
      for (int v = 0; v < kNV; ++v) acc[o][v] = vzero();
    const uint32_t* wc = wblock;
    for (int64_t c = 0; c < planes; ++c) {
      const uint32_t* xc = words + c * l.channel_size + q0;
      for (int t = 0; t < 9; ++t, wc += kDirectCo) {
        __m512bh xv[kNV];
        for (int v = 0; v < kNV; ++v)
          xv[v] = (__m512bh)_mm512_loadu_si512(xc + l.tap_offset[t] + kLanes * v);
        for (int o = 0; o < kDirectCo; ++o) {
          const __m512bh wv = (__m512bh)_mm512_set1_epi32(static_cast<int>(wc[o]));
          for (int v = 0; v < kNV; ++v) acc[o][v] = _mm512_dpbf16_ps(acc[o][v], wv, xv[v]);
        }
      }
    }
    store_direct(y, acc, q0, gw, ho, wo, n_out);
  }
}
#endif

// y (N, out_ch, ho, wo) = conv(x (N, in_ch, h, w) padded by (ph, pw), packed weights) + bias
// (when given) with stride 1 or 2; x and y in f32 or both in f16/bf16, summed in f32: by the f32
// kernel (W = float) or, for bf16, by the bf16 kernel (W = uint32_t, AVX-512 only).
template <typename T, typename W>
void direct_conv(T* y, const T* x, const std::vector<W>& wpacked, const float* bias, int64_t n,
                 int64_t in_ch, int64_t h, int64_t w, int64_t out_ch, int64_t ph, int64_t pw,
                 int64_t stride) {
  constexpr int64_t kPer = kChannelsPer<W>;
  using Src = std::conditional_t<kPer == 1, float, Eigen::bfloat16>;
  const int64_t hp = h + 2 * ph, wp = w + 2 * pw;
  const int64_t ho = (hp - 3) / stride + 1, wo = (wp - 3) / stride + 1;
  const DirectLayout l = direct_layout(hp, wp, stride);
  const int64_t blocks = (out_ch + kDirectCo - 1) / kDirectCo, planes = (in_ch + kPer - 1) / kPer;
  const int64_t src_size = (planes * l.channel_size + kDirectSlack) * kPer;
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    Src* src = scratch<Src, 2>(src_size).data();
    std::fill(src, src + src_size, Src(0));  // the padding stays zero from sample to sample
    for (int64_t s = lo; s < hi; ++s) {
      prepare_direct_input<kPer>(src, x + s * in_ch * h * w, in_ch, h, w, ph, pw, stride, l);
      // The blocks of one sample run in parallel when there are fewer samples than threads.
      parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t n_out = std::min(kDirectCo, out_ch - b * kDirectCo);
          const W* wb = wpacked.data() + b * planes * 9 * kDirectCo;
          output_block(y + (s * out_ch + b * kDirectCo) * ho * wo, n_out, ho * wo,
                       bias ? bias + b * kDirectCo : nullptr, [&](float* yb) {
                         if constexpr (kPer == 1) {
                           direct_block(yb, src, wb, in_ch, l, ho, wo, n_out);
                         } else {
#if defined(__AVX512F__)
                           direct_block_bf16(yb, src, wb, planes, l, ho, wo, n_out);
#endif
                         }
                       });
        }
      });
    }
  });
}

// --- Winograd F(2x2, 3x3): stride-1 3x3 convolutions --------------------------------------------
// Each 2x2 block of outputs comes from a 4x4 input tile d as A^T [(G g G^T) . (B^T d B)] A, with
// the sum over input channels taken inside the product: for each of the 16 transformed positions
// xi, M_xi (co x tiles) = U_xi (co x ci) V_xi (ci x tiles), 16 multiplications per 2x2 outputs and
// channel pair where the direct kernel does 36. Per sample: the padded input is transformed into
// V[xi][ci][tile] (even and odd columns split by shuffles; WinogradGrid below), each block of 8
// output channels runs the 16 small GEMMs (4 or 8 channels x 3 vectors of tiles in registers) into
// M[xi][8][tile], and the output transform writes y. Every sum has a fixed
// order, so the bits do not depend on the thread count; they differ from the direct kernel's (the
// transforms add before multiplying: errors against the f64 path are in tests/ops/test_ops.cpp).
// On AVX-512 only from 32 input channels: with fewer, the transforms cost what the GEMM saves
// (16 channels at 28x28: even; the 1-channel stem: 1.8x slower than the direct kernel, whose
// FMAs take their broadcast weight from memory). docs/PERFORMANCE.md has the measurements.
constexpr int64_t kWinogradMinChannels = kLanes == 16 ? 32 : 1;
// A sample's V at most (L2-sized: larger maps take the direct kernel).
constexpr int64_t kWinogradMaxBytes = int64_t{2} << 20;
// The GEMM's register tile: kGemmCo output channels x up to kGemmNV vectors of tiles (AVX2: 12 of
// the 16 ymm registers accumulate, AVX-512: 24 of the 32 zmm; the last one or two vectors of a row
// take a narrower tile, so a row is padded to whole vectors only).
constexpr int kGemmCo = kLanes == 16 ? 8 : 4, kGemmNV = 3;  // the last 1 or 2 vectors: narrower

// Transformed weights [xi][block of 8 output channels][ci][8]; flip_transpose as
// pack_direct_weights.
std::vector<float> pack_winograd_weights(const float* w, int64_t co, int64_t ci,
                                         bool flip_transpose) {
  const int64_t out_ch = flip_transpose ? ci : co, in_ch = flip_transpose ? co : ci;
  const int64_t blocks = (out_ch + kDirectCo - 1) / kDirectCo;
  std::vector<float> u(16 * blocks * in_ch * kDirectCo, 0.0f);
  for (int64_t o = 0; o < out_ch; ++o)
    for (int64_t i = 0; i < in_ch; ++i) {
      double g[3][3], t[4][3];
      for (int k = 0; k < 9; ++k)
        g[k / 3][k % 3] = kernel_tap(w, ci, o, i, k, flip_transpose);
      for (int k = 0; k < 3; ++k) {  // G g, G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
        t[0][k] = g[0][k];
        t[1][k] = 0.5 * (g[0][k] + g[1][k] + g[2][k]);
        t[2][k] = 0.5 * (g[0][k] - g[1][k] + g[2][k]);
        t[3][k] = g[2][k];
      }
      for (int a = 0; a < 4; ++a) {  // (G g) G^T
        const double r[4] = {t[a][0], 0.5 * (t[a][0] + t[a][1] + t[a][2]),
                             0.5 * (t[a][0] - t[a][1] + t[a][2]), t[a][2]};
        for (int b = 0; b < 4; ++b)
          u[(((a * 4 + b) * blocks + o / kDirectCo) * in_ch + i) * kDirectCo + o % kDirectCo] =
              static_cast<float>(r[b]);
      }
    }
  return u;
}

// Tile (i, j) sits at position i * pitch + j of V and M. A map at least half a vector wide has
// pitch = tw: a vector holds kLanes tiles of one tile row (its lanes past the row write junk into
// the next row's places, which that row then overwrites). A narrower map has pitch 4 or 8 and a
// vector holds `rows` = kLanes / pitch whole tile rows (lanes j >= tw are junk the output drops),
// so 7x7 and 14x14 maps do not leave most lanes idle. Small maps put several samples' tiles side
// by side (sample k's from position k * tiles), so that the GEMM has rows of at least
// kGemmVectors vectors to tile.
struct WinogradGrid {
  int64_t ho, wo;      // the output
  int64_t th, tw;      // 2x2 tiles down and across
  int64_t pitch;       // positions from one tile row to the next
  int64_t rows;        // tile rows per vector: 1, or kLanes / pitch
  int64_t th_padded;   // th rounded up to whole vectors of rows
  int64_t tiles;       // th_padded * pitch: positions per sample
  int64_t samples;     // samples per V and M
  int64_t stride;      // floats between rows of V or M: samples * tiles in whole vectors, + slack
};

constexpr int64_t kGemmVectors = 12;

// The grid of an (ho, wo) output from in_ch channels.
WinogradGrid winograd_grid(int64_t ho, int64_t wo, int64_t in_ch) {
  WinogradGrid t{ho, wo, (ho + 1) / 2, (wo + 1) / 2, 0, 1, 0, 0, 1, 0};
  t.pitch = t.tw;
  for (int64_t p = 4; p <= kLanes / 2; p *= 2)
    if (t.tw <= p) {
      t.pitch = p;
      t.rows = kLanes / p;
      break;
    }
  t.th_padded = (t.th + t.rows - 1) / t.rows * t.rows;
  t.tiles = t.th_padded * t.pitch;
  auto stride = [&](int64_t samples) {
    return (samples * t.tiles + kLanes - 1) / kLanes * kLanes + kLanes;
  };
  t.samples = std::max<int64_t>(1, kGemmVectors * kLanes / t.tiles);
  while (t.samples > 1 && 16 * in_ch * stride(t.samples) * 4 > kWinogradMaxBytes) --t.samples;
  t.stride = stride(t.samples);
  return t;
}

// Whether a stride-1 3x3 convolution with in_ch input channels and an (ho, wo) output takes the
// Winograd kernel (else the direct one).
bool use_winograd(int64_t in_ch, int64_t ho, int64_t wo) {
  return in_ch >= kWinogradMinChannels &&
         16 * in_ch * winograd_grid(ho, wo, in_ch).stride * 4 <= kWinogradMaxBytes;
}

// The even and odd elements of the 8 or 16 floats at p: (p[0], p[2], ...), (p[1], p[3], ...).
void deinterleave4(const float* p, __m128& even, __m128& odd) {
  const __m128 a = _mm_loadu_ps(p), b = _mm_loadu_ps(p + 4);
  even = _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
  odd = _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}

void deinterleave8(const float* p, __m256& even, __m256& odd) {
  const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
  // [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6] (64-bit lanes 0 2 1 3)
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
}

// The even and odd elements of the 2 * kLanes floats at p, or with rows > 1 of the 2 * pitch
// floats at p + k * step for each of the rows k (lanes k * pitch ...).
void load_deinterleaved(const float* p, VecF& even, VecF& odd, int64_t rows, int64_t step) {
#if defined(__AVX512F__)
  if (rows == 1) {
    const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    even = _mm512_permutex2var_ps(a, ie, b);
    odd = _mm512_permutex2var_ps(a, _mm512_add_epi32(ie, _mm512_set1_epi32(1)), b);
  } else if (rows == 2) {
    __m256 e0, o0, e1, o1;
    deinterleave8(p, e0, o0);
    deinterleave8(p + step, e1, o1);
    even = _mm512_insertf32x8(_mm512_castps256_ps512(e0), e1, 1);
    odd = _mm512_insertf32x8(_mm512_castps256_ps512(o0), o1, 1);
  } else {
    __m128 e[4], o[4];
    for (int k = 0; k < 4; ++k) deinterleave4(p + k * step, e[k], o[k]);
    even = _mm512_insertf32x4(_mm512_castps128_ps512(e[0]), e[1], 1);
    even = _mm512_insertf32x4(_mm512_insertf32x4(even, e[2], 2), e[3], 3);
    odd = _mm512_insertf32x4(_mm512_castps128_ps512(o[0]), o[1], 1);
    odd = _mm512_insertf32x4(_mm512_insertf32x4(odd, o[2], 2), o[3], 3);
  }
#else
  if (rows == 1) {
    deinterleave8(p, even, odd);
  } else {
    __m128 e0, o0, e1, o1;
    deinterleave4(p, e0, o0);
    deinterleave4(p + step, e1, o1);
    even = _mm256_insertf128_ps(_mm256_castps128_ps256(e0), e1, 1);
    odd = _mm256_insertf128_ps(_mm256_castps128_ps256(o0), o1, 1);
  }
#endif
}

// V[xi][c][tile] = (B^T d B)[xi] of every 4x4 tile d of the padded input (planes of hp x wp),
// kLanes tiles per vector (WinogradGrid). B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
// Junk lanes, the tile rows past th, and with an odd output height or width the last tiles read
// past the padded plane (into the next plane, or the slack after the last): they only reach the
// outputs that winograd_output drops.
void winograd_input(float* v, const float* src, int64_t in_ch, int64_t hp, int64_t wp,
                    const WinogradGrid& t) {
  const int64_t xi_stride = in_ch * t.stride;
  for (int64_t c = 0; c < in_ch; ++c)
    for (int64_t i = 0; i < t.th_padded; i += t.rows)
      for (int64_t j0 = 0; j0 < t.tw; j0 += kLanes) {
        // d[r][s] for kLanes tiles: row 2i + r, columns 2j + s (tile rows i .. i + rows - 1).
        VecF d[4][4], b[4][4];
        for (int r = 0; r < 4; ++r) {
          const float* row = src + (c * hp + 2 * i + r) * wp + 2 * j0;
          load_deinterleaved(row, d[r][0], d[r][1], t.rows, 2 * wp);
          load_deinterleaved(row + 2, d[r][2], d[r][3], t.rows, 2 * wp);
        }
        for (int s = 0; s < 4; ++s) {
          b[0][s] = vsub(d[0][s], d[2][s]);
          b[1][s] = vadd(d[1][s], d[2][s]);
          b[2][s] = vsub(d[2][s], d[1][s]);
          b[3][s] = vsub(d[1][s], d[3][s]);
        }
        float* out = v + c * t.stride + i * t.pitch + j0;
        for (int a = 0; a < 4; ++a) {
          vstore(out + (a * 4 + 0) * xi_stride, vsub(b[a][0], b[a][2]));
          vstore(out + (a * 4 + 1) * xi_stride, vadd(b[a][1], b[a][2]));
          vstore(out + (a * 4 + 2) * xi_stride, vsub(b[a][2], b[a][1]));
          vstore(out + (a * 4 + 3) * xi_stride, vsub(b[a][1], b[a][3]));
        }
      }
}

// M[o0 .. o0 + kGemmCo][q0 .. q0 + kNV * kLanes] of one xi = sum over c in order of
// U[o][c] * V[c][tile] (ux: U of that xi, vx and mx: V and M of that xi).
template <int kNV>
void winograd_gemm_tile(float* mx, const float* vx, const float* ux, int64_t in_ch, int64_t stride,
                        int64_t q0, int o0) {
  VecF acc[kGemmCo][kNV];
  for (int o = 0; o < kGemmCo; ++o)
    for (int k = 0; k < kNV; ++k) acc[o][k] = vzero();
  for (int64_t c = 0; c < in_ch; ++c) {
    VecF x[kNV];
    for (int k = 0; k < kNV; ++k) x[k] = vload(vx + c * stride + q0 + k * kLanes);
    for (int o = 0; o < kGemmCo; ++o) {
      const VecF w = vset1(ux[c * kDirectCo + o0 + o]);
      for (int k = 0; k < kNV; ++k) acc[o][k] = vfma(w, x[k], acc[o][k]);
    }
  }
  for (int o = 0; o < kGemmCo; ++o)
    for (int k = 0; k < kNV; ++k) vstore(mx + (o0 + o) * stride + q0 + k * kLanes, acc[o][k]);
}

// M[xi][o][tile] = sum over c in order of U[xi][o][c] * V[xi][c][tile], for the 8 channels of
// one block (ublock: that block's weights of xi = 0; xi's are u_stride apart).
void winograd_gemm(float* m, const float* v, const float* ublock, int64_t u_stride,
                   int64_t in_ch, const WinogradGrid& t, int64_t positions) {
  const int64_t vectors = (positions + kLanes - 1) / kLanes;
  for (int xi = 0; xi < 16; ++xi) {
    const float* vx = v + xi * in_ch * t.stride;
    const float* ux = ublock + xi * u_stride;
    float* mx = m + xi * kDirectCo * t.stride;
    int64_t k0 = 0;
    for (; k0 + kGemmNV <= vectors; k0 += kGemmNV)
      for (int o0 = 0; o0 < kDirectCo; o0 += kGemmCo)
        winograd_gemm_tile<kGemmNV>(mx, vx, ux, in_ch, t.stride, k0 * kLanes, o0);
    for (int o0 = 0; o0 < kDirectCo; o0 += kGemmCo) {
      if (vectors - k0 == 2) winograd_gemm_tile<2>(mx, vx, ux, in_ch, t.stride, k0 * kLanes, o0);
      if (vectors - k0 == 1) winograd_gemm_tile<1>(mx, vx, ux, in_ch, t.stride, k0 * kLanes, o0);
    }
  }
}

// Stores the first `count` (<= kLanes) floats of v at dst and nothing past them: AVX-512 with a
// masked store; AVX2 in pieces of 8, 4, 2 and 1 (its masked store, vmaskmovps, is microcoded on
// AMD and was the output transform's hot spot).
void store_first(float* dst, VecF v, int64_t count) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << count) - 1), v);
#else
  if (count == 8) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  __m128 part = _mm256_castps256_ps128(v);
  if (count >= 4) {
    _mm_storeu_ps(dst, part);
    dst += 4, count -= 4, part = _mm256_extractf128_ps(v, 1);
  }
  if (count >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(dst), part);
    dst += 2, count -= 2, part = _mm_movehl_ps(part, part);
  }
  if (count == 1) _mm_store_ss(dst, part);
#endif
}

// a and b interleaved, a0 b0 a1 b1 ...: the first kLanes floats in `first`, the rest in `second`.
void interleave(VecF a, VecF b, VecF& first, VecF& second) {
#if defined(__AVX512F__)
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  first = _mm512_permutex2var_ps(a, lo, b);
  second = _mm512_permutex2var_ps(a, _mm512_add_epi32(lo, _mm512_set1_epi32(8)), b);
#else
  const __m256 l = _mm256_unpacklo_ps(a, b), h = _mm256_unpackhi_ps(a, b);
  first = _mm256_permute2f128_ps(l, h, 0x20);
  second = _mm256_permute2f128_ps(l, h, 0x31);
#endif
}

// The kLanes floats from `offset` (0, 8, 16 or 24) of the 2 * kLanes in first, second.
VecF window(VecF first, VecF second, int64_t offset) {
  if (offset == 0) return first;
  if (offset == kLanes) return second;
#if defined(__AVX512F__)
  const __m512i f = _mm512_castps_si512(first), s = _mm512_castps_si512(second);
  return _mm512_castsi512_ps(offset == 8 ? _mm512_alignr_epi32(s, f, 8)
                                         : _mm512_alignr_epi32(s, s, 8));
#else
  return first;  // AVX2 offsets are 0 and 8
#endif
}

// y (n_out, ho, wo) = A^T M A per tile, A^T = [1 1 1 0; 0 1 -1 -1], both output rows of a tile
// row from one pass over M (of each of a vector's `rows` tile rows), dropping the outputs of junk
// lanes, of tile rows past th, and of the last tile row and column that fall past an odd ho or wo.
void winograd_output(float* y, const float* m, int64_t n_out, const WinogradGrid& t) {
  const int64_t xi_row = 4 * kDirectCo * t.stride;  // from xi = 4a + k to 4(a + 1) + k
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < t.th_padded; i += t.rows)
      for (int64_t j0 = 0; j0 < t.tw; j0 += kLanes) {
        // Rows of A^T M, then their two columns: r0[k] = M[0][k] + M[1][k] + M[2][k],
        // r1[k] = M[1][k] - M[2][k] - M[3][k].
        VecF r0[4], r1[4];
        for (int k = 0; k < 4; ++k) {
          const float* mk = m + (k * kDirectCo + o) * t.stride + i * t.pitch + j0;
          const VecF m0 = vload(mk), m1 = vload(mk + xi_row), m2 = vload(mk + 2 * xi_row),
                     m3 = vload(mk + 3 * xi_row);
          r0[k] = vadd(vadd(m0, m1), m2);
          r1[k] = vsub(vsub(m1, m2), m3);
        }
        // Output rows 2i and 2i + 1, even and odd columns interleaved.
        VecF y0[2], y1[2];
        interleave(vadd(vadd(r0[0], r0[1]), r0[2]), vsub(vsub(r0[1], r0[2]), r0[3]), y0[0], y0[1]);
        interleave(vadd(vadd(r1[0], r1[1]), r1[2]), vsub(vsub(r1[1], r1[2]), r1[3]), y1[0], y1[1]);
        const int64_t n = std::min<int64_t>(kLanes, t.tw - j0);
        const int64_t count = 2 * n - (j0 + n == t.tw && t.wo % 2 == 1 ? 1 : 0);
        if (t.rows == 1) {
          float* dst = y + (o * t.ho + 2 * i) * t.wo + 2 * j0;
          for (const VecF* row : {y0, y1}) {
            store_first(dst, row[0], std::min<int64_t>(count, kLanes));
            if (count > kLanes) store_first(dst + kLanes, row[1], count - kLanes);
            if (2 * i + 1 == t.ho) break;
            dst += t.wo;
          }
          continue;
        }
        for (int64_t q = 0; q < t.rows && i + q < t.th; ++q) {  // count <= 2 * pitch <= kLanes
          float* dst = y + (o * t.ho + 2 * (i + q)) * t.wo;
          store_first(dst, window(y0[0], y0[1], 2 * t.pitch * q), count);
          if (2 * (i + q) + 1 < t.ho)
            store_first(dst + t.wo, window(y1[0], y1[1], 2 * t.pitch * q), count);
        }
      }
}

// y (N, out_ch, ho, wo) = stride-1 conv of x (N, in_ch, h, w) padded by (ph, pw), with weights
// from pack_winograd_weights, + bias (when given); types as direct_conv.
template <typename T>
void winograd_conv(T* y, const T* x, const std::vector<float>& u, const float* bias, int64_t n,
                   int64_t in_ch, int64_t h, int64_t w, int64_t out_ch, int64_t ph, int64_t pw) {
  const int64_t hp = h + 2 * ph, wp = w + 2 * pw;
  const WinogradGrid t = winograd_grid(hp - 2, wp - 2, in_ch);
  const DirectLayout l = direct_layout(hp, wp, 1);
  const int64_t blocks = (out_ch + kDirectCo - 1) / kDirectCo;
  // winograd_input reads the rows up to 2 * th_padded + 1 and then up to 2 * kLanes + 2 floats
  const int64_t src_size = in_ch * hp * wp + (2 * t.th_padded + 2 - hp) * wp + 4 * kLanes;
  const int64_t v_size = 16 * in_ch * t.stride;
  const int64_t u_stride = blocks * in_ch * kDirectCo;
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    float* src = scratch<float, 2>(src_size).data();
    std::fill(src, src + src_size, 0.0f);  // the padding stays zero from sample to sample
    float* v = scratch<float, 8>(v_size).data();
    std::fill(v, v + v_size, 0.0f);  // lanes past the last tile: finite, whatever they hold
    for (int64_t s0 = lo; s0 < hi; s0 += t.samples) {
      const int64_t count = std::min(t.samples, hi - s0);
      for (int64_t k = 0; k < count; ++k) {  // in order: junk lanes land in the next one's places
        prepare_direct_input<1>(src, x + (s0 + k) * in_ch * h * w, in_ch, h, w, ph, pw, 1, l);
        winograd_input(v + k * t.tiles, src, in_ch, hp, wp, t);
      }
      parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        float* m = scratch<float, 9>(16 * kDirectCo * t.stride).data();
        for (int64_t b = b0; b < b1; ++b) {
          winograd_gemm(m, v, u.data() + b * in_ch * kDirectCo, u_stride, in_ch, t,
                        count * t.tiles);
          const int64_t n_out = std::min(kDirectCo, out_ch - b * kDirectCo);
          for (int64_t k = 0; k < count; ++k)
            output_block(y + ((s0 + k) * out_ch + b * kDirectCo) * t.ho * t.wo, n_out, t.ho * t.wo,
                         bias ? bias + b * kDirectCo : nullptr,
                         [&](float* yb) { winograd_output(yb, m + k * t.tiles, n_out, t); });
        }
      });
    }
  });
}

// --- weight gradient of 3x3 convolutions (any stride and padding), vectorized over 16 output
// channels: dy of each sample is transposed to (position, channel), then for every output
// position one dy vector multiplies 9 taps of two input channels broadcast from the padded input
// (18 zmm accumulators; AVX2 takes the 16 channels as two vectors and two rows of 3 taps at a
// time: 12 ymm, wgrad_rows). Each weight is summed over positions in order, samples in at most
// kWeightChunks fixed chunks combined in order.
constexpr int64_t kWgradCo = 16;  // one CacheLine of output channels

bool use_direct_weight_grad(const Geometry& g, const Conv2dParams& p) {
  // Each chunk of samples zeroes and combines a weight-sized partial sum: below 64 output
  // positions per chunk (ResNet-50's last stages: 512x512x9 weights, 4 or 16 positions a
  // sample) that costs more than im2col + GEMM.
  const int64_t chunks = std::min(kWeightChunks, g.n);
  return g.kh == 3 && g.kw == 3 && p.dil_h == 1 && p.dil_w == 1 && p.groups == 1 &&
         g.n * g.ho * g.wo >= 64 * chunks;
}

// AVX-512: the 16 channels of `acc` and `dyt` in one vector, kCi input channels at a time.
template <int kCi>
void wgrad_channels(CacheLine* acc, const float* dyt, const float* xc, int64_t plane, int64_t wp,
                    int64_t ho, int64_t wo, int64_t sh, int64_t sw) {
  VecF a[kCi][9];
  for (int c = 0; c < kCi; ++c)
    for (int t = 0; t < 9; ++t) a[c][t] = vload(acc[c * 9 + t].v);
  for (int64_t oh = 0; oh < ho; ++oh)
    for (int64_t ow = 0; ow < wo; ++ow) {
      const VecF d = vload(dyt + (oh * wo + ow) * kWgradCo);
      const float* base = xc + oh * sh * wp + ow * sw;
      for (int c = 0; c < kCi; ++c)
        for (int ki = 0; ki < 3; ++ki)
          for (int kj = 0; kj < 3; ++kj)
            a[c][ki * 3 + kj] = vfma(d, vset1(base[c * plane + ki * wp + kj]), a[c][ki * 3 + kj]);
    }
  for (int c = 0; c < kCi; ++c)
    for (int t = 0; t < 9; ++t) vstore(acc[c * 9 + t].v, a[c][t]);
}

// AVX2: all 16 output channels (two vectors) of kSets rows of taps, row s being row ki of input
// channel c: its input row starts at xpad + xoff[s] (c * plane + ki * wp), its 3 accumulators at
// acc + aoff[s] (c * 9 + ki * 3). Two rows keep 12 accumulators busy and load 2 dy vectors + 6
// inputs for 12 FMAs, where 8 channels of one input channel's 9 taps load 1 + 9 for 9. Each
// accumulator sums the positions in the same order as wgrad_channels: the same bits.
template <int kSets>
void wgrad_rows(CacheLine* acc, const float* dyt, const float* xpad, const int64_t (&xoff)[kSets],
                const int64_t (&aoff)[kSets], int64_t wp, int64_t ho, int64_t wo, int64_t sh,
                int64_t sw) {
  constexpr int kHalves = kWgradCo / kLanes;
  VecF a[kHalves][kSets * 3];
  for (int h = 0; h < kHalves; ++h)
    for (int t = 0; t < kSets * 3; ++t) a[h][t] = vload(acc[aoff[t / 3] + t % 3].v + h * kLanes);
  for (int64_t oh = 0; oh < ho; ++oh)
    for (int64_t ow = 0; ow < wo; ++ow) {
      VecF d[kHalves];
      for (int h = 0; h < kHalves; ++h) d[h] = vload(dyt + (oh * wo + ow) * kWgradCo + h * kLanes);
      const float* base = xpad + oh * sh * wp + ow * sw;
      for (int r = 0; r < kSets; ++r)
        for (int kj = 0; kj < 3; ++kj) {
          const VecF x = vset1(base[xoff[r] + kj]);
          for (int h = 0; h < kHalves; ++h) a[h][r * 3 + kj] = vfma(d[h], x, a[h][r * 3 + kj]);
        }
    }
  for (int h = 0; h < kHalves; ++h)
    for (int t = 0; t < kSets * 3; ++t) vstore(acc[aoff[t / 3] + t % 3].v + h * kLanes, a[h][t]);
}

// wgrad_rows over every input channel: rows 0-1 of each, row 2 of two channels together. (The
// AVX-512 build takes two channels at a time instead.)
[[maybe_unused]] void wgrad_all_rows(CacheLine* acc, const float* dyt, const float* xpad,
                                     int64_t ci, int64_t plane, int64_t wp, int64_t ho,
                                     int64_t wo, int64_t sh, int64_t sw) {
  for (int64_t c = 0; c < ci; c += 2) {
    const int64_t x0 = c * plane, a0 = c * 9, x1 = x0 + plane, a1 = a0 + 9;
    wgrad_rows<2>(acc, dyt, xpad, {x0, x0 + wp}, {a0, a0 + 3}, wp, ho, wo, sh, sw);
    if (c + 1 == ci) {
      wgrad_rows<1>(acc, dyt, xpad, {x0 + 2 * wp}, {a0 + 6}, wp, ho, wo, sh, sw);
      break;
    }
    wgrad_rows<2>(acc, dyt, xpad, {x1, x1 + wp}, {a1, a1 + 3}, wp, ho, wo, sh, sw);
    wgrad_rows<2>(acc, dyt, xpad, {x0 + 2 * wp, x1 + 2 * wp}, {a0 + 6, a1 + 6}, wp, ho, wo, sh,
                  sw);
  }
}

// dst[q * 16 + o] = src[o * hw + q] for the nco (<= 16) rows of src, zero for rows past nco:
// 8x8 blocks transposed in registers, the last hw % 8 positions and partial blocks one by one.
void transpose_block(float* dst, const float* src, int64_t nco, int64_t hw) {
  int64_t q = 0;
  if (nco == kWgradCo)
    for (; q + 8 <= hw; q += 8)
      for (int64_t o0 = 0; o0 < kWgradCo; o0 += 8) {
        __m256 r[8], t[8];
        for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + (o0 + k) * hw + q);
        for (int k = 0; k < 8; k += 2) {
          t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
          t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
        }
        for (int k = 0; k < 8; k += 4) {
          r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
          r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
          r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
          r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        // r[k] (k < 4): rows o0..o0+3 at positions q + k (low half) and q + k + 4 (high half);
        // r[k + 4]: the same of rows o0+4..o0+7
        for (int k = 0; k < 4; ++k) {
          _mm256_storeu_ps(dst + (q + k) * kWgradCo + o0,
                           _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
          _mm256_storeu_ps(dst + (q + k + 4) * kWgradCo + o0,
                           _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
        }
      }
  for (; q < hw; ++q)
    for (int64_t o = 0; o < kWgradCo; ++o) dst[q * kWgradCo + o] = o < nco ? src[o * hw + q] : 0.0f;
}

#if defined(__AVX512F__)
// The bf16 weight gradient (AVX512_BF16): output positions q on the direct kernels' grid (width
// grid_w, so that consecutive positions read consecutive inputs at every tap, for stride 1 and
// 2), two at a time. dy goes to [q / 2][16 channels][q % 2] (pair_grads) and each vdpbf16ps adds
// the products of both positions of a channel pair's tap for 16 output channels into f32: twice
// the positions of an f32 FMA. Junk grid columns (ow >= wo) and the position past an odd last
// one carry dy = 0; the inputs they meet are finite unless the input holds an inf or NaN, whose
// gradient is not finite anyway.
// Each channel's dy goes to `grid` in grid order first (zero at junk positions), then as whole
// 32-bit words (two positions) to its place in every pair.
void pair_grads(Eigen::bfloat16* dst, const Eigen::bfloat16* dy, int64_t nco, int64_t ho,
                int64_t wo, int64_t gw, int64_t pairs) {
  Eigen::bfloat16* grid = scratch<Eigen::bfloat16, 13>(2 * pairs + gw).data();
  std::fill(grid, grid + 2 * pairs + gw, Eigen::bfloat16(0));
  for (int64_t o = 0; o < kWgradCo; ++o) {
    if (o < nco)
      for (int64_t oh = 0; oh < ho; ++oh) std::copy_n(dy + (o * ho + oh) * wo, wo, grid + oh * gw);
    else
      std::fill(grid, grid + 2 * pairs, Eigen::bfloat16(0));
    for (int64_t k = 0; k < pairs; ++k)
      std::memcpy(static_cast<void*>(dst + (k * kWgradCo + o) * 2), grid + 2 * k, 4);
  }
}

// acc[c][tap] (16 output channels) += sum over position pairs of dy x for kCi input channels of
// src (planes channel_size apart, as prepare_direct_input<1> lays them out).
template <int kCi>
__attribute__((target("avx512bf16"))) void wgrad_channels_bf16(CacheLine* acc,
                                                               const Eigen::bfloat16* dyp,
                                                               const Eigen::bfloat16* xc,
                                                               const DirectLayout& l,
                                                               int64_t pairs) {
  __m512 a[kCi][9];
  for (int c = 0; c < kCi; ++c)
    for (int t = 0; t < 9; ++t) a[c][t] = _mm512_load_ps(acc[c * 9 + t].v);
  for (int64_t k = 0; k < pairs; ++k) {
    const __m512bh d = (__m512bh)_mm512_loadu_si512(dyp + k * 2 * kWgradCo);
    for (int c = 0; c < kCi; ++c)
      for (int t = 0; t < 9; ++t) {
        uint32_t word;  // the inputs of positions 2k and 2k + 1 at tap t
        std::memcpy(&word, xc + c * l.channel_size + 2 * k + l.tap_offset[t], sizeof word);
        a[c][t] = _mm512_dpbf16_ps(a[c][t], (__m512bh)_mm512_set1_epi32(static_cast<int>(word)), d);
      }
  }
  for (int c = 0; c < kCi; ++c)
    for (int t = 0; t < 9; ++t) _mm512_store_ps(acc[c * 9 + t].v, a[c][t]);
}
#endif

// dw (f32) of x and dy in f32, or both in f16/bf16 (widened as they are copied; bf16 on a CPU
// with bf16 dot products at stride 1 or 2 through wgrad_channels_bf16 as it is).
template <typename T>
void direct_weight_grad(float* dw, const T* x, const T* dy, const Geometry& g,
                        const Conv2dParams& p) {
  const int64_t hp = g.h + 2 * p.pad_h, wp = g.w + 2 * p.pad_w, plane = hp * wp;
  const int64_t hw = g.ho * g.wo, blocks = (g.co + kWgradCo - 1) / kWgradCo;
  const int64_t chunks = std::min(kWeightChunks, g.n);
  // Per (chunk, block of 16 output channels): [ci][tap] vectors of 16 channels.
  // (each task zeroes its own part)
  CacheLine* partial = scratch<CacheLine, 3>(chunks * blocks * g.ci * 9).data();
  const bool pairs_of_positions =
      bf16_dot<T>() && p.stride_h == p.stride_w && (p.stride_h == 1 || p.stride_h == 2);
  const DirectLayout layout = direct_layout(hp, wp, pairs_of_positions ? p.stride_h : 1);
  [[maybe_unused]] const int64_t pairs = ((g.ho - 1) * layout.grid_w + g.wo + 1) / 2;
  // A task is one chunk of samples and a range of blocks: each sample's padded copy serves every
  // block of its task. With few chunks (small batches) each block is a task of its own, so the
  // threads still have work. Either way a (chunk, block) accumulator sums its samples in order.
  const int64_t per_task = chunks >= 8 ? blocks : 1;
  const int64_t ranges = (blocks + per_task - 1) / per_task;
  parallel_for(0, chunks * ranges, 1, [&](int64_t lo, int64_t hi) {
    float* xpad = nullptr;  // the f32 kernels' padded sample and transposed gradients
    float* dyt = nullptr;
    if (!pairs_of_positions) {
      xpad = scratch<float, 2>(g.ci * plane + kDirectSlack).data();
      std::fill(xpad, xpad + g.ci * plane + kDirectSlack, 0.0f);  // the padding stays zero
      dyt = scratch<CacheLine, 4>(hw).data()->v;
    }
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t chunk = task / ranges, b0 = task % ranges * per_task;
      const int64_t b1 = std::min(blocks, b0 + per_task);
      for (int64_t b = b0; b < b1; ++b) {
        CacheLine* acc = partial + (chunk * blocks + b) * g.ci * 9;
        std::fill(acc, acc + g.ci * 9, CacheLine{});
      }
      for (int64_t s = g.n * chunk / chunks; s < g.n * (chunk + 1) / chunks; ++s) {
#if defined(__AVX512F__)
        if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
          if (pairs_of_positions) {
            const int64_t src_size = g.ci * layout.channel_size + kDirectSlack;
            T* src = scratch<T, 2>(src_size).data();
            if (s == g.n * chunk / chunks) std::fill(src, src + src_size, T(0));  // padding: zero
            prepare_direct_input<1>(src, x + s * g.ci * g.h * g.w, g.ci, g.h, g.w, p.pad_h, p.pad_w,
                                    p.stride_h, layout);
            T* dyp = scratch<T, 12>(pairs * 2 * kWgradCo).data();
            for (int64_t b = b0; b < b1; ++b) {
              const int64_t co0 = b * kWgradCo, nco = std::min(kWgradCo, g.co - co0);
              CacheLine* acc = partial + (chunk * blocks + b) * g.ci * 9;
              pair_grads(dyp, dy + (s * g.co + co0) * hw, nco, g.ho, g.wo, layout.grid_w, pairs);
              int64_t c = 0;
              for (; c + 2 <= g.ci; c += 2)
                wgrad_channels_bf16<2>(acc + c * 9, dyp, src + c * layout.channel_size, layout,
                                       pairs);
              for (; c < g.ci; ++c)
                wgrad_channels_bf16<1>(acc + c * 9, dyp, src + c * layout.channel_size, layout,
                                       pairs);
            }
            continue;
          }
        }
#endif
        prepare_direct_input<1>(xpad, x + s * g.ci * g.h * g.w, g.ci, g.h, g.w, p.pad_h, p.pad_w, 1,
                                layout);
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t co0 = b * kWgradCo, nco = std::min(kWgradCo, g.co - co0);
          CacheLine* acc = partial + (chunk * blocks + b) * g.ci * 9;
          // dy (co0..co0+16, positions) -> dyt (positions, 16), zero for channels past co
          const T* dys = dy + (s * g.co + co0) * hw;
          if constexpr (std::is_same_v<T, float>) {
            transpose_block(dyt, dys, nco, hw);
          } else {
            float* wide = scratch<float, 11>(nco * hw).data();
            widen_block(wide, dys, 1, nco * hw);
            transpose_block(dyt, wide, nco, hw);
          }
          if constexpr (kLanes == 8) {
            wgrad_all_rows(acc, dyt, xpad, g.ci, plane, wp, g.ho, g.wo, p.stride_h, p.stride_w);
          } else {  // two input channels at a time: 18 of the 32 zmm registers
            int64_t c = 0;
            for (; c + 2 <= g.ci; c += 2)
              wgrad_channels<2>(acc + c * 9, dyt, xpad + c * plane, plane, wp, g.ho, g.wo,
                                p.stride_h, p.stride_w);
            for (; c < g.ci; ++c)
              wgrad_channels<1>(acc + c * 9, dyt, xpad + c * plane, plane, wp, g.ho, g.wo,
                                p.stride_h, p.stride_w);
          }
        }
      }
    }
  });
  // The chunks' sums in order, chunk 0 + 1 + ..., added a whole chunk at a time (sequential:
  // a chunk of a wide layer's accumulators is megabytes) into chunk 0's.
  const int64_t per_chunk = blocks * g.ci * 9;
  for (int64_t ch = 1; ch < chunks; ++ch)
    for (int64_t i = 0; i < per_chunk; ++i)
      for (int64_t o = 0; o < kWgradCo; ++o) partial[i].v[o] += partial[ch * per_chunk + i].v[o];
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c = 0; c < g.ci; ++c)
      for (int64_t t = 0; t < 9; ++t)
        for (int64_t o = 0; o < std::min(kWgradCo, g.co - b * kWgradCo); ++o)
          dw[((b * kWgradCo + o) * g.ci + c) * 9 + t] = partial[(b * g.ci + c) * 9 + t].v[o];
}
#endif

}  // namespace

#if defined(TANDEM_DIRECT_CONV)
namespace {

// The direct kernels' weights (and bias) in f32, whatever the tensors' dtype: they are small.
const float* f32_data(const Tensor& t, Tensor& keep) {
  if (!t.defined()) return nullptr;
  keep = contiguous_as(t, DType::f32);
  return ptr<const float>(keep);
}

// y = the 3x3 convolution of x that g and p describe (stride 1 or 2) with f32 weights w, + bias
// when given. `transposed`: w is (g.ci, g.co, 3, 3) and is flipped and transposed (the input
// gradient's case). x and y are of T: f32, or f16/bf16 read as they are (each kernel widens the
// input it copies anyway and rounds its output block by block while it is in cache). bf16 runs
// on vdpbf16ps where the CPU has it; otherwise Winograd (stride 1, where it pays) or the f32
// direct kernel.
template <typename T>
void conv3x3(T* y, const T* x, const float* w, bool transposed, const float* bias,
             const Geometry& g, const Conv2dParams& p) {
  const int64_t wco = transposed ? g.ci : g.co, wci = transposed ? g.co : g.ci;  // w's shape
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (bf16_dot<T>()) {
      auto wp = pack_direct_weights<uint32_t>(w, wco, wci, transposed);
      return direct_conv(y, x, wp, bias, g.n, g.ci, g.h, g.w, g.co, p.pad_h, p.pad_w, p.stride_h);
    }
  }
#endif
  if (p.stride_h == 1 && use_winograd(g.ci, g.ho, g.wo)) {
    auto u = pack_winograd_weights(w, wco, wci, transposed);
    winograd_conv(y, x, u, bias, g.n, g.ci, g.h, g.w, g.co, p.pad_h, p.pad_w);
  } else {
    auto wp = pack_direct_weights<float>(w, wco, wci, transposed);
    direct_conv(y, x, wp, bias, g.n, g.ci, g.h, g.w, g.co, p.pad_h, p.pad_w, p.stride_h);
  }
}

template <typename T>
void direct_forward(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                    const Geometry& g, const Conv2dParams& p) {
  Tensor w32, b32;
  conv3x3(ptr<T>(out), ptr<const T>(in), f32_data(weight, w32), false, f32_data(bias, b32), g, p);
}

// The weight gradient and, for stride 1, the input gradient of a 3x3 convolution; returns
// whether grad_in was computed (else the caller's col2im path does it).
template <typename T>
bool direct_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                     const Tensor& grad_in, const Tensor& grad_weight, const Geometry& g,
                     const Conv2dParams& p) {
  // The input gradient of a stride-1 3x3 convolution is a convolution of the output gradient
  // with the flipped, transposed weights and padding 2 - pad: the direct kernels run it. For
  // stride 2 it is a transposed convolution: col2im in backward_impl.
  const Geometry gt{g.n, g.co, g.ho, g.wo, g.ci, 3, 3, g.h, g.w, 1};
  const Conv2dParams pt{1, 1, 2 - p.pad_h, 2 - p.pad_w, 1, 1, 1};
  const bool direct_input =
      grad_in.defined() && p.stride_h == 1 && use_direct(g, p) && use_direct(gt, pt);
  if (direct_input) {
    Tensor w32;
    conv3x3(ptr<T>(grad_in), ptr<const T>(grad_out), f32_data(weight, w32), true, nullptr, gt, pt);
  }
  if (grad_weight.defined()) {
    const Tensor dw = grad_weight.dtype() == DType::f32
                          ? grad_weight
                          : make_tensor(grad_weight.shape(), DType::f32, grad_weight.device());
    direct_weight_grad(ptr<float>(dw), ptr<const T>(in), ptr<const T>(grad_out), g, p);
    if (!dw.is_same(grad_weight)) copy(grad_weight, dw);
  }
  return direct_input;
}

template <typename F>
void with_narrow_type(DType dtype, const F& f) {
  if (dtype == DType::bf16)
    f(Eigen::bfloat16{});
  else
    f(Eigen::half{});
}

}  // namespace
#endif

void conv2d_forward(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
#if defined(TANDEM_DIRECT_CONV)
  const Geometry g = geometry(in, weight, out, p.groups);
  if (in.dtype() == DType::f32 && use_direct(g, p))
    return direct_forward<float>(out, in, weight, bias, g, p);
#endif
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "conv2d (cpu)",
                    [&](auto t) { forward_impl<decltype(t)>(out, in, weight, bias, p); });
}

void conv2d_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                     const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                     const Conv2dParams& p) {
#if defined(TANDEM_DIRECT_CONV)
  const Geometry g = geometry(in, weight, grad_out, p.groups);
  if (in.dtype() == DType::f32 && use_direct_weight_grad(g, p)) {
    const bool direct_input =
        direct_backward<float>(grad_out, in, weight, grad_in, grad_weight, g, p);
    backward_impl<float>(grad_out, in, weight, direct_input ? Tensor() : grad_in, Tensor(),
                         grad_bias, p);
    return;
  }
#endif
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "conv2d_backward (cpu)", [&](auto t) {
    backward_impl<decltype(t)>(grad_out, in, weight, grad_in, grad_weight, grad_bias, p);
  });
}

#if defined(__AVX512F__)
namespace {
// Whether the im2col path takes these tensors as they are: bf16 in row-major order on a CPU with
// bf16 dot products (the bf16 GEMM).
bool im2col_bf16(std::initializer_list<const Tensor*> tensors) {
  return (*tensors.begin())->dtype() == DType::bf16 && cpu_bf16_dot() && reads_narrow(tensors);
}
}  // namespace
#endif

// The registered entries. f16/bf16 in row-major order reach the direct kernels as they are where
// those apply, and bf16 the im2col path on the bf16 GEMM where the CPU has one; the rest goes
// through f32 row-major copies (through_f32_row_major).
void conv2d_forward_entry(const Tensor& out, const Tensor& in, const Tensor& weight,
                          const Tensor& bias, const Conv2dParams& p) {
#if defined(TANDEM_DIRECT_CONV)
  const Geometry g = geometry(in, weight, out, p.groups);
  if (reads_narrow({&in, &out, &weight, &bias}) && use_direct(g, p))
    return with_narrow_type(
        in.dtype(), [&](auto t) { direct_forward<decltype(t)>(out, in, weight, bias, g, p); });
#endif
#if defined(__AVX512F__)
  if (im2col_bf16({&in, &out, &weight, &bias}))
    return forward_impl<Eigen::bfloat16>(out, in, weight, bias, p);
#endif
  through_f32_row_major<&conv2d_forward, 0b1>(out, in, weight, bias, p);
}

void conv2d_backward_entry(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                           const Tensor& grad_in, const Tensor& grad_weight,
                           const Tensor& grad_bias, const Conv2dParams& p) {
  Tensor rest_in = grad_in, rest_weight = grad_weight;
#if defined(TANDEM_DIRECT_CONV)
  const Geometry g = geometry(in, weight, grad_out, p.groups);
  if (reads_narrow({&in, &grad_out, &weight, &grad_in, &grad_weight, &grad_bias}) &&
      use_direct_weight_grad(g, p)) {
    with_narrow_type(in.dtype(), [&](auto t) {
      if (direct_backward<decltype(t)>(grad_out, in, weight, grad_in, grad_weight, g, p))
        rest_in = Tensor();
    });
    rest_weight = Tensor();
    if (!rest_in.defined()) {  // the bias's gradient needs only grad_out, as it is
      if (grad_bias.defined())
        with_narrow_type(in.dtype(), [&](auto t) { bias_grad<decltype(t)>(grad_bias, grad_out); });
      return;
    }
  }
#endif
#if defined(__AVX512F__)
  if (im2col_bf16({&in, &grad_out, &weight, &grad_in, &grad_weight, &grad_bias}))
    return backward_impl<Eigen::bfloat16>(grad_out, in, weight, rest_in, rest_weight, grad_bias, p);
#endif
  through_f32_row_major<&conv2d_backward, 0b111000>(grad_out, in, weight, rest_in, rest_weight,
                                                    grad_bias, p);
}

TANDEM_REGISTER_CPU(conv2d_forward, conv2d_forward_entry);
TANDEM_REGISTER_CPU(conv2d_backward, conv2d_backward_entry);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
