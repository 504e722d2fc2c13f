// f16/bf16 conversions round to nearest even and match torch's bit patterns; type promotion.
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "../util.hpp"

using namespace tandem;

TEST_CASE("f16 and bf16 conversions match torch bit for bit", "[dtype]") {
  std::ifstream in(std::string(TANDEM_GOLDEN_DIR) + "/half.json");
  REQUIRE(in.good());
  auto j = nlohmann::json::parse(in);
  auto f32_bits = j["f32_bits"].get<std::vector<uint32_t>>();
  auto f16_bits = j["f16_bits"].get<std::vector<uint16_t>>();
  auto bf16_bits = j["bf16_bits"].get<std::vector<uint16_t>>();
  std::vector<float> values(f32_bits.size());
  std::memcpy(values.data(), f32_bits.data(), values.size() * 4);
  Tensor x = from_vector(values);
  Tensor h = x.to(DType::f16), b = x.to(DType::bf16);
  auto* hp = static_cast<const uint16_t*>(h.raw_data());
  auto* bp = static_cast<const uint16_t*>(b.raw_data());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("value " << values[i] << " (f32 bits " << f32_bits[i] << ")");
    CHECK(hp[i] == f16_bits[i]);
    CHECK(bp[i] == bf16_bits[i]);
  }
}

TEST_CASE("ties round to even", "[dtype]") {
  // 1 + 2^-11 lies halfway between the f16 neighbours 1 and 1 + 2^-10: even mantissa (1) wins.
  Tensor t = from_vector<float>({1.0f + 0.00048828125f, 1.0f + 3 * 0.00048828125f});
  auto v = t.to(DType::f16).to(DType::f32).to_vector<float>();
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == 1.0f + 4 * 0.00048828125f);
}

TEST_CASE("arithmetic on f16/bf16 computes in f32 and stores narrow", "[dtype]") {
  Tensor a = from_vector<float>({1.5f, 2.0f}).to(DType::bf16);
  Tensor c = mul(a, a);
  CHECK(c.dtype() == DType::bf16);
  CHECK(c.to_vector<float>() == std::vector<float>{2.25f, 4.0f});
  CHECK(conv2d(ones({1, 1, 3, 3}, DType::f16), ones({1, 1, 3, 3}, DType::f16)).item<float>() == 9.0f);
}

TEST_CASE("type promotion", "[dtype]") {
  CHECK(promote_types(DType::i64, DType::f32) == DType::f32);
  CHECK(promote_types(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  CHECK(promote_types(DType::u8, DType::i32) == DType::i32);
  CHECK(add(ones({2}, DType::i64), ones({2}, DType::f64)).dtype() == DType::f64);
  CHECK(div(full({1}, 3, DType::i64), full({1}, 2, DType::i64)).item<float>() == 1.5f);
  CHECK(add(ones({2}, DType::i32), ones({2}, DType::i32)).dtype() == DType::i32);
  CHECK(sum(ones({3}, DType::boolean)).item<int64_t>() == 3);
  CHECK(sum(ones({3}, DType::i32)).dtype() == DType::i64);
}

namespace {
DType dtype_named(const std::string& name) {
  static const std::map<std::string, DType> names = {
      {"f32", DType::f32}, {"f64", DType::f64}, {"f16", DType::f16}, {"bf16", DType::bf16},
      {"i64", DType::i64}, {"i32", DType::i32}, {"u8", DType::u8},   {"bool", DType::boolean}};
  return names.at(name);
}
}  // namespace

TEST_CASE("a 0-dim operand promotes as torch's: only into a higher category", "[dtype]") {
  std::ifstream in(std::string(TANDEM_GOLDEN_DIR) + "/result_type.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  REQUIRE(j["pairs"].size() == 256);
  for (const auto& p : j["pairs"]) {
    const Tensor a = ones(p["a_zero_dim"].get<bool>() ? Shape{} : Shape{2},
                          dtype_named(p["a"].get<std::string>()));
    const Tensor b = ones(p["b_zero_dim"].get<bool>() ? Shape{} : Shape{2},
                          dtype_named(p["b"].get<std::string>()));
    const DType expected = dtype_named(p["result"].get<std::string>());
    INFO(a.dtype() << (a.dim() == 0 ? " 0-dim" : "") << " with " << b.dtype()
                   << (b.dim() == 0 ? " 0-dim" : ""));
    CHECK(result_type(a, b) == expected);
    // What the ops compute in: the arithmetic, where, and an in-place op that may keep it.
    CHECK(mul(a, b).dtype() == expected);
    CHECK(where(ones({2}, DType::boolean), a, b).dtype() == expected);
    CHECK(lt(a, b).dtype() == DType::boolean);
    // torch's can_cast: no floating result into an integer tensor, no non-bool into a bool one.
    const bool fits_in_a = (a.is_floating_point() || !is_floating(expected)) &&
                           (a.dtype() != DType::boolean || expected == DType::boolean);
    if (a.dim() > 0 && fits_in_a) {
      Tensor c = a.clone();
      c.mul_(b);
      CHECK(c.dtype() == a.dtype());
    }
  }
  // The 0-dim operand is converted to the result's dtype first: 2.1 is f16's 2.0996 there.
  const auto& v = j["values"];
  const Tensor x16 = from_vector<float>({3, 5, -7}).to(DType::f16);
  const Tensor xi = from_vector<int32_t>({3, 5, -7});
  CHECK(mul(x16, full({}, 2.1)).to(DType::f32).to_vector<float>() ==
        v["f16_mul_f32_scalar"].get<std::vector<float>>());
  CHECK(add(x16, full({}, 0.1, DType::f64)).to(DType::f32).to_vector<float>() ==
        v["f16_add_f64_scalar"].get<std::vector<float>>());
  CHECK(mul(xi, full({}, 2.5)).to_vector<float>() ==
        v["i32_mul_f32_scalar"].get<std::vector<float>>());
  CHECK(add(xi, full({}, 2147483653.0, DType::i64)).to_vector<int32_t>() ==
        v["i32_add_i64_scalar"].get<std::vector<int32_t>>());
  // The gradient of the 0-dim operand comes back in its own dtype.
  Tensor s = full({}, 2.0).requires_grad_();
  Tensor h = from_vector<float>({1, 2}).to(DType::f16).requires_grad_();
  Tensor y = mul(h, s);
  CHECK(y.dtype() == DType::f16);
  y.sum().backward();
  CHECK(s.grad().dtype() == DType::f32);
  CHECK(s.grad().item<float>() == 3.0f);
  CHECK(h.grad().dtype() == DType::f16);
  CHECK(h.grad().to(DType::f32).to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("numbers meet bool tensors, and integers take powers, as torch's", "[dtype]") {
  // Values from torch 1.13 for the same calls.
  const Tensor b = from_vector<bool>({true, false});
  auto i64s = [](const Tensor& t) {
    CHECK(t.dtype() == DType::i64);
    return t.to_vector<int64_t>();
  };
  CHECK(i64s(b + 1) == std::vector<int64_t>{2, 1});
  CHECK(i64s(b * 2) == std::vector<int64_t>{2, 0});
  CHECK(i64s(fmod(b, 2)) == std::vector<int64_t>{1, 0});
  CHECK(i64s(b.pow(2)) == std::vector<int64_t>{1, 0});
  CHECK(i64s(square(b)) == std::vector<int64_t>{1, 0});
  CHECK(i64s(where(b, b, 5)) == std::vector<int64_t>{1, 5});
  CHECK((b * 2.5).dtype() == DType::f32);
  CHECK_THROWS_WITH(b - 0.0, Catch::Contains("bool tensor are not supported"));
  CHECK_THROWS_WITH(b.sub(1), Catch::Contains("bool tensor are not supported"));
  Tensor m = b.clone();
  CHECK_THROWS_WITH(m.add_(1), Catch::Contains("bool tensor in place"));
  CHECK_THROWS_WITH(m.mul_(2), Catch::Contains("bool tensor in place"));
  CHECK(m.to_vector<bool>() == std::vector<bool>{true, false});

  const Tensor i = from_vector<int32_t>({3, -2});
  CHECK(i.pow(2).dtype() == DType::i32);
  CHECK(i.pow(2).to_vector<int32_t>() == std::vector<int32_t>{9, 4});
  CHECK(pow(i, i.abs()).to_vector<int32_t>() == std::vector<int32_t>{27, 4});
  CHECK(pow(from_vector<int32_t>({2, 3, -1, 1, 0}), from_vector<int32_t>({-1, -2, -3, -5, -1}))
            .to_vector<int32_t>() == std::vector<int32_t>{0, 0, -1, 1, 0});
  CHECK(from_vector<int64_t>({-3, 5}).pow(0).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  // Overflow wraps, as torch's: 3^9 mod 256 and 3^41 mod 2^64.
  CHECK(from_vector<uint8_t>({2, 3}).pow(9).to_vector<uint8_t>() == std::vector<uint8_t>{0, 227});
  CHECK(full({1}, 3, DType::i64).pow(41).item<int64_t>() == -420491770248316829LL);
  CHECK(i.pow(0.5).dtype() == DType::f32);
  CHECK_THROWS_WITH(i.pow(-1), Catch::Contains("negative integer powers"));
  Tensor j = i.clone();
  CHECK_THROWS_WITH(j.pow_(-2), Catch::Contains("negative integer powers"));
  CHECK_THROWS_WITH(j.pow_(0.5), Catch::Contains("floating point"));
  CHECK_THROWS_WITH(j.pow_(2.0), Catch::Contains("floating point"));  // torch's: a float number
  j.pow_(3);
  CHECK(j.to_vector<int32_t>() == std::vector<int32_t>{27, -8});
  CHECK_THROWS_WITH(pow(b, b), Catch::Contains("not implemented for bool"));
}
