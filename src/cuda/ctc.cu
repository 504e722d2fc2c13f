// CUDA kernels of the CTC loss: a block per sample, its threads over the sample's states, frames
// in turn between barriers; the recursions are ctc.hpp's, as on the CPU.
#include <algorithm>

#include "../kernels/ctc.hpp"
#include "loops.cuh"

namespace tandem::kernels::cuda_backend {
namespace {

// Threads per block: the states (or classes) of the widest sample, in whole warps, up to 256.
unsigned ctc_threads(int64_t width) {
  return static_cast<unsigned>(std::min<int64_t>(cuda::kThreads, (width + 31) / 32 * 32));
}

template <typename T>
__global__ void ctc_forward_kernel(T* nll, T* log_alpha, const T* log_probs, const int64_t* targets,
                                   const int64_t* input_lengths, const int64_t* target_lengths,
                                   ctc::Geometry g) {
  const int64_t i = blockIdx.x, frames = input_lengths[i], states = 2 * target_lengths[i] + 1;
  const int64_t* target = targets + i * g.max_target;
  const T* emit = log_probs + i * g.stride_n;
  T* alpha = log_alpha + i * g.frames * g.states;
  if (frames > 0)
    for (int64_t s = threadIdx.x; s < states; s += blockDim.x)
      alpha[s] = ctc::alpha_first(emit, target, s, target_lengths[i], g);
  for (int64_t t = 1; t < frames; ++t) {
    __syncthreads();  // the previous frame's row is whole
    const T* prev = alpha + (t - 1) * g.states;
    for (int64_t s = threadIdx.x; s < states; s += blockDim.x)
      alpha[t * g.states + s] = ctc::alpha_next(prev, emit + t * g.stride_t, target, s, g);
  }
  __syncthreads();
  if (threadIdx.x == 0)
    nll[i] = ctc::loss(alpha + (frames > 0 ? frames - 1 : 0) * g.states, frames, target_lengths[i]);
}

// beta's rows in `scratch` (two per sample, in turn); after each row, each class's gradient from
// the shares of the states that emit it. One barrier per frame: the row frame t - 1 writes is
// the one frame t read before its barrier.
template <typename T>
__global__ void ctc_backward_kernel(T* grad, const T* grad_nll, const T* log_probs,
                                    const int64_t* targets, const int64_t* input_lengths,
                                    const int64_t* target_lengths, const T* nll, const T* log_alpha,
                                    T* scratch, ctc::Geometry g) {
  const int64_t i = blockIdx.x, last = 2 * target_lengths[i];
  const bool possible = input_lengths[i] > 0 && nll[i] != T(INFINITY);
  const int64_t frames = possible ? input_lengths[i] : 0;
  for (int64_t t = frames; t < g.frames; ++t)
    for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x)
      grad[(t * g.n + i) * g.classes + c] = T(0);
  const int64_t* target = targets + i * g.max_target;
  T* beta = scratch + i * 2 * g.states;
  for (int64_t t = frames - 1; t >= 0; --t) {
    const T* emit = log_probs + t * g.stride_t + i * g.stride_n;
    T* row = beta + (t % 2) * g.states;
    const T* next = beta + (1 - t % 2) * g.states;
    for (int64_t s = threadIdx.x; s <= last; s += blockDim.x)
      row[s] = t == frames - 1 ? ctc::beta_last(emit, target, s, last, g)
                               : ctc::beta_next(next, emit, target, s, last, g);
    __syncthreads();  // beta_t is whole
    const T* alpha = log_alpha + (i * g.frames + t) * g.states;
    for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x) {
      T share = 0;
      for (int64_t s = 0; s <= last; ++s)  // a target may hold the blank's class too
        if (ctc::label(target, s, g.blank) == c)
          share += ctc::occupancy(alpha[s], row[s], nll[i], emit[c * g.stride_c]);
      grad[(t * g.n + i) * g.classes + c] = -share * grad_nll[i];
    }
  }
}

void ctc_loss_forward(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs,
                      const Tensor& targets, const Tensor& input_lengths,
                      const Tensor& target_lengths, int64_t blank) {
  const ctc::Geometry g = ctc::geometry(log_probs, targets, blank);
  if (g.n == 0) return;
  cuda::TensorDeviceGuard guard(nll);
  cuda::dispatch<true>(log_probs.dtype(), "ctc_loss_forward (cuda)", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      ctc_forward_kernel<T>
          <<<static_cast<unsigned>(g.n), ctc_threads(g.states), 0, cuda::current_stream()>>>(
              cuda::ptr<T>(nll), cuda::ptr<T>(log_alpha), cuda::ptr<const T>(log_probs),
              cuda::ptr<const int64_t>(targets), cuda::ptr<const int64_t>(input_lengths),
              cuda::ptr<const int64_t>(target_lengths), g);
      cuda::check_launch("ctc_loss_forward");
    }
  });
}

void ctc_loss_backward(const Tensor& grad, const Tensor& grad_nll, const Tensor& log_probs,
                       const Tensor& targets, const Tensor& input_lengths,
                       const Tensor& target_lengths, const Tensor& nll, const Tensor& log_alpha,
                       int64_t blank) {
  const ctc::Geometry g = ctc::geometry(log_probs, targets, blank);
  if (g.n == 0) return;
  cuda::TensorDeviceGuard guard(grad);
  Tensor scratch = make_tensor({g.n, 2, g.states}, log_probs.dtype(), log_probs.device());
  cuda::dispatch<true>(log_probs.dtype(), "ctc_loss_backward (cuda)", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      ctc_backward_kernel<T>
          <<<static_cast<unsigned>(g.n), ctc_threads(std::max(g.states, g.classes)), 0,
             cuda::current_stream()>>>(
              cuda::ptr<T>(grad), cuda::ptr<const T>(grad_nll), cuda::ptr<const T>(log_probs),
              cuda::ptr<const int64_t>(targets), cuda::ptr<const int64_t>(input_lengths),
              cuda::ptr<const int64_t>(target_lengths), cuda::ptr<const T>(nll),
              cuda::ptr<const T>(log_alpha), cuda::ptr<T>(scratch), g);
      cuda::check_launch("ctc_loss_backward");
    }
  });
}

}  // namespace

TANDEM_REGISTER_CUDA(ctc_loss_forward, ctc_loss_forward);
TANDEM_REGISTER_CUDA(ctc_loss_backward, ctc_loss_backward);

}  // namespace tandem::kernels::cuda_backend
