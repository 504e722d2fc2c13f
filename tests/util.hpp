// Test helpers: tensor comparison with readable failures, and the finite-difference gradient
// check every differentiable op goes through.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <cmath>
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
    Tensor numeric = zeros(inputs[k].shape(), DType::f64);
    Tensor flat = inputs[k].detach().reshape({-1});  // shares storage: perturb in place
    double* p = flat.data_ptr<double>();
    double* num = numeric.data_ptr<double>();
    NoGradGuard guard;
    for (int64_t i = 0; i < flat.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double up = sum(mul(f(inputs), w)).item<double>();
      p[i] = orig - eps;
      double down = sum(mul(f(inputs), w)).item<double>();
      p[i] = orig;
      num[i] = (up - down) / (2 * eps);
    }
    require_close(analytic, numeric, rtol, atol, "gradient of input " + std::to_string(k));
  }
}

/// Runs f and returns the message of the tandem::Error it throws ("" if none).
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

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

}  // namespace tandem::testing
