// Test helpers: tensor comparison with readable failures, and the finite-difference gradient
// check every differentiable op goes through.
#pragma once

#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/tandem.hpp"

namespace tandem::testing {

/// Checks a and b have the same shape and |a - b| <= atol + rtol * |b| elementwise, reporting
/// the first mismatch.
inline void require_close(const Tensor& a, const Tensor& b, double rtol, double atol,
                          const std::string& what = "") {
  INFO(what);
  REQUIRE(shape_str(a.shape()) == shape_str(b.shape()));
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    bool ok = std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]) ||
              (std::isnan(x[i]) && std::isnan(y[i]));
    if (!ok) {
      INFO("element " << i << ": got " << x[i] << ", expected " << y[i]);
      REQUIRE(ok);
    }
  }
}

/// d loss / d t by central differences: t's elements (f64; t's own storage) perturbed in place
/// one at a time. loss runs in the caller's grad mode (it may run backward passes itself).
inline Tensor numeric_gradient(const std::function<double()>& loss, const Tensor& t,
                               double eps = 1e-6) {
  Tensor flat = t.detach().reshape({-1});  // shares storage: perturb in place
  double* p = flat.data_ptr<double>();
  std::vector<double> out(flat.numel());
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double orig = p[i];
    p[i] = orig + eps;
    const double up = loss();
    p[i] = orig - eps;
    const double down = loss();
    p[i] = orig;
    out[i] = (up - down) / (2 * eps);
  }
  return from_vector(out, t.shape());
}

/// Compares the analytic gradients of sum(f(inputs) * w) (w fixed random weights) with central
/// finite differences, in f64. Every input must be f64 and require grad.
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                      std::vector<Tensor> inputs, double eps = 1e-6, double atol = 1e-6,
                      double rtol = 1e-5) {
  for (auto& t : inputs) REQUIRE(t.dtype() == DType::f64);
  for (auto& t : inputs) t.set_requires_grad(true);
  Generator gen(99);
  Tensor out = f(inputs);
  Tensor w = randn(out.shape(), DType::f64, &gen);
  sum(mul(out, w)).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor analytic = inputs[k].grad();
    REQUIRE(analytic.defined());
    NoGradGuard guard;
    Tensor numeric = numeric_gradient(
        [&] { return sum(mul(f(inputs), w)).item<double>(); }, inputs[k], eps);
    require_close(analytic, numeric, rtol, atol, "gradient of input " + std::to_string(k));
  }
}

/// True when a GPU is there for a GPU test. Without one the test is skipped with a warning that
/// names it, except under TANDEM_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it): there a GPU test
/// that finds no GPU fails, so a GPU machine never passes by skipping.
inline bool gpu_present(const std::string& what) {
  if (cuda::is_available()) return true;
  const char* require = getenv("TANDEM_REQUIRE_GPU");
  if (require != nullptr && std::string(require) == "1")
    FAIL(what << ": TANDEM_REQUIRE_GPU=1 but tandem sees no GPU (" << cuda::build_info() << ")");
  WARN(what << ": skipped, no GPU (runs in scripts/gpu-check.sh)");
  return false;
}

/// TF32 convolutions off for the scope (PyTorch's default, and tandem's, is on: 10-bit
/// mantissas), so that f32 on a GPU compares with the CPU's f32 closely.
struct NoTf32 {
  bool saved = cuda::allow_tf32_conv();
  NoTf32() { cuda::set_allow_tf32_conv(false); }
  ~NoTf32() { cuda::set_allow_tf32_conv(saved); }
  NoTf32(const NoTf32&) = delete;
  NoTf32& operator=(const NoTf32&) = delete;
};

/// gpu_present, and NCCL there too (every build with GPUs has it: the real one, or the CUDA
/// emulation's stand-in, tests/cuda_emu/nccl.cpp).
inline bool nccl_present(const std::string& what) {
  if (!gpu_present(what)) return false;
  if (comm::nccl_compiled()) return true;
  WARN(what << ": skipped, this build has no NCCL");
  return false;
}

/// A fresh folder under the system temp folder, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// Whether this build runs under AddressSanitizer (TANDEM_TEST_ASAN) or ThreadSanitizer
/// (TANDEM_TEST_TSAN), in gcc's and clang's spellings; TANDEM_TEST_SANITIZED: either.
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TANDEM_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_TEST_TSAN 1
#endif
#endif
#if defined(TANDEM_TEST_ASAN) || defined(TANDEM_TEST_TSAN)
#define TANDEM_TEST_SANITIZED 1
#endif
#ifdef TANDEM_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

/// Lets the process map at most `extra` bytes of address space beyond what it has mapped now
/// (RLIMIT_AS), until scope exit: an allocation beyond that fails instead of being overcommitted.
/// Does nothing in sanitizer builds, which reserve terabytes of shadow memory as they go.
struct AddressSpaceLimit {
  rlimit saved{};
  bool active = false;
  explicit AddressSpaceLimit(size_t extra) {
    if (kSanitized) return;
    std::ifstream statm("/proc/self/statm");
    size_t pages = 0;
    REQUIRE(statm >> pages);
    REQUIRE(getrlimit(RLIMIT_AS, &saved) == 0);
    rlimit limited = saved;
    limited.rlim_cur = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) + extra;
    if (saved.rlim_cur != RLIM_INFINITY && saved.rlim_cur < limited.rlim_cur) return;
    REQUIRE(setrlimit(RLIMIT_AS, &limited) == 0);
    active = true;
  }
  ~AddressSpaceLimit() {
    if (active) setrlimit(RLIMIT_AS, &saved);
  }
  AddressSpaceLimit(const AddressSpaceLimit&) = delete;
  AddressSpaceLimit& operator=(const AddressSpaceLimit&) = delete;
};

/// Runs f and returns the message of the tandem::Error it throws ("" if none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

/// Writes an MNIST-shaped dataset of `train` and `test` images to `dir` as plain IDX files
/// (train-images-idx3-ubyte ... t10k-labels-idx1-ubyte): image i of class i % 10 is dim noise
/// with a bright 6x6 square at a place of its class's own, so a small network learns it fast.
inline void write_mnist_files(const std::filesystem::path& dir, int train, int test) {
  auto write = [&](const std::string& name, const std::vector<int>& dims,
                   const std::vector<unsigned char>& body) {
    std::vector<unsigned char> b = {0, 0, 8, static_cast<unsigned char>(dims.size())};
    for (int d : dims)
      for (int shift : {24, 16, 8, 0}) b.push_back(static_cast<unsigned char>(d >> shift));
    b.insert(b.end(), body.begin(), body.end());
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  uint32_t state = 12345;
  auto noise = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<unsigned char>((state >> 24) % 60);
  };
  for (const auto& [prefix, n] : {std::pair<std::string, int>{"train", train}, {"t10k", test}}) {
    std::vector<unsigned char> images, labels;
    for (int i = 0; i < n; ++i) {
      const int c = i % 10, top = 2 + (c / 5) * 12, left = 2 + (c % 5) * 5;
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          const bool lit = y >= top && y < top + 6 && x >= left && x < left + 6;
          images.push_back(lit ? static_cast<unsigned char>(195 + noise()) : noise());
        }
      labels.push_back(static_cast<unsigned char>(c));
    }
    write(prefix + "-images-idx3-ubyte", {n, 28, 28}, images);
    write(prefix + "-labels-idx1-ubyte", {n}, labels);
  }
}

}  // namespace tandem::testing
