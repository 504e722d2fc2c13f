// The position of a row's max or min, shared by the reductions (reduce.cpp) and softmax's row
// max (norm.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "isa.hpp"
#include "tandem/core/dtype_dispatch.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {

// 64 bytes from p into the GCC vector v. (Vectors pass by reference here: a 64-byte vector by
// value has another ABI in the builds without AVX-512, which GCC warns of.)
template <typename V, typename T>
void load_vector(V& v, const T* p) {
  static_assert(sizeof(V) == 64);
  std::memcpy(&v, p, sizeof v);
}

// Whether any lane of a 64-byte comparison result is set.
template <typename M>
bool any_lane(const M& mask) {
  uint64_t words[8];
  static_assert(sizeof mask == sizeof words);
  std::memcpy(words, &mask, sizeof words);
  return (words[0] | words[1] | words[2] | words[3] | words[4] | words[5] | words[6] | words[7]) !=
         0;
}

template <bool kMax, typename T>
bool better(T candidate_t, T best_t) {
  const acc_type<T> candidate(candidate_t), best(best_t);
  if constexpr (std::is_floating_point_v<acc_type<T>>) {
    if (std::isnan(best)) return false;
    if (std::isnan(candidate)) return true;
  }
  return kMax ? candidate > best : candidate < best;
}

// The position of a row's max (min) as better() chooses it: the first NaN if there is one,
// else the first element equal to the extreme. f32 and f64 find the extreme with 64-byte
// vectors of compares and selects (NaNs caught in a vector of their own), then one scan finds
// its first position: the element-by-element comparison with the best so far does not
// vectorize and took 0.085 ms for 128 rows of 1000 f32 on 2 threads, 8x a sum's time.
template <bool kMax, typename T>
int64_t extreme_position(const T* p, int64_t n) {
  constexpr int64_t kLanes = 64 / sizeof(T);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (n >= kLanes) {
      typedef T V __attribute__((vector_size(64)));
      V m, x;
      load_vector(m, p);
      V nan = m != m ? m : V{};
      auto take = [&](const T* q) {
        load_vector(x, q);
        m = (kMax ? x > m : x < m) ? x : m;
        nan = x != x ? x : nan;
      };
      int64_t i = kLanes;
      for (; i + kLanes <= n; i += kLanes) take(p + i);
      if (i < n) take(p + n - kLanes);  // the last lanes again: an extreme is idempotent
      T lanes[kLanes], nans[kLanes];
      std::memcpy(lanes, &m, sizeof m);
      std::memcpy(nans, &nan, sizeof nan);
      bool any_nan = false;
      T best = lanes[0];
      for (int64_t j = 0; j < kLanes; ++j) {
        any_nan |= std::isnan(nans[j]);
        best = (kMax ? lanes[j] > best : lanes[j] < best) ? lanes[j] : best;
      }
      // The first position: a vector of compares at a time, then the one that hit.
      const V target = V{} + best;
      int64_t k = 0;
      for (; k + kLanes <= n; k += kLanes) {
        load_vector(x, p + k);
        if (any_lane(any_nan ? x != x : x == target)) break;
      }
      for (; k < n; ++k)
        if (any_nan ? p[k] != p[k] : p[k] == best) return k;
    }
  }
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (better<kMax>(p[i], p[best])) best = i;
  return best;
}

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
