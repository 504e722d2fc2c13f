// CPU pooling over contiguous (planes, H, W) tensors, parallel over planes.
#include <cmath>
#include <limits>

#include "loops.hpp"
#include "kernels.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

struct Planes {
  int64_t planes, h, w, ho, wo;
};
Planes planes_of(const Tensor& in, const Tensor& out) {
  int64_t nd = in.dim();
  return {in.numel() / (in.size(nd - 2) * in.size(nd - 1)), in.size(nd - 2), in.size(nd - 1),
          out.size(nd - 2), out.size(nd - 1)};
}

template <typename F>
void for_each_plane(int64_t planes, int64_t plane_size, F&& f) {
  parallel_for(0, planes, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(plane_size, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p) f(p);
               });
}

// torch's adaptive pooling windows: [floor(i * in / out), ceil((i + 1) * in / out))
inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace

void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& in,
                        const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "max_pool2d (cpu)", [&](auto t) {
    using T = decltype(t);
    Planes g = planes_of(in, out);
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    int64_t* idx = ptr<int64_t>(indices);
    for_each_plane(g.planes, g.h * g.w, [&](int64_t pl) {
      const T* xp = x + pl * g.h * g.w;
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_i = -1;
          // A NaN is the max, and of several the last in scan order: PyTorch's rule.
          for (int64_t ki = 0; ki < p.kh; ++ki) {
            int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t kj = 0; kj < p.kw; ++kj) {
              int64_t iw = ow * p.stride_w - p.pad_w + kj * p.dil_w;
              if (iw < 0 || iw >= g.w) continue;
              T v = xp[ih * g.w + iw];
              if (best_i < 0 || v > best || std::isnan(v)) {
                best = v;
                best_i = ih * g.w + iw;
              }
            }
          }
          int64_t o = (pl * g.ho + oh) * g.wo + ow;
          y[o] = best;
          idx[o] = best_i;
        }
    });
  });
}

void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices,
                         const Pool2dParams&) {
  dispatch_dtype<DTypeSet::wide>(grad_in.dtype(), "max_pool2d_backward (cpu)", [&](auto t) {
    using T = decltype(t);
    Planes g = planes_of(grad_in, grad_out);
    T* dx = ptr<T>(grad_in);
    const T* dy = ptr<const T>(grad_out);
    const int64_t* idx = ptr<const int64_t>(indices);
    for_each_plane(g.planes, g.h * g.w, [&](int64_t pl) {
      T* dxp = dx + pl * g.h * g.w;
      std::fill(dxp, dxp + g.h * g.w, T(0));
      for (int64_t o = pl * g.ho * g.wo; o < (pl + 1) * g.ho * g.wo; ++o)
        if (idx[o] >= 0) dxp[idx[o]] += dy[o];
    });
  });
}

void avg_pool2d_forward(const Tensor& out, const Tensor& in, const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "avg_pool2d (cpu)", [&](auto t) {
    using T = decltype(t);
    Planes g = planes_of(in, out);
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    const T inv = T(1) / T(p.kh * p.kw);  // count_include_pad: the divisor is the window size
    for_each_plane(g.planes, g.h * g.w, [&](int64_t pl) {
      const T* xp = x + pl * g.h * g.w;
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          T s = 0;
          for (int64_t ki = 0; ki < p.kh; ++ki) {
            int64_t ih = oh * p.stride_h - p.pad_h + ki;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t kj = 0; kj < p.kw; ++kj) {
              int64_t iw = ow * p.stride_w - p.pad_w + kj;
              if (iw >= 0 && iw < g.w) s += xp[ih * g.w + iw];
            }
          }
          y[(pl * g.ho + oh) * g.wo + ow] = s * inv;
        }
    });
  });
}

void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(grad_in.dtype(), "avg_pool2d_backward (cpu)", [&](auto t) {
    using T = decltype(t);
    Planes g = planes_of(grad_in, grad_out);
    T* dx = ptr<T>(grad_in);
    const T* dy = ptr<const T>(grad_out);
    const T inv = T(1) / T(p.kh * p.kw);
    for_each_plane(g.planes, g.h * g.w, [&](int64_t pl) {
      T* dxp = dx + pl * g.h * g.w;
      std::fill(dxp, dxp + g.h * g.w, T(0));
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          T v = dy[(pl * g.ho + oh) * g.wo + ow] * inv;
          for (int64_t ki = 0; ki < p.kh; ++ki) {
            int64_t ih = oh * p.stride_h - p.pad_h + ki;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t kj = 0; kj < p.kw; ++kj) {
              int64_t iw = ow * p.stride_w - p.pad_w + kj;
              if (iw >= 0 && iw < g.w) dxp[ih * g.w + iw] += v;
            }
          }
        }
    });
  });
}

void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& in) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "adaptive_avg_pool2d (cpu)", [&](auto t) {
    using T = decltype(t);
    Planes g = planes_of(in, out);
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    for_each_plane(g.planes, g.h * g.w, [&](int64_t pl) {
      const T* xp = x + pl * g.h * g.w;
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        int64_t h0 = adaptive_start(oh, g.h, g.ho), h1 = adaptive_end(oh, g.h, g.ho);
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          int64_t w0 = adaptive_start(ow, g.w, g.wo), w1 = adaptive_end(ow, g.w, g.wo);
          T s = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) s += xp[ih * g.w + iw];
          y[(pl * g.ho + oh) * g.wo + ow] = s / T((h1 - h0) * (w1 - w0));
        }
      }
    });
  });
}

void adaptive_avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out) {
  dispatch_dtype<DTypeSet::wide>(grad_in.dtype(), "adaptive_avg_pool2d_backward (cpu)", [&](auto t) {
    using T = decltype(t);
    Planes g = planes_of(grad_in, grad_out);
    T* dx = ptr<T>(grad_in);
    const T* dy = ptr<const T>(grad_out);
    for_each_plane(g.planes, g.h * g.w, [&](int64_t pl) {
      T* dxp = dx + pl * g.h * g.w;
      std::fill(dxp, dxp + g.h * g.w, T(0));
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        int64_t h0 = adaptive_start(oh, g.h, g.ho), h1 = adaptive_end(oh, g.h, g.ho);
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          int64_t w0 = adaptive_start(ow, g.w, g.wo), w1 = adaptive_end(ow, g.w, g.wo);
          T v = dy[(pl * g.ho + oh) * g.wo + ow] / T((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) dxp[ih * g.w + iw] += v;
        }
      }
    });
  });
}

TANDEM_REGISTER_CPU(max_pool2d_forward, (through_f32<&max_pool2d_forward, 0b1>));
TANDEM_REGISTER_CPU(max_pool2d_backward, (through_f32<&max_pool2d_backward, 0b1>));
TANDEM_REGISTER_CPU(avg_pool2d_forward, (through_f32<&avg_pool2d_forward, 0b1>));
TANDEM_REGISTER_CPU(avg_pool2d_backward, (through_f32<&avg_pool2d_backward, 0b1>));
TANDEM_REGISTER_CPU(adaptive_avg_pool2d_forward, (through_f32<&adaptive_avg_pool2d_forward, 0b1>));
TANDEM_REGISTER_CPU(adaptive_avg_pool2d_backward,
                    (through_f32<&adaptive_avg_pool2d_backward, 0b1>));

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
