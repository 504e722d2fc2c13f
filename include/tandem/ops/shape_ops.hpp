// Views and shape ops: reshape, permute, slicing, broadcasting, concatenation and padding.
// Views share storage with their input; all of these are differentiable.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem {

/// A view when the layout allows it, a copy otherwise. One dim may be -1.
Tensor reshape(const Tensor& t, const Shape& shape);
/// Always a view; throws when the layout does not allow one.
Tensor view(const Tensor& t, const Shape& shape);
Tensor permute(const Tensor& t, const Shape& dims);
/// The dims `source` moved to the positions `destination`, the others keeping their order (a
/// view), as torch.movedim; moveaxis is its numpy name.
Tensor movedim(const Tensor& t, const Shape& source, const Shape& destination);
Tensor movedim(const Tensor& t, int64_t source, int64_t destination);
Tensor moveaxis(const Tensor& t, const Shape& source, const Shape& destination);
Tensor moveaxis(const Tensor& t, int64_t source, int64_t destination);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
/// Elements start, start+step, ... < end along dim (bounds clamped as in Python slicing).
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
/// Removes `dim`, keeping element `index` (negative counts from the end).
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
/// Broadcasts size-1 dims (and new leading dims) to `shape`; -1 keeps a size.
Tensor expand(const Tensor& t, const Shape& shape);
/// Each memory location once: `t` with every dim of stride 0 narrowed to size 1 (a view). An
/// in-place update of an expanded tensor's values goes through it (see has_internal_overlap).
Tensor unexpand(const Tensor& t);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
/// dim split into `sizes` (one may be -1; their product is the dim's size), as Tensor.unflatten.
Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes);
Tensor contiguous(const Tensor& t);
/// Sums `t` down to `shape` (the reverse of broadcasting; used by backward passes).
Tensor sum_to(const Tensor& t, const Shape& shape);

/// Views of consecutive pieces along dim, as torch's: split by a size (the last piece may be
/// smaller), by the sizes given (they sum to the dim's size), into `chunks` pieces of
/// ceil(size / chunks) (fewer when the size runs out), or into its slices (unbind).
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& t, const std::vector<int64_t>& split_sizes,
                                     int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& t, int64_t dim = 0);
/// t tiled `repeats[i]` times along each dim (leading repeats add dims), as Tensor.repeat.
Tensor repeat(const Tensor& t, const Shape& repeats);

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Constant padding, as torch.nn.functional.pad: `pads` holds (left, right) pairs starting with
/// the last dim. Negative pads crop.
Tensor pad(const Tensor& t, const std::vector<int64_t>& pads, double value = 0.0);
/// How pad fills: a constant; the input mirrored at its edges (the edge not repeated: pads
/// below the dim's size); the edge repeated; the input wrapped around (pads up to the dim's
/// size). libtorch's torch::kConstant, kReflect, kReplicate, kCircular.
enum class PadMode { constant, reflect, replicate, circular };
inline constexpr PadMode kConstant = PadMode::constant;
inline constexpr PadMode kReflect = PadMode::reflect;
inline constexpr PadMode kReplicate = PadMode::replicate;
inline constexpr PadMode kCircular = PadMode::circular;
/// A convolution's padding_mode default, libtorch's torch::kZeros: constant zeros.
inline constexpr PadMode kZeros = PadMode::constant;
/// The modes other than constant take no negative pads; each padded dim is one index_select
/// (so the gradient sums what each input element was copied to).
Tensor pad(const Tensor& t, const std::vector<int64_t>& pads, PadMode mode, double value = 0.0);
/// The lower (upper) triangle of the last two dims: elements with col - row <= diagonal
/// (>= diagonal) kept, the rest 0.
Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);

/// The coordinate grids of 0-d or 1-d tensors, as torch.meshgrid: output i holds input i
/// broadcast along dim i to the sizes of all ("ij" indexing). "xy" (numpy's) swaps the first two
/// dims of every output. Views of the inputs.
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors,
                             const std::string& indexing = "ij");
/// The view of the elements (i, i + offset) of dims dim1 and dim2, as a new last dim.
Tensor diagonal(const Tensor& t, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
/// Of a 1-d tensor, the square matrix with it on diagonal `diagonal` and zeros elsewhere; of a
/// 2-d one, a copy of that diagonal.
Tensor diag(const Tensor& t, int64_t diagonal = 0);
/// The elements moved `shifts[i]` places along `dims[i]`, those pushed off the end coming back
/// at the start. Without dims, along the flattened tensor (one shift), the shape kept.
Tensor roll(const Tensor& t, const Shape& shifts, const Shape& dims = {});
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor roll(const Tensor& t, I shift) {
  return roll(t, Shape{static_cast<int64_t>(shift)});
}
/// One shift along one dim (libtorch takes one integer for a list).
inline Tensor roll(const Tensor& t, int64_t shift, int64_t dim) {
  return roll(t, Shape{shift}, Shape{dim});
}
/// Rotated by 90 degrees k times in the plane of dims, from the first towards the second.
Tensor rot90(const Tensor& t, int64_t k = 1, const Shape& dims = {0, 1});
/// The n-th forward difference along dim (torch.diff): out[i] = t[i + 1] - t[i], n times (bool:
/// logical_xor); prepend and append (t's shape but along dim) are joined to t first.
Tensor diff(const Tensor& t, int64_t n = 1, int64_t dim = -1, const Tensor& prepend = {},
            const Tensor& append = {});
/// repeat() with fewer reps than dims allowed: reps padded with leading 1s.
Tensor tile(const Tensor& t, const Shape& reps);
// One integer where libtorch takes a list: `reshape(x, -1)`, `expand(x, 3)`, `tile(x, 2)`.
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor reshape(const Tensor& t, I size) {
  return reshape(t, Shape{static_cast<int64_t>(size)});
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor expand(const Tensor& t, I size) {
  return expand(t, Shape{static_cast<int64_t>(size)});
}
template <typename I, typename = std::enable_if_t<is_dim_v<I>>>
Tensor tile(const Tensor& t, I reps) {
  return tile(t, Shape{static_cast<int64_t>(reps)});
}
/// Each element `repeats` times in a row along dim (along the flattened tensor without one).
Tensor repeat_interleave(const Tensor& t, int64_t repeats,
                         std::optional<int64_t> dim = std::nullopt);
/// Element i `repeats[i]` times (repeats: a 1-d integer tensor, one count per element along dim,
/// or one count for all). Its counts are read on the host.
Tensor repeat_interleave(const Tensor& t, const Tensor& repeats,
                         std::optional<int64_t> dim = std::nullopt);
/// 0, 0, ..., 1, 1, ...: each index i `repeats[i]` times (i64), as
/// torch.repeat_interleave(repeats).
Tensor repeat_interleave(const Tensor& repeats);
/// Every window of `size` elements `step` apart along dim, as a new last dim (Tensor.unfold): a
/// view, so windows that overlap share elements, and their gradients add.
Tensor unfold(const Tensor& t, int64_t dim, int64_t size, int64_t step);
/// (*, C r^2, H, W) -> (*, C, H r, W r), and back.
Tensor pixel_shuffle(const Tensor& t, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& t, int64_t downscale_factor);

}  // namespace tandem
