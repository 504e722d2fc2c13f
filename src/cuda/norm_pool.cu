// CUDA batch norm over (N, C, S), layer norm over (rows, features) and 2-d pooling over
// (N, C, H, W), the CPU backend's semantics (src/cpu/norm.cpp; pooling's index math and sums
// are src/kernels/pool.hpp, which the CPU runs too): f16/bf16 load and compute in f32 with f32
// statistics and parameters, f64 in f64. Per-channel sums are cut into slices the shape alone
// decides, then added in order; every backward gathers (each input element sums the outputs it
// fed), so no atomics and one order per run. Batch norm's tensors are row-major (N, C, S) or
// all channels-last, (N, S, C) in memory; the latter's per-channel sums are coalesced: a warp
// reads 32 neighbouring channels of a row. Where the vector width allows, both go in 16-byte
// vectors: of neighbouring channels (channel tiles), or of one channel's plane. Max pooling over
// channels-last maps moves 16-byte vectors of neighbouring channels where it can.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "../kernels/divider.hpp"
#include "../kernels/kernels.hpp"
#include "../kernels/norm_update.hpp"
#include "../kernels/pool.hpp"
#include "loops.cuh"
#include "tandem/cuda/runtime.hpp"
#include "tandem/kernels/functors.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

using cuda::block_sum;
using cuda::compute_t;
using cuda::convert;
using cuda::ptr;

// Where batch norm's (N, C, S) elements lie: row-major, or channels innermost (NHWC).
struct NcsLayout {
  int64_t channels, s;
  bool nhwc;
  bool narrow;  // below 2^31 elements: the channel by 32-bit division with magic numbers
  kernels::FastDivider by_channels, by_s;
  // The channel of the element at offset j.
  __device__ __forceinline__ int64_t channel(int64_t j) const {
    if (narrow) {
      const auto k = static_cast<uint32_t>(j);
      return nhwc ? by_channels.mod(k) : by_channels.mod(by_s.div(k));
    }
    return nhwc ? j % channels : j / s % channels;
  }
};

NcsLayout ncs_layout(int64_t c, int64_t s, bool nhwc, int64_t count) {
  NcsLayout l{c, s, nhwc, count > 0 && count < (int64_t{1} << 31), {}, {}};
  if (l.narrow) {
    l.by_channels = kernels::FastDivider(static_cast<uint32_t>(c));
    l.by_s = kernels::FastDivider(static_cast<uint32_t>(s));
  }
  return l;
}

// The layout of an (N, C, S) tensor: channels innermost where C's stride is 1 (and C > 1):
// channels-last maps, and every (N, C, 1) (a 1x1 map, BatchNorm1d's (N, C)), which lies the same
// either way and is read coalesced so. Where C is 1 both layouts are the same memory, and
// row-major is taken.
NcsLayout ncs_layout(const Tensor& t) {
  const int64_t c = t.size(1);
  return ncs_layout(c, t.size(2), c > 1 && t.stride(1) == 1, t.numel());
}

// The layout of a row-major map's V-value vectors, (N, C, S / V): S a multiple of V, so that each
// lies in one channel's plane.
NcsLayout in_vectors(const NcsLayout& l, int64_t n, int v) {
  return v == 1 ? l : ncs_layout(l.channels, l.s / v, false, n * l.channels * (l.s / v));
}

// --- batch norm --------------------------------------------------------------------------------
// P: the statistics' type (f32, or f64 for f64 inputs). Per-channel sums in two steps, in either
// layout: blocks sum slices of each channel's N x S values into partial[(k * slices + slice) * C
// + c], then the last block of a channel group to finish its slice adds the group's slices in
// order (finish_slices), in the same launch. The slice count depends on the shape only, so the
// order of summation does too. The statistics take one pass over the input
// (PyTorch's Welford kernels do too; the CPU takes two): sums of d = x - x0 and d^2 in f64, x0
// the channel's first element, then mean = x0 + E[d] and var = E[d^2] - E[d]^2. The shift bounds
// the cancellation by (x0 - mean)^2 / var <= N ulps of f64 (x0 is one of the N values), where
// squares about zero would lose a variance small next to the mean squared.
constexpr int kLanes = cuda::kThreads / 32;
constexpr int64_t kFillBlocks = 1024;  // blocks enough to fill a large GPU: the grids' floor

// How the sums are cut: a channels-innermost (N, S, C) tensor in blocks of 32 channels x kLanes
// warps over a slice of the N x S rows (each warp reads 32 neighbouring channels of a row:
// coalesced), a row-major one in a block per (channel, slice) over a slice of its N planes of S.
// With channel tiles (`vec` > 1: channels-last, C a multiple of vec, the operands aligned), a
// block takes `tile` groups of vec neighbouring channels instead (tile_sums), 32 channels at most
// as the others: the last block of a grid column adds the column's slices for all its channels
// (finish_slices), so its work stays that of one warp's channels. Enough blocks to fill a large
// GPU; slices of at least 64 rows (NHWC) or 4096 values (NCHW).
struct Slices {
  int64_t rows, count;  // rows: N x S, a channel's values
  dim3 grid;            // (channels, groups of 32 channels or tiles; slices)
  int tile = 0;                      // channel tiles' groups of vec channels a block
  int64_t channels, block_channels;  // C, and the channels of one grid column (x)
  Slices(int64_t n, const NcsLayout& l, int vec = 1)
      : rows(n * l.s), channels(l.channels), block_channels(l.nhwc ? 32 : 1) {
    int64_t blocks = l.nhwc ? (l.channels + 31) / 32 : l.channels;
    if (vec > 1) {
      const int64_t groups = l.channels / vec;
      tile = 1;  // the largest power of 2 up to 32 channels and to the groups
      while ((tile * 2) * vec <= 32 && tile * 2 <= groups) tile *= 2;
      blocks = (groups + tile - 1) / tile;
      block_channels = int64_t{tile} * vec;
    }
    const int64_t per_slice = l.nhwc ? 64 : 4096;
    count = std::max<int64_t>(1, std::min<int64_t>((rows + per_slice - 1) / per_slice,
                                                   (kFillBlocks + blocks - 1) / blocks));
    grid = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count));
  }
};

// f(offset, c, acc) adds the terms of the element at `offset`, of channel c, to acc[0..K); each
// block writes its slice's K partial sums.
template <int K, typename P, typename F>
__device__ void slice_sums(P* partial, int64_t rows, const NcsLayout& l, int64_t slices, F f) {
  const int64_t slice = blockIdx.y;
  const int64_t begin = rows * slice / slices, end = rows * (slice + 1) / slices;
  P acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0;
  if (l.nhwc) {
    __shared__ P lanes[K][kLanes][32];
    const int tx = threadIdx.x % 32, lane = threadIdx.x / 32;
    const int64_t c = blockIdx.x * 32 + tx;
    if (c < l.channels)
#pragma unroll 4  // four loads in flight, as tile_sums
      for (int64_t r = begin + lane; r < end; r += kLanes) f(r * l.channels + c, c, acc);
    for (int k = 0; k < K; ++k) lanes[k][lane][tx] = acc[k];
    __syncthreads();
    if (lane == 0 && c < l.channels)
      for (int k = 0; k < K; ++k) {
        P t = 0;
        for (int w = 0; w < kLanes; ++w) t += lanes[k][w][tx];
        partial[(k * slices + slice) * l.channels + c] = t;
      }
    return;
  }
  // Row-major: value j of channel c lies at (j / S * C + c) * S + j % S. The quotient and
  // remainder advance by the block's stride instead of being divided out per element.
  const int64_t c = blockIdx.x;
  const int64_t step_q = blockDim.x / l.s, step_r = blockDim.x % l.s;
  int64_t j = begin + threadIdx.x, q = j / l.s, r = j % l.s;
#pragma unroll 4
  for (; j < end; j += blockDim.x) {
    f((q * l.channels + c) * l.s + r, c, acc);
    q += step_q;
    r += step_r;
    if (r >= l.s) {
      r -= l.s;
      ++q;
    }
  }
  for (int k = 0; k < K; ++k) acc[k] = block_sum(acc[k]);
  if (threadIdx.x == 0)
    for (int k = 0; k < K; ++k) partial[(k * slices + slice) * l.channels + c] = acc[k];
}

template <typename T>
__device__ __forceinline__ double as_double(const T* x, int64_t o) {
  return static_cast<double>(convert<compute_t<T>>(x[o]));
}

// Whether this block, its slice's partial sums written, is the last of its grid column (channel
// group) to finish: every slice's sums are then in memory. The column's counter (zero before the
// launch) is set back to zero for the next one. The CUDA programming guide's last-block pattern:
// each block's writes fenced before its count, the last block's reads past L1 (load_slice).
__device__ bool last_slice(int* counters, int64_t slices) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[blockIdx.x], 1) == static_cast<int>(slices) - 1;
    if (last) counters[blockIdx.x] = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

template <typename P>
__device__ __forceinline__ P load_slice(const P* p) {
  return __ldcg(p);  // from L2: other blocks wrote it
}

// The last block of a grid column (last_slice): each of its (up to 32) channels' K totals over
// the slices, handed to f(c, totals): warp w adds slices w, w + kLanes, ... (neighbouring
// threads read neighbouring channels), then the warps' sums in order. One thread per channel
// adding every slice waited on hundreds of dependent loads (512 slices of 64 channels in
// ResNet-50's first layers).
template <int K, typename P, typename F>
__device__ void finish_slices(const P* partial, const Slices& sl, int* counters, F f) {
  if (!last_slice(counters, sl.count)) return;
  __shared__ P lanes[K][kLanes][32];
  const int tx = threadIdx.x % 32, lane = threadIdx.x / 32;
  const int64_t c = blockIdx.x * sl.block_channels + tx;
  const bool mine = tx < sl.block_channels && c < sl.channels;
  P acc[K];
  for (int i = 0; i < K; ++i) acc[i] = 0;
  if (mine)
    for (int64_t k = lane; k < sl.count; k += kLanes)
      for (int i = 0; i < K; ++i)
        acc[i] += load_slice(&partial[(i * sl.count + k) * sl.channels + c]);
  for (int i = 0; i < K; ++i) lanes[i][lane][tx] = acc[i];
  __syncthreads();
  if (lane != 0 || !mine) return;
  for (int i = 0; i < K; ++i) {
    acc[i] = 0;
    for (int w = 0; w < kLanes; ++w) acc[i] += lanes[i][w][tx];
  }
  f(c, acc);
}

// Zeroed counters for last_slice, n or more, for launches on the current stream of `device`:
// one array per device and stream (its kernels run one after another, and each leaves the
// counters zero again), made once and kept.
int* slice_counters(int64_t n, Device device) {
  static std::mutex mu;
  // Never freed: kernels queued as the program exits may still count in them.
  static auto* held = new std::map<std::pair<int, cudaStream_t>, Tensor>;
  std::lock_guard<std::mutex> lock(mu);
  Tensor& t = (*held)[{device.index(), cuda::current_stream()}];
  if (!t.defined() || t.numel() < n) {
    t = make_tensor({std::max<int64_t>(n, 1024)}, DType::i32, device);
    t.zero_();
  }
  return ptr<int>(t);
}

// What the statistics' last blocks write per channel from its slices: mean = x0 + E[d] and
// var = E[d^2] - E[d]^2 (NaN for no values, as the two-pass sums gave), then, where `invstd` is
// given, batch_norm_update's work on them (num_batches_tracked with channel 0).
template <typename P>
struct BnStatsOut {
  P *mean, *var;
  int64_t values;      // a channel's
  int64_t first_step;  // channel c's first value lies at c * first_step (1 or S)
  P *invstd, *running_mean, *running_var;
  kernels::BatchNormUpdate u;
};

template <typename T, typename P>
__device__ void bn_stats_finish(const double* partial, const T* x, const Slices& sl, int* counters,
                                const BnStatsOut<P>& o) {
  finish_slices<2, double>(partial, sl, counters, [&](int64_t c, const double* t) {
    const double count = static_cast<double>(o.values);
    const double m = t[0] / count;
    o.mean[c] = static_cast<P>((o.values > 0 ? as_double(x, c * o.first_step) : 0.0) + m);
    const double v = t[1] / count - m * m;
    o.var[c] = static_cast<P>(v < 0 ? 0.0 : v);  // rounding's negatives clamped; NaN kept
    if (!o.invstd) return;
    batch_norm_update_one(o.invstd, o.running_mean, o.running_var, o.mean, o.var, o.u, c);
    if (c == 0 && o.u.batches_tracked) ++*o.u.batches_tracked;
  });
}

// The kernels below over an element at a time (V = 1) and over a row-major map's planes in
// V-value vectors (V > 1: l, rows and the offsets count vectors, l from in_vectors), each vector
// one channel's: its parameters are read once for V values, and its loads move 16 bytes.

// Slice sums of d = x - x0 and d^2 (x0: the channel's first element; rows > 0 where any
// element is read).
template <int V, typename T, typename P>
__global__ void bn_moments_kernel(double* partial, const T* x, Slices sl, NcsLayout l,
                                  int* counters, BnStatsOut<P> out) {
  using VT = cuda::Vec<T, V>;
  double x0 = 0;  // a thread sums one channel: x0 read once
  int64_t x0_channel = -1;
  slice_sums<2, double>(partial, sl.rows, l, sl.count, [&](int64_t o, int64_t c, double* acc) {
    if (c != x0_channel) {
      x0_channel = c;
      x0 = as_double(x, c * out.first_step);
    }
    const VT e = reinterpret_cast<const VT*>(x)[o];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const double d = static_cast<double>(convert<compute_t<T>>(e.v[k])) - x0;
      acc[0] += d;
      acc[1] += d * d;
    }
  });
  bn_stats_finish(partial, x, sl, counters, out);
}

template <typename P, typename T>
__device__ __forceinline__ P to_p(T v) {
  return static_cast<P>(convert<compute_t<T>>(v));
}

// Channel c's affine map, y = x * scale + shift, and an output from it: what every forward
// kernel computes, written once so that they round alike.
template <typename P>
struct BnAffine {
  P scale, shift;
};
template <typename P>
__device__ __forceinline__ BnAffine<P> bn_affine(int64_t c, const P* mean, const P* invstd,
                                                 const P* weight, const P* bias) {
  const P scale = invstd[c] * (weight ? weight[c] : P(1));
  return {scale, (bias ? bias[c] : P(0)) - mean[c] * scale};
}
template <typename P, typename T>
__device__ __forceinline__ T bn_output(const BnAffine<P>& a, T x, const T* residual, T r,
                                       bool relu) {
  P v = to_p<P>(x) * a.scale + a.shift;
  if (residual) v = v + to_p<P>(r);
  if (relu) v = Relu{}(v);
  return convert<T>(v);
}

// The output's vector i, value k of it by the map a(k): what the forward kernels (planes and
// channel tiles) do with each vector.
template <int V, typename T, typename A>
__device__ __forceinline__ void bn_forward_vector(T* y, const T* x, const T* residual, int64_t i,
                                                  A a, bool relu) {
  using VT = cuda::Vec<T, V>;
  const VT xv = reinterpret_cast<const VT*>(x)[i];
  VT rv = {}, yv;
  if (residual) rv = reinterpret_cast<const VT*>(residual)[i];
#pragma unroll
  for (int k = 0; k < V; ++k) yv.v[k] = bn_output(a(k), xv.v[k], residual, rv.v[k], relu);
  reinterpret_cast<VT*>(y)[i] = yv;
}

// A vector (or element) per thread: row-major maps, and the channels-last ones the channel
// tiles below do not take.
template <int V, typename T, typename P>
__global__ void bn_forward_kernel(T* y, const T* x, const T* residual, const P* mean,
                                  const P* invstd, const P* weight, const P* bias, int64_t vectors,
                                  NcsLayout l, bool relu) {
  TANDEM_CUDA_LOOP(i, vectors) {
    const BnAffine<P> a = bn_affine(l.channel(i), mean, invstd, weight, bias);
    bn_forward_vector<V>(
        y, x, residual, i, [&](int) { return a; }, relu);
  }
}

// The gradient reaching the batch norm's output: dy, through relu's mask (out > 0) when the
// forward applied relu (`relu`: out is its output).
template <typename P, typename T>
__device__ __forceinline__ P bn_dz(T dy, T out, bool relu) {
  const P g = to_p<P>(dy);
  return !relu || to_p<P>(out) > P(0) ? g : P(0);
}

// What the gradient's last blocks write per channel from its slices: sum(dz) and
// sum(dz * (x - mean)); grad_weight = the second times invstd, grad_bias = the first (either may
// be null).
template <typename P>
struct BnSumsOut {
  P *sum_dy, *sum_dy_xmu, *grad_weight, *grad_bias;
  const P* invstd;
};

template <typename P>
__device__ void bn_sums_finish(const P* partial, const Slices& sl, int* counters,
                               const BnSumsOut<P>& o) {
  finish_slices<2, P>(partial, sl, counters, [&](int64_t c, const P* t) {
    o.sum_dy[c] = t[0];
    o.sum_dy_xmu[c] = t[1];
    if (o.grad_weight) o.grad_weight[c] = t[1] * o.invstd[c];
    if (o.grad_bias) o.grad_bias[c] = t[0];
  });
}

// Slice sums of dz and dz * (x - mean); dz itself into dz_out where given (the residual's
// gradient, which the input pass then reads in place of dy and the output: a pass fewer).
template <int V, typename T, typename P>
__global__ void bn_backward_sums_kernel(P* partial, T* dz_out, const T* dy, const T* x,
                                        const T* out, const P* mean, Slices sl, NcsLayout l,
                                        int* counters, BnSumsOut<P> sums) {
  using VT = cuda::Vec<T, V>;
  slice_sums<2, P>(partial, sl.rows, l, sl.count, [&](int64_t o, int64_t c, P* acc) {
    const VT dyv = reinterpret_cast<const VT*>(dy)[o], xv = reinterpret_cast<const VT*>(x)[o];
    VT outv = {}, dzv;
    if (out) outv = reinterpret_cast<const VT*>(out)[o];
    const P mu = mean[c];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const P dz = bn_dz<P>(dyv.v[k], outv.v[k], out != nullptr);
      dzv.v[k] = convert<T>(dz);
      acc[0] += dz;
      acc[1] += dz * (to_p<P>(xv.v[k]) - mu);
    }
    if (dz_out) reinterpret_cast<VT*>(dz_out)[o] = dzv;
  });
  bn_sums_finish(partial, sl, counters, sums);
}

// Channel c's coefficients of the input's gradient, dx = scale (dz - mean_dy - (x - mean) slope)
// (scale = w invstd, mean_dy = mean(dz), slope = invstd mean(dz xhat) when training, else 0):
// what both backward kernels compute, written once so that they round alike. The values per
// channel: `count`, or the group's (`group_count`, on the device: the host never reads it).
template <typename P>
struct BnCount {
  P local;
  const double* group;  // SyncBatchNorm's allreduced count, or null
  __device__ __forceinline__ P value() const { return group ? static_cast<P>(*group) : local; }
};
template <typename P>
struct BnInputGrad {
  P scale, mean_dy, slope, mean;
  __device__ __forceinline__ P operator()(P dz, P x) const {
    return scale * (dz - mean_dy - (x - mean) * slope);
  }
};
template <typename P>
__device__ __forceinline__ BnInputGrad<P> bn_input_grad(int64_t c, const P* mean, const P* invstd,
                                                        const P* weight, const P* sum_dy,
                                                        const P* sum_dy_xmu, P count,
                                                        bool training) {
  const P is = invstd[c];
  return {(weight ? weight[c] : P(1)) * is, training ? sum_dy[c] / count : P(0),
          training ? is * (sum_dy_xmu[c] * is) / count : P(0), mean[c]};
}

// The input gradient's vector i, value k of it by the coefficients coef(k): what both input
// kernels (planes and channel tiles) do with each vector.
template <int V, typename P, typename T, typename C>
__device__ __forceinline__ void bn_input_vector(T* dx, const T* dy, const T* x, const T* out,
                                                int64_t i, C coef) {
  using VT = cuda::Vec<T, V>;
  const VT dyv = reinterpret_cast<const VT*>(dy)[i], xv = reinterpret_cast<const VT*>(x)[i];
  VT outv = {}, dxv;
  if (out) outv = reinterpret_cast<const VT*>(out)[i];
#pragma unroll
  for (int k = 0; k < V; ++k)
    dxv.v[k] = convert<T>(coef(k)(bn_dz<P>(dyv.v[k], outv.v[k], out != nullptr), to_p<P>(xv.v[k])));
  reinterpret_cast<VT*>(dx)[i] = dxv;
}

// dx from bn_input_grad's coefficients (w invstd dz when evaluating).
template <int V, typename T, typename P>
__global__ void bn_backward_input_kernel(T* dx, const T* dy, const T* x, const T* out,
                                         const P* mean, const P* invstd, const P* weight,
                                         const P* sum_dy, const P* sum_dy_xmu, int64_t vectors,
                                         NcsLayout l, BnCount<P> n, bool training) {
  const P count = n.value();
  TANDEM_CUDA_LOOP(i, vectors) {
    const BnInputGrad<P> coef =
        bn_input_grad(l.channel(i), mean, invstd, weight, sum_dy, sum_dy_xmu, count, training);
    bn_input_vector<V, P>(dx, dy, x, out, i, [&](int) { return coef; });
  }
}

// Channels-last maps whose C is a multiple of V (16-byte vectors): thread t keeps the V
// neighbouring channels of group t % G (G = C / V) and walks the rows t / G, t / G + passes, ...,
// so its channels' parameters are read once and every load and store moves 16 bytes; neighbouring
// threads read neighbouring vectors. The same arithmetic as the kernels above, so the same bits.
// (One element per thread reads 4-5 parameters per element; vectors whose lanes each read their
// channel's were slower still on the H200.) A thread's parameters are 20-40 loads and the
// backward's 2 V divisions, so it walks at least kTileRows rows (PyTorch's channels-last
// elementwise kernels: 16), where a grid of one thread per vector gave it one or two; but the
// grid stays at least kFillBlocks (as Slices), and a thread a group (bn_vectors: the groups fit
// in the largest grid).
constexpr int64_t kTileRows = 16;
struct ChannelTiles {
  int64_t groups = 0, rows = 0, rows_per_pass = 0;
  unsigned blocks = 0;
  ChannelTiles(int64_t channels, int vec, int64_t rows_) : groups(channels / vec), rows(rows_) {
    const int64_t vectors = rows * groups;
    const int64_t threads = std::max({groups, kFillBlocks * cuda::kThreads, vectors / kTileRows});
    blocks = std::min(cuda::grid_for(vectors), cuda::grid_for(threads));
    rows_per_pass = std::max<int64_t>(1, static_cast<int64_t>(blocks) * cuda::kThreads / groups);
  }
};

template <int V, typename T, typename P>
__global__ void bn_forward_tiled_kernel(T* y, const T* x, const T* residual, const P* mean,
                                        const P* invstd, const P* weight, const P* bias,
                                        ChannelTiles t, bool relu) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (tid >= t.rows_per_pass * t.groups) return;
  const int64_t g = tid % t.groups;
  BnAffine<P> a[V];
#pragma unroll
  for (int k = 0; k < V; ++k) a[k] = bn_affine(g * V + k, mean, invstd, weight, bias);
  for (int64_t r = tid / t.groups; r < t.rows; r += t.rows_per_pass)
    bn_forward_vector<V>(
        y, x, residual, r * t.groups + g, [&](int k) { return a[k]; }, relu);
}

template <int V, typename T, typename P>
__global__ void bn_backward_input_tiled_kernel(T* dx, const T* dy, const T* x, const T* out,
                                               const P* mean, const P* invstd, const P* weight,
                                               const P* sum_dy, const P* sum_dy_xmu, ChannelTiles t,
                                               BnCount<P> n, bool training) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (tid >= t.rows_per_pass * t.groups) return;
  const int64_t g = tid % t.groups;
  const P count = n.value();
  BnInputGrad<P> coef[V];
#pragma unroll
  for (int k = 0; k < V; ++k)
    coef[k] = bn_input_grad(g * V + k, mean, invstd, weight, sum_dy, sum_dy_xmu, count, training);
  for (int64_t r = tid / t.groups; r < t.rows; r += t.rows_per_pass)
    bn_input_vector<V, P>(dx, dy, x, out, r * t.groups + g, [&](int k) { return coef[k]; });
}

// Whether V-element vectors of T serve a call whose layout allows them (`layout_fits`: batch
// norm's channel tiles or planes, max pooling's lanes of neighbouring channels): every tensor
// given 16-byte aligned (undefined ones skipped), vectors not turned off
// (cuda::set_vectorized_elementwise).
template <typename T, int V>
bool lanes_fit(bool layout_fits, std::initializer_list<const Tensor*> tensors) {
  if (!layout_fits || !cuda::vectorized_elementwise()) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && !cuda::aligned_for<T, V>(*t)) return false;
  return true;
}

// How batch norm's kernels read a call's maps: in channel tiles (`tiles`: channels-last, C a
// multiple of the vector width v), in planes (row-major, S a multiple of v: each vector lies in
// one channel's plane), or an element at a time (v = 1). One decision for all the call's kernels.
struct BnVectors {
  int v = 1;
  bool tiles = false;
};
template <typename T>
BnVectors bn_vectors(const NcsLayout& l, std::initializer_list<const Tensor*> tensors) {
  if constexpr (cuda::kVectorizable<T>) {
    constexpr int V = cuda::kVec<T, T>;
    // More groups than the grid has threads would leave some unwritten (a tile's thread keeps
    // one group): such a C (2^26 f32 channels and up) goes an element at a time.
    const bool tiles = l.nhwc && l.channels % V == 0 &&
                       l.channels / V <= static_cast<int64_t>(cuda::kMaxBlocks) * cuda::kThreads;
    if (lanes_fit<T, V>(tiles || (!l.nhwc && l.s % V == 0), tensors)) return {V, tiles};
  }
  return {};
}

// Calls f(V), the vector width as a constant, where w has vectors; returns whether it did (the
// caller then launches the one-element kernel).
template <typename T, typename F>
bool with_vectors(const BnVectors& w, F f) {
  if constexpr (cuda::kVectorizable<T>) {
    if (w.v > 1) {
      f(std::integral_constant<int, cuda::kVec<T, T>>{});
      return true;
    }
  }
  return false;
}

// Channel tiles of the slice sums (Slices with vec > 1): block b takes groups b * tile ...
// b * tile + tile - 1 of V channels (tile a power of 2, tile x V up to 32) and kThreads / tile
// lanes of rows; a thread keeps its group's K x V sums and loads 16 bytes a row, as the elementwise
// tiles do (one channel a thread, loading 2 bytes, keeps few bytes in flight). f(i, acc) adds
// vector i's terms. A group's lanes are then added, within each warp by shuffles, then the warps in
// order: partial[(k * slices + slice) * C + c], as slice_sums writes it.
__device__ __forceinline__ int64_t tile_group(const Slices& sl) {
  return static_cast<int64_t>(blockIdx.x) * sl.tile + threadIdx.x % sl.tile;
}

template <int K, int V, typename P, typename F>
__device__ void tile_sums(P* partial, const Slices& sl, F f) {
  const int64_t channels = sl.channels, groups = channels / V, g = tile_group(sl),
                slice = blockIdx.y;
  const int64_t begin = sl.rows * slice / sl.count, end = sl.rows * (slice + 1) / sl.count;
  const int lanes = cuda::kThreads / sl.tile;
  P acc[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[k][v] = 0;
  if (g < groups)
#pragma unroll 4  // four rows' loads in flight (PyTorch's channels-last sums: PARALLEL_LOADS 4)
    for (int64_t r = begin + threadIdx.x / sl.tile; r < end; r += lanes) f(r * groups + g, acc);
  for (int d = 16; d >= sl.tile; d /= 2)  // a warp's lanes of one group lie d apart
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int v = 0; v < V; ++v) acc[k][v] += cuda::shuffle_down(acc[k][v], d);
  __shared__ P warps[kLanes][32][V];
  const int warp = threadIdx.x / 32, in_warp = threadIdx.x % 32;
  for (int k = 0; k < K; ++k) {
    if (in_warp < sl.tile)
#pragma unroll
      for (int v = 0; v < V; ++v) warps[warp][in_warp][v] = acc[k][v];
    __syncthreads();
    // Warp 0's first `tile` threads add their groups' warps.
    if (static_cast<int>(threadIdx.x) < sl.tile && g < groups)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        P t = 0;
        for (int w = 0; w < kLanes; ++w) t += warps[w][threadIdx.x][v];
        partial[(k * sl.count + slice) * channels + g * V + v] = t;
      }
    __syncthreads();  // warps[] is rewritten for the next k
  }
}

// bn_moments_kernel in channel tiles.
template <int V, typename T, typename P>
__global__ void bn_moments_tiled_kernel(double* partial, const T* x, Slices sl, int* counters,
                                        BnStatsOut<P> out) {
  using VT = cuda::Vec<T, V>;
  const VT* xv = reinterpret_cast<const VT*>(x);
  const int64_t g = tile_group(sl);
  compute_t<T> x0[V] = {};  // the channels' first elements (row 0's vector), exact in f32
  if (g < sl.channels / V && sl.rows > 0)
#pragma unroll
    for (int v = 0; v < V; ++v) x0[v] = convert<compute_t<T>>(xv[g].v[v]);
  tile_sums<2, V, double>(partial, sl, [&](int64_t i, double(&acc)[2][V]) {
    const VT e = xv[i];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const double d = static_cast<double>(convert<compute_t<T>>(e.v[v])) - x0[v];
      acc[0][v] += d;
      acc[1][v] += d * d;
    }
  });
  bn_stats_finish(partial, x, sl, counters, out);
}

// bn_backward_sums_kernel in channel tiles.
template <int V, typename T, typename P>
__global__ void bn_backward_sums_tiled_kernel(P* partial, T* dz_out, const T* dy, const T* x,
                                              const T* out, const P* mean, Slices sl, int* counters,
                                              BnSumsOut<P> sums) {
  using VT = cuda::Vec<T, V>;
  const int64_t g = tile_group(sl);
  P mu[V] = {};
  if (g < sl.channels / V)
#pragma unroll
    for (int v = 0; v < V; ++v) mu[v] = mean[g * V + v];
  tile_sums<2, V, P>(partial, sl, [&](int64_t i, P(&acc)[2][V]) {
    const VT dyv = reinterpret_cast<const VT*>(dy)[i], xv = reinterpret_cast<const VT*>(x)[i];
    VT outv = {}, dzv;
    if (out) outv = reinterpret_cast<const VT*>(out)[i];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const P dz = bn_dz<P>(dyv.v[v], outv.v[v], out != nullptr);
      dzv.v[v] = convert<T>(dz);
      acc[0][v] += dz;
      acc[1][v] += dz * (to_p<P>(xv.v[v]) - mu[v]);
    }
    if (dz_out) reinterpret_cast<VT*>(dz_out)[i] = dzv;
  });
  bn_sums_finish(partial, sl, counters, sums);
}

template <typename T>
const T* maybe(const Tensor& t) {
  return t.defined() ? ptr<const T>(t) : nullptr;
}
template <typename T>
T* maybe_out(const Tensor& t) {
  return t.defined() ? ptr<T>(t) : nullptr;
}

// Calls f(T{}, P{}) for the input dtype T and its statistics type P.
template <typename F>
void dispatch_bn(DType dtype, const char* what, F&& f) {
  cuda::dispatch<true>(dtype, what, [&](auto t) {
    using T = decltype(t);
    f(t, std::conditional_t<std::is_same_v<T, double>, double, float>{});
  });
}

template <typename P>
__global__ void bn_update_kernel(P* invstd, P* running_mean, P* running_var, const P* mean,
                                 const P* var, int64_t channels, BatchNormUpdate u) {
  TANDEM_CUDA_LOOP(c, channels) {
    batch_norm_update_one(invstd, running_mean, running_var, mean, var, u, c);
  }
  if (u.batches_tracked && blockIdx.x == 0 && threadIdx.x == 0) ++*u.batches_tracked;
}

void batch_norm_update(const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& mean, const Tensor& var, const BatchNormUpdate& u) {
  const int64_t c = var.numel();
  if (c == 0 && !u.batches_tracked) return;
  cuda::TensorDeviceGuard guard(var);
  dispatch_bn(var.dtype(), "batch_norm (cuda)", [&](auto, auto p) {
    using P = decltype(p);
    bn_update_kernel<<<cuda::grid_for(c), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<P>(invstd), u.running ? ptr<P>(running_mean) : nullptr,
        u.running ? ptr<P>(running_var) : nullptr, ptr<const P>(mean), ptr<const P>(var), c, u);
    cuda::check_launch("batch_norm_update");
  });
}

// The statistics and, with `update`, batch_norm_update's work: one launch.
void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& in,
                      const BatchNormStatsUpdate* update) {
  const int64_t n = in.size(0), c = in.size(1);
  if (c == 0) {  // nothing to sum; num_batches_tracked still counts the batch
    if (update)
      batch_norm_update(update->invstd, update->running_mean, update->running_var, mean, var,
                        update->u);
    return;
  }
  cuda::TensorDeviceGuard guard(in);
  const NcsLayout l = ncs_layout(in);
  dispatch_bn(in.dtype(), "batch_norm (cuda)", [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    cudaStream_t stream = cuda::current_stream();
    const BnVectors w = bn_vectors<T>(l, {&in});
    const NcsLayout lv = w.tiles ? l : in_vectors(l, n, w.v);
    const Slices sl = w.tiles ? Slices(n, l, w.v) : Slices(n, lv);
    Tensor partial = make_tensor({2 * sl.count * c}, DType::f64, in.device());
    int* counters = slice_counters(sl.grid.x, in.device());
    const bool running = update && update->u.running;
    const BnStatsOut<P> out{ptr<P>(mean),
                            ptr<P>(var),
                            n * l.s,
                            l.nhwc ? 1 : l.s,
                            update ? ptr<P>(update->invstd) : nullptr,
                            running ? ptr<P>(update->running_mean) : nullptr,
                            running ? ptr<P>(update->running_var) : nullptr,
                            update ? update->u : BatchNormUpdate{}};
    const bool vectors = with_vectors<T>(w, [&](auto v) {
      [[maybe_unused]] constexpr int V = decltype(v)::value;
      if (w.tiles)
        bn_moments_tiled_kernel<V><<<sl.grid, cuda::kThreads, 0, stream>>>(
            ptr<double>(partial), ptr<const T>(in), sl, counters, out);
      else
        bn_moments_kernel<V, T><<<sl.grid, cuda::kThreads, 0, stream>>>(
            ptr<double>(partial), ptr<const T>(in), sl, lv, counters, out);
    });
    if (!vectors)
      bn_moments_kernel<1, T><<<sl.grid, cuda::kThreads, 0, stream>>>(
          ptr<double>(partial), ptr<const T>(in), sl, l, counters, out);
    cuda::check_launch("batch_norm_stats");
  });
}

void batch_norm_forward(const Tensor& out, const Tensor& in, const Tensor& mean,
                        const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, bool relu) {
  const int64_t total = in.numel();
  if (total == 0) return;
  cuda::TensorDeviceGuard guard(in);
  dispatch_bn(in.dtype(), "batch_norm (cuda)", [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    cudaStream_t stream = cuda::current_stream();
    const int64_t n = in.size(0);
    const NcsLayout l = ncs_layout(in);
    const BnVectors w = bn_vectors<T>(l, {&out, &in, &residual});
    const bool vectors = with_vectors<T>(w, [&](auto v) {
      constexpr int V = decltype(v)::value;
      if (w.tiles) {
        const ChannelTiles tiles(l.channels, V, n * l.s);
        bn_forward_tiled_kernel<V><<<tiles.blocks, cuda::kThreads, 0, stream>>>(
            ptr<T>(out), ptr<const T>(in), maybe<T>(residual), ptr<const P>(mean),
            ptr<const P>(invstd), maybe<P>(weight), maybe<P>(bias), tiles, relu);
      } else {
        bn_forward_kernel<V, T, P><<<cuda::grid_for(total / V), cuda::kThreads, 0, stream>>>(
            ptr<T>(out), ptr<const T>(in), maybe<T>(residual), ptr<const P>(mean),
            ptr<const P>(invstd), maybe<P>(weight), maybe<P>(bias), total / V, in_vectors(l, n, V),
            relu);
      }
    });
    if (!vectors)
      bn_forward_kernel<1, T, P><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
          ptr<T>(out), ptr<const T>(in), maybe<T>(residual), ptr<const P>(mean),
          ptr<const P>(invstd), maybe<P>(weight), maybe<P>(bias), total, l, relu);
    cuda::check_launch("batch_norm_forward");
  });
}

void batch_norm_backward(const Tensor& grad_in, const Tensor& grad_weight,
                         const Tensor& grad_bias, const Tensor& grad_residual,
                         const Tensor& grad_out, const Tensor& in, const Tensor& out,
                         const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         bool training, const BatchNormSync* sync) {
  const int64_t n = in.size(0), c = in.size(1), s = in.size(2), total = in.numel();
  if (c == 0) return;  // an empty batch still writes zero weight and bias gradients, as the CPU
  cuda::TensorDeviceGuard guard(in);
  // The two per-channel sums, in the statistics' dtype on the device.
  Tensor sums = make_tensor({2, c}, mean.dtype(), in.device());
  dispatch_bn(in.dtype(), "batch_norm_backward (cuda)", [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    cudaStream_t stream = cuda::current_stream();
    P* sum_dy = ptr<P>(sums);
    P* sum_dy_xmu = sum_dy + c;
    const NcsLayout l = ncs_layout(in);
    // The residual's gradient is dz: the sums' pass writes it, and the input's pass reads it in
    // place of dy and the output (relu's mask already applied).
    T* dr = grad_residual.defined() && total > 0 ? ptr<T>(grad_residual) : nullptr;
    const BnVectors w = bn_vectors<T>(l, {&grad_in, &grad_residual, &grad_out, &in, &out});
    const NcsLayout lv = w.tiles ? l : in_vectors(l, n, w.v);
    const Slices sl = w.tiles ? Slices(n, l, w.v) : Slices(n, lv);
    Tensor partial = make_tensor({2 * sl.count * c}, mean.dtype(), in.device());
    int* counters = slice_counters(sl.grid.x, in.device());
    // An empty batch (a rank's, in a synchronized group) sums nothing: zeros.
    const BnSumsOut<P> sums_out{sum_dy, sum_dy_xmu, maybe_out<P>(grad_weight),
                                maybe_out<P>(grad_bias), ptr<const P>(invstd)};
    const bool summed_in_vectors = with_vectors<T>(w, [&](auto v) {
      [[maybe_unused]] constexpr int V = decltype(v)::value;
      if (w.tiles)
        bn_backward_sums_tiled_kernel<V><<<sl.grid, cuda::kThreads, 0, stream>>>(
            ptr<P>(partial), dr, ptr<const T>(grad_out), ptr<const T>(in), maybe<T>(out),
            ptr<const P>(mean), sl, counters, sums_out);
      else
        bn_backward_sums_kernel<V, T, P><<<sl.grid, cuda::kThreads, 0, stream>>>(
            ptr<P>(partial), dr, ptr<const T>(grad_out), ptr<const T>(in), maybe<T>(out),
            ptr<const P>(mean), sl, lv, counters, sums_out);
    });
    if (!summed_in_vectors)
      bn_backward_sums_kernel<1, T, P><<<sl.grid, cuda::kThreads, 0, stream>>>(
          ptr<P>(partial), dr, ptr<const T>(grad_out), ptr<const T>(in), maybe<T>(out),
          ptr<const P>(mean), sl, l, counters, sums_out);
    cuda::check_launch("batch_norm_backward (sums)");
    // Synchronized: the group's sums (grad_weight and grad_bias above stay this rank's).
    if (sync) sync->allreduce(sums);
    const BnCount<P> count{static_cast<P>(n * s), sync ? ptr<const double>(sync->count) : nullptr};
    if (!grad_in.defined() || total == 0) return;
    T* dx = ptr<T>(grad_in);
    const T* dz = dr ? dr : ptr<const T>(grad_out);
    const T* mask = dr ? nullptr : maybe<T>(out);
    const bool vectors = with_vectors<T>(w, [&](auto v) {
      constexpr int V = decltype(v)::value;
      if (w.tiles) {
        const ChannelTiles tiles(c, V, n * s);
        bn_backward_input_tiled_kernel<V><<<tiles.blocks, cuda::kThreads, 0, stream>>>(
            dx, dz, ptr<const T>(in), mask, ptr<const P>(mean), ptr<const P>(invstd),
            maybe<P>(weight), sum_dy, sum_dy_xmu, tiles, count, training);
      } else {
        bn_backward_input_kernel<V, T, P><<<cuda::grid_for(total / V), cuda::kThreads, 0, stream>>>(
            dx, dz, ptr<const T>(in), mask, ptr<const P>(mean), ptr<const P>(invstd),
            maybe<P>(weight), sum_dy, sum_dy_xmu, total / V, lv, count, training);
      }
    });
    if (!vectors)
      bn_backward_input_kernel<1, T, P><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
          dx, dz, ptr<const T>(in), mask, ptr<const P>(mean), ptr<const P>(invstd),
          maybe<P>(weight), sum_dy, sum_dy_xmu, total, l, count, training);
    cuda::check_launch("batch_norm_backward (input)");
  });
}

// --- layer norm: a block per row (rows in a grid-stride loop), the CPU's semantics ------------
template <typename T, typename P>
__device__ __forceinline__ P load(const T* x, int64_t j) {
  return to_p<P>(x[j]);
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65536));
}

// Each row's mean and rstd (two passes over the row, which the caches hold), then its output.
template <typename T, typename P>
__global__ void ln_forward_kernel(T* y, P* mean, P* rstd, const T* x, const P* w, const P* b,
                                  int64_t rows, int64_t f, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * f;
    P s = 0;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x) s += load<T, P>(xr, i);
    const P mu = block_sum(s) / static_cast<P>(f);
    P v = 0;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x) {
      const P d = load<T, P>(xr, i) - mu;
      v += d * d;
    }
    const double var = static_cast<double>(block_sum(v) / static_cast<P>(f));
    const P rs = static_cast<P>(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    T* yr = y + r * f;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x)
      yr[i] = convert<T>((load<T, P>(xr, i) - mu) * rs * (w ? w[i] : P(1)) + (b ? b[i] : P(0)));
  }
}

// dx = rstd * (g * w - mean(g * w) - xhat * mean(g * w * xhat)), a row per block.
template <typename T, typename P>
__global__ void ln_backward_input_kernel(T* dx, const T* dy, const T* x, const P* mean,
                                         const P* rstd, const P* w, int64_t rows, int64_t f) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * f;
    const T* gr = dy + r * f;
    const P mu = mean[r], rs = rstd[r];
    P a = 0, c = 0;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x) {
      const P gw = load<T, P>(gr, i) * (w ? w[i] : P(1));
      a += gw;
      c += gw * (load<T, P>(xr, i) - mu);
    }
    const P mean_gw = block_sum(a) / static_cast<P>(f);
    const P slope = block_sum(c) * rs * rs / static_cast<P>(f);
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x)
      dx[r * f + i] = convert<T>(rs * (load<T, P>(gr, i) * (w ? w[i] : P(1)) - mean_gw -
                                       (load<T, P>(xr, i) - mu) * slope));
  }
}

// The weight's and bias's gradients, column sums of dy * xhat and dy: block (x, k) sums 32
// columns over chunk k of the rows, kThreads / 32 rows at a time (a warp reads 32 neighbouring
// columns of a row), then its row lanes in order, into partial (chunks, 2, f).
template <typename T, typename P>
__global__ void ln_backward_params_kernel(P* partial, const T* dy, const T* x, const P* mean,
                                          const P* rstd, int64_t rows, int64_t f, int64_t chunk) {
  constexpr int kLanes = cuda::kThreads / 32;
  __shared__ P sums[2][kLanes][32];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x % 32;
  const int lane = threadIdx.x / 32;
  const int64_t k = blockIdx.y, r1 = (k + 1) * chunk < rows ? (k + 1) * chunk : rows;
  P aw = 0, ab = 0;
  if (col < f)
    for (int64_t r = k * chunk + lane; r < r1; r += kLanes) {
      const P g = load<T, P>(dy, r * f + col);
      aw += g * ((load<T, P>(x, r * f + col) - mean[r]) * rstd[r]);
      ab += g;
    }
  sums[0][lane][threadIdx.x % 32] = aw;
  sums[1][lane][threadIdx.x % 32] = ab;
  __syncthreads();
  if (lane == 0 && col < f) {
    P tw = 0, tb = 0;
    for (int l = 0; l < kLanes; ++l) {
      tw += sums[0][l][threadIdx.x];
      tb += sums[1][l][threadIdx.x];
    }
    partial[k * 2 * f + col] = tw;
    partial[k * 2 * f + f + col] = tb;
  }
}

// The chunks' column sums added in order.
template <typename P>
__global__ void ln_backward_params_finish_kernel(P* grad_weight, P* grad_bias, const P* partial,
                                                 int64_t f, int64_t chunks) {
  TANDEM_CUDA_LOOP(i, f) {
    P tw = 0, tb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      tw += partial[k * 2 * f + i];
      tb += partial[k * 2 * f + f + i];
    }
    if (grad_weight) grad_weight[i] = tw;
    if (grad_bias) grad_bias[i] = tb;
  }
}

void layer_norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& in,
                        const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t rows = in.size(0), f = in.size(1);
  if (rows == 0 || f == 0) return;
  cuda::TensorDeviceGuard guard(in);
  dispatch_bn(in.dtype(), "layer_norm (cuda)", [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    ln_forward_kernel<T, P><<<row_blocks(rows), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(out), ptr<P>(mean), ptr<P>(rstd), ptr<const T>(in), maybe<P>(weight), maybe<P>(bias),
        rows, f, eps);
    cuda::check_launch("layer_norm_forward");
  });
}

void layer_norm_backward(const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                         const Tensor& grad_out, const Tensor& in, const Tensor& mean,
                         const Tensor& rstd, const Tensor& weight) {
  const int64_t rows = in.size(0), f = in.size(1);
  if (rows == 0 || f == 0) return;
  cuda::TensorDeviceGuard guard(in);
  dispatch_bn(in.dtype(), "layer_norm_backward (cuda)", [&](auto t, auto p) {
    using T = decltype(t);
    using P = decltype(p);
    cudaStream_t stream = cuda::current_stream();
    if (grad_in.defined()) {
      ln_backward_input_kernel<T, P><<<row_blocks(rows), cuda::kThreads, 0, stream>>>(
          ptr<T>(grad_in), ptr<const T>(grad_out), ptr<const T>(in), ptr<const P>(mean),
          ptr<const P>(rstd), maybe<P>(weight), rows, f);
      cuda::check_launch("layer_norm_backward (input)");
    }
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    // Chunks of 32 rows or more, at most 256 of them and 16 MiB of partial sums.
    const int64_t most = std::max<int64_t>(1, std::min<int64_t>(256, (int64_t{1} << 21) / f));
    const int64_t chunk = std::max<int64_t>(32, (rows + most - 1) / most);
    const int64_t chunks = (rows + chunk - 1) / chunk;
    Tensor partial = make_tensor({chunks * 2 * f}, mean.dtype(), in.device());
    ln_backward_params_kernel<T, P>
        <<<dim3(static_cast<unsigned>((f + 31) / 32), static_cast<unsigned>(chunks)),
           cuda::kThreads, 0, stream>>>(ptr<P>(partial), ptr<const T>(grad_out), ptr<const T>(in),
                                        ptr<const P>(mean), ptr<const P>(rstd), rows, f, chunk);
    cuda::check_launch("layer_norm_backward (parameters)");
    ln_backward_params_finish_kernel<P><<<cuda::grid_for(f), cuda::kThreads, 0, stream>>>(
        grad_weight.defined() ? ptr<P>(grad_weight) : nullptr,
        grad_bias.defined() ? ptr<P>(grad_bias) : nullptr, ptr<const P>(partial), f, chunks);
    cuda::check_launch("layer_norm_backward (parameter sums)");
  });
}

// --- softmax: a block per row (rows in a grid-stride loop), the CPU's semantics ---------------
// The max of `v` over the block, in every thread; a NaN wins.
template <typename P>
__device__ P block_max(P v) {
  return cuda::block_reduce(
      v, [](P a, P b) { return b > a || b != b ? b : a; }, P(-INFINITY));
}

template <typename T>
__global__ void softmax_rows_kernel(T* y, const T* x, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      m = xr[i] > m || xr[i] != xr[i] ? xr[i] : m;
    m = block_max(m);
    if (m == -T(INFINITY)) m = 0;  // a row of -inf: exp(-inf - 0) = 0
    T s = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += exp(xr[i] - m);
    s = block_sum(s);
    if (log) {
      const T lse = ::log(s);
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = xr[i] - m - lse;
    } else {
      const T inv = T(1) / s;
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = exp(xr[i] - m) * inv;
    }
  }
}

template <typename T>
__global__ void softmax_rows_backward_kernel(T* dx, const T* g, const T* y, int64_t rows,
                                             int64_t cols, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * cols;
    const T* yr = y + r * cols;
    T acc = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) acc += log ? gr[i] : gr[i] * yr[i];
    acc = block_sum(acc);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      dx[r * cols + i] = log ? gr[i] - exp(yr[i]) * acc : yr[i] * (gr[i] - acc);
  }
}

// f32 and f64 only: the op takes f16/bf16 through f32.
template <typename F>
void dispatch_softmax(DType dtype, const char* what, F&& f) {
  if (dtype == DType::f32) return f(float{});
  if (dtype == DType::f64) return f(double{});
  TANDEM_THROW(NotImplementedError, what, ": f32 and f64 only, got ", dtype);
}

void softmax_rows(const Tensor& out, const Tensor& in, bool log) {
  const int64_t cols = in.size(-1), rows = cols > 0 ? in.numel() / cols : 0;
  if (rows == 0) return;
  cuda::TensorDeviceGuard guard(in);
  dispatch_softmax(in.dtype(), "softmax (cuda)", [&](auto t) {
    using T = decltype(t);
    softmax_rows_kernel<T><<<row_blocks(rows), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(out), ptr<const T>(in), rows, cols, log);
    cuda::check_launch("softmax_rows");
  });
}

void softmax_rows_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out,
                           bool log) {
  const int64_t cols = out.size(-1), rows = cols > 0 ? out.numel() / cols : 0;
  if (rows == 0) return;
  cuda::TensorDeviceGuard guard(out);
  dispatch_softmax(out.dtype(), "softmax_backward (cuda)", [&](auto t) {
    using T = decltype(t);
    softmax_rows_backward_kernel<T>
        <<<row_blocks(rows), cuda::kThreads, 0, cuda::current_stream()>>>(
            ptr<T>(grad_in), ptr<const T>(grad_out), ptr<const T>(out), rows, cols, log);
    cuda::check_launch("softmax_rows_backward");
  });
}

// --- pooling: src/kernels/pool.hpp's math, one thread per element written (max pooling over
// channels-last maps: per V neighbouring channels, one 16-byte vector of each) ---------------
template <typename C>
struct Load {
  template <typename T>
  __device__ __forceinline__ C operator()(T v) const { return convert<C>(v); }
};

template <int V, typename T>
__device__ __forceinline__ void store_vec(T* p, int64_t i, const cuda::Vec<T, V>& v) {
  reinterpret_cast<cuda::Vec<T, V>*>(p)[i] = v;
}

// V lanes of neighbouring channels of a channels-last map from one 16-byte vector (V = 1: one
// element), for max_windows and max_gradients.
template <typename C>
struct LoadLanes {
  template <typename T, int V>
  __device__ __forceinline__ void operator()(const T* x, int64_t offset, C (&v)[V]) const {
    const cuda::Vec<T, V> w = *reinterpret_cast<const cuda::Vec<T, V>*>(x + offset);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = convert<C>(w.v[k]);
  }
};

// Max pooling V channels per thread (channels-last, C a multiple of V) or one element.
template <int V, typename T>
__global__ void max_pool_kernel(T* y, int64_t* indices, const T* x, pool::Geometry g,
                                pool::SiteOf site, Pool2dParams p, int64_t vecs) {
  using C = compute_t<T>;
  TANDEM_CUDA_LOOP(i, vecs) {
    C best[V];
    int64_t index[V];
    pool::max_windows<V, C>(x, g, p, site(i * V), best, index, LoadLanes<C>{});
    cuda::Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      out.v[k] = convert<T>(best[k]);
      indices[i * V + k] = index[k];
    }
    store_vec<V>(y, i, out);
  }
}

template <int V, typename T>
__global__ void max_pool_backward_kernel(T* dx, const T* dy, const int64_t* indices,
                                         pool::Geometry g, pool::SiteOf site, Pool2dParams p,
                                         int64_t vecs) {
  using C = compute_t<T>;
  TANDEM_CUDA_LOOP(i, vecs) {
    C s[V];
    pool::max_gradients<V, C>(dy, indices, g, p, site(i * V), s, LoadLanes<C>{});
    cuda::Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = convert<T>(s[k]);
    store_vec<V>(dx, i, out);
  }
}

template <typename T>
__global__ void avg_pool_kernel(T* y, const T* x, pool::Geometry g, pool::SiteOf site,
                                Pool2dParams p, int64_t count) {
  using C = compute_t<T>;
  const C inv = pool::uniform_inverse<C>(g, p);
  TANDEM_CUDA_LOOP(o, count) {
    y[o] = convert<T>(pool::avg_window<C>(x, g, p, inv, site(o), Load<C>{}));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(T* dx, const T* dy, pool::Geometry g, pool::SiteOf site,
                                         Pool2dParams p, int64_t count) {
  using C = compute_t<T>;
  const C inv = pool::uniform_inverse<C>(g, p);
  TANDEM_CUDA_LOOP(i, count) {
    dx[i] = convert<T>(pool::avg_gradient<C>(dy, g, p, inv, site(i), Load<C>{}));
  }
}

template <typename T>
__global__ void adaptive_avg_pool_kernel(T* y, const T* x, pool::Geometry g, pool::SiteOf site,
                                         int64_t count) {
  using C = compute_t<T>;
  TANDEM_CUDA_LOOP(o, count) {
    y[o] = convert<T>(pool::adaptive_avg_window<C>(x, g, site(o), Load<C>{}));
  }
}

template <typename T>
__global__ void adaptive_avg_pool_backward_kernel(T* dx, const T* dy, pool::Geometry g,
                                                  pool::SiteOf site, int64_t count) {
  using C = compute_t<T>;
  TANDEM_CUDA_LOOP(i, count) {
    dx[i] = convert<T>(pool::adaptive_avg_gradient<C>(dy, g, site(i), Load<C>{}));
  }
}

// launch(t, blocks, stream, sites) starts kernel<T> over the `written` tensor's elements for
// the floating dtype of `like`; sites finds them in the written maps (rows x cols each).
template <typename Launch>
void launch_pool(const Tensor& like, const Tensor& written, const pool::Geometry& g,
                 int64_t rows, int64_t cols, const char* what, Launch launch) {
  const int64_t count = written.numel();
  if (count == 0) return;
  cuda::TensorDeviceGuard guard(like);
  const pool::SiteOf sites(g, rows, cols, count);
  cuda::dispatch<true>(like.dtype(), what, [&](auto t) {
    launch(t, cuda::grid_for(count), cuda::current_stream(), sites);
    cuda::check_launch(what);
  });
}

// launch(V, vecs) over the channels-last maps of `tensors` in V-channel vectors where the dtype
// has them and lanes_fit; else V = 1 over `count` elements.
template <typename T, typename Launch>
void launch_pool_lanes(const pool::Geometry& g, int64_t count,
                       std::initializer_list<const Tensor*> tensors, Launch launch) {
  if constexpr (cuda::kVectorizable<T>) {
    constexpr int V = cuda::kVec<T, T>;
    if (lanes_fit<T, V>(g.channels_last && g.c % V == 0, tensors))
      return launch(std::integral_constant<int, V>{}, count / V);
  }
  launch(std::integral_constant<int, 1>{}, count);
}

void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& in,
                        const Pool2dParams& p) {
  const pool::Geometry g = pool::geometry(in, out);
  launch_pool(in, out, g, g.ho, g.wo, "max_pool2d (cuda)",
              [&](auto t, unsigned, cudaStream_t s, const pool::SiteOf& sites) {
                using T = decltype(t);
                launch_pool_lanes<T>(g, out.numel(), {&out, &in}, [&](auto v, int64_t vecs) {
                  max_pool_kernel<decltype(v)::value><<<cuda::grid_for(vecs), cuda::kThreads, 0, s>>>(
                      ptr<T>(out), ptr<int64_t>(indices), ptr<const T>(in), g, sites, p, vecs);
                });
              });
}

void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices,
                         const Pool2dParams& p) {
  const pool::Geometry g = pool::geometry(grad_in, grad_out);
  launch_pool(grad_in, grad_in, g, g.h, g.w, "max_pool2d_backward (cuda)",
              [&](auto t, unsigned, cudaStream_t s, const pool::SiteOf& sites) {
                using T = decltype(t);
                launch_pool_lanes<T>(g, grad_in.numel(), {&grad_in, &grad_out},
                                     [&](auto v, int64_t vecs) {
                  max_pool_backward_kernel<decltype(v)::value>
                      <<<cuda::grid_for(vecs), cuda::kThreads, 0, s>>>(
                          ptr<T>(grad_in), ptr<const T>(grad_out), ptr<const int64_t>(indices),
                          g, sites, p, vecs);
                });
              });
}

void avg_pool2d_forward(const Tensor& out, const Tensor& in, const Pool2dParams& p) {
  const pool::Geometry g = pool::geometry(in, out);
  launch_pool(in, out, g, g.ho, g.wo, "avg_pool2d (cuda)",
              [&](auto t, unsigned blocks, cudaStream_t s, const pool::SiteOf& sites) {
                using T = decltype(t);
                avg_pool_kernel<<<blocks, cuda::kThreads, 0, s>>>(
                    ptr<T>(out), ptr<const T>(in), g, sites, p, out.numel());
              });
}

void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Pool2dParams& p) {
  const pool::Geometry g = pool::geometry(grad_in, grad_out);
  launch_pool(grad_in, grad_in, g, g.h, g.w, "avg_pool2d_backward (cuda)",
              [&](auto t, unsigned blocks, cudaStream_t s, const pool::SiteOf& sites) {
                using T = decltype(t);
                avg_pool_backward_kernel<<<blocks, cuda::kThreads, 0, s>>>(
                    ptr<T>(grad_in), ptr<const T>(grad_out), g, sites, p, grad_in.numel());
              });
}

void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& in) {
  const pool::Geometry g = pool::geometry(in, out);
  launch_pool(in, out, g, g.ho, g.wo, "adaptive_avg_pool2d (cuda)",
              [&](auto t, unsigned blocks, cudaStream_t s, const pool::SiteOf& sites) {
                using T = decltype(t);
                adaptive_avg_pool_kernel<<<blocks, cuda::kThreads, 0, s>>>(
                    ptr<T>(out), ptr<const T>(in), g, sites, out.numel());
              });
}

void adaptive_avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out) {
  const pool::Geometry g = pool::geometry(grad_in, grad_out);
  launch_pool(grad_in, grad_in, g, g.h, g.w, "adaptive_avg_pool2d_backward (cuda)",
              [&](auto t, unsigned blocks, cudaStream_t s, const pool::SiteOf& sites) {
                using T = decltype(t);
                adaptive_avg_pool_backward_kernel<<<blocks, cuda::kThreads, 0, s>>>(
                    ptr<T>(grad_in), ptr<const T>(grad_out), g, sites, grad_in.numel());
              });
}

}  // namespace

TANDEM_REGISTER_CUDA(batch_norm_stats, batch_norm_stats);
TANDEM_REGISTER_CUDA(batch_norm_update, batch_norm_update);
TANDEM_REGISTER_CUDA(batch_norm_forward, batch_norm_forward);
TANDEM_REGISTER_CUDA(batch_norm_backward, batch_norm_backward);
TANDEM_REGISTER_CUDA(layer_norm_forward, layer_norm_forward);
TANDEM_REGISTER_CUDA(layer_norm_backward, layer_norm_backward);
TANDEM_REGISTER_CUDA(softmax_rows, softmax_rows);
TANDEM_REGISTER_CUDA(softmax_rows_backward, softmax_rows_backward);
TANDEM_REGISTER_CUDA(max_pool2d_forward, max_pool2d_forward);
TANDEM_REGISTER_CUDA(max_pool2d_backward, max_pool2d_backward);
TANDEM_REGISTER_CUDA(avg_pool2d_forward, avg_pool2d_forward);
TANDEM_REGISTER_CUDA(avg_pool2d_backward, avg_pool2d_backward);
TANDEM_REGISTER_CUDA(adaptive_avg_pool2d_forward, adaptive_avg_pool2d_forward);
TANDEM_REGISTER_CUDA(adaptive_avg_pool2d_backward, adaptive_avg_pool2d_backward);

}  // namespace tandem::kernels::cuda_backend
