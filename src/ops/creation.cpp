// Tensor factories.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "common.hpp"
#include "tandem/core/generator.hpp"

namespace tandem {
using namespace ops_detail;

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions o) {
  return finish(make_tensor(shape, o.dtype(), o.device()), o);
}

Tensor full(const Shape& shape, double value, TensorOptions o) {
  check_fill_value(value, o.dtype(), "full");
  Tensor t = make_tensor(shape, o.dtype(), o.device());
  kernels::fill(t, value);
  return finish(t, o);
}

Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }
Tensor scalar_tensor(double value, TensorOptions o) {
  check_fill_value(value, o.dtype(), "scalar_tensor");
  return full({}, value, o);
}

Tensor arange(Scalar end, TensorOptions o) { return arange(0, end, 1, o); }

Tensor arange(Scalar start_, Scalar end_, Scalar step_, TensorOptions o) {
  // Without a dtype, torch's inference: i64 for integer numbers, else the default float.
  const DType dt = o.has_dtype() ? o.dtype()
                   : start_.isIntegral(true) && end_.isIntegral(true) && step_.isIntegral(true)
                       ? DType::i64
                       : DType::f32;
  const bool integral = !is_floating(dt);
  auto value = [&](const Scalar& s) {
    return integral && fits_int64(s.toDouble()) ? std::trunc(s.toDouble()) : s.toDouble();
  };
  const double start = value(start_), end = value(end_), step = value(step_);
  TANDEM_CHECK(step != 0, "arange: step must be nonzero");
  TANDEM_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
               "arange: unsupported range ", start, " -> ", end, " (step ", step, ")");
  TANDEM_CHECK(fits_int64((end - start) / step), "arange: ", start, " -> ", end, " in steps of ",
               step, " has more elements than a tensor can address");
  TANDEM_CHECK((end - start) / step >= 0, "arange: upper bound and step are inconsistent (start ",
               start, ", end ", end, ", step ", step, ")");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = make_tensor({n}, dt, o.device());
  kernels::arange(t, start, step);
  return finish(t, o);
}

Tensor arange(Scalar start, Scalar end, TensorOptions o) { return arange(start, end, 1, o); }

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  TANDEM_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  // Both ends exact: the first half counts up from start, the second down from end, as torch.
  // In f32 for f32, f16 and bf16 and in f64 otherwise, as torch's kernel computes it.
  auto fill = [&](auto zero) {
    using C = decltype(zero);
    // (into a tensor: its allocation refuses a count no memory holds with tandem's errors)
    Tensor out = empty({steps}, TensorOptions(dtype_of<C>::value));
    C* values = out.data_ptr<C>();
    const C s = static_cast<C>(start), e = static_cast<C>(end);
    const C step = steps > 1 ? (e - s) / static_cast<C>(steps - 1) : C(0);
    for (int64_t i = 0; i < steps; ++i)
      values[i] = i < steps / 2 || steps == 1 ? s + step * static_cast<C>(i)
                                              : e - step * static_cast<C>(steps - 1 - i);
    return out;
  };
  const bool narrow = o.dtype() == DType::f32 || is_reduced_float(o.dtype());
  Tensor t = narrow ? fill(0.0f) : fill(0.0);
  return finish(t.to(o.device(), o.dtype()), o);
}

Tensor eye(int64_t n, int64_t m, TensorOptions o) {
  TANDEM_CHECK(n >= 0 && m >= 0, "eye: sizes must be >= 0, got ", n, " x ", m);
  const TensorOptions index = TensorOptions(DType::i64).device(o.device());
  Tensor t = eq(arange(n, index).unsqueeze(1), arange(m, index).unsqueeze(0)).to(o.dtype());
  return finish(t, o);
}

Tensor eye(int64_t n, TensorOptions o) { return eye(n, n, o); }

TensorData::TensorData(std::initializer_list<TensorData> list)
    : kind_(list.size() == 0 ? Kind::floating : Kind::boolean) {
  const TensorData* first = list.size() ? list.begin() : nullptr;
  shape_.push_back(static_cast<int64_t>(list.size()));
  if (first) shape_.insert(shape_.end(), first->shape_.begin(), first->shape_.end());
  int64_t row = 0;
  for (const TensorData& item : list) {
    TANDEM_CHECK(item.shape_ == first->shape_,
                 "tensor: the lists at one depth of a nested list "
                 "must have one shape; row ",
                 row, " has ", item.values_.size(), " values, row 0 has ", first->values_.size(),
                 " (shapes ", shape_str(item.shape_), " and ", shape_str(first->shape_), ")");
    kind_ = std::max(kind_, item.kind_);
    values_.insert(values_.end(), item.values_.begin(), item.values_.end());
    ++row;
  }
}

Tensor TensorData::to_tensor(const TensorOptions& o) const {
  Tensor t;
  if (kind_ == Kind::floating) {
    std::vector<double> v;
    for (const Value& x : values_) v.push_back(x.real);
    t = from_vector(v, shape_);
  } else if (kind_ == Kind::integer || kind_ == Kind::byte) {
    std::vector<int64_t> v;
    for (const Value& x : values_) v.push_back(x.integer);
    t = from_vector(v, shape_);
  } else {
    std::vector<bool> v;
    for (const Value& x : values_) v.push_back(x.integer != 0);
    t = from_vector(v, shape_);
  }
  // Without a dtype: f32 for floating values (torch's default), the values' own otherwise.
  const DType dt = o.has_dtype()             ? o.dtype()
                   : kind_ == Kind::floating ? DType::f32
                   : kind_ == Kind::byte     ? DType::u8
                                             : t.dtype();
  return finish(t.to(o.device(), dt), o);
}

Tensor tensor(const TensorData& data, TensorOptions o) { return data.to_tensor(o); }

Tensor rand_like(const Tensor& t, Generator* gen) {
  check_defined(t, "rand_like", "input");
  return rand(t.shape(), t.options(), gen);
}
Tensor randn_like(const Tensor& t, Generator* gen) {
  check_defined(t, "randn_like", "input");
  return randn(t.shape(), t.options(), gen);
}
Tensor rand_like(const Tensor& t, TensorOptions options, Generator* gen) {
  check_defined(t, "rand_like", "input");
  return rand(t.shape(), like_options(t, options), gen);
}
Tensor randn_like(const Tensor& t, TensorOptions options, Generator* gen) {
  check_defined(t, "randn_like", "input");
  return randn(t.shape(), like_options(t, options), gen);
}
Tensor bernoulli(const Tensor& p, Generator* gen) {
  check_defined(p, "bernoulli", "p");
  check_floating(p, "bernoulli", "p");
  NoGradGuard guard;
  // (read on the host: one wait on a GPU, as PyTorch's check of the same)
  TANDEM_CHECK(p.numel() == 0 || (min(p).item<double>() >= 0 && max(p).item<double>() <= 1),
               "bernoulli: every probability must be in [0, 1]");
  return lt(rand(p.shape(), p.options(), gen), p).to(p.dtype());
}

Tensor normal(const Tensor& mean, const Tensor& std, Generator* gen) {
  check_defined(mean, "normal", "mean");
  check_defined(std, "normal", "std");
  check_floating(mean, "normal", "mean");
  check_floating(std, "normal", "std");
  check_inputs({mean, std}, "normal");
  Tensor out;
  {
    NoGradGuard guard;
    // (read on the host: one wait on a GPU, as torch's check)
    TANDEM_CHECK(std.numel() == 0 || min(std).item<double>() >= 0,
                 "normal: expected every std >= 0");
    const Shape shape = broadcast_shapes(mean.shape(), std.shape(), "normal");
    const DType dtype = promote_types(mean.dtype(), std.dtype());
    out = add(mul(randn(shape, TensorOptions(dtype).device(mean.device()), gen), std), mean);
  }
  if (grad_mode_enabled() && (mean.requires_grad() || std.requires_grad()))
    autograd::record(
        "normal", {mean, std}, out,
        [mean_shape = mean.shape(), std_shape = std.shape()](const Tensor& g) {
          return std::vector<Tensor>{zeros(mean_shape, g.options()), zeros(std_shape, g.options())};
        });
  return out;
}
Tensor normal(const Tensor& mean, double std, Generator* gen) {
  check_defined(mean, "normal", "mean");
  return normal(mean, scalar_tensor(std, mean.options()), gen);
}
Tensor normal(double mean, const Tensor& std, Generator* gen) {
  check_defined(std, "normal", "std");
  return normal(scalar_tensor(mean, std.options()), std, gen);
}
Tensor normal(double mean, double std, const Shape& size, Generator* gen, TensorOptions options) {
  TANDEM_CHECK(std >= 0, "normal: expected std >= 0, got ", std);
  return add(mul(randn(size, options, gen), std), mean);
}

namespace {
// Element i draws Philox words from `words_per_element * i` on, so a tensor's values depend
// only on the generator's state and the element's index.
Tensor random_tensor(const Shape& shape, TensorOptions o, Generator* gen, int64_t words_per_element,
                     const std::function<void(const Tensor&, uint64_t, uint64_t)>& fill) {
  Tensor t = make_tensor(shape, o.dtype(), o.device());
  // Four 32-bit words per Philox counter.
  auto [seed, offset] =
      (gen ? *gen : default_generator()).reserve((t.numel() * words_per_element + 3) / 4);
  fill(t, seed, offset);
  return finish(t, o);
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  TANDEM_CHECK(is_floating(o.dtype()), "rand: expected a floating dtype, got ", o.dtype());
  int64_t words = o.dtype() == DType::f64 ? 2 : 1;
  return random_tensor(shape, o, gen, words, [](const Tensor& t, uint64_t seed, uint64_t offset) {
    kernels::uniform(t, seed, offset);
  });
}

Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  TANDEM_CHECK(is_floating(o.dtype()), "randn: expected a floating dtype, got ", o.dtype());
  return random_tensor(shape, o, gen, 2, [](const Tensor& t, uint64_t seed, uint64_t offset) {
    kernels::normal(t, seed, offset);
  });
}

namespace {
// The integers dtype dt holds, each exactly: its range, or a float's run of consecutive ones.
std::pair<int64_t, int64_t> exact_integers(DType dt) {
  switch (dt) {
    case DType::boolean: return {0, 1};
    case DType::u8: return {0, 255};
    case DType::i32: return {INT32_MIN, INT32_MAX};
    case DType::f16: return {-2048, 2048};
    case DType::bf16: return {-256, 256};
    case DType::f32: return {-(int64_t{1} << 24), int64_t{1} << 24};
    case DType::f64: return {-(int64_t{1} << 53), int64_t{1} << 53};
    default: return {INT64_MIN, INT64_MAX};
  }
}
}  // namespace

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o, Generator* gen) {
  TANDEM_CHECK(high > low, "randint: expected low < high, got low = ", low, ", high = ", high);
  if (!o.has_dtype()) o = o.dtype(DType::i64);  // torch's default for randint
  TANDEM_CHECK(o.dtype() != DType::boolean, "randint: bool is not an integer dtype");
  const auto [lo, hi] = exact_integers(o.dtype());
  TANDEM_CHECK(low >= lo && high - 1 <= hi, "randint: [", low, ", ", high, ") does not fit ",
               o.dtype(), ", which holds the integers ", lo, " to ", hi, " exactly");
  return random_tensor(shape, o, gen, 2, [&](const Tensor& t, uint64_t seed, uint64_t offset) {
    kernels::randint(t, low, high, seed, offset);
  });
}

Tensor randperm(int64_t n, TensorOptions o, Generator* gen) {
  TANDEM_CHECK(n >= 0, "randperm: n must be nonnegative, got ", n);
  if (!o.has_dtype()) o = o.dtype(DType::i64);
  TANDEM_CHECK(n <= 1 || n - 1 <= exact_integers(o.dtype()).second, "randperm: ", n,
               " positions do not fit ", o.dtype(), ", which holds the integers up to ",
               exact_integers(o.dtype()).second, " exactly");
  const Tensor keys = rand({n}, TensorOptions(DType::f64).device(o.device()), gen);
  return as_dtype(argsort(keys), o.dtype());
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  check_defined(probs, "multinomial", "probs");
  check_floating(probs, "multinomial", "probs");
  TANDEM_CHECK(probs.dim() == 1 || probs.dim() == 2, "multinomial: probs must be 1-d or 2-d, got ",
               shape_str(probs.shape()));
  TANDEM_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got ", num_samples);
  NoGradGuard guard;
  const Tensor p = as_dtype(probs.dim() == 1 ? probs.unsqueeze(0) : probs, DType::f64);
  const int64_t rows = p.size(0), k = p.size(1);
  TANDEM_CHECK(k > 0, "multinomial: probs has no categories");
  TANDEM_CHECK(replacement || num_samples <= k, "multinomial: cannot take ", num_samples,
               " samples of ", k, " categories without replacement");
  // (read on the host: one wait on a GPU, as PyTorch's checks of the same)
  TANDEM_CHECK(min(p).item<double>() >= 0 && std::isfinite(sum(p).item<double>()),
               "multinomial: probs must be finite and nonnegative");
  const double fewest = min(sum(gt(p, zeros({}, p.options())).to(DType::i64), {1})).item<double>();
  TANDEM_CHECK(fewest >= (replacement ? 1 : num_samples), "multinomial: a row of probs has ",
               fewest, " nonzero categories, ",
               replacement ? "none to sample" : "too few to sample without replacement");
  Tensor out;
  if (replacement) {
    const Tensor cdf = cumsum(p, 1);
    const Tensor u = mul(rand({rows, num_samples}, p.options(), gen), cdf.narrow(1, k - 1, 1));
    // The category is the number of cumulative weights at or below u, counted for chunks of
    // draws of about 2^22 comparisons each.
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / (rows * k));
    std::vector<Tensor> parts;
    for (int64_t s0 = 0; s0 < num_samples; s0 += chunk) {
      const Tensor draws = u.narrow(1, s0, std::min(chunk, num_samples - s0));
      parts.push_back(sum(le(cdf.unsqueeze(1), draws.unsqueeze(2)).to(DType::i64), {2}));
    }
    out = clamp(parts.size() == 1 ? parts[0] : cat(parts, 1), 0, k - 1);
  } else {
    const Tensor q = neg(log1p(neg(rand({rows, k}, p.options(), gen))));  // exponential(1)
    const Tensor keys =
        where(gt(p, zeros({}, p.options())), div(p, q), full({}, -1.0, p.options()));
    out = topk(keys, num_samples, 1).second;  // (a zero weight never wins, even where q is 0)
  }
  return probs.dim() == 1 ? out.squeeze(0) : out;
}

TensorOptions like_options(const Tensor& t, const TensorOptions& options) {
  return TensorOptions(options.dtype_.value_or(t.dtype()))
      .device(options.device_.value_or(t.device()))
      .requires_grad(options.requires_grad());
}

// The *_like tensors keep t's layout, as torch's preserve_format.
Tensor empty_like(const Tensor& t, TensorOptions options) {
  check_defined(t, "empty_like", "input");
  options = like_options(t, options);
  Tensor out = make_tensor_like(t, options.dtype(), options.device());
  if (options.requires_grad()) out.set_requires_grad(true);
  return out;
}
Tensor full_like(const Tensor& t, Scalar value, TensorOptions options) {
  check_defined(t, "full_like", "input");
  options = like_options(t, options);
  check_fill_value(value.toDouble(), options.dtype(), "full_like");
  Tensor out = make_tensor_like(t, options.dtype(), options.device());
  kernels::fill(out, value.toDouble());
  if (options.requires_grad()) out.set_requires_grad(true);
  return out;
}
Tensor zeros_like(const Tensor& t, TensorOptions options) { return full_like(t, 0, options); }
Tensor ones_like(const Tensor& t, TensorOptions options) { return full_like(t, 1, options); }

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                 std::function<void(void*)> deleter) {
  for (size_t i = 0; i < shape.size(); ++i)
    TANDEM_CHECK(shape[i] >= 0, "from_blob: negative size ", shape[i], " at dim ", i);
  const int64_t esize = static_cast<int64_t>(element_size(dtype));
  const int64_t numel = checked_numel(shape, "from_blob", esize);
  TANDEM_CHECK(data != nullptr || numel == 0, "from_blob: null data pointer");
  size_t nbytes = static_cast<size_t>(numel * esize);
  return make_tensor(Storage::from_blob(data, nbytes, device, std::move(deleter)), shape,
                     contiguous_strides(shape), 0, dtype);
}

Tensor from_blob(void* data, const Shape& shape, const TensorOptions& options) {
  return from_blob(data, shape, options.dtype(), options.device_.value_or(kCPU));
}
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter,
                 const TensorOptions& options) {
  return from_blob(data, shape, options.dtype(), options.device_.value_or(kCPU),
                   std::move(deleter));
}

}  // namespace tandem
