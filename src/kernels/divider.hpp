// Division by a divisor fixed for a whole kernel launch, without a divide instruction: index
// math on the GPU (dims of strided operands, the channel of an element) divides every element's
// index, and a 64-bit division there is a software routine of tens of instructions, enough to
// make a memory-bound kernel compute-bound. For numerators and divisors below 2^31 the quotient
// is a multiply-high, an add and a shift with a magic number chosen once on the host (Hacker's
// Delight, 10-9; PyTorch's IntDivider does the same). Written once, run and tested on the CPU.
#pragma once

#include <cstdint>

#include "tandem/core/macros.hpp"

namespace tandem::kernels {

/// n / divisor and n % divisor for 0 <= n < 2^31, 1 <= divisor < 2^31.
struct FastDivider {
  uint32_t divisor = 1, magic = 1, shift = 0;

  FastDivider() = default;
  explicit FastDivider(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;  // shift = ceil(log2 d)
    // 2^32 * (2^shift - d) / d + 1 < 2^32, as 2^shift - d < d.
    magic = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d) / d + 1);
  }

  TANDEM_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t high = __umulhi(n, magic);
#else
    const uint32_t high = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (high + n) >> shift;  // high <= n < 2^31: no overflow
  }
  TANDEM_HD uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
};

}  // namespace tandem::kernels
