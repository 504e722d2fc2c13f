// The CUDA backend against the CPU backend: every op written once, run on both devices, the GPU
// result compared with the CPU's per dtype with a per-dtype tolerance. Without a GPU each case
// says it was skipped (and fails under TANDEM_REQUIRE_GPU=1, as scripts/gpu-check.sh runs it).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;
using tandem::testing::gpu_present;
using tandem::testing::require_close;

namespace {

const Device kGpu("cuda:0");
const std::vector<DType> kFloats{DType::f32, DType::f64, DType::f16, DType::bf16};

struct Tol {
  double rtol, atol;
};
// Elementwise results: a few units in the last place of each dtype (device math functions and
// the CPU's differ by an ulp or two; narrow dtypes round the same f32 value).
Tol tol(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f16: return {2e-3, 2e-3};
    case DType::bf16: return {1.6e-2, 1.6e-2};
    default: return {2e-6, 2e-6};
  }
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on the CPU inputs and on their GPU copies: the GPU's result, on the GPU, in the CPU result's
// dtype and shape, within `t` of it.
void same_on_gpu(const std::string& what, const std::vector<Tensor>& inputs, const Fn& f, Tol t) {
  INFO(what);
  Tensor expected = f(inputs);
  std::vector<Tensor> on_gpu;
  for (const Tensor& x : inputs) on_gpu.push_back(x.to(kGpu));
  Tensor got = f(on_gpu);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.dtype() == expected.dtype());
  require_close(got.cpu(), expected, t.rtol, t.atol, what);
}

Tensor randn_as(const Shape& shape, DType t, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::f64, &g).to(t);
}

}  // namespace

TEST_CASE("CUDA unary and binary ops match the CPU, with broadcasting and strided operands",
          "[cuda]") {
  if (!gpu_present("CUDA elementwise ops")) return;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    const Tol t = tol(dt);
    Tensor x = randn_as({4, 1, 5}, dt, 1), y = randn_as({3, 5}, dt, 2);
    Tensor pos = add(abs(x), 0.5);
    const std::vector<std::pair<const char*, Fn>> unary{
        {"neg", [](auto& v) { return neg(v[0]); }},
        {"exp", [](auto& v) { return exp(v[0]); }},
        {"abs", [](auto& v) { return abs(v[0]); }},
        {"sign", [](auto& v) { return sign(v[0]); }},
        {"relu", [](auto& v) { return relu(v[0]); }},
        {"sigmoid", [](auto& v) { return sigmoid(v[0]); }},
        {"tanh", [](auto& v) { return tanh(v[0]); }},
        {"gelu", [](auto& v) { return gelu(v[0]); }},
        {"gelu tanh", [](auto& v) { return gelu(v[0], "tanh"); }},
        {"clamp", [](auto& v) { return clamp(v[0], -0.5, 0.7); }},
        {"pow 3", [](auto& v) { return pow(v[0], 3.0); }},
        {"add scalar", [](auto& v) { return add(v[0], 1.25); }},
        {"mul scalar", [](auto& v) { return mul(v[0], -3.0); }},
        {"logical_not", [](auto& v) { return logical_not(gt(v[0], zeros_like(v[0]))); }},
        {"sin", [](auto& v) { return sin(v[0]); }},
        {"cos", [](auto& v) { return cos(v[0]); }},
        {"floor", [](auto& v) { return floor(mul(v[0], 3.0)); }},
        {"ceil", [](auto& v) { return ceil(mul(v[0], 3.0)); }},
        {"round", [](auto& v) { return round(mul(v[0], 3.0)); }},
        {"isnan", [](auto& v) { return isnan(log(v[0])); }},
        {"isinf",
         [](auto& v) { return isinf(div(v[0], gt(v[0], zeros_like(v[0])).to(v[0].dtype()))); }},
        {"expm1", [](auto& v) { return expm1(v[0]); }},
        {"tan", [](auto& v) { return tan(mul(v[0], 0.5)); }},
        {"atan", [](auto& v) { return atan(v[0]); }},
        {"erf", [](auto& v) { return erf(v[0]); }},
        {"silu", [](auto& v) { return silu(v[0]); }},
        {"elu", [](auto& v) { return elu(v[0], 0.7); }},
        {"selu", [](auto& v) { return selu(v[0]); }},
        {"softplus", [](auto& v) { return softplus(v[0], 2.0, 1.0); }},
        {"mish", [](auto& v) { return mish(v[0]); }},
        {"hardswish", [](auto& v) { return hardswish(mul(v[0], 3.0)); }},
        {"hardsigmoid", [](auto& v) { return hardsigmoid(mul(v[0], 3.0)); }},
        {"log_sigmoid", [](auto& v) { return log_sigmoid(mul(v[0], 4.0)); }},
        {"hardtanh", [](auto& v) { return hardtanh(v[0], -0.5, 0.8); }},
        {"trunc", [](auto& v) { return trunc(mul(v[0], 3.0)); }},
        {"tril", [](auto& v) { return tril(v[0], 1); }},
    };
    // And of a transposed input: the result is transposed too, on both devices (PyTorch's
    // layout), the device writing it in memory order.
    const Tensor xt = randn_as({5, 4}, dt, 6).t();
    for (const auto& [name, f] : unary) {
      same_on_gpu(name, {x}, f, t);
      same_on_gpu(std::string(name) + " (transposed)", {xt}, f, t);
    }
    const Tensor xt_gpu = xt.to(kGpu);
    CHECK(xt_gpu.strides() == xt.strides());  // as torch's preserve_format
    CHECK(sigmoid(xt_gpu).strides() == Shape{1, 4});
    CHECK(xt_gpu.cpu().equal(xt));
    same_on_gpu("log", {pos}, [](auto& v) { return log(v[0]); }, t);
    same_on_gpu("sqrt", {pos}, [](auto& v) { return sqrt(v[0]); }, t);
    same_on_gpu(
        "rsqrt", {pos}, [](auto& v) { return rsqrt(v[0]); }, t);
    same_on_gpu(
        "log1p", {pos}, [](auto& v) { return log1p(v[0]); }, t);
    same_on_gpu(
        "log2", {pos}, [](auto& v) { return log2(v[0]); }, t);
    same_on_gpu(
        "log10", {pos}, [](auto& v) { return log10(v[0]); }, t);
    same_on_gpu(
        "reciprocal", {pos}, [](auto& v) { return reciprocal(v[0]); }, t);

    const std::vector<std::pair<const char*, Fn>> binary{
        {"add", [](auto& v) { return add(v[0], v[1], 0.5); }},
        {"sub", [](auto& v) { return sub(v[0], v[1]); }},
        {"mul", [](auto& v) { return mul(v[0], v[1]); }},
        {"div", [](auto& v) { return div(v[0], v[1]); }},
        {"maximum", [](auto& v) { return maximum(v[0], v[1]); }},
        {"minimum", [](auto& v) { return minimum(v[0], v[1]); }},
        {"lt", [](auto& v) { return lt(v[0], v[1]); }},
        {"eq", [](auto& v) { return eq(v[0], v[0]); }},
        {"ge", [](auto& v) { return ge(v[0], v[1]); }},
        {"atan2", [](auto& v) { return atan2(v[0], v[1]); }},
        {"fmod", [](auto& v) { return fmod(mul(v[0], 5.0), v[1]); }},
        {"remainder", [](auto& v) { return remainder(mul(v[0], 5.0), v[1]); }},
        {"logical_and", [](auto& v) { return logical_and(gt(v[0], 0.0), v[1]); }},
        {"logical_xor", [](auto& v) { return logical_xor(v[0] > 0.0, v[1] < 0.3); }},
        {"bitwise_xor (i32)",
         [](auto& v) {
           return bitwise_xor((v[0] * 8.0).to(DType::i32), (v[1] * 8.0).to(DType::i32));
         }},
        {"~ (i64)",
         [](auto& v) { return ~((v[0] * 8.0).to(DType::i64)) | (v[1] * 4.0).to(DType::i64); }},
    };
    for (const auto& [name, f] : binary) {
      same_on_gpu(std::string(name) + " (broadcast)", {x, y}, f, t);
      // A transposed (column-major) and a narrowed operand: strided reads on the device.
      Tensor a = randn_as({7, 6}, dt, 3).t(), b = randn_as({6, 9}, dt, 4).narrow(1, 2, 7);
      same_on_gpu(std::string(name) + " (strided)", {a, b}, f, t);
    }
    same_on_gpu("pow tensor", {pos, y.narrow(0, 0, 1).expand({4, 3, 5})},
                [](auto& v) { return pow(v[0], v[1]); }, t);
    same_on_gpu("where", {x, y},
                [](auto& v) { return where(gt(v[0], v[1]), v[0], v[1]); }, t);
  }
  // Integers take the ops that accept them.
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    INFO("dtype " << dt);
    Generator g(5);
    Tensor a = randint(0, 50, {5, 6}, dt, &g), b = randint(1, 50, {6}, dt, &g);
    same_on_gpu("add", {a, b}, [](auto& v) { return add(v[0], v[1]); }, {0, 0});
    same_on_gpu("mul", {a, b}, [](auto& v) { return mul(v[0], v[1]); }, {0, 0});
    // Negative scalars and alphas: a u8 wraps (PyTorch's values; a GPU clamps a negative double
    // converted to an unsigned type straight to 0).
    same_on_gpu("sub", {a, b}, [](auto& v) { return sub(v[0], v[1]); }, {0, 0});
    same_on_gpu("add, alpha -2", {a, b}, [](auto& v) { return add(v[0], v[1], -2); }, {0, 0});
    same_on_gpu("add -3", {a}, [](auto& v) { return add(v[0], -3); }, {0, 0});
    same_on_gpu("mul -1", {a}, [](auto& v) { return mul(v[0], -1); }, {0, 0});
    same_on_gpu("maximum", {a, b}, [](auto& v) { return maximum(v[0], v[1]); }, {0, 0});
    same_on_gpu("abs", {a}, [](auto& v) { return abs(v[0]); }, {0, 0});
    same_on_gpu("ne", {a, b}, [](auto& v) { return ne(v[0], v[1]); }, {0, 0});
    same_on_gpu("fmod", {a, b}, [](auto& v) { return fmod(v[0], v[1]); }, {0, 0});
    same_on_gpu("remainder", {a, b}, [](auto& v) { return remainder(add(v[0], -25), v[1]); },
                {0, 0});
    same_on_gpu("clamp 10..40", {a}, [](auto& v) { return clamp(v[0], 10, 40); }, {0, 0});
    same_on_gpu("clamp past the range", {a},
                [](auto& v) { return clamp(v[0], std::nullopt, int64_t{1000000000000}); }, {0, 0});
    // Integer powers wrap: squares, cubes and larger exponents by squaring.
    same_on_gpu("pow 2", {a}, [](auto& v) { return pow(v[0], 2); }, {0, 0});
    same_on_gpu("pow 3", {a}, [](auto& v) { return pow(v[0], 3); }, {0, 0});
    same_on_gpu("pow 7", {a}, [](auto& v) { return pow(v[0], 7); }, {0, 0});
    same_on_gpu("pow, tensor exponents", {a, b},
                [](auto& v) { return pow(v[0], remainder(v[1], 13)); }, {0, 0});
  }
}

TEST_CASE("CUDA dense elementwise ops move 16-byte vectors and match the CPU at any length "
          "and alignment", "[cuda]") {
  if (!gpu_present("CUDA vectorized elementwise ops")) return;
  // Lengths around the vector widths (4 f32, 8 f16/bf16) and a million; offsets of 0 (aligned),
  // 1 (never aligned: the element-wise loop) and 8 (aligned again).
  REQUIRE(cuda::vectorized_elementwise());
  struct Restore {
    ~Restore() { cuda::set_vectorized_elementwise(true); }
  } restore;
#ifdef TANDEM_TEST_CUDA_EMULATION
  const int64_t large = 40000;  // every code path of a million, at a twenty-fifth of the threads
#else
  const int64_t large = 1 << 20;
#endif
  for (bool vectorized : {true, false}) {
    cuda::set_vectorized_elementwise(vectorized);
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{17},
                        int64_t{4099}, large})
        for (int64_t offset : {0, 1, 8}) {
          INFO((vectorized ? "vectors, " : "elements, ") << dt << ", n " << n << ", offset "
                                                         << offset);
          const Tol t = tol(dt);
          // Narrowed on each device: the GPU's copies of a and b start aligned, their views not.
          Tensor a = randn_as({n + 8}, dt, 7), b = randn_as({n + 8}, dt, 8);
          const auto cut = [offset = offset, n = n](const Tensor& v) {
            return v.narrow(0, offset, n);
          };
          same_on_gpu("add", {a, b}, [&](auto& v) { return add(cut(v[0]), cut(v[1]), 0.5); }, t);
          same_on_gpu("lt", {a, b}, [&](auto& v) { return lt(cut(v[0]), cut(v[1])); }, {0, 0});
          same_on_gpu("relu", {a}, [&](auto& v) { return relu(cut(v[0])); }, t);
          same_on_gpu("to f32 / bf16", {a}, [&](auto& v) {
            return cut(v[0]).to(dt == DType::f32 ? DType::bf16 : DType::f32);
          }, {0, 0});
          // In place: the output is an operand.
          same_on_gpu("mul_", {a, b}, [&](auto& v) {
            Tensor out = v[0].clone();
            cut(out).mul_(cut(v[1]));
            return out;
          }, t);
        }
    // Channels-last maps, dense in memory order: the vector loop too (laid out on each device:
    // a move to the GPU makes a row-major copy).
    Tensor x = randn_as({2, 16, 5, 3}, DType::bf16, 9);
    Tensor y = randn_as({2, 16, 5, 3}, DType::bf16, 10);
    same_on_gpu("channels-last add", {x, y}, [](auto& v) {
      Tensor out = add(v[0].contiguous(MemoryFormat::ChannelsLast),
                       v[1].contiguous(MemoryFormat::ChannelsLast));
      REQUIRE(out.is_contiguous(MemoryFormat::ChannelsLast));
      return out;
    }, tol(DType::bf16));
  }
  // More f32 vectors than the largest grid has threads (cuda::kMaxBlocks blocks of 256, in
  // src/cuda/loops.cuh): each thread loops.
#ifdef TANDEM_TEST_CUDA_EMULATION
  const int64_t max_blocks = 64;
#else
  const int64_t max_blocks = 65536;
#endif
  const int64_t n = max_blocks * 256 * 4 + 4 * 1000 + 3;
  Generator g(12);
  same_on_gpu("add, a looping grid", {rand({n}, DType::f32, &g), rand({n}, DType::f32, &g)},
              [](auto& v) { return add(v[0], v[1]); }, tol(DType::f32));
}

TEST_CASE("CUDA copies and casts between every pair of dtypes, fills and arange match the CPU",
          "[cuda]") {
  if (!gpu_present("CUDA copies")) return;
  const std::vector<DType> all{DType::f32, DType::f64, DType::f16, DType::bf16,
                               DType::i64, DType::i32, DType::u8,  DType::boolean};
  // Fractions between about -150 and 150: every integer dtype holds their truncations (u8 wraps
  // the negative ones through int64, as PyTorch: a GPU would clamp a direct conversion to 0),
  // zeros among them for bool.
  Tensor base = mul(randn_as({4, 6}, DType::f64, 6), 40.0);
  base.narrow(1, 0, 1).fill_(0.0);
  for (DType from : all) {
    Tensor src = base.to(from);
    for (DType to : all) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      same_on_gpu("to", {src}, [to](auto& v) { return v[0].to(to); }, {0, 0});
      same_on_gpu("strided copy", {src},
                  [to](auto& v) { return v[0].t().narrow(0, 1, 4).contiguous().to(to); }, {0, 0});
    }
  }
  // NaN, infinities and values past the integer types: their minimum on both devices (x86's
  // result, which the CPU's convert makes defined; a GPU's conversion would give 0 for NaN and
  // saturate the others).
  const double inf = std::numeric_limits<double>::infinity();
  Tensor odd = from_vector<double>({std::nan(""), inf, -inf, 1e30, -1e30, 3e9, -3e9, 7.9});
  for (DType from : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (DType to : {DType::i64, DType::i32, DType::u8}) {
      INFO("NaN and out of range, " << dtype_name(from) << " -> " << dtype_name(to));
      same_on_gpu("to", {odd.to(from)}, [to](auto& v) { return v[0].to(to); }, {0, 0});
    }
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::u8, DType::boolean}) {
    INFO("dtype " << dt);
    same_on_gpu("fill of a strided view", {zeros({5, 8}, dt)},
                [dt](auto& v) {
                  Tensor out = v[0].clone();
                  out.t().narrow(0, 2, 3).fill_(2.7);
                  out.narrow(0, 0, 1).fill_(
                      dt == DType::u8 ? -3.0 : -3.2);  // u8 wraps whole negatives only
                  return out;
                },
                {0, 0});
  }
  for (DType dt : all) {
    if (dt == DType::boolean) continue;
    INFO("arange " << dt);
    require_close(arange(-3.0, 40.0, 1.5, TensorOptions(dt).device(kGpu)).cpu(),
                  arange(-3.0, 40.0, 1.5, dt), 0, 0);
  }
  // Steps not exact in binary: start + i * step rounded once (fma) on both devices, the same bits.
  require_close(arange(0.1, 100.0, 0.1, TensorOptions(DType::f64).device(kGpu)).cpu(),
                arange(0.1, 100.0, 0.1, DType::f64), 0, 0);
}

TEST_CASE("CUDA random fills draw the CPU's numbers for the same seed", "[cuda]") {
  if (!gpu_present("CUDA random fills")) return;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    Generator c1(123), g1(123);
    require_close(randn({3000}, TensorOptions(dt).device(kGpu), &g1).cpu(), randn({3000}, dt, &c1),
                  tol(dt).rtol, tol(dt).atol, "randn");
    Generator c2(7), g2(7);
    require_close(rand({3000}, TensorOptions(dt).device(kGpu), &g2).cpu(), rand({3000}, dt, &c2),
                  0, 0, "rand");
  }
  Generator c3(9), g3(9);
  require_close(randint(-5, 1000, {3000}, TensorOptions(DType::i64).device(kGpu), &g3).cpu(),
                randint(-5, 1000, {3000}, DType::i64, &c3), 0, 0, "randint");
}

TEST_CASE("CUDA reductions match the CPU: sums, means, extremes and their first index", "[cuda]") {
  if (!gpu_present("CUDA reductions")) return;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    // Short rows (a warp each), long ones (a block each) and longer ones (cut into parts summed
    // by blocks of their own, then summed: the sums over 40000 and the means over 240000).
    for (int64_t cols : {7, 300, 5000, 40000}) {
      INFO("cols " << cols);
      Tensor x = randn_as({6, cols}, dt, 10 + cols);
      // Sums: the CPU adds in f64, the GPU in f32 (f64 for f64): rounding of the accumulation.
      const Tol ts = dt == DType::f32 ? Tol{1e-5, 1e-4} : tol(dt);
      same_on_gpu("sum rows", {x}, [](auto& v) { return sum(v[0], {1}); }, ts);
      same_on_gpu("sum cols", {x}, [](auto& v) { return sum(v[0], {0}); }, ts);
      same_on_gpu("mean", {x}, [](auto& v) { return mean(v[0]); }, ts);
      same_on_gpu("amax", {x}, [](auto& v) { return amax(v[0], {1}); }, {0, 0});
      same_on_gpu("argmax", {x}, [](auto& v) { return argmax(v[0], 1); }, {0, 0});
      same_on_gpu("argmin", {x}, [](auto& v) { return argmin(v[0], 1); }, {0, 0});
    }
    // Ties pick the first index; a NaN wins, the first NaN.
    Tensor ties = from_vector<double>({1, 3, 3, 2, NAN, 5, NAN, 0}, {2, 4}).to(dt);
    same_on_gpu("argmax ties and NaN", {ties}, [](auto& v) { return argmax(v[0], 1); }, {0, 0});
    same_on_gpu("max NaN", {ties}, [](auto& v) { return amax(v[0], {1}); }, {0, 0});
  }
  Generator g(3);
  Tensor ints = randint(-100, 100, {4, 2000}, DType::i64, &g);
  same_on_gpu("integer sum", {ints}, [](auto& v) { return sum(v[0], {1}); }, {0, 0});
  Tensor long_ints = randint(-100, 100, {2, 50000}, DType::i64, &g);
  same_on_gpu("integer sum in parts", {long_ints}, [](auto& v) { return sum(v[0], {1}); }, {0, 0});
}

TEST_CASE("CUDA scans, products and sorts match the CPU: ties in position order, NaN last",
          "[cuda]") {
  if (!gpu_present("CUDA scans and sorts")) return;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    // Rows shorter than a block, several blocks long (the scan's carry), and a length that is
    // not a power of two (the sort's padding).
    for (int64_t cols : {5, 300, 1000}) {
      INFO("cols " << cols);
      Tensor x = randn_as({3, cols}, dt, 20 + cols);
      const Tol ts = dt == DType::f32 ? Tol{1e-5, 1e-4} : tol(dt);
      same_on_gpu(
          "cumsum", {x}, [](auto& v) { return cumsum(v[0], 1); }, ts);
      same_on_gpu(
          "cumsum dim 0", {x}, [](auto& v) { return cumsum(v[0], 0); }, ts);
      same_on_gpu("sort values", {x}, [](auto& v) { return sort(v[0], 1).first; }, {0, 0});
      same_on_gpu("sort indices", {x}, [](auto& v) { return sort(v[0], 1, true).second; }, {0, 0});
      same_on_gpu("topk", {x}, [](auto& v) { return topk(v[0], 4, 1).second; }, {0, 0});
      same_on_gpu("argsort dim 0", {x}, [](auto& v) { return argsort(v[0], 0); }, {0, 0});
      // products of numbers near 1, so that long rows neither vanish nor overflow
      Tensor near1 = add(mul(x, 0.01), 1.0);
      same_on_gpu(
          "prod", {near1}, [](auto& v) { return prod(v[0], 1); }, ts);
      same_on_gpu(
          "cumprod", {near1}, [](auto& v) { return cumprod(v[0], 1); }, ts);
    }
    Tensor ties = from_vector<double>({2, NAN, 1, 2, 1, NAN, 0, 2}, {1, 8}).to(dt);
    same_on_gpu("sort ties and NaN", {ties}, [](auto& v) { return argsort(v[0]); }, {0, 0});
    same_on_gpu("descending ties and NaN", {ties}, [](auto& v) { return argsort(v[0], -1, true); },
                {0, 0});
    // The activations' fused backward kernels.
    const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> activations{
        {"silu", [](const Tensor& v) { return silu(v); }},
        {"elu", [](const Tensor& v) { return elu(v, 0.7); }},
        {"softplus", [](const Tensor& v) { return softplus(v, 2.0, 1.0); }},
        {"mish", [](const Tensor& v) { return mish(v); }},
    };
    Tensor wide = mul(randn_as({4, 33}, dt, 40), 3.0);
    for (const auto& [name, f] : activations)
      same_on_gpu(
          std::string(name) + " gradient", {wide},
          [f = f](auto& v) {
            Tensor a = v[0].detach().requires_grad_(true);
            f(a).sum().backward();
            return a.grad();
          },
          tol(dt));
    // Gradients: prod's through the running products (zeros included), sort's through gather.
    Tensor z = from_vector<double>({1.5, 0, 2, -1, 0, 0, 3, 0.5}, {2, 4}).to(dt);
    same_on_gpu(
        "prod gradient", {z},
        [](auto& v) {
          Tensor a = v[0].detach().requires_grad_(true);
          prod(a, 1).sum().backward();
          return a.grad();
        },
        tol(dt));
    same_on_gpu(
        "cumprod gradient", {z},
        [](auto& v) {
          Tensor a = v[0].detach().requires_grad_(true);
          cumprod(a, 1).sum().backward();
          return a.grad();
        },
        tol(dt));
  }
  Generator g(8);
  Tensor ints = randint(-50, 50, {4, 700}, DType::i64, &g);
  same_on_gpu("integer cumsum", {ints}, [](auto& v) { return cumsum(v[0], 1); }, {0, 0});
  same_on_gpu("integer sort", {ints}, [](auto& v) { return sort(v[0], 1).second; }, {0, 0});
  same_on_gpu("nonzero", {ints}, [](auto& v) { return nonzero(gt(v[0], full({}, 40.0))); }, {0, 0});
  same_on_gpu("masked_select", {ints},
              [](auto& v) { return masked_select(v[0], lt(v[0], full({}, -45.0))); }, {0, 0});
  same_on_gpu("one_hot", {ints}, [](auto& v) { return one_hot(add(v[0], 50), 100); }, {0, 0});
  // the same draws on both devices, so the same samples
  Tensor weights = add(abs(randn_as({3, 40}, DType::f32, 9)), 0.1);
  same_on_gpu("multinomial", {weights},
              [](auto& v) {
                Generator gen(12);
                return multinomial(v[0], 5, /*replacement=*/false, &gen);
              },
              {0, 0});
  same_on_gpu("multinomial with replacement", {weights},
              [](auto& v) {
                Generator gen(13);
                return multinomial(v[0], 50, /*replacement=*/true, &gen);
              },
              {0, 0});
  same_on_gpu("randperm", {ints},
              [](auto& v) {
                Generator gen(11);
                return randperm(500, TensorOptions().device(v[0].device()), &gen);
              },
              {0, 0});
}

TEST_CASE("CUDA matrix products through cuBLAS match the CPU in every float dtype", "[cuda]") {
  if (!gpu_present("CUDA matmul")) return;
  REQUIRE_FALSE(cuda::allow_tf32_matmul());  // PyTorch's default: f32 products in full f32
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    // Products accumulate over k: looser than elementwise for the narrow types.
    const Tol t = dt == DType::f32   ? Tol{1e-4, 1e-4}
                  : dt == DType::f64 ? Tol{1e-10, 1e-10}
                  : dt == DType::f16 ? Tol{1e-2, 1e-2}
                                     : Tol{5e-2, 5e-2};
    Tensor a = randn_as({3, 17, 33}, dt, 20), b = randn_as({3, 33, 9}, dt, 21);
    same_on_gpu("bmm", {a, b}, [](auto& v) { return bmm(v[0], v[1]); }, t);
    same_on_gpu("bmm, transposed operands", {a, b}, [](auto& v) {
      return bmm(v[1].transpose(1, 2), v[0].transpose(1, 2));
    }, t);
    Tensor m = randn_as({40, 24}, dt, 22), w = randn_as({10, 24}, dt, 23), bias = randn_as({10}, dt, 24);
    same_on_gpu("linear", {m, w, bias}, [](auto& v) { return linear(v[0], v[1], v[2]); }, t);
    same_on_gpu("mm of narrowed and transposed views", {m}, [](auto& v) {
      return mm(v[0].narrow(1, 3, 10).t(), v[0].narrow(1, 0, 5));
    }, t);
    // One output row (cuBLAS's leading dimension then free), a dot, a batch-broadcast operand.
    same_on_gpu("row times matrix, and a dot", {m, w}, [](auto& v) {
      return cat({mm(v[0].narrow(0, 0, 1), v[1].t()).reshape({-1}),
                  mm(v[0].narrow(0, 1, 1), v[0].narrow(0, 2, 1).t()).reshape({-1})});
    }, t);
    same_on_gpu("bmm of an expanded operand", {a, b}, [](auto& v) {
      return bmm(v[0], v[1].narrow(0, 0, 1).expand({3, 33, 9}));
    }, t);
  }
}

TEST_CASE("CUDA cross entropy and its gradient match the CPU, a bad target is an IndexError",
          "[cuda]") {
  if (!gpu_present("CUDA cross entropy")) return;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    Tensor logits = randn_as({16, 10}, dt, 30);
    Generator g(31);
    Tensor target = randint(0, 10, {16}, DType::i64, &g);
    Fn loss_and_grad = [](auto& v) {
      Tensor x = v[0].detach();
      x.set_requires_grad(true);
      Tensor loss = cross_entropy(x, v[1]);
      loss.backward();
      return cat({loss.reshape({1}), x.grad().reshape({-1})});
    };
    same_on_gpu("loss and gradient", {logits, target}, loss_and_grad, tol(dt));
  }
  // The bad target's error comes with the next value the host reads (the check is deferred).
  Tensor bad = from_vector<int64_t>({1, 12, 3}).to(kGpu);
  CHECK_THAT(error_of([&] {
               cross_entropy(zeros({3, 10}, kGpu), bad).item<float>();
             }),
             Catch::Contains("target 12 is out of bounds for 10 classes (at position 1)"));
  CHECK(cross_entropy(zeros({3, 10}, kGpu), zeros({3}, TensorOptions(DType::i64).device(kGpu)))
            .item<float>() == Approx(std::log(10.0)));  // reported once, not again
  // binary_cross_entropy's inputs must be probabilities: checked the same way.
  const Tensor half = full({2}, 0.5, TensorOptions(DType::f32).device(kGpu));
  CHECK_THAT(error_of([&] {
               binary_cross_entropy(from_vector<float>({0.5f, 1.5f}).to(kGpu), half).item<float>();
             }),
             Catch::Contains("every input must be a probability in [0, 1], got one at distance 1"));
  CHECK(binary_cross_entropy(half, half).item<float>() == Approx(std::log(2.0)));
}

TEST_CASE("CUDA: a bad target stops the optimizer step before it changes anything", "[cuda]") {
  if (!gpu_present("CUDA deferred target check")) return;
  // cross_entropy checks its targets on the GPU and reads the verdict later: the forward and
  // backward are queued without the host waiting, and the optimizer refuses to step.
  nn::Linear model(4, 10);
  model.to(kGpu);
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  const Tensor before = model.weight.detach().cpu();
  const Tensor x = randn_as({3, 4}, DType::f32, 40).to(kGpu);
  cross_entropy(model.forward(x), from_vector<int64_t>({1, 12, 3}).to(kGpu)).backward();
  CHECK_THAT(error_of([&] { opt.step(); }),
             Catch::Contains("cross_entropy: target 12 is out of bounds for 10 classes"));
  CHECK(equal(model.weight.detach().cpu(), before));
  // Good targets: the same optimizer steps, with no error left over.
  opt.zero_grad();
  cross_entropy(model.forward(x), from_vector<int64_t>({1, 2, 3}).to(kGpu)).backward();
  opt.step();
  CHECK(!equal(model.weight.detach().cpu(), before));
}

#if TANDEM_TEST_CUDA_EMULATION
extern "C" long tandem_emu_host_waits();
extern "C" long tandem_emu_device_mallocs();
extern "C" void tandem_emu_reset_counts();
extern "C" long tandem_emu_launches();
extern "C" long tandem_emu_launches_of(const char* prefix);  // kernels named prefix...
extern "C" void tandem_emu_print_launches(FILE* out);

// The counts hold with the caching allocator; with TANDEM_NO_CUDA_MEMORY_CACHING every tensor
// is a cudaMalloc and a cudaFree (a wait) of its own (scripts/test.sh runs these tests with it
// on: their tag [host_waits]).
bool counts_apply() {
  const char* env = std::getenv("TANDEM_NO_CUDA_MEMORY_CACHING");
  if (env == nullptr || env[0] == '\0' || std::strcmp(env, "0") == 0) return true;
  WARN("TANDEM_NO_CUDA_MEMORY_CACHING is set: host waits and cudaMalloc calls not counted");
  return false;
}

TEST_CASE(
    "CUDA: a training step makes the host wait for the GPU only to read the loss (and "
    "the loss scaler's verdict)",
    "[cuda][host_waits]") {
  if (!gpu_present("CUDA host waits of a training step")) return;
  // The emulation counts the calls that make the host wait for a GPU (synchronizes, copies to
  // host memory, frees) and cudaMalloc calls. A ResNet step as bench_resnet times ResNet-50's:
  // bf16 autocast, channels-last, SGD with Nesterov momentum and weight decay groups; after
  // warm-up, one wait a step (loss.item()) and no cudaMalloc. With f16, a loss scaler and Adam,
  // one more: the scaler reads whether a gradient overflowed. (A check read at once, as
  // cross_entropy's target check was, makes the host wait mid-step for the forward.)
  const bool scaled = GENERATE(false, true);
  INFO((scaled ? "f16, loss scaler, AdamW" : "bf16, SGD"));
  nn::CifarResNet model(8, nn::ResNetOptions().in_channels(3));
  model.to(kGpu);
  model.to(MemoryFormat::ChannelsLast);
  std::unique_ptr<optim::Optimizer> opt;
  if (scaled)
    opt = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions(1e-3));
  else
    opt = std::make_unique<optim::SGD>(optim::weight_decay_groups(model, 5e-4),
                                       optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(scaled));
  const Tensor x =
      randn_as({4, 3, 16, 16}, DType::f32, 41).to(kGpu).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = from_vector<int64_t>({3, 7, 0, 9}).to(kGpu);
  auto step = [&] {
    opt->zero_grad();
    Tensor loss;
    {
      amp::autocast guard(scaled ? DType::f16 : DType::bf16, true);
      loss = cross_entropy(model.forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    return loss.item<float>();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: cuDNN's choices, buffers, the allocator's blocks
  tandem_emu_reset_counts();
  for (int i = 0; i < 3; ++i) CHECK(std::isfinite(step()));
  if (!counts_apply()) return;
  CHECK(tandem_emu_host_waits() == (scaled ? 6 : 3));
  CHECK(tandem_emu_device_mallocs() == 0);
}

TEST_CASE("CUDA: batch norm is two launches each way; channels-last maps go in channel tiles",
          "[cuda]") {
  if (!gpu_present("CUDA batch norm launches")) return;
  // Training: the statistics, whose last blocks add up the slices and derive invstd and the
  // running statistics (once seven tensor ops, 371 launches of a ResNet-50 step, then four
  // kernels), and the normalization. Evaluating: invstd, the normalization. The backward: the
  // sums (finished by their last blocks too), the input's gradient.
  const Tensor x = randn_as({4, 16, 6, 6}, DType::bf16, 43).to(kGpu);
  const TensorOptions f32 = TensorOptions(DType::f32).device(kGpu);
  Tensor rm = zeros({16}, f32), rv = ones({16}, f32), w = ones({16}, f32), b = zeros({16}, f32);
  // The first batch norm on a stream makes its slice counters (a fill, once).
  batch_norm(x, rm, rv, w, b, true);
  for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    const Tensor in = x.contiguous(format);
    tandem_emu_reset_counts();
    batch_norm_relu(in, rm, rv, w, b, true, 0.1, 1e-5, in);
    const long training = tandem_emu_launches();
    if (training != 2) tandem_emu_print_launches(stderr);  // which kernels, by name
    CHECK(training == 2);
    tandem_emu_reset_counts();
    batch_norm(in, rm, rv, w, b, false);
    const long evaluation = tandem_emu_launches();
    if (evaluation != 2) tandem_emu_print_launches(stderr);
    CHECK(evaluation == 2);
    // Channels-last, 16 channels: the statistics, the output and both halves of the backward
    // in channel tiles (16-byte vectors of 8 bf16 channels); row-major, none of them.
    const long tiled = format == MemoryFormat::ChannelsLast ? 1 : 0;
    tandem_emu_reset_counts();
    Tensor leaf = in.detach().requires_grad_();
    batch_norm_relu(leaf, rm, rv, w, b, true).sum().backward();
    CHECK(tandem_emu_launches_of("bn_backward") == 2);
    CHECK(tandem_emu_launches_of("bn_moments_tiled_kernel") == tiled);
    CHECK(tandem_emu_launches_of("bn_forward_tiled_kernel") == tiled);
    CHECK(tandem_emu_launches_of("bn_backward_sums_tiled_kernel") == tiled);
    CHECK(tandem_emu_launches_of("bn_backward_input_tiled_kernel") == tiled);
  }
  // Row-major planes of a multiple of 8 bf16 values (4x4): every kernel over 16-byte vectors of
  // one plane; planes of 6x6 (36 values) an element at a time.
  for (const int64_t side : {4, 6}) {
    INFO(side << "x" << side << " planes");
    Tensor leaf = randn_as({4, 16, side, side}, DType::bf16, 45).to(kGpu).requires_grad_();
    tandem_emu_reset_counts();
    batch_norm_relu(leaf, rm, rv, w, b, true).sum().backward();
    const long planes = side == 4 ? 1 : 0;
    for (const char* kernel : {"bn_moments_kernel", "bn_forward_kernel", "bn_backward_sums_kernel",
                               "bn_backward_input_kernel"}) {
      INFO(kernel);
      CHECK(tandem_emu_launches_of((std::string(kernel) + "<V,").c_str()) == planes);
      CHECK(tandem_emu_launches_of((std::string(kernel) + "<1,").c_str()) == 1 - planes);
    }
  }
  // (N, C): channels innermost, so in channel tiles too.
  tandem_emu_reset_counts();
  batch_norm(randn_as({8, 16}, DType::bf16, 44).to(kGpu), rm, rv, w, b, true);
  CHECK(tandem_emu_launches_of("bn_moments_tiled_kernel") == 1);
  CHECK(tandem_emu_launches_of("bn_forward_tiled_kernel") == 1);
  // The module: num_batches_tracked counted in the update's launch, not by an add_ of its own
  // (53 launches a ResNet-50 step); evaluation leaves it.
  nn::BatchNorm2d bn(16);
  bn.to(kGpu);
  for (int64_t i = 1; i <= 2; ++i) {
    tandem_emu_reset_counts();
    bn.forward(x);
    CHECK(tandem_emu_launches() == 2);
    CHECK(bn.num_batches_tracked.item<int64_t>() == i);
  }
  bn.eval();
  tandem_emu_reset_counts();
  bn.forward(x);
  CHECK(tandem_emu_launches() == 2);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("CUDA: SyncBatchNorm + DDP on every GPU: a step waits only to read the loss",
          "[cuda][host_waits]") {
  if (!tandem::testing::nccl_present("CUDA host waits of SyncBatchNorm")) return;
  // The group's statistics, count and gradient sums stay on the devices: each allreduce orders
  // the compute stream after it (wait_on_stream) and the count's check is deferred. Reading the
  // count on the host made one wait per batch norm per step (7 layers here: 48 waits, not 6).
  // (The emulation cannot see a host blocked in Work::wait(): its collectives are done when
  // issued.)
  const int world = cuda::device_count();
  std::vector<float> losses(world);
  long waits = -1;
  std::atomic<int> arrived{0};
  auto all_here = [&](int round) {  // the ranks meet on the host (a collective would count)
    arrived.fetch_add(1);
    while (arrived.load() < round * world) std::this_thread::yield();
  };
  parallel::launch(parallel::Devices::all(), [&](parallel::Rank& r) {
    auto model = std::make_shared<nn::CifarResNet>(8, nn::ResNetOptions().in_channels(3));
    model->to(r.device());
    parallel::convert_sync_batchnorm(*model, r.comm);
    parallel::DistributedDataParallel ddp(model, r.comm);
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.05).momentum(0.9));
    const Tensor x = randn_as({4, 3, 8, 8}, DType::f32, 50 + r.rank()).to(r.device());
    const Tensor y = from_vector<int64_t>({3, 7, 0, 9}).to(r.device());
    auto step = [&] {
      opt.zero_grad();
      Tensor loss = cross_entropy(ddp.forward(x), y);
      loss.backward();
      opt.step();
      return loss.item<float>();
    };
    for (int i = 0; i < 3; ++i) step();  // warm-up
    all_here(1);
    if (r.rank() == 0) tandem_emu_reset_counts();
    all_here(2);
    for (int i = 0; i < 3; ++i) losses[r.rank()] = step();
    all_here(3);
    if (r.rank() == 0) waits = tandem_emu_host_waits();
  });
  for (float l : losses) CHECK(std::isfinite(l));
  if (!counts_apply()) return;
  CHECK(waits == 3 * world);
}

TEST_CASE("CUDA: an embedding model's training step makes the host wait only to read the loss",
          "[cuda][host_waits]") {
  if (!gpu_present("CUDA host waits of an embedding step")) return;
  // The lookup and its gradient (index_select, index_add into a fresh table) check their
  // indices on the GPU and read the verdict later, so the step waits once.
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Embedding>(50, 8),
                                                std::make_shared<nn::Flatten>(),
                                                std::make_shared<nn::Linear>(24, 5));
  model->to(kGpu);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  const Tensor tokens = from_vector<int64_t>({1, 7, 49, 3, 0, 12}, {2, 3}).to(kGpu);
  const Tensor y = from_vector<int64_t>({4, 0}).to(kGpu);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(tokens), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int i = 0; i < 2; ++i) step();
  tandem_emu_reset_counts();
  for (int i = 0; i < 3; ++i) CHECK(std::isfinite(step()));
  if (!counts_apply()) return;
  CHECK(tandem_emu_host_waits() == 3);
  CHECK(tandem_emu_device_mallocs() == 0);
}
#endif

TEST_CASE("CUDA index_select, gather, scatter, index_add and embedding match the CPU, a bad "
          "index changes nothing", "[cuda]") {
  if (!gpu_present("CUDA index ops")) return;
  const Tensor rows = from_vector<int64_t>({3, 0, 3, 1, 4, 3});  // repeats: atomics add them
  Generator g(72);
  const Tensor gidx = randint(0, 3, {5, 4, 6}, DType::i64, &g);
  const Tensor narrow_idx = randint(0, 6, {2, 3, 5}, DType::i64, &g);  // smaller than x
  // Distinct positions along dim 2 in every row: no value of scatter depends on write order.
  const Tensor distinct = from_vector<int64_t>({5, 1}).reshape({1, 1, 2}).expand({5, 3, 2});
  const Tensor ids = from_vector<int64_t>({6, 0, 2, 2, 5, 6, 1, 2}, {2, 4});
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    Tensor x = randn_as({5, 3, 6}, dt, 73), src = randn_as({6, 3, 6}, dt, 74);
    Tensor w = randn_as({7, 4}, dt, 75);
    // Every op's output, then the gradients of x, src and w, as one vector.
    Fn f = [&](auto& v) {
      Tensor xi = v[0].detach(), si = v[1].detach(), wi = v[2].detach();
      xi.set_requires_grad(true);
      si.set_requires_grad(true);
      wi.set_requires_grad(true);
      const Device d = xi.device();
      std::vector<Tensor> outs{
          index_select(xi, 0, rows.to(d)), index_select(xi, 2, rows.to(d)),
          gather(xi, 1, gidx.to(d)), gather(xi, 2, narrow_idx.to(d)),
          scatter_add(xi, 1, gidx.narrow(1, 0, 3).to(d), si.narrow(0, 0, 5)),
          scatter(xi, 2, distinct.to(d), si.narrow(0, 0, 5).narrow(2, 0, 2)),
          index_add(xi, 0, rows.to(d), si, 0.5), embedding(wi, ids.to(d), 2)};
      Tensor all;
      for (Tensor& o : outs) all = all.defined() ? cat({all, o.reshape({-1})}) : o.reshape({-1});
      Generator gg(76);
      all.backward(randn(all.shape(), DType::f64, &gg).to(all.dtype()).to(d));
      return cat({all, xi.grad().reshape({-1}), si.grad().reshape({-1}), wi.grad().reshape({-1})});
    };
    // Sums of up to six values in another order: a few roundings of the narrow dtypes.
    Tol t = tol(dt);
    if (dt == DType::f16 || dt == DType::bf16) t = {4 * t.rtol, 4 * t.atol};
    same_on_gpu("index ops", {x, src, w}, f, t);
  }
  // Integer values move and add exactly; an index by i32 works the same.
  Tensor xi = randint(-50, 50, {5, 3, 6}, DType::i64, &g);
  same_on_gpu("i64 gather and scatter_add", {xi, gidx},
              [](auto& v) { return scatter_add(v[0], 1, v[1], gather(v[0], 1, v[1])); }, {0, 0});
  same_on_gpu("u8 index_add", {xi.abs().to(DType::u8), rows.to(DType::i32)},
              [](auto& v) { return index_add(v[0], 0, v[1], index_select(v[0], 0, v[1])); }, {0, 0});
  // A bad index: an IndexError naming it, nothing written.
  Tensor y = zeros({4, 3}, kGpu);
  CHECK_THAT(error_of([&] { y.index_add_(0, from_vector<int64_t>({1, 2, 8}).to(kGpu), ones({3, 3}, kGpu)); }),
             Catch::Contains("index_add_: index 8 is out of bounds for dimension 0 with size 4"));
  CHECK_THAT(error_of([&] { y.scatter_(1, from_vector<int64_t>({0, -2}, {1, 2}).to(kGpu), 1.0); }),
             Catch::Contains("scatter_: index -2 is out of bounds for dimension 1 with size 3"));
  CHECK(y.abs().sum().item<float>() == 0.0f);
  // Into an output of the op's own, the check is read later: the error comes with the next
  // read of a GPU value, or before an optimizer step (the host does not wait mid-step).
  CHECK_THAT(error_of([&] {
               embedding(ones({3, 2}, kGpu), from_vector<int64_t>({0, 3}).to(kGpu)).cpu();
             }),
             Catch::Contains("embedding: index 3 is out of bounds for dimension 0 with size 3"));
  CHECK_THAT(error_of([&] {
               index_add(y, 0, from_vector<int64_t>({1, 2, 8}).to(kGpu), ones({3, 3}, kGpu))
                   .sum()
                   .item<float>();
             }),
             Catch::Contains("index_add: index 8 is out of bounds for dimension 0 with size 4"));
  CHECK_THAT(error_of([&] {
               gather(y, 1, from_vector<int64_t>({0, 5}, {1, 2}).to(kGpu)).cpu();
             }),
             Catch::Contains("gather: index 5 is out of bounds for dimension 1 with size 3"));
  CHECK(y.abs().sum().item<float>() == 0.0f);  // no error left over, y untouched
}

TEST_CASE("CUDA SGD, Adam, AMSGrad, AdamW, RMSprop and Adagrad steps match the CPU's", "[cuda]") {
  if (!gpu_present("CUDA optimizer steps")) return;
  auto train = [](Device device, const std::string& which) {
    Tensor p = randn_as({33, 7}, DType::f32, 40).to(device);
    p.set_requires_grad(true);
    std::unique_ptr<optim::Optimizer> opt;
    const std::vector<Tensor> params{p};
    if (which == "AdamW")
      opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions(0.01).weight_decay(0.1));
    else if (which == "Adam")
      opt = std::make_unique<optim::Adam>(params, optim::AdamOptions(0.01).weight_decay(0.1));
    else if (which == "AMSGrad")
      opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions(0.01).amsgrad(true));
    else if (which == "RMSprop")
      opt = std::make_unique<optim::RMSprop>(
          params, optim::RMSpropOptions(0.01).momentum(0.5).centered(true).weight_decay(0.1));
    else if (which == "Adagrad")
      opt = std::make_unique<optim::Adagrad>(
          params, optim::AdagradOptions(0.1).lr_decay(0.1).initial_accumulator_value(0.1));
    else
      opt = std::make_unique<optim::SGD>(
          params, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3));
    for (int k = 0; k < 4; ++k) {
      opt->zero_grad();
      // Gradients shrinking from step to step, so AMSGrad's maximum differs from exp_avg_sq.
      mul(sum(mul(p, add(mul(p.detach(), 0.5), 0.1 * k))), 1.0 / (1 + 4 * k)).backward();
      opt->step();
    }
    return p.detach().cpu();
  };
  for (const char* which : {"SGD", "Adam", "AMSGrad", "AdamW", "RMSprop", "Adagrad"}) {
    INFO(which);
    require_close(train(kGpu, which), train(kCPU, which), 1e-5, 1e-6);
  }
}

TEST_CASE("CUDA: optimizer state left on the CPU when its model moved to the GPU is refused",
          "[cuda]") {
  if (!gpu_present("CUDA optimizer state on another device")) return;
  // A kernel would read host memory through the state's pointer (libtorch refuses too). Moving
  // the state with the model is load_state_dict's job, which puts it on the parameter's device.
  auto lin = std::make_shared<nn::Linear>(3, 2);
  optim::Adam opt(lin->parameters(), optim::AdamOptions(0.1));
  auto step = [&](optim::Optimizer& o, Device d) {
    o.zero_grad();
    sum(lin->forward(ones({4, 3}).to(d))).backward();
    o.step();
  };
  step(opt, kCPU);
  const nn::StateDict saved = opt.state_dict();
  lin->to(kGpu);
  const Tensor before = lin->weight.detach().cpu();
  CHECK_THAT(error_of([&] { step(opt, kGpu); }),
             Catch::Contains("Adam: state 'exp_avg' of parameter 0 is f32 (2, 3) on cpu, its "
                             "parameter f32 (2, 3) on cuda:0"));
  CHECK(equal(lin->weight.detach().cpu(), before));
  optim::Adam moved(lin->parameters(), optim::AdamOptions(0.1));
  moved.load_state_dict(saved);
  CHECK(moved.state_dict().at("state.0.exp_avg").device() == kGpu);
  step(moved, kGpu);
  CHECK(!equal(lin->weight.detach().cpu(), before));
}

TEST_CASE(
    "CUDA SGD, Adam, RMSprop and Adagrad over many parameters (few launches) match the "
    "CPU's",
    "[cuda]") {
  if (!gpu_present("CUDA batched optimizer steps")) return;
  // 60 parameters, more than one launch takes: small ones, one of several chunks (200,000
  // elements), a channels-last one, one whose layout its gradient does not share (a transposed
  // leaf: stepped alone), one without a gradient, one without a gradient at the first step (its
  // own step count, for Adam's bias corrections); in two groups with their own options.
  using Make =
      std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, std::vector<Tensor>)>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"SGD",
       [](std::vector<Tensor> a, std::vector<Tensor> b) {
         return std::make_unique<optim::SGD>(
             std::vector<optim::OptimizerParamGroup>{
                 optim::OptimizerParamGroup(a),
                 optim::OptimizerParamGroup(b, std::make_unique<optim::SGDOptions>(
                                                   optim::SGDOptions(0.05).momentum(0.5)))},
             optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3));
       }},
      {"Adam",
       [](std::vector<Tensor> a, std::vector<Tensor> b) {
         return std::make_unique<optim::Adam>(
             std::vector<optim::OptimizerParamGroup>{
                 optim::OptimizerParamGroup(a),
                 optim::OptimizerParamGroup(b, std::make_unique<optim::AdamOptions>(
                                                   optim::AdamOptions(0.02).amsgrad(true)))},
             optim::AdamOptions(0.01).weight_decay(1e-2));
       }},
      {"AdamW",
       [](std::vector<Tensor> a, std::vector<Tensor> b) {
         a.insert(a.end(), b.begin(), b.end());
         return std::make_unique<optim::AdamW>(a, optim::AdamWOptions(0.01).amsgrad(true));
       }},
      {"RMSprop",
       [](std::vector<Tensor> a, std::vector<Tensor> b) {
         return std::make_unique<optim::RMSprop>(
             std::vector<optim::OptimizerParamGroup>{
                 optim::OptimizerParamGroup(a),
                 optim::OptimizerParamGroup(
                     b, std::make_unique<optim::RMSpropOptions>(
                            optim::RMSpropOptions(0.01).centered(true).momentum(0.9)))},
             optim::RMSpropOptions(0.005).weight_decay(1e-2));
       }},
      {"Adagrad", [](std::vector<Tensor> a, std::vector<Tensor> b) {
         a.insert(a.end(), b.begin(), b.end());
         return std::make_unique<optim::Adagrad>(
             a, optim::AdagradOptions(0.05).lr_decay(0.1).weight_decay(1e-3));
       }}};
  auto train = [](Device device, const Make& make) {
    std::vector<Tensor> a, b;
    for (int i = 0; i < 56; ++i)
      a.push_back(randn_as({1 + i % 7, 3 + i}, DType::f32, 300 + i).to(device));
    a.push_back(randn_as({200000}, DType::f32, 360).to(device));
    a.push_back(randn_as({4, 3, 5, 5}, DType::f32, 361).contiguous(MemoryFormat::ChannelsLast).to(device));
    b.push_back(randn_as({7, 5}, DType::f32, 362).to(device).t());
    b.push_back(randn_as({9}, DType::f32, 363).to(device));
    Tensor unused = randn_as({4}, DType::f32, 364).to(device);
    b.push_back(unused);
    Tensor late = a[3];  // no gradient at the first step
    for (auto* list : {&a, &b})
      for (Tensor& t : *list) t.set_requires_grad(true);
    auto opt = make(a, b);
    for (int k = 0; k < 3; ++k) {
      opt->zero_grad();
      Tensor loss = zeros({}, TensorOptions(DType::f32).device(device));
      for (auto* list : {&a, &b})
        for (const Tensor& t : *list)
          if (!t.is_same(unused) && !(k == 0 && t.is_same(late)))
            loss = add(loss, sum(mul(t, add(mul(t.detach(), 0.5), 0.1 * k))));
      // Gradients shrinking from step to step, so AMSGrad's maximum differs from exp_avg_sq.
      mul(loss, 1.0 / (1 + 4 * k)).backward();
      opt->step();
    }
    std::vector<Tensor> flat;
    for (auto* list : {&a, &b})
      for (const Tensor& t : *list) flat.push_back(t.detach().cpu().reshape({-1}));
    return cat(flat);
  };
  for (const auto& [name, make] : optimizers) {
    INFO(name);
    require_close(train(kGpu, make), train(kCPU, make), 1e-5, 1e-6);
  }
}

TEST_CASE("CUDA: the libtorch-named losses, indexing and comparisons match the CPU", "[cuda]") {
  if (!gpu_present("CUDA libtorch-named ops")) return;
  using namespace tandem::indexing;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    Tensor x = randn_as({6, 5}, dt, 50), y = randn_as({6, 5}, dt, 51);
    Tensor p = sigmoid(randn_as({6, 5}, dt, 52)), w = add(abs(randn_as({5}, dt, 53)), 0.5);
    Tensor target = from_vector<int64_t>({0, 4, 2, -100, 1, 4});
    // Each loss with its gradient, as one vector.
    auto with_grad = [](const std::function<Tensor(const Tensor&)>& loss) -> Fn {
      return [loss](auto& v) {
        Tensor a = v[0].detach();
        a.set_requires_grad(true);
        Tensor l = loss(a);
        l.backward();
        return cat({l.reshape({-1}), a.grad().reshape({-1})});
      };
    };
    same_on_gpu("l1_loss", {x, y}, [&](auto& v) {
      return with_grad([&](const Tensor& a) { return l1_loss(a, v[1]); })(v);
    }, tol(dt));
    same_on_gpu("smooth_l1_loss", {x, y}, [&](auto& v) {
      return with_grad([&](const Tensor& a) { return smooth_l1_loss(a, v[1], Reduction::Sum, 0.5); })(v);
    }, tol(dt));
    same_on_gpu("binary_cross_entropy", {p, sigmoid(y), w}, [&](auto& v) {
      return with_grad([&](const Tensor& a) { return binary_cross_entropy(a, v[1], v[2]); })(v);
    }, tol(dt));
    same_on_gpu("binary_cross_entropy_with_logits", {x, p, w}, [&](auto& v) {
      return with_grad(
          [&](const Tensor& a) { return binary_cross_entropy_with_logits(a, v[1], {}, v[2]); })(v);
    }, tol(dt));
    same_on_gpu("nll_loss with class weights", {log_softmax(x, 1), target, w}, [&](auto& v) {
      return with_grad([&](const Tensor& a) { return nll_loss(a, v[1], v[2]); })(v);
    }, tol(dt));
    same_on_gpu("leaky_relu, norm, masked_fill", {x}, [&](auto& v) {
      return cat({leaky_relu(v[0], 0.2).reshape({-1}), v[0].norm().reshape({1}),
                  v[0].masked_fill(v[0] > 0.5, -1).reshape({-1})});
    }, tol(dt));
    same_on_gpu("index and index_put_", {x}, [&](auto& v) {
      Tensor c = v[0].clone();
      c.index_put_({Slice(1, None, 2), -1}, 7.0);
      return cat({c.reshape({-1}), v[0].index({"...", Slice(None, 2)}).reshape({-1})});
    }, tol(dt));
    same_on_gpu("index and index_put_ by indices and by a mask", {x}, [&](auto& v) {
      Tensor c = v[0].clone();
      const Tensor rows = from_vector<int64_t>({1, -1, 0}).to(c.device());
      c.index_put_({c > 0.5}, -2.0);
      c.index_put_({Slice(), rows}, 3.0);
      const Tensor pick = from_vector<int64_t>({4, 0, -2}).to(c.device());
      c.index_put_({rows, pick}, -5.0);  // several indices, broadcast together
      return cat({c.reshape({-1}), v[0].index({v[0] < 0}).reshape({-1}),
                  v[0].index({Slice(), rows}).reshape({-1}),
                  v[0].index({rows.view({3, 1}), pick}).reshape({-1})});
    }, tol(dt));
  }
}

TEST_CASE("CUDA: in-place ops on views in the graph (CopySlices) match the CPU", "[cuda]") {
  if (!gpu_present("CUDA in-place ops on views in the graph")) return;
  using namespace tandem::indexing;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    // A buffer filled step by step (h[t] = ...), masked_fill_, index_add_ and copy_ into
    // views: the values and both inputs' gradients, as one vector.
    same_on_gpu(
        "in place on views", {randn_as({4, 3}, dt, 60), randn_as({3}, dt, 61)},
        [&](auto& v) {
          Tensor x = v[0].detach().set_requires_grad(true);
          Tensor w = v[1].detach().set_requires_grad(true);
          Tensor h = zeros({4, 3}, TensorOptions(dt).device(x.device()));
          for (int64_t t = 0; t < 4; ++t)
            h[t] = tanh(add(mul(x[t], w), t > 0 ? h[t - 1] : zeros_like(w)));
          Tensor y = mul(x, 2.0);
          y.t()[1].masked_fill_(y.t()[1] > 0.5, 0.0);
          y.index({Slice(1, 3)})
              .index_add_(1, from_vector<int64_t>({2, 0}).to(x.device()),
                          h.index({Slice(0, 2), Slice(0, 2)}));
          y[3].copy_(w);
          Tensor loss = add(mul(h, h).sum(), mul(y, y).sum());
          loss.backward();
          return cat({h.detach().reshape({-1}), y.detach().reshape({-1}), x.grad().reshape({-1}),
                      w.grad().reshape({-1})});
        },
        tol(dt));
  }
}

TEST_CASE(
    "CUDA multi-head attention with masks, extra biases and a zero slot matches the CPU, "
    "forward and backward",
    "[cuda]") {
  if (!gpu_present("CUDA multi-head attention")) return;
  using Attn = nn::functional::MultiheadAttentionForwardFuncOptions;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    Tensor q = randn_as({3, 2, 8}, dt, 60), k = randn_as({4, 2, 8}, dt, 61);
    Tensor v = randn_as({4, 2, 8}, dt, 62), w = mul(randn_as({24, 8}, dt, 63), 0.4);
    Tensor b = randn_as({24}, dt, 64), ow = mul(randn_as({8, 8}, dt, 65), 0.4);
    Tensor ob = randn_as({8}, dt, 66), bk = randn_as({1, 1, 8}, dt, 67);
    Tensor bv = randn_as({1, 1, 8}, dt, 68);
    Tensor causal =
        from_vector<int64_t>({0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1}, {3, 4}).to(DType::boolean);
    Tensor padding = from_vector<int64_t>({0, 0, 1, 0, 0, 0, 0, 0}, {2, 4}).to(DType::boolean);
    same_on_gpu(
        "attention: output, weights and the query's gradient",
        {q, k, v, w, b, ow, ob, bk, bv, causal, padding},
        [](auto& x) {
          Tensor query = x[0].detach();
          query.set_requires_grad(true);
          auto [out, weights] = nn::functional::multi_head_attention_forward(
              query, x[1], x[2],
              Attn(8, 2, x[3], x[4], x[7], x[8], /*add_zero_attn=*/true, 0, x[5], x[6])
                  .attn_mask(x[9])
                  .key_padding_mask(x[10]));
          sum(mul(out, out)).backward();
          return cat({out.reshape({-1}), weights.reshape({-1}), query.grad().reshape({-1})});
        },
        dt == DType::f64 ? tol(dt) : Tol{1e-5, 1e-5});
  }
}

TEST_CASE("CUDA GradScaler unscale and clip_grad_norm match the CPU's, an inf is found",
          "[cuda]") {
  if (!gpu_present("CUDA gradient unscaling")) return;
  for (DType dt : kFloats) {
    INFO(dtype_name(dt));
    // A transposed gradient and a row-major one; `bad` puts an inf into the second.
    auto unscale = [&](Device device, bool bad) {
      std::vector<Tensor> params;
      for (int k = 0; k < 2; ++k) {
        Tensor grad = (randn_as({5, 9}, dt, 50 + k) * 512.0).to(device);
        if (k == 0) grad = grad.t();
        if (bad && k == 1)
          grad.narrow(0, 2, 1).narrow(1, 4, 1).fill_(std::numeric_limits<double>::infinity());
        params.push_back(zeros(grad.shape(), TensorOptions(dt).device(device)).set_requires_grad());
        params.back().set_grad(grad);
      }
      optim::SGD opt(params, optim::SGDOptions(0.1));
      amp::GradScaler s(amp::GradScalerOptions().init_scale(256.0));
      s.unscale(opt);
      // step() answers whether an inf was found; it refuses before any kernel runs, and SGD's
      // kernels take f32/f64 parameters only, so a finite f16/bf16 run does not ask.
      const int found = bad || dt == DType::f32 || dt == DType::f64 ? !s.step(opt) : -1;
      std::vector<Tensor> out;
      for (const Tensor& p : params) out.push_back(p.grad().cpu().clone());
      if (!bad) out.push_back(full({1}, optim::clip_grad_norm(params, 1e30), DType::f64));
      return std::make_pair(found, out);
    };
    for (bool bad : {false, true}) {
      INFO((bad ? "with an inf" : "finite"));
      const auto gpu = unscale(kGpu, bad), cpu = unscale(kCPU, bad);
      CHECK(gpu.first == cpu.first);
      if (gpu.first >= 0) CHECK(gpu.first == static_cast<int>(bad));
      if (bad) continue;
      for (size_t k = 0; k < gpu.second.size(); ++k)
        require_close(gpu.second[k], cpu.second[k], tol(dt).rtol, tol(dt).atol, "gradient");
    }
  }
}

TEST_CASE("CUDA GradScaler unscales many gradients in few launches, as the CPU", "[cuda]") {
  if (!gpu_present("CUDA gradient unscaling in chunk tables")) return;
  // 80 gradients: 72 f32 (more than one launch's table of 64; one of 2^17 + 3 elements, three
  // chunks) and 8 f16; `bad` puts an inf into the last element of the last f16 one.
  auto unscale = [&](Device device, bool bad) {
    std::vector<Tensor> params;
    for (int k = 0; k < 80; ++k) {
      const DType dt = k % 10 == 9 ? DType::f16 : DType::f32;
      const int64_t n = k == 5 ? (int64_t{1} << 17) + 3 : 1 + 7 * k;
      Tensor grad = (randn_as({n}, DType::f32, 300 + k) * 512.0).to(dt).to(device);
      if (bad && k == 79) grad.narrow(0, n - 1, 1).fill_(std::numeric_limits<double>::infinity());
      params.push_back(zeros({n}, TensorOptions(dt).device(device)).set_requires_grad());
      params.back().set_grad(grad);
    }
    optim::SGD opt(params, optim::SGDOptions(0.1));
    amp::GradScaler s(amp::GradScalerOptions().init_scale(256.0));
#if TANDEM_TEST_CUDA_EMULATION
    if (device == kGpu) tandem_emu_reset_counts();
    s.unscale(opt);
    // The found-inf flag's fill, two tables of f32 gradients, one of f16.
    if (device == kGpu) CHECK(tandem_emu_launches() == 4);
#else
    s.unscale(opt);
#endif
    // step() answers whether an inf was found (it refuses f16 parameters otherwise).
    const int found = bad ? !s.step(opt) : -1;
    std::vector<Tensor> out;
    for (const Tensor& p : params) out.push_back(p.grad().cpu().to(DType::f32));
    return std::make_pair(found, cat(out));
  };
  for (bool bad : {false, true}) {
    INFO((bad ? "with an inf" : "finite"));
    const auto gpu = unscale(kGpu, bad), cpu = unscale(kCPU, bad);
    CHECK(gpu.first == cpu.first);
    if (bad) CHECK(gpu.first == 1);
    // Each element once, by the same rounding: the same bits (an inf where the CPU has one).
    CHECK(equal(gpu.second, cpu.second));
  }
}

TEST_CASE("CUDA clip_grad_norm over many gradients in few launches, as the CPU's", "[cuda]") {
  if (!gpu_present("CUDA clip_grad_norm in chunk tables")) return;
  // 80 gradients as above (72 f32, one of three chunks; 8 f16), and a transposed one for the
  // p = 2 case last: its norm reads a contiguous copy, its clipping goes alone.
  for (const double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    INFO("norm_type " << p);
    auto clip = [&](Device device) {
      std::vector<Tensor> params;
      for (int k = 0; k < 81; ++k) {
        const DType dt = k % 10 == 9 ? DType::f16 : DType::f32;
        const int64_t n = k == 5 ? (int64_t{1} << 17) + 3 : 1 + 7 * k;
        Tensor grad = k == 80 ? randn_as({6, 5}, DType::f32, 380).to(device).t()
                              : (randn_as({n}, DType::f32, 300 + k) * 4.0).to(dt).to(device);
        params.push_back(
            zeros(grad.shape(), TensorOptions(grad.dtype()).device(device)).set_requires_grad());
        params.back().set_grad(grad);
      }
      if (p != 2.0) params.pop_back();
#if TANDEM_TEST_CUDA_EMULATION
      if (device == kGpu) tandem_emu_reset_counts();
#endif
      const double norm = optim::clip_grad_norm(params, 1.0, p);
#if TANDEM_TEST_CUDA_EMULATION
      // The terms: two tables of f32, one of f16, one launch joining each gradient's chunks;
      // the clipping: as many tables again. p = 2 adds the copy and the transposed one's own.
      if (device == kGpu) CHECK(tandem_emu_launches() == (p == 2.0 ? 9 : 7));
#endif
      std::vector<Tensor> out;
      for (const Tensor& t : params) out.push_back(t.grad().cpu().to(DType::f32).reshape({-1}));
      return std::make_pair(norm, cat(out));
    };
    const auto gpu = clip(kGpu), cpu = clip(kCPU);
    CHECK(gpu.first == Approx(cpu.first).epsilon(1e-12));
    require_close(gpu.second, cpu.second, 1e-6, 0, "clipped gradients");
  }
}

TEST_CASE("an MLP trains the same on the GPU as on the CPU", "[cuda]") {
  if (!gpu_present("CUDA MLP training")) return;
  auto train = [](Device device) {
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 32),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, 3));
    {
      Generator g(50);
      NoGradGuard no_grad;
      for (Tensor& p : model->parameters()) p.copy_(randn(p.shape(), DType::f32, &g) * 0.3);
    }
    model->to(device);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    for (int k = 0; k < 5; ++k) {
      Tensor x = randn_as({20, 12}, DType::f32, 60 + k).to(device);
      Tensor y = randn_as({20, 3}, DType::f32, 70 + k).to(device);
      opt.zero_grad();
      mse_loss(model->forward(x), y).backward();
      opt.step();
    }
    std::vector<Tensor> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.detach().cpu());
    return out;
  };
  auto gpu = train(kGpu), cpu = train(kCPU);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i)
    require_close(gpu[i], cpu[i], 1e-4, 1e-5, "parameter " + std::to_string(i));
}

namespace {

// f(inputs) and the gradients of sum(f(inputs) * weights) with respect to every input, as one
// flat tensor: forward and backward compared at once.
Fn with_gradients(const Fn& f) {
  return [f](const std::vector<Tensor>& v) {
    std::vector<Tensor> leaves;
    for (const Tensor& x : v) {
      Tensor l = x.detach();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor y = f(leaves);
    Generator g(77);
    Tensor w = randn(y.shape(), DType::f64, &g).to(y.dtype()).to(y.device());
    sum(mul(y, w)).backward();
    std::vector<Tensor> parts{y.reshape({-1})};
    for (const Tensor& l : leaves)  // inputs the op does not differentiate (running stats): none
      if (l.grad().defined()) parts.push_back(l.grad().reshape({-1}).to(y.dtype()));
    return cat(parts);
  };
}

// Convolutions and norms sum many products: f32 (TF32 off) and the narrow types need more room
// than elementwise ops.
Tol conv_tol(DType t) {
  switch (t) {
    case DType::f64: return {1e-10, 1e-10};
    case DType::f16: return {1e-2, 2e-2};
    case DType::bf16: return {5e-2, 1e-1};
    default: return {1e-4, 1e-4};
  }
}

}  // namespace

TEST_CASE(
    "CUDA LSTM, GRU and RNN (composed ops: matmuls, gates, stack) match the CPU, forward "
    "and backward",
    "[cuda]") {
  if (!gpu_present("CUDA recurrent layers")) return;
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    uint64_t seed = 900;
    auto weights = [&](int64_t gates, int64_t hidden, std::vector<int64_t> sizes, int directions) {
      std::vector<Tensor> w;
      for (int64_t in : sizes)
        for (int d = 0; d < directions; ++d)
          for (const Shape& s : {Shape{gates * hidden, in}, Shape{gates * hidden, hidden},
                                 Shape{gates * hidden}, Shape{gates * hidden}})
            w.push_back(randn_as(s, t, seed++) * 0.4);
      return w;
    };
    // Two layers, both directions, batch_first; states given.
    std::vector<Tensor> in{randn_as({3, 5, 4}, t, 1), randn_as({4, 3, 6}, t, 2),
                           randn_as({4, 3, 6}, t, 3)};
    for (Tensor& w : weights(4, 6, {4, 12}, 2)) in.push_back(w);
    same_on_gpu("lstm", in, with_gradients([](const std::vector<Tensor>& v) {
                  auto [out, h, c] = lstm(v[0], {v[1], v[2]}, {v.begin() + 3, v.end()}, true, 2,
                                          0.0, false, true, true);
                  return cat({out.flatten(), h.flatten(), c.flatten()});
                }),
                conv_tol(t));
    // Packed: lengths 3, 5, 2 and 4 sorted on the way in and back on the way out.
    std::vector<Tensor> pin{randn_as({5, 4, 4}, t, 11), randn_as({2, 4, 6}, t, 12),
                            randn_as({2, 4, 6}, t, 13)};
    for (Tensor& w : weights(4, 6, {4}, 2)) pin.push_back(w);
    same_on_gpu(
        "packed lstm", pin, with_gradients([](const std::vector<Tensor>& v) {
          namespace R = nn::utils::rnn;
          auto p = R::pack_padded_sequence(v[0], from_vector<int64_t>({3, 5, 2, 4}), false, false);
          auto order = [&](const Tensor& s) { return index_select(s, 1, p.sorted_indices()); };
          auto [out, h, c] = lstm(p.data(), p.batch_sizes(), {order(v[1]), order(v[2])},
                                  {v.begin() + 3, v.end()}, true, 1, 0.0, false, true);
          auto padded = std::get<0>(R::pad_packed_sequence(
              R::PackedSequence(out, p.batch_sizes(), p.sorted_indices()), false, -0.5));
          return cat({padded.flatten(), h.flatten(), c.flatten()});
        }),
        conv_tol(t));
    std::vector<Tensor> gin{randn_as({7, 2, 3}, t, 4), randn_as({1, 2, 5}, t, 5)};
    for (Tensor& w : weights(3, 5, {3}, 1)) gin.push_back(w);
    same_on_gpu("gru", gin, with_gradients([](const std::vector<Tensor>& v) {
                  auto [out, h] =
                      gru(v[0], v[1], {v.begin() + 2, v.end()}, true, 1, 0.0, false, false, false);
                  return cat({out.flatten(), h.flatten()});
                }),
                conv_tol(t));
    gin.resize(2);
    for (Tensor& w : weights(1, 5, {3}, 1)) gin.push_back(w);
    // The cells: one step of the sequence forms.
    std::vector<Tensor> cin{randn_as({2, 4}, t, 6), randn_as({2, 5}, t, 7), randn_as({2, 5}, t, 8)};
    for (Tensor& w : weights(4, 5, {4}, 1)) cin.push_back(w);
    same_on_gpu("lstm_cell", cin, with_gradients([](const std::vector<Tensor>& v) {
                  auto [h, c] = lstm_cell(v[0], {v[1], v[2]}, v[3], v[4], v[5], v[6]);
                  return cat({h.flatten(), c.flatten() * 2.0});
                }),
                conv_tol(t));
    same_on_gpu("rnn_tanh", gin, with_gradients([](const std::vector<Tensor>& v) {
                  auto [out, h] = rnn_tanh(v[0], v[1], {v.begin() + 2, v.end()}, true, 1, 0.0,
                                           false, false, false);
                  return cat({out.flatten(), h.flatten()});
                }),
                conv_tol(t));
  }
}

TEST_CASE("CUDA interpolate, flip, repeat and chunk match the CPU, forward and backward",
          "[cuda]") {
  if (!gpu_present("CUDA resizing")) return;
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    const std::vector<Tensor> in{randn_as({2, 3, 5, 4}, t, 31)};
    same_on_gpu("nearest", in, with_gradients([](const std::vector<Tensor>& v) {
                  return interpolate(v[0], Shape{7, 9}, {});
                }),
                tol(t));
    same_on_gpu("bilinear", in, with_gradients([](const std::vector<Tensor>& v) {
                  return interpolate(v[0], {}, std::vector<double>{1.5, 2.0}, "bilinear");
                }),
                tol(t));
    same_on_gpu("bicubic, trilinear, linear, nearest-exact, area", in,
                with_gradients([](const std::vector<Tensor>& v) {
                  const Tensor volume = v[0].unsqueeze(2);  // (2, 3, 1, 5, 4)
                  return cat({interpolate(v[0], Shape{7, 3}, {}, kBicubic).flatten(),
                              interpolate(volume, Shape{2, 6, 3}, {}, kTrilinear, true).flatten(),
                              interpolate(v[0].flatten(2), Shape{9}, {}, kLinear).flatten(),
                              interpolate(v[0], Shape{3, 7}, {}, kNearestExact).flatten(),
                              interpolate(v[0], Shape{2, 3}, {}, kArea).flatten()});
                }),
                tol(t));
    same_on_gpu("grid_sample (bilinear, nearest, bicubic; each padding), affine_grid",
                {in[0], randn_as({2, 2, 3}, t, 32)},
                with_gradients([](const std::vector<Tensor>& v) {
                  const Tensor grid = affine_grid(v[1], {2, 3, 4, 6}, true);
                  return cat({grid_sample(v[0], grid).flatten(),
                              grid_sample(v[0], grid, "bilinear", kReflection, true).flatten(),
                              grid_sample(v[0], mul(grid, 1.5), "nearest", kBorder).flatten(),
                              grid_sample(v[0], grid, "bicubic", kReflection).flatten()});
                }),
                // f32: theta's gradient sums every output's, in the GPU's other order
                t == DType::f32 ? Tol{1e-4, 1e-4} : tol(t));
    same_on_gpu("flip, repeat, chunk", in, with_gradients([](const std::vector<Tensor>& v) {
                  // 6 channels in chunks of ceil(6 / 4) = 2: three pieces, as torch's.
                  std::vector<Tensor> parts = v[0].flip({1, 3}).repeat({1, 2, 1, 1}).chunk(4, 1);
                  REQUIRE(parts.size() == 3);
                  return cat({parts[0] * 2.0, parts[2]}, 1);
                }),
                tol(t));
    // Padding by reflection, replication and wrapping: index_select with computed indices.
    same_on_gpu("reflect, replicate, circular pad", in,
                with_gradients([](const std::vector<Tensor>& v) {
                  return cat({pad(v[0], {1, 2, 3, 1}, PadMode::reflect).flatten(),
                              pad(v[0], {2, 0, 1, 4}, PadMode::replicate).flatten(),
                              pad(v[0], {4, 1}, PadMode::circular).flatten() * 3.0});
                }),
                tol(t));
    // Adaptive max pooling: index_select of the windows' positions, then max; and the
    // positions it picked.
    same_on_gpu("adaptive_max_pool2d", in, with_gradients([](const std::vector<Tensor>& v) {
                  auto [values, indices] = adaptive_max_pool2d(v[0], {2, 3});
                  return cat({values.flatten(), indices.to(values.dtype()).flatten()});
                }),
                tol(t));
    // The max pools' indices (3-d: the depth pool's index gathers the plane's) and unpooling
    // by them (a scatter; its gradient gathers back).
    same_on_gpu("max_pool3d_with_indices, max_unpool2d", {randn_as({2, 2, 4, 6, 5}, t, 79)},
                with_gradients([](const std::vector<Tensor>& v) {
                  auto [values, indices] = max_pool3d_with_indices(v[0], 2, 2, Int3(1, 0, 1));
                  auto [y, i] = max_pool2d_with_indices(v[0].flatten(1, 2), 2);
                  return cat({values.flatten(), indices.to(values.dtype()).flatten(),
                              max_unpool2d(y, i, {6, 5}).flatten()});
                }),
                tol(t));
  }
}

TEST_CASE("CUDA convolutions through cuDNN match the CPU, forward and backward", "[cuda]") {
  if (!gpu_present("CUDA conv2d")) return;
  tandem::testing::NoTf32 no_tf32;
  struct Case {
    const char* name;
    Shape x, w;
    Int2 stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases{
      {"3x3 pad 1", {2, 3, 9, 8}, {4, 3, 3, 3}, 1, 1, 1, 1},
      {"3x3 stride 2", {2, 4, 9, 9}, {6, 4, 3, 3}, 2, 1, 1, 1},
      {"1x1 stride 2 (shortcut)", {2, 4, 8, 8}, {8, 4, 1, 1}, 2, 0, 1, 1},
      {"7x7 stride 2 pad 3 (stem)", {1, 3, 15, 15}, {5, 3, 7, 7}, 2, 3, 1, 1},
      {"dilated, grouped", {2, 4, 10, 10}, {6, 2, 3, 3}, 1, 2, 2, 2},
      {"empty batch", {0, 3, 9, 8}, {4, 3, 3, 3}, 1, 1, 1, 1},
  };
  for (DType dt : kFloats) {
    for (const Case& c : cases) {
      INFO(c.name << ", " << dt);
      Tensor x = randn_as(c.x, dt, 80), w = randn_as(c.w, dt, 81), b = randn_as({c.w[0]}, dt, 82);
      same_on_gpu("conv2d", {x, w, b}, with_gradients([&c](const std::vector<Tensor>& v) {
        return conv2d(v[0], v[1], v[2], c.stride, c.padding, c.dilation, c.groups);
      }), conv_tol(dt));
    }
  }
  // Benchmark mode times the algorithms once per shape; the answer is the same.
  cuda::set_cudnn_benchmark(true);
  Tensor x = randn_as({2, 3, 9, 8}, DType::f32, 83), w = randn_as({4, 3, 3, 3}, DType::f32, 84);
  same_on_gpu("conv2d, benchmark mode", {x, w}, with_gradients([](const std::vector<Tensor>& v) {
    return conv2d(v[0], v[1], Tensor(), 1, 1);
  }), conv_tol(DType::f32));
  cuda::set_cudnn_benchmark(false);
}

TEST_CASE(
    "TF32: f32 convolutions take it by default, matrix products only when allowed, both "
    "switchable",
    "[cuda]") {
  if (!gpu_present("CUDA TF32")) return;
  // TF32 keeps 10 of f32's 23 mantissa bits: products of TF32-rounded operands err by about
  // 2^-11 of their size, f32's by 2^-24. Errors against the f64 result, relative to its largest
  // value, for the convolution's output and both its gradients, and for a matrix product.
  auto error = [](const Tensor& got, const Tensor& exact) {
    return amax(abs(sub(got.cpu().to(DType::f64), exact)), {}).item<double>() /
           amax(abs(exact), {}).item<double>();
  };
  const Tensor x = randn_as({2, 32, 12, 12}, DType::f32, 40);
  const Tensor w = randn_as({32, 32, 3, 3}, DType::f32, 41);
  const Tensor r = randn_as({2, 32, 12, 12}, DType::f32, 42);  // weighs the outputs: dy = r
  auto conv_and_grads = [&](Device device, DType dt) {
    Tensor xd = x.to(device, dt), wd = w.to(device, dt);
    xd.set_requires_grad(true);
    wd.set_requires_grad(true);
    Tensor y = conv2d(xd, wd, Tensor(), 1, 1);
    auto g = autograd::grad({sum(mul(y, r.to(device, dt)))}, {xd, wd});
    return std::vector<Tensor>{y.detach(), g[0], g[1]};
  };
  const auto exact = conv_and_grads(kCPU, DType::f64);
  auto conv_errors = [&] {
    const auto got = conv_and_grads(kGpu, DType::f32);
    return std::vector<double>{error(got[0], exact[0]), error(got[1], exact[1]),
                               error(got[2], exact[2])};
  };
  const Tensor a = randn_as({96, 200}, DType::f32, 43), b = randn_as({200, 80}, DType::f32, 44);
  const Tensor product = mm(a.to(DType::f64), b.to(DType::f64));
  auto mm_error = [&] { return error(mm(a.to(kGpu), b.to(kGpu)), product); };

  REQUIRE(cuda::allow_tf32_conv());  // PyTorch's defaults
  REQUIRE_FALSE(cuda::allow_tf32_matmul());
  const auto on = conv_errors();
  const double mm_off = mm_error();
  std::vector<double> off;
  double mm_on = 0;
  {
    tandem::testing::NoTf32 no_tf32;
    off = conv_errors();
    cuda::set_allow_tf32_matmul(true);
    mm_on = mm_error();
    cuda::set_allow_tf32_matmul(false);
  }
  const char* names[] = {"output", "input gradient", "weight gradient"};
  for (int i = 0; i < 3; ++i) {
    INFO("convolution " << names[i] << ": TF32 " << on[i] << ", f32 " << off[i]);
    CHECK(off[i] < 1e-5);
    CHECK(on[i] < 5e-3);
  }
  INFO("matrix product: TF32 " << mm_on << ", f32 " << mm_off);
  CHECK(mm_off < 1e-5);
  CHECK(mm_on < 5e-3);
  // TF32 in use shows as errors far above f32's. The emulation rounds the operands as tensor
  // cores do, so it must show; on a GPU the libraries may pick a kernel without tensor cores
  // for some problem, which is allowed, so there it is reported.
  bool all_tf32 = mm_on > 2e-5;
  for (int i = 0; i < 3; ++i) all_tf32 = all_tf32 && on[i] > 2e-5;
#ifdef TANDEM_TEST_CUDA_EMULATION
  CHECK(all_tf32);
#else
  if (!all_tf32) WARN("TF32 allowed, yet some product ran at f32's accuracy (no tensor cores)");
#endif
}

TEST_CASE("CUDA convolutions past cuDNN's 32-bit indexing go in slices of the batch", "[cuda]") {
  if (!gpu_present("CUDA convolutions in slices")) return;
  tandem::testing::NoTf32 no_tf32;
  // The limit (2^31 - 1 elements per tensor of a call) lowered to 600: a (5, 4, 9, 8) output
  // holds 288 per sample, so calls take two samples, two and one; the weight's and bias's
  // gradients are summed over the slices.
  struct Limit {
    int64_t saved = cuda::cudnn_max_elements();
    explicit Limit(int64_t n) { cuda::set_cudnn_max_elements(n); }
    ~Limit() { cuda::set_cudnn_max_elements(saved); }
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dt);
    Tensor x = randn_as({5, 3, 9, 8}, dt, 90), w = randn_as({4, 3, 3, 3}, dt, 91);
    Tensor b = randn_as({4}, dt, 92), wt = randn_as({3, 4, 3, 3}, dt, 93);
    Limit limit(600);
    same_on_gpu("conv2d in slices", {x, w, b}, with_gradients([](const std::vector<Tensor>& v) {
      return conv2d(v[0], v[1], v[2], 1, 1);
    }), conv_tol(dt));
    same_on_gpu("channels-last conv2d in slices", {x.contiguous(MemoryFormat::ChannelsLast), w},
                with_gradients([](const std::vector<Tensor>& v) {
                  return conv2d(v[0], v[1], Tensor(), 2, 1);
                }), conv_tol(dt));
    same_on_gpu("conv_transpose2d in slices", {x, wt},
                with_gradients([](const std::vector<Tensor>& v) {
                  return conv_transpose2d(v[0], v[1], Tensor(), 1, 1);
                }), conv_tol(dt));
  }
  Limit limit(100);  // one sample's output alone is past it
  const Tensor x = randn_as({2, 3, 9, 8}, DType::f32, 94).to(kGpu);
  const Tensor w = randn_as({4, 3, 3, 3}, DType::f32, 95).to(kGpu);
  CHECK_THAT(error_of([&] { conv2d(x, w, Tensor(), 1, 1); }),
             Catch::Contains("one sample's input or output holds 288 elements") &&
                 Catch::Contains("32-bit indexing"));
}

TEST_CASE("CUDA transposed convolutions (cuDNN's backward data) match the CPU, both layouts",
          "[cuda]") {
  if (!gpu_present("CUDA transposed convolutions")) return;
  tandem::testing::NoTf32 no_tf32;
  for (DType dt : kFloats) {
    for (bool channels_last : {false, true}) {
      if (channels_last && dt == DType::f64) continue;  // f64 convolves row-major
      INFO("dtype " << dt << (channels_last ? ", channels-last" : ""));
      Tensor x = randn_as({2, 8, 5, 6}, dt, 60), w = randn_as({8, 4, 3, 3}, dt, 61);
      Tensor b = randn_as({8}, dt, 62), gy = randn_as({2, 8, 10, 12}, dt, 63);
      if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
      // Output, then the gradients of input, weight and bias, as one vector. groups 2.
      Fn f = [](auto& v) {
        Tensor xi = v[0].detach(), wi = v[1].detach(), bi = v[2].detach();
        xi.set_requires_grad(true);
        wi.set_requires_grad(true);
        bi.set_requires_grad(true);
        Tensor y = conv_transpose2d(xi, wi, bi, 2, 1, 1, /*groups=*/2);
        y.backward(v[3]);
        return cat({y.reshape({-1}), xi.grad().reshape({-1}), wi.grad().reshape({-1}),
                    bi.grad().reshape({-1})});
      };
      same_on_gpu("conv_transpose2d", {x, w, b, gy}, f, conv_tol(dt));
      if (!channels_last)
        same_on_gpu(
            "conv_transpose1d and conv_transpose3d", {x, w, b},
            with_gradients([](const std::vector<Tensor>& v) {
              const Tensor x3 = v[0].reshape({2, 8, 5, 3, 2});
              const Tensor w3 = v[1].narrow(3, 0, 2).reshape({8, 4, 3, 1, 2});
              return cat(
                  {conv_transpose1d(v[0].flatten(2), v[1].select(3, 0), v[2], 2, 1, 1, 2).flatten(),
                   conv_transpose3d(x3, w3, v[2], {2, 1, 2}, 1, {1, 0, 0}, 2).flatten()});
            }),
            conv_tol(dt));
      // An output_padding of a stride or more, allowed below the dilation: cuDNN refuses the
      // output size it gives (the op pads the input instead).
      same_on_gpu("output_padding >= stride", {x, w, b},
                  with_gradients([](const std::vector<Tensor>& v) {
                    return conv_transpose2d(v[0], v[1], v[2], Int2(1, 2), 1, Int2(1, 1), 2,
                                            Int2(2, 1));
                  }), conv_tol(dt));
    }
  }
}

TEST_CASE("CUDA convolutions without input or output channels give the CPU's bias and zeros",
          "[cuda]") {
  if (!gpu_present("CUDA convolutions of zero channels")) return;
  // cuDNN takes no descriptor with a zero size; the CPU convolves nothing.
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    same_on_gpu("C_in = 0", {randn_as({2, 0, 5, 5}, dt, 71), randn_as({3, 0, 3, 3}, dt, 72),
                             randn_as({3}, dt, 70)},
                with_gradients([](const std::vector<Tensor>& v) {
                  return conv2d(v[0], v[1], v[2], 1, 1);
                }), conv_tol(dt));
    same_on_gpu("C_out = 0", {randn_as({2, 3, 5, 5}, dt, 73), randn_as({0, 3, 3, 3}, dt, 74)},
                with_gradients([](const std::vector<Tensor>& v) {
                  return conv2d(v[0], v[1], Tensor(), 1, 1);
                }), conv_tol(dt));
  }
}

TEST_CASE("CUDA channels-last convolutions (cuDNN's NHWC) match the CPU's row-major ones",
          "[cuda]") {
  if (!gpu_present("CUDA channels-last conv2d")) return;
  tandem::testing::NoTf32 no_tf32;
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    // 3x3, the strided 3x3 and the 1x1 shortcut of a ResNet, one input channel (the stem of a
    // Fashion-MNIST model) included; then batch norm + relu and pooling on the result.
    Tensor x = randn_as({2, 8, 9, 9}, dt, 140), x1 = randn_as({2, 1, 9, 9}, dt, 141);
    Tensor w3 = randn_as({16, 8, 3, 3}, dt, 142), w1 = randn_as({16, 8, 1, 1}, dt, 143);
    Tensor ws = randn_as({8, 1, 3, 3}, dt, 144), b = randn_as({16}, dt, 145);
    auto layout_kept = [cl](const Tensor& y) {
      if (y.is_cuda()) REQUIRE(y.suggest_memory_format() == cl);
      return y;
    };
    same_on_gpu("3x3 pad 1", {x, w3, b}, with_gradients([&](const std::vector<Tensor>& v) {
      return layout_kept(conv2d(v[0].contiguous(cl), v[1], v[2], 1, 1));
    }), conv_tol(dt));
    same_on_gpu("3x3 stride 2", {x, w3}, with_gradients([&](const std::vector<Tensor>& v) {
      return layout_kept(conv2d(v[0].contiguous(cl), v[1], Tensor(), 2, 1));
    }), conv_tol(dt));
    same_on_gpu("1x1 stride 2", {x, w1}, with_gradients([&](const std::vector<Tensor>& v) {
      return layout_kept(conv2d(v[0].contiguous(cl), v[1], Tensor(), 2, 0));
    }), conv_tol(dt));
    // Batch norm on the channels-last view (channels innermost), training and evaluation.
    const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;
    Tensor gamma = randn_as({8}, pdt, 146), beta = randn_as({8}, pdt, 147);
    Tensor mean = randn_as({8}, pdt, 148), var = add(abs(randn_as({8}, pdt, 149)), 0.5);
    Tensor r = randn_as({2, 8, 9, 9}, dt, 150);
    for (bool training : {true, false}) {
      INFO((training ? "training" : "evaluation"));
      same_on_gpu("batch_norm_relu + residual", {x, gamma, beta, mean, var, r},
                  with_gradients([&](const std::vector<Tensor>& v) {
                    Tensor rm = v[3].detach().clone(), rv = v[4].detach().clone();
                    return layout_kept(batch_norm_relu(v[0].contiguous(cl), rm, rv, v[1], v[2],
                                                       training, 0.1, 1e-5, v[5].contiguous(cl)));
                  }), conv_tol(dt));
    }
    // 24 channels: 3 or 6 groups of 16-byte vectors per row (a count that does not divide a
    // warp), each thread keeping its channels across rows; and one element into memory, where
    // no vector is aligned (one element per thread).
    Tensor x24 = randn_as({3, 24, 5, 7}, dt, 151), r24 = randn_as({3, 24, 5, 7}, dt, 152);
    Tensor g24 = randn_as({24}, pdt, 153), b24 = randn_as({24}, pdt, 154);
    for (const bool shift : {false, true}) {
      INFO("24 channels" << (shift ? ", one element into memory" : ""));
      auto laid = [&](const Tensor& t) {
        Tensor c = t.contiguous(cl);
        if (!shift) return c;
        Tensor flat = cat({zeros({1}, TensorOptions(c.dtype()).device(c.device())),
                           c.permute({0, 2, 3, 1}).reshape({-1})});
        return flat.slice(0, 1, c.numel() + 1).view({3, 5, 7, 24}).permute({0, 3, 1, 2});
      };
      same_on_gpu("batch_norm_relu + residual, 24 channels", {x24, g24, b24, r24},
                  with_gradients([&](const std::vector<Tensor>& v) {
                    return layout_kept(batch_norm_relu(laid(v[0]), Tensor(), Tensor(), v[1], v[2],
                                                       true, 0.1, 1e-5, laid(v[3])));
                  }), conv_tol(dt));
    }
    // The residual's gradient alone (the input, weight and bias need none): the gradient's sums
    // pass writes it, and no input pass follows.
    same_on_gpu(
        "batch_norm_relu + residual, the residual's gradient alone", {x24, g24, b24, r24},
        [&](const std::vector<Tensor>& v) {
          Tensor res = v[3].contiguous(cl).detach();
          res.set_requires_grad(true);
          Tensor y = batch_norm_relu(v[0].contiguous(cl), Tensor(), Tensor(), v[1], v[2], true, 0.1,
                                     1e-5, res);
          sum(mul(y, y)).backward();
          return res.grad();
        },
        conv_tol(dt));
    // 264 channels: 33 or 66 groups of vectors, more than a block of the statistics' channel
    // tiles takes (32 channels), several blocks and slices of rows; running statistics too.
    {
      Tensor xw = randn_as({2, 264, 10, 13}, dt, 155), rw = randn_as({2, 264, 10, 13}, dt, 156);
      Tensor gw = randn_as({264}, pdt, 157), bw = randn_as({264}, pdt, 158);
      Tensor mw = randn_as({264}, pdt, 159), vw = add(abs(randn_as({264}, pdt, 160)), 0.5);
      same_on_gpu("batch_norm_relu + residual, 264 channels", {xw, gw, bw, mw, vw, rw},
                  with_gradients([&](const std::vector<Tensor>& v) {
                    Tensor rm = v[3].detach().clone(), rv = v[4].detach().clone();
                    Tensor y = layout_kept(batch_norm_relu(v[0].contiguous(cl), rm, rv, v[1], v[2],
                                                           true, 0.1, 1e-5, v[5].contiguous(cl)));
                    return cat({y.flatten(), rm.to(y.dtype()), rv.to(y.dtype())});
                  }),
                  conv_tol(dt));
    }
    same_on_gpu("one input channel, then bn + relu, max pool", {x1, ws},
                with_gradients([&](const std::vector<Tensor>& v) {
                  Tensor h = layout_kept(conv2d(v[0].contiguous(cl), v[1], Tensor(), 1, 1));
                  h = layout_kept(batch_norm_relu(h, Tensor(), Tensor(), Tensor(), Tensor(), true));
                  return layout_kept(max_pool2d(h, 3, 2, 1));
                }), conv_tol(dt));
    // Pooling pools an NHWC input as it lies (src/kernels/pool.hpp's channels-last math).
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> pools{
        {"max_pool2d 3x3 s2 p1", [](const Tensor& t) { return max_pool2d(t, 3, 2, 1); }},
        {"max_pool2d 2x2 dilated", [](const Tensor& t) { return max_pool2d(t, 2, 1, 0, 2); }},
        {"max_pool2d 3x3 s2 ceil_mode",
         [](const Tensor& t) { return max_pool2d(t, 3, 2, 0, 1, true); }},
        {"avg_pool2d 3x3 s2 p1", [](const Tensor& t) { return avg_pool2d(t, 3, 2, 1); }},
        {"adaptive_avg_pool2d 4x3",
         [](const Tensor& t) {
           return adaptive_avg_pool2d(t, {4, 3});
         }},
        {"adaptive_avg_pool2d 1x1", [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
    };
    for (const auto& [name, pool] : pools)
      same_on_gpu(std::string("channels-last ") + name, {x},
                  with_gradients([&, pool = pool](const std::vector<Tensor>& v) {
                    return layout_kept(pool(v[0].contiguous(cl)));
                  }), conv_tol(dt));
  }
}

TEST_CASE("CUDA convolutions take channels-last weights as they lie and give their gradient so",
          "[cuda]") {
  if (!gpu_present("CUDA channels-last weights")) return;
  tandem::testing::NoTf32 no_tf32;
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    Tensor x = randn_as({2, 8, 9, 9}, dt, 160);
    for (int64_t k : {1, 3}) {
      INFO("kernel " << k);
      // A channels-last model's weight (Module::to), moved to the GPU as it lies.
      const Tensor w_rm = randn_as({16, 8, k, k}, dt, 161 + k);
      Tensor w = w_rm.contiguous(cl);
      REQUIRE(w.to(kGpu).strides() == w.strides());
      for (bool cl_input : {true, false}) {  // an NHWC call, and an NCHW one (a copy of w)
        INFO((cl_input ? "channels-last input" : "row-major input"));
        same_on_gpu("conv2d", {x, w}, with_gradients([&](const std::vector<Tensor>& v) {
          return conv2d(cl_input ? v[0].contiguous(cl) : v[0], v[1], Tensor(), 1, k / 2);
        }), conv_tol(dt));
        Tensor leaf = w.to(kGpu).set_requires_grad(true);
        Tensor in = x.to(kGpu);
        sum(conv2d(cl_input ? in.contiguous(cl) : in, leaf, Tensor(), 1, k / 2)).backward();
        CHECK(leaf.grad().strides() == w.strides());
      }
      // An NHWC call takes an NHWC weight without a copy: one allocation fewer than a row-major
      // 3x3 weight needs (a 1x1 one lies the same in both: none either). The algorithm and its
      // workspace are the same for both (cached per shape).
      Tensor in = x.to(kGpu).contiguous(cl);
      auto allocations = [&](const Tensor& weight) {
        conv2d(in, weight, Tensor(), 1, k / 2);  // the algorithm chosen and cached first
        const int64_t before = cuda::memory_stats(0).allocations;
        conv2d(in, weight, Tensor(), 1, k / 2);
        return cuda::memory_stats(0).allocations - before;
      };
      CHECK(allocations(w_rm.to(kGpu)) - allocations(w.to(kGpu)) == (k == 1 ? 0 : 1));
    }
  }
  // Under autocast a channels-last f32 weight is cast to a channels-last bf16 one: the call
  // takes it without a copy, and the f32 gradient comes back channels-last.
  Tensor x = randn_as({2, 8, 9, 9}, DType::f32, 170).to(kGpu).contiguous(cl);
  Tensor leaf = randn_as({16, 8, 3, 3}, DType::f32, 171).contiguous(cl).to(kGpu).set_requires_grad(true);
  {
    amp::autocast guard(DType::bf16);
    sum(conv2d(x, leaf, Tensor(), 1, 1)).backward();
  }
  CHECK(leaf.grad().dtype() == DType::f32);
  CHECK(leaf.grad().strides() == channels_last_strides(leaf.shape()));
}

TEST_CASE("CUDA batch norm (with residual and relu) and pooling match the CPU", "[cuda]") {
  if (!gpu_present("CUDA batch norm and pooling")) return;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    const Tol t = conv_tol(dt);
    const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;  // parameters and statistics
    Tensor gamma = randn_as({3}, pdt, 92), beta = randn_as({3}, pdt, 93);
    // Planes of 5x6 and of 4x8 (a multiple of any vector width), the latter also as a view one
    // element into its storage (no 16-byte alignment).
    Tensor x = randn_as({4, 3, 5, 6}, dt, 90), r = randn_as({4, 3, 5, 6}, dt, 91);
    Tensor x8 = randn_as({4, 3, 4, 8}, dt, 97), r8 = randn_as({4, 3, 4, 8}, dt, 98);
    auto maybe_shifted = [](const Tensor& t, bool shift) {
      if (!shift) return t;
      Tensor flat = cat({zeros({1}, TensorOptions(t.dtype()).device(t.device())), t.reshape({-1})});
      return flat.slice(0, 1, t.numel() + 1).view(t.shape());
    };
    struct Case {
      bool training;
      Tensor x, r;
      bool shift;
    };
    for (const Case& k : {Case{true, x, r, false}, Case{false, x, r, false}, Case{true, x8, r8, false},
                          Case{false, x8, r8, false}, Case{true, x8, r8, true}}) {
      const bool training = k.training, shift = k.shift;
      INFO((training ? "training" : "evaluation") << " on " << shape_str(k.x.shape())
           << (shift ? ", one element into memory" : ""));
      Tensor mean = randn_as({3}, pdt, 94), var = add(abs(randn_as({3}, pdt, 95)), 0.5);
      same_on_gpu("batch_norm", {k.x, gamma, beta, mean, var},
                  with_gradients([=](const std::vector<Tensor>& v) {
                    Tensor rm = v[3].detach().clone(), rv = v[4].detach().clone();
                    return batch_norm(maybe_shifted(v[0], shift), rm, rv, v[1], v[2], training);
                  }), t);
      same_on_gpu("batch_norm_relu + residual", {k.x, gamma, beta, mean, var, k.r},
                  with_gradients([=](const std::vector<Tensor>& v) {
                    Tensor rm = v[3].detach().clone(), rv = v[4].detach().clone();
                    return batch_norm_relu(maybe_shifted(v[0], shift), rm, rv, v[1], v[2],
                                           training, 0.1, 1e-5, maybe_shifted(v[5], shift));
                  }), t);
    }
    // BatchNorm1d's (N, C), and (N, C, 1): channels innermost either way (16 channels: vectors
    // of 4 or 8 where the dtype has them).
    for (const Shape& shape : {Shape{37, 16}, Shape{9, 16, 1}}) {
      INFO("(N, C) input " << shape_str(shape));
      Tensor g16 = randn_as({16}, pdt, 162), b16 = randn_as({16}, pdt, 163);
      same_on_gpu("batch_norm over (N, C)", {randn_as(shape, dt, 161), g16, b16},
                  with_gradients([](const std::vector<Tensor>& v) {
                    return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
                  }),
                  t);
    }
    // Row-major with more channels than a stream's first slice counters hold (a grid column a
    // channel, 1,024 counters at first): the counters grow, and the smaller calls before and
    // after still finish.
    {
      Tensor gw = randn_as({1100}, pdt, 164), bw = randn_as({1100}, pdt, 165);
      same_on_gpu("batch_norm over 1100 row-major channels",
                  {randn_as({2, 1100, 3}, dt, 166), gw, bw},
                  with_gradients([](const std::vector<Tensor>& v) {
                    return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
                  }),
                  t);
    }
    // Running statistics move the same way.
    same_on_gpu("running statistics", {x}, [pdt](const std::vector<Tensor>& v) {
      Tensor rm = zeros({3}, TensorOptions(pdt).device(v[0].device()));
      Tensor rv = ones({3}, TensorOptions(pdt).device(v[0].device()));
      batch_norm(v[0], rm, rv, Tensor(), Tensor(), true);
      return cat({rm, rv});
    }, t);

    Tensor p = randn_as({2, 3, 9, 10}, dt, 96);
    same_on_gpu("max_pool2d 3x3 s2 p1", {p}, with_gradients([](const std::vector<Tensor>& v) {
      return max_pool2d(v[0], 3, 2, 1);
    }), t);
    same_on_gpu("max_pool2d 2x2 dilated", {p}, with_gradients([](const std::vector<Tensor>& v) {
      return max_pool2d(v[0], 2, 1, 0, 2);
    }), t);
    same_on_gpu("max_pool2d 2x2 s2 ceil_mode", {p},
                with_gradients([](const std::vector<Tensor>& v) {
                  return max_pool2d(v[0], 2, 2, 0, 1, true);  // 9 rows: a last window of one
                }),
                t);
    same_on_gpu("avg_pool2d 3x3 s2 p1", {p}, with_gradients([](const std::vector<Tensor>& v) {
      return avg_pool2d(v[0], 3, 2, 1);
    }), t);
    same_on_gpu("adaptive_avg_pool2d 4x3", {p}, with_gradients([](const std::vector<Tensor>& v) {
      return adaptive_avg_pool2d(v[0], {4, 3});
    }), t);
    same_on_gpu("adaptive_avg_pool2d 1x1", {p}, with_gradients([](const std::vector<Tensor>& v) {
      return adaptive_avg_pool2d(v[0], 1);
    }), t);
  }
}

TEST_CASE("CUDA activations' backward kernels match the CPU's", "[cuda]") {
  if (!gpu_present("CUDA activation gradients")) return;
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    Tensor x = mul(randn_as({4, 3, 5}, dt, 130), 3.0);  // both sides of every switch
    const std::vector<std::pair<const char*, Fn>> activations{
        {"silu", [](auto& v) { return silu(v[0]); }},
        {"elu", [](auto& v) { return elu(v[0], 0.7, 1.2); }},
        {"softplus", [](auto& v) { return softplus(v[0], 2.0, 1.0); }},
        {"mish", [](auto& v) { return mish(v[0]); }},
        {"hardswish", [](auto& v) { return hardswish(v[0]); }},
        {"hardsigmoid", [](auto& v) { return hardsigmoid(v[0]); }},
        {"log_sigmoid", [](auto& v) { return log_sigmoid(v[0]); }},
        {"hardtanh", [](auto& v) { return hardtanh(v[0], -0.5, 0.8); }},
        {"leaky_relu", [](auto& v) { return leaky_relu(v[0], 0.2); }},
        {"softsign", [](auto& v) { return softsign(v[0]); }},
    };
    for (const auto& a : activations) same_on_gpu(a.first, {x}, with_gradients(a.second), tol(dt));
    same_on_gpu("prelu, a weight per channel", {x, randn_as({3}, dt, 131)},
                with_gradients([](auto& v) { return prelu(v[0], v[1]); }), tol(dt));
    same_on_gpu("prelu, one weight", {x, randn_as({1}, dt, 132)},
                with_gradients([](auto& v) { return prelu(v[0], v[1]); }), tol(dt));
  }
}

TEST_CASE("CUDA 3-d convolution and pooling, and avg_pool2d's divisor options, match the CPU",
          "[cuda]") {
  if (!gpu_present("CUDA 3-d convolution and pooling")) return;
  tandem::testing::NoTf32 no_tf32;  // f32 convolutions to f32's tolerance
  for (DType dt : kFloats) {
    INFO("dtype " << dt);
    const Tol t = conv_tol(dt);
    Tensor x = randn_as({2, 4, 5, 6, 7}, dt, 120), w = randn_as({6, 2, 3, 2, 3}, dt, 121);
    Tensor b = randn_as({6}, dt, 122);
    same_on_gpu("conv3d, groups 2", {x, w, b}, with_gradients([](const std::vector<Tensor>& v) {
                  return conv3d(v[0], v[1], v[2], {2, 1, 1}, {1, 0, 1}, {1, 2, 1}, 2);
                }),
                t);
    same_on_gpu("max_pool3d ceil_mode", {x}, with_gradients([](const std::vector<Tensor>& v) {
                  return max_pool3d(v[0], {3, 2, 3}, 2, 1, 1, true);
                }),
                t);
    same_on_gpu("avg_pool3d exclude padding", {x}, with_gradients([](const std::vector<Tensor>& v) {
                  return avg_pool3d(v[0], 3, 2, 1, true, false);
                }),
                t);
    same_on_gpu("adaptive_avg_pool3d", {x}, with_gradients([](const std::vector<Tensor>& v) {
                  return adaptive_avg_pool3d(v[0], {2, 4, 3});
                }),
                t);
    Tensor p = randn_as({2, 3, 9, 10}, dt, 123);
    same_on_gpu("avg_pool2d ceil_mode, padding not counted", {p},
                with_gradients([](const std::vector<Tensor>& v) {
                  return avg_pool2d(v[0], 3, 2, 1, true, false);
                }),
                t);
    same_on_gpu("avg_pool2d divisor_override", {p.contiguous(MemoryFormat::ChannelsLast)},
                with_gradients([](const std::vector<Tensor>& v) {
                  return avg_pool2d(v[0], 2, 1, 1, false, true, 3);
                }),
                t);
  }
}

TEST_CASE("CUDA batch norm statistics: one pass, exact for a large mean and a small spread",
          "[cuda]") {
  if (!gpu_present("CUDA batch norm statistics")) return;
  // 1000 +- 0.01: squares about zero in f32 would leave nothing of the variance. Channel 1
  // starts with an outlier, so the shift (each channel's first value) lies far from its mean.
  Tensor x = add(mul(randn_as({8, 4, 16, 16}, DType::f32, 180), 0.01), 1000.0);
  x.select(0, 0).select(0, 1).select(0, 0).select(0, 0).fill_(1e4);
  for (bool cl : {false, true}) {
    INFO((cl ? "channels-last" : "row-major"));
    // Momentum 1: the running statistics become the batch's (the variance unbiased).
    same_on_gpu("running statistics", {x}, [cl](const std::vector<Tensor>& v) {
      const Tensor in = cl ? v[0].contiguous(MemoryFormat::ChannelsLast) : v[0];
      Tensor rm = zeros({4}, TensorOptions(DType::f32).device(in.device()));
      Tensor rv = zeros({4}, TensorOptions(DType::f32).device(in.device()));
      batch_norm(in, rm, rv, Tensor(), Tensor(), true, 1.0, 1e-5);
      return cat({rm, rv});
    }, Tol{1e-4, 1e-9});  // the CPU centres on an f32 mean: (ulp(1000) / 2)^2 / 0.01^2 ~ 1e-5
  }
}

TEST_CASE("ResNet-20 trains the same on the GPU as on the CPU", "[cuda]") {
  if (!gpu_present("CUDA ResNet-20 training")) return;
  // In f64: in f32 one of the ~1M relu inputs per forward now and then lies within rounding of
  // zero, its sign differs between the devices, and three steps of momentum grow that into a
  // difference no tolerance covers (a simulation failed a quarter of the seeds in f32).
  auto train = [](Device device) {
    manual_seed(5);
    auto model = std::make_shared<nn::CifarResNet>(
        20, nn::ResNetOptions().in_channels(1).num_classes(10));
    model->to(device, DType::f64);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    for (int k = 0; k < 3; ++k) {
      Tensor x = randn_as({8, 1, 28, 28}, DType::f64, 100 + k).to(device);
      Generator g(200 + k);
      Tensor y = randint(0, 10, {8}, DType::i64, &g).to(device);
      opt.zero_grad();
      cross_entropy(model->forward(x), y).backward();
      opt.step();
    }
    std::vector<Tensor> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.detach().cpu());
    for (const Tensor& b : model->buffers()) out.push_back(b.detach().cpu().to(DType::f64));
    return out;
  };
  auto gpu = train(kGpu), cpu = train(kCPU);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i)
    require_close(gpu[i], cpu[i], 1e-8, 1e-10, "parameter or buffer " + std::to_string(i));
}

TEST_CASE(
    "CUDA ops switch to their tensors' GPU and back: the thread's current GPU stays as it was",
    "[cuda]") {
  if (!gpu_present("CUDA current device")) return;
  if (cuda::device_count() < 2) {
    WARN("one GPU: no other GPU to be current while ops run on cuda:0");
    return;
  }
  // On a thread of its own (the test thread's GPU stays as the other tests expect), with GPU 1
  // current: every kind of op on cuda:0, and after each the thread's current GPU.
  std::vector<std::pair<std::string, int>> after;
  std::exception_ptr failure;
  std::thread([&] {
    try {
      cuda::set_device(1);
      auto note = [&](const char* what) { after.emplace_back(what, cuda::current_device()); };
      note("set_device(1)");
      Tensor x = randn_as({2, 3, 8, 8}, DType::f32, 50).to(kGpu);
      Tensor w = randn_as({4, 3, 3, 3}, DType::f32, 51).to(kGpu);
      note("copies to cuda:0");
      Tensor r = relu(add(mul(x, 2.0), x));
      note("elementwise");
      sum(r).item<float>();
      note("a reduction, its value read");
      mm(x.reshape({6, 64}), x.reshape({6, 64}).t());
      note("matmul (cuBLAS)");
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor h = conv2d(x, w, Tensor(), 1, 1);
      h = batch_norm(h, Tensor(), Tensor(), Tensor(), Tensor(), true);
      Tensor logits = max_pool2d(h, 2).flatten(1).narrow(1, 0, 10);
      Tensor target = from_vector<int64_t>({3, 7}).to(kGpu);
      Tensor loss = cross_entropy(logits, target);
      note("conv (cuDNN), batch norm, pooling, cross entropy");
      loss.backward();
      note("backward");
      optim::SGD opt({w}, optim::SGDOptions(0.1).momentum(0.9));
      opt.step();
      note("an SGD step");
      index_select(x.detach(), 1, from_vector<int64_t>({2, 0}).to(kGpu));
      note("index_select (its bounds read)");
      randn({5}, TensorOptions().device(kGpu));
      note("randn on cuda:0");
      w.grad().cpu();
      note("a copy to the CPU");
    } catch (...) {
      failure = std::current_exception();
    }
  }).join();
  if (failure) std::rethrow_exception(failure);
  REQUIRE(after.size() == 11);
  for (const auto& [what, device] : after) {
    INFO("after " << what);
    CHECK(device == 1);
  }
}

TEST_CASE("a copy between GPUs comes after the work that wrote its source", "[cuda]") {
  if (!gpu_present("CUDA copies between GPUs")) return;
  if (cuda::device_count() < 2) {
    WARN("one GPU: no copy between GPUs");
    return;
  }
  // Each source written by a chain of kernels on GPU 0 (still queued when the copy is asked for,
  // where streams run their work on threads of their own), then copied to GPU 1 at once.
  for (int round = 0; round < 5; ++round) {
    Tensor x = full({1 << 16}, 1.0, Device("cuda:0"));
    for (int k = 0; k < 20; ++k) x = x + 1.0;
    const Tensor on_1 = x.to(Device("cuda:1"));
    REQUIRE(on_1.device() == Device("cuda:1"));
    const auto v = on_1.cpu().to_vector<float>();
    CHECK(v.front() == 21.0f);
    CHECK(v.back() == 21.0f);
  }
  // A block of GPU 0 marked as used on a stream of GPU 1: refused (its event could not be
  // recorded on that stream when the block is freed).
  const cuda::Stream on_gpu1(1);
  const Tensor block = full({4}, 1.0, Device("cuda:0"));
  CHECK_THAT(error_of([&] { cuda::record_stream(block.raw_data(), 0, on_gpu1); }),
             Catch::Contains("record_stream: the memory is on cuda:0, the stream on cuda:1"));
}

TEST_CASE("the GPU data path: pinned staging reused, asynchronous copies, augmentation on the GPU "
          "equal to the CPU's",
          "[cuda]") {
  if (!gpu_present("the GPU data path")) return;
  // A u8 dataset (n, 3, 9, 11) of varied pixels.
  const int64_t n = 50;
  Tensor images = empty({n, 3, 9, 11}, DType::u8);
  for (int64_t i = 0; i < images.numel(); ++i)
    images.data_ptr<uint8_t>()[i] = static_cast<uint8_t>((i * 53 + 7) % 256);
  Tensor labels = empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) labels.data_ptr<int64_t>()[i] = i % 10;
  auto data = std::make_shared<data::TensorDataset>(images, labels, 10);
  const auto augment =
      data::DeviceAugment().crop_padding(3).flip_p(0.5).mean({0.4f, 0.5f, 0.6f}).std({0.2f, 0.3f, 0.4f});
  const auto options = data::LoaderOptions().batch_size(16).workers(1).seed(9).augment_on_device(augment);
  data::DataLoader on_cpu(data, data::DistributedSampler(n), options);
  data::DataLoader on_gpu(data, data::DistributedSampler(n), data::LoaderOptions(options).device(kGpu));
  const int64_t host_allocs_before = cuda::pinned_memory_stats().device_allocs;
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    on_cpu.start_epoch(epoch);
    on_gpu.start_epoch(epoch);
    while (auto want = on_cpu.next()) {
      auto got = on_gpu.next();
      REQUIRE(got.has_value());
      REQUIRE(got->images.device() == kGpu);
      REQUIRE(got->labels.device() == kGpu);
      // Bit for bit: the kernel rounds as the CPU's does.
      CHECK(got->images.cpu().to_vector<float>() == want->images.to_vector<float>());
      CHECK(got->labels.cpu().to_vector<int64_t>() == want->labels.to_vector<int64_t>());
    }
    CHECK_FALSE(on_gpu.next().has_value());
  }
  // 24 batches of three staging buffers each came from a handful of cudaHostAlloc'd segments.
  CHECK(cuda::pinned_memory_stats().device_allocs - host_allocs_before <= 3);

  // A loader's workers make its GPU current (their CUDA calls without a device would otherwise
  // create a context on GPU 0): a dataset that notes the current GPU of the thread reading it.
  if (cuda::device_count() >= 2) {
    struct Noting : data::TensorDataset {
      using data::TensorDataset::TensorDataset;
      std::shared_ptr<std::atomic<int>> seen = std::make_shared<std::atomic<int>>(-1);
      int64_t get_bytes(int64_t index, uint8_t* out) const override {
        seen->store(cuda::current_device());
        return data::TensorDataset::get_bytes(index, out);
      }
    };
    auto noting = std::make_shared<Noting>(images, labels, 10);
    data::DataLoader on_gpu1(noting, data::DistributedSampler(n),
                             data::LoaderOptions(options).device(Device("cuda:1")));
    on_gpu1.start_epoch(0);
    REQUIRE(on_gpu1.next().has_value());
    CHECK(noting->seen->load() == 1);
  }

  // A pinned tensor copied without blocking, then freed at once: the copy still reads what it
  // held (its block is not reused before the copy is done). The stream is kept busy first, so
  // the copy cannot start before the host overwrites a block handed out too early.
#ifdef TANDEM_TEST_CUDA_EMULATION
  const int64_t busy_size = 64;  // streams run their work at once: nothing to keep busy
#else
  const int64_t busy_size = 4096;
#endif
  Tensor busy = randn({busy_size, busy_size}, DType::f32).to(kGpu);
  auto pinned_mib4 = [] {  // 1 Mi f32 in a block of the pinned allocator
    return from_blob(pinned_allocator().allocate(4 << 20), {1 << 20}, DType::f32, kCPU,
                     [](void* p) { pinned_allocator().deallocate(p, 4 << 20); });
  };
  for (int round = 0; round < 20; ++round) {
    for (int k = 0; k < 4; ++k) busy = matmul(busy, busy) * 1e-3;
    Tensor staged = pinned_mib4();
    staged.fill_(static_cast<double>(round));
    Tensor on_device = staged.to(kGpu, /*non_blocking=*/true);
    staged = Tensor();
    Tensor other = pinned_mib4();
    other.fill_(-1.0);  // would overwrite the first block if it were handed out again too early
    const auto v = on_device.cpu().to_vector<float>();
    CHECK(v.front() == static_cast<float>(round));
    CHECK(v.back() == static_cast<float>(round));
  }
}

TEST_CASE("CUDA gradients of gradients (create_graph) and layer/group norm match the CPU",
          "[cuda]") {
  if (!gpu_present("CUDA create_graph")) return;
  // A WGAN-GP-style critic (conv, batch norm, leaky relu, max pool, group norm, linear): the
  // input gradient taken with create_graph, its penalty, and the penalty's gradients of the
  // input and the weights. In f64, so the devices' summation orders do not matter.
  const std::vector<Tensor> inputs = {
      randn_as({2, 3, 8, 8}, DType::f64, 1), randn_as({4, 3, 3, 3}, DType::f64, 2),
      randn_as({4}, DType::f64, 3),          randn_as({4}, DType::f64, 4),
      randn_as({2, 36}, DType::f64, 5)};
  auto run = [](std::vector<Tensor> in) {
    for (Tensor& t : in) {  // leaves of this run: the caller's tensors stay as they are
      t = t.detach();
      t.set_requires_grad(true);
    }
    Tensor h = conv2d(in[0], in[1], Tensor(), 2, 1);
    h = leaky_relu(batch_norm(h, {}, {}, in[2], in[3], true), 0.2);
    h = group_norm(max_pool2d(h, 2, 1), 2);
    Tensor critic = sum(linear(h.flatten(1), in[4]));
    Tensor g = autograd::grad({critic}, {in[0]}, {}, {}, /*create_graph=*/true)[0];
    Tensor penalty = sum(pow(g.reshape({2, -1}).norm(2, 1) - 1.0, 2.0));
    auto second = autograd::grad({penalty}, in);
    return cat({g.reshape({-1}), second[0].reshape({-1}), second[1].reshape({-1}),
                second[2].reshape({-1}), second[3].reshape({-1}), second[4].reshape({-1})});
  };
  same_on_gpu("gradient penalty and its gradients", inputs, run, {1e-9, 1e-10});
  // Grouped and depthwise convolutions and gelu (both forms): under create_graph, recomputed from
  // plain convolutions and recorded ops.
  const std::vector<Tensor> grouped = {randn_as({2, 4, 6, 6}, DType::f64, 7),
                                       randn_as({4, 2, 3, 3}, DType::f64, 8),
                                       randn_as({4, 1, 3, 3}, DType::f64, 9)};
  auto run_grouped = [](std::vector<Tensor> in) {
    for (Tensor& t : in) {
      t = t.detach();
      t.set_requires_grad(true);
    }
    Tensor h = gelu(conv2d(in[0], in[1], Tensor(), 1, 1, 1, /*groups=*/2));
    h = gelu(conv2d(h, in[2], Tensor(), 2, 1, 1, /*groups=*/4), "tanh");
    Tensor g = autograd::grad({sum(h * h)}, {in[0]}, {}, {}, /*create_graph=*/true)[0];
    auto second = autograd::grad({sum(g * g)}, in);
    return cat({g.reshape({-1}), second[0].reshape({-1}), second[1].reshape({-1}),
                second[2].reshape({-1})});
  };
  same_on_gpu("grouped convolutions and gelu, gradients of gradients", grouped, run_grouped,
              {1e-9, 1e-10});
  // Layer norm's own kernels: a row per block, and the weight's and bias's gradients summed in
  // chunks of rows (300 rows: ten chunks), per dtype; without the affine part, and without the
  // input's gradient.
  for (DType dt : kFloats) {
    INFO("layer_norm " << dt);
    const Tol t = tol(dt);
    for (const bool affine : {true, false}) {
      for (const bool input_grad : {true, false}) {
        if (!affine && !input_grad) continue;
        for (const Shape& shape : std::vector<Shape>{{300, 2, 20}, {7, 515}, {5, 1}}) {
          const Shape normalized(shape.end() - (shape.size() == 3 ? 2 : 1), shape.end());
          same_on_gpu("layer_norm " + shape_str(shape) + (affine ? "" : ", no affine") +
                          (input_grad ? "" : ", no input gradient"),
                      {randn_as(shape, dt, 20), randn_as(normalized, dt, 21),
                       randn_as(normalized, dt, 22), randn_as(shape, dt, 23)},
                      [&](std::vector<Tensor> in) {
                        for (Tensor& leaf : in) leaf = leaf.detach();
                        in[0].set_requires_grad(input_grad);
                        in[1].set_requires_grad(true);
                        in[2].set_requires_grad(true);
                        Tensor w = affine ? in[1] : Tensor(), b = affine ? in[2] : Tensor();
                        Tensor y = layer_norm(in[0], normalized, w, b);
                        std::vector<Tensor> wanted, parts{y.reshape({-1})};
                        for (const Tensor& leaf : {in[0], w, b})
                          if (leaf.defined() && leaf.requires_grad()) wanted.push_back(leaf);
                        for (const Tensor& g : autograd::grad({y}, wanted, {in[3]}))
                          parts.push_back(g.reshape({-1}));
                        return cat(parts);
                      },
                      {t.rtol * 10, t.atol * 10});
        }
      }
    }
  }
}

TEST_CASE("a 0-dim CPU tensor beside a GPU tensor is a number, as in libtorch", "[cuda]") {
  if (!gpu_present("0-dim CPU operands")) return;
  Tensor host = randn({2, 3});
  Tensor x = host.to(kGpu).detach().set_requires_grad();
  Tensor s = tensor(2.5).set_requires_grad();  // on the CPU
  Tensor y = mul(x, s);
  REQUIRE(y.device() == kGpu);
  CHECK(equal(y.cpu(), mul(host, 2.5)));
  sum(y).backward();
  REQUIRE(s.grad().device().is_cpu());  // the gradient comes back to the scalar's device
  CHECK(s.grad().item<double>() == Approx(sum(host).item<double>()).epsilon(1e-6));
  CHECK(equal(x.grad().cpu(), full({2, 3}, 2.5)));
  // The other binary ops, comparisons, where and the in-place forms take it too.
  Tensor d = x.detach();
  CHECK(equal(add(d, tensor(1.0)).cpu(), add(host, 1.0)));
  CHECK(equal(sub(tensor(1.0), d).cpu(), sub(tensor(1.0), host)));
  CHECK(equal(div(d, tensor(4.0)).cpu(), div(host, tensor(4.0))));
  CHECK(equal(pow(abs(d), tensor(2.0)).cpu(), pow(abs(host), tensor(2.0))));
  CHECK(equal(maximum(d, tensor(0.0)).cpu(), relu(host)));
  CHECK(equal(gt(d, tensor(0.0)).cpu(), gt(host, tensor(0.0))));
  CHECK(equal(where(gt(d, tensor(0.0)), d, tensor(-1.0)).cpu(),
              where(gt(host, tensor(0.0)), host, tensor(-1.0))));
  Tensor z = d.clone();
  z.add_(tensor(1.0)).mul_(tensor(2.0));
  CHECK(equal(z.cpu(), mul(add(host, 1.0), 2.0)));
  // A CPU tensor with dims is still refused, naming the op.
  CHECK_THROWS_WITH(add(d, ones({1})), Catch::Contains("add: expected all tensors on one device"));
  CHECK_THROWS_WITH(d.add_(ones({3})), Catch::Contains("add_"));
}

TEST_CASE(
    "CUDA diagonals, rolls, windows, order statistics, cdist and the newer losses match the "
    "CPU, forward and backward",
    "[cuda]") {
  if (!gpu_present("CUDA shape ops and newer losses")) return;
  // pin_memory: page-locked where a GPU is, pinned once, and copied without the host waiting.
  const Tensor host = randn_as({3, 5}, DType::f32, 64);
  const Tensor pinned = host.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK_FALSE(host.is_pinned());
  CHECK(pinned.pin_memory().storage().is_same(pinned.storage()));
  CHECK(pinned.to(kGpu, /*non_blocking=*/true).cpu().equal(host));
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    const std::vector<Tensor> in{randn_as({4, 6}, t, 61), randn_as({4, 6}, t, 62),
                                 randn_as({4, 6}, t, 63)};
    same_on_gpu("views and shape ops", in, with_gradients([](const std::vector<Tensor>& v) {
                  auto grids = meshgrid({v[0].select(0, 0), v[1].select(1, 2)});
                  return cat(
                      {diagonal(v[0], 1).flatten(), diag(v[1].select(0, 1)).flatten(),
                       roll(v[2], {2, -1}, {1, 0}).flatten(), v[0].unfold(1, 4, 1).flatten(),
                       v[1].repeat_interleave(from_vector<int64_t>({1, 0, 2, 1}).to(v[1].device()),
                                              0)
                           .flatten(),
                       pixel_shuffle(v[2].reshape({1, 4, 2, 3}), 2).flatten(),
                       (grids[0] * grids[1]).flatten(),
                       im2col(v[0].reshape({1, 2, 3, 4}), 2, 1, 1, {1, 2}).flatten(),
                       col2im(v[1].reshape({1, 4, 6}), {3, 4}, 2).flatten(),
                       channel_shuffle(v[2].reshape({2, 4, 3}), 2).flatten(),
                       bilinear(v[0], v[1], v[2].reshape({4, 6, 1}).expand({4, 6, 6})).flatten(),
                       celu(v[0], 0.5).flatten(), softshrink(v[1], 0.3).flatten()});
                }),
                tol(t));
    same_on_gpu("order statistics and products", in,
                with_gradients([](const std::vector<Tensor>& v) {
                  auto [kth, kth_at] = v[0].kthvalue(2, 1);
                  auto [med, med_at] = v[1].median(0);
                  return cat(
                      {kth, kth_at.to(kth.dtype()), med, med_at.to(med.dtype()),
                       v[2].median().reshape({1}), cdist(v[0], v[1]).flatten(),
                       cdist(v[0], v[2], 1.0).flatten(),
                       cross(v[0].reshape({8, 3}), v[1].reshape({8, 3}), 1).flatten(),
                       linalg::vector_norm(v[2], 3.0, {1}),
                       searchsorted(std::get<0>(v[0].sort(1)), v[1]).to(v[0].dtype()).flatten()});
                }),
                tol(t));
    same_on_gpu("losses", in, with_gradients([](const std::vector<Tensor>& v) {
                  const Tensor sign = tandem::sign(v[2]).detach();  // (normal draws: never 0)
                  return stack({triplet_margin_loss(v[0], v[1], v[2], 0.5, 2.0, 1e-6, true),
                                cosine_embedding_loss(v[0], v[1], sign.select(1, 0)),
                                margin_ranking_loss(v[0], v[1], sign), soft_margin_loss(v[0], sign),
                                gaussian_nll_loss(v[0], v[1], exp(v[2])),
                                poisson_nll_loss(v[0], abs(v[1]).detach()),
                                multilabel_soft_margin_loss(v[0], (v[1] > 0).to(v[1].dtype()))});
                }),
                tol(t));
  }
}

TEST_CASE(
    "CUDA scans, sorts and scatters composed of other ops (cummax, quantile, unique, "
    "scatter_reduce, index_copy, masked_scatter, diff, nansum) match the CPU",
    "[cuda]") {
  if (!gpu_present("CUDA composite ops")) return;
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    Tensor x = randn_as({4, 6}, t, 91);
    x.index_put_({1, 2}, std::numeric_limits<double>::quiet_NaN());
    const std::vector<Tensor> in{x, randn_as({4, 6}, t, 92)};
    same_on_gpu(
        "cummax, cummin, quantile, nansum, diff, index_copy, masked_scatter", in,
        with_gradients([](const std::vector<Tensor>& v) {
          const Device d = v[0].device();
          const Tensor q = from_vector<double>({0.1, 0.5, 0.8}).to(v[0].dtype()).to(d);
          const Tensor clean = v[0].nan_to_num(0.0);
          return cat({cummax(v[1], 1).first.flatten(),
                      cummin(v[0], 0).second.to(v[0].dtype()).flatten(),
                      nanquantile(v[0], q, 1).flatten(),
                      quantile(clean, q, 0, false, "midpoint").flatten(), nansum(v[0], {0}),
                      nanmean(v[0], {1}), diff(v[1], 2, 0).flatten(),
                      clean.index_copy(0, from_vector<int64_t>({3, 1}).to(d), v[1].narrow(0, 0, 2))
                          .flatten(),
                      clean.masked_scatter(v[1] > 0, v[1] * 2.0).flatten()});
        }),
        tol(t));
    same_on_gpu(
        "scatter_reduce in every mode", in, with_gradients([](const std::vector<Tensor>& v) {
          const Tensor index =
              from_vector<int64_t>({0, 2, 0, 1, 2, 2, 1, 1, 0, 2, 2, 2}, {4, 3}).to(v[0].device());
          const Tensor self = v[0].nan_to_num(0.0).narrow(1, 0, 3);
          std::vector<Tensor> parts;
          for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
            for (bool include_self : {true, false})
              parts.push_back(scatter_reduce(self, 1, index, v[1], reduce, include_self).flatten());
          return cat(parts);
        }),
        tol(t));
    // The samplers draw the CPU's numbers from the same seed (Philox on both devices).
    same_on_gpu(
        "in-place samplers and normal, seeded", in,
        [](const std::vector<Tensor>& v) {
          Generator g(5);
          const TensorOptions o = v[0].options();
          return cat({empty({64}, o).exponential_(1.5, &g), empty({64}, o).log_normal_(0, 0.5, &g),
                      empty({64}, o).cauchy_(1, 2, &g), empty({64}, o).bernoulli_(0.4, &g),
                      empty({64}, o).random_(2, 9, &g), normal(v[1].flatten(), 2.0, &g)});
        },
        tol(t));
    same_on_gpu(
        "unique, unique_dim, unique_consecutive", in,
        [](const std::vector<Tensor>& v) {
          const Tensor r = round(mul(v[1], 2.0));
          auto [values, inverse, counts] = _unique2(r, true, true, true);
          auto [rows, row_inverse, row_counts] =
              unique_dim(r.narrow(1, 0, 2) > 0, 1, true, true, true);
          auto [runs, run_inverse, run_counts] = unique_consecutive(r.flatten(), true, true);
          return cat({values, inverse.to(r.dtype()).flatten(), counts.to(r.dtype()),
                      rows.to(r.dtype()).flatten(), row_inverse.to(r.dtype()),
                      row_counts.to(r.dtype()), runs, run_inverse.to(r.dtype()),
                      run_counts.to(r.dtype())});
        },
        tol(t));
  }
}

TEST_CASE(
    "CUDA factorizations and solves (on the host, there and back), bags of embeddings and "
    "the rarer layers match the CPU",
    "[cuda]") {
  if (!gpu_present("CUDA factorizations")) return;
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    const Tensor shift = mul(eye(3, t), 3.0);
    const std::vector<Tensor> in{randn_as({2, 3, 3}, t, 71), randn_as({2, 3, 2}, t, 72)};
    same_on_gpu(
        "factorizations", in, with_gradients([&](const std::vector<Tensor>& v) {
          const Tensor a = add(v[0], shift.to(v[0].device()));
          const Tensor spd = add(matmul(v[0], v[0].transpose(-1, -2)), shift.to(v[0].device()));
          return cat({linalg::inv(a).flatten(), linalg::det(a), std::get<1>(linalg::slogdet(a)),
                      linalg::solve(a, v[1]).flatten(), linalg::cholesky(spd).flatten(),
                      linalg::solve_triangular(a, v[1], true).flatten(),
                      cholesky_solve(v[1], linalg::cholesky(spd)).flatten(),
                      linalg::matrix_power(a, -2).flatten()});
        }),
        tol(t));
    same_on_gpu("eigh, SVD, QR, pinv and matrix norms", in,
                with_gradients([&](const std::vector<Tensor>& v) {
                  const Tensor sym = add(v[0], v[0].transpose(-1, -2));
                  auto [l, q] = linalg::eigh(sym);
                  auto [u, s, vh] = linalg::svd(v[1], false);
                  auto [qq, r] = linalg::qr(v[1]);
                  // Functions of the factors that their signs leave unchanged.
                  return cat({matmul(mul(q, sin(l).unsqueeze(-2)), q.transpose(-1, -2)).flatten(),
                              matmul(mul(u, sin(s).unsqueeze(-2)), vh).flatten(),
                              matmul(qq, sin(r)).flatten(), linalg::pinv(v[1]).flatten(),
                              linalg::matrix_norm(v[0], "nuc"),
                              linalg::matrix_norm(v[0], -std::numeric_limits<double>::infinity())});
                }),
                tol(t));
    same_on_gpu("LU, lu_solve, matrix_exp, norm, cond, multi_dot", in,
                with_gradients([&](const std::vector<Tensor>& v) {
                  auto [lu, pivots] = linalg::lu_factor(v[0]);
                  auto [p, l, u] = linalg::lu(v[1]);
                  return cat({lu.flatten(), pivots.to(v[0].dtype()).flatten(),
                              matmul(matmul(p, sin(l)), u).flatten(),
                              linalg::lu_solve(lu, pivots, v[1]).flatten(),
                              linalg::matrix_exp(v[0]).flatten(),
                              linalg::norm(v[1], "nuc", Shape{-2, -1}), linalg::cond(v[0], 1),
                              linalg::multi_dot({v[1][0].t(), v[0][1], v[1][1]}).flatten()});
                }),
                // f32: the gradients through cond and matrix_exp amplify the rounding of the
                // GPU's other summation order
                t == DType::f32 ? Tol{1e-4, 1e-4} : tol(t));
    same_on_gpu(
        "bags of embeddings, local response norm, multi-class and multi-label hinge", in,
        with_gradients([](const std::vector<Tensor>& v) {
          const Device d = v[0].device();
          const Tensor idx = from_vector<int64_t>({0, 5, 1, 2, 0}, {5}).to(d);
          const Tensor off = from_vector<int64_t>({0, 2, 2}, {3}).to(d);
          const Tensor table = v[1].reshape({6, 2});
          return cat(
              {embedding_bag(table, idx, off, EmbeddingBagMode::mean).flatten(),
               embedding_bag(table, idx, off, EmbeddingBagMode::max).flatten(),
               local_response_norm(v[0], 2).flatten(),
               multi_margin_loss(v[0].reshape({2, 9}), from_vector<int64_t>({1, 4}, {2}).to(d))
                   .reshape({1}),
               multilabel_margin_loss(
                   v[0].reshape({3, 6}),
                   from_vector<int64_t>({5, 0, -1, 2, 2, 2, -1, 1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5},
                                        {3, 6})
                       .to(d),
                   Reduction::none)});
        }),
        tol(t));
    // CTC: both recursions on the device, the gradient through log_softmax; the targets on the
    // CPU (the op reads them on the host wherever they are, as torch takes them).
    same_on_gpu("ctc_loss", {randn_as({6, 2, 5}, t, 73)},
                with_gradients([](const std::vector<Tensor>& v) {
                  const Tensor targets = from_vector<int64_t>({1, 2, 2, 4, 3, 0}, {2, 3});
                  return ctc_loss(log_softmax(v[0], 2), targets, std::vector<int64_t>{6, 5},
                                  std::vector<int64_t>{3, 2}, 0, Reduction::none);
                }),
                t == DType::f32 ? Tol{1e-5, 1e-5} : tol(t));
    // Each class's gradient sums its states' shares: labels repeated apart and side by side, a
    // target holding the blank's class (7), an empty target, more classes than states.
    same_on_gpu("ctc_loss, repeated labels and the blank's class in a target",
                {randn_as({9, 4, 40}, t, 74)}, with_gradients([](const std::vector<Tensor>& v) {
                  const Tensor targets = from_vector<int64_t>(
                      {5, 9, 5, 5, 39, 7, 2, 7, 7, 1, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3}, {4, 5});
                  return ctc_loss(log_softmax(v[0], 2), targets, std::vector<int64_t>{9, 8, 4, 9},
                                  std::vector<int64_t>{5, 4, 0, 3}, 7, Reduction::none);
                }),
                t == DType::f32 ? Tol{1e-5, 1e-5} : tol(t));
  }
}
