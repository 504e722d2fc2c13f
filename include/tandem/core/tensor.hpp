// Tensor: a cheap, shared handle on (storage, shape, strides, offset, dtype, device) plus the
// autograd metadata. Copying a Tensor copies the handle, never the data, as in libtorch.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tandem/core/accessor.hpp"
#include "tandem/core/arg.hpp"
#include "tandem/core/device.hpp"
#include "tandem/core/dtype.hpp"
#include "tandem/core/indexing.hpp"
#include "tandem/core/scalar.hpp"
#include "tandem/core/shape.hpp"
#include "tandem/core/storage.hpp"

namespace tandem {

namespace autograd {
class Node;
}
class Generator;
class Tensor;
class GradRef;

/// The dtype, device and requires_grad of a new tensor. Converts from a DType or a Device, so
/// `zeros({2, 3}, DType::f64)` and `zeros({2, 3}, Device("cuda:0"))` both read naturally.
struct TensorOptions {
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}   // NOLINT(google-explicit-constructor)
  TensorOptions(Device d) : device_(d) {}  // NOLINT(google-explicit-constructor)
  TensorOptions(DeviceType t) : device_(Device(t)) {}  // NOLINT(google-explicit-constructor)
  // Setters return a changed copy (a value type, as c10::TensorOptions).
  [[nodiscard]] TensorOptions dtype(DType t) const {
    auto copy = *this;
    copy.dtype_ = t;
    return copy;
  }
  /// The dtype asked for, else f32. The factories whose default is another (arange, randint
  /// and tensor of integers: i64) ask has_dtype(), so `arange(10, kCUDA)` stays i64 as torch's.
  DType dtype() const { return dtype_.value_or(DType::f32); }
  bool has_dtype() const { return dtype_.has_value(); }
  TANDEM_VALUE_ARG(bool, requires_grad) = false;
  [[nodiscard]] TensorOptions device(Device d) const {
    auto copy = *this;
    copy.device_ = d;
    return copy;
  }
  /// The device asked for; without one, the current execution context's device (so a rank
  /// running on cuda:1 creates its tensors there), never an implicit CPU.
  Device device() const;
  std::optional<DType> dtype_;
  std::optional<Device> device_;
};

/// libtorch's option factories: `zeros({2}, dtype(kF64).requires_grad(true))`,
/// `ones({2, 2}, requires_grad())`, `randn({3}, device(kCUDA))`.
inline TensorOptions dtype(DType t) { return TensorOptions(t); }
inline TensorOptions device(Device d) { return TensorOptions(d); }
inline TensorOptions requires_grad(bool requires_grad = true) {
  return TensorOptions().requires_grad(requires_grad);
}

/// Called with a leaf's gradient once it is complete for the current backward pass.
using GradReadyHook = std::function<void(const Tensor& grad)>;

/// Called with the gradient arriving at a tensor (Tensor::register_hook); returns the gradient
/// to go on with, or an undefined tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;
/// A tensor's register_hook hooks, in the order registered, each with its handle.
struct GradHooks {
  std::vector<std::pair<unsigned, GradHook>> hooks;
  unsigned next_handle = 0;
};

/// What a Tensor handle points to. Users go through Tensor; ops and autograd read this.
struct TensorImpl {
  Storage storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  // Autograd metadata.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<TensorImpl> grad_buffer;  // leaves: where backward writes .grad, if given
  std::shared_ptr<autograd::Node> grad_fn;         // set on non-leaf results of recorded ops
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that accumulates .grad
  std::vector<GradReadyHook> ready_hooks;
  GradHooks grad_hooks;  // leaves: run before .grad accumulates (a non-leaf's are its grad_fn's)
  bool retains_grad = false;
  bool is_view = false;  // made by a view op (slice, select, view, transpose, expand, ...)
  // A view's base: the tensor whose memory it views (the first of a chain of views). An
  // in-place op in the graph on a view gives the base a new history (torch's CopySlices), and
  // an in-place op on a base gives it one too; either way history_version counts up. A view
  // keeps the base's count from when its own history was set, and while the two differ its
  // history is stale: autograd takes a new one from the base (gradient_edge), as torch
  // regenerates a view's grad_fn.
  std::shared_ptr<TensorImpl> view_base;
  uint32_t history_version = 0;
  bool history_stale() const { return view_base && history_version != view_base->history_version; }
};

/// How the elements of a 4-d (N, C, H, W) tensor lie in memory: row-major (Contiguous), or
/// channels innermost (ChannelsLast: strides (H W C, 1, W C, C), "NHWC"), the layout in which
/// cuDNN runs f16/bf16 convolutions on tensor cores without transposing. A tensor keeps its
/// (N, C, H, W) shape either way; only its strides differ. As in PyTorch, ops on a channels-last
/// input give channels-last results (elementwise ops, convolution, batch norm, pooling), so
/// converting the input once is enough: `x.contiguous(MemoryFormat::ChannelsLast)`.
enum class MemoryFormat { Contiguous, ChannelsLast };

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  ~Tensor() = default;
  /// Assigning to a named tensor rebinds the handle; assigning to a temporary (a view such as
  /// `t[1]` or `t.index({...})`) writes the values into it, as libtorch's: `t[1] = 5`,
  /// `m[0] = row` (copy_, broadcast; recorded in the graph, as libtorch's `h[t] = step(...)`).
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;
  Tensor& operator=(const Tensor& values) && { return copy_(values); }
  Tensor& operator=(double value) && { return fill_(value); }

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // --- metadata --------------------------------------------------------------------------
  const Shape& shape() const { return checked()->shape; }
  /// libtorch's name for shape(), printable (`std::cout << x.sizes()`) and with `vec()`.
  Sizes sizes() const { return Sizes(shape()); }
  const Shape& strides() const { return checked()->strides; }
  /// Size of one dim; negative dims count from the end.
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return numel_of(shape()); }
  DType dtype() const { return checked()->dtype; }
  DType scalar_type() const { return dtype(); }
  /// Its dtype and device, for factories: `zeros({3}, x.options())`.
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  Device device() const { return checked()->storage.device(); }
  int64_t storage_offset() const { return checked()->offset; }
  const Storage& storage() const { return checked()->storage; }
  int64_t element_size() const { return tandem::element_size(dtype()); }
  bool is_contiguous() const;
  /// Whether two elements share one memory location: a dim of size > 1 with stride 0, as expand
  /// makes (no other view makes one). In-place writes refuse such a tensor, as torch's do.
  bool has_internal_overlap() const;
  /// Whether the elements lie densely in `format`'s order (size-1 dims' strides ignored).
  bool is_contiguous(MemoryFormat format) const;
  /// Whether the elements fill a block of memory once each, in some order of the dims (size-1
  /// dims' strides ignored): a permutation of a contiguous tensor, as torch's.
  bool is_non_overlapping_and_dense() const;
  /// ChannelsLast for a 4-d tensor laid out channels-last (where size-1 dims make it row-major
  /// too, as when C = 1: when its strides are channels_last_strides exactly), else Contiguous:
  /// the layout ops give their results for this input.
  MemoryFormat suggest_memory_format() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }

  // --- data access -----------------------------------------------------------------------
  /// Pointer to the first element; throws when T does not match dtype().
  template <typename T>
  T* data_ptr() const {
    TANDEM_CHECK(dtype() == dtype_of<T>::value, "data_ptr: tensor has dtype ", dtype(),
                 " but data_ptr<", dtype_name(dtype_of<T>::value), "> was asked for");
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  /// libtorch's untyped form: the first element's address, whatever the dtype.
  void* data_ptr() const { return raw_data(); }
  /// libtorch's `t.accessor<float, 2>()`: `a[i][j]` reads and writes element (i, j) of this
  /// CPU tensor through its strides. Checks the device, dtype and number of dims.
  template <typename T, size_t N>
  TensorAccessor<T, N> accessor() const& {
    static_assert(N > 0, "accessor: a 0-dim tensor has no dims to index; use item()");
    TANDEM_CHECK(is_cpu(), "accessor: the tensor is on ", device(),
                 "; accessors read host memory (use .cpu() first)");
    TANDEM_CHECK(dim() == static_cast<int64_t>(N), "accessor: the tensor has ", dim(),
                 " dims, accessor<T, ", N, "> expects ", N);
    return TensorAccessor<T, N>(data_ptr<T>(), checked()->shape.data(), checked()->strides.data());
  }
  template <typename T, size_t N>
  TensorAccessor<T, N> accessor() && = delete;  // would point into a tensor about to go
  /// The single element of a one-element tensor, converted to T (CPU or CUDA).
  template <typename T>
  T item() const;
  /// The single element as a Scalar (integral for integer and bool tensors), as libtorch's.
  Scalar item() const;
  /// Every element, converted to T, in row-major order.
  template <typename T>
  std::vector<T> to_vector() const;

  // --- conversions -----------------------------------------------------------------------
  /// A copy in `dtype` laid out as this tensor (torch's preserve_format: make_tensor_like), or
  /// this tensor where it has that dtype.
  Tensor to(DType dtype) const;
  /// A copy on `device` (this tensor when already there). non_blocking: a copy from pinned host
  /// memory to a GPU is queued on the device's stream and returns at once (the data loader's
  /// staging buffers are pinned); every other copy is synchronous, as in PyTorch. The copy is
  /// laid out as this tensor (a channels-last or transposed one arrives so; preserve_format).
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(Device device, DType dtype) const;
  /// libtorch's forms with non_blocking and copy (a copy even where nothing changes).
  Tensor to(DType dtype, bool non_blocking, bool copy = false) const;
  Tensor to(Device device, DType dtype, bool non_blocking, bool copy = false) const;
  Tensor to(DeviceType type, bool non_blocking = false) const {
    return to(Device(type), non_blocking);
  }
  /// To the options' device and dtype, each where the options name one.
  Tensor to(const TensorOptions& options, bool non_blocking = false, bool copy = false) const;
  /// A copy (differentiable) laid out as this tensor (torch's preserve_format).
  Tensor clone() const;
  Tensor contiguous() const;
  /// This tensor when its suggest_memory_format() already is `format` (or, for Contiguous,
  /// when is_contiguous()), else a copy laid out so (differentiable).
  Tensor contiguous(MemoryFormat format) const;
  Tensor cpu() const { return to(kCPU); }
  /// A copy on the calling thread's current GPU (cuda:0 unless set_device changed it).
  Tensor cuda() const;
  /// A copy in page-locked host memory (this tensor when it is there already), from which
  /// `to(gpu, /*non_blocking=*/true)` is queued without the host waiting; plain host memory
  /// where no GPU is present. CPU tensors only.
  Tensor pin_memory() const;
  /// Whether this tensor lies in page-locked host memory (pin_memory's, the loader's staging).
  bool is_pinned() const;
  /// libtorch's other conversions: to other's device and dtype, to other's dtype (`type_as`),
  /// to a dtype (`toType`).
  Tensor to(const Tensor& other, bool non_blocking = false) const;
  Tensor type_as(const Tensor& other) const { return to(other.dtype()); }
  Tensor toType(DType dtype) const { return to(dtype); }
  /// New tensors of this one's dtype and device, unless `options` names others.
  Tensor new_empty(const Shape& shape, TensorOptions options = {}) const;
  Tensor new_zeros(const Shape& shape, TensorOptions options = {}) const;
  Tensor new_ones(const Shape& shape, TensorOptions options = {}) const;
  Tensor new_full(const Shape& shape, Scalar value, TensorOptions options = {}) const;
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor new_zeros(I size, TensorOptions options = {}) const {
    return new_zeros(Shape{static_cast<int64_t>(size)}, options);
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor new_ones(I size, TensorOptions options = {}) const {
    return new_ones(Shape{static_cast<int64_t>(size)}, options);
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor new_empty(I size, TensorOptions options = {}) const {
    return new_empty(Shape{static_cast<int64_t>(size)}, options);
  }
  /// libtorch's `data()`: this tensor's data without its history, as detach().
  Tensor data() const { return detach(); }

  // --- views (share storage; differentiable) -------------------------------------------
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  /// libtorch's one-number sizes: `x.view(-1)`, `x.reshape(-1)`, `x.repeat(2)`, `x.flip(0)`.
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor view(I size) const {
    return view(Shape{static_cast<int64_t>(size)});
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor reshape(I size) const {
    return reshape(Shape{static_cast<int64_t>(size)});
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor repeat(I times) const {
    return repeat(Shape{static_cast<int64_t>(times)});
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor flip(I dim) const {
    return flip(Shape{static_cast<int64_t>(dim)});
  }
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const { return transpose(0, 1); }
  /// libtorch's slice: start and end default to the dim's ends (`x.slice(1, 2)` from 2 on).
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  /// libtorch's `t[i]`: select(0, i), a view.
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor expand(I size) const {
    return expand(Shape{static_cast<int64_t>(size)});
  }
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor view_as(const Tensor& other) const { return view(other.shape()); }
  Tensor reshape_as(const Tensor& other) const { return reshape(other.shape()); }
  /// Pieces along dim (ops/shape_ops.hpp): views.
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const std::vector<int64_t>& split_sizes,
                                       int64_t dim = 0) const;
  /// Pieces of these sizes (libtorch's split with a list).
  std::vector<Tensor> split(const Shape& split_sizes, int64_t dim = 0) const {
    return split_with_sizes(split_sizes, dim);
  }
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  /// Copies: tiled `repeats` times, or reversed along dims.
  Tensor repeat(const Shape& repeats) const;
  Tensor flip(const Shape& dims) const;
  /// libtorch's indexing with integers, slices, None and "..." (core/indexing.hpp): a view,
  /// differentiable as the select/slice/unsqueeze it is made of.
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  /// Writes `value` (broadcast) or a number into the indexed view, in place (recorded in the
  /// graph, as libtorch's). Returns *this.
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);
  /// accumulate: `value` is added where the indices point, each repeated index adding again
  /// (libtorch's index_put_(indices, values, true)).
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value,
                     bool accumulate);
  /// A copy with index_put_ applied (differentiable in both, as torch's index_put).
  Tensor index_put(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value,
                   bool accumulate = false) const;

  // --- common math as methods --------------------------------------------------------------
  // (the functional API's ops under libtorch's method names; `x.sum(1)` is `x.sum({1})`)
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  /// (A template, so that `x.sum({})`, all dims, never converts `{}` to dim 0.)
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor sum(I dim, bool keepdim = false) const {
    return sum(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  /// The same computed in `dtype` (the input converted first), as libtorch's dtype argument.
  Tensor sum(DType dtype) const;
  Tensor sum(const Shape& dims, bool keepdim, DType dtype) const;
  Tensor mean(DType dtype) const;
  Tensor mean(const Shape& dims, bool keepdim, DType dtype) const;
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor sum(I dim, bool keepdim, DType dtype) const {
    return sum(Shape{static_cast<int64_t>(dim)}, keepdim, dtype);
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor mean(I dim, bool keepdim, DType dtype) const {
    return mean(Shape{static_cast<int64_t>(dim)}, keepdim, dtype);
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor mean(I dim, bool keepdim = false) const {
    return mean(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  /// Bessel-corrected (unbiased) by default, as torch.
  Tensor var(const Shape& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor std(const Shape& dims = {}, bool unbiased = true, bool keepdim = false) const;
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor var(I dim, bool unbiased = true, bool keepdim = false) const {
    return var(Shape{static_cast<int64_t>(dim)}, unbiased, keepdim);
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor std(I dim, bool unbiased = true, bool keepdim = false) const {
    return std(Shape{static_cast<int64_t>(dim)}, unbiased, keepdim);
  }
  /// libtorch's var(unbiased) and std(unbiased): over all elements.
  template <typename B, typename = std::enable_if_t<std::is_same_v<B, bool>>>
  Tensor var(B unbiased) const {
    return var(Shape{}, unbiased);
  }
  template <typename B, typename = std::enable_if_t<std::is_same_v<B, bool>>>
  Tensor std(B unbiased) const {
    return std(Shape{}, unbiased);
  }
  Tensor max() const;
  Tensor min() const;
  /// Largest (smallest) values over dims, as amax/amin.
  Tensor amax(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amin(const Shape& dims = {}, bool keepdim = false) const;
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor amax(I dim, bool keepdim = false) const {
    return amax(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor amin(I dim, bool keepdim = false) const {
    return amin(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  /// Whether other has this shape and these values (torch::equal).
  bool equal(const Tensor& other) const;
  /// The 2-norm of all elements.
  Tensor norm() const;
  /// The p-norm of all elements, or along `dims` (p = 0: nonzero count, inf: largest |x|).
  Tensor norm(double p) const;
  Tensor norm(double p, const Shape& dims, bool keepdim = false) const;
  /// (A template, so that `x.norm(2, {})`, all dims, never converts `{}` to dim 0.)
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor norm(double p, I dim, bool keepdim = false) const {
    return norm(p, Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  /// Whether every (any) element is nonzero, as a bool tensor; along dim.
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;
  /// (values, indices) along dim.
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  /// Index into the flattened tensor of its largest (smallest) element.
  Tensor argmax() const;
  Tensor argmin() const;
  /// Elementwise maximum (minimum) with other, as libtorch's `a.max(b)`.
  Tensor max(const Tensor& other) const;
  Tensor min(const Tensor& other) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor log1p() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor sign() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor square() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  /// Computed in `dtype` (the input converted first).
  Tensor softmax(int64_t dim, DType dtype) const { return to(dtype).softmax(dim); }
  Tensor log_softmax(int64_t dim, DType dtype) const { return to(dtype).log_softmax(dim); }
  Tensor expm1() const;
  Tensor tan() const;
  Tensor atan() const;
  Tensor erf() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor reciprocal() const;
  Tensor trunc() const;
  Tensor atan2(const Tensor& other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(Scalar other) const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(Scalar other) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  /// Shape ops of libtorch's (ops/shape_ops.hpp).
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor movedim(const Shape& source, const Shape& destination) const;
  Tensor movedim(int64_t source, int64_t destination) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor diag(int64_t diagonal = 0) const;
  Tensor roll(const Shape& shifts, const Shape& dims = {}) const;
  Tensor tile(const Shape& reps) const;
  /// One integer where libtorch takes a list.
  Tensor roll(int64_t shift, int64_t dim) const { return roll(Shape{shift}, Shape{dim}); }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor roll(I shift) const {
    return roll(Shape{static_cast<int64_t>(shift)});
  }
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor tile(I reps) const {
    return tile(Shape{static_cast<int64_t>(reps)});
  }
  /// Rotated by 90 degrees k times in the plane of dims (rot90).
  Tensor rot90(int64_t k = 1, const Shape& dims = {0, 1}) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;
  /// Reductions and products of libtorch's (ops/reduction.hpp, ops/linalg.hpp).
  Tensor median() const;
  std::pair<Tensor, Tensor> median(int64_t dim, bool keepdim = false) const;
  std::pair<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  Tensor trace() const;
  /// Factorizations of libtorch's (ops/linalg.hpp, computed on the host).
  Tensor inverse() const;
  Tensor det() const;
  Tensor logdet() const;
  std::tuple<Tensor, Tensor> slogdet() const;
  Tensor cholesky(bool upper = false) const;
  Tensor cholesky_solve(const Tensor& factor, bool upper = false) const;
  Tensor cholesky_inverse(bool upper = false) const;
  Tensor matrix_power(int64_t n) const;
  Tensor cross(const Tensor& other, std::optional<int64_t> dim = std::nullopt) const;
  Tensor baddbmm(const Tensor& batch1, const Tensor& batch2, double beta = 1.0,
                 double alpha = 1.0) const;
  Tensor clip(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor logit(std::optional<double> eps = std::nullopt) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor cumprod(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor prod(std::optional<DType> dtype = std::nullopt) const;
  Tensor diff(int64_t n = 1, int64_t dim = -1, const Tensor& prepend = {},
              const Tensor& append = {}) const;
  std::pair<Tensor, Tensor> cummax(int64_t dim) const;
  std::pair<Tensor, Tensor> cummin(int64_t dim) const;
  Tensor nansum(const Shape& dims = {}, bool keepdim = false,
                std::optional<DType> dtype = std::nullopt) const;
  Tensor nanmean(const Shape& dims = {}, bool keepdim = false,
                 std::optional<DType> dtype = std::nullopt) const;
  Tensor quantile(const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                  const std::string& interpolation = "linear") const;
  Tensor quantile(double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                  const std::string& interpolation = "linear") const;
  Tensor nanquantile(const Tensor& q, std::optional<int64_t> dim = std::nullopt,
                     bool keepdim = false, const std::string& interpolation = "linear") const;
  Tensor nanquantile(double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                     const std::string& interpolation = "linear") const;
  Tensor prod(int64_t dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;
  template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
  Tensor logsumexp(I dim, bool keepdim = false) const {
    return logsumexp(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                 bool sorted = true) const;
  std::pair<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  /// The elements where mask (broadcast with this tensor) is true, as one dim.
  Tensor masked_select(const Tensor& mask) const;
  /// The positions of the nonzero elements, (count, dim()) i64.
  Tensor nonzero() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor clamp_min(Scalar min) const { return clamp(min, std::nullopt); }
  Tensor clamp_max(Scalar max) const { return clamp(std::nullopt, max); }
  Tensor pow(Scalar exponent) const;
  Tensor pow(const Tensor& exponent) const;
  /// Bounds given as tensors (broadcast), as libtorch's clamp(Tensor, Tensor).
  Tensor clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max = {}) const;
  Tensor clamp_min(const Tensor& min) const { return clamp(min, std::nullopt); }
  Tensor clamp_max(const Tensor& max) const { return clamp(std::nullopt, max); }
  /// The functional API's lerp, addcmul, addcdiv, maximum, minimum and where as methods.
  Tensor lerp(const Tensor& end, double weight) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;
  Tensor addcmul(const Tensor& t1, const Tensor& t2, double value = 1.0) const;
  Tensor addcdiv(const Tensor& t1, const Tensor& t2, double value = 1.0) const;
  Tensor nan_to_num(std::optional<double> nan = std::nullopt,
                    std::optional<double> posinf = std::nullopt,
                    std::optional<double> neginf = std::nullopt) const;
  Tensor& nan_to_num_(std::optional<double> nan = std::nullopt,
                      std::optional<double> posinf = std::nullopt,
                      std::optional<double> neginf = std::nullopt);
  /// The elementwise functions of tandem::asin, ... (ops/elementwise.hpp) as methods.
  Tensor asin() const;
  Tensor acos() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor atanh() const;
  Tensor erfinv() const;
  Tensor& erfinv_();
  Tensor logaddexp(const Tensor& other) const;
  Tensor xlogy(const Tensor& other) const;
  /// The counting and index helpers of ops/reduction.hpp and ops/index_ops.hpp as methods.
  Tensor count_nonzero(const Shape& dims = {}) const;
  Tensor bincount(const Tensor& weights = {}, int64_t minlength = 0) const;
  Tensor take_along_dim(const Tensor& indices, std::optional<int64_t> dim = std::nullopt) const;
  Tensor index_fill(int64_t dim, const Tensor& index, Scalar value) const;
  Tensor index_fill(int64_t dim, const Tensor& index, const Tensor& value) const;
  Tensor& index_fill_(int64_t dim, const Tensor& index, Scalar value);
  Tensor& index_fill_(int64_t dim, const Tensor& index, const Tensor& value);
  Tensor index_copy(int64_t dim, const Tensor& index, const Tensor& source) const;
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source);
  Tensor masked_scatter(const Tensor& mask, const Tensor& source) const;
  Tensor& masked_scatter_(const Tensor& mask, const Tensor& source);
  Tensor scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src,
                        const std::string& reduce, bool include_self = true) const;
  Tensor& scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src,
                          const std::string& reduce, bool include_self = true);
  /// The main diagonal (of a 2-d tensor, or of one whose dims are all of one size) set to
  /// value; wrap restarts it every cols + 1 rows of a tall matrix (torch's fill_diagonal_).
  Tensor& fill_diagonal_(Scalar value, bool wrap = false);
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  /// This tensor where `cond` is true, `other` elsewhere.
  Tensor where(const Tensor& cond, const Tensor& other) const;
  Tensor add(const Tensor& other, double alpha = 1.0) const;
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other, double alpha = 1.0) const;
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  /// Rounded division ("floor", "trunc"; none: true division), as tandem::div.
  Tensor div(const Tensor& other, std::optional<std::string_view> rounding_mode) const;
  Tensor div(Scalar other, std::optional<std::string_view> rounding_mode) const;
  Tensor floor_divide(const Tensor& other) const;
  Tensor floor_divide(Scalar other) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  /// Products of libtorch's (ops/linalg.hpp).
  Tensor bmm(const Tensor& other) const;
  Tensor dot(const Tensor& other) const;
  Tensor mv(const Tensor& vec) const;
  Tensor outer(const Tensor& other) const;
  Tensor addmm(const Tensor& mat1, const Tensor& mat2, double beta = 1.0, double alpha = 1.0) const;
  /// Comparisons (bool results, no gradient); a number compares in this tensor's dtype, or in
  /// f64 when it is not a whole number and this tensor is an integer one.
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;
  /// Bool results from the truth (nonzero) of the elements (ops/elementwise.hpp).
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_xor(const Tensor& other) const;
  Tensor logical_not() const;
  /// Integer and bool tensors only.
  Tensor bitwise_and(const Tensor& other) const;
  Tensor bitwise_or(const Tensor& other) const;
  Tensor bitwise_xor(const Tensor& other) const;
  Tensor bitwise_not() const;
  /// `value` where `mask` (bool, broadcast to this shape) is true, this tensor elsewhere.
  Tensor masked_fill(const Tensor& mask, double value) const;
  /// The same with a 0-dim `value` tensor (differentiable in it: the sum of the masked
  /// positions' gradients).
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  /// Bool tensors: where an element is finite; where it is within atol + rtol |other| of other's
  /// (NaNs equal when equal_nan). allclose: whether all are.
  Tensor isfinite() const;
  Tensor isclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8,
                 bool equal_nan = false) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8) const;
  /// Indexing by tensors of indices along one dim (ops/index_ops.hpp).
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source,
                   double alpha = 1.0) const;

  // --- in place --------------------------------------------------------------------------
  // With grad mode on, the in-place ops are recorded on a tensor in the graph (an activation,
  // or a tensor meeting an operand that requires grad), as libtorch's, views of it included
  // (the base takes torch's CopySlices history); a leaf that requires grad and a view of one
  // are refused, as libtorch refuses them. uniform_ and normal_ record nothing and refuse a
  // tensor that requires grad.
  Tensor& zero_();
  Tensor& fill_(double value);
  /// Copies `src` (broadcast, converted) into this tensor's elements.
  Tensor& copy_(const Tensor& src);
  /// libtorch's form: the copy is synchronous here whatever non_blocking says.
  Tensor& copy_(const Tensor& src, bool /*non_blocking*/) { return copy_(src); }
  /// this += alpha * other
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  /// this += value
  Tensor& add_(Scalar value);
  Tensor& mul_(Scalar value);
  Tensor& mul_(const Tensor& other);
  /// Clamps in place (WGAN's weight clipping: `p.clamp_(-0.01, 0.01)` under NoGradGuard).
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& clamp_min_(Scalar min) { return clamp_(min, std::nullopt); }
  Tensor& clamp_max_(Scalar max) { return clamp_(std::nullopt, max); }
  /// Writes `value` where mask (bool, broadcast to this shape) is true.
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);
  /// this += value * t1 * t2; this += value * t1 / t2; this += weight * (end - this): the
  /// updates hand-written optimizers and moving averages make.
  Tensor& addcmul_(const Tensor& t1, const Tensor& t2, double value = 1.0);
  Tensor& addcdiv_(const Tensor& t1, const Tensor& t2, double value = 1.0);
  Tensor& lerp_(const Tensor& end, double weight);
  /// this -= alpha * other
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(Scalar value);
  Tensor& div_(Scalar value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Tensor& other, std::optional<std::string_view> rounding_mode);
  Tensor& div_(Scalar other, std::optional<std::string_view> rounding_mode);
  Tensor& floor_divide_(const Tensor& other);
  Tensor& floor_divide_(Scalar other);
  /// libtorch's in-place math, each op's own kernel writing into this tensor (floating ones;
  /// recorded in a graph for relu_, sigmoid_, tanh_, exp_, log_, log1p_, expm1_, sqrt_, rsqrt_,
  /// sin_, cos_, neg_, abs_, reciprocal_; the others are refused there).
  Tensor& relu_();
  Tensor& sigmoid_();
  Tensor& tanh_();
  Tensor& exp_();
  /// View changes in place, as libtorch's: this tensor (every handle to it) takes the view's
  /// shape and strides; its data stays where it is. Refused on a tensor that requires grad,
  /// whose history and gradient have the old shape.
  Tensor& unsqueeze_(int64_t dim);
  Tensor& squeeze_();
  Tensor& squeeze_(int64_t dim);
  Tensor& t_();
  Tensor& transpose_(int64_t dim0, int64_t dim1);
  Tensor& log_();
  Tensor& log1p_();
  Tensor& sqrt_();
  Tensor& rsqrt_();
  Tensor& sin_();
  Tensor& cos_();
  Tensor& floor_();
  Tensor& ceil_();
  Tensor& round_();
  Tensor& pow_(Scalar exponent);
  Tensor& expm1_();
  Tensor& tan_();
  Tensor& atan_();
  Tensor& erf_();
  Tensor& log2_();
  Tensor& log10_();
  Tensor& reciprocal_();
  Tensor& trunc_();
  /// And those that also run on integers.
  Tensor& neg_();
  Tensor& abs_();
  Tensor& sign_();
  // The same as operators, in place (libtorch's members).
  Tensor& operator+=(const Tensor& other) { return add_(other); }
  Tensor& operator+=(Scalar value) { return add_(value); }
  Tensor& operator-=(const Tensor& other) { return sub_(other); }
  Tensor& operator-=(Scalar value) { return sub_(value); }
  Tensor& operator*=(const Tensor& other) { return mul_(other); }
  Tensor& operator*=(Scalar value) { return mul_(value); }
  Tensor& operator/=(const Tensor& other) { return div_(other); }
  Tensor& operator/=(Scalar value) { return div_(value); }
  /// Fills with values uniform in [from, to), or normal (mean, std), from `gen` or the default
  /// generator (the same numbers rand/randn would give).
  Tensor& uniform_(double from = 0.0, double to = 1.0, Generator* gen = nullptr);
  Tensor& normal_(double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
  /// libtorch's other in-place samplers, from the same uniform and normal draws: 1 with
  /// probability p (a number, or a tensor broadcast to this one's shape) else 0; exponential
  /// (-log(1 - u) / lambd); geometric (the number of trials to the first success, >= 1);
  /// log-normal (exp of normal(mean, std)); Cauchy (median + sigma tan(pi (u - 1/2))); integers
  /// uniform in [from, to) (random_(to): [0, to); without `to`, up to the largest integer the
  /// dtype holds exactly: 2^24 for f32, 2^53 for f64, 2^11 for f16, 2^8 for bf16, the integer
  /// types' maximum, as torch's; i64's last value, 2^63 - 1, is never drawn). Floating tensors
  /// only, except bernoulli_, geometric_ and random_, which take any dtype.
  Tensor& bernoulli_(double p = 0.5, Generator* gen = nullptr);
  Tensor& bernoulli_(const Tensor& p, Generator* gen = nullptr);
  Tensor& exponential_(double lambd = 1.0, Generator* gen = nullptr);
  Tensor& geometric_(double p, Generator* gen = nullptr);
  Tensor& log_normal_(double mean = 1.0, double std = 2.0, Generator* gen = nullptr);
  Tensor& cauchy_(double median = 0.0, double sigma = 1.0, Generator* gen = nullptr);
  Tensor& random_(int64_t from, std::optional<int64_t> to, Generator* gen = nullptr);
  Tensor& random_(int64_t to, Generator* gen = nullptr);
  Tensor& random_(Generator* gen = nullptr);
  /// The index ops above, writing into this tensor (a bad index throws and writes nothing).
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t dim, const Tensor& index, double value);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);

  // --- autograd --------------------------------------------------------------------------
  bool requires_grad() const {
    const TensorImpl* i = checked();
    // A view whose base joined the graph since (an in-place op with an operand that requires
    // grad through the base or another view) requires grad too.
    return i->requires_grad || (i->history_stale() && i->view_base->requires_grad);
  }
  /// Makes a leaf tensor track gradients (floating dtypes only). Returns *this.
  Tensor& set_requires_grad(bool requires_grad = true);
  Tensor requires_grad_(bool requires_grad = true) { return set_requires_grad(requires_grad); }
  /// The accumulated gradient (undefined until a backward pass reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  /// libtorch's mutable_grad(): the gradient as a handle that assignment replaces
  /// (`p.mutable_grad() = torch::zeros_like(p)`), `reset()` drops, and in-place ops change.
  GradRef mutable_grad() const;
  /// Makes backward write this leaf's gradient into `buffer` (same shape, dtype and device; a
  /// view into a larger buffer is fine): the first contribution is copied in, later ones are
  /// added in place, and grad() then returns the buffer. Data parallelism hands each parameter
  /// a view into its bucket this way: no copy in, no copy out. Undefined: back to fresh tensors.
  void set_grad_buffer(const Tensor& buffer);
  Tensor grad_buffer() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked()->grad_fn; }
  bool is_leaf() const { return !grad_fn(); }
  /// Backpropagates from this tensor. A non-scalar needs `gradient` of the same shape.
  /// retain_graph keeps the graph for another backward (by default: when create_graph);
  /// create_graph records the backward pass itself, so the gradients it leaves in .grad can be
  /// differentiated again (see autograd::grad).
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  /// A tensor sharing this one's data with no history.
  Tensor detach() const;
  /// Makes this tensor (every handle to it) a leaf without history that requires no grad. A view
  /// is refused, as torch's (its history is its base's): detach() it instead.
  Tensor& detach_();
  /// Whether a view op made this tensor from another's data (libtorch's is_view).
  bool is_view() const { return checked()->is_view; }
  /// Adds a hook the autograd engine calls once this leaf's gradient is complete in a backward
  /// pass (data parallelism starts the gradient allreduce there).
  void register_grad_ready_hook(GradReadyHook hook) const;
  /// libtorch's register_hook: `hook(grad)` is called with the gradient computed for this
  /// tensor (complete: every contribution summed), before it goes on (into a leaf's .grad, or
  /// into the op that made this tensor); a hook returning a Tensor replaces the gradient with
  /// it (same shape), one returning void or an undefined Tensor leaves it. Hooks run in the
  /// order registered, in backward and autograd::grad. Returns a handle for remove_hook.
  template <typename Hook>
  unsigned register_hook(Hook&& hook) const {
    if constexpr (std::is_void_v<std::invoke_result_t<Hook&, const Tensor&>>)
      return add_grad_hook([h = std::forward<Hook>(hook)](const Tensor& g) mutable {
        h(g);
        return Tensor();
      });
    else
      return add_grad_hook(GradHook(std::forward<Hook>(hook)));
  }
  void remove_hook(unsigned handle) const;
  /// Makes backward (and autograd::grad) keep this non-leaf tensor's gradient in .grad,
  /// accumulating as a leaf's does, after its hooks ran; nothing to do on a leaf.
  void retain_grad() const;
  bool retains_grad() const { return checked()->retains_grad; }

 private:
  TensorImpl* checked() const {
    TANDEM_CHECK(impl_ != nullptr, "Tensor: operation on an undefined tensor");
    return impl_.get();
  }
  unsigned add_grad_hook(GradHook hook) const;
  std::shared_ptr<TensorImpl> impl_;
};

/// What Tensor::mutable_grad() returns: the gradient's handle (undefined when there is none),
/// bound to its tensor, so that assigning a tensor sets the gradient.
class GradRef : public Tensor {
 public:
  explicit GradRef(Tensor owner) : Tensor(owner.grad()), owner_(std::move(owner)) {}
  GradRef(const GradRef&) = default;
  GradRef& operator=(const Tensor& grad) {
    owner_.set_grad(grad);
    static_cast<Tensor&>(*this) = grad;
    return *this;
  }
  GradRef& operator=(const GradRef& grad) { return *this = static_cast<const Tensor&>(grad); }
  /// Drops the gradient (libtorch's `mutable_grad().reset()`).
  void reset() { *this = Tensor(); }

 private:
  Tensor owner_;
};

inline GradRef Tensor::mutable_grad() const { return GradRef(*this); }

/// libtorch's name for a list of tensors taken as an argument (here an owning vector).
using TensorList = std::vector<Tensor>;

/// Prints like torch: `tensor([[1., 2.], [3., 4.]], shape=(2, 2), dtype=f32, device=cpu)`.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// A tensor with the given layout over `storage` (no autograd history, no copy).
Tensor make_tensor(Storage storage, Shape shape, Shape strides, int64_t offset, DType dtype);
/// A contiguous tensor with fresh, uninitialized storage on `device` (what `empty` builds on).
Tensor make_tensor(const Shape& shape, DType dtype, Device device);
/// The same laid out in `format` (ChannelsLast needs a 4-d shape).
Tensor make_tensor(const Shape& shape, DType dtype, Device device, MemoryFormat format);
/// The strides of a dense 4-d (N, C, H, W) tensor laid out channels-last.
Shape channels_last_strides(const Shape& shape);
/// The strides of a dense tensor of `shape` laid out in `format`.
Shape strides_of(const Shape& shape, MemoryFormat format);
/// The strides of a dense tensor of `shape` whose dims lie in the order that operands with
/// these strides (over `shape`'s dims, 0 where broadcast) lay them out, the first operand
/// deciding where it can: PyTorch's infer_dense_strides, and its TensorIterator's order for
/// several operands (a broadcast dim decides nothing; of equal strides the larger dim goes
/// outer). Row-major where no operand says otherwise.
Shape infer_dense_strides(const Shape& shape, const std::vector<Shape>& operand_strides);
/// A new tensor of like's shape laid out as PyTorch's preserve_format lays it out (clone, to,
/// the *_like tensors): like's strides where it is non-overlapping and dense, else dense in the
/// order of like's dims.
Tensor make_tensor_like(const Tensor& like, DType dtype, Device device);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
// Comparisons, as libtorch's: bool tensors (so `(x > 0).sum()` counts), not a bool.
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
// Bitwise, as libtorch's: on bool masks `(x > 0) & (x < 1)` is their logical and.
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& a);

}  // namespace tandem
