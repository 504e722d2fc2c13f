// Tensor factories.
#include <cmath>

#include "common.hpp"
#include "tandem/core/generator.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem {
using namespace ops_detail;

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (size_t i = 0; i < shape.size(); ++i)
    TANDEM_CHECK(shape[i] >= 0, op, ": negative size ", shape[i], " at dim ", i, " of shape ",
                 shape_str(shape));
}

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

// Creates on the CPU, then moves when the options ask for a GPU.
Tensor on_device(Tensor cpu_tensor, const TensorOptions& o) {
  return finish(o.device_.is_cpu() ? cpu_tensor : cpu_tensor.to(o.device_), o);
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions o) {
  check_shape(shape, "empty");
  int64_t n = numel_of(shape);
  Storage storage(static_cast<size_t>(n * element_size(o.dtype_)), o.device_);
  return finish(make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, o.dtype_), o);
}

Tensor full(const Shape& shape, double value, TensorOptions o) {
  if (o.device_.is_cuda() && o.dtype_ == DType::f32) {  // filled in place on the GPU
    Tensor t = empty(shape, o.requires_grad(false));
    cuda::fill_f32(t.data_ptr<float>(), static_cast<size_t>(t.numel()), static_cast<float>(value),
                   o.device_.index());
    return finish(t, o);
  }
  Tensor t = empty(shape, o.requires_grad(false).device(kCPU));
  kernels::cpu::fill(t, value);
  return on_device(t, o);
}

Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }
Tensor scalar_tensor(double value, TensorOptions o) { return full({}, value, o); }

Tensor arange(double end, TensorOptions o) { return arange(0, end, 1, o); }

Tensor arange(double start, double end, double step, TensorOptions o) {
  TANDEM_CHECK(step != 0, "arange: step must be nonzero");
  TANDEM_CHECK((end - start) / step >= 0, "arange: upper bound and step are inconsistent (start ",
               start, ", end ", end, ", step ", step, ")");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({n}, DType::f64);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * step;
  return on_device(t.to(o.dtype_), o);
}

namespace {
Tensor random_tensor(const Shape& shape, TensorOptions o, Generator* gen, const char* op,
                     int64_t words_per_element,
                     void (*fill)(const Tensor&, uint64_t, uint64_t)) {
  check_shape(shape, op);
  TANDEM_CHECK(is_floating(o.dtype_), op, ": expected a floating dtype, got ", o.dtype_);
  DType cdt = compute_dtype(o.dtype_);
  Tensor t = empty(shape, cdt);
  // Four 32-bit words per Philox counter.
  auto [seed, offset] =
      (gen ? *gen : default_generator()).reserve((t.numel() * words_per_element + 3) / 4);
  fill(t, seed, offset);
  return on_device(t.to(o.dtype_), o);
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  int64_t words = compute_dtype(o.dtype_) == DType::f64 ? 2 : 1;
  return random_tensor(shape, o, gen, "rand", words, kernels::cpu::uniform);
}

Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  return random_tensor(shape, o, gen, "randn", 2, kernels::cpu::normal);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o, Generator* gen) {
  check_shape(shape, "randint");
  TANDEM_CHECK(high > low, "randint: expected low < high, got low = ", low, ", high = ", high);
  TANDEM_CHECK(o.dtype_ != DType::boolean, "randint: bool is not an integer dtype");
  Tensor t = empty(shape, is_floating(o.dtype_) ? DType::f64 : o.dtype_);
  auto [seed, offset] = (gen ? *gen : default_generator()).reserve((t.numel() * 2 + 3) / 4);
  kernels::cpu::randint(t, low, high, seed, offset);
  return on_device(t.to(o.dtype_), o);
}

namespace {
TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }
}  // namespace
Tensor empty_like(const Tensor& t) { return empty(t.shape(), like(t)); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), like(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), like(t)); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, like(t)); }

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                 std::function<void(void*)> deleter) {
  check_shape(shape, "from_blob");
  TANDEM_CHECK(data != nullptr || numel_of(shape) == 0, "from_blob: null data pointer");
  size_t nbytes = static_cast<size_t>(numel_of(shape) * element_size(dtype));
  return make_tensor(Storage::from_blob(data, nbytes, device, std::move(deleter)), shape,
                     contiguous_strides(shape), 0, dtype);
}

}  // namespace tandem
