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

// beta's rows and the states' shares in `scratch` (two of each per sample, in turn, so that a
// frame's writes never meet the reads of the frame after it, which threads may still be in),
// and each target position's next one of the same label in `chains`. Per frame: beta's row; the
// shares, and the gradient's row zeroed; then each class's gradient, the sum of its states'
// shares in ascending order (the CPU's order): a thread per label class (its first position
// walks its chain) and one for the blank, the O(states) work of the frame where a thread per
// class scanning every state took O(classes x states).
template <typename T>
__global__ void ctc_backward_kernel(T* grad, const T* grad_nll, const T* log_probs,
                                    const int64_t* targets, const int64_t* input_lengths,
                                    const int64_t* target_lengths, const T* nll, const T* log_alpha,
                                    T* scratch, int64_t* chains, ctc::Geometry g) {
  const int64_t i = blockIdx.x, length = target_lengths[i], last = 2 * length;
  const bool possible = input_lengths[i] > 0 && nll[i] != T(INFINITY);
  const int64_t frames = possible ? input_lengths[i] : 0;
  for (int64_t t = frames; t < g.frames; ++t)
    for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x)
      grad[(t * g.n + i) * g.classes + c] = T(0);
  const int64_t* target = targets + i * g.max_target;
  // next[j]: the next position of target[j]'s label, -1 after the last; head[j]: whether j is
  // the first position of a label other than the blank (the blank's thread sums those).
  int64_t* next = chains + i * 2 * g.max_target;
  int64_t* head = next + g.max_target;
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    next[j] = -1;
    for (int64_t k = length - 1; k > j; --k)
      if (target[k] == target[j]) next[j] = k;
    bool first = target[j] != g.blank;
    for (int64_t k = 0; k < j && first; ++k) first = target[k] != target[j];
    head[j] = first;
  }
  T* beta = scratch + i * 4 * g.states;
  T* shares = beta + 2 * g.states;
  const T scale = -grad_nll[i];
  for (int64_t t = frames - 1; t >= 0; --t) {
    const T* emit = log_probs + t * g.stride_t + i * g.stride_n;
    T* row = beta + (t % 2) * g.states;
    const T* next_row = beta + (1 - t % 2) * g.states;
    for (int64_t s = threadIdx.x; s <= last; s += blockDim.x)
      row[s] = t == frames - 1 ? ctc::beta_last(emit, target, s, last, g)
                               : ctc::beta_next(next_row, emit, target, s, last, g);
    __syncthreads();  // beta_t is whole
    const T* alpha = log_alpha + (i * g.frames + t) * g.states;
    T* share = shares + (t % 2) * g.states;
    for (int64_t s = threadIdx.x; s <= last; s += blockDim.x)
      share[s] = ctc::occupancy(alpha[s], row[s], nll[i],
                                emit[ctc::label(target, s, g.blank) * g.stride_c]);
    T* out = grad + (t * g.n + i) * g.classes;
    for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x) out[c] = T(0);
    __syncthreads();  // the shares are whole, the row zeroed
    for (int64_t j = threadIdx.x; j <= length; j += blockDim.x) {
      T sum = 0;
      if (j == length) {  // the blank: every even state, and odd ones where a target holds it
        for (int64_t s = 0; s <= last; ++s)
          if (ctc::label(target, s, g.blank) == g.blank) sum += share[s];
        out[g.blank] = sum * scale;
      } else if (head[j]) {
        for (int64_t k = j; k >= 0; k = next[k]) sum += share[2 * k + 1];
        out[target[j]] = sum * scale;
      }
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
  Tensor scratch = make_tensor({g.n, 4, g.states}, log_probs.dtype(), log_probs.device());
  Tensor chains = make_tensor({g.n, 2, g.max_target}, DType::i64, log_probs.device());
  cuda::dispatch<true>(log_probs.dtype(), "ctc_loss_backward (cuda)", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      ctc_backward_kernel<T>
          <<<static_cast<unsigned>(g.n), ctc_threads(std::max(g.states, g.classes)), 0,
             cuda::current_stream()>>>(
              cuda::ptr<T>(grad), cuda::ptr<const T>(grad_nll), cuda::ptr<const T>(log_probs),
              cuda::ptr<const int64_t>(targets), cuda::ptr<const int64_t>(input_lengths),
              cuda::ptr<const int64_t>(target_lengths), cuda::ptr<const T>(nll),
              cuda::ptr<const T>(log_alpha), cuda::ptr<T>(scratch), cuda::ptr<int64_t>(chains), g);
      cuda::check_launch("ctc_loss_backward");
    }
  });
}

}  // namespace

TANDEM_REGISTER_CUDA(ctc_loss_forward, ctc_loss_forward);
TANDEM_REGISTER_CUDA(ctc_loss_backward, ctc_loss_backward);

}  // namespace tandem::kernels::cuda_backend
