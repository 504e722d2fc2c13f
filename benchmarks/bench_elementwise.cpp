// The elementwise and reduction sweep, tandem's side: each op forward only (no autograd) on f32
// (128, 4096), the median of --repeats calls after a warm-up. benchmarks/elementwise_compare.py
// runs it beside benchmarks/elementwise_torch.py (the same ops and inputs in PyTorch, each side in
// a process of its own) and tabulates the ratios. The last line printed is the JSON of medians.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "tandem/tandem.hpp"

using namespace tandem;

int main(int argc, char** argv) {
  CLI::App app{"tandem elementwise sweep (forward, f32 (128, 4096))"};
  int threads = 2, repeats = 30;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed calls per op (median reported)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  Generator gen(0);
  // x, y, z ~ N(0, 1); p = |x| + 0.1, positive (the logarithms, roots, divisors).
  const Tensor x = randn({128, 4096}, DType::f32, &gen), y = randn({128, 4096}, DType::f32, &gen);
  const Tensor p = add(abs(x), 0.1);
  const Tensor z = randn({4096, 128}, DType::f32, &gen);  // z.t() has x's shape, read across
  NoGradGuard no_grad;
  const std::vector<std::pair<const char*, std::function<Tensor()>>> ops{
      {"abs", [&] { return abs(x); }},
      {"sign", [&] { return sign(x); }},
      {"floor", [&] { return floor(x); }},
      {"ceil", [&] { return ceil(x); }},
      {"round", [&] { return round(x); }},
      {"trunc", [&] { return trunc(x); }},
      {"sin", [&] { return sin(x); }},
      {"cos", [&] { return cos(x); }},
      {"tan", [&] { return tan(x); }},
      {"atan", [&] { return atan(x); }},
      {"erf", [&] { return erf(x); }},
      {"exp", [&] { return exp(x); }},
      {"expm1", [&] { return expm1(x); }},
      {"log", [&] { return log(p); }},
      {"log2", [&] { return log2(p); }},
      {"log10", [&] { return log10(p); }},
      {"log1p", [&] { return log1p(p); }},
      {"sqrt", [&] { return sqrt(p); }},
      {"rsqrt", [&] { return rsqrt(p); }},
      {"reciprocal", [&] { return reciprocal(p); }},
      {"pow 3", [&] { return pow(x, 3.0); }},
      {"pow 0.5", [&] { return pow(p, 0.5); }},
      {"pow 1.7", [&] { return pow(p, 1.7); }},
      {"pow tensor", [&] { return pow(p, y); }},
      {"sigmoid", [&] { return sigmoid(x); }},
      {"tanh", [&] { return tanh(x); }},
      {"neg", [&] { return neg(x); }},
      {"clamp", [&] { return clamp(x, -0.5, 0.5); }},
      {"where", [&] { return where(x > y, x, y); }},
      {"maximum", [&] { return maximum(x, y); }},
      {"atan2", [&] { return atan2(x, y); }},
      {"fmod", [&] { return fmod(x, p); }},
      {"remainder", [&] { return remainder(x, p); }},
      {"lt", [&] { return lt(x, y); }},
      {"div", [&] { return div(x, p); }},
      {"sub", [&] { return sub(x, y); }},
      {"mul row broadcast", [&] { return mul(x, y.select(0, 0)); }},
      {"add column broadcast", [&] { return add(x, y.narrow(1, 0, 1)); }},
      {"to bf16", [&] { return x.to(DType::bf16); }},
      {"to f64", [&] { return x.to(DType::f64); }},
      {"isnan", [&] { return isnan(x); }},
      {"masked_fill", [&] { return x.masked_fill(x > 0.5, 0.0); }},
      {"mean dim 1", [&] { return mean(x, {1}); }},
      {"var dim 1", [&] { return var(x, {1}); }},
      {"norm", [&] { return norm(x); }},
      {"argmax dim 1", [&] { return argmax(x, 1); }},
      {"sum dim 0", [&] { return sum(x, {0}); }},
      {"sum of the transpose dim 1", [&] { return sum(x.t(), {1}); }},
      {"sigmoid of a transpose", [&] { return sigmoid(z.t()); }},
      {"contiguous of a transpose", [&] { return z.t().contiguous(); }},
      {"add a transpose", [&] { return add(x, z.t()); }},
  };
  nlohmann::json results = nlohmann::json::object();
  for (const auto& [name, op] : ops) {
    op();  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      op();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    results[name] = ms[ms.size() / 2];
  }
  std::printf("%s\n", results.dump().c_str());
}
