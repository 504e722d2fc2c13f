// Every cuDNN call of tandem, in one file: 2-d convolution forward, backward-data,
// backward-filter and the bias terms, through cuDNN 9's legacy convolution API (deprecated but
// present in 9.x; a move to the graph API stays in this file). NCHW, or NHWC for channels-last
// tensors (the weights then go through an NHWC copy: parameters stay row-major), in f32, f64,
// f16 and bf16 with f32 accumulation (f64 for f64); f16/bf16 on tensor cores, f32 through TF32
// unless cuda::set_allow_tf32_conv(false). The algorithm for each shape (and layout) comes from
// cuDNN's heuristics, or from timing every algorithm once under cuda::set_cudnn_benchmark(true)
// (PyTorch's cudnn.benchmark), and is cached once it has run (a ranked algorithm that fails
// passes to the next); workspaces come from the caching allocator.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../kernels/kernels.hpp"
#include "check.hpp"
#include "handles.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::cuda {
namespace {

std::atomic<bool> g_benchmark{false};
std::atomic<int64_t> g_max_elements{0x7fffffff};  // 2^31 - 1: cuDNN's 32-bit indexing

// The batch slice a call over (in, out) goes through in: the whole batch when both fit
// g_max_elements, else as many samples as fit (PyTorch's split_batch_dim_to_32bit_out).
int64_t batch_slice(const Tensor& in, const Tensor& out, const char* op) {
  const int64_t n = in.size(0), limit = g_max_elements.load();
  const int64_t most = std::max(in.numel(), out.numel());
  if (n == 0 || most <= limit) return std::max<int64_t>(n, 1);
  const int64_t per_sample = most / n;
  if (per_sample > limit)
    TANDEM_THROW(NotImplementedError, op, " (cuda): one sample's input or output holds ",
                 per_sample, " elements, more than cuDNN's 32-bit indexing allows (", limit,
                 "); only a batch is split");
  return limit / per_sample;
}

// cuDNN's status, and its own words for why (cuDNN 9's last error message of this thread: what a
// bare BAD_PARAM or NOT_SUPPORTED leaves out).
std::string cudnn_error_text(cudnnStatus_t status) {
  char why[1024] = {};
  cudnnGetLastErrorString(why, sizeof why);
  std::string text = std::string("cuDNN error ") + cudnnGetErrorString(status);
  if (why[0] != '\0') text += std::string(": ") + why;
  return text;
}

#define TANDEM_CUDNN_CHECK(expr)                                                  \
  do {                                                                            \
    const cudnnStatus_t status_ = (expr);                                         \
    if (status_ != CUDNN_STATUS_SUCCESS)                                          \
      throw ::tandem::CudaError(#expr, cudnn_error_text(status_),                 \
                                ::tandem::detail::base_name(__FILE__), __LINE__); \
  } while (0)

cudnnHandle_t create_handle() {
  // A library of another major version than the header built against (a wheel's cudnn.h paired
  // with another install's library) would be handed structures it does not know.
  // cuDNN 9 numbers its versions major * 10000 + minor * 100 + patch, 8 major * 1000 + ...
  const size_t loaded = cudnnGetVersion();
  const size_t major = loaded >= 90000 ? loaded / 10000 : loaded / 1000;
  TANDEM_CHECK(major == CUDNN_MAJOR, "cuDNN: built against version ", CUDNN_MAJOR, ".",
               CUDNN_MINOR, " but loaded version ", major, " (", loaded,
               "); point CUDNN_ROOT at one install for both header and library");
  cudnnHandle_t h = nullptr;
  TANDEM_CUDNN_CHECK(cudnnCreate(&h));
  return h;
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default:
      TANDEM_THROW(NotImplementedError, "conv2d (cuda): cuDNN convolves f32, f64, f16 and bf16, "
                   "got ", t);
  }
}

// The layout of a whole call, decided once from the input as the op layer decided it (the
// input, the output and their gradients all lie dense in it; f64 always row-major: cuDNN has no
// NHWC f64 kernels). Not per tensor: where sizes fit both layouts (one channel, 1x1 maps) a
// tensor's own strides may say the other one, and cuDNN takes no mix of NCHW and NHWC
// descriptors in one call.
cudnnTensorFormat_t call_format(const Tensor& in) {
  return in.dtype() != DType::f64 && in.suggest_memory_format() == MemoryFormat::ChannelsLast
             ? CUDNN_TENSOR_NHWC
             : CUDNN_TENSOR_NCHW;
}

// The tensor layout of a cuDNN format.
MemoryFormat layout_of(cudnnTensorFormat_t format) {
  return format == CUDNN_TENSOR_NHWC ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// Whether the filter's bytes already lie as the call's format has them (1x1 filters lie the
// same in both).
bool filter_in(const Tensor& weight, cudnnTensorFormat_t format) {
  return weight.is_contiguous(layout_of(format));
}

// The weights in the call's layout (cuDNN's NHWC kernels take NHWC filters): the weight itself
// when it lies so (a channels-last model's, every 1x1 filter), else a copy.
Tensor weight_for(const Tensor& weight, cudnnTensorFormat_t format) {
  if (filter_in(weight, format)) return weight;
  Tensor w = make_tensor(weight.shape(), weight.dtype(), weight.device(), layout_of(format));
  kernels::copy(w, weight);
  return w;
}

// Descriptors, destroyed with their owner.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w)
      : TensorDesc(t, n, c, h, w, CUDNN_TENSOR_NCHW) {}
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w, cudnnTensorFormat_t format) {
    TANDEM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, format, data_type(t), static_cast<int>(n),
                                                  static_cast<int>(c), static_cast<int>(h),
                                                  static_cast<int>(w)));
  }
  TensorDesc(const Tensor& t, cudnnTensorFormat_t format)
      : TensorDesc(t.dtype(), t.size(0), t.size(1), t.size(2), t.size(3), format) {}
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Tensor& w, cudnnTensorFormat_t format) {
    TANDEM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    TANDEM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        d, data_type(w.dtype()), format, static_cast<int>(w.size(0)),
        static_cast<int>(w.size(1)), static_cast<int>(w.size(2)), static_cast<int>(w.size(3))));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const kernels::Conv2dParams& p, DType t) {
    TANDEM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    TANDEM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, static_cast<int>(p.pad_h), static_cast<int>(p.pad_w), static_cast<int>(p.stride_h),
        static_cast<int>(p.stride_w), static_cast<int>(p.dil_h), static_cast<int>(p.dil_w),
        CUDNN_CROSS_CORRELATION, t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(p.groups)));
    const cudnnMathType_t math = (t == DType::f16 || t == DType::bf16) ? CUDNN_TENSOR_OP_MATH
                                 : (t == DType::f32 && !allow_tf32_conv()) ? CUDNN_FMA_MATH
                                                                            : CUDNN_DEFAULT_MATH;
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// One convolution problem: what the chosen algorithm depends on.
enum class Direction { forward, backward_data, backward_filter };
using Key = std::tuple<int, Direction, DType, bool, std::vector<int64_t>>;

Key key_of(Direction dir, const Tensor& x, const Tensor& w, const kernels::Conv2dParams& p,
           cudnnTensorFormat_t format) {
  return {x.device().index(), dir, x.dtype(), allow_tf32_conv(),
          {format == CUDNN_TENSOR_NHWC ? 1 : 0, x.size(0), x.size(1), x.size(2), x.size(3),
           w.size(0), w.size(1), w.size(2), w.size(3), p.stride_h, p.stride_w, p.pad_h, p.pad_w,
           p.dil_h, p.dil_w, p.groups, g_benchmark.load() ? 1 : 0}};
}

// An algorithm is ranked together with a math type, and cuDNN runs the kernel of the pair the
// descriptor holds at the call: the math type is set from the choice before every call.
struct Choice {
  int algo;
  size_t workspace;
  cudnnMathType_t math;
};

std::mutex g_cache_mu;
std::map<Key, Choice> g_cache;

// Scratch bytes on `device` from the caching allocator (none for 0).
Tensor workspace(size_t bytes, Device device) {
  return bytes == 0 ? Tensor()
                    : make_tensor({static_cast<int64_t>(bytes)}, DType::u8, device);
}

// Runs a convolution, call(algo, workspace, bytes), with the algorithm for `key`: the cached
// one, else each of cuDNN's ranked results in turn (its heuristics, or the trials of benchmark
// mode) until one runs. A result whose workspace the allocator cannot give, or whose call fails
// (a SUCCESS in the ranking does not promise that the kernel runs), passes to the next, as
// PyTorch's does; only an algorithm that ran is cached, and a cached one that fails (less memory
// free than when it was chosen) is ranked again. When none runs, the last failure is rethrown.
template <typename Perf, typename Query, typename Call>
void run_ranked(const Key& key, Device device, cudnnConvolutionDescriptor_t conv, Query query,
                Call call) {
  auto attempt = [&](const Choice& c) {
    Tensor ws = workspace(c.workspace, device);
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, c.math));
    call(c.algo, ws.defined() ? ws.raw_data() : nullptr, c.workspace);
  };
  // The descriptor's own math type, for the ranking: an attempt leaves its choice's set, and is
  // undone on the way out, since one descriptor serves backward-data and then backward-filter
  // (whose ranking under a math type FMA left behind would exclude TF32's kernels).
  cudnnMathType_t own_math;
  TANDEM_CUDNN_CHECK(cudnnGetConvolutionMathType(conv, &own_math));
  struct RestoreMath {
    cudnnConvolutionDescriptor_t conv;
    cudnnMathType_t math;
    ~RestoreMath() { cudnnSetConvolutionMathType(conv, math); }
  } restore{conv, own_math};
  std::exception_ptr failure;
  auto tried = [&](const Choice& c) {
    try {
      attempt(c);
      return true;
    } catch (const CudaError&) {
      failure = std::current_exception();
    } catch (const OutOfMemoryError&) {
      failure = std::current_exception();
    }
    cudaGetLastError();  // a launch error the failed call left must not blame the next kernel
    return false;
  };
  std::optional<Choice> cached;
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) cached = it->second;
  }
  if (cached && tried(*cached)) return;
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, own_math));
  // f32 with TF32 off keeps FMA math whatever the ranking used.
  const bool strict_f32 = std::get<2>(key) == DType::f32 && !std::get<3>(key);
  for (const Perf& p : query()) {
    // cuDNN has been seen to report absurd workspaces (2^63 bytes and more): skipped.
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory >= (size_t(1) << 40)) continue;
    const Choice c{static_cast<int>(p.algo), p.memory, strict_f32 ? CUDNN_FMA_MATH : p.mathType};
    if (!tried(c)) continue;
    std::lock_guard<std::mutex> lock(g_cache_mu);
    g_cache[key] = c;
    return;
  }
  if (failure) std::rethrow_exception(failure);
  TANDEM_THROW(NotImplementedError, "conv2d (cuda): cuDNN has no algorithm for this convolution");
}

// How many results to ask for.
constexpr int kAlgos = 16;

// The workspace a benchmark may use: 1 GiB, or less where the allocator cannot give that.
struct BenchmarkWorkspace {
  Tensor buffer;
  size_t bytes = 0;
  explicit BenchmarkWorkspace(Device device) {
    for (size_t b : {size_t(1) << 30, size_t(128) << 20}) {
      try {
        buffer = workspace(b, device);
        bytes = b;
        return;
      } catch (const OutOfMemoryError&) {
      }
    }
  }
  void* data() const { return bytes ? buffer.raw_data() : nullptr; }
};

struct Setup {
  cudnnHandle_t h;
  DeviceGuard guard;
  explicit Setup(int device) : h(thread_handle(device, &create_handle)), guard(device) {
    TANDEM_CUDNN_CHECK(cudnnSetStream(h, current_stream()));
  }
};

// alpha = 1, beta = 0 or 1, in the scaling type cuDNN wants for the dtype.
struct Scalars {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  bool f64;
  explicit Scalars(DType t) : f64(t == DType::f64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return f64 ? static_cast<const void*>(&d0) : &f0; }
};

void conv2d_forward(const Tensor& out, const Tensor& in, const Tensor& weight_in,
                    const Tensor& bias, const kernels::Conv2dParams& p) {
  if (out.numel() == 0) return;
  const int64_t n = in.size(0), slice = batch_slice(in, out, "conv2d");
  if (slice < n) {
    for (int64_t i = 0; i < n; i += slice) {
      const int64_t m = std::min(slice, n - i);
      conv2d_forward(out.narrow(0, i, m), in.narrow(0, i, m), weight_in, bias, p);
    }
    return;
  }
  Setup s(in.device().index());
  const cudnnTensorFormat_t format = call_format(in);
  TensorDesc y(out, format);
  const Scalars k(in.dtype());
  if (in.numel() == 0 || weight_in.numel() == 0) {
    // No input channels, no input pixels (only padding) or an empty kernel: nothing to convolve,
    // and cuDNN takes no descriptor with a zero size.
    kernels::fill(out, 0.0);
  } else {
    const Tensor weight = weight_for(weight_in, format);
    TensorDesc x(in, format);
    FilterDesc w(weight, format);
    ConvDesc conv(p, in.dtype());
    run_ranked<cudnnConvolutionFwdAlgoPerf_t>(
        key_of(Direction::forward, in, weight, p, format), in.device(), conv.d,
        [&] {
          std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(kAlgos);
          int n = 0;
          if (g_benchmark) {
            BenchmarkWorkspace ws(in.device());  // the trials write `out`: it is written next
            TANDEM_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
                s.h, x.d, in.raw_data(), w.d, weight.raw_data(), conv.d, y.d, out.raw_data(),
                kAlgos, &n, perf.data(), ws.data(), ws.bytes));
          } else {
            TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(s.h, x.d, w.d, conv.d, y.d,
                                                                      kAlgos, &n, perf.data()));
          }
          perf.resize(n);
          return perf;
        },
        [&](int algo, void* ws, size_t bytes) {
          TANDEM_CUDNN_CHECK(cudnnConvolutionForward(
              s.h, k.one(), x.d, in.raw_data(), w.d, weight.raw_data(), conv.d,
              static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, k.zero(), y.d,
              out.raw_data()));
        });
  }
  if (bias.defined()) {
    // tandem's own broadcast add, for every dtype and layout: cuDNN's cudnnAddTensor is not
    // documented for bf16 and has been reported very slow on NHWC outputs.
    const Tensor b = make_tensor(bias.storage(), out.shape(), {0, 1, 0, 0}, bias.storage_offset(),
                                 bias.dtype());
    kernels::binary(out, kernels::BinaryOp::add, kernels::OpArgs{1.0}, out, b);
  }
}

// grad_bias = dy summed over (N, H, W) per channel, in f32: dy copied channel-major into f32
// scratch, then one row sum per channel (for bf16, as the bias addition).
void bias_grad_by_rows(const Tensor& grad_bias, const Tensor& grad_out) {
  const int64_t n = grad_out.size(0), c = grad_out.size(1);
  const int64_t hw = grad_out.size(2) * grad_out.size(3);
  const Tensor rows = make_tensor({c, n * hw}, DType::f32, grad_out.device());
  kernels::copy(make_tensor(rows.storage(), grad_out.shape(), {hw, n * hw, grad_out.size(3), 1},
                            0, DType::f32),
                grad_out);
  const Tensor sums = make_tensor({c}, DType::f32, grad_out.device());
  kernels::reduce_rows(sums, kernels::ReduceOp::sum, rows, c, n * hw);
  kernels::copy(grad_bias, sums);
}

// The input's and the weight's gradients (each when defined and not empty), both sides of the
// convolution non-empty.
void input_and_weight_gradients(const Setup& s, cudnnTensorFormat_t format, const Scalars& k,
                                const Tensor& grad_out, const Tensor& in,
                                const Tensor& weight_in, const Tensor& grad_in,
                                const Tensor& grad_weight_out, const kernels::Conv2dParams& p) {
  const Tensor weight = weight_for(weight_in, format);
  // The filter gradient in the call's layout, copied into the caller's at the end if that is
  // another one.
  const Tensor grad_weight =
      grad_weight_out.defined() && !filter_in(grad_weight_out, format)
          ? make_tensor(weight.shape(), weight.dtype(), weight.device(), layout_of(format))
          : grad_weight_out;
  TensorDesc x(in, format), dy(grad_out, format);
  FilterDesc w(weight, format);
  ConvDesc conv(p, in.dtype());
  if (grad_in.defined() && grad_in.numel() > 0) {
    run_ranked<cudnnConvolutionBwdDataAlgoPerf_t>(
        key_of(Direction::backward_data, in, weight, p, format), in.device(), conv.d,
        [&] {
          std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(kAlgos);
          int n = 0;
          if (g_benchmark) {
            BenchmarkWorkspace ws(in.device());
            TANDEM_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
                s.h, w.d, weight.raw_data(), dy.d, grad_out.raw_data(), conv.d, x.d,
                grad_in.raw_data(), kAlgos, &n, perf.data(), ws.data(), ws.bytes));
          } else {
            TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                s.h, w.d, dy.d, conv.d, x.d, kAlgos, &n, perf.data()));
          }
          perf.resize(n);
          return perf;
        },
        [&](int algo, void* ws, size_t bytes) {
          TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardData(
              s.h, k.one(), w.d, weight.raw_data(), dy.d, grad_out.raw_data(), conv.d,
              static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, k.zero(), x.d,
              grad_in.raw_data()));
        });
  }
  if (grad_weight.defined() && grad_weight.numel() > 0) {
    run_ranked<cudnnConvolutionBwdFilterAlgoPerf_t>(
        key_of(Direction::backward_filter, in, weight, p, format), in.device(), conv.d,
        [&] {
          std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(kAlgos);
          int n = 0;
          if (g_benchmark) {
            BenchmarkWorkspace ws(in.device());
            TANDEM_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                s.h, x.d, in.raw_data(), dy.d, grad_out.raw_data(), conv.d, w.d,
                grad_weight.raw_data(), kAlgos, &n, perf.data(), ws.data(), ws.bytes));
          } else {
            TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                s.h, x.d, dy.d, conv.d, w.d, kAlgos, &n, perf.data()));
          }
          perf.resize(n);
          return perf;
        },
        [&](int algo, void* ws, size_t bytes) {
          TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
              s.h, k.one(), x.d, in.raw_data(), dy.d, grad_out.raw_data(), conv.d,
              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, k.zero(), w.d,
              grad_weight.raw_data()));
        });
    if (!grad_weight.is_same(grad_weight_out)) kernels::copy(grad_weight_out, grad_weight);
  }
}

void conv2d_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight_in,
                     const Tensor& grad_in, const Tensor& grad_weight_out, const Tensor& grad_bias,
                     const kernels::Conv2dParams& p) {
  const int64_t n = in.size(0), slice = batch_slice(in, grad_out, "conv2d backward");
  if (slice < n) {  // slice by slice; the weight's and bias's gradients summed over them
    auto scratch = [](const Tensor& t) {
      return t.defined() ? make_tensor(t.shape(), t.dtype(), t.device()) : Tensor();
    };
    const Tensor gw = scratch(grad_weight_out), gb = scratch(grad_bias);  // a later slice's
    for (int64_t i = 0; i < n; i += slice) {
      const int64_t m = std::min(slice, n - i);
      conv2d_backward(grad_out.narrow(0, i, m), in.narrow(0, i, m), weight_in,
                      grad_in.defined() ? grad_in.narrow(0, i, m) : Tensor(),
                      i == 0 ? grad_weight_out : gw, i == 0 ? grad_bias : gb, p);
      for (const auto& [total, part] : {std::pair(grad_weight_out, gw), std::pair(grad_bias, gb)})
        if (i > 0 && total.defined())
          kernels::binary(total, kernels::BinaryOp::add, kernels::OpArgs{1.0}, total, part);
    }
    return;
  }
  Setup s(in.device().index());
  const cudnnTensorFormat_t format = call_format(in);
  const Scalars k(in.dtype());
  if (in.numel() > 0 && grad_out.numel() > 0 && weight_in.numel() > 0) {
    input_and_weight_gradients(s, format, k, grad_out, in, weight_in, grad_in, grad_weight_out, p);
  } else {
    // A zero size on either side or in the kernel (cuDNN takes no descriptor with one): nothing
    // flows back to the input or the weight.
    for (const Tensor& g : {grad_in, grad_weight_out})
      if (g.defined()) kernels::fill(g, 0.0);
  }
  if (!grad_bias.defined() || grad_bias.numel() == 0) return;
  if (grad_out.numel() == 0) {
    kernels::fill(grad_bias, 0.0);
  } else if (grad_bias.dtype() == DType::bf16) {
    bias_grad_by_rows(grad_bias, grad_out);
  } else {
    TensorDesc dy(grad_out, format), db(grad_bias.dtype(), 1, grad_bias.size(0), 1, 1);
    TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardBias(s.h, k.one(), dy.d, grad_out.raw_data(),
                                                    k.zero(), db.d, grad_bias.raw_data()));
  }
}

}  // namespace

void set_cudnn_benchmark(bool on) { g_benchmark = on; }
bool cudnn_benchmark() { return g_benchmark; }
void set_cudnn_max_elements(int64_t elements) {
  TANDEM_CHECK(elements > 0, "set_cudnn_max_elements: must be positive, got ", elements);
  g_max_elements = elements;
}
int64_t cudnn_max_elements() { return g_max_elements; }

}  // namespace tandem::cuda

namespace tandem::kernels::cuda_backend {
TANDEM_REGISTER_CUDA(conv2d_forward, ::tandem::cuda::conv2d_forward);
TANDEM_REGISTER_CUDA(conv2d_backward, ::tandem::cuda::conv2d_backward);
}  // namespace tandem::kernels::cuda_backend
