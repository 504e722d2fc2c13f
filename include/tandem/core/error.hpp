// tandem::Error and the TANDEM_CHECK family: every failure is an exception that names where it
// happened, the op, and what was expected against what was received.
#pragma once

#include <cstddef>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem {

/// Base class of every error tandem throws. what() reads "op: message (file:line)".
class Error : public std::runtime_error {
 public:
  Error(const std::string& msg, const char* file, int line)
      : std::runtime_error(msg + " (" + file + ":" + std::to_string(line) + ")"), message_(msg) {}
  /// The message without the source location.
  const std::string& message() const noexcept { return message_; }

 private:
  std::string message_;
};

/// A shape, dtype or device did not fit an op.
class ValueError : public Error {
  using Error::Error;
};
/// A dimension or element index out of range.
class IndexError : public Error {
  using Error::Error;
};
/// Something is not implemented for this dtype or device.
class NotImplementedError : public Error {
  using Error::Error;
};

namespace detail {
/// "1.50 GiB (1610612736 bytes)", or "100 bytes" below 1 KiB.
inline std::string describe_bytes(size_t n) {
  if (n < 1024) return std::to_string(n) + " bytes";
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n) / 1024.0;
  int unit = 0;
  for (; v >= 1024.0 && unit < 5; ++unit) v /= 1024.0;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[unit]);
  return std::string(buf) + " (" + std::to_string(n) + " bytes)";
}
}  // namespace detail

/// An allocator could not get the memory asked for, even after giving back what it caches.
/// what(): "cuda:0: out of memory: asked for 4.00 GiB (4294967296 bytes), the allocator holds
/// 75.50 GiB (81067507712 bytes) (runtime.cpp:51)".
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(size_t requested, size_t held, const std::string& device, const char* file,
                   int line)
      : Error(device + ": out of memory: asked for " + detail::describe_bytes(requested) +
                  ", the allocator holds " + detail::describe_bytes(held),
              file, line),
        requested_(requested),
        held_(held),
        device_(device) {}
  /// Bytes the failed allocation asked for.
  size_t requested_bytes() const noexcept { return requested_; }
  /// Bytes the device's allocator held (in use and cached) when it failed.
  size_t held_bytes() const noexcept { return held_; }
  /// "cpu" or "cuda:N".
  const std::string& device() const noexcept { return device_; }

 private:
  size_t requested_;
  size_t held_;
  std::string device_;
};

/// A CUDA, cuDNN, cuBLAS or NCCL call failed. what(): "<call>: <library's error name and string>
/// (file:line)", e.g. "cudaMemcpy(dst, src, n, cudaMemcpyDefault): CUDA error
/// cudaErrorInvalidValue: invalid argument (runtime.cpp:160)".
class CudaError : public Error {
 public:
  CudaError(const std::string& call, const std::string& error, const char* file, int line)
      : Error(call + ": " + error, file, line), call_(call), error_(error) {}
  /// The call (or what was being done) that failed.
  const std::string& call() const noexcept { return call_; }
  /// The library's error name and string.
  const std::string& error() const noexcept { return error_; }

 private:
  std::string call_;
  std::string error_;
};

namespace detail {
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
inline const char* base_name(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  return base;
}
}  // namespace detail

/// libtorch's `torch::str`: the arguments written one after another, as `os << a << b` writes
/// them (`str("step ", 3, ": ", 0.5)` is "step 3: 0.5").
template <typename... Args>
std::string str(const Args&... args) {
  return detail::str_cat(args...);
}

}  // namespace tandem

/// Throws `kind` with the streamed message when `cond` is false.
#define TANDEM_CHECK_T(kind, cond, ...)                                                       \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw kind(::tandem::detail::str_cat(__VA_ARGS__), ::tandem::detail::base_name(__FILE__), \
                 __LINE__);                                                                   \
  } while (0)

#define TANDEM_CHECK(cond, ...) TANDEM_CHECK_T(::tandem::ValueError, cond, __VA_ARGS__)
#define TANDEM_CHECK_INDEX(cond, ...) TANDEM_CHECK_T(::tandem::IndexError, cond, __VA_ARGS__)
#define TANDEM_THROW(kind, ...) TANDEM_CHECK_T(kind, false, __VA_ARGS__)
