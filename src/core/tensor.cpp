// Tensor's metadata and leaf-level autograd state. What computes (conversions, copies, math
// methods) lives with the ops (src/ops/tensor_methods.cpp); backward() with the engine.
#include "tandem/core/tensor.hpp"

#include <algorithm>
#include <vector>

namespace tandem {

namespace {
// That every element of a view lies in its storage: views made here and by user code alike.
void check_in_storage(const Storage& storage, const Shape& shape, const Shape& strides,
                      int64_t offset, DType dtype) {
  TANDEM_CHECK(shape.size() == strides.size(), "make_tensor: shape ", shape_str(shape), " and ",
               "strides ", shape_str(strides), " differ in length");
  for (size_t i = 0; i < shape.size(); ++i)
    TANDEM_CHECK(shape[i] >= 0, "make_tensor: negative size ", shape[i], " at dim ", i,
                 " of shape ", shape_str(shape));
  const int64_t esize = static_cast<int64_t>(element_size(dtype));
  if (checked_numel(shape, "make_tensor", esize) == 0) return;
  int64_t lo = offset, hi = offset;  // the first and last element reached
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t reach = 0;
    overflow = overflow || __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
    overflow =
        overflow || __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
  }
  int64_t end = 0;
  overflow =
      overflow || __builtin_add_overflow(hi, 1, &end) || __builtin_mul_overflow(end, esize, &end);
  TANDEM_CHECK_INDEX(!overflow && lo >= 0 && static_cast<uint64_t>(end) <= storage.nbytes(),
                     "make_tensor: a view of shape ", shape_str(shape), ", strides ",
                     shape_str(strides), " and offset ", offset, " reaches past its storage of ",
                     storage.nbytes(), " bytes (", esize, " bytes an element)");
}
}  // namespace

Tensor make_tensor(Storage storage, Shape shape, Shape strides, int64_t offset, DType dtype) {
  check_in_storage(storage, shape, strides, offset, dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_tensor(const Shape& shape, DType dtype, Device device) {
  for (size_t i = 0; i < shape.size(); ++i)
    TANDEM_CHECK(shape[i] >= 0, "empty: negative size ", shape[i], " at dim ", i, " of shape ",
                 shape_str(shape));
  const int64_t esize = static_cast<int64_t>(element_size(dtype));
  Storage storage(static_cast<size_t>(checked_numel(shape, "empty", esize) * esize), device);
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Shape channels_last_strides(const Shape& shape) {
  TANDEM_CHECK(shape.size() == 4, "channels-last: expected a 4-d (N, C, H, W) shape, got ",
               shape_str(shape));
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  return {h * w * c, 1, w * c, c};
}

Shape strides_of(const Shape& shape, MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? channels_last_strides(shape)
                                              : contiguous_strides(shape);
}

Tensor make_tensor(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  Tensor t = make_tensor(shape, dtype, device);
  if (format == MemoryFormat::Contiguous) return t;
  return make_tensor(t.storage(), shape, strides_of(shape, format), 0, dtype);
}

Shape infer_dense_strides(const Shape& shape, const std::vector<Shape>& operand_strides) {
  const size_t nd = shape.size();
  // 1 where dim d0 goes inside d1, -1 where outside, 0 where no operand says (torch's
  // should_swap, its sign turned).
  auto inside = [&](size_t d0, size_t d1) {
    for (const Shape& st : operand_strides) {
      if (st[d0] == 0 || st[d1] == 0) continue;
      if (st[d0] != st[d1]) return st[d0] < st[d1] ? 1 : -1;
      if (shape[d0] > shape[d1]) return -1;
    }
    return 0;
  };
  // Innermost first, sorted by insertion as torch sorts it (the comparison is not an order:
  // where it says nothing, the dims keep their places).
  std::vector<size_t> order(nd);
  for (size_t i = 0; i < nd; ++i) order[i] = nd - 1 - i;
  for (size_t i = 1; i < nd; ++i)
    for (size_t d1 = i, d0 = i; d0-- > 0;) {
      const int c = inside(order[d0], order[d1]);
      if (c > 0) break;
      if (c < 0) {
        std::swap(order[d0], order[d1]);
        d1 = d0;
      }
    }
  Shape strides(nd);
  int64_t next = 1;
  for (size_t d : order) {
    strides[d] = next;
    next *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

Tensor make_tensor_like(const Tensor& like, DType dtype, Device device) {
  Tensor t = make_tensor(like.shape(), dtype, device);
  if (like.is_contiguous() && like.suggest_memory_format() == MemoryFormat::Contiguous) return t;
  Shape strides = like.is_non_overlapping_and_dense()
                      ? like.strides()
                      : infer_dense_strides(like.shape(), {like.strides()});
  return make_tensor(t.storage(), like.shape(), std::move(strides), 0, dtype);
}

int64_t Tensor::size(int64_t dim) const {
  TANDEM_CHECK_INDEX(this->dim() > 0, "size: dim ", dim, " of a 0-dim tensor, which has none");
  return shape()[wrap_dim(dim, this->dim(), "size")];
}
int64_t Tensor::stride(int64_t dim) const {
  TANDEM_CHECK_INDEX(this->dim() > 0, "stride: dim ", dim, " of a 0-dim tensor, which has none");
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place, as torch's
  const auto& s = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

bool Tensor::has_internal_overlap() const {
  if (numel() == 0) return false;
  for (int64_t d = 0; d < dim(); ++d)
    if (shape()[d] > 1 && strides()[d] == 0) return true;
  return false;
}

bool Tensor::is_non_overlapping_and_dense() const {
  std::vector<size_t> dims;
  for (size_t d = 0; d < shape().size(); ++d)
    if (shape()[d] != 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(),
            [&](size_t a, size_t b) { return strides()[a] < strides()[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Contiguous) return is_contiguous();
  if (dim() != 4) return false;
  const Shape expected = channels_last_strides(shape());
  for (size_t i = 0; i < 4; ++i)
    if (shape()[i] != 1 && strides()[i] != expected[i]) return false;
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  // Where size-1 dims make both layouts hold (C = 1, or H = W = 1), the strides say which was
  // meant: a channels-last tensor keeps channels_last_strides exactly.
  const bool channels_last = is_contiguous(MemoryFormat::ChannelsLast) &&
                             (!is_contiguous() || strides() == channels_last_strides(shape()));
  return channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(storage().data()) + storage_offset() * element_size();
}

Tensor Tensor::grad() const { return checked()->grad ? Tensor(checked()->grad) : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    TANDEM_CHECK(grad.shape() == shape(), "set_grad: gradient of shape ", shape_str(grad.shape()),
                 " for a tensor of shape ", shape_str(shape()));
    // torch's "assigned grad has data of a different type" (or device).
    TANDEM_CHECK(grad.dtype() == dtype() && grad.device() == device(), "set_grad: gradient of ",
                 grad.dtype(), " on ", grad.device(), " for a tensor of ", dtype(), " on ",
                 device(), "; a gradient takes its tensor's dtype and device");
  }
  checked()->grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

Tensor Tensor::grad_buffer() const {
  return checked()->grad_buffer ? Tensor(checked()->grad_buffer) : Tensor();
}

void Tensor::set_grad_buffer(const Tensor& buffer) {
  TensorImpl* i = checked();
  if (buffer.defined()) {
    TANDEM_CHECK(is_leaf() && requires_grad(),
                 "set_grad_buffer: only leaf tensors that require grad accumulate gradients");
    TANDEM_CHECK(buffer.shape() == shape() && buffer.dtype() == dtype() &&
                     buffer.device() == device(),
                 "set_grad_buffer: the buffer must match the tensor: expected shape ",
                 shape_str(shape()), ", ", dtype(), " on ", device(), ", got shape ",
                 shape_str(buffer.shape()), ", ", buffer.dtype(), " on ", buffer.device());
    TANDEM_CHECK(!buffer.has_internal_overlap(),
                 "set_grad_buffer: more than one element of the "
                 "buffer shares a memory location (an expanded view), so gradients would be "
                 "added into one place several times");
  }
  i->grad_buffer = buffer.defined() ? buffer.impl_ptr() : nullptr;
  // A gradient held elsewhere is dropped: the next backward writes into the buffer.
  if (i->grad && i->grad != i->grad_buffer) i->grad = nullptr;
}

Tensor Tensor::detach() const {
  const TensorImpl* i = checked();
  return make_tensor(i->storage, i->shape, i->strides, i->offset, i->dtype);
}

Tensor& Tensor::detach_() {
  TensorImpl* i = checked();
  TANDEM_CHECK(!i->is_view,
               "detach_: can't detach a view in place (it shares its base's history); use "
               "detach() instead");
  i->grad_fn.reset();
  i->grad_accumulator.reset();
  i->requires_grad = false;
  i->retains_grad = false;
  return *this;
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) const {
  TANDEM_CHECK(is_leaf() && requires_grad(),
               "register_grad_ready_hook: only leaf tensors that require grad get ready hooks");
  checked()->ready_hooks.push_back(std::move(hook));
}

}  // namespace tandem
