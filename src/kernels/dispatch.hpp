// The seam between ops and backends: a Stub per kernel family holds one entry per CPU instruction
// set and one for CUDA, filled at load time by the backends' registrations (PyTorch's
// DispatchStub is the model). Ops call a stub like a function; it picks the entry for the device
// of the call's first tensor and the best instruction set this CPU has.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "tandem/core/tensor.hpp"

namespace tandem::kernels {

/// The instruction sets the CPU kernels are compiled for, worst to best.
enum class CpuIsa : uint8_t { scalar, avx2, avx512 };
constexpr int kCpuIsas = 3;
const char* cpu_isa_name(CpuIsa isa);
/// The instruction set CPU kernels run with: the best this machine supports, capped by the
/// environment variable TANDEM_CPU_ISA=scalar|avx2|avx512. Chosen once per process.
CpuIsa cpu_isa();
/// The best instruction set this machine supports (cpuid) among those the build has kernels for
/// (TANDEM_CPU_ISAS), ignoring TANDEM_CPU_ISA.
CpuIsa cpu_isa_supported();

namespace detail {
[[noreturn]] void throw_missing_kernel(const char* name, const Tensor* key, bool cuda_built,
                                       const char* op);

template <typename... Args>
const Tensor* first_tensor(const Args&... args) {
  const Tensor* found = nullptr;
  auto visit = [&](const auto& a) {
    if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Tensor>) {
      if (!found && a.defined()) found = &a;
    }
  };
  (visit(args), ...);
  return found;
}
}  // namespace detail

template <typename Fn>
class Stub;

template <typename R, typename... Args>
class Stub<R (*)(Args...)> {
 public:
  using Fn = R (*)(Args...);
  /// constexpr: stubs are constant-initialized, so registrations in any translation unit's
  /// static initialization find them ready.
  constexpr explicit Stub(const char* name) : name_(name) {}
  Stub(const Stub&) = delete;
  Stub& operator=(const Stub&) = delete;

  const char* name() const { return name_; }
  void set_cpu(CpuIsa isa, Fn fn) { cpu_[static_cast<int>(isa)] = fn; }
  void set_cuda(Fn fn) { cuda_ = fn; }

  /// The entry for the device of `key`; throws NotImplementedError naming the op (`op`, or the
  /// kernel's name), the dtype and the device of `key` when the backend lacks it. Ops call it
  /// before allocating outputs, so the error comes before any allocation on that device.
  Fn at(const Tensor& key, const char* op = nullptr) const {
    if (key.is_cpu()) {
      for (int i = static_cast<int>(cpu_isa()); i >= 0; --i)
        if (cpu_[i]) return cpu_[i];
    } else if (cuda_) {
      return cuda_;
    }
    detail::throw_missing_kernel(name_, &key, cuda_built(), op);
  }

  /// Runs the kernel on the device of the first defined tensor argument.
  R operator()(Args... args) const {
    const Tensor* key = detail::first_tensor(args...);
    if (!key) detail::throw_missing_kernel(name_, nullptr, cuda_built(), nullptr);
    return at(*key)(std::forward<Args>(args)...);
  }

 private:
  static bool cuda_built();
  const char* name_;
  Fn cpu_[kCpuIsas] = {};
  Fn cuda_ = nullptr;
};

template <typename R, typename... Args>
bool Stub<R (*)(Args...)>::cuda_built() {
#ifdef TANDEM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace tandem::kernels

#define TANDEM_KERNEL_CONCAT_(a, b) a##b
#define TANDEM_KERNEL_CONCAT(a, b) TANDEM_KERNEL_CONCAT_(a, b)

// The instruction set a CPU kernel file is being compiled for (set per object by the build).
#ifndef TANDEM_CPU_CAPABILITY
#define TANDEM_CPU_CAPABILITY scalar
#endif

/// In a CPU kernel file: makes `fn` the CPU entry of `stub` for the instruction set this file is
/// compiled for.
#define TANDEM_REGISTER_CPU(stub, fn)                                                       \
  static const bool TANDEM_KERNEL_CONCAT(tandem_registered_, __LINE__) =                    \
      (::tandem::kernels::stub.set_cpu(::tandem::kernels::CpuIsa::TANDEM_CPU_CAPABILITY, fn), \
       true)

/// In a CUDA kernel file: makes `fn` the CUDA entry of `stub`.
#define TANDEM_REGISTER_CUDA(stub, fn)                                    \
  static const bool TANDEM_KERNEL_CONCAT(tandem_registered_, __LINE__) = \
      (::tandem::kernels::stub.set_cuda(fn), true)
