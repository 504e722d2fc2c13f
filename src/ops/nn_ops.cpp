// The neural-network functional ops: conv2d, batch_norm, pooling (kernel-backed, with their own
// backward kernels), and dropout, softmax and the losses (composed from differentiable ops).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>

#include "batch_norm.hpp"
#include "common.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

void check_positive(Int2 v, const char* op, const char* what) {
  TANDEM_CHECK(v.h > 0 && v.w > 0, op, ": ", what, " must be positive, got (", v.h, ", ", v.w, ")");
}
void check_non_negative(Int2 v, const char* op, const char* what) {
  TANDEM_CHECK(v.h >= 0 && v.w >= 0, op, ": ", what, " must be non-negative, got (", v.h, ", ",
               v.w, ")");
}

// floor((in + 2p - d (k - 1) - 1) / s) + 1, as torch computes it: rounding toward minus
// infinity, so a window larger than the padded input gives 0 (C++'s division would give 1).
// ceil_mode (pooling) rounds up instead, but keeps no window that starts past the input and
// its left padding, as torch's pooling_output_shape.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode = false) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Checks that `input` is (N, C, ...) or (C, ...) with `spatial` dims after C (1: L, 2: H, W, 3:
// D, H, W).
void check_batch_or_not(const Tensor& input, int64_t spatial, const char* op) {
  const char* dims = spatial == 1 ? "L)" : spatial == 2 ? "H, W)" : "D, H, W)";
  TANDEM_CHECK(input.dim() == spatial + 1 || input.dim() == spatial + 2, op,
               ": input must be (N, C, ", dims, " or (C, ", dims, ", got ",
               shape_str(input.shape()));
}

// Runs an op of (N, C, H, W) (kSpatial 2) or (N, C, D, H, W) (kSpatial 3) inputs on an
// unbatched one by adding and removing the batch dim.
template <int kSpatial = 2, typename F>
Tensor with_batch_dim(const Tensor& input, const char* op, F&& f) {
  check_batch_or_not(input, kSpatial, op);
  if (input.dim() == kSpatial + 1) return f(input.unsqueeze(0)).squeeze(0);
  return f(input);
}

// check(value) of `scalar`'s one f64 value: at once on the CPU; on a GPU at the calling thread's
// next cuda::check_deferred() (before any optimizer changes anything), as reading the value
// here would make the host wait for the GPU mid-step.
void check_scalar(const Tensor& scalar, std::function<void(double)> check) {
  if (!scalar.device().is_cuda()) return check(scalar.item<double>());
  cuda::defer_check(scalar.raw_data(), scalar.device().index(), [check](int64_t bits) {
    double value;
    std::memcpy(&value, &bits, sizeof value);
    check(value);
  });
}

// A gradient a kernel computed linearly from g (pooling, class picks, embedding rows): under
// create_graph it records itself, its own gradient being `adjoint` of the incoming one (the
// forward op with the same geometry or indices). No cost otherwise: nothing is recorded.
template <typename Adjoint>
Tensor linear_in_grad(const Tensor& g, Tensor grad, const char* name, Adjoint adjoint) {
  autograd::record(name, {g}, grad, [adjoint](const Tensor& gg) -> std::vector<Tensor> {
    return {adjoint(gg)};
  }, kDifferentiable);
  return grad;
}

// Under create_graph, the gradients of an op whose backward kernels are not differentiable:
// its forward recomputed by `composite` from recorded ops on its inputs (given back their
// history: `detached[i]` is input i as the closure kept it, undefined where there is none),
// then differentiated with create_graph. Each input goes through a view of its own, so this
// inner pass stops there and never runs a node of the outer graph; the recomputed graph is
// kept, as the gradients' own history runs through it.
template <typename Composite>
std::vector<Tensor> recomputed_gradients(const Tensor& g, const std::vector<Tensor>& detached,
                                         Composite composite) {
  std::vector<Tensor> inputs, targets;
  std::vector<size_t> which;
  for (size_t i = 0; i < detached.size(); ++i) {
    Tensor t = detached[i].defined() ? autograd::saved_input(detached[i], i) : Tensor();
    if (t.defined() && t.requires_grad()) {
      t = t.view(t.shape());
      which.push_back(i);
      targets.push_back(t);
    }
    inputs.push_back(t);
  }
  std::vector<Tensor> grads(detached.size());
  if (targets.empty()) return grads;
  std::vector<Tensor> found = autograd::grad({composite(inputs)}, targets, {g}, true,
                                             /*create_graph=*/true, /*allow_unused=*/true);
  for (size_t k = 0; k < which.size(); ++k) grads[which[k]] = found[k];
  return grads;
}

// f64 convolutions compute row-major; a channels-last input's result is handed back
// channels-last (a differentiable copy), as PyTorch's ops keep the layout.
Tensor in_format_of(const Tensor& input, const Tensor& out) {
  return input.suggest_memory_format() == MemoryFormat::ChannelsLast && out.dim() == 4
             ? out.contiguous(MemoryFormat::ChannelsLast)
             : out;
}

// What the convolutions ask alike of their operands: defined, on one device, floating and of
// one dtype, a weight of `weight_dims` dims (laid out as `weight_layout` says), positive groups.
void check_conv_operands(const Tensor& input, const Tensor& weight, const Tensor& bias,
                         int64_t groups, const char* weight_layout, const char* op,
                         int64_t weight_dims = 4) {
  check_defined(input, op, "input");
  check_defined(weight, op, "weight");
  check_inputs({input, weight, bias}, op);
  check_floating(input, op);
  TANDEM_CHECK(weight.dtype() == input.dtype() && (!bias.defined() || bias.dtype() == input.dtype()),
               op, ": input (", input.dtype(), "), weight (", weight.dtype(), ")",
               bias.defined() ? " and bias" : "", " must have the same dtype");
  TANDEM_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
  TANDEM_CHECK(weight.dim() == weight_dims, op, ": weight must be ", weight_layout, ", got ",
               shape_str(weight.shape()));
  for (int64_t d = 2; d < weight_dims; ++d)
    TANDEM_CHECK(weight.size(d) > 0, op, ": the kernel size must be positive, got weight ",
                 shape_str(weight.shape()));
  // As PyTorch: an input without pixels (convolved into padding alone) is refused.
  bool pixels = true;
  for (int64_t d = std::max<int64_t>(input.dim() - (weight_dims - 2), 1); d < input.dim(); ++d)
    pixels = pixels && input.size(d) > 0;
  TANDEM_CHECK(pixels, op,
               ": only zero batch or zero channel inputs are supported, but got input shape ",
               shape_str(input.shape()));
}

// The layout a convolution runs in. A channels-last input convolves as it lies into a
// channels-last result (cuDNN's NHWC kernels; the CPU's convert). f64 convolves row-major:
// cuDNN has no NHWC kernels for it (PyTorch makes the same exception). The weights go as they
// lie when dense in either layout (channels-last after Module::to(MemoryFormat::ChannelsLast)),
// and their gradient comes back in the same layout: each kernel converts what its call needs.
MemoryFormat conv_format(const Tensor& input) {
  return input.dtype() == DType::f64 ? MemoryFormat::Contiguous : input.suggest_memory_format();
}

}  // namespace

// --- convolution ----------------------------------------------------------------------------

namespace {
// conv2d's weight gradient from recorded ops, for input x and output gradient g: a convolution
// of x by g with the roles of stride and dilation swapped, over the batch as the summed channel
// ((C_in, N, H, W) by (C_out, N, H_out, W_out) -> (C_in, C_out, >= kH, >= kW)), cropped.
Tensor conv2d_weight_gradient(const Tensor& x, const Tensor& g, const kernels::Conv2dParams& p,
                              int64_t kh, int64_t kw) {
  Tensor full = conv2d(x.transpose(0, 1), g.transpose(0, 1), Tensor(), {p.dil_h, p.dil_w},
                       {p.pad_h, p.pad_w}, {p.stride_h, p.stride_w});
  return full.narrow(2, 0, kh).narrow(3, 0, kw).transpose(0, 1);
}

// A grouped convolution (transposed or not) as `groups` plain ones on its channel slices,
// concatenated: under create_graph, a grouped convolution's gradients are those of this
// composite (recomputed_gradients), whose plain convolutions differentiate again.
Tensor grouped_composite(const Tensor& x, const Tensor& w, const kernels::Conv2dParams& p,
                         bool transposed, Int2 output_padding) {
  const int64_t cin = x.size(1) / p.groups, wn = w.size(0) / p.groups;
  std::vector<Tensor> parts;
  for (int64_t k = 0; k < p.groups; ++k) {
    Tensor xk = x.narrow(1, k * cin, cin), wk = w.narrow(0, k * wn, wn);
    parts.push_back(transposed ? conv_transpose2d(xk, wk, Tensor(), {p.stride_h, p.stride_w},
                                                  {p.pad_h, p.pad_w}, output_padding, 1,
                                                  {p.dil_h, p.dil_w})
                               : conv2d(xk, wk, Tensor(), {p.stride_h, p.stride_w},
                                        {p.pad_h, p.pad_w}, {p.dil_h, p.dil_w}, 1));
  }
  return cat(parts, 1);
}

// conv2d's gradients under create_graph, from recorded ops (so they can be differentiated
// again): the input's is the transposed convolution of g, the weight's conv2d_weight_gradient,
// the bias's a sum. x and w are the closure's detached input and weight, given their history
// back.
std::vector<Tensor> conv2d_backward_differentiable(const Tensor& g, const Tensor& x,
                                                   const Tensor& w, const kernels::Conv2dParams& p,
                                                   bool need_x, bool need_w, bool need_b) {
  if (p.groups != 1) {
    auto composite = [&](const std::vector<Tensor>& in) {
      return grouped_composite(in[0], in[1], p, /*transposed=*/false, {0, 0});
    };
    std::vector<Tensor> grads = recomputed_gradients(g, {x, w}, composite);
    return {need_x ? grads[0] : Tensor(), need_w ? grads[1] : Tensor(),
            need_b ? sum(g, {0, 2, 3}) : Tensor()};
  }
  Tensor xi = autograd::saved_input(x, 0), wi = autograd::saved_input(w, 1);
  const int64_t kh = w.size(2), kw = w.size(3);
  Tensor gx, gw, gb;
  if (need_x) {
    // The output_padding that gives back x's size: what conv2d's floor division dropped.
    const Int2 extra{x.size(2) - ((g.size(2) - 1) * p.stride_h - 2 * p.pad_h +
                                  p.dil_h * (kh - 1) + 1),
                     x.size(3) - ((g.size(3) - 1) * p.stride_w - 2 * p.pad_w +
                                  p.dil_w * (kw - 1) + 1)};
    gx = conv_transpose2d(g, wi, Tensor(), {p.stride_h, p.stride_w}, {p.pad_h, p.pad_w}, extra,
                          1, {p.dil_h, p.dil_w});
  }
  if (need_w) gw = conv2d_weight_gradient(xi, g, p, kh, kw);
  if (need_b) gb = sum(g, {0, 2, 3});
  return {gx, gw, gb};
}
}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  check_defined(input, "conv1d", "input");
  check_defined(weight, "conv1d", "weight");
  if (autocast_changes("conv1d", {input, weight, bias}))  // before the dtype check below
    return conv1d(autocast_input("conv1d", input), autocast_input("conv1d", weight),
                  autocast_input("conv1d", bias), stride, padding, dilation, groups);
  TANDEM_CHECK((input.dim() == 2 || input.dim() == 3) && weight.dim() == 3,
               "conv1d: expected input (N, C_in, L) or (C_in, L) and weight (C_out, C_in / groups, "
               "k), got ",
               shape_str(input.shape()), " and ", shape_str(weight.shape()));
  TANDEM_CHECK(groups > 0 && input.size(-2) == weight.size(1) * groups, "conv1d: input has ",
               input.size(-2), " channels, weight ", shape_str(weight.shape()), " with groups ",
               groups, " expects ", weight.size(1) * groups);
  // In its own name and terms before the 2-d convolution over a height of 1 would check them
  // in its ("conv2d: stride must be positive, got (1, 0)").
  check_conv_operands(input, weight, bias, groups, "(C_out, C_in / groups, k)", "conv1d", 3);
  TANDEM_CHECK(stride > 0 && dilation > 0 && padding >= 0, "conv1d: stride ", stride,
               " and dilation ", dilation, " must be positive and padding ", padding,
               " non-negative");
  const int64_t lo = out_size(input.size(-1), weight.size(2), stride, padding, dilation);
  TANDEM_CHECK(lo > 0, "conv1d: input of length ", input.size(-1), " with padding ", padding,
               " is shorter than the dilated kernel (", dilation * (weight.size(2) - 1) + 1, ")");
  const bool batched = input.dim() == 3;
  Tensor x = unsqueeze(batched ? input : unsqueeze(input, 0), 2);  // (N, C_in, 1, L)
  Tensor y =
      conv2d(x, unsqueeze(weight, 2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  return batched ? squeeze(y, 2) : squeeze(squeeze(y, 2), 0);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Int2 stride,
              Int2 padding, Int2 dilation, int64_t groups) {
  if (autocast_changes("conv2d", {input, weight, bias}))
    return conv2d(autocast_input("conv2d", input), autocast_input("conv2d", weight),
                  autocast_input("conv2d", bias), stride, padding, dilation, groups);
  check_conv_operands(input, weight, bias, groups, "(C_out, C_in / groups, kH, kW)", "conv2d");
  TANDEM_CHECK(input.dim() == 4 && input.size(1) == weight.size(1) * groups,
               "conv2d: input must be (N, C, H, W) with C == weight.size(1) * groups == ",
               weight.size(1) * groups, ", got ", shape_str(input.shape()));
  TANDEM_CHECK(weight.size(0) % groups == 0, "conv2d: C_out (", weight.size(0),
               ") must be divisible by groups (", groups, ")");
  check_positive(stride, "conv2d", "stride");
  check_non_negative(padding, "conv2d", "padding");
  check_positive(dilation, "conv2d", "dilation");
  if (bias.defined())
    TANDEM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "conv2d: bias must be (",
                 weight.size(0), "), got ", shape_str(bias.shape()));
  const int64_t ho = out_size(input.size(2), weight.size(2), stride.h, padding.h, dilation.h);
  const int64_t wo = out_size(input.size(3), weight.size(3), stride.w, padding.w, dilation.w);
  TANDEM_CHECK(ho > 0 && wo > 0, "conv2d: input of spatial size (", input.size(2), ", ",
               input.size(3), ") with padding (", padding.h, ", ", padding.w,
               ") is smaller than the dilated kernel (", dilation.h * (weight.size(2) - 1) + 1,
               ", ", dilation.w * (weight.size(3) - 1) + 1, ")");
  kernels::conv2d_forward.at(input, "conv2d");
  kernels::Conv2dParams p{stride.h, stride.w, padding.h, padding.w,
                               dilation.h, dilation.w, groups};
  const MemoryFormat format = conv_format(input);
  Tensor x = input.contiguous(format).detach();
  Tensor w = weight.contiguous(weight.suggest_memory_format()).detach();
  Tensor b = bias.defined() ? bias.contiguous().detach() : Tensor();
  Tensor out = make_tensor({input.size(0), weight.size(0), ho, wo}, input.dtype(), input.device(),
                           format);
  kernels::conv2d_forward(out, x, w, b, p);
  bool need_x = input.requires_grad(), need_w = weight.requires_grad();
  bool need_b = bias.defined() && bias.requires_grad();
  autograd::record("conv2d", {input, weight, bias}, out,
                   [x, w, p, format, need_x, need_w,
                    need_b](const Tensor& g) -> std::vector<Tensor> {
                     if (x.size(0) > 0 && grad_mode_enabled())  // create_graph
                       return conv2d_backward_differentiable(g, x, w, p, need_x, need_w, need_b);
                     Tensor gx = need_x ? empty_like(x) : Tensor();
                     Tensor gw = need_w ? empty_like(w) : Tensor();
                     Tensor gb = need_b ? empty({w.size(0)}, TensorOptions(w.dtype()).device(w.device()))
                                        : Tensor();
                     if (x.size(0) == 0) {  // an empty batch contributes nothing
                       if (need_w) gw.zero_();
                       if (need_b) gb.zero_();
                       return {gx, gw, gb};
                     }
                     kernels::conv2d_backward(g.contiguous(format), x, w, gx, gw, gb, p);
                     return {gx, gw, gb};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {x, w});
  return in_format_of(input, out);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        Int2 stride, Int2 padding, Int2 output_padding, int64_t groups,
                        Int2 dilation) {
  const char* op = "conv_transpose2d";
  if (autocast_changes(op, {input, weight, bias}))
    return conv_transpose2d(autocast_input(op, input), autocast_input(op, weight),
                            autocast_input(op, bias), stride, padding, output_padding, groups,
                            dilation);
  check_conv_operands(input, weight, bias, groups, "(C_in, C_out / groups, kH, kW)", op);
  TANDEM_CHECK(input.dim() == 4 && input.size(1) == weight.size(0), op,
               ": input must be (N, C, H, W) with C == weight.size(0) == ", weight.size(0),
               ", got ", shape_str(input.shape()));
  TANDEM_CHECK(weight.size(0) % groups == 0, op, ": C_in (", weight.size(0),
               ") must be divisible by groups (", groups, ")");
  check_positive(stride, op, "stride");
  check_non_negative(padding, op, "padding");
  check_non_negative(output_padding, op, "output_padding");
  check_positive(dilation, op, "dilation");
  TANDEM_CHECK((output_padding.h < stride.h || output_padding.h < dilation.h) &&
                   (output_padding.w < stride.w || output_padding.w < dilation.w),
               op, ": output_padding must be smaller than either stride or dilation");
  const int64_t co = weight.size(1) * groups;
  if (bias.defined())
    TANDEM_CHECK(bias.dim() == 1 && bias.size(0) == co, op, ": bias must be (", co, "), got ",
                 shape_str(bias.shape()));
  // An output_padding of a stride or more (allowed below the dilation) is the same convolution
  // of the input with zero rows (columns) after its last, a stride of output_padding each: the
  // kernels then always have output_padding < stride, the only case cuDNN's backward data (the
  // GPU's transposed convolution) accepts, as its output must map back onto its input.
  const Int2 extra(output_padding.h / stride.h, output_padding.w / stride.w);
  if (extra.h > 0 || extra.w > 0)
    return in_format_of(input, conv_transpose2d(pad(input, {0, extra.w, 0, extra.h}), weight,
                                                bias, stride, padding,
                                                Int2(output_padding.h % stride.h,
                                                     output_padding.w % stride.w),
                                                groups, dilation));
  auto size = [](int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t extra) {
    return (in - 1) * s - 2 * p + d * (k - 1) + extra + 1;
  };
  const int64_t ho = size(input.size(2), weight.size(2), stride.h, padding.h, dilation.h,
                          output_padding.h);
  const int64_t wo = size(input.size(3), weight.size(3), stride.w, padding.w, dilation.w,
                          output_padding.w);
  TANDEM_CHECK(ho > 0 && wo > 0, op, ": the output would be (", ho, ", ", wo,
               "): padding too large for the input's spatial size");
  // The transposed convolution is conv2d's input gradient: with `out` as conv2d's input, `x` is
  // its output gradient (PyTorch computes it the same way). Its gradients are a conv2d of the
  // output gradient (for the input) and conv2d's weight gradient (for the weight).
  kernels::conv2d_backward.at(input, op);
  const kernels::Conv2dParams p{stride.h,   stride.w,   padding.h, padding.w,
                                dilation.h, dilation.w, groups};
  const MemoryFormat format = conv_format(input);
  Tensor x = input.contiguous(format).detach();
  Tensor w = weight.contiguous(weight.suggest_memory_format()).detach();
  Tensor out = make_tensor({input.size(0), co, ho, wo}, input.dtype(), input.device(), format);
  // conv2d_backward reads its `in` only for a weight gradient, not asked for here: `out` gives
  // the shape. An empty batch has nothing to compute.
  if (input.size(0) > 0) kernels::conv2d_backward(x, out, w, out, Tensor(), Tensor(), p);
  const bool need_x = input.requires_grad(), need_w = weight.requires_grad();
  autograd::record(op, {input, weight}, out,
                   [x, w, p, format, need_x, need_w,
                    output_padding](const Tensor& g) -> std::vector<Tensor> {
                     if (x.size(0) > 0 && grad_mode_enabled()) {
                       // create_graph: conv2d's forward and weight gradient, as recorded ops
                       if (p.groups != 1) {
                         std::vector<Tensor> grads = recomputed_gradients(
                             g, {x, w}, [&](const std::vector<Tensor>& in) {
                               return grouped_composite(in[0], in[1], p, true, output_padding);
                             });
                         return {need_x ? grads[0] : Tensor(), need_w ? grads[1] : Tensor()};
                       }
                       Tensor xi = autograd::saved_input(x, 0), wi = autograd::saved_input(w, 1);
                       return {need_x ? conv2d(g, wi, Tensor(), {p.stride_h, p.stride_w},
                                               {p.pad_h, p.pad_w}, {p.dil_h, p.dil_w})
                                      : Tensor(),
                               need_w ? conv2d_weight_gradient(g, xi, p, w.size(2), w.size(3))
                                      : Tensor()};
                     }
                     Tensor gx = need_x ? empty_like(x) : Tensor();
                     Tensor gw = need_w ? empty_like(w) : Tensor();
                     if (x.size(0) == 0) {
                       if (need_w) gw.zero_();
                       return {gx, gw};
                     }
                     Tensor gc = g.contiguous(format);
                     if (need_x) kernels::conv2d_forward(gx, gc, w, Tensor(), p);
                     if (need_w) kernels::conv2d_backward(x, gc, w, Tensor(), gw, Tensor(), p);
                     return {gx, gw};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {x, w});
  Tensor result = in_format_of(input, out);
  return bias.defined() ? add(result, bias.reshape({1, co, 1, 1})) : result;
}

// --- batch norm -------------------------------------------------------------------------------

namespace {

// Batch norm's kernels see (N, C, S): a view of the 4-d tensor t laid out in `format`, with the
// channels innermost for channels-last (no copy either way).
Tensor ncs_view(const Tensor& t, MemoryFormat format, int64_t n, int64_t c, int64_t s) {
  if (format == MemoryFormat::Contiguous) return t.reshape({n, c, s});
  return make_tensor(t.storage(), {n, c, s}, {s * c, 1, c}, t.storage_offset(), t.dtype());
}
// A fresh (N, C, S) tensor laid out as batch norm's views of `format`.
Tensor ncs_empty(MemoryFormat format, int64_t n, int64_t c, int64_t s, DType dtype, Device device) {
  return ncs_view(make_tensor({n, c, s}, dtype, device), format, n, c, s);
}
// The 4-d `shape` view of such a tensor.
Tensor ncs_unview(const Tensor& t, MemoryFormat format, const Shape& shape) {
  if (format == MemoryFormat::Contiguous) return t.reshape(shape);
  return make_tensor(t.storage(), shape, channels_last_strides(shape), t.storage_offset(),
                     t.dtype());
}

// The checks batch_norm and sync_batch_norm share; returns (N, C, the values per plane).
std::array<int64_t, 3> check_batch_norm(const Tensor& input, const Tensor& running_mean,
                                        const Tensor& running_var, const Tensor& weight,
                                        const Tensor& bias, const Tensor& residual, bool training,
                                        double eps, const char* name) {
  check_defined(input, name, "input");
  check_inputs({input, running_mean, running_var, weight, bias, residual}, name);
  check_floating(input, name);
  TANDEM_CHECK(input.dim() >= 2, name, ": input must be (N, C, ...), got ",
               shape_str(input.shape()));
  // s from the dims themselves: numel / (N C) would make it 0 for an empty batch.
  int64_t s = 1;
  for (int64_t d = 2; d < input.dim(); ++d) s *= input.size(d);
  const int64_t n = input.size(0), c = input.size(1);
  auto check_param = [&](const Tensor& t, const char* what) {
    if (!t.defined()) return;
    TANDEM_CHECK(t.dim() == 1 && t.size(0) == c, name, ": ", what, " must be (", c,
                 ") for an input with ", c, " channels, got ", shape_str(t.shape()));
    check_floating(t, name, what);
  };
  check_param(running_mean, "running_mean");
  check_param(running_var, "running_var");
  check_param(weight, "weight");
  check_param(bias, "bias");
  TANDEM_CHECK(running_mean.defined() == running_var.defined(),
               name, ": give both running_mean and running_var, or neither");
  TANDEM_CHECK(training || running_mean.defined(),
               name, ": evaluation mode needs running_mean and running_var");
  TANDEM_CHECK(eps > 0, name, ": eps must be positive, got ", eps);
  if (residual.defined()) {
    TANDEM_CHECK(residual.shape() == input.shape() && residual.dtype() == input.dtype(), name,
                 ": the residual must have the input's shape and dtype (",
                 shape_str(input.shape()), ", ", dtype_name(input.dtype()), "), got ",
                 shape_str(residual.shape()), ", ", dtype_name(residual.dtype()));
  }
  return {n, c, s};
}

// The group's statistics for sync_batch_norm, as PyTorch's SyncBatchNorm gathers them: this
// rank's mean and biased variance from batch norm's own kernel, then [count, count * mean (C),
// count * (var + mean^2) (C)] in f64 summed over every rank by `allreduce` (no copy of the input,
// no square of it); sets the group's mean and biased variance and returns its count (f64, one
// element, where x lies: on a GPU the host never reads it, so a step does not wait for the
// group). A rank with an empty batch adds zeros.
Tensor group_stats(const Tensor& x, int64_t c, const StatsAllreduce& allreduce, Tensor& mean,
                   Tensor& var, const char* name) {
  const DType pdt = compute_dtype(x.dtype());
  const TensorOptions f64 = TensorOptions(DType::f64).device(x.device());
  const double local = static_cast<double>(x.size(0) * x.size(2));
  Tensor stats;
  if (local > 0) {
    Tensor m = empty({c}, TensorOptions(pdt).device(x.device())), v = empty_like(m);
    kernels::batch_norm_stats(m, v, x, nullptr);
    m = m.to(DType::f64);
    stats = cat({full({1}, local, f64), mul(m, local),
                 mul(add(v.to(DType::f64), mul(m, m)), local)});
  } else {
    stats = zeros({1 + 2 * c}, f64);
  }
  allreduce(stats);
  Tensor count = stats.narrow(0, 0, 1);
  check_scalar(count, [name](double n) {
    TANDEM_CHECK(n > 1, name, ": expected more than 1 value per channel over all ranks, got ", n);
  });
  Tensor m = stats.narrow(0, 1, c) / count;
  var = clamp(stats.narrow(0, 1 + c, c) / count - mul(m, m), 0.0, std::nullopt).to(pdt);
  mean = m.to(pdt).contiguous();
  return count;
}

// (x - mean) / sqrt(var + eps) over `dims`, the biased variance, from recorded ops: layer_norm
// and group_norm, and batch norm's forward under create_graph.
Tensor normalized(const Tensor& x, const Shape& dims, double eps) {
  Tensor centered = sub(x, mean(x, dims, true));
  return mul(centered, pow(add(mean(mul(centered, centered), dims, true), eps), -0.5));
}

// Each run of `features` consecutive values of x (contiguous: (rows, features)) normalized to
// mean 0 and variance 1 (group norm; layer norm has kernels of its own): batch norm's op over
// (1, rows, features), whose per-channel statistics are the rows' (f64 accumulators) and whose
// backward takes two passes over memory, on every backend and under create_graph. Composed of
// mean, sub, mul and pow it took about ten passes and 9x libtorch's time (bench_ops --ops);
// that remains only where batch norm refuses: one feature (a single value per channel), or
// nothing.
Tensor normalized_rows(const Tensor& x, int64_t features, double eps) {
  const int64_t rows = features > 0 ? x.numel() / features : 0;
  if (features > 1 && rows > 0) {
    const Tensor none;
    return batch_norm(x.reshape({1, rows, features}), none, none, none, none, /*training=*/true,
                      0.0, eps)
        .reshape(x.shape());
  }
  return normalized(x.reshape({rows, features}), {1}, eps).reshape(x.shape());
}

// batch_norm_op's forward from recorded ops, for its backward under create_graph: in training
// from x's own statistics (so they are differentiated too), else from the running ones given
// as mean and invstd (constants). Relu is the product with its mask (1 where the forward's
// output was positive), a constant: the gradients do not depend on the residual's value then
// (the output is linear in it), so the forward need not keep the residual for them.
Tensor batch_norm_composite(const Tensor& input, const Tensor& weight, const Tensor& bias,
                            const Tensor& residual, const Tensor& mean, const Tensor& invstd,
                            bool training, double eps, const Tensor& relu_mask) {
  const DType pdt = compute_dtype(input.dtype());
  Tensor x = input.to(pdt);
  Shape reduced, per_channel(x.dim(), 1);
  per_channel[1] = x.size(1);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) reduced.push_back(d);
  Tensor y = training ? normalized(x, reduced, eps)
                      : mul(sub(x, reshape(mean, per_channel)), reshape(invstd, per_channel));
  if (weight.defined()) y = mul(y, reshape(weight, per_channel));
  if (bias.defined()) y = add(y, reshape(bias, per_channel));
  y = y.to(input.dtype());
  if (residual.defined()) y = add(y, residual);
  return relu_mask.defined() ? mul(y, relu_mask) : y;
}

// batch_norm, then + residual (when defined), then relu (when `relu`), as one op; with a group
// allreduce (sync_batch_norm) the statistics and the gradient's per-channel sums are the group's.
// A module's num_batches_tracked (`batches_tracked`) gains 1 when training.
Tensor batch_norm_op(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool training, double momentum,
                     double eps, const Tensor& residual, bool relu, const char* name,
                     const StatsAllreduce* group = nullptr,
                     const Tensor& batches_tracked = Tensor()) {
  if (autocast_changes("batch_norm", {input, residual}))
    return batch_norm_op(autocast_input("batch_norm", input, {residual}), running_mean, running_var,
                         weight, bias, training, momentum, eps,
                         autocast_input("batch_norm", residual, {input}), relu, name, group,
                         batches_tracked);
  const auto ncs = check_batch_norm(input, running_mean, running_var, weight, bias, residual,
                                    training, eps, name);
  const int64_t n = ncs[0], c = ncs[1], s = ncs[2];
  TANDEM_CHECK(group || !training || n * s > 1, name, ": expected more than 1 value per channel "
               "when training, got input of shape ", shape_str(input.shape()));
  // f16/bf16 inputs reach the kernels as they are; statistics and parameters are f32.
  kernels::batch_norm_forward.at(input, name);
  const DType dt = input.dtype(), pdt = compute_dtype(dt);
  const TensorOptions opts = TensorOptions(pdt).device(input.device());
  // A channels-last input is normalized as it lies (on the CPU its kernels convert).
  const MemoryFormat format = input.suggest_memory_format();
  Tensor x = ncs_view(input.contiguous(format).detach(), format, n, c, s);
  // The residual is read by the forward kernel alone: no gradient needs its value (that of an
  // addition, relu's mask from the output), so the backward does not keep it (a downsampling
  // shortcut's output, 0.77 GB of ResNet-50's activations at batch 256).
  Tensor r = residual.defined() ? ncs_view(residual.contiguous(format).detach(), format, n, c, s)
                                : Tensor();
  const bool has_residual = residual.defined();
  auto param = [&](const Tensor& t) { return t.defined() ? as_dtype(t.detach(), pdt).contiguous() : Tensor(); };
  Tensor w = param(weight), b = param(bias);
  Tensor mean, invstd = empty({c}, opts), group_count;
  {
    NoGradGuard guard;
    if (training) {
      Tensor var;
      if (group) group_count = group_stats(x, c, *group, mean, var, name);
      // invstd, and the running statistics in the same launch (their own dtype and layout
      // through copies in the statistics' dtype); on a GPU, that of the statistics too, where
      // they are this rank's own. The group's count stays where it lies (a count of 1 or less,
      // an error reported later on a GPU by check_scalar, leaves them as they were).
      kernels::BatchNormUpdate u{eps, momentum, static_cast<double>(n * s), running_mean.defined(),
                                 group ? group_count.data_ptr<double>() : nullptr};
      Tensor rm = u.running ? as_dtype(running_mean, pdt).contiguous() : Tensor();
      Tensor rv = u.running ? as_dtype(running_var, pdt).contiguous() : Tensor();
      // num_batches_tracked in the same launch where it is an i64 scalar on the input's device
      // (a module's, as Module::to keeps it); else in an op of its own.
      Tensor counter = batches_tracked;
      if (counter.defined() && (counter.dtype() != DType::i64 || counter.numel() != 1 ||
                                counter.device() != input.device())) {
        counter.add_(1);
        counter = Tensor();
      }
      if (counter.defined()) u.batches_tracked = counter.data_ptr<int64_t>();
      if (group) {
        kernels::batch_norm_update(invstd, rm, rv, mean, var, u);
      } else {
        mean = empty({c}, opts);
        var = empty({c}, opts);
        const kernels::BatchNormStatsUpdate update{invstd, rm, rv, u};
        kernels::batch_norm_stats(mean, var, x, &update);
      }
      if (counter.defined()) counter.storage().bump_version();  // as add_ would
      if (u.running && !rm.is_same(running_mean)) Tensor(running_mean).copy_(rm);
      if (u.running && !rv.is_same(running_var)) Tensor(running_var).copy_(rv);
    } else {
      mean = as_dtype(running_mean, pdt).contiguous();
      kernels::batch_norm_update(invstd, Tensor(), Tensor(), mean,
                                 as_dtype(running_var, pdt).contiguous(), {eps, 0, 0, false});
    }
  }
  Tensor out = ncs_empty(format, n, c, s, dt, input.device());
  kernels::batch_norm_forward(out, x, mean, invstd, w, b, r, relu);
  // relu's mask comes from the output, as relu's own backward takes it (no copy: the output is
  // kept anyway by whatever consumes it). Detached, so the graph holds no cycle through it.
  Tensor y = relu ? out.detach() : Tensor();
  out = ncs_unview(out, format, input.shape());
  bool need_x = input.requires_grad();
  bool need_w = weight.defined() && weight.requires_grad();
  bool need_b = bias.defined() && bias.requires_grad();
  bool need_r = residual.defined() && residual.requires_grad();
  Shape in_shape = input.shape();
  DType wdt = weight.defined() ? weight.dtype() : pdt, bdt = bias.defined() ? bias.dtype() : pdt;
  // The gradient's per-channel sums over the group, between the kernel's two halves.
  std::optional<kernels::BatchNormSync> sync;
  if (group) sync = kernels::BatchNormSync{*group, group_count};
  autograd::record(name, {input, weight, bias, residual}, out,
                   [=](const Tensor& g) -> std::vector<Tensor> {
                     if (grad_mode_enabled()) {  // create_graph
                       if (sync)
                         TANDEM_THROW(NotImplementedError, "backward with create_graph: the "
                                      "backward of ", name, " is not differentiable here");
                       // Any residual of its shape gives the same gradients (zeros here).
                       Tensor xin = ncs_unview(x, format, in_shape);
                       Tensor yout = relu ? ncs_unview(y, format, in_shape) : Tensor();
                       Tensor mask = relu ? gt(yout, zeros_like(yout)).to(dt) : Tensor();
                       auto grads = recomputed_gradients(
                           g, {xin, w, b, has_residual ? zeros_like(xin) : Tensor()},
                           [=](const std::vector<Tensor>& in) {
                             return batch_norm_composite(in[0], in[1], in[2], in[3], mean, invstd,
                                                         training, eps, mask);
                           });
                       if (grads[1].defined()) grads[1] = grads[1].to(wdt);
                       if (grads[2].defined()) grads[2] = grads[2].to(bdt);
                       return grads;
                     }
                     const TensorOptions o = TensorOptions(pdt).device(x.device());
                     Tensor gx = need_x ? ncs_empty(format, n, c, s, dt, x.device()) : Tensor();
                     Tensor gw = need_w ? empty({c}, o) : Tensor();
                     Tensor gb = need_b ? empty({c}, o) : Tensor();
                     Tensor gr = need_r ? ncs_empty(format, n, c, s, dt, x.device()) : Tensor();
                     kernels::batch_norm_backward(gx, gw, gb, gr,
                                                  ncs_view(g.contiguous(format), format, n, c, s),
                                                  x, y, mean, invstd, w, training,
                                                  sync ? &*sync : nullptr);
                     return {need_x ? ncs_unview(gx, format, in_shape) : Tensor(),
                             need_w ? gw.to(wdt) : Tensor(), need_b ? gb.to(bdt) : Tensor(),
                             need_r ? ncs_unview(gr, format, in_shape) : Tensor()};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {x, w, y, mean});
  return out;
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return batch_norm_op(input, running_mean, running_var, weight, bias, training, momentum, eps,
                       Tensor(), false, "batch_norm");
}

Tensor batch_norm_relu(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const Tensor& residual) {
  return batch_norm_op(input, running_mean, running_var, weight, bias, training, momentum, eps,
                       residual, true, "batch_norm_relu");
}

Tensor sync_batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps,
                       const Tensor& residual, bool relu, const StatsAllreduce& allreduce_sum) {
  TANDEM_CHECK(allreduce_sum != nullptr, "sync_batch_norm: no allreduce given");
  return batch_norm_op(input, running_mean, running_var, weight, bias, true, momentum, eps,
                       residual, relu, "sync_batch_norm", &allreduce_sum);
}

namespace detail {

Tensor batch_norm_module(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& num_batches_tracked, const Tensor& weight,
                         const Tensor& bias, bool training, double momentum, double eps,
                         const Tensor& residual, bool relu, const StatsAllreduce* group) {
  const char* name = group ? "sync_batch_norm" : relu ? "batch_norm_relu" : "batch_norm";
  return batch_norm_op(input, running_mean, running_var, weight, bias, training, momentum, eps,
                       residual, relu, name, group, num_batches_tracked);
}

}  // namespace detail

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_defined(input, "layer_norm", "input");
  check_floating(input, "layer_norm");
  check_inputs({input, weight, bias}, "layer_norm");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const Shape trailing(input.shape().end() - std::min<int64_t>(k, input.dim()),
                       input.shape().end());
  TANDEM_CHECK(k > 0 && k <= input.dim() && trailing == normalized_shape, "layer_norm: "
               "normalized_shape ", shape_str(normalized_shape), " must be the input's last ",
               "dims, got input ", shape_str(input.shape()));
  for (const Tensor* t : {&weight, &bias})
    TANDEM_CHECK(!t->defined() || t->shape() == normalized_shape, "layer_norm: weight and bias "
                 "must have shape ", shape_str(normalized_shape), ", got ",
                 shape_str(t->shape()));
  TANDEM_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  const DType dt = input.dtype(), pdt = compute_dtype(dt);
  const Shape in_shape = input.shape();
  const int64_t features = numel_of(normalized_shape);
  const int64_t rows = features > 0 ? input.numel() / features : 0;
  // The affine part from recorded ops: alone for an empty input, and under create_graph with
  // the statistics' ops before it.
  auto affine = [=](Tensor y, const Tensor& w, const Tensor& b) {
    if (w.defined()) y = mul(y, w);
    if (b.defined()) y = add(y, b);
    return y.to(dt);
  };
  if (rows == 0) return affine(normalized_rows(input.to(pdt), features, eps), weight, bias);
  kernels::layer_norm_forward.at(input, "layer_norm");
  // f16/bf16 inputs reach the kernels as they are; statistics and parameters are f32.
  Tensor x = input.contiguous().detach().reshape({rows, features});
  auto param = [&](const Tensor& t) {
    return t.defined() ? as_dtype(t.detach(), pdt).contiguous() : Tensor();
  };
  Tensor w = param(weight), b = param(bias);
  const TensorOptions stats = TensorOptions(pdt).device(input.device());
  Tensor mean = empty({rows}, stats), rstd = empty({rows}, stats);
  Tensor out = empty({rows, features}, TensorOptions(dt).device(input.device()));
  kernels::layer_norm_forward(out, mean, rstd, x, w, b, eps);
  out = out.reshape(in_shape);
  const bool need_x = input.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  const DType wdt = weight.defined() ? weight.dtype() : pdt;
  const DType bdt = bias.defined() ? bias.dtype() : pdt;
  autograd::record(
      "layer_norm", {input, weight, bias}, out,
      [=](const Tensor& g) -> std::vector<Tensor> {
        std::vector<Tensor> grads(3);
        if (grad_mode_enabled()) {  // create_graph
          grads = recomputed_gradients(
              g, {x.reshape(in_shape), w, b}, [=](const std::vector<Tensor>& in) {
                Tensor y = normalized(in[0].to(pdt).reshape({rows, features}), {1}, eps);
                return affine(y.reshape(in_shape), in[1], in[2]);
              });
        } else {
          if (need_x) grads[0] = empty({rows, features}, TensorOptions(dt).device(x.device()));
          if (need_w) grads[1] = empty(w.shape(), stats);
          if (need_b) grads[2] = empty(b.shape(), stats);
          kernels::layer_norm_backward(grads[0], grads[1], grads[2], as_dtype(g, dt).contiguous(),
                                       x, mean, rstd, w);
          if (need_x) grads[0] = grads[0].reshape(in_shape);
        }
        if (grads[1].defined()) grads[1] = grads[1].to(wdt);
        if (grads[2].defined()) grads[2] = grads[2].to(bdt);
        return grads;
      },
      kDifferentiable);
  autograd::save_for_backward(out, {x, w});
  return out;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_defined(input, "group_norm", "input");
  check_floating(input, "group_norm");
  check_inputs({input, weight, bias}, "group_norm");
  TANDEM_CHECK(input.dim() >= 2, "group_norm: input must be (N, C, ...), got ",
               shape_str(input.shape()));
  const int64_t n = input.size(0), c = input.size(1);
  TANDEM_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: the ", c, " channels must "
               "split into num_groups (", num_groups, ") equal groups");
  for (const Tensor* t : {&weight, &bias})
    TANDEM_CHECK(!t->defined() || t->shape() == Shape{c}, "group_norm: weight and bias must "
                 "have shape (", c, "), got ", shape_str(t->shape()));
  TANDEM_CHECK(eps >= 0, "group_norm: eps must be >= 0, got ", eps);
  Tensor y = normalized_rows(input.to(compute_dtype(input.dtype())),
                             n > 0 ? input.numel() / (n * num_groups) : 0, eps);
  Shape per_channel(input.dim(), 1);
  per_channel[1] = c;
  if (weight.defined()) y = mul(y, weight.reshape(per_channel));
  if (bias.defined()) y = add(y, bias.reshape(per_channel));
  return y.to(input.dtype());
}

// --- pooling ------------------------------------------------------------------------------------

namespace {

kernels::Pool2dParams pool_params(const Tensor& x, Int2 k, Int2 stride, Int2 padding, Int2 dilation,
                                  const char* op, int64_t& ho, int64_t& wo, bool ceil_mode = false,
                                  bool count_include_pad = true,
                                  std::optional<int64_t> divisor_override = std::nullopt) {
  TANDEM_CHECK(!divisor_override || *divisor_override != 0, op,
               ": divisor_override must be non-zero");
  check_positive(k, op, "kernel_size");
  if (stride.h == 0 && stride.w == 0) stride = k;  // default: stride = kernel size
  check_positive(stride, op, "stride");
  check_non_negative(padding, op, "padding");
  check_positive(dilation, op, "dilation");
  TANDEM_CHECK(padding.h <= k.h / 2 && padding.w <= k.w / 2, op, ": padding should be at most "
               "half of the kernel size, got padding (", padding.h, ", ", padding.w,
               ") for kernel (", k.h, ", ", k.w, ")");
  ho = out_size(x.size(2), k.h, stride.h, padding.h, dilation.h, ceil_mode);
  wo = out_size(x.size(3), k.w, stride.w, padding.w, dilation.w, ceil_mode);
  TANDEM_CHECK(ho > 0 && wo > 0, op, ": output size would be (", ho, ", ", wo, ") for input ",
               shape_str(x.shape()), "; the input is too small for the kernel");
  return {k.h,       k.w,        stride.h,   stride.w,          padding.h,
          padding.w, dilation.h, dilation.w, count_include_pad, divisor_override.value_or(0)};
}

}  // namespace

// Pooling runs in the input's layout: a channels-last input is pooled as it lies (no transposes
// on either device) into a channels-last result, indices and gradient.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Int2 kernel_size,
                                                   Int2 stride, Int2 padding, Int2 dilation,
                                                   bool ceil_mode) {
  const char* op = "max_pool2d";
  check_defined(input, op, "input");
  check_floating(input, op);
  Tensor idx;
  const Tensor values = with_batch_dim(input, op, [&](const Tensor& in) {
    int64_t ho, wo;
    auto p = pool_params(in, kernel_size, stride, padding, dilation, op, ho, wo, ceil_mode);
    kernels::max_pool2d_forward.at(in, op);
    const MemoryFormat format = in.suggest_memory_format();
    const Shape out_shape{in.size(0), in.size(1), ho, wo}, in_shape = in.shape();
    Tensor out = make_tensor(out_shape, in.dtype(), in.device(), format);
    idx = make_tensor(out_shape, DType::i64, in.device(), format);
    kernels::max_pool2d_forward(out, idx, in.contiguous(format).detach(), p);
    autograd::record(
        op, {in}, out,
        [idx, in_shape, format, p](const Tensor& g) {
          Tensor gx = make_tensor(in_shape, g.dtype(), g.device(), format);
          kernels::max_pool2d_backward(gx, g.contiguous(format), idx, p);
          // Its adjoint: each output's gradient read back from the input its index names.
          return std::vector<
              Tensor>{linear_in_grad(g, gx, "max_pool2d_backward", [idx](const Tensor& gg) {
            const int64_t n = idx.size(0), c = idx.size(1);
            return gather(gg.reshape({n, c, -1}), 2, idx.reshape({n, c, -1})).reshape(idx.shape());
          })};
        },
        kDifferentiable);
    return out;
  });
  return {values, input.dim() == 3 ? idx.squeeze(0) : idx};
}

Tensor max_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride, Int2 padding, Int2 dilation,
                  bool ceil_mode) {
  return std::get<0>(
      max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode));
}

Tensor avg_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride, Int2 padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  check_defined(input, "avg_pool2d", "input");
  check_inputs({input}, "avg_pool2d");
  check_floating(input, "avg_pool2d");
  return with_batch_dim(input, "avg_pool2d", [&](const Tensor& in) {
    int64_t ho, wo;
    auto p = pool_params(in, kernel_size, stride, padding, 1, "avg_pool2d", ho, wo, ceil_mode,
                         count_include_pad, divisor_override);
    kernels::avg_pool2d_forward.at(in, "avg_pool2d");
    const MemoryFormat format = in.suggest_memory_format();
    const Shape in_shape = in.shape();
    Tensor out = make_tensor({in.size(0), in.size(1), ho, wo}, in.dtype(), in.device(), format);
    kernels::avg_pool2d_forward(out, in.contiguous(format).detach(), p);
    autograd::record(
        "avg_pool2d", {in}, out,
        [in_shape, format, p, ceil_mode](const Tensor& g) {
          Tensor gx = make_tensor(in_shape, g.dtype(), g.device(), format);
          kernels::avg_pool2d_backward(gx, g.contiguous(format), p);
          return std::vector<Tensor>{
              linear_in_grad(g, gx, "avg_pool2d_backward", [p, ceil_mode](const Tensor& gg) {
                std::optional<int64_t> divisor;
                if (p.divisor_override != 0) divisor = p.divisor_override;
                return avg_pool2d(gg, {p.kh, p.kw}, {p.stride_h, p.stride_w}, {p.pad_h, p.pad_w},
                                  ceil_mode, p.count_include_pad, divisor);
              })};
        },
        kDifferentiable);
    return out;
  });
}

Tensor adaptive_avg_pool2d(const Tensor& input, Int2 output_size) {
  check_defined(input, "adaptive_avg_pool2d", "input");
  check_inputs({input}, "adaptive_avg_pool2d");
  check_floating(input, "adaptive_avg_pool2d");
  check_positive(output_size, "adaptive_avg_pool2d", "output_size");
  return with_batch_dim(input, "adaptive_avg_pool2d", [&](const Tensor& in) {
    TANDEM_CHECK(in.size(2) > 0 && in.size(3) > 0, "adaptive_avg_pool2d: input ",
                 shape_str(in.shape()), " has an empty spatial dim");
    kernels::adaptive_avg_pool2d_forward.at(in, "adaptive_avg_pool2d");
    const MemoryFormat format = in.suggest_memory_format();
    const Shape in_shape = in.shape();
    Tensor out = make_tensor({in.size(0), in.size(1), output_size.h, output_size.w}, in.dtype(),
                             in.device(), format);
    kernels::adaptive_avg_pool2d_forward(out, in.contiguous(format).detach());
    autograd::record("adaptive_avg_pool2d", {in}, out, [in_shape, format](const Tensor& g) {
      Tensor gx = make_tensor(in_shape, g.dtype(), g.device(), format);
      kernels::adaptive_avg_pool2d_backward(gx, g.contiguous(format));
      const Int2 size{g.size(2), g.size(3)};
      return std::vector<Tensor>{linear_in_grad(g, gx, "adaptive_avg_pool2d_backward",
                                                [size](const Tensor& gg) {
        return adaptive_avg_pool2d(gg, size);
      })};
    }, kDifferentiable);
    return out;
  });
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, Int2 output_size) {
  check_defined(input, "adaptive_max_pool2d", "input");
  check_floating(input, "adaptive_max_pool2d");
  check_positive(output_size, "adaptive_max_pool2d", "output_size");
  Tensor indices;
  Tensor out = with_batch_dim(input, "adaptive_max_pool2d", [&](const Tensor& in) {
    const int64_t n = in.size(0), c = in.size(1), h = in.size(2), w = in.size(3);
    const int64_t oh = output_size.h, ow = output_size.w;
    TANDEM_CHECK(h > 0 && w > 0, "adaptive_max_pool2d: input ", shape_str(in.shape()),
                 " has an empty spatial dim");
    // Window i of a dim: [floor(i in / out), ceil((i + 1) in / out)), as torch's.
    auto window = [](int64_t i, int64_t size, int64_t out) {
      return std::pair<int64_t, int64_t>{i * size / out, ((i + 1) * size + out - 1) / out};
    };
    int64_t kh = 0, kw = 0;
    for (int64_t i = 0; i < oh; ++i)
      kh = std::max(kh, window(i, h, oh).second - window(i, h, oh).first);
    for (int64_t j = 0; j < ow; ++j)
      kw = std::max(kw, window(j, w, ow).second - window(j, w, ow).first);
    // Each window's positions in row-major order, padded to kh x kw by repeating its last row
    // and column. A repeat comes after the position it repeats, so the first maximum is still
    // the first in row-major order, the one torch picks.
    std::vector<int64_t> flat;
    flat.reserve(static_cast<size_t>(oh * ow * kh * kw));
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const auto [r0, r1] = window(i, h, oh);
        const auto [c0, c1] = window(j, w, ow);
        for (int64_t a = 0; a < kh; ++a)
          for (int64_t b = 0; b < kw; ++b)
            flat.push_back(std::min(r0 + a, r1 - 1) * w + std::min(c0 + b, c1 - 1));
      }
    const int64_t taps = kh * kw;
    const Tensor positions = from_vector(flat).to(in.device());
    // The windows' elements side by side, then the max of each: index_select and max carry
    // the gradient to the element picked.
    const Tensor windows =
        in.reshape({n, c, h * w}).index_select(2, positions).view({n, c, oh, ow, taps});
    auto [values, picked] = windows.max(4);
    indices = positions.view({1, 1, oh, ow, taps})
                  .expand({n, c, oh, ow, taps})
                  .gather(4, picked.unsqueeze(4))
                  .squeeze(4);
    return values;
  });
  if (input.dim() == 3) indices = indices.squeeze(0);
  return {out, indices};
}

std::tuple<Tensor, Tensor> adaptive_max_pool1d(const Tensor& input, int64_t output_size) {
  check_defined(input, "adaptive_max_pool1d", "input");
  TANDEM_CHECK(input.dim() == 2 || input.dim() == 3,
               "adaptive_max_pool1d: input must be (N, "
               "C, L) or (C, L), got ",
               shape_str(input.shape()));
  TANDEM_CHECK(output_size > 0, "adaptive_max_pool1d: output_size must be positive, got ",
               output_size);
  auto [values, indices] = adaptive_max_pool2d(input.unsqueeze(-2), {1, output_size});
  return {values.squeeze(-2), indices.squeeze(-2)};
}

// --- 3-d convolution and pooling, composed of the 2-d ops ---------------------------------------

namespace {
std::string int3_str(Int3 v) { return shape_str(int_list(v)); }
}  // namespace

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, Int3 stride,
              Int3 padding, Int3 dilation, int64_t groups) {
  if (autocast_changes("conv3d", {input, weight, bias}))
    return conv3d(autocast_input("conv3d", input), autocast_input("conv3d", weight),
                  autocast_input("conv3d", bias), stride, padding, dilation, groups);
  check_conv_operands(input, weight, bias, groups, "(C_out, C_in / groups, kD, kH, kW)", "conv3d",
                      5);
  TANDEM_CHECK(std::min({stride.d, stride.h, stride.w, dilation.d, dilation.h, dilation.w}) > 0 &&
                   std::min({padding.d, padding.h, padding.w}) >= 0,
               "conv3d: stride ", int3_str(stride), " and dilation ", int3_str(dilation),
               " must be positive and padding ", int3_str(padding), " non-negative");
  TANDEM_CHECK(weight.size(0) % groups == 0, "conv3d: C_out (", weight.size(0),
               ") must be divisible by groups (", groups, ")");
  if (bias.defined())
    TANDEM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "conv3d: bias must be (",
                 weight.size(0), "), got ", shape_str(bias.shape()));
  return with_batch_dim<3>(input, "conv3d", [&](const Tensor& in) {
    TANDEM_CHECK(in.size(1) == weight.size(1) * groups,
                 "conv3d: input must be (N, C, D, H, W) with C == weight.size(1) * groups == ",
                 weight.size(1) * groups, ", got ", shape_str(in.shape()));
    const int64_t n = in.size(0), c = in.size(1), kd = weight.size(2);
    const int64_t depth = out_size(in.size(2), kd, stride.d, padding.d, dilation.d);
    const Int3 span{dilation.d * (kd - 1) + 1, dilation.h * (weight.size(3) - 1) + 1,
                    dilation.w * (weight.size(4) - 1) + 1};
    TANDEM_CHECK(
        depth > 0 && in.size(3) + 2 * padding.h >= span.h && in.size(4) + 2 * padding.w >= span.w,
        "conv3d: input of spatial size (", in.size(2), ", ", in.size(3), ", ", in.size(4),
        ") with padding ", int3_str(padding), " is smaller than the dilated kernel ",
        int3_str(span));
    // The depth taps as channels: cols (N * D_out, C * kD, H, W) holds at (n * D_out + o,
    // c * kD + k) the input plane (n, c) of depth o * stride - padding + k * dilation, which is
    // the order of the weight's (C_in / groups, kD) dims, so each output depth is one sample of
    // a conv2d by the weight seen as (C_out, C_in / groups * kD, kH, kW).
    const Tensor x = padding.d > 0 ? pad(in, {0, 0, 0, 0, padding.d, padding.d}) : in;
    std::vector<Tensor> taps;
    for (int64_t k = 0; k < kd; ++k) {
      const int64_t first = k * dilation.d;
      taps.push_back(
          slice(x, 2, first, first + (depth - 1) * stride.d + 1, stride.d).transpose(1, 2));
    }
    const Tensor cols = stack(taps, 3).reshape({n * depth, c * kd, in.size(3), in.size(4)});
    const Tensor y = conv2d(
        cols, weight.reshape({weight.size(0), weight.size(1) * kd, weight.size(3), weight.size(4)}),
        bias, {stride.h, stride.w}, {padding.h, padding.w}, {dilation.h, dilation.w}, groups);
    return y.reshape({n, depth, y.size(1), y.size(2), y.size(3)}).transpose(1, 2).contiguous();
  });
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        int64_t stride, int64_t padding, int64_t output_padding, int64_t groups,
                        int64_t dilation) {
  const char* op = "conv_transpose1d";
  check_defined(input, op, "input");
  check_defined(weight, op, "weight");
  if (autocast_changes(op, {input, weight, bias}))  // before the dtype check below
    return conv_transpose1d(autocast_input(op, input), autocast_input(op, weight),
                            autocast_input(op, bias), stride, padding, output_padding, groups,
                            dilation);
  TANDEM_CHECK((input.dim() == 2 || input.dim() == 3) && weight.dim() == 3, op,
               ": expected input (N, C_in, L) or (C_in, L) and weight (C_in, C_out / groups, k), "
               "got ",
               shape_str(input.shape()), " and ", shape_str(weight.shape()));
  // conv_transpose2d over a height of 1, the arguments checked first in 1-d terms.
  check_conv_operands(input, weight, bias, groups, "(C_in, C_out / groups, k)", op, 3);
  TANDEM_CHECK(stride > 0 && dilation > 0 && padding >= 0 && output_padding >= 0, op, ": stride ",
               stride, " and dilation ", dilation, " must be positive, padding ", padding,
               " and output_padding ", output_padding, " non-negative");
  TANDEM_CHECK(output_padding < stride || output_padding < dilation, op, ": output_padding (",
               output_padding, ") must be smaller than either stride (", stride, ") or dilation (",
               dilation, ")");
  const bool batched = input.dim() == 3;
  const Tensor x = unsqueeze(batched ? input : unsqueeze(input, 0), 2);  // (N, C_in, 1, L)
  const Tensor y = conv_transpose2d(x, unsqueeze(weight, 2), bias, {1, stride}, {0, padding},
                                    {0, output_padding}, groups, {1, dilation});
  return batched ? squeeze(y, 2) : squeeze(squeeze(y, 2), 0);
}

Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, Int3 stride,
                        Int3 padding, Int3 output_padding, int64_t groups, Int3 dilation) {
  const char* op = "conv_transpose3d";
  if (autocast_changes(op, {input, weight, bias}))
    return conv_transpose3d(autocast_input(op, input), autocast_input(op, weight),
                            autocast_input(op, bias), stride, padding, output_padding, groups,
                            dilation);
  check_conv_operands(input, weight, bias, groups, "(C_in, C_out / groups, kD, kH, kW)", op, 5);
  TANDEM_CHECK(stride.d > 0 && dilation.d > 0 && padding.d >= 0 && output_padding.d >= 0, op,
               ": stride ", int3_str(stride), " and dilation ", int3_str(dilation),
               " must be positive, padding ", int3_str(padding), " and output_padding ",
               int3_str(output_padding), " non-negative");
  TANDEM_CHECK(output_padding.d < stride.d || output_padding.d < dilation.d, op,
               ": output_padding must be smaller than either stride or dilation");
  const int64_t co = weight.size(1) * groups;
  if (bias.defined())
    TANDEM_CHECK(bias.dim() == 1 && bias.size(0) == co, op, ": bias must be (", co, "), got ",
                 shape_str(bias.shape()));
  return with_batch_dim<3>(input, op, [&](const Tensor& in) {
    TANDEM_CHECK(in.size(1) == weight.size(0), op,
                 ": input must be (N, C, D, H, W) with C == weight.size(0) == ", weight.size(0),
                 ", got ", shape_str(in.shape()));
    // Each depth tap k is a conv_transpose2d of every input depth plane, which lands on output
    // depth i * stride + k * dilation (less the padding): the planes spread a stride apart
    // (zeros between), shifted by k * dilation, summed over the taps, then cropped.
    const int64_t n = in.size(0), depth = in.size(2), kd = weight.size(2);
    const int64_t full = (depth - 1) * stride.d + dilation.d * (kd - 1) + output_padding.d + 1;
    const int64_t out_depth = full - 2 * padding.d;
    TANDEM_CHECK(out_depth > 0, op, ": the output depth would be ", out_depth, " (input depth ",
                 depth, ", kernel ", kd, ", stride ", stride.d, ", padding ", padding.d, ")");
    const Tensor planes =
        in.transpose(1, 2).reshape({n * depth, in.size(1), in.size(3), in.size(4)});
    Tensor sum;
    for (int64_t k = 0; k < kd; ++k) {
      Tensor y = conv_transpose2d(planes, weight.select(2, k), Tensor(), {stride.h, stride.w},
                                  {padding.h, padding.w}, {output_padding.h, output_padding.w},
                                  groups, {dilation.h, dilation.w});
      y = y.reshape({n, depth, y.size(1), y.size(2), y.size(3)});  // (N, D, C_out, H', W')
      if (stride.d > 1)  // the planes a stride apart: each followed by stride - 1 of zeros
        y = cat({y.unsqueeze(2), zeros_like(y).unsqueeze(2).expand(
                                     {n, depth, stride.d - 1, y.size(2), y.size(3), y.size(4)})},
                2)
                .reshape({n, depth * stride.d, y.size(2), y.size(3), y.size(4)})
                .narrow(1, 0, (depth - 1) * stride.d + 1);
      const int64_t before = k * dilation.d, after = full - before - y.size(1);
      std::vector<Tensor> parts;
      if (before > 0)
        parts.push_back(
            zeros_like(y.narrow(1, 0, 1)).expand({n, before, y.size(2), y.size(3), y.size(4)}));
      parts.push_back(y);
      if (after > 0)
        parts.push_back(
            zeros_like(y.narrow(1, 0, 1)).expand({n, after, y.size(2), y.size(3), y.size(4)}));
      y = parts.size() == 1 ? y : cat(parts, 1);
      sum = sum.defined() ? add(sum, y) : y;
    }
    Tensor out = sum.narrow(1, padding.d, out_depth).transpose(1, 2);  // (N, C_out, D', H', W')
    if (bias.defined()) out = add(out, bias.view({1, -1, 1, 1, 1}));
    return out.contiguous();
  });
}

namespace {

// The window checks of a 3-d pool, in its own name (the 2-d pools it runs would name
// themselves); returns the stride, the kernel size where it was left 0.
Int3 check_pool3d(const Tensor& in, Int3 k, Int3 stride, Int3 padding, Int3 dilation,
                  bool ceil_mode, const char* op) {
  if (stride.d == 0 && stride.h == 0 && stride.w == 0) stride = k;
  auto axis = [&](int64_t size, int64_t kernel, int64_t step, int64_t pad, int64_t dil) {
    TANDEM_CHECK(kernel > 0 && step > 0 && dil > 0 && pad >= 0, op, ": kernel_size ", int3_str(k),
                 ", stride ", int3_str(stride), " and dilation ", int3_str(dilation),
                 " must be positive and padding ", int3_str(padding), " non-negative");
    TANDEM_CHECK(pad <= kernel / 2, op,
                 ": padding should be at most half of the kernel size, got "
                 "padding ",
                 int3_str(padding), " for kernel ", int3_str(k));
    TANDEM_CHECK(out_size(size, kernel, step, pad, dil, ceil_mode) > 0, op, ": the input ",
                 shape_str(in.shape()), " is too small for the kernel ", int3_str(k));
  };
  axis(in.size(2), k.d, stride.d, padding.d, dilation.d);
  axis(in.size(3), k.h, stride.h, padding.h, dilation.h);
  axis(in.size(4), k.w, stride.w, padding.w, dilation.w);
  return stride;
}

// pool2d(input as (N, C * D, H, W)) then pool2d(that as (N, C, D, H_out * W_out)) with the depth
// window by 1, as (N, C, D_out, H_out, W_out): the box windows of a 3-d pool, (H, W) first.
template <typename Pool2d, typename PoolDepth>
Tensor planes_then_depth(const Tensor& in, Pool2d&& pool2d, PoolDepth&& pool_depth) {
  const int64_t n = in.size(0), c = in.size(1), d = in.size(2);
  const Tensor planes = pool2d(in.reshape({n, c * d, in.size(3), in.size(4)}));
  const int64_t ho = planes.size(2), wo = planes.size(3);
  const Tensor y = pool_depth(planes.reshape({n, c, d, ho * wo}));
  return y.reshape({n, c, y.size(2), ho, wo});
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, Int3 kernel_size,
                                                   Int3 stride, Int3 padding, Int3 dilation,
                                                   bool ceil_mode) {
  const char* op = "max_pool3d";
  check_defined(input, op, "input");
  check_floating(input, op);
  // The first maximum in (d, h, w) order wins, as torch's: the first of each plane's, then the
  // first plane's among equals. The planes' pool gives each plane's index (h W + w); the depth
  // pool's index into (D, H_out W_out) names the plane and its output, whose plane index it
  // gathers.
  Tensor idx;
  const Tensor values = with_batch_dim<3>(input, op, [&](const Tensor& in) {
    const Int3 s = check_pool3d(in, kernel_size, stride, padding, dilation, ceil_mode, op);
    const int64_t n = in.size(0), c = in.size(1), d = in.size(2), h = in.size(3), w = in.size(4);
    auto [planes, plane_idx] = max_pool2d_with_indices(
        in.reshape({n, c * d, h, w}), {kernel_size.h, kernel_size.w}, {s.h, s.w},
        {padding.h, padding.w}, {dilation.h, dilation.w}, ceil_mode);
    const int64_t ho = planes.size(2), wo = planes.size(3);
    auto [y, depth_idx] =
        max_pool2d_with_indices(planes.reshape({n, c, d, ho * wo}), {kernel_size.d, 1}, {s.d, 1},
                                {padding.d, 0}, {dilation.d, 1}, ceil_mode);
    const Shape shape{n, c, y.size(2), ho, wo};
    const Tensor flat_depth = depth_idx.reshape({n, c, y.size(2) * ho * wo});
    // A window of padding alone has index -1 in either pool (its value is -inf): -1 here too.
    const Tensor padding_only = lt(flat_depth, 0.0);
    const Tensor at = where(padding_only, zeros_like(flat_depth), flat_depth);
    // Plane p's first index: (p / (H_out W_out)) H W, for each p of the depth pool's input.
    const Tensor plane_start =
        mul(arange(static_cast<double>(d), TensorOptions(DType::i64).device(in.device())), h * w)
            .reshape({d, 1})
            .expand({d, ho * wo})
            .reshape({d * ho * wo});
    const Tensor in_plane = gather(plane_idx.reshape({n, c, d * ho * wo}), 2, at);
    idx = where(logical_or(padding_only, lt(in_plane, 0.0)), full_like(in_plane, -1.0),
                add(index_select(plane_start, 0, at.flatten()).reshape(at.shape()), in_plane))
              .reshape(shape);
    return y.reshape(shape);
  });
  return {values, input.dim() == 4 ? idx.squeeze(0) : idx};
}

Tensor max_pool3d(const Tensor& input, Int3 kernel_size, Int3 stride, Int3 padding, Int3 dilation,
                  bool ceil_mode) {
  check_defined(input, "max_pool3d", "input");
  check_floating(input, "max_pool3d");
  // As max_pool3d_with_indices, without the indices' arithmetic.
  return with_batch_dim<3>(input, "max_pool3d", [&](const Tensor& in) {
    const Int3 s =
        check_pool3d(in, kernel_size, stride, padding, dilation, ceil_mode, "max_pool3d");
    return planes_then_depth(
        in,
        [&](const Tensor& x) {
          return max_pool2d(x, {kernel_size.h, kernel_size.w}, {s.h, s.w}, {padding.h, padding.w},
                            {dilation.h, dilation.w}, ceil_mode);
        },
        [&](const Tensor& x) {
          return max_pool2d(x, {kernel_size.d, 1}, {s.d, 1}, {padding.d, 0}, {dilation.d, 1},
                            ceil_mode);
        });
  });
}

Tensor avg_pool3d(const Tensor& input, Int3 kernel_size, Int3 stride, Int3 padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  check_defined(input, "avg_pool3d", "input");
  check_floating(input, "avg_pool3d");
  TANDEM_CHECK(!divisor_override || *divisor_override != 0,
               "avg_pool3d: divisor_override must be non-zero");
  // A window's divisor is its extent's product over the axes, so the planes' means averaged
  // over depth are the box's mean; with divisor_override, the planes' sums over it.
  return with_batch_dim<3>(input, "avg_pool3d", [&](const Tensor& in) {
    const Int3 s = check_pool3d(in, kernel_size, stride, padding, 1, ceil_mode, "avg_pool3d");
    const std::optional<int64_t> plane_divisor =
        divisor_override ? std::optional<int64_t>(1) : std::nullopt;
    return planes_then_depth(
        in,
        [&](const Tensor& x) {
          return avg_pool2d(x, {kernel_size.h, kernel_size.w}, {s.h, s.w}, {padding.h, padding.w},
                            ceil_mode, count_include_pad, plane_divisor);
        },
        [&](const Tensor& x) {
          return avg_pool2d(x, {kernel_size.d, 1}, {s.d, 1}, {padding.d, 0}, ceil_mode,
                            count_include_pad, divisor_override);
        });
  });
}

namespace {
// A 1-d pool as the 2-d one over (N, C, 1, L), its arguments checked first in its own name and
// terms (the 2-d pool would report "(1, k)").
template <typename Pool2d>
Tensor pool1d(const Tensor& input, int64_t k, int64_t stride, int64_t padding, int64_t dilation,
              bool ceil_mode, const char* op, Pool2d&& pool2d) {
  check_defined(input, op, "input");
  check_floating(input, op);
  if (stride == 0) stride = k;  // default: stride = kernel size
  TANDEM_CHECK(k > 0 && stride > 0 && dilation > 0 && padding >= 0, op, ": kernel_size ", k,
               ", stride ", stride, " and dilation ", dilation, " must be positive and padding ",
               padding, " non-negative");
  TANDEM_CHECK(padding <= k / 2, op,
               ": padding should be at most half of the kernel size, got "
               "padding ",
               padding, " for kernel ", k);
  return with_batch_dim<1>(input, op, [&](const Tensor& in) {
    const int64_t lo = out_size(in.size(2), k, stride, padding, dilation, ceil_mode);
    TANDEM_CHECK(lo > 0, op, ": output size would be ", lo, " for input ", shape_str(input.shape()),
                 "; the input is too small for the kernel");
    return pool2d(in.unsqueeze(2)).squeeze(2);
  });
}
}  // namespace

Tensor max_pool1d(const Tensor& input, int64_t kernel_size, int64_t stride, int64_t padding,
                  int64_t dilation, bool ceil_mode) {
  return pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, "max_pool1d",
                [&](const Tensor& x) {
                  return max_pool2d(x, {1, kernel_size}, {1, stride == 0 ? kernel_size : stride},
                                    {0, padding}, {1, dilation}, ceil_mode);
                });
}

std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, int64_t kernel_size,
                                                   int64_t stride, int64_t padding,
                                                   int64_t dilation, bool ceil_mode) {
  Tensor idx;
  const Tensor values = pool1d(
      input, kernel_size, stride, padding, dilation, ceil_mode, "max_pool1d", [&](const Tensor& x) {
        auto [y, i] =
            max_pool2d_with_indices(x, {1, kernel_size}, {1, stride == 0 ? kernel_size : stride},
                                    {0, padding}, {1, dilation}, ceil_mode);
        idx = i.squeeze(2);  // a plane of height 1: its index is the position along L
        return y;
      });
  return {values, input.dim() == 2 ? idx.squeeze(0) : idx};
}

namespace {
// max_unpool{1,2,3}d: each of a plane's (volume's) values written at its index into a zero
// output of `size` per plane; scatter's gradient gathers them back.
Tensor max_unpool(const Tensor& input, const Tensor& indices, const std::vector<int64_t>& size,
                  const char* op) {
  check_defined(input, op, "input");
  check_defined(indices, op, "indices");
  check_inputs({input, indices}, op);
  check_floating(input, op);
  const int64_t spatial = static_cast<int64_t>(size.size());
  check_batch_or_not(input, spatial, op);
  TANDEM_CHECK(indices.dtype() == DType::i64, op, ": expected indices of dtype i64, got ",
               indices.dtype());
  TANDEM_CHECK(indices.shape() == input.shape(), op, ": expected indices of the input's shape ",
               shape_str(input.shape()), ", got ", shape_str(indices.shape()));
  int64_t positions = 1;
  for (int64_t v : size) {
    TANDEM_CHECK(v >= 0, op, ": output_size must not be negative, got ", shape_str(Shape(size)));
    positions *= v;
  }
  const bool batched = input.dim() == spatial + 2;
  const Tensor x = batched ? input : input.unsqueeze(0);
  const Tensor idx = batched ? indices : indices.unsqueeze(0);
  const int64_t n = x.size(0), c = x.size(1);
  if (idx.numel() > 0) {  // on a GPU, checked at the next check point (the host does not wait)
    NoGradGuard no_grad;
    check_scalar(amax(idx, Shape{}).to(DType::f64), [op, positions](double v) {
      TANDEM_CHECK_INDEX(v < static_cast<double>(positions), op, ": found an invalid max index ",
                         static_cast<int64_t>(v), " (an output plane has ", positions,
                         " positions)");
    });
    check_scalar(amin(idx, Shape{}).to(DType::f64), [op](double v) {
      TANDEM_CHECK_INDEX(v >= 0, op, ": found an invalid max index ", static_cast<int64_t>(v));
    });
  }
  Shape out_shape{n, c};
  out_shape.insert(out_shape.end(), size.begin(), size.end());
  const int64_t per_plane = n * c == 0 ? 0 : x.numel() / (n * c);
  const Tensor out = scatter(zeros({n, c, positions}, x.options()), 2,
                             idx.reshape({n, c, per_plane}), x.reshape({n, c, per_plane}))
                         .reshape(out_shape);
  return batched ? out : out.squeeze(0);
}
}  // namespace

Tensor max_unpool1d(const Tensor& input, const Tensor& indices, int64_t output_size) {
  return max_unpool(input, indices, {output_size}, "max_unpool1d");
}
Tensor max_unpool2d(const Tensor& input, const Tensor& indices, Int2 output_size) {
  return max_unpool(input, indices, int_list(output_size), "max_unpool2d");
}
Tensor max_unpool3d(const Tensor& input, const Tensor& indices, Int3 output_size) {
  return max_unpool(input, indices, int_list(output_size), "max_unpool3d");
}
Tensor max_unpool3d(const Tensor& input, const Tensor& indices, Int3 output_size, Int3 stride,
                    Int3 padding) {
  TANDEM_CHECK(std::min({stride.d, stride.h, stride.w}) > 0 &&
                   std::min({padding.d, padding.h, padding.w}) >= 0,
               "max_unpool3d: stride ", int3_str(stride), " must be positive and padding ",
               int3_str(padding), " non-negative");
  return max_unpool3d(input, indices, output_size);
}

Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, int64_t stride, int64_t padding,
                  bool ceil_mode, bool count_include_pad) {
  return pool1d(input, kernel_size, stride, padding, 1, ceil_mode, "avg_pool1d",
                [&](const Tensor& x) {
                  return avg_pool2d(x, {1, kernel_size}, {1, stride == 0 ? kernel_size : stride},
                                    {0, padding}, ceil_mode, count_include_pad);
                });
}

Tensor adaptive_avg_pool1d(const Tensor& input, int64_t output_size) {
  check_defined(input, "adaptive_avg_pool1d", "input");
  TANDEM_CHECK(output_size > 0, "adaptive_avg_pool1d: output_size must be positive, got ",
               output_size);
  return with_batch_dim<1>(input, "adaptive_avg_pool1d", [&](const Tensor& in) {
    return adaptive_avg_pool2d(in.unsqueeze(2), {1, output_size}).squeeze(2);
  });
}

Tensor adaptive_avg_pool3d(const Tensor& input, Int3 output_size) {
  check_defined(input, "adaptive_avg_pool3d", "input");
  check_floating(input, "adaptive_avg_pool3d");
  TANDEM_CHECK(output_size.d > 0 && output_size.h > 0 && output_size.w > 0,
               "adaptive_avg_pool3d: output_size must be positive, got (", output_size.d, ", ",
               output_size.h, ", ", output_size.w, ")");
  return with_batch_dim<3>(input, "adaptive_avg_pool3d", [&](const Tensor& in) {
    TANDEM_CHECK(in.size(2) > 0 && in.size(3) > 0 && in.size(4) > 0, "adaptive_avg_pool3d: input ",
                 shape_str(in.shape()), " has an empty spatial dim");
    return planes_then_depth(
        in,
        [&](const Tensor& x) {
          return adaptive_avg_pool2d(x, {output_size.h, output_size.w});
        },
        [&](const Tensor& x) {
          return adaptive_avg_pool2d(x, {output_size.d, x.size(3)});
        });
  });
}

// --- dropout and softmax -------------------------------------------------------------------------

namespace {
// Dropout with one draw per element of `mask_shape` (the input's shape, or (N, C, 1, ...) for
// whole channels), broadcast over the input.
Tensor dropout_masked(const Tensor& input, double p, bool training, Generator* gen,
                      const Shape& mask_shape) {
  if (!training || p == 0.0) return input;
  if (p == 1.0) return mul(input, 0.0);
  Tensor keep = ge(rand(mask_shape, TensorOptions(DType::f32).device(input.device()), gen),
                   full({}, p, TensorOptions(DType::f32).device(input.device())));
  return mul(input, mul(keep.to(input.dtype()), 1.0 / (1.0 - p)));
}

void check_dropout(const Tensor& input, double p, const char* op) {
  check_defined(input, op, "input");
  check_floating(input, op);
  TANDEM_CHECK(p >= 0.0 && p <= 1.0, op, ": probability must be in [0, 1], got ", p);
}
}  // namespace

namespace {

// One axis of a resize, in PyTorch's arithmetic (float for the float dtypes, double for f64):
// the scale is 1 / scale_factor where one is used, else in / out (align_corners: (in - 1) /
// (out - 1)).
template <typename S>
S resize_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> factor) {
  if (align_corners) return out > 1 ? static_cast<S>(in - 1) / static_cast<S>(out - 1) : S(0);
  return factor && *factor > 0 ? static_cast<S>(1.0 / *factor)
                               : static_cast<S>(in) / static_cast<S>(out);
}

// Output index d's nearest source, as torch's nearest_idx; nearest-exact's (torch's
// nearest_neighbor_exact_compute_source_index) rounds the centre instead of flooring the corner.
Tensor nearest_indices(int64_t in, int64_t out, std::optional<double> factor, bool exact,
                       Device device) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float scale = resize_scale<float>(in, out, false, factor);
  for (int64_t d = 0; d < out; ++d) {
    int64_t i = 0;
    if (exact)
      i = static_cast<int64_t>(
          std::floor(static_cast<float>((static_cast<double>(d) + 0.5) * scale)));
    else if (out == in)
      i = d;
    else if (out == 2 * in)
      i = d >> 1;
    else
      i = static_cast<int64_t>(std::floor(static_cast<float>(d) * scale));
    idx[static_cast<size_t>(d)] = std::min(i, in - 1);
  }
  return from_vector(idx, {out}).to(device);
}

// out[d] = sum over taps k of weight[k][d] x[index[k][d]] along `dim`: a resize along one axis.
Tensor taps_along(const Tensor& x, int64_t dim, const std::vector<std::vector<int64_t>>& index,
                  const std::vector<std::vector<double>>& weight) {
  const auto out = static_cast<int64_t>(index.front().size());
  Shape along(static_cast<size_t>(x.dim()), 1);
  along[static_cast<size_t>(dim)] = out;
  Tensor sum;
  for (size_t k = 0; k < index.size(); ++k) {
    Tensor term = mul(from_vector(weight[k], {out}).to(x.dtype()).reshape(along).to(x.device()),
                      index_select(x, dim, from_vector(index[k], {out}).to(x.device())));
    sum = sum.defined() ? add(sum, term) : term;
  }
  return sum;
}

// Linear interpolation along `dim`, with the source index of torch's
// area_pixel_compute_source_index: two taps, the lower one clamped at 0.
template <typename S>
Tensor linear_along(const Tensor& x, int64_t dim, int64_t out, bool align_corners,
                    std::optional<double> factor) {
  const int64_t in = x.size(dim);
  const S scale = resize_scale<S>(in, out, align_corners, factor);
  std::vector<std::vector<int64_t>> i(2, std::vector<int64_t>(static_cast<size_t>(out)));
  std::vector<std::vector<double>> l(2, std::vector<double>(i[0].size()));
  for (int64_t d = 0; d < out; ++d) {
    S src =
        align_corners ? scale * static_cast<S>(d) : scale * (static_cast<S>(d) + S(0.5)) - S(0.5);
    if (src < 0) src = 0;
    const auto k = static_cast<size_t>(d);
    i[0][k] = std::min(static_cast<int64_t>(src), in - 1);
    i[1][k] = i[0][k] + (i[0][k] < in - 1 ? 1 : 0);
    const S lambda = src - static_cast<S>(i[0][k]);
    l[1][k] = static_cast<double>(lambda);
    l[0][k] = static_cast<double>(S(1) - lambda);
  }
  return taps_along(x, dim, i, l);
}

// Cubic convolution along `dim` (Keys, A = -0.75, as torch's upsample_bicubic2d): four taps
// around the unclamped source position, each index clamped into the input.
template <typename S>
Tensor cubic_along(const Tensor& x, int64_t dim, int64_t out, bool align_corners,
                   std::optional<double> factor) {
  const int64_t in = x.size(dim);
  const S scale = resize_scale<S>(in, out, align_corners, factor);
  const S a = S(-0.75);
  auto near = [&](S t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };       // |t| <= 1
  auto far = [&](S t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };  // 1 < |t| < 2
  std::vector<std::vector<int64_t>> i(4, std::vector<int64_t>(static_cast<size_t>(out)));
  std::vector<std::vector<double>> w(4, std::vector<double>(i[0].size()));
  for (int64_t d = 0; d < out; ++d) {
    const S src =
        align_corners ? scale * static_cast<S>(d) : scale * (static_cast<S>(d) + S(0.5)) - S(0.5);
    const S lo = std::floor(src), t = src - lo;
    const S coeff[4] = {far(t + 1), near(t), near(1 - t), far(2 - t)};
    const auto k = static_cast<size_t>(d);
    for (size_t j = 0; j < 4; ++j) {
      i[j][k] =
          std::clamp(static_cast<int64_t>(lo) - 1 + static_cast<int64_t>(j), int64_t{0}, in - 1);
      w[j][k] = static_cast<double>(coeff[j]);
    }
  }
  return taps_along(x, dim, i, w);
}

// Anti-aliased resampling along `dim`, as torch's _upsample_bilinear2d_aa and
// _upsample_bicubic2d_aa (aten's _compute_weights_aa): downsampling widens the filter (a
// triangle, or Keys' cubic with A = -0.5 as PIL's) by the scale, so every input element between
// two outputs counts; each output's weights are normalized to sum to 1. Upsampling gives plain
// linear (or A = -0.5 cubic) interpolation clamped at the edges.
template <typename S>
Tensor antialiased_along(const Tensor& x, int64_t dim, int64_t out, bool align_corners,
                         std::optional<double> factor, bool cubic) {
  const int64_t in = x.size(dim);
  const S scale = resize_scale<S>(in, out, align_corners, factor);
  auto filter = [cubic](S t) -> S {
    t = t < 0 ? -t : t;
    if (!cubic) return t < S(1) ? S(1) - t : S(0);
    const S a = S(-0.5);
    if (t < S(1)) return ((a + S(2)) * t - (a + S(3))) * t * t + S(1);
    if (t < S(2)) return (((t - S(5)) * t + S(8)) * t - S(4)) * a;
    return S(0);
  };
  const S half_width = cubic ? S(2) : S(1);
  const S support = scale >= S(1) ? half_width * scale : half_width;
  const S invscale = scale >= S(1) ? S(1) / scale : S(1);
  const auto taps = static_cast<size_t>(std::ceil(support)) * 2 + 1;
  std::vector<std::vector<int64_t>> index(taps, std::vector<int64_t>(static_cast<size_t>(out)));
  std::vector<std::vector<double>> weight(taps, std::vector<double>(index[0].size(), 0.0));
  std::vector<S> w(taps);
  for (int64_t d = 0; d < out; ++d) {
    const S center = scale * (static_cast<S>(d) + S(0.5));
    const int64_t lo = std::max(static_cast<int64_t>(center - support + S(0.5)), int64_t{0});
    const int64_t count =
        std::min(static_cast<int64_t>(center + support + S(0.5)), in) - lo;  // <= taps
    S total = 0;
    for (int64_t j = 0; j < count; ++j) {
      w[static_cast<size_t>(j)] = filter((static_cast<S>(j + lo) - center + S(0.5)) * invscale);
      total += w[static_cast<size_t>(j)];
    }
    const auto k = static_cast<size_t>(d);
    for (size_t j = 0; j < taps; ++j) {
      const bool used = static_cast<int64_t>(j) < count;
      index[j][k] = used ? lo + static_cast<int64_t>(j) : lo;  // an unused tap weighs 0
      weight[j][k] = used && total != S(0) ? static_cast<double>(w[j] / total) : 0.0;
    }
  }
  return taps_along(x, dim, index, weight);
}

}  // namespace

Tensor interpolate(const Tensor& input, const std::optional<Shape>& size,
                   const std::optional<std::vector<double>>& scale_factor, const std::string& mode,
                   std::optional<bool> align_corners, std::optional<bool> recompute_scale_factor,
                   bool antialias) {
  check_defined(input, "interpolate", "input");
  const int64_t k = input.dim() - 2;  // spatial dims
  TANDEM_CHECK(k >= 1 && k <= 3,
               "interpolate: expected (N, C, L), (N, C, H, W) or (N, C, D, H, W) input, got shape ",
               shape_str(input.shape()));
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  const bool smooth =
      mode == "linear" || mode == "bilinear" || mode == "bicubic" || mode == "trilinear";
  TANDEM_CHECK(nearest || smooth || mode == "area", "interpolate: unknown mode '", mode,
               "' (nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area)");
  if (smooth) {
    const int64_t needs = mode == "linear" ? 1 : mode == "trilinear" ? 3 : 2;
    TANDEM_CHECK(k == needs, "interpolate: got a ", input.dim(), "-d input, but ", mode,
                 " mode needs a ", needs + 2, "-d input");
  }
  if (nearest)
    TANDEM_CHECK(input.is_floating_point() || input.dtype() == DType::u8, "interpolate: ", mode,
                 " mode takes a floating-point or u8 input, got dtype ", input.dtype());
  else
    check_floating(input, "interpolate", "input");
  TANDEM_CHECK(!antialias || ((mode == "bilinear" || mode == "bicubic") && k == 2),
               "interpolate: antialias is for the bilinear and bicubic modes (4-d input), got ",
               mode, " with a ", input.dim(), "-d input");
  TANDEM_CHECK(!align_corners || smooth,
               "interpolate: align_corners can only be set with an interpolating mode "
               "(linear, bilinear, bicubic or trilinear), not ",
               mode);
  TANDEM_CHECK(size.has_value() != scale_factor.has_value(),
               "interpolate: give exactly one of size and scale_factor");
  const auto n = static_cast<size_t>(k);
  Shape in(input.shape().end() - k, input.shape().end()), out(n);
  std::vector<std::optional<double>> factor(n);  // the scales the source positions use
  if (size) {
    TANDEM_CHECK(size->size() == 1 || size->size() == n, "interpolate: size must have 1 or ", k,
                 " entries for a ", input.dim(), "-d input, got ", size->size());
    for (size_t d = 0; d < n; ++d) out[d] = (*size)[size->size() == 1 ? 0 : d];
  } else {
    TANDEM_CHECK(scale_factor->size() == 1 || scale_factor->size() == n,
                 "interpolate: scale_factor must have 1 or ", k, " entries for a ", input.dim(),
                 "-d input, got ", scale_factor->size());
    for (size_t d = 0; d < n; ++d) {
      const double f = (*scale_factor)[scale_factor->size() == 1 ? 0 : d];
      TANDEM_CHECK(std::isfinite(f) && f > 0,
                   "interpolate: scale factors must be positive and finite, got ", f);
      const double target = std::floor(static_cast<double>(in[d]) * f);
      TANDEM_CHECK(fits_int64(target), "interpolate: scale factor ", f, " makes an output of ",
                   target, " from ", in[d], " along spatial dim ", d, ", too large for a tensor");
      out[d] = static_cast<int64_t>(target);
      if (!recompute_scale_factor.value_or(false)) factor[d] = f;
    }
  }
  for (size_t d = 0; d < n; ++d)
    TANDEM_CHECK(in[d] > 0 && out[d] > 0,
                 "interpolate: input and output sizes must be greater than 0, got input ",
                 shape_str(in), " and output ", shape_str(out));
  if (mode == "area") {  // as torch's: adaptive average pooling to the output size
    if (k == 1) return adaptive_avg_pool1d(input, out[0]);
    if (k == 2) return adaptive_avg_pool2d(input, {out[0], out[1]});
    return adaptive_avg_pool3d(input, {out[0], out[1], out[2]});
  }
  // Separable: one axis at a time, the last first (the order of torch's sums).
  const bool corners = align_corners.value_or(false);
  const bool f64 = input.dtype() == DType::f64;
  Tensor x = input;
  for (size_t d = n; d-- > 0;) {
    const auto dim = static_cast<int64_t>(d) + 2;
    if (nearest)
      x = index_select(
          x, dim,
          nearest_indices(in[d], out[d], factor[d], mode == "nearest-exact", input.device()));
    else if (antialias) {
      // torch resamples only the dims whose size changes (the others' weights are 1 and 0).
      if (in[d] != out[d])
        x = f64 ? antialiased_along<double>(x, dim, out[d], corners, factor[d], mode == "bicubic")
                : antialiased_along<float>(x, dim, out[d], corners, factor[d], mode == "bicubic");
    } else if (mode == "bicubic")
      x = f64 ? cubic_along<double>(x, dim, out[d], corners, factor[d])
              : cubic_along<float>(x, dim, out[d], corners, factor[d]);
    else
      x = f64 ? linear_along<double>(x, dim, out[d], corners, factor[d])
              : linear_along<float>(x, dim, out[d], corners, factor[d]);
  }
  return x;
}

Tensor dropout(const Tensor& input, double p, bool training, Generator* gen) {
  check_dropout(input, p, "dropout");
  return dropout_masked(input, p, training, gen, input.shape());
}

Tensor dropout2d(const Tensor& input, double p, bool training, Generator* gen) {
  check_dropout(input, p, "dropout2d");
  TANDEM_CHECK(input.dim() >= 2, "dropout2d: input must be (N, C, ...), got ",
               shape_str(input.shape()));
  Shape mask_shape(input.dim(), 1);
  mask_shape[0] = input.size(0);
  mask_shape[1] = input.size(1);
  return dropout_masked(input, p, training, gen, mask_shape);
}

Tensor dropout3d(const Tensor& input, double p, bool training, Generator* gen) {
  check_dropout(input, p, "dropout3d");
  TANDEM_CHECK(input.dim() == 4 || input.dim() == 5,
               "dropout3d: input must be (N, C, D, H, W) or (C, D, H, W), got ",
               shape_str(input.shape()));
  Shape mask_shape(input.dim(), 1);
  for (int64_t d = 0; d < input.dim() - 3; ++d) mask_shape[d] = input.size(d);
  return dropout_masked(input, p, training, gen, mask_shape);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_defined(indices, "one_hot", "indices");
  TANDEM_CHECK(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
               "one_hot: indices must be an integer tensor (i64 or i32), got ", indices.dtype());
  TANDEM_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 or nonnegative, got ",
               num_classes);
  const Tensor idx = indices.to(DType::i64);
  Shape shape = idx.shape();
  if (idx.numel() > 0) {  // (read on the host: one wait on a GPU, as torch's checks)
    const auto [lo, hi] = host_extremes(idx);
    TANDEM_CHECK_INDEX(lo >= 0, "one_hot: class values must be nonnegative, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    TANDEM_CHECK_INDEX(hi < num_classes, "one_hot: class value ", hi,
                       " is not smaller than num_classes (", num_classes, ")");
  }
  TANDEM_CHECK(num_classes >= 0, "one_hot: num_classes cannot be inferred from an empty tensor");
  shape.push_back(num_classes);
  const Tensor out = zeros(shape, TensorOptions(DType::i64).device(idx.device()));
  if (idx.numel() == 0) return out;
  return scatter(out, -1, idx.unsqueeze(-1), 1.0);
}

Tensor normalize(const Tensor& input, double p, int64_t dim, double eps) {
  check_defined(input, "normalize", "input");
  check_floating(input, "normalize");
  // A negative order (-inf: the smallest |x|) is vector_norm's, as torch's Tensor.norm takes it.
  const Tensor n = p < 0 ? linalg::vector_norm(input, p, {dim}, /*keepdim=*/true)
                         : norm(input, p, {dim}, /*keepdim=*/true);
  return div(input, clamp(n, eps, std::nullopt));
}

namespace {
// softmax or log_softmax over dim d from recorded ops: where the row kernels do not apply, and
// for their backward under create_graph.
Tensor softmax_composite(const Tensor& input, int64_t d, bool log_form) {
  // Subtracting the (constant) row max keeps exp finite; it cancels in the ratio.
  Tensor z = sub(input, amax(input.detach(), {d}, true));
  if (log_form) return sub(z, log(sum(exp(z), {d}, true)));
  Tensor e = exp(z);
  return div(e, sum(e, {d}, true));
}

// Over the last dim of an f32/f64 tensor: a row kernel each way (one pass for the max, one for
// the exps and their sum, one to write; the backward's dot product and its row), as one node.
// Composed of amax, sub, exp, sum and div it took 4x PyTorch's time (ops_torch.py).
Tensor softmax_op(const Tensor& input, int64_t dim, bool log_form, const char* name) {
  check_defined(input, name, "input");
  check_floating(input, name);
  const int64_t d = wrap_dim(dim, input.dim(), name);
  // A 0-dim input is its own row; an empty one has no rows (and amax no identity to start from).
  if (input.dim() == 0 || input.numel() == 0)
    return log_form ? sub(input, input) : exp(sub(input, input.detach()));
  const DType dt = input.dtype();
  if (d != input.dim() - 1 || (dt != DType::f32 && dt != DType::f64))
    return softmax_composite(input, d, log_form);
  kernels::softmax_rows.at(input, name);
  Tensor x = input.contiguous().detach();
  Tensor out = empty(input.shape(), TensorOptions(dt).device(input.device()));
  kernels::softmax_rows(out, x, log_form);
  Tensor y = out.detach();
  autograd::record(
      name, {input}, out,
      [=](const Tensor& g) -> std::vector<Tensor> {
        if (grad_mode_enabled())  // create_graph
          return recomputed_gradients(g, {x}, [=](const std::vector<Tensor>& in) {
            return softmax_composite(in[0], d, log_form);
          });
        Tensor gx = empty(y.shape(), TensorOptions(dt).device(y.device()));
        kernels::softmax_rows_backward(gx, as_dtype(g, dt).contiguous(), y, log_form);
        return {gx};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {out});
  return out;
}
}  // namespace

Tensor softmax(const Tensor& input, int64_t dim) {
  if (autocast_changes("softmax", {input})) return softmax(autocast_input("softmax", input), dim);
  return softmax_op(input, dim, false, "softmax");
}

Tensor log_softmax(const Tensor& input, int64_t dim) {
  if (autocast_changes("log_softmax", {input}))
    return log_softmax(autocast_input("log_softmax", input), dim);
  return softmax_op(input, dim, true, "log_softmax");
}

// --- losses -----------------------------------------------------------------------------------

namespace {

Tensor reduce_loss(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}

// Where a loss's input holds its classes: dim 1 of (N, C, ...), dim 0 of an unbatched (C).
int64_t class_dim(const Tensor& input) { return input.dim() == 1 ? 0 : 1; }

// (N, C, d1, ...) -> (N * d1 * ..., C) and (N, d1, ...) -> (N * d1 * ...), checking shapes; an
// unbatched (C) input with a 0-dim target is one row, as torch's.
std::pair<Tensor, Tensor> flatten_classes(const Tensor& input, const Tensor& target, const char* op) {
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  check_inputs({input, target}, op);
  check_floating(input, op);
  TANDEM_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, op,
               ": target must hold class indices (i64 or i32), got dtype ", target.dtype());
  TANDEM_CHECK(input.dim() >= 1, op, ": input must be (C), (N, C) or (N, C, d1, ...), got ",
               shape_str(input.shape()));
  const int64_t cd = class_dim(input);
  TANDEM_CHECK(input.size(cd) > 0, op, ": input has no classes (C == 0), got shape ",
               shape_str(input.shape()));
  Shape expected = input.shape();
  expected.erase(expected.begin() + cd);
  TANDEM_CHECK(target.shape() == expected, op, ": target must be ", shape_str(expected),
               " for input ", shape_str(input.shape()), ", got ", shape_str(target.shape()));
  Tensor x = input;
  if (input.dim() > 2) {
    Shape order{0};
    for (int64_t d = 2; d < input.dim(); ++d) order.push_back(d);
    order.push_back(1);
    x = input.permute(order);
  }
  return {x.reshape({-1, input.size(cd)}), target.reshape({-1}).to(DType::i64)};
}

// picked[i] = x[i, target[i]] (0 where target[i] == ignore_index); differentiable in x.
Tensor pick_classes(const Tensor& x, const Tensor& target, int64_t ignore_index, const char* op) {
  const int64_t rows = x.size(0), classes = x.size(1);
  const Tensor tgt = target.contiguous();
  kernels::pick_classes.at(x, op);
  Tensor out = empty({rows}, TensorOptions(x.dtype()).device(x.device()));
  kernels::pick_classes(out, x.detach().contiguous(), tgt, ignore_index, op);
  autograd::record("nll_pick", {x}, out,
                   [tgt, rows, classes, ignore_index, op](const Tensor& g) -> std::vector<Tensor> {
    Tensor gx = empty({rows, classes}, TensorOptions(g.dtype()).device(g.device()));
    kernels::pick_classes_backward(gx, g.contiguous(), tgt, ignore_index);
    return {linear_in_grad(g, gx, "nll_pick_backward", [tgt, ignore_index, op](const Tensor& gg) {
      return pick_classes(gg, tgt, ignore_index, op);
    })};
  }, kDifferentiable);
  autograd::save_for_backward(out, {tgt});
  return out;
}

// weight: per-class weights (C) or undefined.
Tensor nll_flat(const Tensor& logp, const Tensor& target, Reduction reduction,
                int64_t ignore_index, const Shape& target_shape, const char* op,
                const Tensor& weight = Tensor()) {
  Tensor picked = pick_classes(logp, target, ignore_index, op);
  Tensor loss = neg(picked);
  // Each target's class weight (0 where ignored), the same pick from the weights.
  Tensor w;
  if (weight.defined()) {
    {
      NoGradGuard no_grad;  // class weights get no gradient, as torch's
      w = pick_classes(weight.to(loss.dtype()).unsqueeze(0).expand({logp.size(0), -1}), target,
                       ignore_index, op);
    }
    loss = mul(loss, w);
  }
  switch (reduction) {
    case Reduction::none: return loss.reshape(target_shape);
    case Reduction::sum: return sum(loss);
    case Reduction::mean: {
      // Averaged over the weights of the targets that are not ignored (NaN when all are), as
      // torch: their number when unweighted.
      if (w.defined()) return div(sum(loss), sum(w));
      Tensor valid = ne(target, full({}, static_cast<double>(ignore_index),
                                     TensorOptions(DType::i64).device(target.device())));
      return div(sum(loss), sum(valid.to(loss.dtype())));
    }
  }
  return loss;
}

}  // namespace

Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm,
                          double norm_type) {
  check_defined(weight, "embedding_renorm_", "weight");
  check_defined(indices, "embedding_renorm_", "indices");
  TANDEM_CHECK(weight.dim() == 2, "embedding_renorm_: weight must be 2-d, got ",
               shape_str(weight.shape()));
  TANDEM_CHECK(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
               "embedding_renorm_: indices must be i64 or i32, got ", indices.dtype());
  NoGradGuard guard;
  const Tensor rows = std::get<0>(_unique2(indices.reshape({-1}).to(DType::i64)));
  const Tensor picked = index_select_as(weight, 0, rows, "embedding_renorm_");
  const Tensor norms = norm(picked, norm_type, {1}, true);
  const Tensor scale = where(gt(norms, max_norm), div(full_like(norms, max_norm), add(norms, 1e-7)),
                             full_like(norms, 1.0));
  weight.index_copy_(0, rows, mul(picked, scale));
  return weight;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx,
                 bool scale_grad_by_freq, bool sparse) {
  check_defined(weight, "embedding", "weight");
  check_defined(indices, "embedding", "indices");
  TANDEM_CHECK(!sparse,
               "embedding: sparse gradients are not supported (tandem has no sparse "
               "tensors); the dense gradient is the same values");
  TANDEM_CHECK(weight.dim() == 2, "embedding: weight must be (num_embeddings, embedding_dim), got ",
               shape_str(weight.shape()));
  const Shape weight_shape = weight.shape();
  TANDEM_CHECK(padding_idx < weight_shape[0], "embedding: padding_idx ", padding_idx,
               " is out of range for ", weight_shape[0], " embeddings");
  const Tensor flat = indices.reshape({-1});
  Shape shape = indices.shape();
  shape.push_back(weight_shape[1]);
  Tensor out;
  {
    NoGradGuard no_grad;  // one node for the whole op, below
    out = index_select_as(weight, 0, flat, "embedding").view(shape);
  }
  autograd::record(
      "embedding", {weight}, out,
      [flat, padding_idx, scale_grad_by_freq,
       weight_shape](const Tensor& g) -> std::vector<Tensor> {
        const TensorOptions opts = TensorOptions(g.dtype()).device(g.device());
        // Each row's factor, (num_embeddings, 1): 0 for the padding row; with scale_grad_by_freq
        // 1 / how often the indices name it, as torch's (counted in f32 or f64, exact).
        Tensor factor;
        if (scale_grad_by_freq) {
          const TensorOptions count_opts =
              opts.dtype(g.dtype() == DType::f64 ? DType::f64 : DType::f32);
          Tensor counts = zeros({weight_shape[0]}, count_opts);
          index_add_into(counts, 0, flat, ones({flat.numel()}, count_opts), 1.0, "embedding",
                         kernels::BoundsCheck::deferred);
          factor = reciprocal(clamp_min(counts, 1.0)).to(g.dtype()).unsqueeze(1);
        }
        if (padding_idx >= 0) {
          if (!factor.defined()) factor = ones({weight_shape[0], 1}, opts);
          factor.narrow(0, padding_idx, 1).zero_();
        }
        Tensor gw = zeros(weight_shape, opts);
        index_add_into(gw, 0, flat, g.reshape({-1, weight_shape[1]}), 1.0, "embedding",
                       kernels::BoundsCheck::deferred);
        if (factor.defined()) gw = mul(gw, factor);
        // Its adjoint: the rows read back, times their factors.
        const Shape g_shape = g.shape();
        return {linear_in_grad(g, gw, "embedding_backward", [=](const Tensor& gg) {
          return index_select(factor.defined() ? mul(gg, factor) : gg, 0, flat).reshape(g_shape);
        })};
      },
      kDifferentiable);
  autograd::save_for_backward(out, {flat});
  return out;
}

namespace {
// Class weights, where given: floating, one per class of the flattened input x (rows, C), on
// its device.
void check_class_weight(const Tensor& weight, const Tensor& x, const char* op) {
  if (!weight.defined()) return;
  check_floating(weight, op, "weight");
  TANDEM_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1), op,
               ": weight must have one value per class (", x.size(1), "), got shape ",
               shape_str(weight.shape()));
  check_inputs({x, weight}, op);
}
}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                Reduction reduction, int64_t ignore_index) {
  if (autocast_changes("nll_loss", {input}))
    return nll_loss(autocast_input("nll_loss", input), target, weight, reduction, ignore_index);
  auto [x, t] = flatten_classes(input, target, "nll_loss");
  check_class_weight(weight, x, "nll_loss");
  return nll_flat(x, t, reduction, ignore_index, target.shape(), "nll_loss", weight);
}

namespace {
// cross_entropy with class probabilities for targets (input's shape), as torch's: -sum over
// classes of weight * target * log_softmax(input), smoothed toward 1/C first; the mean divides
// by the number of samples (not by weights), ignore_index does not apply.
Tensor cross_entropy_probabilities(const Tensor& input, const Tensor& target,
                                   const CrossEntropyOptions& o) {
  const char* op = "cross_entropy";
  check_inputs({input, target}, op);
  check_floating(input, op);
  TANDEM_CHECK(input.dim() >= 1 && target.shape() == input.shape(), op,
               ": a floating target holds class probabilities and must have the input's shape ",
               shape_str(input.shape()), ", got ", shape_str(target.shape()),
               "; class indices are i64 or i32");
  const int64_t cd = class_dim(input);
  const int64_t classes = input.size(cd);
  Tensor p = target;
  if (o.label_smoothing > 0.0)
    p = add(mul(p, 1.0 - o.label_smoothing), o.label_smoothing / static_cast<double>(classes));
  Tensor terms = mul(log_softmax(input, cd), p);
  if (o.weight.defined()) {
    check_class_weight(o.weight, cd == 0 ? input.unsqueeze(0) : input, op);
    Shape per_class(static_cast<size_t>(input.dim()), 1);
    per_class[static_cast<size_t>(cd)] = classes;
    terms = mul(terms, o.weight.reshape(per_class));
  }
  switch (o.reduction) {
    case Reduction::none: return neg(sum(terms, {cd}));
    case Reduction::sum: return neg(sum(terms));
    case Reduction::mean: break;
  }
  const double samples = classes > 0 ? static_cast<double>(input.numel() / classes) : 0.0;
  return div(neg(sum(terms)), samples);  // no samples: 0 / 0, NaN, as torch's
}
}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, CrossEntropyOptions o) {
  if (autocast_changes("cross_entropy", {input, target}))
    return cross_entropy(autocast_input("cross_entropy", input),
                         autocast_input("cross_entropy", target), o);
  TANDEM_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0,
               "cross_entropy: label_smoothing must be in [0, 1], got ", o.label_smoothing);
  check_defined(target, "cross_entropy", "target");
  if (target.is_floating_point()) return cross_entropy_probabilities(input, target, o);
  auto [x, t] = flatten_classes(input, target, "cross_entropy");
  check_class_weight(o.weight, x, "cross_entropy");
  Tensor logp = log_softmax(x, 1);
  Tensor nll =
      nll_flat(logp, t, o.reduction, o.ignore_index, target.shape(), "cross_entropy", o.weight);
  if (o.label_smoothing == 0.0) return nll;
  // Smoothing: eps * (mean over classes of -log p, each class's term weighted), zero on ignored
  // targets; with weights the mean divides by the targets' summed weights, as PyTorch's.
  const double eps = o.label_smoothing, classes = static_cast<double>(x.size(1));
  Tensor is_valid = ne(t, full({}, static_cast<double>(o.ignore_index),
                               TensorOptions(DType::i64).device(t.device())));
  Tensor valid = is_valid.to(logp.dtype());
  Tensor w = o.weight.defined() ? o.weight.to(logp.dtype()) : Tensor();
  Tensor smooth = mul(neg(sum(w.defined() ? mul(logp, w.reshape({1, -1})) : logp, {1})), valid);
  Tensor smooth_red;
  switch (o.reduction) {
    case Reduction::none: smooth_red = smooth.reshape(target.shape()); break;
    case Reduction::sum: smooth_red = sum(smooth); break;
    case Reduction::mean: {
      Tensor total = valid;
      if (w.defined())  // the targets' weights (ignored targets read class 0, then count 0)
        total = mul(index_select(w, 0, where(is_valid, t, zeros_like(t))), valid);
      smooth_red = div(sum(smooth), sum(total));
      break;
    }
  }
  return add(mul(nll, 1.0 - eps), mul(smooth_red, eps / classes));
}

namespace {
// The checks every elementwise loss makes of its input and target: defined, floating, one
// device, the same shape.
void check_pointwise_loss(const Tensor& input, const Tensor& target, const char* op) {
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  check_floating(input, op);
  check_floating(target, op, "target");
  check_inputs({input, target}, op);
  TANDEM_CHECK(input.shape() == target.shape(), op, ": input ", shape_str(input.shape()),
               " and target ", shape_str(target.shape()), " must have the same shape");
}
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast_changes("mse_loss", {input, target}))
    return mse_loss(autocast_input("mse_loss", input), autocast_input("mse_loss", target),
                    reduction);
  check_pointwise_loss(input, target, "mse_loss");
  Tensor d = sub(input, target);
  return reduce_loss(mul(d, d), reduction);
}

namespace {
// A loss's elementwise weight: floating, on the loss's device, broadcasting to its shape.
void check_loss_weight(const Tensor& weight, const Tensor& like, const char* op) {
  check_floating(weight, op, "weight");
  check_inputs({like, weight}, op);
  check_broadcasts_to(weight, like.shape(), op, "weight");
}

// loss * weight (broadcast to the loss), reduced.
Tensor weigh_and_reduce(Tensor loss, const Tensor& weight, Reduction reduction, const char* op) {
  if (weight.defined()) {
    check_loss_weight(weight, loss, op);
    loss = mul(loss, weight);
  }
  return reduce_loss(loss, reduction);
}
}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast_changes("l1_loss", {input, target}))
    return l1_loss(autocast_input("l1_loss", input), autocast_input("l1_loss", target),
                   reduction);
  check_pointwise_loss(input, target, "l1_loss");
  return reduce_loss(abs(sub(input, target)), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                      double beta) {
  if (autocast_changes("smooth_l1_loss", {input, target}))
    return smooth_l1_loss(autocast_input("smooth_l1_loss", input),
                          autocast_input("smooth_l1_loss", target), reduction, beta);
  TANDEM_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  check_pointwise_loss(input, target, "smooth_l1_loss");
  if (beta == 0.0) return l1_loss(input, target, reduction);
  Tensor d = abs(sub(input, target));
  return reduce_loss(where(d.lt(beta), mul(mul(d, d), 0.5 / beta), add(d, -0.5 * beta)), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (autocast_changes("huber_loss", {input, target}))
    return huber_loss(autocast_input("huber_loss", input), autocast_input("huber_loss", target),
                      reduction, delta);
  TANDEM_CHECK(delta > 0, "huber_loss: delta must be positive, got ", delta);
  check_pointwise_loss(input, target, "huber_loss");
  Tensor d = abs(sub(input, target));
  return reduce_loss(where(d.lt(delta), mul(mul(d, d), 0.5), mul(add(d, -0.5 * delta), delta)),
                     reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, KLDivReduction reduction,
              bool log_target) {
  if (autocast_changes("kl_div", {input, target}))
    return kl_div(autocast_input("kl_div", input), autocast_input("kl_div", target), reduction,
                  log_target);
  check_pointwise_loss(input, target, "kl_div");
  Tensor loss;
  if (log_target) {
    loss = mul(exp(target), sub(target, input));
  } else {
    // target log(target) is 0 at target 0: the log of 1 there, so neither value nor gradient is
    // NaN.
    const Tensor positive = target.gt(0.0);
    loss = mul(target, sub(log(where(positive, target, 1.0)), input));
  }
  if (!reduction.batchmean) return reduce_loss(loss, reduction.reduction);
  return input.dim() == 0 ? sum(loss) : div(sum(loss), static_cast<double>(input.size(0)));
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  if (autocast_changes("cosine_similarity", {x1, x2}))
    return cosine_similarity(autocast_input("cosine_similarity", x1),
                             autocast_input("cosine_similarity", x2), dim, eps);
  check_defined(x1, "cosine_similarity", "x1");
  check_defined(x2, "cosine_similarity", "x2");
  check_floating(x1, "cosine_similarity", "x1");
  check_floating(x2, "cosine_similarity", "x2");
  const Shape shape = broadcast_shapes(x1.shape(), x2.shape(), "cosine_similarity");
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(shape.size()), "cosine_similarity");
  // Both broadcast first, as torch's: dim counts in the common shape, and an operand of size 1
  // along it has the norm of its repeats.
  const Tensor a = x1.expand(shape), b = x2.expand(shape);
  // torch 1.13's: each operand divided by its norm clamped at eps, then their dot product (the
  // product of the norms clamped at eps^2, torch's before, made small vectors' values small).
  const Tensor na = clamp_min(norm(a, 2.0, {d}, /*keepdim=*/true), eps);
  const Tensor nb = clamp_min(norm(b, 2.0, {d}, /*keepdim=*/true), eps);
  return sum(mul(div(a, na), div(b, nb)), {d});
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  check_defined(x1, "pairwise_distance", "x1");
  check_defined(x2, "pairwise_distance", "x2");
  const Tensor diff = add(sub(x1, x2), eps);
  return norm(diff, p, {-1}, keepdim);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            Reduction reduction) {
  if (autocast_changes("binary_cross_entropy", {input, target, weight}))
    return binary_cross_entropy(
        autocast_input("binary_cross_entropy", input),
        autocast_input("binary_cross_entropy", target),
        weight.defined() ? autocast_input("binary_cross_entropy", weight) : weight, reduction);
  check_pointwise_loss(input, target, "binary_cross_entropy");
  if (input.numel() > 0) {
    // |x - 1/2| <= 1/2 for every x in [0, 1]; false for NaN too.
    check_scalar(amax(abs(add(input.detach(), -0.5)), {}, false).to(DType::f64), [](double d) {
      TANDEM_CHECK(d <= 0.5,
                   "binary_cross_entropy: every input must be a probability in "
                   "[0, 1], got one at distance ",
                   d, " from 0.5");
    });
  }
  if (weight.defined()) check_loss_weight(weight, input, "binary_cross_entropy");
  // The value with each log clamped at -100, and torch's gradients, whose input gradient
  // divides by max(x (1 - x), 1e-12): finite at x = 0 and 1, where the composed logs'
  // gradients would be 0 / 0.
  const Tensor x = input.detach(), y = target.detach(), w = weight.defined() ? weight.detach()
                                                                               : Tensor();
  Tensor loss;
  {
    NoGradGuard no_grad;
    auto clamped_log = [](const Tensor& t) { return clamp(log(t), -100.0, std::nullopt); };
    Tensor one_minus_x = add(neg(x), 1.0);
    loss = neg(add(mul(y, clamped_log(x)), mul(add(neg(y), 1.0), clamped_log(one_minus_x))));
    if (w.defined()) loss = mul(loss, w);
  }
  const bool need_y = target.requires_grad();
  autograd::record("binary_cross_entropy", {input, target}, loss,
                   [x_kept = x, y_kept = y, w, need_y](const Tensor& g) -> std::vector<Tensor> {
                     // With their history under create_graph.
                     const Tensor x = autograd::saved_input(x_kept, 0);
                     const Tensor y = autograd::saved_input(y_kept, 1);
                     Tensor gw = w.defined() ? mul(g, w) : g;
                     Tensor one_minus_x = add(neg(x), 1.0);
                     Tensor denom = clamp(mul(x, one_minus_x), 1e-12, std::nullopt);
                     return {div(mul(gw, sub(x, y)), denom),
                             need_y ? mul(gw, sub(log(one_minus_x), log(x)))  // -logit(x)
                                    : Tensor()};
                   }, kDifferentiable);
  autograd::save_for_backward(loss, {x, y, w});
  return reduce_loss(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight, const Tensor& pos_weight,
                                        Reduction reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  if (autocast_changes(op, {input, target, weight, pos_weight})) {
    auto cast = [&](const Tensor& t) { return t.defined() ? autocast_input(op, t) : t; };
    return binary_cross_entropy_with_logits(cast(input), cast(target), cast(weight),
                                            cast(pos_weight), reduction);
  }
  check_pointwise_loss(input, target, op);
  check_inputs({input, weight, pos_weight}, op);
  // log(1 + exp(-x)) as m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0): no overflow, as
  // torch computes it.
  Tensor m = clamp(neg(input), 0.0, std::nullopt);
  Tensor softplus_neg = add(m, log(add(exp(neg(m)), exp(sub(neg(input), m)))));
  Tensor not_target = add(neg(target), 1.0);
  Tensor loss;
  if (pos_weight.defined()) {
    check_floating(pos_weight, op, "pos_weight");
    check_broadcasts_to(pos_weight, input.shape(), op, "pos_weight");
    Tensor log_weight = add(mul(add(pos_weight, -1.0), target), 1.0);
    loss = add(mul(not_target, input), mul(log_weight, softplus_neg));
  } else {
    loss = add(mul(not_target, input), softplus_neg);
  }
  return weigh_and_reduce(loss, weight, reduction, op);
}

Tensor logit(const Tensor& input, std::optional<double> eps) {
  check_defined(input, "logit", "input");
  check_floating(input, "logit");
  const Tensor z = eps ? clamp(input, *eps, 1.0 - *eps) : input;
  return sub(log(z), log1p(neg(z)));
}

Tensor glu(const Tensor& input, int64_t dim) {
  check_defined(input, "glu", "input");
  TANDEM_CHECK(input.dim() > 0, "glu: cannot halve a 0-dim tensor");
  const int64_t d = wrap_dim(dim, input.dim(), "glu");
  TANDEM_CHECK(input.size(d) % 2 == 0, "glu: halving dimension must be even, but dimension ", d,
               " is size ", input.size(d));
  const int64_t half = input.size(d) / 2;
  return mul(narrow(input, d, 0, half), sigmoid(narrow(input, d, half, half)));
}

Tensor celu(const Tensor& input, double alpha) {
  check_defined(input, "celu", "input");
  check_floating(input, "celu");
  TANDEM_CHECK(alpha != 0, "celu: alpha must not be 0");
  // expm1 of the negative part only, so the branch not taken cannot overflow (an inf there
  // would make where's zero gradient a NaN).
  return where(input.gt(0.0), input, mul(expm1(div(clamp_max(input, 0.0), alpha)), alpha));
}

Tensor softshrink(const Tensor& input, double lambd) {
  check_defined(input, "softshrink", "input");
  TANDEM_CHECK(lambd >= 0, "softshrink: lambd must be >= 0, got ", lambd);
  return sub(input, clamp(input, -lambd, lambd));
}

Tensor hardshrink(const Tensor& input, double lambd) {
  check_defined(input, "hardshrink", "input");
  return where(abs(input).le(lambd), 0.0, input);  // (a NaN stays NaN, as torch's)
}

Tensor tanhshrink(const Tensor& input) { return sub(input, tanh(input)); }

Tensor threshold(const Tensor& input, double threshold, double value) {
  check_defined(input, "threshold", "input");
  return where(input.le(threshold), value, input);  // (a NaN stays NaN, as torch's)
}

Tensor softmin(const Tensor& input, int64_t dim) { return softmax(neg(input), dim); }

Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight,
                const Tensor& bias) {
  check_defined(input1, "bilinear", "input1");
  check_defined(input2, "bilinear", "input2");
  check_defined(weight, "bilinear", "weight");
  TANDEM_CHECK(weight.dim() == 3 && input1.dim() >= 1 && input2.dim() >= 1 &&
                   input1.size(-1) == weight.size(1) && input2.size(-1) == weight.size(2) &&
                   Shape(input1.shape().begin(), input1.shape().end() - 1) ==
                       Shape(input2.shape().begin(), input2.shape().end() - 1),
               "bilinear: expected input1 (*, in1), input2 (*, in2) and weight (out, in1, in2), "
               "got ",
               shape_str(input1.shape()), ", ", shape_str(input2.shape()), " and ",
               shape_str(weight.shape()));
  const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  Shape lead(input1.shape().begin(), input1.shape().end() - 1);
  // y[b, o] = sum_i x1[b, i] (sum_j W[o, i, j] x2[b, j]): one matrix product, then a weighted sum.
  const Tensor x1 = input1.reshape({-1, in1}), x2 = input2.reshape({-1, in2});
  const Tensor inner = matmul(x2, weight.reshape({out * in1, in2}).transpose(0, 1));
  Tensor y = sum(mul(inner.reshape({-1, out, in1}), x1.unsqueeze(1)), {-1});
  if (bias.defined()) y = add(y, bias);
  lead.push_back(out);
  return y.reshape(lead);
}

Tensor channel_shuffle(const Tensor& input, int64_t groups) {
  check_defined(input, "channel_shuffle", "input");
  TANDEM_CHECK(input.dim() >= 3, "channel_shuffle: expected an input (N, C, *), got ",
               shape_str(input.shape()));
  TANDEM_CHECK(groups > 0 && input.size(1) % groups == 0, "channel_shuffle: the channels (",
               input.size(1), ") must be divisible by groups (", groups, ")");
  Shape split = input.shape();
  split[1] = input.size(1) / groups;
  split.insert(split.begin() + 1, groups);
  return input.reshape(split).transpose(1, 2).reshape(input.shape());
}

namespace {
// How many kernel windows fit along each side of a (height, width) map, after checking the
// window parameters (im2col's and col2im's).
Int2 window_counts(int64_t height, int64_t width, Int2 k, Int2 d, Int2 p, Int2 s, const char* op) {
  TANDEM_CHECK(k.h > 0 && k.w > 0 && d.h > 0 && d.w > 0 && s.h > 0 && s.w > 0 && p.h >= 0 &&
                   p.w >= 0,
               op, ": kernel_size, dilation and stride must be positive and padding >= 0, got "
               "kernel_size (", k.h, ", ", k.w, "), dilation (", d.h, ", ", d.w, "), padding (",
               p.h, ", ", p.w, "), stride (", s.h, ", ", s.w, ")");
  const int64_t span_h = d.h * (k.h - 1) + 1, span_w = d.w * (k.w - 1) + 1;
  const int64_t padded_h = height + 2 * p.h, padded_w = width + 2 * p.w;
  TANDEM_CHECK(padded_h >= span_h && padded_w >= span_w, op, ": the padded map (", padded_h, ", ",
               padded_w, ") is smaller than the dilated kernel (", span_h, ", ", span_w, ")");
  return {(padded_h - span_h) / s.h + 1, (padded_w - span_w) / s.w + 1};
}
}  // namespace

Tensor im2col(const Tensor& input, Int2 kernel_size, Int2 dilation, Int2 padding, Int2 stride) {
  check_defined(input, "unfold", "input");
  TANDEM_CHECK(input.dim() == 3 || input.dim() == 4,
               "unfold: expected a (N, C, H, W) or (C, H, W) input, got ",
               shape_str(input.shape()));
  if (input.dim() == 3)
    return im2col(input.unsqueeze(0), kernel_size, dilation, padding, stride).squeeze(0);
  const Int2 k = kernel_size, d = dilation, p = padding, s = stride;
  const Int2 out = window_counts(input.size(2), input.size(3), k, d, p, s, "unfold");
  const Tensor x = p.h || p.w ? pad(input, {p.w, p.w, p.h, p.h}) : input;
  // Windows as views (N, C, out.h, out.w, span_h, span_w), their dilated taps picked by slices.
  Tensor w = x.unfold(2, d.h * (k.h - 1) + 1, s.h).unfold(3, d.w * (k.w - 1) + 1, s.w);
  w = w.slice(4, 0, w.size(4), d.h).slice(5, 0, w.size(5), d.w);
  return w.permute({0, 1, 4, 5, 2, 3})
      .reshape({input.size(0), input.size(1) * k.h * k.w, out.h * out.w});
}

Tensor col2im(const Tensor& input, Int2 output_size, Int2 kernel_size, Int2 dilation, Int2 padding,
              Int2 stride) {
  check_defined(input, "fold", "input");
  TANDEM_CHECK(input.dim() == 2 || input.dim() == 3,
               "fold: expected a (N, C kh kw, L) or (C kh kw, L) input, got ",
               shape_str(input.shape()));
  if (input.dim() == 2)
    return col2im(input.unsqueeze(0), output_size, kernel_size, dilation, padding, stride)
        .squeeze(0);
  const Int2 k = kernel_size, d = dilation, p = padding, s = stride;
  const Int2 out = window_counts(output_size.h, output_size.w, k, d, p, s, "fold");
  const int64_t n = input.size(0), taps = k.h * k.w;
  TANDEM_CHECK(input.size(1) % taps == 0, "fold: the input's dim 1 (", input.size(1),
               ") must be divisible by the kernel's ", taps, " taps");
  TANDEM_CHECK(input.size(2) == out.h * out.w, "fold: the input's ", input.size(2),
               " columns do not match the ", out.h, " x ", out.w,
               " windows of the output size (", output_size.h, ", ", output_size.w, ")");
  const int64_t c = input.size(1) / taps;
  // Each tap's columns added into the strided positions it read (windows overlap: sums).
  Tensor map = zeros({n, c, output_size.h + 2 * p.h, output_size.w + 2 * p.w},
                     TensorOptions(input.dtype()).device(input.device()));
  {
    NoGradGuard no_grad;
    const Tensor cols = input.detach().reshape({n, c, k.h, k.w, out.h, out.w});
    for (int64_t i = 0; i < k.h; ++i)
      for (int64_t j = 0; j < k.w; ++j)
        map.slice(2, i * d.h, i * d.h + s.h * (out.h - 1) + 1, s.h)
            .slice(3, j * d.w, j * d.w + s.w * (out.w - 1) + 1, s.w)
            .add_(cols.select(2, i).select(2, j));
  }
  autograd::record(
      "fold", {input}, map,
      [=](const Tensor& grad) -> std::vector<Tensor> { return {im2col(grad, k, d, 0, s)}; },
      kDifferentiable);
  if (!p.h && !p.w) return map;
  return map.narrow(2, p.h, output_size.h).narrow(3, p.w, output_size.w);
}

namespace {
constexpr double kPi = 3.14159265358979323846;

// The checks of the losses whose target holds 1 or -1 (or, for ranking, any sign) beside their
// inputs: defined, floating inputs, one device. Each loss then checks that its shapes broadcast
// (so that a mismatch is reported in its name, not in that of an op inside).
void check_loss_inputs(const std::vector<std::pair<const Tensor*, const char*>>& named,
                       const char* op) {
  std::vector<Tensor> all;
  for (const auto& [t, name] : named) {
    check_defined(*t, op, name);
    all.push_back(*t);
  }
  check_floating(*named[0].first, op, named[0].second);
  check_inputs(all, op);
}
}  // namespace

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                           Reduction reduction) {
  const char* op = "margin_ranking_loss";
  check_loss_inputs({{&x1, "input1"}, {&x2, "input2"}, {&target, "target"}}, op);
  broadcast_shapes(broadcast_shapes(x1.shape(), x2.shape(), op), target.shape(), op);
  return reduce_loss(clamp_min(add(mul(neg(target), sub(x1, x2)), margin), 0.0), reduction);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin, double p, double eps, bool swap, Reduction reduction) {
  const char* op = "triplet_margin_loss";
  check_loss_inputs({{&anchor, "anchor"}, {&positive, "positive"}, {&negative, "negative"}}, op);
  TANDEM_CHECK(anchor.dim() == positive.dim() && anchor.dim() == negative.dim(), op,
               ": anchor, positive and negative must have the same number of dims, got ",
               shape_str(anchor.shape()), ", ", shape_str(positive.shape()), " and ",
               shape_str(negative.shape()));
  broadcast_shapes(broadcast_shapes(anchor.shape(), positive.shape(), op), negative.shape(), op);
  const Tensor d_pos = pairwise_distance(anchor, positive, p, eps);
  Tensor d_neg = pairwise_distance(anchor, negative, p, eps);
  if (swap) d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps));
  return reduce_loss(clamp_min(add(sub(d_pos, d_neg), margin), 0.0), reduction);
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                             double margin, Reduction reduction) {
  const char* op = "cosine_embedding_loss";
  check_loss_inputs({{&x1, "input1"}, {&x2, "input2"}, {&target, "target"}}, op);
  TANDEM_CHECK(target.dim() <= 1, op, ": expected a 0-d or 1-d target, got ",
               shape_str(target.shape()));
  const int64_t d = target.dim();  // the dim the cosines run along
  TANDEM_CHECK(x1.dim() == d + 1 && x2.dim() == d + 1, op, ": a ", d, "-d target expects ", d + 1,
               "-d inputs, got ", shape_str(x1.shape()), " and ", shape_str(x2.shape()));
  const Shape inputs = broadcast_shapes(x1.shape(), x2.shape(), op);
  broadcast_shapes(Shape(inputs.begin(), inputs.end() - 1), target.shape(), op);
  // torch's: each squared magnitude plus 1e-12, the root of their product.
  const double kEps = 1e-12;
  const Tensor dot = sum(mul(x1, x2), {d});
  const Tensor mag1 = add(sum(mul(x1, x1), {d}), kEps), mag2 = add(sum(mul(x2, x2), {d}), kEps);
  const Tensor cos = div(dot, sqrt(mul(mag1, mag2)));
  const Tensor pos = where(target.eq(1.0), add(neg(cos), 1.0), 0.0);
  const Tensor negative = where(target.eq(-1.0), clamp_min(add(cos, -margin), 0.0), 0.0);
  return reduce_loss(add(pos, negative), reduction);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin,
                            Reduction reduction) {
  const char* op = "hinge_embedding_loss";
  check_loss_inputs({{&input, "input"}, {&target, "target"}}, op);
  broadcast_shapes(input.shape(), target.shape(), op);
  const Tensor margin_part = where(target.ne(1.0), clamp_min(add(neg(input), margin), 0.0), 0.0);
  const Tensor self_part = where(target.ne(-1.0), input, 0.0);
  return reduce_loss(add(margin_part, self_part), reduction);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pointwise_loss(input, target, "soft_margin_loss");
  return reduce_loss(log1p(exp(neg(mul(input, target)))), reduction);
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                                   Reduction reduction) {
  const char* op = "multilabel_soft_margin_loss";
  check_pointwise_loss(input, target, op);
  TANDEM_CHECK(input.dim() >= 1, op, ": expected an input with a class dim, got a 0-d one");
  Tensor loss = neg(
      add(mul(target, log_sigmoid(input)), mul(add(neg(target), 1.0), log_sigmoid(neg(input)))));
  if (weight.defined()) {
    check_loss_weight(weight, loss, op);
    loss = mul(loss, weight);
  }
  const int64_t classes = input.size(-1);
  return reduce_loss(div(sum(loss, {-1}), static_cast<double>(classes)), reduction);
}

namespace {
// That class indices lie in [lo, classes): at once on the CPU; on a GPU at the next check point
// (check_scalar), the callers computing on meanwhile with the indices clamped into range, so
// that no kernel reads outside the scores.
void check_class_indices(const Tensor& t, int64_t lo, int64_t classes, const char* op,
                         const char* expected) {
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  auto report = [=](double v) {
    TANDEM_CHECK_INDEX(v >= static_cast<double>(lo) && v < static_cast<double>(classes), op,
                       ": target ", static_cast<int64_t>(v), " is out of range for ", classes,
                       " classes (expected ", expected, ")");
  };
  check_scalar(amin(t, Shape{}).to(DType::f64), report);
  check_scalar(amax(t, Shape{}).to(DType::f64), report);
}
}  // namespace

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p, double margin,
                         const Tensor& weight, Reduction reduction) {
  const char* op = "multi_margin_loss";
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  check_floating(input, op);
  check_inputs({input, target, weight}, op);
  TANDEM_CHECK(p == 1 || p == 2, op, ": only p == 1 and p == 2 are supported, got ", p);
  TANDEM_CHECK((input.dim() == 2 && target.dim() == 1 && target.size(0) == input.size(0)) ||
                   (input.dim() == 1 && target.dim() <= 1 && target.numel() == 1),
               op, ": expected (N, C) scores with N targets or (C) with one, got ",
               shape_str(input.shape()), " and ", shape_str(target.shape()));
  TANDEM_CHECK(!target.is_floating_point(), op, ": expected integer class indices, got ",
               target.dtype());
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  const int64_t classes = x.size(1);
  check_class_indices(target, 0, classes, op, "class indices in [0, C)");
  const Tensor y = clamp(target.reshape({-1, 1}).to(DType::i64), 0, classes - 1);
  // relu: no gradient where the margin is met exactly, as torch's kernel (z > 0).
  const Tensor z = relu(add(sub(x, gather(x, 1, y)), margin));
  Tensor h = p == 2 ? mul(z, z) : z;
  const Tensor own =
      arange(0.0, static_cast<double>(classes), TensorOptions(DType::i64).device(x.device()));
  h = where(own.unsqueeze(0).eq(y), 0.0, h);  // the target class itself is not summed
  if (weight.defined()) {
    TANDEM_CHECK(weight.dim() == 1 && weight.size(0) == classes, op, ": weight must be (", classes,
                 "), one per class, got ", shape_str(weight.shape()));
    h = mul(h, index_select(weight, 0, y.reshape({-1})).unsqueeze(1));
  }
  Tensor loss = div(sum(h, {1}), static_cast<double>(classes));
  if (input.dim() == 1) loss = loss.reshape(target.shape());  // () or (1), as the target
  return reduce_loss(loss, reduction);
}

Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "multilabel_margin_loss";
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  check_floating(input, op);
  check_inputs({input, target}, op);
  TANDEM_CHECK(input.dim() <= 2 && (input.dim() == 0 || input.size(-1) > 0) &&
                   target.shape() == input.shape(),
               op, ": expected (N, C), (C) or 0-dim scores and a target of their shape, got ",
               shape_str(input.shape()), " and ", shape_str(target.shape()));
  TANDEM_CHECK(!target.is_floating_point() && target.dtype() != DType::boolean, op,
               ": expected integer class indices, got ", target.dtype());
  // (C) and 0-dim (one class) as one sample.
  const Tensor x = input.dim() == 2 ? input : input.reshape({1, -1});
  const Tensor t = (input.dim() == 2 ? target : target.reshape({1, -1})).to(DType::i64);
  const int64_t classes = x.size(1);
  check_class_indices(t, -1, classes, op,
                      "class indices in [0, C), or -1 to end a sample's labels");
  // A slot counts up to the first -1; -1 and the slots after it read class 0, weighted 0.
  const Tensor counted = cumprod(ge(t, 0).to(x.dtype()), 1);  // (N, slots)
  const Tensor index = clamp(t, 0, classes - 1);
  const Tensor chosen = gt(scatter_add(zeros_like(x), 1, index, counted), 0.0);  // (N, C)
  // 1 - x[j] + x[i] for every counted slot j and every class i not chosen.
  const Tensor z = relu(add(sub(x.unsqueeze(1), gather(x, 1, index).unsqueeze(2)), 1.0));
  const Tensor others = logical_not(chosen).to(x.dtype());
  const Tensor h = mul(mul(z, counted.unsqueeze(2)), others.unsqueeze(1));
  Tensor loss = div(sum(h, {1, 2}), static_cast<double>(classes));
  if (input.dim() < 2) loss = loss.reshape({});
  return reduce_loss(loss, reduction);
}

Tensor local_response_norm(const Tensor& input, int64_t size, double alpha, double beta, double k) {
  const char* op = "local_response_norm";
  check_defined(input, op, "input");
  check_floating(input, op);
  TANDEM_CHECK(input.dim() >= 3, op, ": expected (N, C, ...) with at least 3 dims, got ",
               shape_str(input.shape()));
  TANDEM_CHECK(size >= 1, op, ": size must be positive, got ", size);
  if (input.numel() == 0) return input.clone();
  // The squares' average over `size` channels (zeros past either end), torch's formula.
  Tensor div = mul(input, input).unsqueeze(1);
  if (input.dim() == 3) {
    div = pad(div, {0, 0, size / 2, (size - 1) / 2});
    div = avg_pool2d(div, {size, 1}, 1).squeeze(1);
  } else {
    const Shape sizes = input.shape();
    div = div.reshape({sizes[0], 1, sizes[1], sizes[2], -1});
    div = pad(div, {0, 0, 0, 0, size / 2, (size - 1) / 2});
    div = avg_pool3d(div, {size, 1, 1}, 1).squeeze(1).reshape(sizes);
  }
  return tandem::div(input, pow(add(mul(div, alpha), k), beta));
}

Tensor embedding_bag(const Tensor& weight, const Tensor& input, const Tensor& offsets,
                     EmbeddingBagMode mode, const Tensor& per_sample_weights,
                     bool include_last_offset, std::optional<int64_t> padding_idx) {
  const char* op = "embedding_bag";
  check_defined(weight, op, "weight");
  check_defined(input, op, "input");
  TANDEM_CHECK(weight.dim() == 2, op, ": weight must be (num_embeddings, embedding_dim), got ",
               shape_str(weight.shape()));
  TANDEM_CHECK(!input.is_floating_point() && input.dtype() != DType::boolean, op,
               ": expected integer indices, got ", input.dtype());
  check_inputs({weight, input, offsets, per_sample_weights}, op);
  const int64_t rows = weight.size(0);
  int64_t pad_row = -1;
  if (padding_idx) {
    TANDEM_CHECK(*padding_idx >= -rows && *padding_idx < rows, op, ": padding_idx ", *padding_idx,
                 " is out of range for ", rows, " embeddings");
    pad_row = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  // The bags, on the host: where each one starts in the flat list of indices.
  std::vector<int64_t> starts;
  const int64_t count = input.numel();
  int64_t last_end = count;  // where the last bag ends
  if (input.dim() == 2) {
    TANDEM_CHECK(!offsets.defined(), op,
                 ": offsets must be undefined for a 2-d input (each row is "
                 "a bag)");
    for (int64_t b = 0; b < input.size(0); ++b) starts.push_back(b * input.size(1));
    // As torch: the rows' starts are the offsets, so with include_last_offset the last row only
    // ends the bag before it.
    if (include_last_offset && !starts.empty()) {
      last_end = starts.back();
      starts.pop_back();
    }
  } else {
    TANDEM_CHECK(input.dim() == 1, op, ": expected a 1-d or 2-d input, got ",
                 shape_str(input.shape()));
    TANDEM_CHECK(offsets.defined() && offsets.dim() == 1, op,
                 ": a 1-d input needs 1-d offsets, where each bag starts");
    starts = offsets.to(DType::i64).to_vector<int64_t>();
    TANDEM_CHECK(starts.empty() || starts[0] == 0, op, ": offsets[0] has to be 0, got ",
                 starts.empty() ? 0 : starts[0]);
    for (size_t b = 1; b < starts.size(); ++b)
      TANDEM_CHECK(starts[b - 1] <= starts[b] && starts[b] <= count, op,
                   ": offsets must rise "
                   "within [0, ",
                   count, "], got ", starts[b - 1], " then ", starts[b]);
    if (include_last_offset) {
      TANDEM_CHECK(!starts.empty(), op, ": include_last_offset needs at least one offset");
      TANDEM_CHECK(starts.back() == count, op,
                   ": with include_last_offset the last offset must be "
                   "the number of indices (",
                   count, "), got ", starts.back());
      starts.pop_back();
    }
  }
  TANDEM_CHECK(!per_sample_weights.defined() || mode == EmbeddingBagMode::sum, op,
               ": per_sample_weights are only supported for mode sum");
  if (per_sample_weights.defined())
    TANDEM_CHECK(per_sample_weights.shape() == input.shape(), op, ": per_sample_weights of shape ",
                 shape_str(per_sample_weights.shape()), " for indices of shape ",
                 shape_str(input.shape()));
  const int64_t bags = static_cast<int64_t>(starts.size()), dim = weight.size(1);
  const std::vector<int64_t> indices = input.to(DType::i64).to_vector<int64_t>();
  // Each kept entry's bag, and each bag's kept entries (padding left out).
  std::vector<int64_t> kept, bag_of, counts(static_cast<size_t>(bags), 0);
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(bags));
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t end = b + 1 < bags ? starts[static_cast<size_t>(b) + 1] : last_end;
    for (int64_t i = starts[static_cast<size_t>(b)]; i < end; ++i) {
      if (indices[static_cast<size_t>(i)] == pad_row) continue;
      members[static_cast<size_t>(b)].push_back(static_cast<int64_t>(kept.size()));
      kept.push_back(i);
      bag_of.push_back(b);
      ++counts[static_cast<size_t>(b)];
    }
  }
  const Tensor positions =
      from_vector(kept, {static_cast<int64_t>(kept.size())}).to(weight.device());
  // index_select checks every index is in [0, num_embeddings).
  Tensor picked =
      index_select(weight, 0, index_select(input.reshape({-1}).to(DType::i64), 0, positions));
  if (per_sample_weights.defined())
    picked = mul(picked, index_select(per_sample_weights.reshape({-1}), 0, positions).unsqueeze(1));
  const Tensor zeros_out =
      zeros({bags, dim}, TensorOptions(weight.dtype()).device(weight.device()));
  if (mode != EmbeddingBagMode::max) {
    Tensor out = index_add(
        zeros_out, 0,
        from_vector(bag_of, {static_cast<int64_t>(bag_of.size())}).to(weight.device()), picked);
    if (mode == EmbeddingBagMode::mean) {
      std::vector<double> divisors(counts.begin(), counts.end());
      for (double& d : divisors) d = std::max(d, 1.0);
      out = tandem::div(
          out, from_vector(divisors, {bags}).to(weight.dtype()).to(weight.device()).unsqueeze(1));
    }
    return out;
  }
  // max: each bag's rows padded to the longest bag with -inf (a row past the picked ones), the
  // max over them; an empty bag gives zeros.
  int64_t longest = 0;
  for (int64_t c : counts) longest = std::max(longest, c);
  if (longest == 0) return zeros_out;
  const int64_t filler = static_cast<int64_t>(kept.size());
  std::vector<int64_t> grid(static_cast<size_t>(bags * longest), filler);
  for (int64_t b = 0; b < bags; ++b)
    for (size_t j = 0; j < members[static_cast<size_t>(b)].size(); ++j)
      grid[static_cast<size_t>(b * longest) + j] = members[static_cast<size_t>(b)][j];
  const Tensor with_filler =
      cat({picked, full({1, dim}, -std::numeric_limits<double>::infinity(),
                        TensorOptions(weight.dtype()).device(weight.device()))});
  const Tensor boxed =
      index_select(with_filler, 0, from_vector(grid, {bags * longest}).to(weight.device()))
          .reshape({bags, longest, dim});
  const Tensor best = std::get<0>(max(boxed, 1));
  std::vector<uint8_t> nonempty(counts.size());
  for (size_t b = 0; b < counts.size(); ++b) nonempty[b] = counts[b] > 0;
  return where(from_vector(nonempty, {bags}).to(DType::boolean).to(weight.device()).unsqueeze(1),
               best, 0.0);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full,
                         double eps, Reduction reduction) {
  const char* op = "gaussian_nll_loss";
  check_pointwise_loss(input, target, op);
  check_defined(var, op, "var");
  check_floating(var, op, "var");
  check_inputs({input, var}, op);
  Tensor v = var;
  if (var.shape() != input.shape()) {
    const Shape lead(input.shape().begin(), input.shape().end() - (input.dim() > 0 ? 1 : 0));
    const bool one_short = input.dim() > 0 && var.shape() == lead;
    const bool last_one = input.dim() > 0 && var.dim() == input.dim() && var.size(-1) == 1 &&
                          Shape(var.shape().begin(), var.shape().end() - 1) == lead;
    TANDEM_CHECK(one_short || last_one, op, ": var ", shape_str(var.shape()),
                 " must have the input's shape ", shape_str(input.shape()),
                 ", or it with the last dim 1 or gone");
    if (one_short) v = unsqueeze(var, -1);
  }
  if (var.numel() > 0) {
    check_scalar(any(var.detach().lt(0.0)).to(DType::f64), [](double negative) {
      TANDEM_CHECK(negative == 0, "gaussian_nll_loss: var has negative entries");
    });
  }
  // Clamped at eps with no effect on the gradient: the clamp's change added as a constant.
  Tensor clamped;
  {
    NoGradGuard no_grad;
    clamped = sub(clamp_min(v, eps), v);
  }
  v = add(v, clamped);
  const Tensor d = sub(input, target);
  Tensor loss = mul(add(log(v), div(mul(d, d), v)), 0.5);
  if (full) loss = add(loss, 0.5 * std::log(2.0 * kPi));
  return reduce_loss(loss, reduction);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full,
                        double eps, Reduction reduction) {
  const char* op = "poisson_nll_loss";
  check_pointwise_loss(input, target, op);
  Tensor loss = log_input ? sub(exp(input), mul(target, input))
                          : sub(input, mul(target, log(add(input, eps))));
  if (full) {
    // Stirling's approximation of log(target!) where target > 1, 0 elsewhere; computed on 2
    // there, so that neither value nor gradient is NaN where it is masked.
    const Tensor above = target.gt(1.0);
    const Tensor t = where(above, target, 2.0);
    const Tensor stirling = add(sub(mul(t, log(t)), t), mul(log(mul(t, 2.0 * kPi)), 0.5));
    loss = add(loss, where(above, stirling, 0.0));
  }
  return reduce_loss(loss, reduction);
}

}  // namespace tandem
