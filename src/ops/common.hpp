// Helpers shared by the op implementations: input checks with torch-style messages, the
// compute dtype, and broadcast views for kernels.
#pragma once

#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "../kernels/kernels.hpp"
#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/ops.hpp"

namespace tandem::ops_detail {

/// What an op passes to autograd::record when its backward closure is built of recorded ops
/// (so it can run under create_graph).
inline constexpr autograd::BackwardKind kDifferentiable = autograd::BackwardKind::differentiable;

/// sqrt(v) for a variance v, with the gradient 0 where v is 0 (torch's std: there the
/// variance's own gradient is 0 too, and sqrt's infinite one would make it NaN). reduction.cpp.
Tensor root_of_variance(const Tensor& v);

/// The history of an in-place op on a view in the graph, whose result `values` is already
/// written: the view's base takes torch's CopySlices (its old history outside the view's
/// elements, `values`' inside), and the view its history from the base's. view_history.cpp.
void copy_slices(const Tensor& view, const Tensor& values);

/// The smallest and largest element of a non-empty integer tensor, read on the host together
/// (one wait on a GPU): the bounds checks of indices that no kernel checks.
inline std::pair<int64_t, int64_t> host_extremes(const Tensor& t) {
  NoGradGuard guard;
  const std::vector<int64_t> v = stack({min(t), max(t)}).to(DType::i64).to_vector<int64_t>();
  return {v[0], v[1]};
}

inline void check_defined(const Tensor& t, const char* op, const char* name) {
  TANDEM_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  TANDEM_CHECK(a.device() == b.device(), op, ": expected all tensors on one device, got ",
               a.device(), " and ", b.device());
}

/// t, or, where t is a 0-dim CPU tensor and one of `others` lies on a GPU, t copied to that GPU:
/// libtorch takes such a tensor as a number beside a GPU operand. The copy is differentiable, so
/// t's gradient comes back to the CPU. Any other operand stays, and a mismatch is the op's error.
inline Tensor beside(const Tensor& t, std::initializer_list<const Tensor*> others) {
  if (!t.defined() || t.dim() != 0 || !t.device().is_cpu()) return t;
  for (const Tensor* o : others)
    if (o->defined() && !o->device().is_cpu()) return t.to(o->device());
  return t;
}

/// Whether an integer tensor's arithmetic holds scalar s exactly: a whole number in int64's
/// range. Any other (0.5, inf, NaN) makes an integer tensor's result f32, as torch's with a
/// Python float does; converting it to the integer type would truncate it.
inline bool whole_scalar(double s) { return fits_int64(s) && std::trunc(s) == s; }

/// a's dtype as it meets scalar s in add, mul, pow, fmod, where, clamp: torch's promotion of a
/// number beside a tensor. A floating tensor keeps its dtype; an integer or bool tensor meeting a
/// floating number (`2.0`, `0.5`) is f32, libtorch's default dtype; an integer number keeps an
/// integer tensor's dtype (`t * 2`) and makes a bool one's i64 (`mask + 1` counts); a bool number
/// keeps either.
inline DType scalar_dtype(const Tensor& a, const Scalar& s) {
  if (a.is_floating_point()) return a.dtype();
  if (s.isFloatingPoint()) return DType::f32;
  return a.dtype() == DType::boolean && !s.isBoolean() ? DType::i64 : a.dtype();
}
inline Tensor with_scalar(const Tensor& a, const Scalar& s) {
  if (!a.defined()) return a;
  const DType dt = scalar_dtype(a, s);
  return dt == a.dtype() ? a : a.to(dt);
}
/// s as a 0-dim operand beside a, in the dtype they promote to (on a's device).
inline Tensor scalar_operand(const Tensor& a, const Scalar& s) {
  return full({}, s.toDouble(), TensorOptions(scalar_dtype(a, s)).device(a.device()));
}

/// clamp's bounds (clamp and clamp_): whether one is a floating number (an integer tensor's
/// result is then f32), and whether one is NaN (every element is then NaN, as torch's).
inline bool floating_bound(const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  return (min && min->isFloatingPoint()) || (max && max->isFloatingPoint());
}
inline bool nan_bound(const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  return (min && std::isnan(min->toDouble())) || (max && std::isnan(max->toDouble()));
}

/// That `value` can fill a tensor of dtype dt, as torch's checked conversion of a scalar: an
/// integer dtype takes finite values within its range (u8 also whole ones down to -255, which
/// wrap, as torch's integer scalars do), f16 finite values up to its largest or an infinity.
inline void check_fill_value(double value, DType dt, const char* op) {
  bool fits = true;
  switch (dt) {
    case DType::i64: fits = fits_int64(value); break;
    case DType::i32: fits = value >= -2147483648.0 && value <= 2147483647.0; break;
    case DType::u8:
      fits = whole_scalar(value) ? value >= -255 && value <= 255 : value >= 0 && value <= 255;
      break;
    case DType::f16: fits = !(std::fabs(value) > 65504.0) || std::isinf(value); break;
    default: break;
  }
  TANDEM_CHECK(fits, op, ": the value ", value, " cannot be converted to ", dt,
               " without overflow");
}

/// That add's alpha keeps operands of dtypes a and b exact: a whole number unless the result is
/// floating (torch refuses the rest: an integer result would truncate it).
inline void check_alpha(double alpha, DType a, DType b, const char* op) {
  TANDEM_CHECK(whole_scalar(alpha) || is_floating(promote_types(a, b)), op,
               ": alpha must be a whole number for integer operands (", a, " and ", b, "), got ",
               alpha);
}

/// torch refuses subtraction with a bool operand and negation of one: a mask is inverted with
/// logical_not, two are compared with logical_xor.
inline void check_no_bool(const Tensor& t, const char* op) {
  TANDEM_CHECK(!t.defined() || t.dtype() != DType::boolean, op,
               ": subtraction and negation of a bool tensor are not supported; use logical_not "
               "(~) to invert a mask, logical_xor (^) to compare two");
}

/// torch runs floor, ceil, round, trunc and relu on integers but not on bool.
inline void check_not_bool_for(kernels::UnaryOp op, const Tensor& t, const char* name) {
  using kernels::UnaryOp;
  const bool refuses = op == UnaryOp::floor || op == UnaryOp::ceil || op == UnaryOp::round ||
                       op == UnaryOp::trunc || op == UnaryOp::relu;
  TANDEM_CHECK(!refuses || t.dtype() != DType::boolean, name, ": not implemented for bool");
}

/// addcdiv's division is true division: torch refuses two integer operands (it once divided
/// them as integers).
inline void check_addcdiv(const Tensor& t1, const Tensor& t2, const char* op) {
  TANDEM_CHECK(!t1.defined() || !t2.defined() || t1.is_floating_point() || t2.is_floating_point(),
               op, ": integer division of tensor1 (", t1.dtype(), ") by tensor2 (", t2.dtype(),
               ") is not supported; convert one of them to a floating dtype");
}

inline void check_floating(const Tensor& t, const char* op, const char* name = "input") {
  TANDEM_CHECK(t.is_floating_point(), op, ": expected a floating-point ", name,
               " (f32, f64, f16 or bf16), got dtype ", t.dtype());
}

/// Checks the defined tensors share one device. Which devices run an op is the kernels' affair:
/// a device without the kernel throws NotImplementedError from the stub.
inline void check_inputs(const std::vector<Tensor>& ts, const char* op) {
  const Tensor* first = nullptr;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (first) check_same_device(*first, t, op);
    first = &t;
  }
}

/// Checks that `t`, the op's `name` operand, broadcasts to `shape` without growing it.
inline void check_broadcasts_to(const Tensor& t, const Shape& shape, const char* op,
                                const char* name) {
  TANDEM_CHECK(broadcast_shapes(shape, t.shape(), op) == shape, op, ": a ", name, " of shape ",
               shape_str(t.shape()), " cannot be broadcast to ", shape_str(shape));
}

/// The dtype statistics and parameters are kept in for an input of dtype t: f32 for f16/bf16.
inline DType compute_dtype(DType t) { return is_reduced_float(t) ? DType::f32 : t; }

/// A kernel-only view of t broadcast to `shape` (stride 0 on expanded dims; no autograd).
inline Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  Shape strides(shape.size(), 0);
  size_t lead = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    strides[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return make_tensor(t.storage(), shape, strides, t.storage_offset(), t.dtype());
}

/// t converted to dtype without recording history (forward passes record their own node).
inline Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  NoGradGuard guard;
  return t.to(dtype);
}

/// The gradient for `input` from a gradient of the broadcast output shape.
inline Tensor reduce_grad(const Tensor& grad, const Tensor& input) {
  return sum_to(grad, input.shape()).to(input.dtype());
}

/// index_select, naming `op` in its errors (embedding).
Tensor index_select_as(const Tensor& self, int64_t dim, const Tensor& index, const char* op);
/// Tensor::index with a tensor index at `dim` of `view` (the basic indices applied): the slices
/// it names (idx's shape in place of that dim) or the elements its mask holds (its dims one).
Tensor index_by_tensor(const Tensor& view, int64_t dim, const Tensor& index);
/// Tensor indices, each at a dim of the view the basic indices left.
using TensorIndices = std::vector<std::pair<int64_t, Tensor>>;
/// The same with several, as torch's advanced indexing: they broadcast together, and their
/// broadcast shape takes the place of the dims they index (at the first of them where those
/// are adjacent, else in front).
Tensor index_by_tensors(const Tensor& view, const TensorIndices& indices);
/// Tensor::index_put_ with tensor indices: `values` (broadcast to what index_by_tensors would
/// return) written where they point, in place into view (and so into the tensor it views).
/// accumulate: added there instead, a repeated position adding each value.
void index_put_by_tensors(const Tensor& view, const TensorIndices& indices, const Tensor& values,
                          bool accumulate = false);
/// dst[.., index[..][j][..], ..] (+)= src[..][j][..] along dim, in place into dst (any layout;
/// no autograd): the scatter ops and Tensor::scatter_/scatter_add_ (src/ops/index_ops.cpp).
/// `when`: deferred only where dst is an output no one else holds yet (kernels::BoundsCheck).
void scatter_into(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src,
                  bool accumulate, const char* op,
                  kernels::BoundsCheck when = kernels::BoundsCheck::now);
/// Slice index[j] of dst along dim += alpha * source's slice j, in place: index_add and
/// Tensor::index_add_ (alpha a whole number for integer tensors).
void index_add_into(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& source,
                    double alpha, const char* op,
                    kernels::BoundsCheck when = kernels::BoundsCheck::now);

}  // namespace tandem::ops_detail
