// Settings read from the environment, parsed strictly: a value that is set must mean what it
// says, or the run stops with a message naming the variable (atol read "1s" as 1 ms, and "abc"
// as unset).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "tandem/core/error.hpp"

namespace tandem {

/// The whole number in environment variable `name`, in [1, max]; nullopt when it is unset or
/// empty. Anything else (a unit suffix, 0, a negative, past `max`) is a ValueError naming it.
inline std::optional<int64_t> positive_env(const char* name, int64_t max = INT64_MAX) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  TANDEM_CHECK(*end == '\0' && errno == 0 && x >= 1 && x <= max, name, "='", v,
               "' is not a whole number in [1, ", max, "]");
  return static_cast<int64_t>(x);
}

}  // namespace tandem
