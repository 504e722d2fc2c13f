// The Tensor methods that compute: conversions, element access, in-place updates and the math
// forwarded to the functional ops. Declared with the class in core/tensor.hpp, defined here so
// that core stays below kernels, autograd and ops.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "common.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem {
using namespace ops_detail;

namespace {
// Whether s converts to T without overflow, as c10's checked conversion: a floating value
// within T's range (NaN and the infinities pass to a floating T), an integer one within it,
// or, for an unsigned T, one whose negation is (-1 wraps to 255, as torch's).
template <typename T>
bool item_fits(const Scalar& s) {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_same_v<T, bool>) {
    return true;
  } else if constexpr (std::is_floating_point_v<T>) {
    const double v = s.toDouble();
    return !std::isfinite(v) || (v >= L::lowest() && v <= L::max());
  } else if (s.isFloatingPoint()) {
    const double v = s.toDouble();
    return !(v < static_cast<double>(L::lowest()) || v > static_cast<double>(L::max()));
  } else {
    const int64_t v = s.toLong();
    if constexpr (std::is_unsigned_v<T>)
      return v >= 0 ? static_cast<uint64_t>(v) <= L::max()
                    : static_cast<uint64_t>(-(v + 1)) + 1 <= L::max();
    return v >= static_cast<int64_t>(L::lowest()) && v <= static_cast<int64_t>(L::max());
  }
}
}  // namespace

template <typename T>
T Tensor::item() const {
  TANDEM_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements (shape ",
               shape_str(shape()), ") cannot be converted to a scalar");
  const Tensor host = cpu();  // one copy from a GPU
  // Only a value that can lie outside T is checked: not into double or int64_t, nor into float
  // from any dtype but f64 (loss.item<float>() each step converts once).
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, double> &&
                !std::is_same_v<T, int64_t>) {
    if (!std::is_floating_point_v<T> || dtype() == DType::f64) {
      const Scalar value = host.item();
      TANDEM_CHECK(item_fits<T>(value), "item: the value ", value.toDouble(),
                   " cannot be converted to ", dtype_of<T>::value, " without overflow");
    }
  }
  Tensor c = host.to(dtype_of<T>::value);
  return *static_cast<const T*>(c.raw_data());
}

Scalar Tensor::item() const {
  if (is_floating(dtype())) return Scalar(item<double>());
  return Scalar(item<int64_t>(), dtype() == DType::boolean);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = cpu().to(dtype_of<T>::value).contiguous();
  const T* p = static_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}

template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  Tensor c = cpu().to(DType::boolean).contiguous();
  const bool* p = static_cast<const bool*>(c.raw_data());
  return std::vector<bool>(p, p + c.numel());
}

#define TANDEM_INSTANTIATE_ACCESS(T)     \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
TANDEM_INSTANTIATE_ACCESS(float)
TANDEM_INSTANTIATE_ACCESS(double)
TANDEM_INSTANTIATE_ACCESS(Eigen::half)
TANDEM_INSTANTIATE_ACCESS(Eigen::bfloat16)
TANDEM_INSTANTIATE_ACCESS(int64_t)
TANDEM_INSTANTIATE_ACCESS(int32_t)
TANDEM_INSTANTIATE_ACCESS(uint8_t)
template bool Tensor::item<bool>() const;
#undef TANDEM_INSTANTIATE_ACCESS

// --- conversions -------------------------------------------------------------------------

namespace {
// t where it is non-overlapping and dense, else a copy laid out as preserve_format lays it out:
// its bytes, from raw_data() on, are its elements, once each.
Tensor dense_bytes(const Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t : t.detach().clone();
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = make_tensor_like(*this, dtype, device());
  kernels::copy(out, *this);
  if (is_floating(dtype) && is_floating(this->dtype())) {
    DType from = this->dtype();
    autograd::record("to_dtype", {*this}, out, [from](const Tensor& g) -> std::vector<Tensor> {
      return {g.to(from)};
    }, kDifferentiable);
  }
  return out;
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  if (device == this->device()) return *this;
  // Bytes cross as they lie in a dense layout, this one's where it is dense (a channels-last or
  // transposed tensor arrives so: torch's preserve_format).
  const Tensor src = dense_bytes(*this);
  Tensor out = make_tensor_like(src, dtype(), device);
  const auto nbytes = static_cast<size_t>(numel() * element_size());
  if (non_blocking && src.device().is_cpu())
    cuda::copy_to_device_async(out.raw_data(), device, src.raw_data(), src.storage().data(), nbytes);
  else
    cuda::copy_bytes(out.raw_data(), device, src.raw_data(), src.device(), nbytes);
  Device from = this->device();
  autograd::record("to_device", {*this}, out, [from](const Tensor& g) -> std::vector<Tensor> {
    return {g.to(from)};
  }, kDifferentiable);
  return out;
}

Tensor Tensor::to(Device device, DType dtype) const { return to(device).to(dtype); }
Tensor Tensor::to(const TensorOptions& options, bool non_blocking, bool copy) const {
  const Tensor moved = options.device_ ? to(*options.device_, non_blocking) : *this;
  const Tensor out = options.has_dtype() ? moved.to(options.dtype()) : moved;
  return copy && out.is_same(*this) ? clone() : out;
}
Tensor Tensor::to(DType dtype, bool non_blocking, bool copy) const {
  return to(TensorOptions(dtype), non_blocking, copy);
}
Tensor Tensor::to(Device device, DType dtype, bool non_blocking, bool copy) const {
  return to(TensorOptions(dtype).device(device), non_blocking, copy);
}
Tensor Tensor::to(const Tensor& other, bool non_blocking) const {
  return to(other.device(), non_blocking).to(other.dtype());
}
Tensor Tensor::cuda() const { return to(Device(DeviceType::cuda, cuda::current_device())); }

bool Tensor::is_pinned() const {
  return defined() && device().is_cpu() && cuda::is_pinned(storage().data());
}

Tensor Tensor::pin_memory() const {
  check_defined(*this, "pin_memory", "input");
  TANDEM_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got one on ",
               device().str());
  if (is_pinned()) return *this;
  const Tensor src = dense_bytes(*this);  // as to() moves them
  const auto bytes = static_cast<size_t>(numel() * element_size());
  const size_t nbytes = std::max<size_t>(bytes, 1);  // an empty tensor still gets a block
  Allocator& pinned = pinned_allocator();
  Storage storage =
      Storage::from_blob(pinned.allocate(nbytes), nbytes, kCPU,
                         [&pinned, nbytes](void* p) { pinned.deallocate(p, nbytes); });
  Tensor out = make_tensor(storage, shape(), src.strides(), 0, dtype());
  if (bytes > 0) cuda::copy_bytes(out.raw_data(), kCPU, src.raw_data(), kCPU, bytes);
  autograd::record(
      "pin_memory", {*this}, out, [](const Tensor& g) -> std::vector<Tensor> { return {g}; },
      kDifferentiable);
  return out;
}
Tensor Tensor::new_empty(const Shape& shape, TensorOptions options) const {
  return empty(shape, like_options(*this, options));
}
Tensor Tensor::new_zeros(const Shape& shape, TensorOptions options) const {
  return zeros(shape, like_options(*this, options));
}
Tensor Tensor::new_ones(const Shape& shape, TensorOptions options) const {
  return ones(shape, like_options(*this, options));
}
Tensor Tensor::new_full(const Shape& shape, Scalar value, TensorOptions options) const {
  return full(shape, value.toDouble(), like_options(*this, options));
}

Tensor Tensor::clone() const {
  Tensor out = make_tensor_like(*this, dtype(), device());
  kernels::copy(out, *this);
  autograd::record("clone", {*this}, out,
                   [](const Tensor& g) -> std::vector<Tensor> { return {g}; }, kDifferentiable);
  return out;
}

Tensor Tensor::contiguous() const { return contiguous(MemoryFormat::Contiguous); }

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::ChannelsLast ? suggest_memory_format() == format : is_contiguous())
    return *this;
  Tensor out = make_tensor(shape(), dtype(), device(), format);
  kernels::copy(out, *this);
  autograd::record("contiguous", {*this}, out,
                   [](const Tensor& g) -> std::vector<Tensor> { return {g}; }, kDifferentiable);
  return out;
}

// --- views and math forwarded to the functional API -------------------------------------

Tensor Tensor::reshape(const Shape& s) const { return tandem::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return tandem::view(*this, s); }
Tensor Tensor::permute(const Shape& dims) const { return tandem::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return tandem::transpose(*this, d0, d1); }
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  return tandem::slice(*this, dim, start.value_or(0),
                       end.value_or(std::numeric_limits<int64_t>::max()), step);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return tandem::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return tandem::select(*this, dim, index); }
Tensor Tensor::unsqueeze(int64_t dim) const { return tandem::unsqueeze(*this, dim); }
Tensor Tensor::squeeze() const { return tandem::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return tandem::squeeze(*this, dim); }
Tensor Tensor::expand(const Shape& s) const { return tandem::expand(*this, s); }
Tensor Tensor::flatten(int64_t start, int64_t end) const { return tandem::flatten(*this, start, end); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return tandem::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split_with_sizes(const std::vector<int64_t>& sizes, int64_t dim) const {
  return tandem::split_with_sizes(*this, sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return tandem::chunk(*this, chunks, dim);
}
std::vector<Tensor> Tensor::unbind(int64_t dim) const { return tandem::unbind(*this, dim); }
Tensor Tensor::repeat(const Shape& repeats) const { return tandem::repeat(*this, repeats); }
Tensor Tensor::flip(const Shape& dims) const { return tandem::flip(*this, dims); }
namespace indexing {
TensorIndex::TensorIndex(const Tensor& t)
    : kind_(Kind::tensor), tensor_(std::make_shared<const Tensor>(t)) {}
}  // namespace indexing

namespace {
// The integers, slices, None and ellipsis of `indices` applied to `self` (a view), and the one
// tensor index among them, if any, with the dim of that view it applies to.
struct BasicIndexed {
  Tensor view;
  TensorIndices tensors;  // each tensor index, at its dim of view
};

bool is_integer_scalar(const Tensor& t) {
  return t.dim() == 0 && t.dtype() != DType::boolean && !t.is_floating_point();
}

BasicIndexed apply_basic(const Tensor& self, const std::vector<indexing::TensorIndex>& indices,
                         const char* op) {
  using Kind = indexing::TensorIndex::Kind;
  check_defined(self, op, "tensor");
  int64_t consumed = 0, ellipses = 0;  // dims the indices take; "..."s
  for (const auto& i : indices) {
    TANDEM_CHECK(i.valid(), op, ": the only string index is \"...\"");
    consumed += i.kind() == Kind::integer || i.kind() == Kind::slice;
    ellipses += i.kind() == Kind::ellipsis;
    if (i.kind() == Kind::tensor) {
      check_defined(i.tensor(), op, "tensor index");
      // A mask takes as many dims as it has, indices one; a 0-dim integer tensor is an integer.
      consumed += i.tensor().dtype() == DType::boolean ? i.tensor().dim() : 1;
    }
  }
  TANDEM_CHECK(ellipses <= 1, op, ": at most one ellipsis (\"...\"), got ", ellipses);
  TANDEM_CHECK(consumed <= self.dim(), op, ": ", consumed, " indices for a tensor of ",
               self.dim(), " dims (shape ", shape_str(self.shape()), ")");
  BasicIndexed r{self, {}};
  int64_t d = 0;  // the dim of the view the next index applies to
  auto select = [&](int64_t index) {
    const int64_t size = r.view.size(d);
    TANDEM_CHECK_INDEX(index >= -size && index < size, op, ": ", index,
                       " is out of range for dim ", d, " of size ", size);
    r.view = r.view.select(d, index);
  };
  for (const auto& i : indices) {
    switch (i.kind()) {
      case Kind::integer: select(i.integer()); break;
      case Kind::slice: {
        const auto& s = i.slice();
        r.view = r.view.slice(d, s.start.value_or(0), s.stop.value_or(r.view.size(d)),
                              s.step.value_or(1));
        ++d;
        break;
      }
      case Kind::none: r.view = r.view.unsqueeze(d++); break;
      case Kind::ellipsis: d += self.dim() - consumed; break;
      case Kind::tensor:
        if (is_integer_scalar(i.tensor())) {  // as libtorch: a select, a view
          select(i.tensor().item<int64_t>());
          break;
        }
        r.tensors.emplace_back(d, i.tensor());
        d += i.tensor().dtype() == DType::boolean ? i.tensor().dim() : 1;
        break;
    }
  }
  return r;
}
}  // namespace

Tensor Tensor::index(std::initializer_list<indexing::TensorIndex> indices) const {
  BasicIndexed r = apply_basic(
      *this, std::vector<indexing::TensorIndex>(indices.begin(), indices.end()), "index");
  return r.tensors.empty() ? r.view : index_by_tensors(r.view, r.tensors);
}

Tensor Tensor::sum() const { return tandem::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return tandem::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return tandem::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return tandem::mean(*this, dims, keepdim);
}
Tensor Tensor::var(const Shape& dims, bool unbiased, bool keepdim) const {
  return tandem::var(*this, dims, unbiased ? 1 : 0, keepdim);
}
Tensor Tensor::std(const Shape& dims, bool unbiased, bool keepdim) const {
  return tandem::std(*this, dims, unbiased ? 1 : 0, keepdim);
}
Tensor Tensor::max() const { return tandem::max(*this); }
Tensor Tensor::min() const { return tandem::min(*this); }
Tensor Tensor::amax(const Shape& dims, bool keepdim) const {
  return tandem::amax(*this, dims, keepdim);
}
Tensor Tensor::amin(const Shape& dims, bool keepdim) const {
  return tandem::amin(*this, dims, keepdim);
}
bool Tensor::equal(const Tensor& other) const { return tandem::equal(*this, other); }
Tensor Tensor::norm() const { return tandem::norm(*this); }
Tensor Tensor::norm(double p) const { return tandem::norm(*this, p); }
Tensor Tensor::norm(double p, const Shape& dims, bool keepdim) const {
  return tandem::norm(*this, p, dims, keepdim);
}
Tensor Tensor::all() const { return tandem::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return tandem::all(*this, dim, keepdim); }
Tensor Tensor::any() const { return tandem::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return tandem::any(*this, dim, keepdim); }
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return tandem::max(*this, dim, keepdim);
}
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return tandem::min(*this, dim, keepdim);
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return tandem::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return tandem::argmin(*this, dim, keepdim); }
Tensor Tensor::argmax() const { return tandem::argmax(*this); }
Tensor Tensor::argmin() const { return tandem::argmin(*this); }
Tensor Tensor::max(const Tensor& other) const { return tandem::maximum(*this, other); }
Tensor Tensor::min(const Tensor& other) const { return tandem::minimum(*this, other); }
Tensor Tensor::neg() const { return tandem::neg(*this); }
Tensor Tensor::exp() const { return tandem::exp(*this); }
Tensor Tensor::log() const { return tandem::log(*this); }
Tensor Tensor::sqrt() const { return tandem::sqrt(*this); }
Tensor Tensor::rsqrt() const { return tandem::rsqrt(*this); }
Tensor Tensor::sin() const { return tandem::sin(*this); }
Tensor Tensor::expm1() const { return tandem::expm1(*this); }
Tensor Tensor::tan() const { return tandem::tan(*this); }
Tensor Tensor::atan() const { return tandem::atan(*this); }
Tensor Tensor::erf() const { return tandem::erf(*this); }
Tensor Tensor::log2() const { return tandem::log2(*this); }
Tensor Tensor::log10() const { return tandem::log10(*this); }
Tensor Tensor::reciprocal() const { return tandem::reciprocal(*this); }
Tensor Tensor::trunc() const { return tandem::trunc(*this); }
Tensor Tensor::atan2(const Tensor& other) const { return tandem::atan2(*this, other); }
Tensor Tensor::fmod(const Tensor& other) const { return tandem::fmod(*this, other); }
Tensor Tensor::fmod(Scalar other) const { return tandem::fmod(*this, other); }
Tensor Tensor::remainder(const Tensor& other) const { return tandem::remainder(*this, other); }
Tensor Tensor::remainder(Scalar other) const { return tandem::remainder(*this, other); }
Tensor Tensor::tril(int64_t diagonal) const { return tandem::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return tandem::triu(*this, diagonal); }
Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  return tandem::diagonal(*this, offset, dim1, dim2);
}
Tensor Tensor::diag(int64_t diagonal) const { return tandem::diag(*this, diagonal); }
Tensor Tensor::movedim(const Shape& source, const Shape& destination) const {
  return tandem::movedim(*this, source, destination);
}
Tensor Tensor::movedim(int64_t source, int64_t destination) const {
  return tandem::movedim(*this, source, destination);
}
Tensor Tensor::unflatten(int64_t dim, const Shape& sizes) const {
  return tandem::unflatten(*this, dim, sizes);
}
Tensor Tensor::roll(const Shape& shifts, const Shape& dims) const {
  return tandem::roll(*this, shifts, dims);
}
Tensor Tensor::tile(const Shape& reps) const { return tandem::tile(*this, reps); }
Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int64_t> dim) const {
  return tandem::repeat_interleave(*this, repeats, dim);
}
Tensor Tensor::repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim) const {
  return tandem::repeat_interleave(*this, repeats, dim);
}
Tensor Tensor::unfold(int64_t dim, int64_t size, int64_t step) const {
  return tandem::unfold(*this, dim, size, step);
}
Tensor Tensor::median() const { return tandem::median(*this); }
std::pair<Tensor, Tensor> Tensor::median(int64_t dim, bool keepdim) const {
  return tandem::median(*this, dim, keepdim);
}
std::pair<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t dim, bool keepdim) const {
  return tandem::kthvalue(*this, k, dim, keepdim);
}
Tensor Tensor::trace() const { return tandem::trace(*this); }
Tensor Tensor::inverse() const { return tandem::inverse(*this); }
Tensor Tensor::det() const { return tandem::det(*this); }
Tensor Tensor::logdet() const { return tandem::logdet(*this); }
std::tuple<Tensor, Tensor> Tensor::slogdet() const { return tandem::slogdet(*this); }
Tensor Tensor::cholesky(bool upper) const { return tandem::cholesky(*this, upper); }
Tensor Tensor::cholesky_solve(const Tensor& factor, bool upper) const {
  return tandem::cholesky_solve(*this, factor, upper);
}
Tensor Tensor::cholesky_inverse(bool upper) const { return tandem::cholesky_inverse(*this, upper); }
Tensor Tensor::matrix_power(int64_t n) const { return tandem::matrix_power(*this, n); }
Tensor Tensor::cross(const Tensor& other, std::optional<int64_t> dim) const {
  return tandem::cross(*this, other, dim);
}
Tensor Tensor::baddbmm(const Tensor& batch1, const Tensor& batch2, double beta,
                       double alpha) const {
  return tandem::baddbmm(*this, batch1, batch2, beta, alpha);
}
Tensor Tensor::clip(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return tandem::clip(*this, min, max);
}
Tensor Tensor::logit(std::optional<double> eps) const { return tandem::logit(*this, eps); }
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const {
  return tandem::cumsum(*this, dim, dtype);
}
Tensor Tensor::cumprod(int64_t dim, std::optional<DType> dtype) const {
  return tandem::cumprod(*this, dim, dtype);
}
Tensor Tensor::prod(std::optional<DType> dtype) const { return tandem::prod(*this, dtype); }
Tensor Tensor::prod(int64_t dim, bool keepdim, std::optional<DType> dtype) const {
  return tandem::prod(*this, dim, keepdim, dtype);
}
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const {
  return tandem::logsumexp(*this, dims, keepdim);
}
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return tandem::topk(*this, k, dim, largest, sorted);
}
std::pair<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return tandem::sort(*this, dim, descending);
}
Tensor Tensor::argsort(int64_t dim, bool descending) const {
  return tandem::argsort(*this, dim, descending);
}
Tensor Tensor::masked_select(const Tensor& mask) const {
  return tandem::masked_select(*this, mask);
}
Tensor Tensor::nonzero() const { return tandem::nonzero(*this); }
Tensor Tensor::cos() const { return tandem::cos(*this); }
Tensor Tensor::log1p() const { return tandem::log1p(*this); }
Tensor Tensor::floor() const { return tandem::floor(*this); }
Tensor Tensor::ceil() const { return tandem::ceil(*this); }
Tensor Tensor::round() const { return tandem::round(*this); }
Tensor Tensor::sign() const { return tandem::sign(*this); }
Tensor Tensor::isnan() const { return tandem::isnan(*this); }
Tensor Tensor::isinf() const { return tandem::isinf(*this); }
Tensor Tensor::square() const { return tandem::square(*this); }
Tensor Tensor::abs() const { return tandem::abs(*this); }
Tensor Tensor::relu() const { return tandem::relu(*this); }
Tensor Tensor::sigmoid() const { return tandem::sigmoid(*this); }
Tensor Tensor::tanh() const { return tandem::tanh(*this); }
Tensor Tensor::softmax(int64_t dim) const { return tandem::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return tandem::log_softmax(*this, dim); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return tandem::clamp(*this, min, max);
}
Tensor Tensor::pow(Scalar e) const { return tandem::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return tandem::pow(*this, e); }
Tensor Tensor::clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const {
  return tandem::clamp(*this, min, max);
}
Tensor Tensor::lerp(const Tensor& end, double weight) const {
  return tandem::lerp(*this, end, weight);
}
Tensor Tensor::lerp(const Tensor& end, const Tensor& weight) const {
  return tandem::lerp(*this, end, weight);
}
Tensor Tensor::addcmul(const Tensor& t1, const Tensor& t2, double value) const {
  return tandem::addcmul(*this, t1, t2, value);
}
Tensor Tensor::addcdiv(const Tensor& t1, const Tensor& t2, double value) const {
  return tandem::addcdiv(*this, t1, t2, value);
}
Tensor Tensor::asin() const { return tandem::asin(*this); }
Tensor Tensor::acos() const { return tandem::acos(*this); }
Tensor Tensor::sinh() const { return tandem::sinh(*this); }
Tensor Tensor::cosh() const { return tandem::cosh(*this); }
Tensor Tensor::asinh() const { return tandem::asinh(*this); }
Tensor Tensor::acosh() const { return tandem::acosh(*this); }
Tensor Tensor::atanh() const { return tandem::atanh(*this); }
Tensor Tensor::erfinv() const { return tandem::erfinv(*this); }
Tensor Tensor::logaddexp(const Tensor& other) const { return tandem::logaddexp(*this, other); }
Tensor Tensor::xlogy(const Tensor& other) const { return tandem::xlogy(*this, other); }
Tensor Tensor::count_nonzero(const Shape& dims) const { return tandem::count_nonzero(*this, dims); }
Tensor Tensor::bincount(const Tensor& weights, int64_t minlength) const {
  return tandem::bincount(*this, weights, minlength);
}
Tensor Tensor::take_along_dim(const Tensor& indices, std::optional<int64_t> dim) const {
  return tandem::take_along_dim(*this, indices, dim);
}
Tensor Tensor::index_copy(int64_t dim, const Tensor& index, const Tensor& source) const {
  return tandem::index_copy(*this, dim, index, source);
}
Tensor Tensor::masked_scatter(const Tensor& mask, const Tensor& source) const {
  return tandem::masked_scatter(*this, mask, source);
}
Tensor Tensor::scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src,
                              const std::string& reduce, bool include_self) const {
  return tandem::scatter_reduce(*this, dim, index, src, reduce, include_self);
}
Tensor Tensor::diff(int64_t n, int64_t dim, const Tensor& prepend, const Tensor& append) const {
  return tandem::diff(*this, n, dim, prepend, append);
}
std::pair<Tensor, Tensor> Tensor::cummax(int64_t dim) const { return tandem::cummax(*this, dim); }
std::pair<Tensor, Tensor> Tensor::cummin(int64_t dim) const { return tandem::cummin(*this, dim); }
Tensor Tensor::nansum(const Shape& dims, bool keepdim, std::optional<DType> dtype) const {
  return tandem::nansum(*this, dims, keepdim, dtype);
}
Tensor Tensor::nanmean(const Shape& dims, bool keepdim, std::optional<DType> dtype) const {
  return tandem::nanmean(*this, dims, keepdim, dtype);
}
Tensor Tensor::quantile(const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                        const std::string& interpolation) const {
  return tandem::quantile(*this, q, dim, keepdim, interpolation);
}
Tensor Tensor::quantile(double q, std::optional<int64_t> dim, bool keepdim,
                        const std::string& interpolation) const {
  return tandem::quantile(*this, q, dim, keepdim, interpolation);
}
Tensor Tensor::nanquantile(const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                           const std::string& interpolation) const {
  return tandem::nanquantile(*this, q, dim, keepdim, interpolation);
}
Tensor Tensor::nanquantile(double q, std::optional<int64_t> dim, bool keepdim,
                           const std::string& interpolation) const {
  return tandem::nanquantile(*this, q, dim, keepdim, interpolation);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, Scalar value) const {
  return tandem::index_fill(*this, dim, index, value);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, const Tensor& value) const {
  return tandem::index_fill(*this, dim, index, value);
}
Tensor Tensor::rot90(int64_t k, const Shape& dims) const { return tandem::rot90(*this, k, dims); }
Tensor Tensor::nan_to_num(std::optional<double> nan, std::optional<double> posinf,
                          std::optional<double> neginf) const {
  return tandem::nan_to_num(*this, nan, posinf, neginf);
}
Tensor Tensor::maximum(const Tensor& other) const { return tandem::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return tandem::minimum(*this, other); }
Tensor Tensor::where(const Tensor& cond, const Tensor& other) const {
  return tandem::where(cond, *this, other);
}
Tensor Tensor::add(const Tensor& other, double alpha) const {
  return tandem::add(*this, other, alpha);
}
Tensor Tensor::add(Scalar other) const { return tandem::add(*this, other); }
Tensor Tensor::sub(const Tensor& other, double alpha) const {
  return tandem::sub(*this, other, alpha);
}
Tensor Tensor::sub(Scalar other) const { return tandem::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return tandem::mul(*this, other); }
Tensor Tensor::mul(Scalar other) const { return tandem::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return tandem::div(*this, other); }
Tensor Tensor::div(Scalar other) const { return *this / other; }
Tensor Tensor::div(const Tensor& other, std::optional<std::string_view> mode) const {
  return tandem::div(*this, other, mode);
}
Tensor Tensor::div(Scalar other, std::optional<std::string_view> mode) const {
  return tandem::div(*this, other, mode);
}
Tensor Tensor::floor_divide(const Tensor& other) const {
  return tandem::floor_divide(*this, other);
}
Tensor Tensor::floor_divide(Scalar other) const { return tandem::floor_divide(*this, other); }
Tensor Tensor::matmul(const Tensor& other) const { return tandem::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return tandem::mm(*this, other); }
Tensor Tensor::bmm(const Tensor& other) const { return tandem::bmm(*this, other); }
Tensor Tensor::dot(const Tensor& other) const { return tandem::dot(*this, other); }
Tensor Tensor::mv(const Tensor& vec) const { return tandem::mv(*this, vec); }
Tensor Tensor::outer(const Tensor& other) const { return tandem::outer(*this, other); }
Tensor Tensor::addmm(const Tensor& mat1, const Tensor& mat2, double beta, double alpha) const {
  return tandem::addmm(*this, mat1, mat2, beta, alpha);
}
Tensor Tensor::sum(DType dtype) const { return tandem::sum(*this, dtype); }
Tensor Tensor::sum(const Shape& dims, bool keepdim, DType dtype) const {
  return tandem::sum(*this, dims, keepdim, dtype);
}
Tensor Tensor::mean(DType dtype) const { return tandem::mean(*this, dtype); }
Tensor Tensor::mean(const Shape& dims, bool keepdim, DType dtype) const {
  return tandem::mean(*this, dims, keepdim, dtype);
}
Tensor Tensor::isfinite() const { return tandem::isfinite(*this); }
Tensor Tensor::isclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return tandem::isclose(*this, other, rtol, atol, equal_nan);
}
bool Tensor::allclose(const Tensor& other, double rtol, double atol) const {
  return tandem::allclose(*this, other, rtol, atol);
}

namespace {
// A number as the other operand of a comparison with t: a 0-dim tensor in t's dtype (a float
// tensor compares in its own precision, as torch's wrapped numbers), or, for an integer t, in
// i64 when the number is whole (2^53 at most) and f64 when it is not.
Tensor comparand(const Tensor& t, double value) {
  check_defined(t, "comparison", "tensor");
  DType dt = t.dtype();
  if (!is_floating(dt))
    dt = value == std::trunc(value) && std::fabs(value) <= 9007199254740992.0 ? DType::i64
                                                                               : DType::f64;
  return scalar_tensor(value, TensorOptions(dt).device(t.device()));
}
}  // namespace

Tensor Tensor::eq(const Tensor& other) const { return tandem::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return tandem::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return tandem::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return tandem::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return tandem::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return tandem::ge(*this, other); }
Tensor Tensor::eq(double other) const { return tandem::eq(*this, comparand(*this, other)); }
Tensor Tensor::ne(double other) const { return tandem::ne(*this, comparand(*this, other)); }
Tensor Tensor::lt(double other) const { return tandem::lt(*this, comparand(*this, other)); }
Tensor Tensor::le(double other) const { return tandem::le(*this, comparand(*this, other)); }
Tensor Tensor::gt(double other) const { return tandem::gt(*this, comparand(*this, other)); }
Tensor Tensor::ge(double other) const { return tandem::ge(*this, comparand(*this, other)); }
Tensor Tensor::logical_and(const Tensor& other) const { return tandem::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor& other) const { return tandem::logical_or(*this, other); }
Tensor Tensor::logical_xor(const Tensor& other) const { return tandem::logical_xor(*this, other); }
Tensor Tensor::logical_not() const { return tandem::logical_not(*this); }
Tensor Tensor::bitwise_and(const Tensor& other) const { return tandem::bitwise_and(*this, other); }
Tensor Tensor::bitwise_or(const Tensor& other) const { return tandem::bitwise_or(*this, other); }
Tensor Tensor::bitwise_xor(const Tensor& other) const { return tandem::bitwise_xor(*this, other); }
Tensor Tensor::bitwise_not() const { return tandem::bitwise_not(*this); }

namespace {
// masked_fill's mask: bool, on self's device, broadcasting to self's shape.
void check_mask(const Tensor& self, const Tensor& mask) {
  check_defined(mask, "masked_fill", "mask");
  check_same_device(self, mask, "masked_fill");
  TANDEM_CHECK(mask.dtype() == DType::boolean, "masked_fill: the mask must be bool, got ",
               mask.dtype());
  check_broadcasts_to(mask, self.shape(), "masked_fill", "mask");
}
}  // namespace

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  check_mask(*this, mask);
  check_fill_value(value, dtype(), "masked_fill");
  return tandem::where(mask, scalar_tensor(value, TensorOptions(dtype()).device(device())), *this);
}

Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const {
  check_mask(*this, mask);
  check_defined(value, "masked_fill", "value");
  TANDEM_CHECK(value.dim() == 0, "masked_fill: the value must be a 0-dim tensor, got shape ",
               shape_str(value.shape()));
  return tandem::where(mask, beside(value, {this}).to(dtype()), *this);
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return tandem::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  return tandem::gather(*this, dim, index);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src) const {
  return tandem::scatter(*this, dim, index, src);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, double value) const {
  return tandem::scatter(*this, dim, index, value);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return tandem::scatter_add(*this, dim, index, src);
}
Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& source,
                         double alpha) const {
  return tandem::index_add(*this, dim, index, source, alpha);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) {  // true division: an integer tensor's is f32
  check_defined(a, "div", "first operand");
  return mul(a.is_floating_point() ? a : a.to(DType::f32), 1.0 / b.toDouble());
}
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) { return div(scalar_operand(b, a), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, double b) { return a.ne(b); }
Tensor operator<(const Tensor& a, double b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, double b) { return a.le(b); }
Tensor operator>(const Tensor& a, double b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, double b) { return a.ge(b); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor operator~(const Tensor& a) { return bitwise_not(a); }

// --- in place ------------------------------------------------------------------------------

namespace {
// Outside the graph, an in-place write bumps the version, so that a node that saved this tensor
// refuses to run (node.hpp). The ops that cannot be recorded (random fills, index_put_ with
// tensor indices) refuse a tensor that requires grad.
void check_inplace(const Tensor& t, const char* op) {
  TANDEM_CHECK(!grad_mode_enabled() || !t.requires_grad(), op,
               ": in-place operation on a tensor that requires grad; wrap it in a NoGradGuard "
               "or use the out-of-place op");
  t.storage().bump_version();  // a node that saved this tensor refuses to run (node.hpp)
}

// A write through an expanded view would store several results in one location, the last one
// winning: refused before anything is written, as torch refuses it.
void check_no_overlap(const Tensor& t, const char* op) {
  TANDEM_CHECK(!t.has_internal_overlap(), op, ": more than one element of the written-to tensor "
               "refers to a single memory location (an expanded view of shape ",
               shape_str(t.shape()), "); write into a contiguous() copy, or into unexpand() of "
               "it when the update is the same for every repeated element");
}

// Whether `other` reaches self's memory through another view: a kernel writing self while it
// reads other would read elements already written (x.add_(x.t()), x.copy_(x.t())).
bool reads_through_another_view(const Tensor& self, const Tensor& other) {
  return other.storage().is_same(self.storage()) &&
         !(other.shape() == self.shape() && other.strides() == self.strides() &&
           other.storage_offset() == self.storage_offset());
}

// The in-place arithmetic writes straight into this tensor (one kernel, no temporary) when the
// operand has its dtype and device, broadcasts to its shape and is not another view of its
// memory; else it computes a temporary and copies it in.
bool writes_in_place(const Tensor& self, const Tensor& other) {
  if (other.dtype() != self.dtype() || other.device() != self.device()) return false;
  const int64_t lead = self.dim() - other.dim();
  if (lead < 0) return false;
  for (int64_t d = 0; d < other.dim(); ++d)
    if (other.size(d) != 1 && other.size(d) != self.size(lead + d)) return false;
  return !reads_through_another_view(self, other);
}

// An in-place op whose result would be floating cannot write it into an integer tensor.
void check_integer_result(const Tensor& self, bool floating_result, const char* name,
                          const char* why) {
  TANDEM_CHECK(self.is_floating_point() || !floating_result, name, ": the result is f32 (", why,
               ") and cannot be written into a ", self.dtype(), " tensor in place");
}

// Whether an in-place op on self (with `other`, if any) takes part in autograd, as torch's do
// in a graph: grad mode on, and self or the operand requiring grad. torch refuses it on a leaf
// that requires grad and on a view of one, and so does this.
bool in_graph(const Tensor& self, const Tensor* other, const char* op) {
  if (!grad_mode_enabled() || !self.defined()) return false;
  if (!self.requires_grad() && !(other && other->defined() && other->requires_grad())) return false;
  if (const TensorImpl* base = self.impl()->view_base.get())
    TANDEM_CHECK(!(base->requires_grad && !base->grad_fn), op,
                 ": in-place operation on a view of a leaf tensor that requires grad (torch "
                 "refuses it too); wrap it in a NoGradGuard or use the out-of-place op");
  else
    TANDEM_CHECK(!(self.is_leaf() && self.requires_grad()), op,
                 ": in-place operation on a leaf tensor that requires grad (torch refuses it "
                 "too); wrap it in a NoGradGuard or use the out-of-place op");
  check_no_overlap(self, op);
  return true;
}

// Writes `out` (self's shape, the op's result, recorded) into self and gives self its history,
// as torch's in-place ops: views of self see the values, and what saved the old values refuses
// to run (the version). A view's base takes the history (CopySlices); views of self, or of its
// base, take theirs anew when next used.
Tensor& write_recorded(Tensor& self, Tensor out) {
  if (out.dtype() != self.dtype()) out = out.to(self.dtype());
  // out's own node (not a leaf's accumulator), and not in self's memory (copy_ from another view).
  if ((out.requires_grad() && (out.is_leaf() || out.impl()->history_stale())) ||
      out.storage().is_same(self.storage()))
    out = out.clone();
  {
    NoGradGuard guard;
    self.storage().bump_version();
    kernels::copy(self, out);
  }
  if (self.impl()->view_base) {
    copy_slices(self, out);
  } else {
    autograd::set_history(self, out.requires_grad() ? out.grad_fn() : nullptr);
    ++self.impl()->history_version;
  }
  return self;
}

// self = f(self's value), recorded: f runs out of place on a copy of self (which keeps self's
// history, and its values for f's backward), and its result is written in (write_recorded).
template <typename F>
Tensor& rebase(Tensor& self, F f) {
  return write_recorded(self, f(self.clone()));
}
}  // namespace

Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices,
                           const Tensor& value) {
  return index_put_(indices, value, false);
}

namespace {
// self with value written (or added) where the indices point, recorded as torch's index_put:
// self's gradient without the written positions (all of it when accumulating), value's the
// gradient gathered there, summed over value's broadcast dims.
Tensor index_put_recorded(const Tensor& self, const std::vector<indexing::TensorIndex>& indices,
                          const Tensor& value, bool accumulate) {
  Tensor out = self.detach().clone();
  {
    NoGradGuard guard;
    BasicIndexed r = apply_basic(out, indices, "index_put_");
    index_put_by_tensors(r.view, r.tensors, value, accumulate);
  }
  autograd::record("index_put", {self, value}, out,
                   [indices, accumulate, value_shape = value.shape(),
                    value_device = value.device()](const Tensor& g) -> std::vector<Tensor> {
                     Tensor g_self = g;
                     if (!accumulate) {
                       g_self = g.clone();
                       BasicIndexed r = apply_basic(g_self, indices, "index_put_");
                       index_put_by_tensors(r.view, r.tensors, zeros({}, g.options()));
                     }
                     BasicIndexed r = apply_basic(g, indices, "index_put_");
                     Tensor g_value = index_by_tensors(r.view, r.tensors);
                     const Tensor like = make_tensor(value_shape, g.dtype(), g.device());
                     return {g_self, reduce_grad(g_value, like).to(value_device)};
                   });
  return out;
}
}  // namespace

Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices,
                           const Tensor& value, bool accumulate) {
  check_defined(value, "index_put_", "value");
  const std::vector<indexing::TensorIndex> list(indices.begin(), indices.end());
  BasicIndexed r = apply_basic(*this, list, "index_put_");
  if (r.tensors.empty()) {  // a view: copy_ and add_ record it in a graph (CopySlices)
    if (accumulate) {
      check_broadcasts_to(value, r.view.shape(), "index_put_", "value");
      r.view.add_(value);
    } else {
      r.view.copy_(value);
    }
    return *this;
  }
  if (in_graph(*this, &value, "index_put_"))
    return rebase(*this,
                  [&](const Tensor& x) { return index_put_recorded(x, list, value, accumulate); });
  check_inplace(*this, "index_put_");
  check_no_overlap(r.view, "index_put_");
  index_put_by_tensors(r.view, r.tensors, value, accumulate);
  return *this;
}

Tensor Tensor::index_put(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value,
                         bool accumulate) const {
  check_defined(*this, "index_put", "self");
  check_defined(value, "index_put", "value");
  const std::vector<indexing::TensorIndex> list(indices.begin(), indices.end());
  if (grad_mode_enabled() && (requires_grad() || value.requires_grad()))
    return index_put_recorded(*this, list, value, accumulate);
  Tensor out = clone();
  out.index_put_(indices, value, accumulate);
  return out;
}

Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices, double value) {
  return index_put_(indices, scalar_tensor(value, TensorOptions(dtype()).device(device())));
}

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  if (in_graph(*this, &src, "scatter_"))
    return rebase(*this, [&](const Tensor& x) { return tandem::scatter(x, dim, index, src); });
  check_inplace(*this, "scatter_");
  check_no_overlap(*this, "scatter_");
  scatter_into(*this, dim, index, src, false, "scatter_");
  return *this;
}

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value) {
  if (in_graph(*this, nullptr, "scatter_"))
    return rebase(*this, [&](const Tensor& x) { return tandem::scatter(x, dim, index, value); });
  check_inplace(*this, "scatter_");
  check_no_overlap(*this, "scatter_");
  check_defined(index, "scatter_", "index");
  scatter_into(*this, dim, index, full(index.shape(), value, TensorOptions(dtype()).device(device())),
               false, "scatter_");
  return *this;
}

Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  if (in_graph(*this, &src, "scatter_add_"))
    return rebase(*this, [&](const Tensor& x) { return tandem::scatter_add(x, dim, index, src); });
  check_inplace(*this, "scatter_add_");
  check_no_overlap(*this, "scatter_add_");
  scatter_into(*this, dim, index, src, true, "scatter_add_");
  return *this;
}

Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  if (in_graph(*this, &source, "index_add_"))
    return rebase(*this,
                  [&](const Tensor& x) { return tandem::index_add(x, dim, index, source, alpha); });
  check_inplace(*this, "index_add_");
  check_no_overlap(*this, "index_add_");
  index_add_into(*this, dim, index, source, alpha, "index_add_");
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_fill_value(value, dtype(), "fill_");
  if (in_graph(*this, nullptr, "fill_"))  // the old value gets a zero gradient (FillBackward)
    return rebase(*this, [&](const Tensor& x) {
      return tandem::where(scalar_tensor(true, TensorOptions(DType::boolean).device(device())),
                           value, x);
    });
  check_inplace(*this, "fill_");
  kernels::fill(*this, value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined(*this, "copy_", "self");
  check_defined(src, "copy_", "source");
  check_broadcasts_to(src, shape(), "copy_", "source");
  if (in_graph(*this, &src, "copy_"))  // differentiable in src; self's old value gets nothing
    return write_recorded(*this, src.to(device()).to(dtype()).expand(shape()));
  check_inplace(*this, "copy_");
  check_no_overlap(*this, "copy_");
  Tensor from = src.device() == device() ? src : src.to(device());
  // Another view of this memory is read whole first (torch refuses it; the copy is its value).
  if (reads_through_another_view(*this, from)) from = from.clone();
  kernels::copy(*this, broadcast_view(from, shape()));
  return *this;
}

namespace {
// The recorded op of an in-place unary kernel op, for rebase.
Tensor recorded_unary(kernels::UnaryOp op, const kernels::OpArgs& args, const Tensor& x,
                      const char* name) {
  using kernels::UnaryOp;
  switch (op) {
    case UnaryOp::add_scalar: return tandem::add(x, args.a);
    case UnaryOp::mul_scalar: return tandem::mul(x, args.a);
    case UnaryOp::pow_scalar: return tandem::pow(x, args.a);
    case UnaryOp::clamp: return tandem::clamp(x, args.a, args.b);
    case UnaryOp::relu: return tandem::relu(x);
    case UnaryOp::sigmoid: return tandem::sigmoid(x);
    case UnaryOp::tanh: return tandem::tanh(x);
    case UnaryOp::exp: return tandem::exp(x);
    case UnaryOp::log: return tandem::log(x);
    case UnaryOp::log1p: return tandem::log1p(x);
    case UnaryOp::expm1: return tandem::expm1(x);
    case UnaryOp::sqrt: return tandem::sqrt(x);
    case UnaryOp::rsqrt: return tandem::rsqrt(x);
    case UnaryOp::sin: return tandem::sin(x);
    case UnaryOp::cos: return tandem::cos(x);
    case UnaryOp::neg: return tandem::neg(x);
    case UnaryOp::abs: return tandem::abs(x);
    case UnaryOp::reciprocal: return tandem::reciprocal(x);
    case UnaryOp::tan: return tandem::tan(x);
    case UnaryOp::atan: return tandem::atan(x);
    case UnaryOp::erf: return tandem::erf(x);
    case UnaryOp::log2: return tandem::log2(x);
    case UnaryOp::log10: return tandem::log10(x);
    case UnaryOp::floor: return tandem::floor(x);
    case UnaryOp::ceil: return tandem::ceil(x);
    case UnaryOp::round: return tandem::round(x);
    case UnaryOp::trunc: return tandem::trunc(x);
    case UnaryOp::sign: return tandem::sign(x);
    default:
      TANDEM_THROW(NotImplementedError, name,
                   ": in place on a tensor in the autograd graph is not supported for this op; "
                   "use the out-of-place op");
  }
}

// this = op(this, args), one kernel; `floating_result` (for `why`) is refused on an integer
// tensor. In a graph, the recorded op's result is written in (rebase).
Tensor& unary_inplace(Tensor& self, kernels::UnaryOp op, const kernels::OpArgs& args,
                      bool floating_result, const char* name, const char* why) {
  check_defined(self, name, "self");
  check_integer_result(self, floating_result, name, why);
  check_not_bool_for(op, self, name);
  if (in_graph(self, nullptr, name))
    return rebase(self, [&](const Tensor& x) { return recorded_unary(op, args, x, name); });
  check_inplace(self, name);
  check_no_overlap(self, name);
  kernels::unary.at(self, name);
  kernels::unary(self, op, args, self);
  return self;
}

// An in-place op with a number (add_, mul_, pow_, ...): torch's promotion must keep self's dtype.
Tensor& scalar_inplace(Tensor& self, kernels::UnaryOp op, const Scalar& value, const char* name) {
  TANDEM_CHECK(!self.defined() || self.dtype() != DType::boolean, name,
               ": the result of a bool tensor with a number is i64 (as torch promotes it) and "
               "cannot be written into a bool tensor in place");
  return unary_inplace(self, op, {value.toDouble()}, value.isFloatingPoint(), name,
                       "the number is floating point (its result is f32)");
}

// this = op(this, other): one kernel writing into this where writes_in_place allows, else the
// out-of-place op's result (out_of_place(this, other)) copied in; in a graph, recorded (rebase).
template <typename OutOfPlace>
Tensor& tensor_inplace(Tensor& self, const Tensor& other, kernels::BinaryOp op,
                       const kernels::OpArgs& args, const char* name, OutOfPlace out_of_place,
                       bool direct = true) {
  check_defined(self, name, "self");
  check_defined(other, name, "other");
  const bool recorded = in_graph(self, &other, name);
  if (!recorded) {
    check_inplace(self, name);
    check_no_overlap(self, name);
  }
  const Tensor on = beside(other, {&self});  // a 0-dim CPU tensor is a number here too
  check_same_device(self, on, name);
  // The result is computed in the promoted dtype and must convert back to self's, as torch's
  // rule: no floating result into an integer tensor, no non-bool one into a bool tensor.
  DType result = result_type(self, on);
  if (op == kernels::BinaryOp::div && !is_floating(result)) result = DType::f32;
  TANDEM_CHECK((self.is_floating_point() || !is_floating(result)) &&
                   (self.dtype() != DType::boolean || result == DType::boolean),
               name, ": the result type ", result, " (", self.dtype(), " with ", on.dtype(),
               ") cannot be written into a ", self.dtype(), " tensor in place");
  if (recorded) {
    // An operand in self's memory is read before the write (its clone keeps its history).
    const Tensor operand = on.storage().is_same(self.storage()) ? on.clone() : on;
    return rebase(self, [&](const Tensor& x) { return out_of_place(x, operand); });
  }
  NoGradGuard guard;
  if (!direct || !writes_in_place(self, on)) return self.copy_(out_of_place(self, on));
  kernels::binary.at(self, name);
  kernels::binary(self, op, args, self, broadcast_view(on, self.shape()));
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (defined() && other.defined()) check_alpha(alpha, dtype(), other.dtype(), "add_");
  return tensor_inplace(*this, other, kernels::BinaryOp::add, {alpha}, "add_",
                        [&](const Tensor& x, const Tensor& o) { return tandem::add(x, o, alpha); });
}

Tensor& Tensor::add_(Scalar value) {
  return scalar_inplace(*this, kernels::UnaryOp::add_scalar, value, "add_");
}

Tensor& Tensor::mul_(Scalar value) {
  return scalar_inplace(*this, kernels::UnaryOp::mul_scalar, value, "mul_");
}

namespace {
// self = f(self) for an op with no kernel of its own in place: f's result (out of place) copied
// in, or in a graph recorded (rebase). `other`: an operand that may require grad.
template <typename F>
Tensor& replace_inplace(Tensor& self, const Tensor* other, const char* name, F f) {
  check_defined(self, name, "self");
  if (in_graph(self, other, name)) return rebase(self, f);
  check_inplace(self, name);
  check_no_overlap(self, name);
  const Tensor result = f(self);
  NoGradGuard guard;
  return self.copy_(result);
}
}  // namespace

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return replace_inplace(*this, nullptr, "masked_fill_",
                         [&](const Tensor& x) { return x.masked_fill(mask, value); });
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value) {
  return replace_inplace(*this, &value, "masked_fill_",
                         [&](const Tensor& x) { return x.masked_fill(mask, value); });
}

Tensor& Tensor::erfinv_() {
  check_defined(*this, "erfinv_", "self");
  check_integer_result(*this, true, "erfinv_", "the op's result is floating point");
  return replace_inplace(*this, nullptr, "erfinv_",
                         [](const Tensor& x) { return tandem::erfinv(x); });
}

Tensor& Tensor::nan_to_num_(std::optional<double> nan, std::optional<double> posinf,
                            std::optional<double> neginf) {
  return replace_inplace(*this, nullptr, "nan_to_num_", [&](const Tensor& x) {
    return tandem::nan_to_num(x, nan, posinf, neginf);
  });
}

Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source) {
  return replace_inplace(*this, &source, "index_copy_", [&](const Tensor& x) {
    return tandem::index_copy(x, dim, index, source);
  });
}

Tensor& Tensor::masked_scatter_(const Tensor& mask, const Tensor& source) {
  check_defined(*this, "masked_scatter_", "self");
  check_defined(mask, "masked_scatter_", "mask");
  check_broadcasts_to(mask, shape(), "masked_scatter_", "mask");
  return replace_inplace(*this, &source, "masked_scatter_",
                         [&](const Tensor& x) { return tandem::masked_scatter(x, mask, source); });
}

Tensor& Tensor::scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src,
                                const std::string& reduce, bool include_self) {
  return replace_inplace(*this, &src, "scatter_reduce_", [&](const Tensor& x) {
    return tandem::scatter_reduce(x, dim, index, src, reduce, include_self);
  });
}

Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, double value) {
  return add_(tandem::mul(t1, t2), value);
}
Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, double value) {
  check_addcdiv(t1, t2, "addcdiv_");
  return add_(tandem::div(t1, t2), value);
}
Tensor& Tensor::lerp_(const Tensor& end, double weight) {
  return replace_inplace(*this, &end, "lerp_",
                         [&](const Tensor& x) { return tandem::lerp(x, end, weight); });
}

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  TANDEM_CHECK(min || max, "clamp_: at least one of min and max must be given");
  const bool fractional = floating_bound(min, max);
  // A fractional bound on bool is refused by unary_inplace's integer check, as on any integer.
  TANDEM_CHECK(fractional || !defined() || dtype() != DType::boolean,
               "clamp_: the result of clamping bool is i64 (as torch promotes it) and cannot be "
               "written into a bool tensor in place");
  if (nan_bound(min, max)) {
    check_integer_result(*this, true, "clamp_", "a bound is NaN");
    return fill_(std::nan(""));  // a NaN bound makes every element NaN, as torch's
  }
  return unary_inplace(*this, kernels::UnaryOp::clamp,
                       {min.value_or(-std::numeric_limits<double>::infinity()),
                        max.value_or(std::numeric_limits<double>::infinity())},
                       fractional, "clamp_", "a bound is floating point (the result is f32)");
}

namespace {
// An in-place unary op of libtorch's: the op's kernel over this tensor.
Tensor& math_inplace(Tensor& self, kernels::UnaryOp op, const char* name,
                     kernels::OpArgs args = {}) {
  return unary_inplace(self, op, args, kernels::needs_floating(op), name,
                       "the op's result is floating point");
}
}  // namespace

Tensor& Tensor::relu_() { return math_inplace(*this, kernels::UnaryOp::relu, "relu_"); }
Tensor& Tensor::sigmoid_() { return math_inplace(*this, kernels::UnaryOp::sigmoid, "sigmoid_"); }
Tensor& Tensor::tanh_() { return math_inplace(*this, kernels::UnaryOp::tanh, "tanh_"); }
namespace {
// This tensor takes `view`'s shape and strides (a view of it, so of its storage and offset).
Tensor& take_view(Tensor& t, const Tensor& view, const char* op) {
  TANDEM_CHECK(!t.requires_grad(), op,
               ": changes the shape of a tensor that requires grad, "
               "whose history and gradient have the old one; use the out-of-place view");
  TensorImpl& impl = *t.impl();
  impl.shape = view.shape();
  impl.strides = view.strides();
  return t;
}
}  // namespace

Tensor& Tensor::unsqueeze_(int64_t dim) { return take_view(*this, unsqueeze(dim), "unsqueeze_"); }
Tensor& Tensor::squeeze_() { return take_view(*this, squeeze(), "squeeze_"); }
Tensor& Tensor::squeeze_(int64_t dim) { return take_view(*this, squeeze(dim), "squeeze_"); }
Tensor& Tensor::t_() { return take_view(*this, t(), "t_"); }
Tensor& Tensor::transpose_(int64_t dim0, int64_t dim1) {
  return take_view(*this, transpose(dim0, dim1), "transpose_");
}

Tensor& Tensor::exp_() { return math_inplace(*this, kernels::UnaryOp::exp, "exp_"); }
Tensor& Tensor::log_() { return math_inplace(*this, kernels::UnaryOp::log, "log_"); }
Tensor& Tensor::log1p_() { return math_inplace(*this, kernels::UnaryOp::log1p, "log1p_"); }
Tensor& Tensor::sqrt_() { return math_inplace(*this, kernels::UnaryOp::sqrt, "sqrt_"); }
Tensor& Tensor::rsqrt_() { return math_inplace(*this, kernels::UnaryOp::rsqrt, "rsqrt_"); }
Tensor& Tensor::sin_() { return math_inplace(*this, kernels::UnaryOp::sin, "sin_"); }
Tensor& Tensor::cos_() { return math_inplace(*this, kernels::UnaryOp::cos, "cos_"); }
Tensor& Tensor::floor_() { return math_inplace(*this, kernels::UnaryOp::floor, "floor_"); }
Tensor& Tensor::ceil_() { return math_inplace(*this, kernels::UnaryOp::ceil, "ceil_"); }
Tensor& Tensor::round_() { return math_inplace(*this, kernels::UnaryOp::round, "round_"); }
Tensor& Tensor::pow_(Scalar exponent) {
  TANDEM_CHECK(!defined() || is_floating_point() || exponent >= 0,
               "pow_: integers to negative integer powers are not allowed (", dtype(),
               " to the power ", exponent, ")");
  return scalar_inplace(*this, kernels::UnaryOp::pow_scalar, exponent, "pow_");
}
Tensor& Tensor::expm1_() { return math_inplace(*this, kernels::UnaryOp::expm1, "expm1_"); }
Tensor& Tensor::tan_() { return math_inplace(*this, kernels::UnaryOp::tan, "tan_"); }
Tensor& Tensor::atan_() { return math_inplace(*this, kernels::UnaryOp::atan, "atan_"); }
Tensor& Tensor::erf_() { return math_inplace(*this, kernels::UnaryOp::erf, "erf_"); }
Tensor& Tensor::log2_() { return math_inplace(*this, kernels::UnaryOp::log2, "log2_"); }
Tensor& Tensor::log10_() { return math_inplace(*this, kernels::UnaryOp::log10, "log10_"); }
Tensor& Tensor::reciprocal_() {
  return math_inplace(*this, kernels::UnaryOp::reciprocal, "reciprocal_");
}
Tensor& Tensor::trunc_() { return math_inplace(*this, kernels::UnaryOp::trunc, "trunc_"); }
Tensor& Tensor::neg_() {
  check_no_bool(*this, "neg_");
  return math_inplace(*this, kernels::UnaryOp::neg, "neg_");
}
Tensor& Tensor::abs_() { return math_inplace(*this, kernels::UnaryOp::abs, "abs_"); }
Tensor& Tensor::sign_() { return math_inplace(*this, kernels::UnaryOp::sign, "sign_"); }

Tensor& Tensor::mul_(const Tensor& other) {
  return tensor_inplace(*this, other, kernels::BinaryOp::mul, {}, "mul_",
                        [](const Tensor& x, const Tensor& o) { return tandem::mul(x, o); });
}

Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  if (defined() && other.defined()) check_alpha(alpha, dtype(), other.dtype(), "sub_");
  check_no_bool(*this, "sub_");
  check_no_bool(other, "sub_");
  return tensor_inplace(*this, other, kernels::BinaryOp::add, {-alpha}, "sub_",
                        [&](const Tensor& x, const Tensor& o) { return tandem::sub(x, o, alpha); });
}

Tensor& Tensor::sub_(Scalar value) {
  check_no_bool(*this, "sub_");
  return scalar_inplace(*this, kernels::UnaryOp::add_scalar, -value, "sub_");
}

Tensor& Tensor::div_(Scalar value) {
  check_defined(*this, "div_", "self");
  check_integer_result(*this, true, "div_", "true division");
  return scalar_inplace(*this, kernels::UnaryOp::mul_scalar, 1.0 / value, "div_");
}

Tensor& Tensor::div_(const Tensor& other, std::optional<std::string_view> mode) {
  if (!mode) return div_(other);
  check_defined(*this, "div_", "self");
  check_defined(other, "div_", "other");
  // The quotient (which checks the operands) computed first, then written back, so a refused
  // division writes nothing.
  return tensor_inplace(
      *this, other, kernels::BinaryOp::div_floor, {}, "div_",
      [&](const Tensor& x, const Tensor& o) { return tandem::div(x, o, mode); },
      /*direct=*/false);
}
Tensor& Tensor::div_(Scalar other, std::optional<std::string_view> mode) {
  check_defined(*this, "div_", "self");
  return div_(scalar_operand(*this, other), mode);
}
Tensor& Tensor::floor_divide_(const Tensor& other) { return div_(other, "floor"); }
Tensor& Tensor::floor_divide_(Scalar other) { return div_(other, "floor"); }

Tensor& Tensor::div_(const Tensor& other) {
  check_defined(*this, "div_", "self");
  check_integer_result(*this, true, "div_", "true division");
  return tensor_inplace(*this, other, kernels::BinaryOp::div, {}, "div_",
                        [](const Tensor& x, const Tensor& o) { return tandem::div(x, o); });
}

namespace {
// self = draw(options of the draws): the in-place samplers. They record nothing, so they refuse
// a tensor that requires grad. The draws are in self's dtype (f64 for integers), converted on
// the copy.
template <typename Draw>
Tensor& fill_with_draws(Tensor& self, const char* name, bool floating_only, Draw draw) {
  check_defined(self, name, "self");
  if (floating_only) check_floating(self, name, "tensor");
  check_inplace(self, name);
  check_no_overlap(self, name);
  NoGradGuard guard;
  const DType dt = self.is_floating_point() ? self.dtype() : DType::f64;
  return self.copy_(draw(TensorOptions(dt).device(self.device())));
}
}  // namespace

Tensor& Tensor::uniform_(double from, double to, Generator* gen) {
  TANDEM_CHECK(from <= to, "uniform_: expected from <= to, got [", from, ", ", to, ")");
  return fill_with_draws(*this, "uniform_", true, [&](TensorOptions o) {
    const Tensor u = rand(shape(), o, gen);
    return to - from == 1.0 && from == 0.0 ? u : tandem::add(tandem::mul(u, to - from), from);
  });
}

Tensor& Tensor::normal_(double mean, double std, Generator* gen) {
  TANDEM_CHECK(std >= 0, "normal_: expected std >= 0, got ", std);
  return fill_with_draws(*this, "normal_", true, [&](TensorOptions o) {
    const Tensor n = randn(shape(), o, gen);
    return std == 1.0 && mean == 0.0 ? n : tandem::add(tandem::mul(n, std), mean);
  });
}

Tensor& Tensor::bernoulli_(double p, Generator* gen) {
  TANDEM_CHECK(p >= 0 && p <= 1, "bernoulli_: expected 0 <= p <= 1, got ", p);
  return fill_with_draws(*this, "bernoulli_", false,
                         [&](TensorOptions o) { return tandem::lt(rand(shape(), o, gen), p); });
}

Tensor& Tensor::bernoulli_(const Tensor& p, Generator* gen) {
  check_defined(p, "bernoulli_", "p");
  check_broadcasts_to(p, shape(), "bernoulli_", "p");
  check_same_device(*this, p, "bernoulli_");
  return fill_with_draws(*this, "bernoulli_", false, [&](TensorOptions o) {
    // The probabilities' check as bernoulli's (a host read).
    return tandem::bernoulli(p.detach().to(o.dtype()).expand(shape()), gen);
  });
}

Tensor& Tensor::exponential_(double lambd, Generator* gen) {
  TANDEM_CHECK(lambd > 0, "exponential_: expected lambd > 0, got ", lambd);
  return fill_with_draws(*this, "exponential_", true, [&](TensorOptions o) {
    return tandem::div(tandem::neg(tandem::log1p(tandem::neg(rand(shape(), o, gen)))), lambd);
  });
}

Tensor& Tensor::geometric_(double p, Generator* gen) {
  TANDEM_CHECK(p > 0 && p < 1, "geometric_: expected 0 < p < 1, got ", p);
  return fill_with_draws(*this, "geometric_", false, [&](TensorOptions o) {
    // ceil(log(1 - u) / log(1 - p)), at least 1 (u = 0 would give 0).
    const Tensor trials = tandem::ceil(
        tandem::div(tandem::log1p(tandem::neg(rand(shape(), o, gen))), std::log1p(-p)));
    return tandem::clamp(trials, Scalar(1.0), std::nullopt);
  });
}

Tensor& Tensor::log_normal_(double mean, double std, Generator* gen) {
  TANDEM_CHECK(std > 0, "log_normal_: expected std > 0, got ", std);
  return fill_with_draws(*this, "log_normal_", true, [&](TensorOptions o) {
    return tandem::exp(tandem::add(tandem::mul(randn(shape(), o, gen), std), mean));
  });
}

Tensor& Tensor::cauchy_(double median, double sigma, Generator* gen) {
  TANDEM_CHECK(sigma > 0, "cauchy_: expected sigma > 0, got ", sigma);
  return fill_with_draws(*this, "cauchy_", true, [&](TensorOptions o) {
    const Tensor angle = tandem::mul(tandem::sub(rand(shape(), o, gen), 0.5), M_PI);
    return tandem::add(tandem::mul(tandem::tan(angle), sigma), median);
  });
}

namespace {
// One past the largest integer `t` holds exactly (torch's bound for random_ without one); for
// i64, 2^63 - 1 itself (one past does not fit).
int64_t random_bound(DType t) {
  switch (t) {
    case DType::f32: return (int64_t{1} << 24) + 1;
    case DType::f64: return (int64_t{1} << 53) + 1;
    case DType::f16: return (int64_t{1} << 11) + 1;
    case DType::bf16: return (int64_t{1} << 8) + 1;
    case DType::i32: return int64_t{2147483647} + 1;
    case DType::u8: return 256;
    case DType::boolean: return 2;
    case DType::i64: break;
  }
  return std::numeric_limits<int64_t>::max();
}
}  // namespace

Tensor& Tensor::random_(int64_t from, std::optional<int64_t> to, Generator* gen) {
  const int64_t end = to ? *to : random_bound(dtype());
  TANDEM_CHECK(from < end, "random_: expected from < to, got [", from, ", ", end, ")");
  TANDEM_CHECK(dtype() != DType::boolean || (from >= 0 && end <= 2),
               "random_: a bool tensor takes values in [0, 2), got [", from, ", ", end, ")");
  return fill_with_draws(*this, "random_", false, [&](TensorOptions o) {
    return randint(from, end, shape(), TensorOptions(DType::i64).device(o.device()), gen);
  });
}

Tensor& Tensor::random_(int64_t to, Generator* gen) { return random_(0, to, gen); }
Tensor& Tensor::random_(Generator* gen) { return random_(0, std::nullopt, gen); }

// --- autograd state ------------------------------------------------------------------------

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  TANDEM_CHECK(!requires_grad || is_floating(dtype()),
               "requires_grad: only floating tensors can require gradients, got dtype ", dtype());
  if (requires_grad && !is_leaf()) return *this;  // a result of the graph already does
  TANDEM_CHECK(is_leaf(), "requires_grad: can only be changed on leaf tensors (this one comes "
                          "from ", grad_fn()->name(), "); use detach() first");
  impl()->requires_grad = requires_grad;
  return *this;
}

}  // namespace tandem
