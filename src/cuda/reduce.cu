// CUDA row reductions, the classification losses' gather/scatter and the fused optimizer
// updates. Reductions give the CPU backend's answers: sums accumulate in f32 (f64 for f64,
// int64 for integers; the CPU sums floats in f64, so f32 sums agree to rounding), max/min and
// their indices pick the first extreme, and the first NaN when there is one.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../kernels/kernels.hpp"
#include "../kernels/optim_update.hpp"
#include "loops.cuh"
#include "tandem/cuda/runtime.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

using cuda::compute_t;
using cuda::convert;
using cuda::ptr;

// --- row reductions --------------------------------------------------------------------------
template <typename T>
using sum_acc_t = std::conditional_t<cuda::is_float_v<T>, compute_t<T>, int64_t>;

template <typename C>
__device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

// (value, index) of the best so far: candidate (v, i) beats it when it is the first NaN, or a
// strictly better number, or an equal one at a lower index (partials combine in any order).
template <bool kMax, typename C>
__device__ __forceinline__ bool beats(C v, int64_t i, C best, int64_t best_i) {
  if (best_i < 0) return i >= 0;
  if (i < 0) return false;
  if (is_nan(best)) return is_nan(v) && i < best_i;
  if (is_nan(v)) return true;
  if (v == best) return i < best_i;
  return kMax ? v > best : v < best;
}

// Threads per row: a warp for short rows, a whole block for long ones.
template <int kTpr>
__device__ __forceinline__ int lane() {
  return threadIdx.x % kTpr;
}

// The best (value, index) so far; i < 0: none yet.
template <typename C>
struct Partial {
  C a;
  int64_t i;
};
template <typename C>
__device__ __forceinline__ Partial<C> shuffle_down(Partial<C> p, int delta) {
  return {cuda::shuffle_down(p.a, delta), cuda::shuffle_down(p.i, delta)};
}

template <int kTpr, typename T, typename R>
__global__ void sum_rows_kernel(R* out, const T* in, int64_t rows, int64_t cols) {
  using A = sum_acc_t<T>;
  constexpr int kRowsPerBlock = cuda::kThreads / kTpr;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t r = r0 + threadIdx.x / kTpr;
    A s = 0;
    if (r < rows)
      for (int64_t c = lane<kTpr>(); c < cols; c += kTpr) s += static_cast<A>(convert<compute_t<T>>(in[r * cols + c]));
    s = cuda::group_reduce<kTpr>(s, cuda::Plus{}, A(0));
    if (r < rows && lane<kTpr>() == 0) out[r] = convert<R>(s);
  }
}

// A part of each row's sum: block (part, r) sums its slice of row r's columns into
// partial[r * parts + part], in the row's accumulator type.
template <typename T>
__global__ void sum_parts_kernel(sum_acc_t<T>* partial, const T* in, int64_t cols,
                                 int64_t parts) {
  using A = sum_acc_t<T>;
  const int64_t r = blockIdx.y, part = blockIdx.x;
  const int64_t begin = cols * part / parts, end = cols * (part + 1) / parts;
  A s = 0;
  for (int64_t c = begin + threadIdx.x; c < end; c += blockDim.x)
    s += static_cast<A>(convert<compute_t<T>>(in[r * cols + c]));
  s = cuda::group_reduce<cuda::kThreads>(s, cuda::Plus{}, A(0));
  if (threadIdx.x == 0) partial[r * parts + part] = s;
}

template <int kTpr, bool kMax, bool kIndex, typename T, typename R>
__global__ void extreme_rows_kernel(R* out, const T* in, int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  constexpr int kRowsPerBlock = cuda::kThreads / kTpr;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t r = r0 + threadIdx.x / kTpr;
    Partial<C> best{C(0), -1};
    if (r < rows)
      for (int64_t c = lane<kTpr>(); c < cols; c += kTpr) {
        const C v = convert<C>(in[r * cols + c]);
        if (beats<kMax>(v, c, best.a, best.i)) best = Partial<C>{v, c};
      }
    auto combine = [](Partial<C> x, Partial<C> y) {
      return beats<kMax>(y.a, y.i, x.a, x.i) ? y : x;
    };
    const Partial<C> p = cuda::group_reduce<kTpr>(best, combine, Partial<C>{C(0), -1});
    if (r < rows && lane<kTpr>() == 0) {
      if constexpr (kIndex) {
        out[r] = static_cast<R>(p.i < 0 ? 0 : p.i);
      } else {
        out[r] = convert<R>(p.a);
      }
    }
  }
}

template <typename Launch>
void for_row_width(int64_t cols, Launch launch) {
  if (cols >= 1024) {
    launch(std::integral_constant<int, cuda::kThreads>{});
  } else {
    launch(std::integral_constant<int, 32>{});
  }
}

// Sums of a few long rows (a whole tensor's: a gradient's norm, a loss) would leave all but a
// few SMs idle with one block per row: each row is cut into parts of about kPartCols columns,
// summed by blocks of their own into partials in the accumulator type, and reduce_rows then sums
// the parts as rows of their own. The part count depends on the shape only (one order per shape).
constexpr int64_t kPartCols = 16384;

bool sum_in_parts(int64_t rows, int64_t cols) { return rows < 128 && cols >= 2 * kPartCols; }

// The (rows, parts) partial sums of `in`'s rows.
Tensor sum_parts(const Tensor& in, int64_t rows, int64_t cols) {
  const int64_t parts =
      std::min<int64_t>((cols + kPartCols - 1) / kPartCols, std::max<int64_t>(2, 1024 / rows));
  Tensor partial;
  cuda::dispatch(in.dtype(), "reduce_rows (cuda)", [&](auto t) {
    using T = decltype(t);
    using A = sum_acc_t<T>;
    const DType acc = std::is_same_v<A, float>    ? DType::f32
                      : std::is_same_v<A, double> ? DType::f64
                                                  : DType::i64;
    partial = make_tensor({rows, parts}, acc, in.device());
    sum_parts_kernel<T><<<dim3(static_cast<unsigned>(parts), static_cast<unsigned>(rows)),
                          cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<A>(partial), ptr<const T>(in), cols, parts);
    cuda::check_launch("reduce_rows (parts)");
  });
  return partial;
}

void reduce_rows(const Tensor& out, ReduceOp op, const Tensor& in, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  cuda::TensorDeviceGuard guard(out);
  if (op == ReduceOp::sum && sum_in_parts(rows, cols)) {
    const Tensor partial = sum_parts(in, rows, cols);
    return reduce_rows(out, op, partial, rows, partial.size(1));
  }
  for_row_width(cols, [&](auto tpr) {
    constexpr int kTpr = decltype(tpr)::value;
    const int64_t blocks_needed = (rows + cuda::kThreads / kTpr - 1) / (cuda::kThreads / kTpr);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_needed, 65536));
    cudaStream_t stream = cuda::current_stream();
    cuda::dispatch(in.dtype(), "reduce_rows (cuda)", [&](auto t) {
      using T = decltype(t);
      const T* p = ptr<const T>(in);
      switch (op) {
        case ReduceOp::sum:
          cuda::dispatch(out.dtype(), "sum (cuda)", [&](auto r) {
            using R = decltype(r);
            sum_rows_kernel<kTpr, T><<<blocks, cuda::kThreads, 0, stream>>>(ptr<R>(out), p, rows, cols);
          });
          break;
        case ReduceOp::max:
          extreme_rows_kernel<kTpr, true, false, T><<<blocks, cuda::kThreads, 0, stream>>>(ptr<T>(out), p, rows, cols);
          break;
        case ReduceOp::min:
          extreme_rows_kernel<kTpr, false, false, T><<<blocks, cuda::kThreads, 0, stream>>>(ptr<T>(out), p, rows, cols);
          break;
        case ReduceOp::argmax:
          extreme_rows_kernel<kTpr, true, true, T><<<blocks, cuda::kThreads, 0, stream>>>(ptr<int64_t>(out), p, rows, cols);
          break;
        case ReduceOp::argmin:
          extreme_rows_kernel<kTpr, false, true, T><<<blocks, cuda::kThreads, 0, stream>>>(ptr<int64_t>(out), p, rows, cols);
          break;
      }
      cuda::check_launch("reduce_rows");
    });
  });
}

// --- scans and sorts along rows ----------------------------------------------------------------
// A scan runs a block per row over chunks of kThreads elements: a Hillis-Steele scan of the
// chunk in shared memory, then the carry of the chunks before it. Sums accumulate as
// reduce_rows's do (f32 for f32/f16/bf16, f64, int64).
template <typename T>
__global__ void scan_rows_kernel(T* out, const T* in, int64_t rows, int64_t cols, bool prod,
                                 bool reverse, bool exclusive) {
  using A = sum_acc_t<T>;
  __shared__ A buf[cuda::kThreads];
  const A identity = prod ? A(1) : A(0);
  const int t = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A carry = identity;
    for (int64_t c0 = 0; c0 < cols; c0 += cuda::kThreads) {
      const int64_t i = c0 + t, c = reverse ? cols - 1 - i : i;
      buf[t] = i < cols ? static_cast<A>(convert<compute_t<T>>(in[r * cols + c])) : identity;
      for (int off = 1; off < cuda::kThreads; off *= 2) {
        __syncthreads();
        const A other = t >= off ? buf[t - off] : identity;
        __syncthreads();
        buf[t] = prod ? buf[t] * other : buf[t] + other;
      }
      __syncthreads();
      if (i < cols) {
        const A own = exclusive ? (t > 0 ? buf[t - 1] : identity) : buf[t];
        out[r * cols + c] = convert<T>(prod ? carry * own : carry + own);
      }
      const A total = buf[cuda::kThreads - 1];
      __syncthreads();  // buf is rewritten by the next chunk
      carry = prod ? carry * total : carry + total;
    }
  }
}

void scan_rows(const Tensor& out, const Tensor& in, int64_t rows, int64_t cols, ScanOp op,
               bool reverse, bool exclusive) {
  if (rows == 0) return;
  cuda::TensorDeviceGuard guard(out);
  cuda::dispatch(in.dtype(), "scan_rows (cuda)", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>) {
      TANDEM_THROW(NotImplementedError, "scan_rows (cuda): bool");  // the op makes bool i64
    } else {
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65536));
      scan_rows_kernel<T><<<blocks, cuda::kThreads, 0, cuda::current_stream()>>>(
          ptr<T>(out), ptr<const T>(in), rows, cols, op == ScanOp::prod, reverse, exclusive);
      cuda::check_launch("scan_rows");
    }
  });
}

// A sort is a bitonic network over each row padded to a power of two, in global memory: one
// launch per stage, (key, position) pairs compared as the CPU's std::sort compares them (by
// value, NaN above every number, then by position; padding after everything), so both devices
// give the same permutation.
template <bool kDesc, typename K>
__device__ __forceinline__ bool sorts_before(K a, int64_t ia, K b, int64_t ib, int64_t cols) {
  if (ia >= cols || ib >= cols) return ia < ib;
  const bool na = is_nan(a), nb = is_nan(b);
  if (na || nb) return na && nb ? ia < ib : (kDesc ? na : nb);
  if (a != b) return kDesc ? a > b : a < b;
  return ia < ib;
}

template <typename T>
__global__ void sort_init_kernel(compute_t<T>* keys, int64_t* pos, const T* in, int64_t rows,
                                 int64_t cols, int log2_padded) {
  TANDEM_CUDA_LOOP(e, rows << log2_padded) {
    const int64_t r = e >> log2_padded, i = e & ((int64_t{1} << log2_padded) - 1);
    keys[e] = i < cols ? convert<compute_t<T>>(in[r * cols + i]) : compute_t<T>{};
    pos[e] = i;
  }
}

// Stage (k, j): element i and its partner i ^ j are put in order, ascending where bit k of i
// is 0 and descending where it is 1.
template <bool kDesc, typename K>
__global__ void sort_stage_kernel(K* keys, int64_t* pos, int64_t total, int64_t padded,
                                  int64_t cols, int64_t k, int64_t j) {
  TANDEM_CUDA_LOOP(e, total) {
    const int64_t partner = e ^ j;  // j < the padded length: the same row
    if (partner <= e) continue;
    const bool up = (e & (padded - 1) & k) == 0;  // bit k of the position within the row
    const K a = keys[e], b = keys[partner];
    const int64_t ia = pos[e], ib = pos[partner];
    if (up ? sorts_before<kDesc>(b, ib, a, ia, cols) : sorts_before<kDesc>(a, ia, b, ib, cols)) {
      keys[e] = b;
      keys[partner] = a;
      pos[e] = ib;
      pos[partner] = ia;
    }
  }
}

__global__ void sort_take_kernel(int64_t* indices, const int64_t* pos, int64_t rows, int64_t k,
                                 int log2_padded) {
  TANDEM_CUDA_LOOP(e, rows * k) {
    const int64_t r = e / k, c = e % k;
    indices[e] = pos[(r << log2_padded) + c];
  }
}

void sort_rows(const Tensor& indices, const Tensor& in, int64_t rows, int64_t cols, int64_t k,
               bool descending) {
  if (rows == 0 || k == 0) return;
  cuda::TensorDeviceGuard guard(indices);
  int log2_padded = 0;
  while ((int64_t{1} << log2_padded) < cols) ++log2_padded;
  const int64_t padded = int64_t{1} << log2_padded, total = rows * padded;
  cudaStream_t stream = cuda::current_stream();
  Tensor pos = make_tensor({rows, padded}, DType::i64, in.device());
  cuda::dispatch(in.dtype(), "sort_rows (cuda)", [&](auto t) {
    using T = decltype(t);
    using K = compute_t<T>;
    const DType key_dtype = std::is_same_v<K, float>    ? DType::f32
                            : std::is_same_v<K, double> ? DType::f64
                                                        : in.dtype();
    Tensor keys = make_tensor({rows, padded}, key_dtype, in.device());
    sort_init_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
        ptr<K>(keys), ptr<int64_t>(pos), ptr<const T>(in), rows, cols, log2_padded);
    cuda::check_launch("sort_rows (init)");
    for (int64_t size = 2; size <= padded; size *= 2)
      for (int64_t j = size / 2; j > 0; j /= 2) {
        if (descending) {
          sort_stage_kernel<true, K><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
              ptr<K>(keys), ptr<int64_t>(pos), total, padded, cols, size, j);
        } else {
          sort_stage_kernel<false, K><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
              ptr<K>(keys), ptr<int64_t>(pos), total, padded, cols, size, j);
        }
        cuda::check_launch("sort_rows (stage)");
      }
  });
  sort_take_kernel<<<cuda::grid_for(rows * k), cuda::kThreads, 0, stream>>>(
      ptr<int64_t>(indices), ptr<const int64_t>(pos), rows, k, log2_padded);
  cuda::check_launch("sort_rows (take)");
}

// --- losses ------------------------------------------------------------------------------------
// A target outside [0, classes) records the first position holding one in *bad (atomicMin) and
// picks 0; *bad is read at the next check point (cuda::defer_check), where IndexError is thrown
// as the CPU throws it before its loop, and the host does not wait for the kernel here.
template <typename T>
__global__ void pick_classes_kernel(T* out, const T* x, const int64_t* target, int64_t rows,
                                    int64_t classes, int64_t ignore_index,
                                    unsigned long long* bad) {
  TANDEM_CUDA_LOOP(i, rows) {
    const int64_t t = target[i];
    if (t == ignore_index) {
      out[i] = convert<T>(0.0f);
    } else if (t < 0 || t >= classes) {
      atomicMin(bad, static_cast<unsigned long long>(i));
      out[i] = convert<T>(0.0f);
    } else {
      out[i] = x[i * classes + t];
    }
  }
}

void pick_classes(const Tensor& out, const Tensor& x, const Tensor& target, int64_t ignore_index,
                  const char* op) {
  const int64_t rows = x.size(0), classes = x.size(1);
  if (rows == 0) return;
  Tensor bad = make_tensor({1}, DType::i64, x.device());
  fill(bad, -1.0);  // all bits set: the largest unsigned value
  cuda::TensorDeviceGuard guard(out);
  cuda::dispatch<true>(x.dtype(), "pick_classes (cuda)", [&](auto t) {
    using T = decltype(t);
    pick_classes_kernel<<<cuda::grid_for(rows), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(out), ptr<const T>(x), ptr<const int64_t>(target), rows, classes, ignore_index,
        ptr<unsigned long long>(bad));
    cuda::check_launch("pick_classes");
  });
  // Read later (cuda::defer_check), not here: reading it would stop the host until the forward
  // is done on the GPU, in every training step. A bad target picks 0 meanwhile, and the error
  // comes before an optimizer step or with the next value the host reads.
  cuda::defer_check(bad.raw_data(), x.device().index(),
                    [target, classes, op = std::string(op)](int64_t position) {
                      if (position < 0) return;
                      const int64_t value = target.narrow(0, position, 1).item<int64_t>();
                      TANDEM_THROW(IndexError, op, ": target ", value, " is out of bounds for ",
                                   classes, " classes (at position ", position, ")");
                    });
}

template <typename T>
__global__ void pick_classes_backward_kernel(T* grad_x, const T* grad, const int64_t* target,
                                             int64_t rows, int64_t classes,
                                             int64_t ignore_index) {
  TANDEM_CUDA_LOOP(j, rows * classes) {
    const int64_t i = j / classes, t = target[i];
    grad_x[j] = (t != ignore_index && j - i * classes == t) ? grad[i] : convert<T>(0.0f);
  }
}

void pick_classes_backward(const Tensor& grad_x, const Tensor& grad, const Tensor& target,
                           int64_t ignore_index) {
  const int64_t rows = grad_x.size(0), classes = grad_x.size(1);
  if (rows * classes == 0) return;
  cuda::TensorDeviceGuard guard(grad_x);
  cuda::dispatch<true>(grad_x.dtype(), "pick_classes_backward (cuda)", [&](auto t) {
    using T = decltype(t);
    pick_classes_backward_kernel<<<cuda::grid_for(rows * classes), cuda::kThreads, 0,
                                   cuda::current_stream()>>>(
        ptr<T>(grad_x), ptr<const T>(grad), ptr<const int64_t>(target), rows, classes,
        ignore_index);
    cuda::check_launch("pick_classes_backward");
  });
}

// --- optimizer updates: the CPU's, element for element (kernels/optim_update.hpp) ----------
// Calls f(T{}) for parameters of f32 or f64, the dtypes of the optimizer updates on the GPU;
// refuses the others, naming `what`.
template <typename F>
void dispatch_params(DType dtype, const char* what, F&& f) {
  cuda::dispatch<true>(dtype, what, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, compute_t<T>>) {
      f(t);
    } else {
      TANDEM_THROW(NotImplementedError, what, ": parameters are f32 or f64, got ", dtype);
    }
  });
}

template <typename T>
__global__ void sgd_kernel(T* p, T* buf, const T* g, int64_t n, cuda::OffsetCalc<3> oc,
                           SgdConstants<T> c) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[3];
    oc.get(i, off);
    sgd_update(p[off[0]], buf ? &buf[off[1]] : nullptr, g[off[2]], c);
  }
}

void sgd_step(const Tensor& param, const Tensor& momentum_buffer, const Tensor& grad,
              const SgdArgs& args) {
  const int64_t n = param.numel();
  if (n == 0) return;
  const bool has_buffer = momentum_buffer.defined();
  auto oc = cuda::offsets<3>(param.shape(),
                             {param.strides(), has_buffer ? momentum_buffer.strides() : param.strides(),
                              grad.strides()});
  cuda::TensorDeviceGuard guard(param);
  dispatch_params(param.dtype(), "sgd_step (cuda)", [&](auto t) {
    using T = decltype(t);
    sgd_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(param), has_buffer ? ptr<T>(momentum_buffer) : nullptr, ptr<const T>(grad), n, oc,
        SgdConstants<T>(args));
    cuda::check_launch("sgd_step");
  });
}

// Many dense parameters in one launch (PyTorch's multi_tensor_apply shape): a table of up to
// kTensors tensors, each given by kLists pointers (parameter, state, gradient), and of up to
// kBatchBlocks blocks, each one chunk of kChunk elements of one tensor. The table travels as the
// kernel's argument, under 4 KB with the update's constants.
constexpr int kBatchBlocks = 320;
constexpr int64_t kChunk = 65536;
constexpr int kChunkThreads = 512;  // a chunk's block

template <typename T, int kLists, int kTensors>
struct ChunkTable {
  static constexpr int kMaxTensors = kTensors;
  T* ptr[kLists][kTensors];
  int64_t n[kTensors];
  uint8_t tensor_of[kBatchBlocks];
  int32_t chunk_of[kBatchBlocks];
  // The block's tensor and its element range [begin, end).
  __device__ int block_range(int64_t& begin, int64_t& end) const {
    const int t = tensor_of[blockIdx.x];
    begin = chunk_of[blockIdx.x] * kChunk;
    end = begin + kChunk < n[t] ? begin + kChunk : n[t];
    return t;
  }
};

// Packs dense tensors of numels[i] elements into tables: set(table, slot, i) fills slot `slot`
// with tensor i's pointers and whatever else the table holds per tensor, launch(table, blocks)
// runs a full table. A tensor of many chunks may span tables; it takes a slot in each.
template <typename Table, typename Set, typename Launch>
void launch_chunks(const std::vector<int64_t>& numels, Set set, Launch launch) {
  Table table{};
  int tensors = 0, blocks = 0;
  auto flush = [&] {
    if (blocks > 0) launch(table, blocks);
    table = Table{};
    tensors = blocks = 0;
  };
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t chunks = (numels[i] + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (tensors == Table::kMaxTensors || blocks == kBatchBlocks) flush();
      if (c == 0 || tensors == 0) {  // a new tensor, or this one again after a launch
        table.n[tensors] = numels[i];
        set(table, tensors, i);
        ++tensors;
      }
      table.tensor_of[blocks] = static_cast<uint8_t>(tensors - 1);
      table.chunk_of[blocks] = static_cast<int32_t>(c);
      ++blocks;
    }
  }
  flush();
}

// Parameter, state and gradient dense and laid out alike: element i is at offset i in each.
bool dense_alike(const Tensor& param, std::initializer_list<const Tensor*> others) {
  if (!param.is_contiguous(param.suggest_memory_format())) return false;
  for (const Tensor* t : others)
    if (t->defined() && t->strides() != param.strides()) return false;
  return true;
}

// One batched step over `entries`: those of key's dtype whose tensors are is_dense go in chunk
// tables of Batch (set(table, slot, entry) fills a slot, launch(table, blocks) runs a table);
// the others are stepped alone, one launch each.
template <typename Batch, typename Entry, typename IsDense, typename Alone, typename Set,
          typename Launch>
void steps_in_chunks(const Tensor& key, const std::vector<Entry>& entries, const char* name,
                     IsDense is_dense, Alone alone, Set set, Launch launch) {
  std::vector<const Entry*> dense;
  std::vector<int64_t> numels;
  for (const Entry& e : entries) {
    if (e.param.numel() == 0) continue;
    TANDEM_CHECK(e.param.device() == key.device(), name, ": a parameter on ", e.param.device(),
                 " in a step on ", key.device());
    if (e.param.dtype() != key.dtype() || !is_dense(e)) {
      alone(e);
      continue;
    }
    dense.push_back(&e);
    numels.push_back(e.param.numel());
  }
  launch_chunks<Batch>(
      numels, [&](Batch& b, int slot, size_t i) { set(b, slot, *dense[i]); }, launch);
}

template <typename T>
struct SgdBatch : ChunkTable<T, 3, 48> {  // parameter, momentum buffer (or null), gradient
  bool first[48];
};

static_assert(sizeof(SgdBatch<double>) + sizeof(SgdConstants<double>) <= 4096,
              "a kernel argument of 4 KB at most");

template <typename T>
__global__ void sgd_batch_kernel(SgdBatch<T> b, SgdConstants<T> c) {
  int64_t begin, end;
  const int t = b.block_range(begin, end);
  c.first = b.first[t];
  T* p = b.ptr[0][t];
  T* buf = b.ptr[1][t];
  const T* g = b.ptr[2][t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    sgd_update(p[i], buf ? &buf[i] : nullptr, g[i], c);
}

void sgd_steps(const Tensor& key, const std::vector<SgdEntry>& entries, const SgdArgs& args) {
  cuda::TensorDeviceGuard guard(key);
  dispatch_params(key.dtype(), "sgd_steps (cuda)", [&](auto t) {
    using T = decltype(t);
    steps_in_chunks<SgdBatch<T>>(
        key, entries, "sgd_steps",
        [](const SgdEntry& e) {
          return dense_alike(e.param, {&e.buffer, &e.grad});
        },
        [&](const SgdEntry& e) {
          SgdArgs a = args;
          a.first = e.first;
          sgd_step(e.param, e.buffer, e.grad, a);
        },
        [&](SgdBatch<T>& b, int slot, const SgdEntry& e) {
          b.ptr[0][slot] = ptr<T>(e.param);
          b.ptr[1][slot] = e.buffer.defined() ? ptr<T>(e.buffer) : nullptr;
          b.ptr[2][slot] = const_cast<T*>(ptr<const T>(e.grad));
          b.first[slot] = e.first;
        },
        [&](const SgdBatch<T>& b, int blocks) {
          sgd_batch_kernel<<<blocks, kChunkThreads, 0, cuda::current_stream()>>>(
              b, SgdConstants<T>(args));
          cuda::check_launch("sgd_steps");
        });
  });
}

template <typename T>
__global__ void adam_kernel(T* p, T* m, T* v, T* vmax, const T* g, int64_t n,
                            cuda::OffsetCalc<5> oc, AdamConstants<T> c) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[5];
    oc.get(i, off);
    adam_update(p[off[0]], m[off[1]], v[off[2]], vmax ? vmax + off[3] : nullptr, g[off[4]], c);
  }
}

void adam_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const Tensor& grad, const AdamArgs& args) {
  const int64_t n = param.numel();
  if (n == 0) return;
  const bool amsgrad = max_exp_avg_sq.defined();  // else the fifth offsets are never used
  auto oc = cuda::offsets<5>(param.shape(),
                             {param.strides(), exp_avg.strides(), exp_avg_sq.strides(),
                              (amsgrad ? max_exp_avg_sq : exp_avg_sq).strides(), grad.strides()});
  cuda::TensorDeviceGuard guard(param);
  dispatch_params(param.dtype(), "adam_step (cuda)", [&](auto t) {
    using T = decltype(t);
    adam_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(param), ptr<T>(exp_avg), ptr<T>(exp_avg_sq),
        amsgrad ? ptr<T>(max_exp_avg_sq) : nullptr, ptr<const T>(grad), n, oc,
        AdamConstants<T>(args));
    cuda::check_launch("adam_step");
  });
}

template <typename T>
struct AdamBatch : ChunkTable<T, 5, 32> {  // parameter, exp_avg, exp_avg_sq, its max (or null),
  T root_bias2[32], step[32];              // gradient; each tensor's bias-correction constants
};

static_assert(sizeof(AdamBatch<double>) + sizeof(AdamConstants<double>) <= 4096,
              "a kernel argument of 4 KB at most");

template <typename T>
__global__ void adam_batch_kernel(AdamBatch<T> b, AdamConstants<T> c) {
  int64_t begin, end;
  const int t = b.block_range(begin, end);
  c.root_bias2 = b.root_bias2[t];
  c.step = b.step[t];
  T* p = b.ptr[0][t];
  T* m = b.ptr[1][t];
  T* v = b.ptr[2][t];
  T* vmax = b.ptr[3][t];
  const T* g = b.ptr[4][t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adam_update(p[i], m[i], v[i], vmax ? vmax + i : nullptr, g[i], c);
}

void adam_steps(const Tensor& key, const std::vector<AdamEntry>& entries, const AdamArgs& args) {
  cuda::TensorDeviceGuard guard(key);
  dispatch_params(key.dtype(), "adam_steps (cuda)", [&](auto t) {
    using T = decltype(t);
    steps_in_chunks<AdamBatch<T>>(
        key, entries, "adam_steps",
        [](const AdamEntry& e) {
          return dense_alike(e.param, {&e.exp_avg, &e.exp_avg_sq, &e.max_exp_avg_sq, &e.grad});
        },
        [&](const AdamEntry& e) {
          adam_step(e.param, e.exp_avg, e.exp_avg_sq, e.max_exp_avg_sq, e.grad, e.args(args));
        },
        [&](AdamBatch<T>& b, int slot, const AdamEntry& e) {
          b.ptr[0][slot] = ptr<T>(e.param);
          b.ptr[1][slot] = ptr<T>(e.exp_avg);
          b.ptr[2][slot] = ptr<T>(e.exp_avg_sq);
          b.ptr[3][slot] = e.max_exp_avg_sq.defined() ? ptr<T>(e.max_exp_avg_sq) : nullptr;
          b.ptr[4][slot] = const_cast<T*>(ptr<const T>(e.grad));
          const AdamConstants<T> own(e.args(args));
          b.root_bias2[slot] = own.root_bias2;
          b.step[slot] = own.step;
        },
        [&](const AdamBatch<T>& b, int blocks) {
          adam_batch_kernel<<<blocks, kChunkThreads, 0, cuda::current_stream()>>>(
              b, AdamConstants<T>(args));
          cuda::check_launch("adam_steps");
        });
  });
}

template <typename T>
__global__ void rmsprop_kernel(T* p, T* sq, T* ga, T* buf, const T* g, int64_t n,
                               cuda::OffsetCalc<5> oc, RmspropConstants<T> c) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[5];
    oc.get(i, off);
    rmsprop_update(p[off[0]], sq[off[1]], ga ? ga + off[2] : nullptr, buf ? buf + off[3] : nullptr,
                   g[off[4]], c);
  }
}

// One parameter, any strides, in a launch of its own.
void rmsprop_step(const RmspropEntry& e, const RmspropArgs& args) {
  const int64_t n = e.param.numel();
  const bool centered = e.grad_avg.defined(), momentum = e.momentum_buffer.defined();
  auto oc = cuda::offsets<5>(
      e.param.shape(),
      {e.param.strides(), e.square_avg.strides(), (centered ? e.grad_avg : e.square_avg).strides(),
       (momentum ? e.momentum_buffer : e.square_avg).strides(), e.grad.strides()});
  dispatch_params(e.param.dtype(), "rmsprop_step (cuda)", [&](auto t) {
    using T = decltype(t);
    rmsprop_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(e.param), ptr<T>(e.square_avg), centered ? ptr<T>(e.grad_avg) : nullptr,
        momentum ? ptr<T>(e.momentum_buffer) : nullptr, ptr<const T>(e.grad), n, oc,
        RmspropConstants<T>(args));
    cuda::check_launch("rmsprop_step");
  });
}

template <typename T>
struct RmspropBatch : ChunkTable<T, 5, 32> {};  // parameter, square_avg, grad_avg (or null),
                                                // momentum buffer (or null), gradient
static_assert(sizeof(RmspropBatch<double>) + sizeof(RmspropConstants<double>) <= 4096,
              "a kernel argument of 4 KB at most");

template <typename T>
__global__ void rmsprop_batch_kernel(RmspropBatch<T> b, RmspropConstants<T> c) {
  int64_t begin, end;
  const int t = b.block_range(begin, end);
  T* p = b.ptr[0][t];
  T* sq = b.ptr[1][t];
  T* ga = b.ptr[2][t];
  T* buf = b.ptr[3][t];
  const T* g = b.ptr[4][t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    rmsprop_update(p[i], sq[i], ga ? ga + i : nullptr, buf ? buf + i : nullptr, g[i], c);
}

void rmsprop_steps(const Tensor& key, const std::vector<RmspropEntry>& entries,
                   const RmspropArgs& args) {
  cuda::TensorDeviceGuard guard(key);
  dispatch_params(key.dtype(), "rmsprop_steps (cuda)", [&](auto t) {
    using T = decltype(t);
    steps_in_chunks<RmspropBatch<T>>(
        key, entries, "rmsprop_steps",
        [](const RmspropEntry& e) {
          return dense_alike(e.param, {&e.square_avg, &e.grad_avg, &e.momentum_buffer, &e.grad});
        },
        [&](const RmspropEntry& e) { rmsprop_step(e, args); },
        [&](RmspropBatch<T>& b, int slot, const RmspropEntry& e) {
          b.ptr[0][slot] = ptr<T>(e.param);
          b.ptr[1][slot] = ptr<T>(e.square_avg);
          b.ptr[2][slot] = e.grad_avg.defined() ? ptr<T>(e.grad_avg) : nullptr;
          b.ptr[3][slot] = e.momentum_buffer.defined() ? ptr<T>(e.momentum_buffer) : nullptr;
          b.ptr[4][slot] = const_cast<T*>(ptr<const T>(e.grad));
        },
        [&](const RmspropBatch<T>& b, int blocks) {
          rmsprop_batch_kernel<<<blocks, kChunkThreads, 0, cuda::current_stream()>>>(
              b, RmspropConstants<T>(args));
          cuda::check_launch("rmsprop_steps");
        });
  });
}

template <typename T>
__global__ void adagrad_kernel(T* p, T* sum, const T* g, int64_t n, cuda::OffsetCalc<3> oc,
                               AdagradConstants<T> c) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[3];
    oc.get(i, off);
    adagrad_update(p[off[0]], sum[off[1]], g[off[2]], c);
  }
}

// One parameter, any strides, in a launch of its own.
void adagrad_step(const AdagradEntry& e, const AdagradArgs& args) {
  const int64_t n = e.param.numel();
  auto oc =
      cuda::offsets<3>(e.param.shape(), {e.param.strides(), e.sum.strides(), e.grad.strides()});
  dispatch_params(e.param.dtype(), "adagrad_step (cuda)", [&](auto t) {
    using T = decltype(t);
    adagrad_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(e.param), ptr<T>(e.sum), ptr<const T>(e.grad), n, oc,
        AdagradConstants<T>(args, e.lr));
    cuda::check_launch("adagrad_step");
  });
}

template <typename T>
struct AdagradBatch : ChunkTable<T, 3, 48> {  // parameter, sum, gradient; each tensor's rate
  T neg_lr[48];
};
static_assert(sizeof(AdagradBatch<double>) + sizeof(AdagradConstants<double>) <= 4096,
              "a kernel argument of 4 KB at most");

template <typename T>
__global__ void adagrad_batch_kernel(AdagradBatch<T> b, AdagradConstants<T> c) {
  int64_t begin, end;
  const int t = b.block_range(begin, end);
  c.neg_lr = b.neg_lr[t];
  T* p = b.ptr[0][t];
  T* sum = b.ptr[1][t];
  const T* g = b.ptr[2][t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adagrad_update(p[i], sum[i], g[i], c);
}

void adagrad_steps(const Tensor& key, const std::vector<AdagradEntry>& entries,
                   const AdagradArgs& args) {
  cuda::TensorDeviceGuard guard(key);
  dispatch_params(key.dtype(), "adagrad_steps (cuda)", [&](auto t) {
    using T = decltype(t);
    steps_in_chunks<AdagradBatch<T>>(
        key, entries, "adagrad_steps",
        [](const AdagradEntry& e) {
          return dense_alike(e.param, {&e.sum, &e.grad});
        },
        [&](const AdagradEntry& e) { adagrad_step(e, args); },
        [&](AdagradBatch<T>& b, int slot, const AdagradEntry& e) {
          b.ptr[0][slot] = ptr<T>(e.param);
          b.ptr[1][slot] = ptr<T>(e.sum);
          b.ptr[2][slot] = const_cast<T*>(ptr<const T>(e.grad));
          b.neg_lr[slot] = AdagradConstants<T>(args, e.lr).neg_lr;
        },
        [&](const AdagradBatch<T>& b, int blocks) {
          adagrad_batch_kernel<<<blocks, kChunkThreads, 0, cuda::current_stream()>>>(
              b, AdagradConstants<T>(args, 0.0));
          cuda::check_launch("adagrad_steps");
        });
  });
}

// GradScaler's unscale and clip_grad_norm's clipping: every thread that meets an inf or NaN
// stores the same 1 (no atomics).
template <typename T>
__device__ __forceinline__ void scale_one(T& g, float* found, compute_t<T> factor) {
  const T v = convert<T>(convert<compute_t<T>>(g) * factor);
  g = v;
  if (found && !isfinite(convert<compute_t<T>>(v))) *found = 1.0f;
}

template <typename T>
__global__ void scale_kernel(T* g, int64_t n, cuda::OffsetCalc<1> oc, float* found,
                             compute_t<T> factor) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[1];
    oc.get(i, off);
    scale_one(g[off[0]], found, factor);
  }
}

template <typename T>
struct GradBatch : ChunkTable<T, 1, 64> {};  // one gradient per slot

template <typename T>
__global__ void scale_batch_kernel(GradBatch<T> b, float* found, compute_t<T> factor) {
  int64_t begin, end;
  T* g = b.ptr[0][b.block_range(begin, end)];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) scale_one(g[i], found, factor);
}

// The distinct dtypes of gradients that all lie on `device`.
std::vector<DType> grad_dtypes(const std::vector<Tensor>& grads, Device device, const char* op) {
  std::vector<DType> dtypes;
  for (const Tensor& g : grads) {
    TANDEM_CHECK(g.device() == device, op, ": a gradient on ", g.device(), " in a call on ",
                 device);
    if (std::find(dtypes.begin(), dtypes.end(), g.dtype()) == dtypes.end())
      dtypes.push_back(g.dtype());
  }
  return dtypes;
}

// Dense gradients of each dtype in chunk tables (a ResNet-50's 161 in three or four launches, not
// 161); the others one launch each.
void scale_grads(const Tensor& key, const std::vector<Tensor>& grads, double by,
                 const Tensor& found_inf) {
  cuda::TensorDeviceGuard guard(key);
  float* found = found_inf.defined() ? ptr<float>(found_inf) : nullptr;
  for (const DType dtype : grad_dtypes(grads, key.device(), "scale_grads"))
    cuda::dispatch<true>(dtype, "scale_grads (cuda)", [&](auto t) {
      using T = decltype(t);
      const auto factor = static_cast<compute_t<T>>(by);
      std::vector<const Tensor*> dense;
      std::vector<int64_t> numels;
      for (const Tensor& g : grads) {
        if (g.dtype() != dtype || g.numel() == 0) continue;
        if (dense_alike(g, {})) {
          dense.push_back(&g);
          numels.push_back(g.numel());
          continue;
        }
        const int64_t n = g.numel();
        scale_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
            ptr<T>(g), n, cuda::offsets<1>(g.shape(), {g.strides()}), found, factor);
        cuda::check_launch("scale_grads");
      }
      launch_chunks<GradBatch<T>>(
          numels, [&](GradBatch<T>& b, int slot, size_t i) { b.ptr[0][slot] = ptr<T>(*dense[i]); },
          [&](const GradBatch<T>& b, int blocks) {
            scale_batch_kernel<<<blocks, kChunkThreads, 0, cuda::current_stream()>>>(b, found,
                                                                                     factor);
            cuda::check_launch("scale_grads");
          });
    });
}

// clip_grad_norm's terms in two steps: each block of a chunk table joins one chunk's terms into
// partial[its chunk] (the chunks of all tables in order), then each gradient's chunks are joined
// in order. Both orders depend on the shapes only.
template <typename T>
__global__ void norm_chunks_kernel(GradBatch<T> b, double* partial, NormTerm term) {
  int64_t begin, end;
  const T* g = b.ptr[0][b.block_range(begin, end)];
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    acc = term.join(acc, term(static_cast<double>(convert<compute_t<T>>(g[i]))));
  acc = cuda::group_reduce<kChunkThreads>(
      acc, [&](double x, double y) { return term.join(x, y); }, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Up to kMax gradients' chunk ranges: out[slot[k]] joins partial[first[k], first[k] + count[k]).
struct NormRanges {
  static constexpr int kMax = 128;
  int64_t first[kMax];
  int32_t count[kMax], slot[kMax];
  int n = 0;
};

__global__ void norm_finish_kernel(double* out, const double* partial, NormRanges r,
                                   NormTerm term) {
  TANDEM_CUDA_LOOP(k, r.n) {
    double acc = 0;
    for (int32_t c = 0; c < r.count[k]; ++c) acc = term.join(acc, partial[r.first[k] + c]);
    out[r.slot[k]] = acc;
  }
}

void grad_norm_terms(const Tensor& out, const std::vector<Tensor>& grads, double norm_type) {
  cuda::TensorDeviceGuard guard(out);
  const NormTerm term(norm_type);
  cudaStream_t stream = cuda::current_stream();
  // A view that is not dense is read through a contiguous copy: every element, repeated ones too.
  std::vector<Tensor> dense;
  int64_t chunks = 0;
  for (const Tensor& g : grads) {
    dense.push_back(dense_alike(g, {}) ? g : g.contiguous());
    chunks += (g.numel() + kChunk - 1) / kChunk;
  }
  Tensor partial = make_tensor({std::max<int64_t>(chunks, 1)}, DType::f64, out.device());
  int64_t next = 0;  // the first chunk of the next gradient
  std::vector<NormRanges> ranges(1);
  auto add_range = [&](size_t i, int64_t count) {
    if (ranges.back().n == NormRanges::kMax) ranges.emplace_back();
    NormRanges& r = ranges.back();
    r.first[r.n] = next;
    r.count[r.n] = static_cast<int32_t>(count);
    r.slot[r.n++] = static_cast<int32_t>(i);
    next += count;
  };
  int64_t launched = 0;  // chunks whose blocks have been launched
  for (const DType dtype : grad_dtypes(dense, out.device(), "clip_grad_norm"))
    cuda::dispatch<true>(dtype, "clip_grad_norm (cuda)", [&](auto t) {
      using T = decltype(t);
      std::vector<size_t> of;
      std::vector<int64_t> numels;
      for (size_t i = 0; i < dense.size(); ++i) {
        if (dense[i].dtype() != dtype) continue;
        add_range(i, (dense[i].numel() + kChunk - 1) / kChunk);
        if (dense[i].numel() == 0) continue;
        of.push_back(i);
        numels.push_back(dense[i].numel());
      }
      launch_chunks<GradBatch<T>>(
          numels,
          [&](GradBatch<T>& b, int slot, size_t k) {
            b.ptr[0][slot] = const_cast<T*>(ptr<const T>(dense[of[k]]));
          },
          [&](const GradBatch<T>& b, int blocks) {
            norm_chunks_kernel<<<blocks, kChunkThreads, 0, stream>>>(
                b, ptr<double>(partial) + launched, term);
            cuda::check_launch("clip_grad_norm (chunks)");
            launched += blocks;
          });
    });
  for (const NormRanges& r : ranges) {
    if (r.n == 0) continue;
    norm_finish_kernel<<<cuda::grid_for(r.n), cuda::kThreads, 0, stream>>>(
        ptr<double>(out), ptr<const double>(partial), r, term);
    cuda::check_launch("clip_grad_norm (gradients)");
  }
}

}  // namespace

TANDEM_REGISTER_CUDA(reduce_rows, reduce_rows);
TANDEM_REGISTER_CUDA(scan_rows, scan_rows);
TANDEM_REGISTER_CUDA(sort_rows, sort_rows);
TANDEM_REGISTER_CUDA(pick_classes, pick_classes);
TANDEM_REGISTER_CUDA(pick_classes_backward, pick_classes_backward);
TANDEM_REGISTER_CUDA(sgd_step, sgd_step);
TANDEM_REGISTER_CUDA(sgd_steps, sgd_steps);
TANDEM_REGISTER_CUDA(adam_step, adam_step);
TANDEM_REGISTER_CUDA(adam_steps, adam_steps);
TANDEM_REGISTER_CUDA(rmsprop_steps, rmsprop_steps);
TANDEM_REGISTER_CUDA(adagrad_steps, adagrad_steps);
TANDEM_REGISTER_CUDA(scale_grads, scale_grads);
TANDEM_REGISTER_CUDA(grad_norm_terms, grad_norm_terms);

}  // namespace tandem::kernels::cuda_backend
