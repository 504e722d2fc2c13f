// A CPU stand-in for the cuDNN functions tandem calls, for the CUDA emulation tests: device
// memory is host memory, and each call that touches it does its work on the handle's stream,
// after the work queued there, before it returns (streams.hpp).
// Handles and tensor, filter and convolution descriptors (4-d, NCHW or NHWC; f32, f64, f16,
// bf16), 2-d convolutions forward, backward-data and backward-filter (padding, stride,
// dilation, groups, cross-correlation or convolution), the bias gradient and cudnnAddTensor,
// with cuDNN's semantics: y = alpha * op(...) + beta * y, y not read when beta is 0, alpha and
// beta doubles for f64 data and floats otherwise, sums in double rounded once to the stored type.
// Arguments are checked as cuDNN documents (null pointers, unset descriptors, shapes against the
// output-size formula and the group count, data and compute types, algorithms) and answer
// BAD_PARAM or NOT_SUPPORTED. Of the algorithms, 0 runs without a workspace and 1 needs 1 MiB
// (a smaller workspace is BAD_PARAM), so callers' workspace handling runs; the others report
// NOT_SUPPORTED. Stricter than cuDNN: an output overlapping an input is BAD_PARAM.
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "streams.hpp"
#include "values.hpp"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

// A 4-d tensor or filter: sizes (n, c, h, w), or (k, c, r, s), and element strides.
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t size[4] = {}, stride[4] = {};
};

struct cudnnFilterStruct : cudnnTensorStruct {};

struct cudnnConvolutionStruct {
  bool set = false;
  int pad[2] = {}, stride[2] = {}, dilation[2] = {};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

using Desc = cudnnTensorStruct;
constexpr size_t kAlgo1Workspace = size_t(1) << 20;

bool supported_type(cudnnDataType_t t) {
  return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE || t == CUDNN_DATA_HALF ||
         t == CUDNN_DATA_BFLOAT16;
}

// The types supported_type accepts.
tandem_emu::Real real(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return tandem_emu::Real::f32;
    case CUDNN_DATA_DOUBLE: return tandem_emu::Real::f64;
    case CUDNN_DATA_HALF: return tandem_emu::Real::f16;
    default: return tandem_emu::Real::bf16;
  }
}

double load(const void* p, int64_t i, cudnnDataType_t t) {
  return tandem_emu::load(p, i, real(t));
}

void store(void* p, int64_t i, cudnnDataType_t t, double v) {
  tandem_emu::store(p, i, real(t), v);
}

// alpha or beta: a double for f64 data, a float otherwise.
double scalar(const void* p, cudnnDataType_t data) {
  return data == CUDNN_DATA_DOUBLE ? *static_cast<const double*>(p) : *static_cast<const float*>(p);
}

size_t element_size(cudnnDataType_t t) {
  return t == CUDNN_DATA_DOUBLE ? 8 : t == CUDNN_DATA_FLOAT ? 4 : 2;
}

int64_t numel(const Desc& d) { return d.size[0] * d.size[1] * d.size[2] * d.size[3]; }

// Sets d to dense sizes in `format`; checks as cudnnSetTensor4dDescriptor (`tensor`) or
// cudnnSetFilter4dDescriptor does.
cudnnStatus_t set_dense(Desc* d, cudnnTensorFormat_t format, cudnnDataType_t type, int n, int c,
                        int h, int w, bool tensor) {
  if (d == nullptr || n <= 0 || c <= 0 || h <= 0 || w <= 0 || type < CUDNN_DATA_FLOAT ||
      type > CUDNN_DATA_BFLOAT16 || (!tensor && type == CUDNN_DATA_INT32))
    return CUDNN_STATUS_BAD_PARAM;
  if (!supported_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;  // integer types: not emulated
  // NCHW_VECT_C is for the vector integer types only.
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_BAD_PARAM;
  const int64_t s[4] = {n, c, h, w};
  if (tensor && s[0] * s[1] * s[2] * s[3] > INT32_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  std::copy(s, s + 4, d->size);
  const int64_t nchw[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  const int64_t nhwc[4] = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
  std::copy_n(format == CUDNN_TENSOR_NCHW ? nchw : nhwc, 4, d->stride);
  d->type = type;
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

// Offset of element (a, b, c, e) of d.
int64_t offset(const Desc& d, int64_t a, int64_t b, int64_t c, int64_t e) {
  return a * d.stride[0] + b * d.stride[1] + c * d.stride[2] + e * d.stride[3];
}

// d's elements as doubles, dense in (n, c, h, w) order.
std::vector<double> gather(const Desc& d, const void* p) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel(d)));
  for (int64_t a = 0; a < d.size[0]; ++a)
    for (int64_t b = 0; b < d.size[1]; ++b)
      for (int64_t c = 0; c < d.size[2]; ++c)
        for (int64_t e = 0; e < d.size[3]; ++e)
          out.push_back(load(p, offset(d, a, b, c, e), d.type));
  return out;
}

// d = alpha * acc + beta * d, acc dense in (n, c, h, w) order; d is not read when beta is 0.
void blend(const Desc& d, void* p, const std::vector<double>& acc, double alpha, double beta) {
  size_t i = 0;
  for (int64_t a = 0; a < d.size[0]; ++a)
    for (int64_t b = 0; b < d.size[1]; ++b)
      for (int64_t c = 0; c < d.size[2]; ++c)
        for (int64_t e = 0; e < d.size[3]; ++e, ++i) {
          const int64_t o = offset(d, a, b, c, e);
          store(p, o, d.type,
                beta == 0 ? alpha * acc[i] : alpha * acc[i] + beta * load(p, o, d.type));
        }
}

// Whether the bytes of tensor a at p and tensor b at q overlap.
bool overlap(const Desc& a, const void* p, const Desc& b, const void* q) {
  auto end = [](const Desc& d, const void* x) {
    return static_cast<const char*>(x) +
           (offset(d, d.size[0] - 1, d.size[1] - 1, d.size[2] - 1, d.size[3] - 1) + 1) *
               static_cast<int64_t>(element_size(d.type));
  };
  return static_cast<const char*>(p) < end(b, q) && static_cast<const char*>(q) < end(a, p);
}

enum class Dir { forward, backward_data, backward_filter };

// A convolution's sizes: input (n, c, in), filter (k, c / groups, ks), output (n, k, out), with
// (h, w) pairs for the spatial ones.
struct Problem {
  int64_t n, c, k, groups, in[2], ks[2], out[2], pad[2], stride[2], dil[2];
  bool flip;
};

// Checks x, w, conv and y as cuDNN's convolution calls do (the codes of the call's
// documentation), and describes the problem.
// cuDNN 9 keeps, per thread, a message saying why the last call failed
// (cudnnGetLastErrorString); this emulation says it for the problem checks.
thread_local std::string g_last_error;

cudnnStatus_t fail(cudnnStatus_t status, const char* why) {
  g_last_error = why;
  return status;
}

cudnnStatus_t check(Dir dir, const Desc* x, const cudnnFilterStruct* w,
                    const cudnnConvolutionStruct* conv, const Desc* y, Problem* p) {
  if (!x || !w || !conv || !y || !x->set || !w->set || !conv->set || !y->set)
    return fail(CUDNN_STATUS_BAD_PARAM, "a descriptor is null or not set");
  if (x->type != w->type || x->type != y->type)
    return fail(CUDNN_STATUS_BAD_PARAM, "the tensors' and the filter's data types differ");
  // The data/compute type pairs of cuDNN's configurations: FLOAT, DOUBLE, TRUE_HALF,
  // PSEUDO_HALF, PSEUDO_BFLOAT16.
  const cudnnDataType_t t = x->type, ct = conv->compute;
  const bool config = t == CUDNN_DATA_HALF       ? (ct == CUDNN_DATA_HALF || ct == CUDNN_DATA_FLOAT)
                      : t == CUDNN_DATA_BFLOAT16 ? ct == CUDNN_DATA_FLOAT
                                                 : ct == t;
  if (!config)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "no configuration for this data and compute type");
  Problem& q = *p;
  q.n = x->size[0];
  q.c = x->size[1];
  q.k = w->size[0];
  q.groups = conv->groups;
  q.flip = conv->mode == CUDNN_CONVOLUTION;
  if (w->size[1] * q.groups != q.c)
    return fail(CUDNN_STATUS_BAD_PARAM, "filter channels times groups differ from input channels");
  if (q.k % q.groups != 0)
    return fail(dir == Dir::backward_data ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM,
                "output channels are not a multiple of groups");
  if (y->size[0] != q.n || y->size[1] != q.k)
    return fail(CUDNN_STATUS_BAD_PARAM, "the output's batch or channels do not match");
  for (int i = 0; i < 2; ++i) {
    q.in[i] = x->size[2 + i];
    q.ks[i] = w->size[2 + i];
    q.out[i] = y->size[2 + i];
    q.pad[i] = conv->pad[i];
    q.stride[i] = conv->stride[i];
    q.dil[i] = conv->dilation[i];
    const int64_t span = q.in[i] + 2 * q.pad[i] - q.dil[i] * (q.ks[i] - 1) - 1;
    if (span < 0) return fail(CUDNN_STATUS_BAD_PARAM, "the filter outgrows the padded input");
    if (q.out[i] != 1 + span / q.stride[i])
      return fail(dir == Dir::forward ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM,
                  "the output's size is not the convolution's");
  }
  return CUDNN_STATUS_SUCCESS;
}

// Calls f(xi, wi, yi) for every input, filter and output element that meet in the convolution,
// as indices into their dense (n, c, h, w) orders.
template <typename F>
void for_each_tap(const Problem& p, F f) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t h = p.in[0], w = p.in[1], r = p.ks[0], s = p.ks[1], ho = p.out[0], wo = p.out[1];
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          const int64_t yi = ((n * p.k + k) * ho + oh) * wo + ow;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t ci = k / kg * cg + c;  // the input channel, in k's group
            for (int64_t i = 0; i < r; ++i) {
              const int64_t ih = oh * p.stride[0] - p.pad[0] + i * p.dil[0];
              if (ih < 0 || ih >= h) continue;
              for (int64_t j = 0; j < s; ++j) {
                const int64_t iw = ow * p.stride[1] - p.pad[1] + j * p.dil[1];
                if (iw < 0 || iw >= w) continue;
                const int64_t fi = p.flip ? r - 1 - i : i, fj = p.flip ? s - 1 - j : j;
                f(((n * p.c + ci) * h + ih) * w + iw, ((k * cg + c) * r + fi) * s + fj, yi);
              }
            }
          }
        }
}

// The operands of one convolution call: x, w and y, one of which (`out`) is written.
struct Operands {
  const Desc* xd;
  const void* x;
  const cudnnFilterStruct* wd;
  const void* w;
  const cudnnConvolutionStruct* conv;
  const Desc* yd;
  const void* y;
  void* out;
};

// Runs a checked convolution in direction `dir`: the output = alpha * result + beta * output.
cudnnStatus_t convolve(Dir dir, const Problem& p, const Operands& o, double alpha, double beta) {
  const Desc& od = dir == Dir::forward ? *o.yd : dir == Dir::backward_data ? *o.xd : *o.wd;
  if ((dir != Dir::backward_data && overlap(od, o.out, *o.xd, o.x)) ||
      (dir != Dir::backward_filter && overlap(od, o.out, *o.wd, o.w)) ||
      (dir != Dir::forward && overlap(od, o.out, *o.yd, o.y)))
    return CUDNN_STATUS_BAD_PARAM;
  std::vector<double> acc(static_cast<size_t>(numel(od)));
  auto at = [](std::vector<double>& v, int64_t i) -> double& { return v[static_cast<size_t>(i)]; };
  // f32 under any math type but FMA may run on tensor cores, which take TF32 operands: rounded so.
  const bool tf32 = o.xd->type == CUDNN_DATA_FLOAT && o.conv->math != CUDNN_FMA_MATH;
  auto operand = [tf32](const Desc& d, const void* ptr) {
    std::vector<double> values = gather(d, ptr);
    if (tf32) tandem_emu::round_to_tf32(values);
    return values;
  };
  if (dir == Dir::forward) {
    std::vector<double> x = operand(*o.xd, o.x), w = operand(*o.wd, o.w);
    for_each_tap(p,
                 [&](int64_t xi, int64_t wi, int64_t yi) { at(acc, yi) += at(x, xi) * at(w, wi); });
  } else if (dir == Dir::backward_data) {
    std::vector<double> w = operand(*o.wd, o.w), dy = operand(*o.yd, o.y);
    for_each_tap(
        p, [&](int64_t xi, int64_t wi, int64_t yi) { at(acc, xi) += at(dy, yi) * at(w, wi); });
  } else {
    std::vector<double> x = operand(*o.xd, o.x), dy = operand(*o.yd, o.y);
    for_each_tap(
        p, [&](int64_t xi, int64_t wi, int64_t yi) { at(acc, wi) += at(x, xi) * at(dy, yi); });
  }
  blend(od, o.out, acc, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}

size_t workspace_of(int algo) { return algo == 1 ? kAlgo1Workspace : 0; }

// A convolution call: checks the arguments, the algorithm and the workspace, scribbles over the
// workspace as a kernel would, and runs the convolution.
cudnnStatus_t run_now(Dir dir, cudnnHandle_t handle, const Operands& o, const void* alpha,
                      const void* beta, int algo, int algo_count, void* ws, size_t ws_bytes) {
  Problem p{};
  if (!handle || !alpha || !beta || !o.x || !o.w || !o.y || algo < 0 || algo >= algo_count)
    return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = check(dir, o.xd, o.wd, o.conv, o.yd, &p)) return s;
  if (algo > 1) return CUDNN_STATUS_NOT_SUPPORTED;
  const size_t need = workspace_of(algo);
  if (ws_bytes < need || (need > 0 && ws == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  if (need > 0) std::memset(ws, 0xA5, need);
  const cudnnDataType_t t = o.xd->type;
  return convolve(dir, p, o, scalar(alpha, t), scalar(beta, t));
}

cudnnStatus_t run(Dir dir, cudnnHandle_t handle, const Operands& o, const void* alpha,
                  const void* beta, int algo, int algo_count, void* ws, size_t ws_bytes) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  return tandem_emu::call_on_stream(handle->stream, [&] {
    return run_now(dir, handle, o, alpha, beta, algo, algo_count, ws, ws_bytes);
  });
}

// Fills perf with the algorithms ranked: those that run, fastest first (1, then 0), then those
// that cannot (1 when `available` workspace bytes are too few), then the unsupported ones.
template <typename Perf, typename Algo>
void rank(Dir dir, const cudnnConvolutionStruct& conv, int algo_count, size_t available,
          int requested, int* returned, Perf* perf) {
  std::vector<Perf> all;
  for (int algo : {1, 0}) {
    Perf r{};
    r.algo = static_cast<Algo>(algo);
    r.memory = workspace_of(algo);
    r.status = r.memory <= available ? CUDNN_STATUS_SUCCESS
                                     : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    r.time = r.status != CUDNN_STATUS_SUCCESS ? -1.0f : algo == 1 ? 0.5f : 1.0f;
    // The backward passes' algorithm 0 sums with atomics.
    r.determinism =
        dir != Dir::forward && algo == 0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
    r.mathType = conv.math;
    all.push_back(r);
  }
  std::stable_sort(all.begin(), all.end(), [](const Perf& a, const Perf& b) {
    return a.status == CUDNN_STATUS_SUCCESS && b.status != CUDNN_STATUS_SUCCESS;
  });
  for (int algo = 2; algo < algo_count; ++algo) {
    Perf r{};
    r.algo = static_cast<Algo>(algo);
    r.status = CUDNN_STATUS_NOT_SUPPORTED;
    r.time = -1.0f;
    r.mathType = conv.math;
    all.push_back(r);
  }
  *returned = std::min(requested, static_cast<int>(all.size()));
  std::copy_n(all.begin(), *returned, perf);
}

// cudnnGet*Algorithm_v7: checks the problem and ranks the algorithms.
template <typename Perf, typename Algo>
cudnnStatus_t heuristics(Dir dir, cudnnHandle_t handle, const Operands& o, int algo_count,
                         int requested, int* returned, Perf* perf) {
  Problem p{};
  if (!handle || requested < 1 || !returned || !perf) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = check(dir, o.xd, o.wd, o.conv, o.yd, &p)) return s;
  rank<Perf, Algo>(dir, *o.conv, algo_count, SIZE_MAX, requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

// cudnnFind*AlgorithmEx: ranks the algorithms within the workspace given, and runs the
// convolution into the output as the trials would.
template <typename Perf, typename Algo>
cudnnStatus_t find_now(Dir dir, cudnnHandle_t handle, const Operands& o, int algo_count,
                       int requested, int* returned, Perf* perf, void* ws, size_t ws_bytes) {
  Problem p{};
  if (!handle || !o.x || !o.w || !o.y || requested < 1 || !returned || !perf ||
      (ws_bytes > 0 && ws == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = check(dir, o.xd, o.wd, o.conv, o.yd, &p)) return s;
  if (ws_bytes > 0) std::memset(ws, 0xA5, std::min(ws_bytes, kAlgo1Workspace));
  if (const cudnnStatus_t s = convolve(dir, p, o, 1, 0)) return s;
  rank<Perf, Algo>(dir, *o.conv, algo_count, ws_bytes, requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

template <typename Perf, typename Algo>
cudnnStatus_t find(Dir dir, cudnnHandle_t handle, const Operands& o, int algo_count, int requested,
                   int* returned, Perf* perf, void* ws, size_t ws_bytes) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  return tandem_emu::call_on_stream(handle->stream, [&] {
    return find_now<Perf, Algo>(dir, handle, o, algo_count, requested, returned, perf, ws,
                                ws_bytes);
  });
}

// A descriptor, as cuDNN allocates one.
template <typename T>
cudnnStatus_t create(T** out) {
  if (out == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *out = new (std::nothrow) T;
  return *out ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

}  // namespace

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

void cudnnGetLastErrorString(char* message, size_t max_size) {  // read once, then cleared
  if (message == nullptr || max_size == 0) return;
  const size_t n = std::min(max_size - 1, g_last_error.size());
  std::memcpy(message, g_last_error.data(), n);
  message[n] = '\0';
  g_last_error.clear();
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {  // what this emulation returns
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
      return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    default: break;
  }
  switch (CUDNN_STATUS_CATEGORY(status)) {
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM_*";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED_*";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_UNKNOWN_STATUS";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *handle = new (std::nothrow) cudnnContext;
  return *handle ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

// --- descriptors ----------------------------------------------------------------------------

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* tensorDesc) {
  return create(tensorDesc);
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
  delete tensorDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                         int n, int c, int h, int w) {
  return set_dense(tensorDesc, format, dataType, n, c, h, w, true);
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* filterDesc) {
  return create(filterDesc);
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  delete filterDesc;
  return CUDNN_STATUS_SUCCESS;
}

// (k, c, r, s): KCRS in memory for NCHW, KRSC for NHWC.
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  return set_dense(filterDesc, format, dataType, k, c, h, w, false);
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* convDesc) {
  return create(convDesc);
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  delete convDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  if (convDesc == nullptr || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
      dilation_w <= 0 || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) ||
      (computeType != CUDNN_DATA_FLOAT && computeType != CUDNN_DATA_DOUBLE &&
       computeType != CUDNN_DATA_HALF && computeType != CUDNN_DATA_INT32))
    return CUDNN_STATUS_BAD_PARAM;
  cudnnConvolutionStruct& d = *convDesc;
  d.pad[0] = pad_h;
  d.pad[1] = pad_w;
  d.stride[0] = u;
  d.stride[1] = v;
  d.dilation[0] = dilation_h;
  d.dilation[1] = dilation_w;
  d.mode = mode;
  d.compute = computeType;
  d.set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount) {
  if (convDesc == nullptr || groupCount < 1) return CUDNN_STATUS_BAD_PARAM;
  convDesc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t mathType) {
  if (convDesc == nullptr || mathType < CUDNN_DEFAULT_MATH || mathType > CUDNN_FMA_MATH)
    return CUDNN_STATUS_BAD_PARAM;
  convDesc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t* mathType) {
  if (convDesc == nullptr || mathType == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *mathType = convDesc->math;
  return CUDNN_STATUS_SUCCESS;
}

// --- tensor operations ----------------------------------------------------------------------

// C = alpha * A + beta * C, A broadcast over its size-1 dims.
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha,
                             const cudnnTensorDescriptor_t aDesc, const void* A, const void* beta,
                             const cudnnTensorDescriptor_t cDesc, void* C) {
  if (!handle || !alpha || !beta || !aDesc || !A || !cDesc || !C || !aDesc->set || !cDesc->set ||
      aDesc->type != cDesc->type)
    return CUDNN_STATUS_BAD_PARAM;
  Desc a = *aDesc;  // broadcast: stride 0 over size-1 dims
  for (int i = 0; i < 4; ++i) {
    if (a.size[i] != cDesc->size[i] && a.size[i] != 1) return CUDNN_STATUS_BAD_PARAM;
    if (a.size[i] == 1) a.stride[i] = 0;
    a.size[i] = cDesc->size[i];
  }
  tandem_emu::run_on_stream(handle->stream, [&] {
    blend(*cDesc, C, gather(a, A), scalar(alpha, cDesc->type), scalar(beta, cDesc->type));
  });
  return CUDNN_STATUS_SUCCESS;
}

// db (1, k, 1, 1) = alpha * dy summed over n, h, w + beta * db.
cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void* alpha,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const void* beta, const cudnnTensorDescriptor_t dbDesc,
                                           void* db) {
  if (!handle || !alpha || !beta || !dyDesc || !dy || !dbDesc || !db || !dyDesc->set ||
      !dbDesc->set || dyDesc->type != dbDesc->type || dbDesc->size[0] != 1 ||
      dbDesc->size[1] != dyDesc->size[1] || dbDesc->size[2] != 1 || dbDesc->size[3] != 1 ||
      overlap(*dyDesc, dy, *dbDesc, db))
    return CUDNN_STATUS_BAD_PARAM;
  tandem_emu::run_on_stream(handle->stream, [&] {
    const std::vector<double> g = gather(*dyDesc, dy);
    const int64_t k = dyDesc->size[1], hw = dyDesc->size[2] * dyDesc->size[3];
    std::vector<double> sum(static_cast<size_t>(k));
    for (size_t i = 0; i < g.size(); ++i)
      sum[static_cast<size_t>(static_cast<int64_t>(i) / hw % k)] += g[i];
    blend(*dbDesc, db, sum, scalar(alpha, dbDesc->type), scalar(beta, dbDesc->type));
  });
  return CUDNN_STATUS_SUCCESS;
}

// --- convolutions ---------------------------------------------------------------------------

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                      size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return run(Dir::forward, handle, {xDesc, x, wDesc, w, convDesc, yDesc, y, y}, alpha, beta, algo,
             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return run(Dir::backward_data, handle, {dxDesc, dx, wDesc, w, convDesc, dyDesc, dy, dx}, alpha,
             beta, algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return run(Dir::backward_filter, handle, {xDesc, x, dwDesc, dw, convDesc, dyDesc, dy, dw}, alpha,
             beta, algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Dir::forward, handle,
      {srcDesc, nullptr, filterDesc, nullptr, convDesc, destDesc, nullptr, nullptr},
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Dir::backward_data, handle,
      {gradDesc, nullptr, filterDesc, nullptr, convDesc, diffDesc, nullptr, nullptr},
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Dir::backward_filter, handle,
      {srcDesc, nullptr, gradDesc, nullptr, convDesc, diffDesc, nullptr, nullptr},
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void* y, const int requestedAlgoCount,
    int* returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Dir::forward, handle, {xDesc, x, wDesc, w, convDesc, yDesc, y, y},
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, requestedAlgoCount, returnedAlgoCount, perfResults,
      workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t* perfResults, void* workSpace, size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Dir::backward_data, handle, {dxDesc, dx, wDesc, w, convDesc, dyDesc, dy, dx},
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, requestedAlgoCount, returnedAlgoCount, perfResults,
      workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* y,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void* dw,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Dir::backward_filter, handle, {xDesc, x, dwDesc, dw, convDesc, dyDesc, y, dw},
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, requestedAlgoCount, returnedAlgoCount, perfResults,
      workSpace, workSpaceSizeInBytes);
}

}  // extern "C"
