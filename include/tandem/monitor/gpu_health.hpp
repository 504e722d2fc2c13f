// GPU health through NVML, loaded at run time (dlopen of libnvidia-ml.so.1, which comes with the
// driver; tandem does not link it, and the CUDA toolkit has no NVML): utilization, memory,
// temperature, SM clock and the reasons the clock is held down, per GPU. Without NVML (no
// driver, a CPU machine) `GpuHealth::available()` is false and `why_unavailable()` says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::monitor {

struct GpuSample {
  int index = 0;  // the CUDA device (as CUDA_VISIBLE_DEVICES numbers them); NVML's without CUDA
  unsigned utilization_pct = 0;         // of the last sample period, the SMs busy
  uint64_t memory_used = 0, memory_total = 0;  // bytes
  unsigned temperature_c = 0;
  unsigned sm_clock_mhz = 0, sm_clock_max_mhz = 0;
  uint64_t throttle_reasons = 0;        // NVML's clocks-event reason bits
  /// Thermal or power throttling among the reasons (idle and application settings are not).
  bool throttled() const;
  /// "power cap, thermal (hardware)", or "" when none.
  std::string throttle_text() const;
  /// One JSON object.
  std::string json() const;
};

class GpuHealth {
 public:
  /// Loads NVML and initializes it; never throws.
  GpuHealth();
  ~GpuHealth();
  GpuHealth(const GpuHealth&) = delete;
  GpuHealth& operator=(const GpuHealth&) = delete;

  bool available() const { return lib_ != nullptr; }
  /// Why NVML is not there ("libnvidia-ml.so.1 not found: ..."), or "".
  const std::string& why_unavailable() const { return why_; }
  /// A sample of every GPU NVML sees (none without NVML).
  std::vector<GpuSample> sample() const;

 private:
  void* lib_ = nullptr;
  std::string why_;
  struct Api;
  Api* api_ = nullptr;
};

/// What to tell the user about `now` against `before` (the same GPUs earlier): a line per GPU
/// that throttles (thermal or power) or whose SM clock fell by more than 10%; empty when all
/// is well.
std::vector<std::string> health_warnings(const std::vector<GpuSample>& before,
                                         const std::vector<GpuSample>& now);

}  // namespace tandem::monitor
