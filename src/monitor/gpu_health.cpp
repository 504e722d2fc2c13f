#include "tandem/monitor/gpu_health.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "tandem/cuda/runtime.hpp"

// The few NVML declarations used, as nvml.h has them (the toolkit here ships no nvml.h), at
// global scope as there: the structures' names are part of the functions' types, which a
// sanitizer compares with the library's (UBSan's -fsanitize=function, against the stand-in NVML
// of the tests). NVML's enums (return codes, sensors, clocks) are ints here and there.
extern "C" {
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlUtilization_st {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct nvmlMemory_st {
  unsigned long long total, free, used;
} nvmlMemory_t;
}

namespace tandem::monitor {
namespace {

using nvmlReturn_t = int;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;
constexpr int kNvmlClockSm = 1;

// Clocks-event (throttle) reason bits.
constexpr uint64_t kSwPowerCap = 0x4, kHwSlowdown = 0x8, kSwThermal = 0x20, kHwThermal = 0x40,
                   kHwPowerBrake = 0x80;

}  // namespace

struct GpuHealth::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*count)(unsigned*);
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*handle_by_bus)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*);
};

GpuHealth::GpuHealth() {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    const char* e = dlerror();
    why_ = std::string("libnvidia-ml.so.1 not found (it comes with the NVIDIA driver): ") +
           (e ? e : "dlopen failed");
    return;
  }
  auto sym = [&](const char* name) { return dlsym(lib_, name); };
  api_ = new Api{};
  api_->init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  api_->shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  api_->count = reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
  api_->handle = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
      sym("nvmlDeviceGetHandleByIndex_v2"));
  api_->handle_by_bus = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
      sym("nvmlDeviceGetHandleByPciBusId_v2"));
  api_->utilization = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(
      sym("nvmlDeviceGetUtilizationRates"));
  api_->memory =
      reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  api_->temperature = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*)>(
      sym("nvmlDeviceGetTemperature"));
  api_->clock = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*)>(
      sym("nvmlDeviceGetClockInfo"));
  api_->max_clock = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*)>(
      sym("nvmlDeviceGetMaxClockInfo"));
  // Renamed in newer drivers; either name has the same signature.
  void* reasons = sym("nvmlDeviceGetCurrentClocksEventReasons");
  if (reasons == nullptr) reasons = sym("nvmlDeviceGetCurrentClocksThrottleReasons");
  api_->reasons = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*)>(reasons);
  if (!api_->init || !api_->count || !api_->handle || api_->init() != kNvmlSuccess) {
    why_ = "NVML did not initialize (no NVIDIA driver running?)";
    delete api_;
    api_ = nullptr;
    dlclose(lib_);
    lib_ = nullptr;
  }
}

GpuHealth::~GpuHealth() {
  if (api_ && api_->shutdown) api_->shutdown();
  delete api_;
  if (lib_) dlclose(lib_);
}

std::vector<GpuSample> GpuHealth::sample() const {
  std::vector<GpuSample> out;
  if (!available()) return out;
  // The GPUs this process sees, numbered as CUDA numbers them (CUDA_VISIBLE_DEVICES, as a
  // cluster's scheduler sets it, hides some and renumbers the rest; NVML sees every GPU of the
  // machine in its own order), found through their PCI bus ids. Without CUDA's view: NVML's.
  std::vector<std::pair<int, nvmlDevice_t>> devices;
  for (int i = 0; api_->handle_by_bus && i < cuda::device_count(); ++i) {
    const std::string bus = cuda::pci_bus_id(i);
    nvmlDevice_t d = nullptr;
    if (!bus.empty() && api_->handle_by_bus(bus.c_str(), &d) == kNvmlSuccess)
      devices.emplace_back(i, d);
  }
  unsigned n = 0;
  if (devices.empty() && api_->count(&n) == kNvmlSuccess)
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (api_->handle(i, &d) == kNvmlSuccess) devices.emplace_back(static_cast<int>(i), d);
    }
  for (const auto& [index, d] : devices) {
    GpuSample s;
    s.index = index;
    nvmlUtilization_t u{};
    if (api_->utilization && api_->utilization(d, &u) == kNvmlSuccess) s.utilization_pct = u.gpu;
    nvmlMemory_t m{};
    if (api_->memory && api_->memory(d, &m) == kNvmlSuccess) s.memory_used = m.used, s.memory_total = m.total;
    if (api_->temperature) api_->temperature(d, kNvmlTemperatureGpu, &s.temperature_c);
    if (api_->clock) api_->clock(d, kNvmlClockSm, &s.sm_clock_mhz);
    if (api_->max_clock) api_->max_clock(d, kNvmlClockSm, &s.sm_clock_max_mhz);
    unsigned long long r = 0;
    if (api_->reasons && api_->reasons(d, &r) == kNvmlSuccess) s.throttle_reasons = r;
    out.push_back(s);
  }
  return out;
}

bool GpuSample::throttled() const {
  return (throttle_reasons & (kSwPowerCap | kHwSlowdown | kSwThermal | kHwThermal | kHwPowerBrake)) != 0;
}

std::string GpuSample::throttle_text() const {
  std::string out;
  auto add = [&](uint64_t bit, const char* name) {
    if (throttle_reasons & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(kSwPowerCap, "power cap");
  add(kHwSlowdown, "hardware slowdown");
  add(kSwThermal, "thermal (software)");
  add(kHwThermal, "thermal (hardware)");
  add(kHwPowerBrake, "power brake");
  return out;
}

std::string GpuSample::json() const {
  std::ostringstream os;
  os << "{\"gpu\": " << index << ", \"utilization_pct\": " << utilization_pct
     << ", \"memory_used\": " << memory_used << ", \"memory_total\": " << memory_total
     << ", \"temperature_c\": " << temperature_c << ", \"sm_clock_mhz\": " << sm_clock_mhz
     << ", \"sm_clock_max_mhz\": " << sm_clock_max_mhz << ", \"throttle\": \"" << throttle_text()
     << "\"}";
  return os.str();
}

std::vector<std::string> health_warnings(const std::vector<GpuSample>& before,
                                         const std::vector<GpuSample>& now) {
  std::vector<std::string> out;
  for (const GpuSample& s : now) {
    if (s.throttled())
      out.push_back("GPU " + std::to_string(s.index) + " is throttling: " + s.throttle_text() +
                    " (SM clock " + std::to_string(s.sm_clock_mhz) + " MHz, " +
                    std::to_string(s.temperature_c) + " C)");
    for (const GpuSample& b : before)
      if (b.index == s.index && b.sm_clock_mhz > 0 && s.sm_clock_mhz * 10 < b.sm_clock_mhz * 9)
        out.push_back("GPU " + std::to_string(s.index) + "'s SM clock fell from " +
                      std::to_string(b.sm_clock_mhz) + " to " + std::to_string(s.sm_clock_mhz) +
                      " MHz during training");
  }
  return out;
}

}  // namespace tandem::monitor
