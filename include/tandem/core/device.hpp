// Device: where a tensor's storage lives (the CPU, or CUDA device N).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "tandem/core/error.hpp"

namespace tandem {

enum class DeviceType : uint8_t { cpu, cuda };

class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceType type, int index = 0) : type_(type), index_(index) {}  // NOLINT
  /// Parses "cpu", "cuda" and "cuda:N".
  explicit Device(const std::string& spec) {
    if (spec == "cpu") return;
    if (spec == "cuda") {
      type_ = DeviceType::cuda;
      return;
    }
    TANDEM_CHECK(spec.rfind("cuda:", 0) == 0 && spec.size() > 5 &&
                     spec.find_first_not_of("0123456789", 5) == std::string::npos,
                 "Device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"", spec, "\"");
    type_ = DeviceType::cuda;
    index_ = std::stoi(spec.substr(5));
  }

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::cpu; }
  bool is_cuda() const { return type_ == DeviceType::cuda; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_); }

  friend bool operator==(Device a, Device b) { return a.type_ == b.type_ && a.index_ == b.index_; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

 private:
  DeviceType type_ = DeviceType::cpu;
  int index_ = 0;
};

/// libtorch's names: device types that convert to device 0 of their type, so `Device(kCUDA, 1)`,
/// `x.to(kCUDA)` and `Device d = kCPU` all compile. (libtorch's `kCUDA` alone means the current
/// device; here it means cuda:0; name the index to mean another.)
inline constexpr DeviceType kCPU = DeviceType::cpu;
inline constexpr DeviceType kCUDA = DeviceType::cuda;

}  // namespace tandem
