// Scalar: one number, integral or floating, as libtorch's c10::Scalar; what `Tensor::item()`
// gives without a type.
#pragma once

#include <cstdint>
#include <type_traits>

namespace tandem {

class Scalar {
 public:
  /// From any number, implicitly, as c10::Scalar (`torch::Scalar s = 2;`): integers and bool
  /// stay exact and integral, the rest is a double.
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T value)  // NOLINT(google-explicit-constructor)
      : real_(static_cast<double>(value)),
        integer_(std::is_integral_v<T> ? static_cast<int64_t>(value) : 0),
        integral_(std::is_integral_v<T>),
        boolean_(std::is_same_v<T, bool>) {}
  Scalar(int64_t value, bool boolean)
      : real_(static_cast<double>(value)), integer_(value), integral_(true), boolean_(boolean) {}

  double toDouble() const { return real_; }
  float toFloat() const { return static_cast<float>(real_); }
  int64_t toLong() const { return integral_ ? integer_ : static_cast<int64_t>(real_); }
  int toInt() const { return static_cast<int>(toLong()); }
  bool toBool() const { return integral_ ? integer_ != 0 : real_ != 0; }
  template <typename T>
  T to() const {
    static_assert(std::is_arithmetic_v<T>, "Scalar::to<T>: T must be a number type");
    if constexpr (std::is_same_v<T, bool>) return toBool();
    if constexpr (std::is_integral_v<T>) return static_cast<T>(toLong());
    return static_cast<T>(real_);
  }
  bool isIntegral(bool include_bool) const { return integral_ && (include_bool || !boolean_); }
  bool isFloatingPoint() const { return !integral_; }
  bool isBoolean() const { return boolean_; }
  /// Negated, of the same kind (an integral number stays integral, so `t - 2` keeps t's dtype).
  Scalar operator-() const { return integral_ ? Scalar(-integer_, false) : Scalar(-real_); }
  /// As a double, so that `y + x.item()` and `std::cout << x.item()` work as in libtorch.
  operator double() const { return real_; }  // NOLINT(google-explicit-constructor)

 private:
  double real_ = 0;
  int64_t integer_ = 0;  // exact, where integral_
  bool integral_ = false;
  bool boolean_ = false;
};

}  // namespace tandem
