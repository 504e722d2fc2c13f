// GPU health through NVML loaded at run time: absent NVML is said once and nothing breaks; where
// NVML and GPUs are, every GPU gives a sample; the warnings fire for throttling and clock drops
// only.
#include "../util.hpp"
#include "tandem/monitor/gpu_health.hpp"

using namespace tandem;
using monitor::GpuSample;

TEST_CASE("GPU health: NVML absent is handled, present gives a sample per GPU", "[monitor][gpu]") {
  monitor::GpuHealth health;
  if (!health.available()) {
    CHECK_THAT(health.why_unavailable(),
               Catch::Contains("libnvidia-ml.so.1") || Catch::Contains("NVML did not initialize"));
    CHECK(health.sample().empty());
    return;
  }
  CHECK(health.why_unavailable().empty());
  const auto samples = health.sample();
  CHECK(static_cast<int>(samples.size()) >= cuda::device_count());
  // The GPUs this process sees, as CUDA numbers them.
  for (int i = 0; i < cuda::device_count() && i < static_cast<int>(samples.size()); ++i)
    CHECK(samples[i].index == i);
  for (const GpuSample& s : samples) {
    CHECK(s.memory_total > 0);
    CHECK(s.sm_clock_max_mhz > 0);
    CHECK(s.json().rfind("{\"gpu\": " + std::to_string(s.index), 0) == 0);
  }
}

TEST_CASE("GPU health warnings: thermal and power throttling, a falling clock, not idling",
          "[monitor]") {
  GpuSample before;
  before.index = 0;
  before.sm_clock_mhz = 1980;
  GpuSample idle = before;
  idle.throttle_reasons = 0x1;  // GPU idle: not a problem
  CHECK(monitor::health_warnings({before}, {idle}).empty());
  CHECK_FALSE(idle.throttled());

  GpuSample hot = before;
  hot.throttle_reasons = 0x40 | 0x4;  // hardware thermal slowdown and the power cap
  hot.temperature_c = 91;
  const auto w = monitor::health_warnings({before}, {hot});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "GPU 0 is throttling: power cap, thermal (hardware) (SM clock 1980 MHz, 91 C)");

  GpuSample slow = before;
  slow.sm_clock_mhz = 1400;
  const auto w2 = monitor::health_warnings({before}, {slow});
  REQUIRE(w2.size() == 1);
  CHECK(w2[0] == "GPU 0's SM clock fell from 1980 to 1400 MHz during training");
  slow.sm_clock_mhz = 1900;  // within 10%: boost clocks move that much
  CHECK(monitor::health_warnings({before}, {slow}).empty());
}

// With tests/monitor/fake_nvml.cpp as libnvidia-ml.so.1 (ctest gpu_health_nvml_stand_in puts its
// folder on LD_LIBRARY_PATH): the NVML-present path without a driver. The stand-in's GPUs have
// PCI buses 2, 3, 1 in NVML's order and a temperature of 50 + their bus.
TEST_CASE("GPU health with NVML present: every GPU CUDA sees, numbered as CUDA numbers them",
          "[.nvml_stand_in]") {
  monitor::GpuHealth health;
  INFO(health.why_unavailable());
  REQUIRE(health.available());
  const auto samples = health.sample();
  std::vector<unsigned> temperatures;
  for (const GpuSample& s : samples) {
    temperatures.push_back(s.temperature_c);
    CHECK(s.memory_total == 143771ull << 20);
    CHECK(s.memory_used == (1000ull + s.temperature_c - 50) << 20);
    CHECK(s.utilization_pct == 40 + s.temperature_c);
    CHECK(s.sm_clock_mhz == 1980);
    CHECK(s.sm_clock_max_mhz == 1980);
    CHECK(s.throttle_reasons == 0x1);  // idle
    CHECK_FALSE(s.throttled());
  }
  if (cuda::device_count() == 2) {
    // The emulated GPUs (buses 1 and 2), found by their bus ids: CUDA's order, not NVML's.
    REQUIRE(samples.size() == 2);
    CHECK(samples[0].index == 0);
    CHECK(samples[1].index == 1);
    CHECK(temperatures == std::vector<unsigned>{51, 52});
  } else {
    // No GPU CUDA sees: every GPU NVML sees, in its order.
    REQUIRE(cuda::device_count() == 0);
    REQUIRE(samples.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(samples[i].index == i);
    CHECK(temperatures == std::vector<unsigned>{52, 53, 51});
  }
}
