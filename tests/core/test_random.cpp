// Philox against the published known-answer vectors, and the statistics of rand/randn/randint.
#include "../util.hpp"

using namespace tandem;

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors", "[random]") {
  // Salmon et al., Random123 kat_vectors: philox4x32 10 rounds.
  auto a = Philox4x32::generate(0, 0, 0);
  CHECK(a.v[0] == 0x6627e8d5u);
  CHECK(a.v[1] == 0xe169c58du);
  CHECK(a.v[2] == 0xbc57ac4cu);
  CHECK(a.v[3] == 0x9b00dbd8u);
  auto b = Philox4x32::generate(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull);
  CHECK(b.v[0] == 0x408f276du);
  CHECK(b.v[1] == 0x41c83b0eu);
  CHECK(b.v[2] == 0xa20bc7c6u);
  CHECK(b.v[3] == 0x6d5451fdu);
  auto c = Philox4x32::generate(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull);
  CHECK(c.v[0] == 0xd16cfe09u);
  CHECK(c.v[1] == 0x94fdccebu);
  CHECK(c.v[2] == 0x5001e420u);
  CHECK(c.v[3] == 0x24126ea1u);
}

TEST_CASE("same seed, same numbers, the stream advances", "[random]") {
  Generator g1(42), g2(42);
  Tensor a = rand({1000}, {}, &g1), b = rand({1000}, {}, &g2);
  CHECK(equal(a, b));
  CHECK_FALSE(equal(rand({1000}, {}, &g1), a));
  manual_seed(3);
  Tensor c = randn({10});
  manual_seed(3);
  CHECK(equal(randn({10}), c));
}

TEST_CASE("distributions have the right moments", "[random]") {
  Generator g(1);
  const int64_t n = 200000;
  Tensor u = rand({n}, DType::f64, &g);
  CHECK(max(u).item<double>() < 1.0);
  CHECK(min(u).item<double>() >= 0.0);
  CHECK(mean(u).item<double>() == Approx(0.5).margin(0.005));
  CHECK(var(u).item<double>() == Approx(1.0 / 12).margin(0.002));
  Tensor z = randn({n}, {}, &g);
  CHECK(mean(z).item<double>() == Approx(0.0).margin(0.01));
  CHECK(var(z).item<double>() == Approx(1.0).margin(0.02));
  Tensor k = randint(-3, 4, {n}, DType::i64, &g);
  CHECK(min(k).item<int64_t>() == -3);
  CHECK(max(k).item<int64_t>() == 3);
  CHECK(mean(k.to(DType::f64)).item<double>() == Approx(0.0).margin(0.03));
  Tensor h = randn({1000}, DType::bf16, &g);
  CHECK(h.dtype() == DType::bf16);
}
