// Indexing by tensors of indices along one dim. Every op runs one of two kernels over
// (outer, n, inner) blocks around the dim (kernels::gather, kernels::scatter); the indices reach
// them as i64, a 1-d list as a stride-0 view over outer and inner.
#include <cmath>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

// A scalar is indexed as a 1-d tensor of one element, as torch does.
Tensor lift(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

// The (outer, n, inner) block of `shape` around dim.
Shape block3(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  return {outer, shape[dim], inner};
}

// A kernel-only (outer, n, inner) view of a row-major tensor (no autograd).
Tensor view3(const Tensor& t, int64_t dim) {
  const Shape s = block3(t.shape(), dim);
  return make_tensor(t.storage(), s, {s[1] * s[2], s[2], 1}, t.storage_offset(), t.dtype());
}

// A row-major copy of t's values with no history (t itself when it already is one).
Tensor dense(const Tensor& t) {
  NoGradGuard no_grad;
  return t.detach().contiguous();
}

// index checked (an integer tensor on self's device) and converted to i64.
Tensor indices_of(const Tensor& index, const Tensor& self, const char* op) {
  check_defined(index, op, "index");
  TANDEM_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
               ": index must hold integers (i64 or i32), got dtype ", index.dtype());
  check_inputs({self, index}, op);
  return as_dtype(index, DType::i64);
}

void check_same_dtype(const Tensor& self, const Tensor& src, const char* op, const char* name) {
  TANDEM_CHECK(src.dtype() == self.dtype(), op, ": ", name, " must have self's dtype (",
               self.dtype(), "), got ", src.dtype());
}

// `t` narrowed to `sizes` in every dim but `skip` (a view).
Tensor narrow_to(Tensor t, const Shape& sizes, int64_t skip) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != skip && t.size(d) != sizes[d]) t = t.narrow(d, 0, sizes[d]);
  return t;
}

// t zero-padded at the end of each dim up to `shape` (differentiable; t itself when it fits).
Tensor pad_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  std::vector<int64_t> pads;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    pads.push_back(0);
    pads.push_back(shape[d] - t.size(d));
  }
  return pad(t, pads);
}

// The rank and size checks of gather/scatter (torch's rules): index has self's rank, and no
// size larger than self's in the dims other than dim, nor (scatter) than src's in any dim.
void check_index_shape(const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src,
                       const char* op) {
  TANDEM_CHECK(index.dim() == self.dim(), op, ": index must have as many dims as self (",
               self.dim(), "), got shape ", shape_str(index.shape()));
  if (src)
    TANDEM_CHECK(src->dim() == self.dim(), op, ": src must have as many dims as self (",
                 self.dim(), "), got shape ", shape_str(src->shape()));
  for (int64_t d = 0; d < self.dim(); ++d) {
    TANDEM_CHECK(d == dim || index.size(d) <= self.size(d), op, ": index of shape ",
                 shape_str(index.shape()), " is larger than self ", shape_str(self.shape()),
                 " in dim ", d);
    TANDEM_CHECK(!src || index.size(d) <= src->size(d), op, ": index of shape ",
                 shape_str(index.shape()), " is larger than src ", shape_str(src->shape()),
                 " in dim ", d);
  }
}

// A row-major copy of self's values, no history.
Tensor clone_detached(const Tensor& self) {
  Tensor out = make_tensor(self.shape(), self.dtype(), self.device());
  kernels::copy(out, self);
  return out;
}

// kernels::scatter into dst, any layout, seen as `shape` (dst's own by default; a mask's dims
// flattened into one): straight in when dst is row-major, else through a row-major copy
// (written back only when the kernel returned, so a bad index changes nothing).
void scatter_dense(const Tensor& dst, int64_t dim, const Tensor& src, const Tensor& index3,
                   bool accumulate, const char* op, kernels::BoundsCheck when,
                   const Shape* shape = nullptr) {
  const Tensor target = dst.is_contiguous() ? dst : clone_detached(dst);
  kernels::scatter(view3(shape ? target.detach().view(*shape) : target, dim), view3(src, dim),
                   index3, accumulate, dim, op, when);
  if (!target.is_same(dst)) kernels::copy(dst, target);
}

// The bounds check of a 1-d index the kernels would not see: with no element before or after
// the dim (outer or inner size 0), the (outer, k, inner) operand is empty, but torch still
// refuses a bad index (one host read of its extremes; only for such empty blocks).
void check_list_bounds(const Tensor& index, const Shape& shape, int64_t dim, const char* op) {
  const Shape s = block3(shape, dim);
  if (s[0] * s[2] != 0 || index.numel() == 0) return;
  const auto [lo, hi] = host_extremes(index);
  const int64_t bad = lo < 0 ? lo : hi;
  TANDEM_CHECK_INDEX(lo >= 0 && hi < shape[dim], op, ": index ", bad,
                     " is out of bounds for dimension ", dim, " with size ", shape[dim]);
}

// 1-d i64 `index` as the (outer, k, inner) operand of a block of `shape` around dim.
Tensor list_index3(const Tensor& index, const Shape& shape, int64_t dim) {
  Shape s = block3(shape, dim);
  s[1] = index.numel();
  return broadcast_view(dense(index).reshape({1, s[1], 1}), s);
}

// t, or a copy of it when it shares memory with dst: a scatter reads its indices and values
// while it writes dst, and an index rewritten halfway could send a write outside dst.
Tensor apart_from(const Tensor& t, const Tensor& dst) {
  return t.storage().is_same(dst.storage()) ? clone_detached(t) : t;
}

}  // namespace

namespace ops_detail {

void scatter_into(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src,
                  bool accumulate, const char* op, kernels::BoundsCheck when) {
  check_defined(dst, op, "self");
  check_defined(src, op, "src");
  const Tensor self = lift(dst);
  dim = wrap_dim(dim, self.dim(), op);
  const Tensor idx = lift(indices_of(index, dst, op));
  const Tensor source = lift(src);
  check_inputs({dst, src}, op);
  check_same_dtype(dst, src, op, "src");
  check_index_shape(self, dim, idx, &source, op);
  TANDEM_CHECK(!(accumulate && dst.dtype() == DType::boolean), op, ": cannot add bool tensors");
  kernels::scatter.at(self, op);
  const Tensor values = apart_from(dense(narrow_to(source, idx.shape(), -1)), dst);
  scatter_dense(narrow_to(self, idx.shape(), dim), dim, values,
                view3(apart_from(dense(idx), dst), dim), accumulate, op, when);
}

void index_add_into(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& source,
                    double alpha, const char* op, kernels::BoundsCheck when) {
  check_defined(dst, op, "self");
  check_defined(source, op, "source");
  TANDEM_CHECK(dst.is_floating_point() || alpha == std::trunc(alpha), op,
               ": alpha must be a whole number for an integer tensor, got ", alpha);
  const Tensor self = lift(dst);
  dim = wrap_dim(dim, self.dim(), op);
  const Tensor idx = indices_of(index, dst, op);
  TANDEM_CHECK(idx.dim() <= 1, op, ": index must be 1-d, got shape ", shape_str(idx.shape()));
  check_inputs({dst, source}, op);
  check_same_dtype(dst, source, op, "source");
  Shape expected = self.shape();
  expected[dim] = idx.numel();
  const Tensor src = lift(source);
  TANDEM_CHECK(src.shape() == expected, op, ": source must be ", shape_str(expected),
               " (self's shape with the index's length in dim ", dim, "), got ",
               shape_str(source.shape()));
  TANDEM_CHECK(dst.dtype() != DType::boolean, op, ": cannot add bool tensors");
  kernels::scatter.at(self, op);
  check_list_bounds(idx, self.shape(), dim, op);
  Tensor values = apart_from(dense(src), dst);
  if (alpha != 1.0) {
    NoGradGuard no_grad;
    values = mul(values, alpha);
  }
  scatter_dense(self, dim, values, list_index3(apart_from(idx, dst), expected, dim), true, op,
                when);
}

Tensor index_select_as(const Tensor& self_in, int64_t dim, const Tensor& index, const char* op) {
  check_defined(self_in, op, "self");
  const Tensor self = lift(self_in);
  dim = wrap_dim(dim, self.dim(), op);
  const Tensor idx = indices_of(index, self_in, op);
  TANDEM_CHECK(idx.dim() <= 1, op, ": index must be 1-d, got shape ", shape_str(idx.shape()));
  TANDEM_CHECK(self_in.dim() > 0 || idx.numel() == 1, op,
               ": a scalar can be indexed by one index only, got ", idx.numel());
  kernels::gather.at(self, op);
  check_list_bounds(idx, self.shape(), dim, op);
  Shape shape = self.shape();
  shape[dim] = idx.numel();
  Tensor out = make_tensor(shape, self.dtype(), self.device());
  kernels::gather(view3(out, dim), view3(dense(self), dim), list_index3(idx, shape, dim), dim, op,
                  kernels::BoundsCheck::deferred);  // out is this op's own
  if (self_in.dim() == 0) out = out.reshape({});  // as torch: a scalar's selection is one
  const Shape self_shape = self_in.shape();
  autograd::record("index_select", {self_in}, out,
                   [idx, dim, self_shape](const Tensor& g) -> std::vector<Tensor> {
                     Tensor zero = zeros(self_shape, TensorOptions(g.dtype()).device(g.device()));
                     return {index_add(zero, dim, idx, g)};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {idx});
  return out;
}

namespace {
// What a tensor index at `dim` of `view` selects: positions (i64, 1-d, on view's device) along
// the indexed dims flattened into one, how many dims those are, and the shape they become in
// the result (the index's own; (count) for a mask).
struct Selection {
  Tensor positions;
  int64_t dims;
  Shape shape;
};

// A bool mask indexes the dims of view from dim on that it matches in shape.
void check_mask(const Tensor& view, int64_t dim, const Tensor& mask, const char* op) {
  TANDEM_CHECK(mask.dim() >= 1, op, ": a 0-dim bool index is not supported");
  TANDEM_CHECK_INDEX(dim + mask.dim() <= view.dim(), op, ": a mask of ", mask.dim(),
                     " dims from dim ", dim, " indexes past the ", view.dim(), " dims of ",
                     shape_str(view.shape()));
  const Shape indexed(view.shape().begin() + dim, view.shape().begin() + dim + mask.dim());
  TANDEM_CHECK(indexed == mask.shape(), op, ": a mask of shape ", shape_str(mask.shape()),
               " does not match the indexed dims ", shape_str(indexed), " (from dim ", dim, " of ",
               shape_str(view.shape()), ")");
}

Selection select_by(const Tensor& view, int64_t dim, const Tensor& index_in, const char* op) {
  const Tensor index = index_in.to(view.device());  // a host mask indexes a GPU tensor too
  if (index.dtype() == DType::boolean) {
    check_mask(view, dim, index, op);
    // Where the mask is true: known on the host only (on a GPU, one wait), as in torch.
    const std::vector<bool> mask = index.to_vector<bool>();
    std::vector<int64_t> where_true;
    for (size_t i = 0; i < mask.size(); ++i)
      if (mask[i]) where_true.push_back(static_cast<int64_t>(i));
    const auto count = static_cast<int64_t>(where_true.size());
    return {from_vector(where_true, {count}).to(view.device()), index.dim(), {count}};
  }
  TANDEM_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
               ": a tensor index must hold integers (i64 or i32) or be a bool mask, got dtype ",
               index.dtype());
  // Negative indices count from the end; one below -size stays as it is, for the error.
  Tensor idx = as_dtype(index, DType::i64).reshape({-1});
  const auto options = TensorOptions(DType::i64).device(view.device());
  const double size = static_cast<double>(view.size(dim));
  const Tensor wrapped = add(idx, scalar_tensor(size, options));
  idx = where(lt(idx, scalar_tensor(0.0, options)),
              where(lt(idx, scalar_tensor(-size, options)), idx, wrapped), idx);
  return {idx, 1, index.shape()};
}

// `shape` with dims [dim, dim + dims) replaced by `middle`.
Shape replace_dims(const Shape& shape, int64_t dim, int64_t dims, const Shape& middle) {
  Shape out(shape.begin(), shape.begin() + dim);
  out.insert(out.end(), middle.begin(), middle.end());
  out.insert(out.end(), shape.begin() + dim + dims, shape.end());
  return out;
}
}  // namespace

namespace {
// Tensor indices as one selection, as torch's advanced indexing: a mask is the positions of
// its true elements (an index for each dim it covers); the indices broadcast together, each is
// checked against its dim and wrapped; the dims they index come together (to the front where
// they are not adjacent, as torch's) and their positions flatten into one.
struct Combined {
  Tensor view;
  int64_t dim;
  Selection sel;
};
Combined combine(const Tensor& view_in, const TensorIndices& indices, const char* op) {
  if (indices.size() == 1)
    return {view_in, indices[0].first, select_by(view_in, indices[0].first, indices[0].second, op)};
  const bool grad_mode = grad_mode_enabled();
  NoGradGuard guard;  // for the positions: view's own history is taken below
  std::vector<int64_t> dims;
  std::vector<Tensor> index;
  for (const auto& [d, given] : indices) {
    const Tensor t = given.to(view_in.device());
    if (t.dtype() == DType::boolean) {
      check_mask(view_in, d, t, op);
      const Tensor where_true = nonzero(t);
      for (int64_t j = 0; j < t.dim(); ++j) {
        dims.push_back(d + j);
        index.push_back(where_true.select(1, j));
      }
    } else {
      TANDEM_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32, op,
                   ": a tensor index must hold integers (i64 or i32) or be a bool mask, got "
                   "dtype ",
                   t.dtype());
      dims.push_back(d);
      index.push_back(as_dtype(t, DType::i64));
    }
  }
  Shape shape = index[0].shape();
  for (const Tensor& t : index) shape = broadcast_shapes(shape, t.shape(), op);
  const auto k = static_cast<int64_t>(dims.size());
  bool adjacent = true;
  for (int64_t j = 0; j < k; ++j) adjacent = adjacent && dims[j] == dims[0] + j;
  Tensor view = view_in;
  int64_t dim = dims[0];
  if (!adjacent) {
    Shape order = dims;
    for (int64_t d = 0; d < view.dim(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
    AutoGradMode recording(grad_mode);
    view = view.permute(order);
    dim = 0;
  }
  Tensor positions = zeros(shape, TensorOptions(DType::i64).device(view.device()));
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    const int64_t size = view.size(dim + j);
    const Tensor& t = index[j];
    if (t.numel() > 0) {
      const auto [lo, hi] = host_extremes(t);
      TANDEM_CHECK_INDEX(lo >= -size && hi < size, op, ": index ", lo < -size ? lo : hi,
                         " is out of bounds for dimension ", dims[j], " with size ", size);
    }
    positions = add(positions, mul(where(lt(t, 0.0), add(t, size), t), stride));
    stride *= size;
  }
  return {view, dim, {positions.reshape({-1}), k, shape}};
}
}  // namespace

Tensor index_by_tensor(const Tensor& view, int64_t dim, const Tensor& index) {
  return index_by_tensors(view, {{dim, index}});
}

Tensor index_by_tensors(const Tensor& view_in, const TensorIndices& indices) {
  const auto [view, dim, sel] = combine(view_in, indices, "index");
  const Tensor flat = sel.dims == 1 ? view : view.flatten(dim, dim + sel.dims - 1);
  return index_select(flat, dim, sel.positions)
      .reshape(replace_dims(view.shape(), dim, sel.dims, sel.shape));
}

void index_put_by_tensors(const Tensor& view_in, const TensorIndices& indices,
                          const Tensor& values_in, bool accumulate) {
  const char* op = "index_put_";
  const auto [view, dim, sel] = combine(view_in, indices, op);
  // A number given as a host scalar is written on any device, as in libtorch.
  const Tensor values =
      values_in.dim() == 0 ? values_in.to(view.device()) : values_in;
  check_inputs({view, values}, op);
  const Shape selected = replace_dims(view.shape(), dim, sel.dims, sel.shape);
  check_broadcasts_to(values, selected, op, "value");
  kernels::scatter.at(view, op);
  // The indexed dims of view as one (outer, n, inner) block, and the values as one dense
  // (outer, count, inner) block in view's dtype.
  Shape flat_shape = view.shape();
  if (sel.dims > 1) {
    flat_shape = replace_dims(view.shape(), dim, sel.dims, {1});
    for (int64_t d = dim; d < dim + sel.dims; ++d) flat_shape[dim] *= view.size(d);
  }
  check_list_bounds(sel.positions, flat_shape, dim, op);
  const Shape block = replace_dims(view.shape(), dim, sel.dims, {sel.positions.numel()});
  Tensor dense_values = make_tensor(selected, view.dtype(), view.device());
  kernels::copy(dense_values, broadcast_view(values, selected));
  scatter_dense(view, dim, dense_values.view(block), list_index3(sel.positions, block, dim),
                accumulate, op, kernels::BoundsCheck::now, &flat_shape);
}

}  // namespace ops_detail

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  return index_select_as(self, dim, index, "index_select");
}

Tensor flip(const Tensor& self, const Shape& dims) {
  check_defined(self, "flip", "input");
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(self.dim(), 1)), false);
  Tensor out = self;
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), "flip");
    TANDEM_CHECK(!seen[static_cast<size_t>(d)], "flip: dim ", d, " appears more than once in ",
                 shape_str(dims));
    seen[static_cast<size_t>(d)] = true;
    if (self.dim() == 0) continue;
    // n-1, n-2, ..., 0 on the tensor's device: the gather and its gradient (index_add).
    const int64_t n = self.size(d);
    const Tensor reversed = arange(static_cast<double>(n - 1), -1.0, -1.0,
                                   TensorOptions(DType::i64).device(self.device()));
    out = index_select_as(out, d, reversed, "flip");
  }
  return out.is_same(self) ? self.clone() : out;  // a copy whatever the dims
}

Tensor gather(const Tensor& self_in, int64_t dim, const Tensor& index) {
  check_defined(self_in, "gather", "self");
  const Tensor self = lift(self_in);
  dim = wrap_dim(dim, self.dim(), "gather");
  const Tensor idx_in = indices_of(index, self_in, "gather");
  const Tensor idx = lift(idx_in);
  check_index_shape(self, dim, idx, nullptr, "gather");
  kernels::gather.at(self, "gather");
  Tensor out = make_tensor(idx_in.shape(), self.dtype(), self.device());
  kernels::gather(view3(lift(out), dim), view3(dense(narrow_to(self, idx.shape(), dim)), dim),
                  view3(dense(idx), dim), dim, "gather", kernels::BoundsCheck::deferred);
  const Shape self_shape = self_in.shape();
  autograd::record("gather", {self_in}, out,
                   [idx_in, dim, self_shape](const Tensor& g) -> std::vector<Tensor> {
                     Tensor zero = zeros(self_shape, TensorOptions(g.dtype()).device(g.device()));
                     return {scatter_add(zero, dim, idx_in, g)};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {idx_in});
  return out;
}

namespace {
// scatter and scatter_add, out of place: a copy of self with src scattered in.
Tensor scatter_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                    bool accumulate, const char* op) {
  check_defined(self, op, "self");
  Tensor out = clone_detached(self);
  scatter_into(out, dim, index, src, accumulate, op, kernels::BoundsCheck::deferred);
  const Tensor idx = as_dtype(index, DType::i64);
  const Shape src_shape = src.shape();
  autograd::record(op, {self, src}, out,
                   [idx, dim, src_shape, accumulate](const Tensor& g) -> std::vector<Tensor> {
                     // Overwritten positions pass no gradient to self; each source element gets
                     // the gradient of where it went (and 0 where index did not reach).
                     Tensor g_self = accumulate ? g : scatter(g, dim, idx, 0.0);
                     return {g_self, pad_to(gather(g, dim, idx), src_shape)};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {idx});
  return out;
}
}  // namespace

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_copy(self, dim, index, src, false, "scatter");
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, double value) {
  check_defined(self, "scatter", "self");
  check_defined(index, "scatter", "index");
  Tensor values = full(index.shape(), value, TensorOptions(self.dtype()).device(self.device()));
  return scatter_copy(self, dim, index, values, false, "scatter");
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_copy(self, dim, index, src, true, "scatter_add");
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha) {
  check_defined(self, "index_add", "self");
  Tensor out = clone_detached(self);
  index_add_into(out, dim, index, source, alpha, "index_add", kernels::BoundsCheck::deferred);
  const Tensor idx = as_dtype(index, DType::i64);
  const Shape source_shape = source.shape();
  autograd::record("index_add", {self, source}, out,
                   [idx, dim, source_shape, alpha](const Tensor& g) -> std::vector<Tensor> {
                     Tensor g_source = index_select(g, dim, idx).reshape(source_shape);
                     return {g, alpha == 1.0 ? g_source : mul(g_source, alpha)};
                   }, kDifferentiable);
  autograd::save_for_backward(out, {idx});
  return out;
}

Tensor masked_select(const Tensor& self, const Tensor& mask) {
  check_defined(self, "masked_select", "input");
  check_defined(mask, "masked_select", "mask");
  TANDEM_CHECK(mask.dtype() == DType::boolean,
               "masked_select: the mask must be a bool tensor, got ", mask.dtype());
  const Shape shape = broadcast_shapes(self.shape(), mask.shape(), "masked_select");
  const Tensor m = mask.expand(shape).contiguous().reshape({-1});
  return ops_detail::index_by_tensor(self.expand(shape).reshape({-1}), 0, m);
}

Tensor nonzero(const Tensor& self) {
  check_defined(self, "nonzero", "input");
  const Tensor nz = ne(self, zeros({}, TensorOptions(self.dtype()).device(self.device())));
  const std::vector<bool> mask = nz.to_vector<bool>();
  const Shape& shape = self.shape();
  const auto dims = static_cast<int64_t>(shape.size());
  std::vector<int64_t> positions;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i]) continue;
    int64_t rest = static_cast<int64_t>(i);
    const size_t at = positions.size();
    positions.resize(at + static_cast<size_t>(dims));
    for (int64_t d = dims - 1; d >= 0; --d) {  // the flat index as coordinates, last dim fastest
      positions[at + d] = rest % shape[d];
      rest /= shape[d];
    }
  }
  // (a 0-dim tensor: one position of no coordinates, or none)
  const int64_t count =
      dims == 0 ? static_cast<int64_t>(mask[0]) : static_cast<int64_t>(positions.size()) / dims;
  return from_vector(positions, {count, dims}).to(self.device());
}

}  // namespace tandem
