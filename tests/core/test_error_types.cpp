// The error types: out of memory (what was asked, what the allocator holds, where) and CUDA
// errors (the call and the library's error), all caught as tandem::Error.
#include "../util.hpp"

#ifdef TANDEM_TEST_ASAN
// ASan aborts on an allocation it cannot serve unless told to return null, as malloc does;
// scripts/test.sh sets the same, this covers running the sanitizer build's tests by hand.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

using namespace tandem;

TEST_CASE("an impossible CPU tensor throws OutOfMemoryError", "[core][errors]") {
  const int64_t n = int64_t{1} << 50;  // 4 PiB of f32: more than any address space
  try {
    empty({n}, DType::f32);
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == size_t{4} << 50);
    CHECK(e.device() == "cpu");
    CHECK_THAT(e.what(), Catch::Contains("cpu: out of memory: asked for 4.00 PiB "
                                         "(4503599627370496 bytes), the allocator holds "));
    CHECK_THAT(e.what(), Catch::Contains("storage.cpp:"));
  }
  CHECK_THROWS_AS(empty({n}, DType::f32), Error);
  CHECK_THROWS_AS(empty({n}, DType::f32), OutOfMemoryError);
  // The allocator still works afterwards.
  CHECK(ones({3}).to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("an impossible GPU tensor throws OutOfMemoryError", "[core][errors][cuda]") {
  if (!tandem::testing::gpu_present("an impossible GPU tensor")) return;
  try {
    empty({int64_t{1} << 50}, TensorOptions(DType::f32).device(Device(DeviceType::cuda, 0)));
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.device() == "cuda:0");
    CHECK_THAT(e.what(), Catch::Contains("cuda:0: out of memory: asked for 4.00 PiB"));
  }
  CHECK(ones({3}, TensorOptions(DType::f32).device(Device(DeviceType::cuda, 0)))
            .cpu()
            .to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("byte counts read in binary units", "[core][errors]") {
  CHECK(detail::describe_bytes(0) == "0 bytes");
  CHECK(detail::describe_bytes(1023) == "1023 bytes");
  CHECK(detail::describe_bytes(1024) == "1.00 KiB (1024 bytes)");
  CHECK(detail::describe_bytes(size_t{3} << 29) == "1.50 GiB (1610612736 bytes)");
  CHECK(detail::describe_bytes(~size_t{0}) == "16.00 EiB (18446744073709551615 bytes)");
}

TEST_CASE("CudaError names the call, the error and where", "[core][errors]") {
  try {
    throw CudaError("cudaMemcpy(dst, src, n, cudaMemcpyDefault)",
                    "CUDA error cudaErrorInvalidValue: invalid argument", "runtime.cpp", 160);
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "cudaMemcpy(dst, src, n, cudaMemcpyDefault): CUDA error cudaErrorInvalidValue: "
          "invalid argument (runtime.cpp:160)");
    const auto* cuda_error = dynamic_cast<const CudaError*>(&e);
    REQUIRE(cuda_error != nullptr);
    CHECK(cuda_error->call() == "cudaMemcpy(dst, src, n, cudaMemcpyDefault)");
  }
}
