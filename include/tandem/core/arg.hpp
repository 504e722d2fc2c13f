// The fields of option structs with their chainable setters and getters, from one macro, as
// libtorch's TORCH_ARG (torch/arg.h).
#pragma once

#include <type_traits>
#include <utility>

// clang-format cannot lay out trailing return types inside a macro.
// clang-format off

/// Declares the public field `name_` (a default may follow: `TANDEM_ARG(double, lr) = 0.1;`),
/// the setter `name(v)` and the getter `name()`. On a named object the setter changes it and
/// returns it by reference, as TORCH_ARG; on a temporary it returns the changed value rather
/// than a reference to the temporary, so `SGDOptions(0.1).momentum(0.9)` chains and
/// `const auto& o = SGDOptions(0.1).momentum(0.9);` does not dangle.
#define TANDEM_ARG(T, name)                                \
  auto name(T value) & -> decltype(*this) {                \
    this->name##_ = std::move(value);                      \
    return *this;                                          \
  }                                                        \
  auto name(T value) && -> std::decay_t<decltype(*this)> { \
    this->name##_ = std::move(value);                      \
    return std::move(*this);                               \
  }                                                        \
  const T& name() const noexcept { return this->name##_; } \
  T name##_

/// The same for value types, whose setters return a changed copy and never change the object
/// they are called on, as c10::TensorOptions: `o.requires_grad(false)` leaves `o` as it was.
#define TANDEM_VALUE_ARG(T, name)                                           \
  [[nodiscard]] auto name(T value) const -> std::decay_t<decltype(*this)> { \
    auto copy = *this;                                                      \
    copy.name##_ = std::move(value);                                        \
    return copy;                                                            \
  }                                                                         \
  const T& name() const noexcept { return this->name##_; }                  \
  T name##_

// clang-format on
