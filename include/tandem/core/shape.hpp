// Shape helpers: element counts, contiguous strides, dim wrapping and NumPy broadcasting.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tandem/core/error.hpp"

namespace tandem {

using Shape = std::vector<int64_t>;

/// What `Tensor::sizes()` gives, where libtorch's code reads an IntArrayRef: a Shape of its own
/// (so `auto s = f().sizes()` never dangles) with `vec()`, printed as libtorch prints sizes.
struct Sizes : Shape {
  explicit Sizes(const Shape& s) : Shape(s) {}
  Shape vec() const { return *this; }
};
/// libtorch's name for a list of sizes or dims taken as an argument (here an owning vector).
using IntArrayRef = Shape;
/// Whether I is one dim or size given where a list is expected (`x.sum(1)`, `zeros(3)`): an
/// integer, never a bool, which is a flag there (`x.var(false)` is libtorch's var(unbiased)).
template <typename I>
inline constexpr bool is_dim_v = std::is_integral_v<I> && !std::is_same_v<I, bool>;
/// libtorch's optional list of dims: none (std::nullopt, {}), a Shape, a braced list ({0, 1}) or
/// one dim, as libtorch's OptionalIntArrayRef takes them (std::optional<Shape> takes no {0}).
class OptionalIntArrayRef {
 public:
  OptionalIntArrayRef() = default;
  OptionalIntArrayRef(std::nullopt_t) {}
  OptionalIntArrayRef(Shape dims) : dims_(std::move(dims)) {}
  OptionalIntArrayRef(std::initializer_list<int64_t> dims) : dims_(Shape(dims)) {}
  OptionalIntArrayRef(int64_t dim) : dims_(Shape{dim}) {}
  bool has_value() const { return dims_.has_value(); }
  explicit operator bool() const { return has_value(); }
  const Shape& operator*() const { return *dims_; }
  const Shape* operator->() const { return &*dims_; }
  Shape value_or(Shape fallback) const { return dims_.value_or(std::move(fallback)); }

 private:
  std::optional<Shape> dims_;
};

/// "[2, 3]".
inline std::ostream& operator<<(std::ostream& os, const Sizes& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

inline std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// The element count of `s` (sizes >= 0), or a ValueError naming `op` when the count (its sizes
/// of 0 taken as 1, as the strides count them), or its size in bytes at `element_size` bytes an
/// element, does not fit in int64 (a count that wrapped would allocate too little and index past
/// it).
inline int64_t checked_numel(const Shape& s, const char* op, int64_t element_size = 1) {
  // The product of the sizes, a size 0 taken as 1: an empty tensor's strides are those products
  // too, so they must fit as well.
  int64_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t d : s) {
    empty = empty || d == 0;
    overflow = overflow || __builtin_mul_overflow(n, d > 1 ? d : 1, &n);
  }
  int64_t bytes = 0;
  TANDEM_CHECK(!overflow && (empty || !__builtin_mul_overflow(n, element_size, &bytes)), op,
               ": shape ", shape_str(s), " has more elements than a tensor can address");
  return empty ? 0 : n;
}

inline Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i] > 1 ? s[i] : 1;
  }
  return st;
}

/// Maps a possibly negative dim into [0, ndim); `op` names the caller in the error.
inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  TANDEM_CHECK_INDEX(dim >= lo && dim <= hi, op, ": dim ", dim, " out of range for a tensor of ",
                     ndim, " dims (expected in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

/// The broadcast shape of a and b (NumPy rules), or an error naming the op and both shapes.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TANDEM_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ",
                 shape_str(b), " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tandem
