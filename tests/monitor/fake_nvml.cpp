// A stand-in for the NVIDIA driver's NVML (libnvidia-ml.so.1): the calls GpuHealth makes,
// declared as nvml.h declares them, for three GPUs. It proves on a machine without a driver
// what the GPU machine's real NVML would otherwise be the only proof of: the symbols GpuHealth
// looks up, the structures and constants it passes, and its mapping of NVML's GPUs onto CUDA's.
//
// NVML numbers its GPUs in an order of its own: its GPU 0 has PCI bus 2, GPU 1 bus 3, GPU 2 bus
// 1. The CUDA emulation's device i has bus i + 1 (tests/cuda_emu/runtime.cpp), so CUDA's device
// 0 is NVML's GPU 2 and device 1 NVML's GPU 0. Each GPU's temperature is 50 + its bus, which
// shows which one a sample came from. With TANDEM_FAKE_NVML_THROTTLE=1, the GPU on bus 1
// reports thermal (hardware) and power-cap throttling at 1400 MHz from its second sample on.
#include <cstdio>
#include <cstdlib>
#include <cstring>

// NVML's types, named as nvml.h names them (a sanitizer compares the callers' function types
// with these); a device handle points at one of the GPUs below.
extern "C" {
struct nvmlDevice_st {
  unsigned bus;
  int samples;  // calls of the clock query: the sample number
};
struct nvmlUtilization_st {
  unsigned int gpu, memory;
};
struct nvmlMemory_st {
  unsigned long long total, free, used;
};
}

namespace {

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotFound = 6;
constexpr int kTemperatureGpu = 0, kClockSm = 1;  // NVML_TEMPERATURE_GPU, NVML_CLOCK_SM

using Device = nvmlDevice_st;
Device g_devices[3] = {{2, 0}, {3, 0}, {1, 0}};
int g_initialized = 0;

bool throttling(const Device* d) {
  const char* e = std::getenv("TANDEM_FAKE_NVML_THROTTLE");
  return e != nullptr && std::strcmp(e, "1") == 0 && d->bus == 1 && d->samples > 1;
}

bool known(const Device* d) { return d >= g_devices && d < g_devices + 3; }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() {
  ++g_initialized;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
  if (g_initialized == 0) return kUninitialized;
  --g_initialized;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* count) {
  if (g_initialized == 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  *count = 3;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                                         Device** device) {
  if (g_initialized == 0) return kUninitialized;
  if (device == nullptr || index >= 3) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}

// "domain:bus:device.function" in hex, as cudaDeviceGetPCIBusId writes it ("0000:01:00.0") and
// as NVML's own 8-digit-domain form has it.
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByPciBusId_v2(const char* id,
                                                                            Device** device) {
  if (g_initialized == 0) return kUninitialized;
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (id == nullptr || device == nullptr ||
      std::sscanf(id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
    return kInvalidArgument;
  for (Device& d : g_devices)
    if (d.bus == bus && domain == 0 && slot == 0 && function == 0) {
      *device = &d;
      return kSuccess;
    }
  return kNotFound;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(
    Device* d, nvmlUtilization_st* u) {
  if (!known(d) || u == nullptr) return kInvalidArgument;
  u->gpu = 90 + d->bus;
  u->memory = 40;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(Device* d, nvmlMemory_st* m) {
  if (!known(d) || m == nullptr) return kInvalidArgument;
  m->total = 143771ull << 20;  // an H200's
  m->used = (1000ull + d->bus) << 20;
  m->free = m->total - m->used;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetTemperature(Device* d, int sensor,
                                                                    unsigned* celsius) {
  if (!known(d) || sensor != kTemperatureGpu || celsius == nullptr) return kInvalidArgument;
  *celsius = 50 + d->bus;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetClockInfo(Device* d, int type,
                                                                  unsigned* mhz) {
  if (!known(d) || type != kClockSm || mhz == nullptr) return kInvalidArgument;
  ++d->samples;
  *mhz = throttling(d) ? 1400 : 1980;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMaxClockInfo(Device* d, int type,
                                                                     unsigned* mhz) {
  if (!known(d) || type != kClockSm || mhz == nullptr) return kInvalidArgument;
  *mhz = 1980;
  return kSuccess;
}

// The name of drivers since 535 (nvmlDeviceGetCurrentClocksThrottleReasons before).
__attribute__((visibility("default"))) int nvmlDeviceGetCurrentClocksEventReasons(
    Device* d, unsigned long long* reasons) {
  if (!known(d) || reasons == nullptr) return kInvalidArgument;
  // nvmlClocksEventReasonHwThermalSlowdown | nvmlClocksEventReasonSwPowerCap; else GPU idle.
  *reasons = throttling(d) ? 0x40 | 0x4 : 0x1;
  return kSuccess;
}

}  // extern "C"
