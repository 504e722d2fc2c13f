// tandem::Error and the TANDEM_CHECK family: every failure is an exception that names where it
// happened, the op, and what was expected against what was received.
#pragma once

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
