// DType: the element types a tensor can hold, their sizes and names, and type promotion.
#pragma once

#include <cstdint>
#include <ostream>

#include "tandem/core/error.hpp"

namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

namespace tandem {

enum class DType : uint8_t { f32, f64, f16, bf16, i64, i32, u8, boolean };

/// Short names in messages and prints: f32, f64, f16, bf16, i64, i32, u8, bool.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// libtorch's dtype names, so `zeros({2, 3}, kFloat32)` and `x.to(kLong)` compile unchanged.
using ScalarType = DType;
inline constexpr DType kFloat32 = DType::f32, kFloat = DType::f32;
inline constexpr DType kFloat64 = DType::f64, kDouble = DType::f64;
inline constexpr DType kFloat16 = DType::f16, kHalf = DType::f16;
inline constexpr DType kBFloat16 = DType::bf16;
inline constexpr DType kInt64 = DType::i64, kLong = DType::i64;
inline constexpr DType kInt32 = DType::i32, kInt = DType::i32;
inline constexpr DType kUInt8 = DType::u8, kByte = DType::u8;
inline constexpr DType kBool = DType::boolean;

inline int64_t element_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::u8:
    case DType::boolean: return 1;
  }
  return 0;
}

/// Whether a double lies inside int64's range (NaN and inf do not), so that converting it, or
/// a count it stands for, is defined: 2^63 is about 9.22e18.
inline bool fits_int64(double v) { return v > -9.2e18 && v < 9.2e18; }

inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
/// f16 and bf16: stored narrow, computed in f32.
inline bool is_reduced_float(DType t) { return t == DType::f16 || t == DType::bf16; }

/// The dtype two operands are computed in (floats beat integers, wider beats narrower).
inline DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::boolean: return 0;
      case DType::u8: return 1;
      case DType::i32: return 2;
      case DType::i64: return 3;
      case DType::f16: return 4;
      case DType::bf16: return 4;
      case DType::f32: return 5;
      case DType::f64: return 6;
    }
    return 0;
  };
  if (is_reduced_float(a) && is_reduced_float(b)) return DType::f32;  // f16 + bf16, as torch
  return rank(a) >= rank(b) ? a : b;
}

/// Maps a C++ element type to its DType (for data_ptr<T>(), from_vector, item<T>()).
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Eigen::half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<Eigen::bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

}  // namespace tandem
