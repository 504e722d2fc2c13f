// The histories of views and bases that in-place ops rewrite (torch's CopySlices and its
// regenerated view grad_fns). A view shares its base's memory, so an in-place op on a view in
// the graph changes the base too: the base takes a CopySlices history (its old gradient outside
// the view's elements, the op's inside), and every view of it, this one included, takes its
// history anew from the base's (AsStridedBackward) before it is next used.
#include <algorithm>
#include <vector>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

// The storage position of each element of (shape, strides, offset), in row-major order.
std::vector<int64_t> storage_positions(const Shape& shape, const Shape& strides, int64_t offset) {
  std::vector<int64_t> out(static_cast<size_t>(numel_of(shape)));
  std::vector<int64_t> index(shape.size(), 0);
  int64_t position = offset;
  for (int64_t& p : out) {
    p = position;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        position += strides[d];
        break;
      }
      position -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
  return out;
}

// Where each element of `view` lies in its base, as the base's row-major element index (i64, of
// the view's shape, on the base's device): a view reads only elements of its base. O(view's
// size) for a contiguous base (element index = storage position - offset), the usual case;
// otherwise the base's positions are listed too.
Tensor view_positions(const Tensor& base, const Tensor& view) {
  std::vector<int64_t> in_view =
      storage_positions(view.shape(), view.strides(), view.storage_offset());
  if (base.is_contiguous()) {
    const int64_t offset = base.storage_offset(), n = base.numel();
    for (int64_t& p : in_view) {
      p -= offset;
      TANDEM_CHECK(p >= 0 && p < n, "internal: a view reads memory outside its base");
    }
  } else if (!in_view.empty()) {
    const std::vector<int64_t> in_base =
        storage_positions(base.shape(), base.strides(), base.storage_offset());
    const auto [lo, hi] = std::minmax_element(in_base.begin(), in_base.end());
    std::vector<int64_t> element(static_cast<size_t>(*hi - *lo + 1), -1);
    for (size_t k = 0; k < in_base.size(); ++k) element[in_base[k] - *lo] = static_cast<int64_t>(k);
    for (int64_t& p : in_view) {
      TANDEM_CHECK(p >= *lo && p <= *hi && element[p - *lo] >= 0,
                   "internal: a view reads memory outside its base");
      p = element[p - *lo];
    }
  }
  return from_vector(in_view, view.shape()).to(base.device());
}

// A tensor over `t`'s memory with no history, to record a node onto.
Tensor alias_of(const Tensor& t) {
  return make_tensor(t.storage(), t.shape(), t.strides(), t.storage_offset(), t.dtype());
}

}  // namespace

namespace autograd {

void take_view_history(const Tensor& view) {
  TensorImpl& v = *view.impl();
  Tensor base(v.view_base);
  v.history_version = v.view_base->history_version;
  if (!base.requires_grad()) return set_history(view, nullptr);
  const Tensor positions = view_positions(base, view).reshape({-1});
  const Shape base_shape = base.shape();
  Tensor alias = alias_of(view);
  AutoGradMode recording(true);  // the view's history, whatever the mode its first use runs in
  record(
      "AsStridedBackward", {base}, alias,
      [positions, base_shape](const Tensor& grad) {
        const Tensor flat = zeros({numel_of(base_shape)}, grad.options());
        return std::vector<Tensor>{
            index_add(flat, 0, positions, grad.reshape({-1})).view(base_shape)};
      },
      kDifferentiable);
  set_history(view, alias.grad_fn());
}

}  // namespace autograd

namespace ops_detail {

void copy_slices(const Tensor& view, const Tensor& values) {
  Tensor base(view.impl()->view_base);
  const Tensor positions = view_positions(base, view).reshape({-1});
  const Shape base_shape = base.shape(), view_shape = view.shape();
  Tensor alias = alias_of(base);
  autograd::record(
      "CopySlices", {base, values}, alias,
      [positions, base_shape, view_shape](const Tensor& grad) {
        const Tensor flat = grad.reshape({-1});
        return std::vector<Tensor>{scatter(flat, 0, positions, 0.0).view(base_shape),
                                   index_select(flat, 0, positions).view(view_shape)};
      },
      kDifferentiable);
  autograd::set_history(base, alias.grad_fn());
  ++base.impl()->history_version;
  autograd::take_view_history(view);
}

}  // namespace ops_detail
}  // namespace tandem
