// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so element i of a random tensor depends only on (seed, offset, i),
// never on the thread or the device that computes it.
#pragma once

#include <cmath>
#include <cstdint>

#include "tandem/core/macros.hpp"

namespace tandem {

struct Philox4x32 {
  struct U32x4 {
    uint32_t v[4];
  };

  /// The 4 outputs for counter (ctr_lo, ctr_hi) under key `seed`.
  static TANDEM_HD U32x4 generate(uint64_t seed, uint64_t ctr_lo, uint64_t ctr_hi) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    uint32_t c0 = static_cast<uint32_t>(ctr_lo), c1 = static_cast<uint32_t>(ctr_lo >> 32);
    uint32_t c2 = static_cast<uint32_t>(ctr_hi), c3 = static_cast<uint32_t>(ctr_hi >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
      uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
      uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += kW0;
      k1 += kW1;
    }
    return U32x4{{c0, c1, c2, c3}};
  }

  /// The i-th 32-bit word of the stream (seed, offset): counter = offset + i / 4, lane i % 4.
  static TANDEM_HD uint32_t word(uint64_t seed, uint64_t offset, uint64_t i) {
    return generate(seed, offset + i / 4, 0).v[i % 4];
  }

  /// Uniform in [0, 1) with 24 random bits (every value exactly representable in f32).
  static TANDEM_HD float to_unit_float(uint32_t x) { return (x >> 8) * (1.0f / 16777216.0f); }
  /// Uniform in [0, 1) with 53 random bits.
  static TANDEM_HD double to_unit_double(uint32_t hi, uint32_t lo) {
    uint64_t x = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
    return x * (1.0 / 9007199254740992.0);
  }
};

}  // namespace tandem
