// The GPU's index division (src/kernels/divider.hpp) against the division operator, on the CPU,
// which runs the same code: edge divisors and numerators, then random ones; and pooling's
// element sites, which use it.
#include <random>

#include <array>

#include "../../src/kernels/divider.hpp"
#include "../../src/kernels/pool.hpp"
#include "../util.hpp"

using tandem::kernels::FastDivider;

TEST_CASE("FastDivider divides every numerator below 2^31 as / and % do", "[kernels]") {
  const uint32_t top = (uint32_t{1} << 31) - 1;
  std::vector<uint32_t> divisors{1, 2, 3, 5, 7, 49, 64, 196, 255, 256, 257, 3136, 12544, 50176,
                                 65535, 65536, 65537, (1u << 30) - 1, 1u << 30, (1u << 30) + 1,
                                 top - 1, top};
  std::mt19937 rng(7);
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + rng() % top);
  for (uint32_t d : divisors) {
    INFO("divisor " << d);
    const FastDivider f(d);
    std::vector<uint32_t> numerators{0, 1, d - 1, d, top, top - 1};
    if (d < top / 3) numerators.insert(numerators.end(), {d + 1, 2 * d - 1, 2 * d, 3 * d - 1});
    numerators.push_back(top / d * d);      // the largest multiple
    numerators.push_back(top / d * d - 1);  // and the number below it
    for (int k = 0; k < 2000; ++k) numerators.push_back(rng() % (top + 1u));
    for (uint32_t n : numerators) {
      if (f.div(n) != n / d || f.mod(n) != n % d) {
        FAIL("n " << n << ": " << f.div(n) << " rem " << f.mod(n) << ", expected " << n / d
                  << " rem " << n % d);
      }
    }
    // Every numerator of a small range, exhaustively.
    uint32_t wrong = 0;
    for (uint32_t n = 0; n < 100000; ++n) wrong += f.div(n) != n / d;
    CHECK(wrong == 0);
  }
}

// Pooling's element sites (src/kernels/pool.hpp) divide by magic numbers below 2^31 elements
// and in 64 bits above: both against the (n, channel, y, x) a loop over the maps counts out.
TEST_CASE("pool::SiteOf finds every element's image, channel, row and column in either layout",
          "[kernels]") {
  using tandem::kernels::pool::Geometry;
  using tandem::kernels::pool::SiteOf;
  for (bool channels_last : {false, true})
    for (const auto& [n, c, rows, cols] : std::vector<std::array<int64_t, 4>>{
             {1, 1, 1, 1}, {2, 3, 4, 5}, {3, 64, 7, 7}, {2, 5, 1, 9}, {4, 1, 3, 2}}) {
      INFO((channels_last ? "channels-last " : "row-major ") << n << "x" << c << "x" << rows
                                                             << "x" << cols);
      const Geometry g{c, rows, cols, rows, cols, channels_last};
      const int64_t count = n * c * rows * cols;
      const SiteOf narrow(g, rows, cols, count), wide(g, rows, cols, int64_t{1} << 31);
      for (int64_t in = 0; in < n; ++in)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t y = 0; y < rows; ++y)
            for (int64_t x = 0; x < cols; ++x) {
              const int64_t i = channels_last ? ((in * rows + y) * cols + x) * c + ch
                                              : ((in * c + ch) * rows + y) * cols + x;
              for (const SiteOf* s : {&narrow, &wide}) {
                const auto site = (*s)(i);
                if (site.n != in || site.channel != ch || site.y != y || site.x != x)
                  FAIL("element " << i << " (" << (s == &narrow ? "narrow" : "wide")
                                  << "): got (" << site.n << ", " << site.channel << ", "
                                  << site.y << ", " << site.x << "), expected (" << in << ", "
                                  << ch << ", " << y << ", " << x << ")");
              }
            }
    }
}
