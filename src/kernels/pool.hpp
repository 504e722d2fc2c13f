// Pooling's index math, written once for every backend (TANDEM_HD: g++ and nvcc alike): where a
// plane's map lies in either layout, and the value of one output (forward) or of one input's
// gradient (backward, gathered from the outputs whose window covers it). A backend runs over the
// flat elements of the tensor it writes, in memory order, and calls these; every sum runs over
// rising output or window positions, so all backends round alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "divider.hpp"
#include "kernels.hpp"
#include "tandem/core/macros.hpp"

namespace tandem::kernels::pool {

/// One call's maps: N * C planes, h x w in and ho x wo out, row-major (NCHW) or channels-last
/// (NHWC).
struct Geometry {
  int64_t c, h, w, ho, wo;
  bool channels_last;
};

/// The geometry of a call from its input and output (or grad_in and grad_out): 4-d, laid out
/// as the first one's suggest_memory_format() says (the op gives them all one layout).
inline Geometry geometry(const Tensor& in, const Tensor& out) {
  return {in.size(1), in.size(2), in.size(3), out.size(2), out.size(3),
          in.suggest_memory_format() == MemoryFormat::ChannelsLast};
}

/// Where an element lies: image n, its channel, row y and column x of the map.
struct Site {
  int64_t n, channel, y, x;
};

/// The Site of the i-th element in memory of a tensor of rows x cols maps, for one call: built
/// on the host, read per element. Three divisions per element (by cols, rows and channels, in
/// memory order): below 2^31 elements by magic numbers (FastDivider; a GPU divides 64-bit
/// integers in software), else in 64 bits.
class SiteOf {
 public:
  SiteOf(const Geometry& g, int64_t rows, int64_t cols, int64_t count)
      : channels_last_(g.channels_last),
        narrow_(count > 0 && count < (int64_t{1} << 31)) {  // count > 0: no divisor is 0
    const int64_t inner_first[3] = {g.channels_last ? g.c : cols, g.channels_last ? cols : rows,
                                    g.channels_last ? rows : g.c};
    for (int k = 0; k < 3; ++k) {
      divisor_[k] = inner_first[k];
      if (narrow_) divider_[k] = FastDivider(static_cast<uint32_t>(inner_first[k]));
    }
  }

  TANDEM_HD Site operator()(int64_t i) const {
    int64_t r[3];
    for (int k = 0; k < 3; ++k) {
      const int64_t q = narrow_ ? divider_[k].div(static_cast<uint32_t>(i)) : i / divisor_[k];
      r[k] = i - q * divisor_[k];
      i = q;
    }
    return channels_last_ ? Site{i, r[0], r[2], r[1]} : Site{i, r[2], r[1], r[0]};
  }

 private:
  int64_t divisor_[3];
  FastDivider divider_[3];
  bool channels_last_, narrow_;
};

/// Where site s's plane of rows x cols lies: element (y, x) at base + (y * cols + x) * step.
struct Plane {
  int64_t base, step;
};
TANDEM_HD Plane plane_of(const Geometry& g, const Site& s, int64_t rows, int64_t cols) {
  if (!g.channels_last) return {(s.n * g.c + s.channel) * rows * cols, 1};
  return {s.n * rows * cols * g.c + s.channel, g.c};
}

/// a / b for 0 <= a and 0 < b: in 32 bits where both fit (a GPU divides 64-bit integers in
/// software, a hundred instructions; pooling's indices fit in all but huge maps).
TANDEM_HD int64_t div_nonneg(int64_t a, int64_t b) {
  if ((a | b) < (int64_t{1} << 31))
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  return a / b;
}

// torch's adaptive windows: [floor(i * in / out), ceil((i + 1) * in / out)).
TANDEM_HD int64_t adaptive_start(int64_t i, int64_t in, int64_t out) {
  return div_nonneg(i * in, out);
}
TANDEM_HD int64_t adaptive_end(int64_t i, int64_t in, int64_t out) {
  return div_nonneg((i + 1) * in + out - 1, out);
}

/// The kernel offsets [lo, hi) of a window starting at input `start` whose input
/// start + k * dil lies in [0, size): in constant time, however large the kernel (a loop over
/// its offsets would take as long as the kernel is wide, and hang for a huge one).
struct TapRange {
  int64_t lo, hi;
};
TANDEM_HD TapRange tap_range(int64_t start, int64_t k_size, int64_t dil, int64_t size) {
  const int64_t lo = start >= 0 ? 0 : (dil == 1 ? -start : div_nonneg(-start + dil - 1, dil));
  const int64_t last = size - 1 - start;  // k * dil <= last
  int64_t hi = last < 0 ? 0 : (dil == 1 ? last : div_nonneg(last, dil)) + 1;
  if (hi > k_size) hi = k_size;
  return {lo < hi ? lo : hi, hi};
}

/// The outputs o (rising) whose window, at kernel offset k, covers input i:
/// o * stride - pad + k * dil == i.
template <typename F>
TANDEM_HD void covering(int64_t i, int64_t k_size, int64_t stride, int64_t pad, int64_t dil,
                        int64_t outputs, F&& f) {
  if (dil == 1) {
    // The multiples o * stride in [i + pad - (k_size - 1), i + pad]: two divisions, not two per
    // kernel offset (a GPU divides 64-bit integers in software). The same outputs, in order.
    const int64_t hi = i + pad, lo = hi - (k_size - 1), top = div_nonneg(hi, stride);
    const int64_t last = top < outputs - 1 ? top : outputs - 1;
    for (int64_t o = lo <= 0 ? 0 : div_nonneg(lo + stride - 1, stride); o <= last; ++o) f(o);
    return;
  }
  // Only the offsets k with 0 <= i + pad - k * dil < outputs * stride can name an output.
  const int64_t reach = i + pad - outputs * stride;
  const int64_t k_lo = reach < 0 ? 0 : reach / dil + 1;
  const int64_t k_top = (i + pad) / dil;
  for (int64_t k = (k_top < k_size - 1 ? k_top : k_size - 1); k >= k_lo; --k) {
    const int64_t t = i + pad - k * dil;
    if (t < 0 || t % stride != 0) continue;
    const int64_t o = t / stride;
    if (o < outputs) f(o);
  }
}

// Each function below reads a map through `load` (a T to the compute type C).

/// The max of output (plane, oh, ow)'s window and, in `index`, its plane-local input index
/// ih * w + iw: the first max in scan order, a NaN wins (the last one), as PyTorch's; -inf and
/// index -1 for a window over padding only. For V lanes at once: the windows of V neighbouring
/// channels of a channels-last map (o names the first; V = 1: one map of either layout), read
/// by load(x, offset, values), which loads x[offset + k] for k < V into values[k].
template <int V, typename C, typename T, typename LoadV>
TANDEM_HD void max_windows(const T* x, const Geometry& g, const Pool2dParams& p, Site o,
                           C (&best)[V], int64_t (&index)[V], LoadV load) {
  const Plane in = plane_of(g, o, g.h, g.w);
  for (int k = 0; k < V; ++k) {
    best[k] = C(0);
    index[k] = -1;
  }
  const int64_t y0 = o.y * p.stride_h - p.pad_h, x0 = o.x * p.stride_w - p.pad_w;
  const TapRange rows = tap_range(y0, p.kh, p.dil_h, g.h), cols = tap_range(x0, p.kw, p.dil_w, g.w);
  for (int64_t ki = rows.lo; ki < rows.hi; ++ki) {
    const int64_t ih = y0 + ki * p.dil_h;
    for (int64_t kj = cols.lo; kj < cols.hi; ++kj) {
      const int64_t iw = x0 + kj * p.dil_w;
      C v[V];
      load(x, in.base + (ih * g.w + iw) * in.step, v);
      for (int k = 0; k < V; ++k)
        if (index[k] < 0 || v[k] > best[k] || v[k] != v[k]) {
          best[k] = v[k];
          index[k] = ih * g.w + iw;
        }
    }
  }
  for (int k = 0; k < V; ++k)
    if (index[k] < 0) best[k] = -C(INFINITY);
}

/// One lane of max_windows, through load(value), which converts one T to C.
template <typename C, typename T, typename Load>
TANDEM_HD C max_window(const T* x, const Geometry& g, const Pool2dParams& p, Site o,
                       int64_t& index, Load load) {
  C best[1];
  int64_t at[1];
  max_windows<1, C>(x, g, p, o, best, at,
                    [&](const T* px, int64_t offset, C(&v)[1]) { v[0] = load(px[offset]); });
  index = at[0];
  return best[0];
}

/// Input (plane, ih, iw)'s gradient: the outputs' gradients whose index names it; for V lanes
/// at once as max_windows (load reads dy).
template <int V, typename C, typename T, typename LoadV>
TANDEM_HD void max_gradients(const T* dy, const int64_t* indices, const Geometry& g,
                             const Pool2dParams& p, Site i, C (&s)[V], LoadV load) {
  const int64_t here = i.y * g.w + i.x;
  const Plane out = plane_of(g, i, g.ho, g.wo);
  for (int k = 0; k < V; ++k) s[k] = C(0);
  covering(i.y, p.kh, p.stride_h, p.pad_h, p.dil_h, g.ho, [&](int64_t oh) {
    covering(i.x, p.kw, p.stride_w, p.pad_w, p.dil_w, g.wo, [&](int64_t ow) {
      const int64_t o = out.base + (oh * g.wo + ow) * out.step;
      C v[V];
      load(dy, o, v);
      for (int k = 0; k < V; ++k)
        if (indices[o + k] == here) s[k] += v[k];
    });
  });
}

template <typename C, typename T, typename Load>
TANDEM_HD C max_gradient(const T* dy, const int64_t* indices, const Geometry& g,
                         const Pool2dParams& p, Site i, Load load) {
  C s[1];
  max_gradients<1, C>(dy, indices, g, p, i, s,
                      [&](const T* pd, int64_t offset, C(&v)[1]) { v[0] = load(pd[offset]); });
  return s[0];
}

/// The number average pooling divides output (oh, ow)'s window sum by, as torch's
/// avg_pool2d: divisor_override where given; else the window's extent within the padded input
/// (count_include_pad: kh * kw but where a ceil_mode window hangs past the padding) or within
/// the input (1 for a window of padding alone, whose sum is 0).
TANDEM_HD int64_t avg_divisor(const Geometry& g, const Pool2dParams& p, int64_t oh, int64_t ow) {
  if (p.divisor_override != 0) return p.divisor_override;
  const int64_t y0 = oh * p.stride_h - p.pad_h, x0 = ow * p.stride_w - p.pad_w;
  int64_t y1 = y0 + p.kh, x1 = x0 + p.kw;
  if (y1 > g.h + p.pad_h) y1 = g.h + p.pad_h;
  if (x1 > g.w + p.pad_w) x1 = g.w + p.pad_w;
  if (p.count_include_pad) return (y1 - y0) * (x1 - x0);
  const int64_t rows = (y1 < g.h ? y1 : g.h) - (y0 > 0 ? y0 : 0);
  const int64_t cols = (x1 < g.w ? x1 : g.w) - (x0 > 0 ? x0 : 0);
  return rows > 0 && cols > 0 ? rows * cols : 1;
}

/// 1 / the divisor every window of a call shares, or 0 where they differ: divisor_override, or
/// padding counted and no ceil_mode window hanging past it (torch's default, where the divisor
/// is kh * kw). A backend computes it once per call: a division per output took avg_pool2d
/// from 0.96x to 1.17x PyTorch's time.
template <typename C>
TANDEM_HD C uniform_inverse(const Geometry& g, const Pool2dParams& p) {
  if (p.divisor_override != 0) return C(1) / C(p.divisor_override);
  const bool inside = (g.ho - 1) * p.stride_h - p.pad_h + p.kh <= g.h + p.pad_h &&
                      (g.wo - 1) * p.stride_w - p.pad_w + p.kw <= g.w + p.pad_w;
  return p.count_include_pad && inside ? C(1) / (C(p.kh) * C(p.kw)) : C(0);
}

/// The scale of output (oh, ow)'s window sum: `inv` (uniform_inverse) where not 0.
template <typename C>
TANDEM_HD C avg_scale(const Geometry& g, const Pool2dParams& p, C inv, int64_t oh, int64_t ow) {
  return inv != C(0) ? inv : C(1) / C(avg_divisor(g, p, oh, ow));
}

/// The mean of output (plane, oh, ow)'s window: its sum times avg_scale.
template <typename C, typename T, typename Load>
TANDEM_HD C avg_window(const T* x, const Geometry& g, const Pool2dParams& p, C inv, Site o,
                       Load load) {
  const Plane in = plane_of(g, o, g.h, g.w);
  C s = C(0);
  const int64_t y0 = o.y * p.stride_h - p.pad_h, x0 = o.x * p.stride_w - p.pad_w;
  const TapRange rows = tap_range(y0, p.kh, 1, g.h), cols = tap_range(x0, p.kw, 1, g.w);
  for (int64_t ih = y0 + rows.lo; ih < y0 + rows.hi; ++ih)
    for (int64_t iw = x0 + cols.lo; iw < x0 + cols.hi; ++iw)
      s += load(x[in.base + (ih * g.w + iw) * in.step]);
  return s * avg_scale(g, p, inv, o.y, o.x);
}

template <typename C, typename T, typename Load>
TANDEM_HD C avg_gradient(const T* dy, const Geometry& g, const Pool2dParams& p, C inv, Site i,
                         Load load) {
  const Plane out = plane_of(g, i, g.ho, g.wo);
  C s = C(0);
  covering(i.y, p.kh, p.stride_h, p.pad_h, 1, g.ho, [&](int64_t oh) {
    covering(i.x, p.kw, p.stride_w, p.pad_w, 1, g.wo, [&](int64_t ow) {
      s += load(dy[out.base + (oh * g.wo + ow) * out.step]) * avg_scale(g, p, inv, oh, ow);
    });
  });
  return s;
}

template <typename C, typename T, typename Load>
TANDEM_HD C adaptive_avg_window(const T* x, const Geometry& g, Site o, Load load) {
  const int64_t h0 = adaptive_start(o.y, g.h, g.ho), h1 = adaptive_end(o.y, g.h, g.ho);
  const int64_t w0 = adaptive_start(o.x, g.w, g.wo), w1 = adaptive_end(o.x, g.w, g.wo);
  const Plane in = plane_of(g, o, g.h, g.w);
  C s = C(0);
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) s += load(x[in.base + (ih * g.w + iw) * in.step]);
  return s / C((h1 - h0) * (w1 - w0));
}

/// The outputs whose adaptive window holds input row i lie in [floor(i * out / in),
/// ceil((i + 1) * out / in)); the window test stays, so the range only has to contain them.
template <typename C, typename T, typename Load>
TANDEM_HD C adaptive_avg_gradient(const T* dy, const Geometry& g, Site i, Load load) {
  const Plane out = plane_of(g, i, g.ho, g.wo);
  C s = C(0);
  const int64_t oh_end = adaptive_end(i.y, g.ho, g.h), ow_end = adaptive_end(i.x, g.wo, g.w);
  for (int64_t oh = adaptive_start(i.y, g.ho, g.h); oh < oh_end && oh < g.ho; ++oh) {
    const int64_t h0 = adaptive_start(oh, g.h, g.ho), h1 = adaptive_end(oh, g.h, g.ho);
    if (i.y < h0 || i.y >= h1) continue;
    for (int64_t ow = adaptive_start(i.x, g.wo, g.w); ow < ow_end && ow < g.wo; ++ow) {
      const int64_t w0 = adaptive_start(ow, g.w, g.wo), w1 = adaptive_end(ow, g.w, g.wo);
      if (i.x >= w0 && i.x < w1)
        s += load(dy[out.base + (oh * g.wo + ow) * out.step]) / C((h1 - h0) * (w1 - w0));
    }
  }
  return s;
}

}  // namespace tandem::kernels::pool
