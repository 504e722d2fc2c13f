// Generator: a Philox stream position (seed, offset). Each random op consumes a fixed number of
// counters from the offset, so a run is reproducible from the seed alone.
#pragma once

#include <cstdint>
#include <mutex>

namespace tandem {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seed_;
  }
  uint64_t offset() const {
    std::lock_guard<std::mutex> lock(mu_);
    return offset_;
  }
  /// Restores a position saved with seed()/offset() (checkpoints).
  void set_state(uint64_t seed, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = offset;
  }
  /// Reserves `counters` Philox counters; returns (seed, first counter).
  std::pair<uint64_t, uint64_t> reserve(uint64_t counters) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t start = offset_;
    offset_ += counters;
    return {seed_, start};
  }

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide generator random ops use when none is passed.
Generator& default_generator();
/// Seeds the default generator.
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tandem
