// The one DType -> C++ type switch. Kernels, the communicators and io call f(T{}) with the
// element type of a dtype; f16/bf16 come as Eigen::half / Eigen::bfloat16 (usable on host and
// device), and acc_type<T> is the type they compute in. nvcc compiles this header too.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "tandem/core/dtype.hpp"
#include "tandem/core/error.hpp"

namespace tandem {

/// The type arithmetic on T is carried out in: float for f16/bf16, T itself otherwise.
template <typename T>
using acc_type = std::conditional_t<std::is_same_v<T, Eigen::half> ||
                                        std::is_same_v<T, Eigen::bfloat16>,
                                    float, T>;

/// Which dtypes a call accepts.
enum class DTypeSet : uint8_t {
  all,       // every dtype
  floating,  // f32, f64, f16, bf16
  wide,      // f32, f64: floats a kernel computes in natively
  numeric,   // every dtype but bool
};

inline bool dtype_in(DType t, DTypeSet set) {
  switch (set) {
    case DTypeSet::all: return true;
    case DTypeSet::floating: return is_floating(t);
    case DTypeSet::wide: return t == DType::f32 || t == DType::f64;
    case DTypeSet::numeric: return t != DType::boolean;
  }
  return false;
}

/// Calls f(T{}) with the element type of `dtype`; throws NotImplementedError naming `what`
/// when `dtype` is not in `set`. The body is instantiated only for the types of `set`.
template <DTypeSet kSet = DTypeSet::all, typename F>
decltype(auto) dispatch_dtype(DType dtype, const char* what, F&& f) {
  TANDEM_CHECK_T(NotImplementedError, dtype_in(dtype, kSet), what, ": no ", dtype_name(dtype),
                 " variant");
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: break;
  }
  if constexpr (kSet != DTypeSet::wide) {
    switch (dtype) {
      case DType::f16: return f(Eigen::half{});
      case DType::bf16: return f(Eigen::bfloat16{});
      default: break;
    }
  }
  if constexpr (kSet == DTypeSet::all || kSet == DTypeSet::numeric) {
    switch (dtype) {
      case DType::i64: return f(int64_t{});
      case DType::i32: return f(int32_t{});
      case DType::u8: return f(uint8_t{});
      default: break;
    }
  }
  if constexpr (kSet == DTypeSet::all) {
    if (dtype == DType::boolean) return f(bool{});
  }
  return f(float{});  // not reached: dtype_in rejected the rest
}

}  // namespace tandem
