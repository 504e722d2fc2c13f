// libtorch's tensor indexing (torch::indexing): `x.index({Slice(), 0})` is x[:, 0],
// `x.index({"...", Slice(None, 2)})` is x[..., :2], `x.index({None})` is x[None]: integers,
// slices, None and the ellipsis, each a view; and one tensor among them, `x.index({idx})` with
// integer indices or `x.index({mask})` with a bool mask, which copies (as torch's).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tandem {
class Tensor;
}  // namespace tandem

namespace tandem::indexing {

/// A new dim of size 1 here (x[None]); also an absent bound of a Slice.
inline constexpr std::nullopt_t None = std::nullopt;

struct EllipsisIndexType {};
/// As many full slices as the dims the other indices leave (x[...]); "..." means the same.
inline constexpr EllipsisIndexType Ellipsis{};

/// start:stop:step with Python's rules (negative bounds count from the end, out-of-range ones
/// clamp); step must be positive, as torch's.
struct Slice {
  Slice(std::optional<int64_t> start = None, std::optional<int64_t> stop = None,
        std::optional<int64_t> step = None)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop, step;
};

/// One index of Tensor::index and index_put_.
class TensorIndex {
 public:
  enum class Kind { integer, slice, none, ellipsis, tensor };
  TensorIndex(int64_t i) : kind_(Kind::integer), integer_(i) {}  // NOLINT
  TensorIndex(int i) : TensorIndex(static_cast<int64_t>(i)) {}   // NOLINT
  /// libtorch reads `true` as x[True] (a new dim), not as 1: not supported, so not converted.
  TensorIndex(bool) = delete;
  TensorIndex(Slice s) : kind_(Kind::slice), slice_(s) {}        // NOLINT
  TensorIndex(std::nullopt_t) : kind_(Kind::none) {}             // NOLINT
  TensorIndex(EllipsisIndexType) : kind_(Kind::ellipsis) {}      // NOLINT
  /// "..." only (any other string is refused when the index is used).
  TensorIndex(const char* s)  // NOLINT
      : kind_(Kind::ellipsis), ellipsis_text_ok_(std::string(s) == "...") {}
  /// Integer indices (i64 or i32, negative ones counting from the end) along the dim this index
  /// falls on, whose size the index's shape replaces; or a bool mask over as many dims as it
  /// has, which become one dim of the elements where it is true. One tensor per index() call.
  TensorIndex(const Tensor& t);  // NOLINT (defined in src/ops/tensor_methods.cpp)

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  bool valid() const { return ellipsis_text_ok_; }
  const Tensor& tensor() const { return *tensor_; }

 private:
  Kind kind_;
  std::shared_ptr<const Tensor> tensor_;
  int64_t integer_ = 0;
  Slice slice_;
  bool ellipsis_text_ok_ = true;
};

}  // namespace tandem::indexing
