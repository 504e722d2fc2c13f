// Tensor factories: constants, ranges, random tensors, and tensors over existing memory.
#pragma once

#include <functional>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "tandem/core/generator.hpp"
#include "tandem/core/tensor.hpp"

namespace tandem {

/// Uninitialized memory.
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
/// An integer fill value without a dtype in the options gives i64 (a bool, bool), as libtorch's
/// `full({2}, 7)`; `full({2}, 7.0)` is f32.
template <typename V, typename = std::enable_if_t<std::is_integral_v<V>>>
Tensor full(const Shape& shape, V value, TensorOptions options = {}) {
  if (!options.has_dtype())
    options = options.dtype(std::is_same_v<V, bool> ? DType::boolean : DType::i64);
  return full(shape, static_cast<double>(value), options);
}
/// The (row, column) positions of the lower (upper) triangle of a rows x cols matrix from
/// diagonal `offset` on, as a (2, N) i64 tensor in row-major order (torch.tril_indices).
Tensor tril_indices(int64_t row, int64_t col, int64_t offset = 0, TensorOptions options = {});
Tensor triu_indices(int64_t row, int64_t col, int64_t offset = 0, TensorOptions options = {});
/// A 0-dim tensor holding `value`.
Tensor scalar_tensor(double value, TensorOptions options = {});
/// [0, end) and [start, end) by step, as torch.arange: without a dtype in the options, i64 when
/// start, end and step are all integer numbers, else f32 (libtorch's inference from its
/// Scalars: `arange(5)` is i64, `arange(5.0)` f32). An integer dtype truncates the three first,
/// as libtorch's.
Tensor arange(Scalar end, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, TensorOptions options = {});
/// `steps` values evenly spaced from start to end, both included.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
/// Ones on the diagonal of an n x m (or n x n) matrix.
Tensor eye(int64_t n, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m, TensorOptions options = {});
/// What `tensor` takes, as libtorch's TensorDataContainer: a number (a 0-dim tensor), a braced
/// list of numbers or of lists nested to any depth (the lists at one depth all of one length),
/// or a std::vector of numbers. A braced list is always a list: `{{1.0}, {0.0}}` is (2, 1).
class TensorData {
 public:
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  TensorData(T value)  // NOLINT(google-explicit-constructor): `tensor(2.5)`, list elements
      : kind_(std::is_same_v<T, bool>       ? Kind::boolean
              : std::is_same_v<T, uint8_t>  ? Kind::byte
              : std::is_floating_point_v<T> ? Kind::floating
                                            : Kind::integer),
        values_{Value{static_cast<double>(value),
                      kind_ == Kind::floating ? 0 : static_cast<int64_t>(value)}} {}
  TensorData(std::initializer_list<TensorData> list);  // NOLINT: `tensor({{1, 2}, {3, 4}})`
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  TensorData(const std::vector<T>& values)  // NOLINT: `tensor(std::vector<float>{...})`
      : shape_{static_cast<int64_t>(values.size())}, kind_(TensorData(T{}).kind_) {
    values_.reserve(values.size());
    for (T v : values) values_.push_back(TensorData(v).values_[0]);
  }

  /// The tensor: i64 for integers, u8 for uint8_t, bool for bools, f32 when any number is
  /// floating (as torch.tensor), unless the options name a dtype; on the options' device.
  Tensor to_tensor(const TensorOptions& options) const;

 private:
  enum class Kind { boolean, byte, integer, floating };  // a list takes its widest element's
  struct Value {
    double real;
    int64_t integer;  // exact, for integers and bools
  };
  Shape shape_;
  Kind kind_;
  std::vector<Value> values_;
};

/// libtorch's torch::tensor: `tensor({1.5, 2.0})` is f32, `tensor({1, 2})` i64, `tensor({true,
/// false})` bool, `tensor({{1, 2}, {3, 4}})` a (2, 2) i64 matrix, `tensor(2.5)` 0-dim, unless
/// the options name a dtype (`tensor({1, 2}, kCUDA)` stays i64). On the options' device, a leaf
/// that requires grad when the options say so.
Tensor tensor(const TensorData& data, TensorOptions options = {});

/// Uniform in [0, 1), from Philox: the same seed gives the same values at any thread count.
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
/// rand and randn of t's shape, dtype and device (what `options` names instead: like_options).
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, TensorOptions options, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, TensorOptions options, Generator* gen = nullptr);
/// 1 with probability p (each element of p, in [0, 1]), else 0, in p's dtype.
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
/// torch::normal: mean + std * randn, of the broadcast shape of the tensor operands (or of
/// `size`), in their dtype and on their device. Their gradient is zeros, as torch's.
Tensor normal(const Tensor& mean, const Tensor& std, Generator* gen = nullptr);
Tensor normal(const Tensor& mean, double std = 1.0, Generator* gen = nullptr);
Tensor normal(double mean, const Tensor& std, Generator* gen = nullptr);
Tensor normal(double mean, double std, const Shape& size, Generator* gen = nullptr,
              TensorOptions options = {});
/// Standard normal (Box-Muller over Philox pairs).
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
/// Integers uniform in [low, high) (i64 unless the options name a dtype).
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = {},
               Generator* gen = nullptr);
/// Integers uniform in [0, high).
inline Tensor randint(int64_t high, const Shape& shape, TensorOptions options = {},
                      Generator* gen = nullptr) {
  return randint(0, high, shape, options, gen);
}
/// A random permutation of 0..n-1 (i64 unless the options name a dtype): the order that sorts
/// n uniform draws, so the same seed gives the same permutation on every device.
Tensor randperm(int64_t n, TensorOptions options = {}, Generator* gen = nullptr);
/// num_samples category indices per row of probs ((k) or (rows, k): nonnegative weights, not
/// necessarily summing to 1), i64. With replacement each draw inverts the row's cumulative
/// weights ((rows, num_samples, k) comparisons); without, the num_samples largest of p / q for
/// exponential q (torch's method), so no category repeats.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

/// A 1-d tensor of n elements, as libtorch's factories take a single size (`zeros(5)`,
/// `empty(batch.size(0), device)`). Templates, so that `zeros({})` stays a 0-dim tensor.
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor empty(I n, TensorOptions options = {}) {
  return empty(Shape{static_cast<int64_t>(n)}, options);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor zeros(I n, TensorOptions options = {}) {
  return zeros(Shape{static_cast<int64_t>(n)}, options);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor ones(I n, TensorOptions options = {}) {
  return ones(Shape{static_cast<int64_t>(n)}, options);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor full(I n, double value, TensorOptions options = {}) {
  return full(Shape{static_cast<int64_t>(n)}, value, options);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor rand(I n, TensorOptions options = {}, Generator* gen = nullptr) {
  return rand(Shape{static_cast<int64_t>(n)}, options, gen);
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor randn(I n, TensorOptions options = {}, Generator* gen = nullptr) {
  return randn(Shape{static_cast<int64_t>(n)}, options, gen);
}

/// t's shape, dtype and device, and its layout (torch's preserve_format: t's strides where it is
/// dense, as a transposed or channels-last tensor is; make_tensor_like); uninitialized, or
/// filled with zeros, ones or `value`. `options` names what differs from t, as libtorch's:
/// `zeros_like(x, kLong)`, `ones_like(x, x.options().dtype(kBool))`; a layout is kept only where
/// the device and dtype are t's.
Tensor empty_like(const Tensor& t, TensorOptions options = {});
Tensor zeros_like(const Tensor& t, TensorOptions options = {});
Tensor ones_like(const Tensor& t, TensorOptions options = {});
Tensor full_like(const Tensor& t, Scalar value, TensorOptions options = {});
/// t's dtype and device where `options` names none (the *_like factories, Tensor::new_zeros);
/// requires_grad as the options say.
TensorOptions like_options(const Tensor& t, const TensorOptions& options);
/// A copy (differentiable), as t.clone().
inline Tensor clone(const Tensor& t) { return t.clone(); }

/// A tensor over memory the caller owns (no copy). `deleter`, if given, runs when the last
/// tensor viewing it is gone; otherwise the memory must outlive every view.
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = kCPU,
                 std::function<void(void*)> deleter = {});
/// libtorch's forms: the options' dtype (f32 without one) and device (the CPU without one).
Tensor from_blob(void* data, const Shape& shape, const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter,
                 const TensorOptions& options = {});

/// A new CPU tensor holding a copy of `values` with the given shape (default: 1-D).
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {});
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  TANDEM_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "from_vector: ",
               values.size(), " values do not fill shape ", shape_str(shape));
  // On the CPU whatever the calling context's device: a GPU rank's thread would otherwise get
  // device memory here, written from the host.
  Tensor t = empty(shape, TensorOptions(dtype_of<T>::value).device(kCPU));
  T* dst = t.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
  return t;
}
/// std::vector<bool> is a bitset, so bool tensors are built element by element.
template <>
inline Tensor from_vector<bool>(const std::vector<bool>& values, Shape shape) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  TANDEM_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "from_vector: ",
               values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, TensorOptions(DType::boolean).device(kCPU));
  bool* dst = t.data_ptr<bool>();
  for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
  return t;
}

}  // namespace tandem
