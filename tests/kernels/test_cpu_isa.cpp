// The CPU instruction set chosen at run time: TANDEM_CPU_ISA caps it (the forced-ISA ctests run
// this file with it set, and prove here that the fallback really ran), and a bad value is a
// ValueError at the first CPU kernel, not a crash while the library loads.
#include <cstdlib>
#include <cstring>
#include <string>

#include "../util.hpp"
#include "tandem/kernels/cpu_isa.hpp"

using namespace tandem;

namespace {

int isa_rank(const std::string& name) {
  if (name == "scalar") return 0;
  if (name == "avx2") return 1;
  if (name == "avx512") return 2;
  return -1;
}

const char* env_isa() {
  const char* env = std::getenv("TANDEM_CPU_ISA");
  return env && *env ? env : nullptr;
}

}  // namespace

TEST_CASE("the CPU kernels run with the instruction set TANDEM_CPU_ISA asks for", "[isa]") {
  const std::string supported = kernels::cpu_isa_supported_name();
  const std::string chosen = kernels::cpu_isa_name();
  INFO("supported: " << supported << ", chosen: " << chosen);
  REQUIRE(isa_rank(supported) >= 0);
#if defined(__x86_64__) && defined(TANDEM_TEST_VECTOR_ISA_BUILT)
  // Every x86-64 CPU this project runs on has AVX2 at least; a scalar answer here would mean
  // the CPU check is broken, and the vector kernels silently unused.
  CHECK(isa_rank(supported) >= 1);
#endif
  if (const char* env = env_isa()) {
    INFO("TANDEM_CPU_ISA=" << env);
    REQUIRE(isa_rank(env) >= 0);
    // The forced ISA, unless this CPU lacks it (then the best it has).
    const int expected = std::min(isa_rank(env), isa_rank(supported));
    if (expected < isa_rank(env)) WARN("this CPU lacks " << env << ": the run tests " << supported);
    CHECK(isa_rank(chosen) == expected);
  } else {
    CHECK(chosen == supported);
  }
  // The kernels behind the choice work: a GEMM big enough for the blocked paths, against f64.
  Generator g(3);
  Tensor a = randn({67, 130}, {}, &g), b = randn({130, 90}, {}, &g);
  Tensor c = matmul(a, b);
  Tensor ref = matmul(a.to(DType::f64), b.to(DType::f64));
  testing::require_close(c, ref, 1e-4, 1e-4, "f32 GEMM against f64");
}

// Run by the ctest cpu_isa_bad_value with TANDEM_CPU_ISA set to a bad value (hidden otherwise:
// the choice is made once per process).
TEST_CASE("a bad TANDEM_CPU_ISA is a ValueError at the first CPU kernel", "[.isa_bad_value]") {
  const char* env = env_isa();
  REQUIRE(env);
  REQUIRE(isa_rank(env) < 0);
  // The library loaded and Catch2 started: nothing asked for the ISA during static
  // initialization. The first CPU kernel does, and every later one gets the same error.
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      Tensor x = add(ones({4}), ones({4}));
      FAIL("a CPU kernel ran with TANDEM_CPU_ISA=" << env);
    } catch (const ValueError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("TANDEM_CPU_ISA") != std::string::npos);
      CHECK(what.find("expected scalar, avx2 or avx512") != std::string::npos);
      CHECK(what.find(env) != std::string::npos);
    }
  }
  CHECK_THROWS_AS(kernels::cpu_isa_name(), ValueError);
  CHECK(std::string(kernels::cpu_isa_supported_name()).size() > 0);
}

// Run by the ctest cpu_isa_not_built in a build without the scalar kernels (such as the
// sanitizer build), with TANDEM_CPU_ISA=scalar: a clear error at the first kernel, not a crash.
TEST_CASE("asking for an instruction set the build lacks is a NotImplementedError",
          "[.isa_not_built]") {
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      Tensor x = add(ones({4}), ones({4}));
      FAIL("a CPU kernel ran with TANDEM_CPU_ISA=" << env_isa());
    } catch (const NotImplementedError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("no CPU kernels for TANDEM_CPU_ISA=scalar") != std::string::npos);
      CHECK(what.find("this build has kernels for") != std::string::npos);
    }
  }
}
