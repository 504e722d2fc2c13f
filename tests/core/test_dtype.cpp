// f16/bf16 conversions round to nearest even and match torch's bit patterns; type promotion.
#include <cstring>
#include <fstream>
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
