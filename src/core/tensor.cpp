// Tensor's metadata, conversions, element access and in-place methods; most methods forward to
// the functional ops.
#include "tandem/core/tensor.hpp"

#include <Eigen/Core>
#include <cstring>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
#include "tandem/cuda/runtime.hpp"
#include "tandem/kernels/cpu.hpp"
#include "tandem/ops.hpp"

namespace tandem {

Tensor make_tensor(Storage storage, Shape shape, Shape strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t dim) const { return shape()[wrap_dim(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const {
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
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

void* Tensor::raw_data() const {
  return static_cast<char*>(storage().data()) + storage_offset() * element_size();
}

namespace {
void check_cpu_access(const Tensor& t, const char* what) {
  TANDEM_CHECK(t.is_cpu(), what, ": needs a CPU tensor, got one on ", t.device(),
               " (call .cpu() first)");
}
}  // namespace

template <typename T>
T Tensor::item() const {
  TANDEM_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements (shape ",
               shape_str(shape()), ") cannot be converted to a scalar");
  Tensor c = cpu().to(dtype_of<T>::value);
  return *static_cast<const T*>(c.raw_data());
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

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  check_cpu_access(*this, "to(dtype)");
  Tensor out = empty(shape(), TensorOptions(dtype).device(device()));
  kernels::cpu::copy(out, *this);
  if (is_floating(dtype) && is_floating(this->dtype())) {
    DType from = this->dtype();
    autograd::record("to_dtype", {*this}, out,
                     [from](const Tensor& g) -> std::vector<Tensor> { return {g.to(from)}; });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), TensorOptions(dtype()).device(device));
  cuda::copy_bytes(out.raw_data(), device, src.raw_data(), src.device(),
                   static_cast<size_t>(numel() * element_size()));
  Device from = this->device();
  autograd::record("to_device", {*this}, out,
                   [from](const Tensor& g) -> std::vector<Tensor> { return {g.to(from)}; });
  return out;
}

Tensor Tensor::to(Device device, DType dtype) const { return to(device).to(dtype); }

Tensor Tensor::clone() const {
  check_cpu_access(*this, "clone");
  Tensor out = empty(shape(), TensorOptions(dtype()).device(device()));
  kernels::cpu::copy(out, *this);
  autograd::record("clone", {*this}, out,
                   [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

// --- views and math forwarded to the functional API -------------------------------------

Tensor Tensor::reshape(const Shape& s) const { return tandem::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return tandem::view(*this, s); }
Tensor Tensor::permute(const Shape& dims) const { return tandem::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return tandem::transpose(*this, d0, d1); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return tandem::slice(*this, dim, start, end, step);
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
Tensor Tensor::sum() const { return tandem::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return tandem::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return tandem::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return tandem::mean(*this, dims, keepdim);
}
Tensor Tensor::exp() const { return tandem::exp(*this); }
Tensor Tensor::log() const { return tandem::log(*this); }
Tensor Tensor::sqrt() const { return tandem::sqrt(*this); }
Tensor Tensor::abs() const { return tandem::abs(*this); }
Tensor Tensor::relu() const { return tandem::relu(*this); }
Tensor Tensor::pow(double e) const { return tandem::pow(*this, e); }
Tensor Tensor::matmul(const Tensor& other) const { return tandem::matmul(*this, other); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return tandem::argmax(*this, dim, keepdim); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return div(full_like(b, a), b); }
Tensor operator-(const Tensor& a) { return neg(a); }

// --- in place ------------------------------------------------------------------------------

namespace {
// In-place writes would silently corrupt what autograd saved, so they are refused on tensors
// that take part in a graph, as torch refuses them on leaves that require grad.
void check_inplace(const Tensor& t, const char* op) {
  TANDEM_CHECK(!grad_mode_enabled() || !t.requires_grad(), op,
               ": in-place operation on a tensor that requires grad; wrap it in a NoGradGuard "
               "or use the out-of-place op");
  check_cpu_access(t, op);
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  kernels::cpu::fill(*this, value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  TANDEM_CHECK(src.is_cpu(), "copy_: source is on ", src.device(), ", destination on cpu");
  broadcast_shapes(shape(), src.shape(), "copy_");
  kernels::cpu::copy(*this, src.expand(shape()).detach());
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  NoGradGuard guard;
  return copy_(tandem::add(*this, other.to(dtype()), alpha));
}

Tensor& Tensor::mul_(double value) {
  check_inplace(*this, "mul_");
  NoGradGuard guard;
  return copy_(tandem::mul(*this, value));
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace(*this, "mul_");
  NoGradGuard guard;
  return copy_(tandem::mul(*this, other.to(dtype())));
}

// --- autograd --------------------------------------------------------------------------------

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  TANDEM_CHECK(!requires_grad || is_floating(dtype()),
               "requires_grad: only floating tensors can require gradients, got dtype ", dtype());
  TANDEM_CHECK(is_leaf(), "requires_grad: can only be changed on leaf tensors (this one comes "
                          "from ", grad_fn()->name(), "); use detach() first");
  impl()->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return checked()->grad ? Tensor(checked()->grad) : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined())
    TANDEM_CHECK(grad.shape() == shape(), "set_grad: gradient of shape ", shape_str(grad.shape()),
                 " for a tensor of shape ", shape_str(shape()));
  checked()->grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::run_backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl* i = checked();
  return make_tensor(i->storage, i->shape, i->strides, i->offset, i->dtype);
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) const {
  TANDEM_CHECK(is_leaf() && requires_grad(),
               "register_grad_ready_hook: only leaf tensors that require grad get ready hooks");
  checked()->ready_hooks.push_back(std::move(hook));
}

}  // namespace tandem
