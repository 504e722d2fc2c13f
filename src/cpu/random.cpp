// CPU random fills from Philox: element i depends only on (seed, offset, i).
#include <cmath>

#include "loops.hpp"
#include "tandem/core/philox.hpp"
#include "kernels.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

// Writes gen(i) into every element of the contiguous tensor out, in parallel.
template <typename T, typename G>
void fill_indexed(const Tensor& out, G gen) {
  T* p = ptr<T>(out);
  parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] = gen(static_cast<uint64_t>(i));
  });
}

}  // namespace

void uniform(const Tensor& out, uint64_t seed, uint64_t offset) {
  dispatch_dtype<DTypeSet::floating>(out.dtype(), "rand (cpu)", [&](auto t) {
    using T = decltype(t);
    fill_indexed<T>(out, [&](uint64_t i) -> T {
      if constexpr (std::is_same_v<T, double>) {
        return Philox4x32::to_unit_double(Philox4x32::word(seed, offset, 2 * i),
                                          Philox4x32::word(seed, offset, 2 * i + 1));
      } else {
        return T(Philox4x32::to_unit_float(Philox4x32::word(seed, offset, i)));
      }
    });
  });
}

void normal(const Tensor& out, uint64_t seed, uint64_t offset) {
  dispatch_dtype<DTypeSet::floating>(out.dtype(), "randn (cpu)", [&](auto t) {
    using T = decltype(t);
    fill_indexed<T>(out, [&](uint64_t i) -> T {
      // Box-Muller on words (2i, 2i+1); u1 in (0, 1] so the log is finite.
      double u1 = 1.0 - Philox4x32::to_unit_float(Philox4x32::word(seed, offset, 2 * i));
      double u2 = Philox4x32::to_unit_float(Philox4x32::word(seed, offset, 2 * i + 1));
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      if constexpr (std::is_same_v<T, double>) {
        return z;
      } else {
        return T(static_cast<float>(z));  // f16/bf16 round from the f32 value, as before
      }
    });
  });
}

void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  // in unsigned arithmetic: a range past int64's (low near its minimum) wraps, not overflows
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  dispatch_dtype<DTypeSet::numeric>(out.dtype(), "randint (cpu)", [&](auto t) {
    using T = decltype(t);
    fill_indexed<T>(out, [&](uint64_t i) -> T {
      uint64_t x = static_cast<uint64_t>(Philox4x32::word(seed, offset, 2 * i)) << 32 |
                   Philox4x32::word(seed, offset, 2 * i + 1);
      const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(low) + x % range);
      if constexpr (std::is_integral_v<T>) {
        return static_cast<T>(v);
      } else {
        return convert<T>(static_cast<double>(v));  // floats: through f64, as before
      }
    });
  });
}

TANDEM_REGISTER_CPU(uniform, uniform);
TANDEM_REGISTER_CPU(normal, normal);
TANDEM_REGISTER_CPU(randint, randint);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
