// The pieces of the JSON that tandem's metrics, reports and traces write by hand, valid for any
// value: a non-finite number is null (an ostream writes nan and inf, which no JSON parser takes),
// and a string escapes quotes, backslashes and control characters.
#pragma once

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

namespace tandem::monitor {

/// v as a JSON number, as an ostream writes it; null where it is NaN or infinite.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream os;
  os << v;
  return os.str();
}

/// s as a JSON string, quoted.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace tandem::monitor
