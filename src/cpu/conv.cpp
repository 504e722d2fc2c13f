// CPU conv2d as im2col + GEMM per (sample, group). Samples run in parallel; the weight gradient
// is summed over at most kWeightChunks fixed chunks of samples, combined in order, so the bits do
// not depend on the thread count.
#include <vector>

#include "loops.hpp"
#include "tandem/kernels/cpu.hpp"

namespace tandem::kernels::cpu {
namespace {

constexpr int64_t kWeightChunks = 16;

struct Geometry {
  int64_t n, ci, h, w, co, kh, kw, ho, wo, groups;
  int64_t cig() const { return ci / groups; }
  int64_t cog() const { return co / groups; }
  int64_t col_rows() const { return cig() * kh * kw; }
  int64_t col_cols() const { return ho * wo; }
  bool pointwise(const Conv2dParams& p) const {  // 1x1, stride 1, no padding: col == input
    return kh == 1 && kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
           p.pad_w == 0;
  }
};

Geometry geometry(const Tensor& in, const Tensor& weight, const Tensor& out, int64_t groups) {
  return {in.size(0),     in.size(1),  in.size(2),  in.size(3),  weight.size(0),
          weight.size(2), weight.size(3), out.size(2), out.size(3), groups};
}

// x (C, H, W) -> col (C * kh * kw, Ho * Wo)
template <typename T>
void im2col(T* col, const T* x, const Geometry& g, const Conv2dParams& p) {
  for (int64_t c = 0; c < g.cig(); ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * g.ho * g.wo;
        const T* plane = x + c * g.h * g.w;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          T* dst = row + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.wo, T(0));
            continue;
          }
          const T* src = plane + ih * g.w;
          int64_t shift = kj * p.dil_w - p.pad_w;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            int64_t iw = ow * p.stride_w + shift;
            dst[ow] = (iw >= 0 && iw < g.w) ? src[iw] : T(0);
          }
        }
      }
}

// dx (C, H, W) += col2im(dcol (C * kh * kw, Ho * Wo))
template <typename T>
void col2im(T* dx, const T* col, const Geometry& g, const Conv2dParams& p) {
  for (int64_t c = 0; c < g.cig(); ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * g.ho * g.wo;
        T* plane = dx + c * g.h * g.w;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          if (ih < 0 || ih >= g.h) continue;
          const T* src = row + oh * g.wo;
          T* dst = plane + ih * g.w;
          int64_t shift = kj * p.dil_w - p.pad_w;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            int64_t iw = ow * p.stride_w + shift;
            if (iw >= 0 && iw < g.w) dst[iw] += src[ow];
          }
        }
      }
}

// Grain for parallel loops over samples: one sample per task.
constexpr int64_t kOneSample = 1;

template <typename T>
void forward_impl(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                  const Conv2dParams& p) {
  Geometry g = geometry(in, weight, out, p.groups);
  const T* x = ptr<const T>(in);
  const T* w = ptr<const T>(weight);
  const T* b = bias.defined() ? ptr<const T>(bias) : nullptr;
  T* y = ptr<T>(out);
  const bool pointwise = g.pointwise(p);
  const int64_t hw = g.col_cols();
  parallel_for(0, g.n, kOneSample, [&](int64_t lo, int64_t hi) {
    std::vector<T> col(pointwise ? 0 : g.col_rows() * hw);
    for (int64_t s = lo; s < hi; ++s)
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const T* xs = x + (s * g.ci + gr * g.cig()) * g.h * g.w;
        T* ys = y + (s * g.co + gr * g.cog()) * hw;
        const T* cols = xs;
        if (!pointwise) {
          im2col(col.data(), xs, g, p);
          cols = col.data();
        }
        gemm<T>(false, false, g.cog(), hw, g.col_rows(), T(1), w + gr * g.cog() * g.col_rows(),
                g.col_rows(), cols, hw, T(0), ys, hw);
        if (b)
          for (int64_t c = 0; c < g.cog(); ++c) {
            T bc = b[gr * g.cog() + c];
            for (int64_t i = 0; i < hw; ++i) ys[c * hw + i] += bc;
          }
      }
  });
}

template <typename T>
void backward_impl(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                   const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                   const Conv2dParams& p) {
  Geometry g = geometry(in, weight, grad_out, p.groups);
  const T* x = ptr<const T>(in);
  const T* w = ptr<const T>(weight);
  const T* dy = ptr<const T>(grad_out);
  const bool pointwise = g.pointwise(p);
  const int64_t hw = g.col_cols();

  if (grad_bias.defined()) {
    T* db = ptr<T>(grad_bias);
    parallel_for(0, g.co, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double s = 0;
        for (int64_t n = 0; n < g.n; ++n)
          for (int64_t i = 0; i < hw; ++i) s += dy[(n * g.co + c) * hw + i];
        db[c] = static_cast<T>(s);
      }
    });
  }

  if (grad_in.defined()) {
    T* dx = ptr<T>(grad_in);
    parallel_for(0, g.n, kOneSample, [&](int64_t lo, int64_t hi) {
      std::vector<T> dcol(g.col_rows() * hw);
      for (int64_t s = lo; s < hi; ++s)
        for (int64_t gr = 0; gr < g.groups; ++gr) {
          const T* dys = dy + (s * g.co + gr * g.cog()) * hw;
          T* dxs = dx + (s * g.ci + gr * g.cig()) * g.h * g.w;
          const T* wg = w + gr * g.cog() * g.col_rows();
          if (pointwise) {  // dx = W^T dy directly
            gemm<T>(true, false, g.col_rows(), hw, g.cog(), T(1), wg, g.col_rows(), dys, hw, T(0),
                    dxs, hw);
            continue;
          }
          gemm<T>(true, false, g.col_rows(), hw, g.cog(), T(1), wg, g.col_rows(), dys, hw, T(0),
                  dcol.data(), hw);
          std::fill(dxs, dxs + g.cig() * g.h * g.w, T(0));
          col2im(dxs, dcol.data(), g, p);
        }
    });
  }

  if (grad_weight.defined()) {
    const int64_t wsize = weight.numel();
    const int64_t chunks = std::min(kWeightChunks, g.n);
    std::vector<T> partial(chunks * wsize, T(0));
    parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> col(pointwise ? 0 : g.col_rows() * hw);
      for (int64_t c = lo; c < hi; ++c) {
        T* acc = partial.data() + c * wsize;
        for (int64_t s = g.n * c / chunks; s < g.n * (c + 1) / chunks; ++s)
          for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* xs = x + (s * g.ci + gr * g.cig()) * g.h * g.w;
            const T* dys = dy + (s * g.co + gr * g.cog()) * hw;
            const T* cols = xs;
            if (!pointwise) {
              im2col(col.data(), xs, g, p);
              cols = col.data();
            }
            // dW_g (Cog, Cig*kh*kw) += dy_g (Cog, HoWo) x col^T (HoWo, Cig*kh*kw)
            gemm<T>(false, true, g.cog(), g.col_rows(), hw, T(1), dys, hw, cols, hw, T(1),
                    acc + gr * g.cog() * g.col_rows(), g.col_rows());
          }
      }
    });
    T* dw = ptr<T>(grad_weight);
    for (int64_t i = 0; i < wsize; ++i) {
      T s = partial[i];
      for (int64_t c = 1; c < chunks; ++c) s += partial[c * wsize + i];
      dw[i] = s;
    }
  }
}

}  // namespace

void conv2d_forward(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
  dispatch_floating(in.dtype(), "conv2d",
                    [&](auto t) { forward_impl<decltype(t)>(out, in, weight, bias, p); });
}

void conv2d_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                     const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                     const Conv2dParams& p) {
  dispatch_floating(in.dtype(), "conv2d_backward", [&](auto t) {
    backward_impl<decltype(t)>(grad_out, in, weight, grad_in, grad_weight, grad_bias, p);
  });
}

}  // namespace tandem::kernels::cpu
