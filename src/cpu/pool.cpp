// CPU pooling over (N, C, H, W) tensors, row-major or channels-last: the index math and the sums
// of src/kernels/pool.hpp, which the CUDA backend runs too, over the written tensor's elements in
// parallel. Every backward gathers (each input sums the outputs it fed), in the order a scatter
// over rising outputs would add them; max and average pooling's on row-major maps are that
// scatter, plane by plane.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../kernels/pool.hpp"
#include "kernels.hpp"
#include "loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

struct Identity {
  template <typename T>
  T operator()(T v) const { return v; }
};

// f(i, site of i) for every element i of a tensor of rows x cols maps, `cost` loads each.
// Row-major maps run plane by plane, their sites counted; channels-last ones divide (SiteOf).
template <typename F>
void for_each_element(const pool::Geometry& g, int64_t count, int64_t rows, int64_t cols,
                      int64_t cost, F&& f) {
  if (count == 0) return;
  if (!g.channels_last) {
    const int64_t area = rows * cols;
    for_each_plane(count / area, area * cost, [&](int64_t plane) {
      int64_t i = plane * area;
      for (int64_t y = 0; y < rows; ++y)
        for (int64_t x = 0; x < cols; ++x) f(i++, pool::Site{plane / g.c, plane % g.c, y, x});
    });
    return;
  }
  const pool::SiteOf site(g, rows, cols, count);
  parallel_for(0, count, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cost, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i) f(i, site(i));
               });
}

// The loads of a window: its taps inside the map (a kernel larger than the map reads no more).
int64_t window_cost(const Pool2dParams& p, const pool::Geometry& g) {
  return std::min(p.kh, g.h) * std::min(p.kw, g.w);
}

// The kernel offsets [lo, hi) whose input o * stride - pad + k * dil lies in [0, size).
struct Taps {
  int64_t first, lo, hi;  // first: the input at offset 0
};
Taps taps(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t size) {
  const int64_t first = o * stride - pad;
  const pool::TapRange r = pool::tap_range(first, k, dil, size);
  return {first, r.lo, r.hi};
}

// Row-major windows one column wide that step one column at a time without padding (the depth
// pass of the 3-d pools): output column ow reads input column ow alone, and every output of a
// row shares its window's rows and its average's divisor.
bool column_windows(const pool::Geometry& g, const Pool2dParams& p) {
  return !g.channels_last && p.kw == 1 && p.stride_w == 1 && p.pad_w == 0 && g.wo == g.w;
}

}  // namespace

void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& in,
                        const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "max_pool2d (cpu)", [&](auto t) {
    using T = decltype(t);
    const pool::Geometry g = pool::geometry(in, out);
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    int64_t* idx = ptr<int64_t>(indices);
    if (column_windows(g, p)) {
      // Windows one column wide (the depth pass of max_pool3d): the same scan, a row at a time,
      // each column its own lane.
      const int64_t in_area = g.h * g.w, out_area = g.ho * g.wo;
      for_each_plane(out.numel() / std::max<int64_t>(out_area, 1), out_area * p.kh,
                     [&](int64_t plane) {
                       const T* xp = x + plane * in_area;
                       for (int64_t oh = 0; oh < g.ho; ++oh) {
                         const Taps r = taps(oh, p.kh, p.stride_h, p.pad_h, p.dil_h, g.h);
                         T* best = y + plane * out_area + oh * g.wo;
                         int64_t* index = idx + plane * out_area + oh * g.wo;
                         if (r.lo == r.hi) {  // a window over padding alone
                           std::fill_n(best, g.wo, -T(INFINITY));
                           std::fill_n(index, g.wo, int64_t{-1});
                           continue;
                         }
                         const int64_t first = (r.first + r.lo * p.dil_h) * g.w;
                         for (int64_t ow = 0; ow < g.wo; ++ow) {
                           best[ow] = xp[first + ow];
                           index[ow] = first + ow;
                         }
                         for (int64_t ki = r.lo + 1; ki < r.hi; ++ki) {
                           const int64_t row = (r.first + ki * p.dil_h) * g.w;
                           for (int64_t ow = 0; ow < g.wo; ++ow) {
                             const T v = xp[row + ow];
                             const bool take = v > best[ow] || v != v;
                             best[ow] = take ? v : best[ow];
                             index[ow] = take ? row + ow : index[ow];
                           }
                         }
                       }
                     });
      return;
    }
    if (!g.channels_last) {
      // Row-major maps: max_window's scan (the first max in scan order, a NaN wins, the last
      // one), with each window's rows and columns clipped to the map once instead of per tap.
      std::vector<Taps> cols(static_cast<size_t>(g.wo));
      for (int64_t ow = 0; ow < g.wo; ++ow)
        cols[ow] = taps(ow, p.kw, p.stride_w, p.pad_w, p.dil_w, g.w);
      const int64_t in_area = g.h * g.w, out_area = g.ho * g.wo;
      const int64_t planes = out.numel() / std::max<int64_t>(out_area, 1);
      for_each_plane(planes, out_area * window_cost(p, g), [&](int64_t plane) {
        const T* xp = x + plane * in_area;
        T* yp = y + plane * out_area;
        int64_t* ip = idx + plane * out_area;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const Taps r = taps(oh, p.kh, p.stride_h, p.pad_h, p.dil_h, g.h);
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const Taps& c = cols[ow];
            T best = T(0);
            int64_t index = -1;
            for (int64_t ki = r.lo; ki < r.hi; ++ki) {
              const int64_t row = (r.first + ki * p.dil_h) * g.w;
              for (int64_t kj = c.lo; kj < c.hi; ++kj) {
                const int64_t at = row + c.first + kj * p.dil_w;
                const T v = xp[at];
                if (index < 0 || v > best || v != v) {
                  best = v;
                  index = at;
                }
              }
            }
            yp[oh * g.wo + ow] = index < 0 ? -T(INFINITY) : best;
            ip[oh * g.wo + ow] = index;
          }
        }
      });
      return;
    }
    for_each_element(g, out.numel(), g.ho, g.wo, window_cost(p, g), [&](int64_t o, pool::Site s) {
      int64_t index;
      y[o] = pool::max_window<T>(x, g, p, s, index, Identity{});
      idx[o] = index;
    });
  });
}

void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices,
                         const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(grad_in.dtype(), "max_pool2d_backward (cpu)", [&](auto t) {
    using T = decltype(t);
    const pool::Geometry g = pool::geometry(grad_in, grad_out);
    T* dx = ptr<T>(grad_in);
    const T* dy = ptr<const T>(grad_out);
    const int64_t* idx = ptr<const int64_t>(indices);
    if (!g.channels_last) {
      // Plane by plane, each output's gradient added to the input its index names, outputs
      // rising: the sums max_gradient gathers, in its order, without searching the windows.
      const int64_t in_area = g.h * g.w, out_area = g.ho * g.wo;
      for_each_plane(grad_in.numel() / in_area, in_area + out_area, [&](int64_t plane) {
        T* dx_p = dx + plane * in_area;
        std::fill_n(dx_p, in_area, T(0));
        for (int64_t o = plane * out_area; o < (plane + 1) * out_area; ++o)
          if (idx[o] >= 0) dx_p[idx[o]] += dy[o];
      });
      return;
    }
    for_each_element(g, grad_in.numel(), g.h, g.w, window_cost(p, g), [&](int64_t i, pool::Site s) {
      dx[i] = pool::max_gradient<T>(dy, idx, g, p, s, Identity{});
    });
  });
}

void avg_pool2d_forward(const Tensor& out, const Tensor& in, const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "avg_pool2d (cpu)", [&](auto t) {
    using T = decltype(t);
    const pool::Geometry g = pool::geometry(in, out);
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    const T inv = pool::uniform_inverse<T>(g, p);
    if (column_windows(g, p)) {
      // Windows one column wide (the depth pass of avg_pool3d): each output row the sum of its
      // window's input rows, row by row, times the row's scale: avg_window's sums in its order,
      // as vectors across the row.
      const int64_t in_area = g.h * g.w, out_area = g.ho * g.wo;
      for_each_plane(out.numel() / std::max<int64_t>(out_area, 1), out_area * p.kh,
                     [&](int64_t plane) {
                       const T* xp = x + plane * in_area;
                       T* yp = y + plane * out_area;
                       for (int64_t oh = 0; oh < g.ho; ++oh) {
                         const Taps r = taps(oh, p.kh, p.stride_h, p.pad_h, 1, g.h);
                         const T scale = pool::avg_scale(g, p, inv, oh, int64_t{0});
                         T* row = yp + oh * g.wo;
                         std::fill_n(row, g.wo, T(0));
                         for (int64_t ki = r.lo; ki < r.hi; ++ki) {
                           const T* in_row = xp + (r.first + ki) * g.w;
                           for (int64_t ow = 0; ow < g.wo; ++ow) row[ow] += in_row[ow];
                         }
                         for (int64_t ow = 0; ow < g.wo; ++ow) row[ow] *= scale;
                       }
                     });
      return;
    }
    for_each_element(g, out.numel(), g.ho, g.wo, window_cost(p, g), [&](int64_t o, pool::Site s) {
      y[o] = pool::avg_window<T>(x, g, p, inv, s, Identity{});
    });
  });
}

void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Pool2dParams& p) {
  dispatch_dtype<DTypeSet::wide>(grad_in.dtype(), "avg_pool2d_backward (cpu)", [&](auto t) {
    using T = decltype(t);
    const pool::Geometry g = pool::geometry(grad_in, grad_out);
    T* dx = ptr<T>(grad_in);
    const T* dy = ptr<const T>(grad_out);
    const T inv = pool::uniform_inverse<T>(g, p);
    if (!g.channels_last) {
      // Plane by plane, each output's share added to the inputs of its window (clipped to the
      // map), outputs rising: avg_gradient's sums in its order, without searching the windows.
      const int64_t in_area = g.h * g.w, out_area = g.ho * g.wo;
      const int64_t planes = grad_in.numel() / std::max<int64_t>(in_area, 1);
      for_each_plane(planes, in_area + out_area * window_cost(p, g), [&](int64_t plane) {
        T* dx_p = dx + plane * in_area;
        const T* dy_p = dy + plane * out_area;
        std::fill_n(dx_p, in_area, T(0));
        if (column_windows(g, p)) {  // the same adds, in the same order, a row at a time
          for (int64_t oh = 0; oh < g.ho; ++oh) {
            const Taps r = taps(oh, p.kh, p.stride_h, p.pad_h, 1, g.h);
            const T scale = pool::avg_scale(g, p, inv, oh, int64_t{0});
            const T* dy_row = dy_p + oh * g.wo;
            for (int64_t ki = r.lo; ki < r.hi; ++ki) {
              T* dx_row = dx_p + (r.first + ki) * g.w;
              for (int64_t ow = 0; ow < g.wo; ++ow) dx_row[ow] += dy_row[ow] * scale;
            }
          }
          return;
        }
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const Taps r = taps(oh, p.kh, p.stride_h, p.pad_h, 1, g.h);
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const Taps c = taps(ow, p.kw, p.stride_w, p.pad_w, 1, g.w);
            const T d = dy_p[oh * g.wo + ow] * pool::avg_scale(g, p, inv, oh, ow);
            for (int64_t ki = r.lo; ki < r.hi; ++ki)
              for (int64_t kj = c.lo; kj < c.hi; ++kj)
                dx_p[(r.first + ki) * g.w + c.first + kj] += d;
          }
        }
      });
      return;
    }
    for_each_element(g, grad_in.numel(), g.h, g.w, window_cost(p, g), [&](int64_t i, pool::Site s) {
      dx[i] = pool::avg_gradient<T>(dy, g, p, inv, s, Identity{});
    });
  });
}

namespace {

// Global average pooling (ResNet's head), each plane summed in order from 0 as
// adaptive_avg_window sums it (the same bits), but many planes at once: one plane's sum is a
// chain of dependent adds, and one at a time took 2.8 ms for (128, 512, 7, 7), 3x PyTorch's.
// Row-major planes go kPlanes at a time, each its own accumulator; channels-last ones with
// the channels as the vector.
template <typename T>
void global_avg_pool(T* y, const T* x, int64_t images, const pool::Geometry& g) {
  const int64_t hw = g.h * g.w;
  const T area = T(hw);
  if (g.channels_last) {
    parallel_for(0, images, std::max<int64_t>(1, kElementwiseGrain / (hw * g.c)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t n = lo; n < hi; ++n) {
                     T* yn = y + n * g.c;
                     const T* xn = x + n * hw * g.c;
                     std::fill_n(yn, g.c, T(0));
                     for (int64_t k = 0; k < hw; ++k)
                       for (int64_t c = 0; c < g.c; ++c) yn[c] += xn[k * g.c + c];
                     for (int64_t c = 0; c < g.c; ++c) yn[c] /= area;
                   }
                 });
    return;
  }
  constexpr int64_t kPlanes = 16;
  const int64_t planes = images * g.c, blocks = (planes + kPlanes - 1) / kPlanes;
  parallel_for(0, blocks, std::max<int64_t>(1, kElementwiseGrain / (hw * kPlanes)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t b = lo; b < hi; ++b) {
                   const int64_t p0 = b * kPlanes;
                   if (p0 + kPlanes <= planes) {
                     T acc[kPlanes] = {};
                     for (int64_t k = 0; k < hw; ++k)
                       for (int64_t j = 0; j < kPlanes; ++j) acc[j] += x[(p0 + j) * hw + k];
                     for (int64_t j = 0; j < kPlanes; ++j) y[p0 + j] = acc[j] / area;
                   } else {
                     for (int64_t p = p0; p < planes; ++p) {
                       T acc = T(0);
                       for (int64_t k = 0; k < hw; ++k) acc += x[p * hw + k];
                       y[p] = acc / area;
                     }
                   }
                 }
               });
}

}  // namespace

void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& in) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "adaptive_avg_pool2d (cpu)", [&](auto t) {
    using T = decltype(t);
    const pool::Geometry g = pool::geometry(in, out);
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    if (g.ho == 1 && g.wo == 1) {
      if (out.numel() > 0) global_avg_pool(y, x, out.numel() / g.c, g);
      return;
    }
    const int64_t window = (g.h / g.ho + 1) * (g.w / g.wo + 1);
    for_each_element(g, out.numel(), g.ho, g.wo, window, [&](int64_t o, pool::Site s) {
      y[o] = pool::adaptive_avg_window<T>(x, g, s, Identity{});
    });
  });
}

void adaptive_avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out) {
  dispatch_dtype<DTypeSet::wide>(grad_in.dtype(), "adaptive_avg_pool2d_backward (cpu)",
                                 [&](auto t) {
    using T = decltype(t);
    const pool::Geometry g = pool::geometry(grad_in, grad_out);
    T* dx = ptr<T>(grad_in);
    const T* dy = ptr<const T>(grad_out);
    if (g.ho == 1 && g.wo == 1) {
      // Global pooling (ResNet's head): every input of a plane gets that plane's dy / (h w), the
      // sum adaptive_avg_gradient takes (from 0) without its per-element index math. dy is
      // (N, C) in memory in either layout.
      const int64_t hw = g.h * g.w;
      const T area = T(hw);
      if (!g.channels_last) {
        parallel_for(0, grad_out.numel(), std::max<int64_t>(1, kElementwiseGrain / hw),
                     [&](int64_t lo, int64_t hi) {
                       for (int64_t p = lo; p < hi; ++p)
                         std::fill_n(dx + p * hw, hw, T(0) + dy[p] / area);
                     });
      } else {
        parallel_for(0, grad_in.numel() / g.c, std::max<int64_t>(1, kElementwiseGrain / g.c),
                     [&](int64_t lo, int64_t hi) {
                       for (int64_t r = lo; r < hi; ++r) {  // r = n * hw + position
                         const T* dy_n = dy + r / hw * g.c;
                         for (int64_t c = 0; c < g.c; ++c) dx[r * g.c + c] = T(0) + dy_n[c] / area;
                       }
                     });
      }
      return;
    }
    for_each_element(g, grad_in.numel(), g.h, g.w, 4, [&](int64_t i, pool::Site s) {
      dx[i] = pool::adaptive_avg_gradient<T>(dy, g, s, Identity{});
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
