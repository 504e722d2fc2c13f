// Views (reshape, permute, slicing, expand) and the ops that move data between shapes (cat,
// stack, pad). Views share storage with their input; their backward maps the gradient back.
#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  Tensor view = make_tensor(t.storage(), std::move(shape), std::move(strides), offset, t.dtype());
  TensorImpl& v = *view.impl();
  v.is_view = true;
  v.view_base = t.impl()->view_base ? t.impl()->view_base : t.impl_ptr();
  v.history_version = v.view_base->history_version;
  return view;
}

// a * b and a + b for sizes, refused where they overflow int64 (undefined behaviour otherwise;
// a wrapped size could pass the checks after it).
int64_t size_mul(int64_t a, int64_t b, const char* op) {
  int64_t r;
  TANDEM_CHECK(!__builtin_mul_overflow(a, b, &r), op, ": the size ", a, " x ", b,
               " overflows int64");
  return r;
}
int64_t size_add(int64_t a, int64_t b, const char* op) {
  int64_t r;
  TANDEM_CHECK(!__builtin_add_overflow(a, b, &r), op, ": the size ", a, " + ", b,
               " overflows int64");
  return r;
}

// Resolves one -1 and checks the element count.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TANDEM_CHECK(infer < 0, op, ": only one dimension can be inferred, got shape ",
                   shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      TANDEM_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      known = size_mul(known, out[i], op);
    }
  }
  if (infer >= 0) {
    TANDEM_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
                 " is invalid for input of size ", numel);
    out[infer] = numel / known;
  }
  TANDEM_CHECK(numel_of(out) == numel, op, ": shape ", shape_str(shape),
               " is invalid for input of size ", numel);
  return out;
}

// Strides that view (old_shape, old_strides) as new_shape without a copy, if any exist
// (the algorithm of torch's computeStride: walk contiguous chunks from the innermost dim).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides,
                                  const Shape& new_shape) {
  if (old_shape.empty() || numel_of(old_shape) == 0) return contiguous_strides(new_shape);
  Shape new_strides(new_shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor reshape_view(const Tensor& t, const Shape& shape, const Shape& strides, const char* op) {
  Tensor out = make_view(t, shape, strides, t.storage_offset());
  Shape in_shape = t.shape();
  autograd::record(op, {t}, out, [in_shape](const Tensor& g) -> std::vector<Tensor> {
    return {reshape(g, in_shape)};
  }, kDifferentiable);
  return out;
}

// The gradient of a view that picks part of the input: zeros with g written where the view was.
// Under create_graph it records itself; its own gradient is the same view of the incoming one.
// (diag of a vector is the same: zeros with the vector written along a diagonal.)
template <typename ViewFn>
Tensor scatter_to_zeros(const Tensor& g, const Shape& shape, ViewFn view_of,
                        const char* name = "view_backward") {
  Tensor gi = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
  {
    NoGradGuard no_grad;
    view_of(gi).copy_(g);
  }
  autograd::record(
      name, {g}, gi, [view_of](const Tensor& gg) -> std::vector<Tensor> { return {view_of(gg)}; },
      kDifferentiable);
  return gi;
}

}  // namespace

Tensor view(const Tensor& t, const Shape& shape) {
  check_defined(t, "view", "input");
  Shape s = infer_shape(shape, t.numel(), "view");
  auto strides = view_strides(t.shape(), t.strides(), s);
  TANDEM_CHECK(strides.has_value(), "view: shape ", shape_str(s),
               " is not compatible with the input's size ", shape_str(t.shape()), " and strides ",
               shape_str(t.strides()), " (at least one dim spans two contiguous chunks); use "
               "reshape instead");
  return reshape_view(t, s, *strides, "view");
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  check_defined(t, "reshape", "input");
  Shape s = infer_shape(shape, t.numel(), "reshape");
  if (s == t.shape()) return t;
  if (auto strides = view_strides(t.shape(), t.strides(), s))
    return reshape_view(t, s, *strides, "reshape");
  return reshape_view(t.contiguous(), s, contiguous_strides(s), "reshape");
}

Tensor permute(const Tensor& t, const Shape& dims) {
  check_defined(t, "permute", "input");
  const int64_t nd = t.dim();
  TANDEM_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: got ", dims.size(),
               " dims for a tensor of ", nd, " dims");
  Shape perm(nd), shape(nd), strides(nd), inverse(nd);
  std::vector<bool> used(nd, false);
  for (int64_t i = 0; i < nd; ++i) {
    perm[i] = wrap_dim(dims[i], nd, "permute");
    TANDEM_CHECK(!used[perm[i]], "permute: dim ", perm[i], " appears twice in ", shape_str(dims));
    used[perm[i]] = true;
    shape[i] = t.shape()[perm[i]];
    strides[i] = t.strides()[perm[i]];
    inverse[perm[i]] = i;
  }
  Tensor out = make_view(t, shape, strides, t.storage_offset());
  autograd::record("permute", {t}, out, [inverse](const Tensor& g) -> std::vector<Tensor> {
    return {permute(g, inverse)};
  }, kDifferentiable);
  return out;
}

Tensor movedim(const Tensor& t, const Shape& source, const Shape& destination) {
  check_defined(t, "movedim", "input");
  TANDEM_CHECK(source.size() == destination.size(), "movedim: ", source.size(), " source dims for ",
               destination.size(), " destination dims");
  const int64_t nd = t.dim();
  if (nd == 0) {
    for (int64_t d : source) wrap_dim(d, nd, "movedim");
    for (int64_t d : destination) wrap_dim(d, nd, "movedim");
    return t;
  }
  Shape perm(nd, -1);
  std::vector<bool> moved(nd, false);
  for (size_t i = 0; i < source.size(); ++i) {
    const int64_t s = wrap_dim(source[i], nd, "movedim"),
                  d = wrap_dim(destination[i], nd, "movedim");
    TANDEM_CHECK(!moved[s], "movedim: source dim ", s, " appears twice in ", shape_str(source));
    TANDEM_CHECK(perm[d] < 0, "movedim: destination dim ", d, " appears twice in ",
                 shape_str(destination));
    moved[s] = true;
    perm[d] = s;
  }
  // The dims not moved fill the free positions in their order.
  int64_t next = 0;
  for (int64_t& p : perm) {
    if (p >= 0) continue;
    while (moved[next]) ++next;
    p = next++;
  }
  return permute(t, perm);
}

Tensor movedim(const Tensor& t, int64_t source, int64_t destination) {
  return movedim(t, Shape{source}, Shape{destination});
}
Tensor moveaxis(const Tensor& t, const Shape& source, const Shape& destination) {
  return movedim(t, source, destination);
}
Tensor moveaxis(const Tensor& t, int64_t source, int64_t destination) {
  return movedim(t, source, destination);
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  check_defined(t, "transpose", "input");
  const int64_t nd = t.dim();
  if (nd == 0) return t;
  Shape dims(nd);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(dim0, nd, "transpose")], dims[wrap_dim(dim1, nd, "transpose")]);
  return permute(t, dims);
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(t, "slice", "input");
  TANDEM_CHECK(t.dim() > 0, "slice: cannot slice a 0-dim tensor");
  TANDEM_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t d = wrap_dim(dim, t.dim(), "slice");
  int64_t size = t.shape()[d];
  auto clamp_index = [size](int64_t i) {
    if (i < 0) i += size;
    return std::clamp<int64_t>(i, 0, size);
  };
  start = clamp_index(start);
  end = std::max(clamp_index(end), start);
  Shape shape = t.shape(), strides = t.strides();
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow for any step
  if (shape[d] > 1) strides[d] = size_mul(strides[d], step, "slice");
  Tensor out = make_view(t, shape, strides, t.storage_offset() + start * t.strides()[d]);
  Shape in_shape = t.shape();
  autograd::record("slice", {t}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    return {scatter_to_zeros(g, in_shape,
                             [=](const Tensor& gi) { return slice(gi, d, start, end, step); })};
  }, kDifferentiable);
  return out;
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  check_defined(t, "narrow", "input");
  TANDEM_CHECK(t.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int64_t d = wrap_dim(dim, t.dim(), "narrow");
  const int64_t size = t.shape()[d], given = start;
  TANDEM_CHECK_INDEX(start >= -size && start <= size, "narrow: start ", given,
                     " out of range for dim ", d, " of size ", size);
  if (start < 0) start += size;
  TANDEM_CHECK_INDEX(length >= 0 && length <= size - start, "narrow: start (", start,
                     ") + length (", length, ") exceeds dimension size (", size, ")");
  return slice(t, d, start, start + length, 1);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  check_defined(t, "select", "input");
  TANDEM_CHECK(t.dim() > 0, "select: cannot select from a 0-dim tensor");
  int64_t d = wrap_dim(dim, t.dim(), "select");
  int64_t size = t.shape()[d];
  TANDEM_CHECK_INDEX(index >= -size && index < size, "select: index ", index,
                     " out of range for dim ", d, " of size ", size);
  if (index < 0) index += size;
  Shape shape = t.shape(), strides = t.strides();
  int64_t offset = t.storage_offset() + index * strides[d];
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = make_view(t, shape, strides, offset);
  Shape in_shape = t.shape();
  autograd::record("select", {t}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    return {scatter_to_zeros(g, in_shape,
                             [=](const Tensor& gi) { return select(gi, d, index); })};
  }, kDifferentiable);
  return out;
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  check_defined(t, "unsqueeze", "input");
  int64_t d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape shape = t.shape(), strides = t.strides();
  int64_t stride = d < t.dim() ? shape[d] * strides[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return reshape_view(t, shape, strides, "unsqueeze");
}

Tensor squeeze(const Tensor& t) {
  check_defined(t, "squeeze", "input");
  Shape shape, strides;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.shape()[i] != 1) {
      shape.push_back(t.shape()[i]);
      strides.push_back(t.strides()[i]);
    }
  if (shape.size() == t.shape().size()) return t;
  return reshape_view(t, shape, strides, "squeeze");
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  check_defined(t, "squeeze", "input");
  if (t.dim() == 0) return t;
  int64_t d = wrap_dim(dim, t.dim(), "squeeze");
  if (t.shape()[d] != 1) return t;
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return reshape_view(t, shape, strides, "squeeze");
}

Tensor expand(const Tensor& t, const Shape& shape) {
  check_defined(t, "expand", "input");
  const int64_t nd = static_cast<int64_t>(shape.size()), old_nd = t.dim();
  TANDEM_CHECK(nd >= old_nd, "expand: the number of sizes provided (", nd,
               ") must be greater or equal to the number of dimensions in the tensor (", old_nd,
               ")");
  Shape out_shape(nd), strides(nd);
  for (int64_t i = nd - 1; i >= 0; --i) {
    int64_t j = i - (nd - old_nd);
    if (j < 0) {
      TANDEM_CHECK(shape[i] >= 0, "expand: size -1 not allowed in a new leading dim, got ",
                   shape_str(shape));
      out_shape[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    TANDEM_CHECK(shape[i] >= -1, "expand: invalid size ", shape[i], " at dim ", i, " of ",
                 shape_str(shape), " (sizes are >= 0, or -1 to keep the tensor's)");
    int64_t old = t.shape()[j];
    int64_t want = shape[i] == -1 ? old : shape[i];
    TANDEM_CHECK(old == want || old == 1, "expand: the expanded size of the tensor (", want,
                 ") must match the existing size (", old, ") at non-singleton dimension ", i,
                 ". Target sizes: ", shape_str(shape), ". Tensor sizes: ", shape_str(t.shape()));
    out_shape[i] = want;
    strides[i] = old == want ? t.strides()[j] : 0;
  }
  if (out_shape == t.shape()) return t;
  checked_numel(out_shape, "expand");
  Tensor out = make_view(t, out_shape, strides, t.storage_offset());
  Shape in_shape = t.shape();
  autograd::record("expand", {t}, out, [in_shape](const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, in_shape)};
  }, kDifferentiable);
  return out;
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  check_defined(t, "flatten", "input");
  if (t.dim() == 0) return reshape(t, {1});
  int64_t s = wrap_dim(start_dim, t.dim(), "flatten"), e = wrap_dim(end_dim, t.dim(), "flatten");
  TANDEM_CHECK(s <= e, "flatten: start_dim (", s, ") cannot come after end_dim (", e, ")");
  Shape shape(t.shape().begin(), t.shape().begin() + s);
  int64_t n = 1;
  for (int64_t i = s; i <= e; ++i) n *= t.shape()[i];
  shape.push_back(n);
  shape.insert(shape.end(), t.shape().begin() + e + 1, t.shape().end());
  return reshape(t, shape);
}

Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes) {
  check_defined(t, "unflatten", "input");
  TANDEM_CHECK(!sizes.empty(), "unflatten: sizes must not be empty");
  const int64_t d = wrap_dim(dim, t.dim(), "unflatten");
  const Shape inner = infer_shape(sizes, t.size(d), "unflatten");
  Shape shape(t.shape().begin(), t.shape().begin() + d);
  shape.insert(shape.end(), inner.begin(), inner.end());
  shape.insert(shape.end(), t.shape().begin() + d + 1, t.shape().end());
  return reshape(t, shape);
}

Tensor unexpand(const Tensor& t) {
  check_defined(t, "unexpand", "input");
  Tensor out = t;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0) out = narrow(out, d, 0, 1);
  return out;
}

Tensor contiguous(const Tensor& t) { return t.contiguous(); }

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const int64_t nd = t.dim(), lead = nd - static_cast<int64_t>(shape.size());
  TANDEM_CHECK(lead >= 0, "sum_to: cannot sum ", shape_str(t.shape()), " to ", shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < nd; ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && t.shape()[i] != 1) {
      dims.push_back(i);
    } else {
      TANDEM_CHECK(shape[i - lead] == t.shape()[i], "sum_to: cannot sum ", shape_str(t.shape()),
                   " to ", shape_str(shape));
    }
  }
  if (dims.empty()) return reshape(t, shape);
  return reshape(sum(t, dims, true), shape);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TANDEM_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  for (size_t i = 0; i < tensors.size(); ++i) {
    TANDEM_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
  }
  check_inputs(tensors, "cat");
  const int64_t nd = first.dim();
  TANDEM_CHECK(nd > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  int64_t d = wrap_dim(dim, nd, "cat");
  DType dtype = first.dtype();
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TANDEM_CHECK(t.dim() == nd, "cat: tensors must have the same number of dims, got ",
                 shape_str(first.shape()), " at entry 0 and ", shape_str(t.shape()), " at entry ", i);
    for (int64_t k = 0; k < nd; ++k)
      TANDEM_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat: sizes must match except in "
                   "dim ", d, ", got ", shape_str(first.shape()), " at entry 0 and ",
                   shape_str(t.shape()), " at entry ", i);
    shape[d] += t.shape()[d];
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = empty(shape, TensorOptions(dtype).device(first.device()));
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    offsets.push_back(offset);
    kernels::copy(out.detach().narrow(d, offset, t.shape()[d]), t);
    offset += t.shape()[d];
  }
  std::vector<Tensor> inputs = tensors;
  autograd::record("cat", inputs, out, [d, offsets, inputs](const Tensor& g) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < inputs.size(); ++i)
      grads.push_back(inputs[i].requires_grad()
                          ? g.narrow(d, offsets[i], inputs[i].shape()[d]).to(inputs[i].dtype())
                          : Tensor());
    return grads;
  }, kDifferentiable);
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& t, const std::vector<int64_t>& split_sizes,
                                     int64_t dim) {
  check_defined(t, "split_with_sizes", "input");
  TANDEM_CHECK(t.dim() > 0, "split_with_sizes: cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "split_with_sizes"), size = t.size(d);
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    TANDEM_CHECK(s >= 0, "split_with_sizes: split sizes must be non-negative, got ", s);
    total = size_add(total, s, "split_with_sizes");
  }
  TANDEM_CHECK(total == size, "split_with_sizes: split sizes must sum to ", size,
               " (the input's size at dim ", d, "), got ", shape_str(split_sizes));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow(t, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  check_defined(t, "split", "input");
  TANDEM_CHECK(t.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "split"), size = t.size(d);
  TANDEM_CHECK(split_size > 0 || (split_size == 0 && size == 0),
               "split: split_size must be positive (0 only for an empty dim), got ", split_size);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += split_size)
    sizes.push_back(std::min(split_size, size - start));
  if (sizes.empty()) sizes.push_back(0);  // an empty dim splits into one empty piece, as torch
  return split_with_sizes(t, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  check_defined(t, "chunk", "input");
  TANDEM_CHECK(chunks > 0, "chunk: chunks must be greater than 0, got ", chunks);
  TANDEM_CHECK(t.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  const int64_t size = t.size(wrap_dim(dim, t.dim(), "chunk"));
  const int64_t per = size / chunks + (size % chunks != 0);  // ceil, without overflow
  return split(t, std::max<int64_t>(per, size == 0 ? 0 : 1), dim);
}

std::vector<Tensor> unbind(const Tensor& t, int64_t dim) {
  check_defined(t, "unbind", "input");
  TANDEM_CHECK(t.dim() > 0, "unbind: cannot unbind a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < t.size(d); ++i) out.push_back(select(t, d, i));
  return out;
}

Tensor repeat(const Tensor& t, const Shape& repeats) {
  check_defined(t, "repeat", "input");
  TANDEM_CHECK(static_cast<int64_t>(repeats.size()) >= t.dim(), "repeat: ", repeats.size(),
               " repeats for a tensor of ", t.dim(), " dims (give at least one per dim)");
  for (int64_t r : repeats) TANDEM_CHECK(r >= 0, "repeat: repeats must be >= 0, got ", r);
  // (1, s0, 1, s1, ...) expanded to (r0, s0, r1, s1, ...), then merged pairwise: a copy of the
  // broadcast, differentiable through expand (its backward sums the copies).
  const size_t lead = repeats.size() - static_cast<size_t>(t.dim());
  Shape pairs, expanded, result;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t s = i < lead ? 1 : t.size(static_cast<int64_t>(i - lead));
    pairs.insert(pairs.end(), {1, s});
    expanded.insert(expanded.end(), {repeats[i], s});
    result.push_back(size_mul(repeats[i], s, "repeat"));
  }
  return reshape(expand(reshape(t, pairs), expanded), result);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TANDEM_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TANDEM_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    TANDEM_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: expects each tensor to be "
                 "equal size, but got ", shape_str(tensors[0].shape()), " at entry 0 and ",
                 shape_str(tensors[i].shape()), " at entry ", i);
  }
  int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  for (const auto& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

namespace {
// pad's (left, right) pairs: an even number of them, for at most t's dims.
void check_pads(const Tensor& t, const std::vector<int64_t>& pads) {
  check_defined(t, "pad", "input");
  const int64_t nd = t.dim(), np = static_cast<int64_t>(pads.size());
  TANDEM_CHECK(np % 2 == 0 && np / 2 <= nd, "pad: expected an even number of pads covering at "
               "most ", nd, " dims, got ", np, " values");
}
}  // namespace

Tensor pad(const Tensor& t, const std::vector<int64_t>& pads, double value) {
  check_pads(t, pads);
  check_inputs({t}, "pad");
  const int64_t nd = t.dim(), np = static_cast<int64_t>(pads.size());
  Shape shape = t.shape();
  // Per padded dim: the input range kept and where it lands in the output.
  struct Region { int64_t dim, src_start, dst_start, length; };
  std::vector<Region> regions;
  for (int64_t k = 0; k < np / 2; ++k) {
    int64_t d = nd - 1 - k, left = pads[2 * k], right = pads[2 * k + 1];
    int64_t size = shape[d];
    int64_t out_size = size_add(size_add(size, left, "pad"), right, "pad");
    TANDEM_CHECK(out_size >= 0, "pad: padding (", left, ", ", right, ") makes dim ", d,
                 " of size ", size, " negative");
    shape[d] = out_size;
    int64_t src_start = std::max<int64_t>(0, -left);
    int64_t length = std::max<int64_t>(0, size - src_start - std::max<int64_t>(0, -right));
    regions.push_back({d, src_start, std::max<int64_t>(0, left), length});
  }
  auto src_region = [regions](Tensor x) {
    for (const auto& r : regions) x = x.narrow(r.dim, r.src_start, r.length);
    return x;
  };
  auto dst_region = [regions](Tensor x) {
    for (const auto& r : regions) x = x.narrow(r.dim, r.dst_start, r.length);
    return x;
  };
  Tensor out = full(shape, value, TensorOptions(t.dtype()).device(t.device()));
  {
    NoGradGuard guard;
    kernels::copy(dst_region(out), src_region(t));
  }
  Shape in_shape = t.shape();
  autograd::record("pad", {t}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    return {scatter_to_zeros(dst_region(g), in_shape, src_region)};
  }, kDifferentiable);
  return out;
}

namespace {
Tensor triangle(const Tensor& t, int64_t diagonal, bool lower, const char* name) {
  check_defined(t, name, "input");
  TANDEM_CHECK(t.dim() >= 2, name, ": input must have at least 2 dims, got ", shape_str(t.shape()));
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const auto o = TensorOptions(DType::i64).device(t.device());
  // col - row for every position of the last two dims
  const Tensor offset = sub(arange(0, cols, 1, o).unsqueeze(0), arange(0, rows, 1, o).unsqueeze(1));
  // (a diagonal beyond the matrix keeps all or none: clamped, it stays exact as a double)
  const Tensor d = full({}, static_cast<double>(std::clamp(diagonal, -rows, cols)), o);
  const Tensor keep = lower ? le(offset, d) : ge(offset, d);
  return where(keep, t, zeros({}, TensorOptions(t.dtype()).device(t.device())));
}
}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) { return triangle(t, diagonal, true, "tril"); }
Tensor triu(const Tensor& t, int64_t diagonal) { return triangle(t, diagonal, false, "triu"); }

Tensor pad(const Tensor& t, const std::vector<int64_t>& pads, PadMode mode, double value) {
  if (mode == PadMode::constant) return pad(t, pads, value);
  check_pads(t, pads);
  const char* name = mode == PadMode::reflect     ? "reflect"
                     : mode == PadMode::replicate ? "replicate"
                                                  : "circular";
  const int64_t nd = t.dim(), np = static_cast<int64_t>(pads.size());
  Tensor out = t;
  for (int64_t k = 0; k < np / 2; ++k) {
    const int64_t dim = nd - 1 - k, n = t.size(dim), left = pads[2 * k], right = pads[2 * k + 1];
    TANDEM_CHECK(left >= 0 && right >= 0, "pad: ", name, " padding takes no negative pads, got (",
                 left, ", ", right, ") for dim ", dim);
    if (left == 0 && right == 0) continue;
    TANDEM_CHECK(mode != PadMode::reflect || (left < n && right < n), "pad: reflect padding (",
                 left, ", ", right, ") must be below the size of dim ", dim, " (", n, ")");
    TANDEM_CHECK(mode != PadMode::circular || (left <= n && right <= n), "pad: circular padding (",
                 left, ", ", right, ") must be at most the size of dim ", dim, " (", n, ")");
    TANDEM_CHECK(n > 0, "pad: ", name, " padding of the empty dim ", dim);
    std::vector<int64_t> index;
    index.reserve(static_cast<size_t>(n + left + right));
    for (int64_t i = -left; i < n + right; ++i) {
      if (mode == PadMode::reflect)
        index.push_back(i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i);
      else if (mode == PadMode::replicate)
        index.push_back(std::clamp<int64_t>(i, 0, n - 1));
      else
        index.push_back((i % n + n) % n);
    }
    out = index_select(out, dim, from_vector(index).to(t.device()));
  }
  return out;
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  TANDEM_CHECK(indexing == "ij" || indexing == "xy",
               "meshgrid: indexing must be \"ij\" or \"xy\", got \"", indexing, "\"");
  TANDEM_CHECK(!tensors.empty(), "meshgrid: expected at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i) {
    TANDEM_CHECK(tensors[i].defined(), "meshgrid: tensor ", i, " is undefined");
    TANDEM_CHECK(tensors[i].dim() <= 1, "meshgrid: expected 0-d or 1-d tensors, got ",
                 tensors[i].dim(), "-d at position ", i);
    TANDEM_CHECK(tensors[i].dtype() == tensors[0].dtype(),
                 "meshgrid: expected tensors of one dtype, got ", dtype_name(tensors[0].dtype()),
                 " and ", dtype_name(tensors[i].dtype()), " at position ", i);
  }
  check_inputs(tensors, "meshgrid");
  // "xy" is "ij" of the inputs with the first two swapped, the first two outputs swapped back.
  std::vector<Tensor> in = tensors;
  const bool swap = indexing == "xy" && in.size() >= 2;
  if (swap) std::swap(in[0], in[1]);
  Shape sizes;
  for (const Tensor& t : in) sizes.push_back(t.numel());
  std::vector<Tensor> grids;
  for (size_t i = 0; i < in.size(); ++i) {
    Shape shape(in.size(), 1);
    shape[i] = -1;
    grids.push_back(expand(reshape(in[i], shape), sizes));
  }
  if (swap) std::swap(grids[0], grids[1]);
  return grids;
}

Tensor diagonal(const Tensor& t, int64_t offset, int64_t dim1, int64_t dim2) {
  check_defined(t, "diagonal", "input");
  TANDEM_CHECK(t.dim() >= 2, "diagonal: expected a tensor of at least 2 dims, got ", t.dim());
  const int64_t d1 = wrap_dim(dim1, t.dim(), "diagonal"), d2 = wrap_dim(dim2, t.dim(), "diagonal");
  TANDEM_CHECK(d1 != d2, "diagonal: dim1 and dim2 cannot be the same dim (", d1, ")");
  const int64_t n1 = t.size(d1), n2 = t.size(d2);
  const int64_t length =
      std::max<int64_t>(0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
  int64_t start = t.storage_offset();
  if (length > 0) start += offset >= 0 ? offset * t.strides()[d2] : -offset * t.strides()[d1];
  Shape shape, strides;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != d1 && d != d2) {
      shape.push_back(t.size(d));
      strides.push_back(t.strides()[d]);
    }
  shape.push_back(length);
  strides.push_back(t.strides()[d1] + t.strides()[d2]);
  Tensor out = make_view(t, shape, strides, start);
  Shape in_shape = t.shape();
  autograd::record(
      "diagonal", {t}, out,
      [=](const Tensor& g) -> std::vector<Tensor> {
        return {scatter_to_zeros(g, in_shape,
                                 [=](const Tensor& gi) { return diagonal(gi, offset, d1, d2); })};
      },
      kDifferentiable);
  return out;
}

Tensor diag(const Tensor& t, int64_t offset) {
  check_defined(t, "diag", "input");
  TANDEM_CHECK(t.dim() == 1 || t.dim() == 2, "diag: expected a 1-d or 2-d tensor, got ", t.dim(),
               "-d");
  if (t.dim() == 2) return diagonal(t, offset, 0, 1).clone();
  TANDEM_CHECK(offset > std::numeric_limits<int64_t>::min(), "diag: offset ", offset,
               " out of range");
  const int64_t n = size_add(t.numel(), offset >= 0 ? offset : -offset, "diag");
  return scatter_to_zeros(
      t, {n, n}, [=](const Tensor& m) { return diagonal(m, offset, 0, 1); }, "diag");
}

Tensor roll(const Tensor& t, const Shape& shifts, const Shape& dims) {
  check_defined(t, "roll", "input");
  if (dims.empty()) {
    TANDEM_CHECK(shifts.size() == 1, "roll: without dims, give one shift, got ", shifts.size());
    return reshape(roll(flatten(t), shifts, {0}), t.shape());
  }
  TANDEM_CHECK(shifts.size() == dims.size(), "roll: ", shifts.size(), " shifts for ", dims.size(),
               " dims (give one shift per dim)");
  Tensor out = t;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], t.dim(), "roll"), n = t.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    out = cat({narrow(out, d, n - s, s), narrow(out, d, 0, n - s)}, d);
  }
  return out;
}

Tensor tile(const Tensor& t, const Shape& reps) {
  check_defined(t, "tile", "input");
  Shape full = reps;
  if (static_cast<int64_t>(full.size()) < t.dim())
    full.insert(full.begin(), t.dim() - full.size(), 1);
  return repeat(t, full);
}

Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim) {
  check_defined(t, "repeat_interleave", "input");
  TANDEM_CHECK(repeats >= 0, "repeat_interleave: repeats must be >= 0, got ", repeats);
  if (!dim) return repeat_interleave(flatten(t), repeats, 0);
  const int64_t d = wrap_dim(*dim, std::max<int64_t>(t.dim(), 1), "repeat_interleave");
  if (t.dim() == 0) return repeat_interleave(reshape(t, {1}), repeats, 0);
  // (.., n, 1, ..) broadcast to (.., n, repeats, ..), then the two dims merged.
  Shape expanded = t.shape();
  expanded.insert(expanded.begin() + d + 1, repeats);
  Shape result = t.shape();
  result[d] = size_mul(result[d], repeats, "repeat_interleave");
  return reshape(expand(unsqueeze(t, d + 1), expanded), result);
}

Tensor repeat_interleave(const Tensor& repeats) {
  check_defined(repeats, "repeat_interleave", "repeats");
  TANDEM_CHECK(
      repeats.dim() <= 1 && !repeats.is_floating_point() && repeats.dtype() != DType::boolean,
      "repeat_interleave: repeats must be a 0-d or 1-d integer tensor, got ", repeats.dim(), "-d ",
      dtype_name(repeats.dtype()));
  const std::vector<int64_t> counts = repeats.to_vector<int64_t>();
  std::vector<int64_t> index;
  for (size_t i = 0; i < counts.size(); ++i) {
    TANDEM_CHECK(counts[i] >= 0, "repeat_interleave: repeats must be >= 0, got ", counts[i],
                 " at position ", i);
    index.insert(index.end(), static_cast<size_t>(counts[i]), static_cast<int64_t>(i));
  }
  return from_vector(index, {static_cast<int64_t>(index.size())}).to(repeats.device());
}

Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim) {
  check_defined(t, "repeat_interleave", "input");
  check_defined(repeats, "repeat_interleave", "repeats");
  if (!dim) return repeat_interleave(flatten(t), repeats, 0);
  if (t.dim() == 0) return repeat_interleave(reshape(t, {1}), repeats, 0);
  const int64_t d = wrap_dim(*dim, t.dim(), "repeat_interleave");
  if (repeats.numel() == 1 && t.size(d) != 1)
    return repeat_interleave(t, repeats.reshape({}).item<int64_t>(), d);
  TANDEM_CHECK(repeats.numel() == t.size(d), "repeat_interleave: ", repeats.numel(),
               " repeats for dim ", d, " of size ", t.size(d), " (give one per element, or one)");
  check_inputs({t, repeats}, "repeat_interleave");
  return index_select(t, d, repeat_interleave(repeats.reshape({-1})));
}

Tensor unfold(const Tensor& t, int64_t dim, int64_t size, int64_t step) {
  check_defined(t, "unfold", "input");
  TANDEM_CHECK(t.dim() > 0, "unfold: cannot unfold a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "unfold"), n = t.size(d);
  TANDEM_CHECK(size >= 0 && size <= n, "unfold: size ", size, " must be in [0, ", n,
               "], the size of dim ", d);
  TANDEM_CHECK(step > 0, "unfold: step must be positive, got ", step);
  const int64_t windows = (n - size) / step + 1;
  Shape shape = t.shape(), strides = t.strides();
  shape[d] = windows;
  strides[d] *= step;
  shape.push_back(size);
  strides.push_back(t.strides()[d]);
  Tensor out = make_view(t, shape, strides, t.storage_offset());
  const Shape in_shape = t.shape();
  autograd::record(
      "unfold", {t}, out,
      [=](const Tensor& g) -> std::vector<Tensor> {
        // Window position j of every window lands on elements j, j + step, ...: one strided slice
        // each, added (windows that overlap share elements).
        Tensor gi = zeros(in_shape, TensorOptions(g.dtype()).device(g.device()));
        {
          NoGradGuard no_grad;
          for (int64_t j = 0; j < size; ++j)
            slice(gi, d, j, j + (windows - 1) * step + 1, step).add_(select(g, -1, j));
        }
        autograd::record(
            "unfold_backward", {g}, gi,
            [=](const Tensor& gg) -> std::vector<Tensor> { return {unfold(gg, d, size, step)}; },
            kDifferentiable);
        return {gi};
      },
      kDifferentiable);
  return out;
}

namespace {
void check_pixel_shuffle(const Tensor& t, int64_t factor, const char* op) {
  check_defined(t, op, "input");
  TANDEM_CHECK(t.dim() >= 3, op, ": expected a tensor of at least 3 dims (*, C, H, W), got ",
               shape_str(t.shape()));
  TANDEM_CHECK(factor > 0, op, ": the factor must be positive, got ", factor);
}
}  // namespace

Tensor pixel_shuffle(const Tensor& t, int64_t r) {
  check_pixel_shuffle(t, r, "pixel_shuffle");
  const int64_t nd = t.dim(), c = t.size(-3), h = t.size(-2), w = t.size(-1);
  TANDEM_CHECK(c % (r * r) == 0, "pixel_shuffle: the channels (", c,
               ") must be divisible by the square of the upscale factor (", r * r, ")");
  Shape lead(t.shape().begin(), t.shape().end() - 3), split = lead, result = lead;
  split.insert(split.end(), {c / (r * r), r, r, h, w});
  result.insert(result.end(), {c / (r * r), h * r, w * r});
  // (*, C, r, r, H, W) -> (*, C, H, r, W, r)
  Shape perm(lead.size());
  std::iota(perm.begin(), perm.end(), 0);
  const int64_t b = nd - 3;
  perm.insert(perm.end(), {b, b + 3, b + 1, b + 4, b + 2});
  return reshape(permute(reshape(t, split), perm), result);
}

Tensor pixel_unshuffle(const Tensor& t, int64_t r) {
  check_pixel_shuffle(t, r, "pixel_unshuffle");
  const int64_t nd = t.dim(), c = t.size(-3), h = t.size(-2), w = t.size(-1);
  TANDEM_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: the height (", h, ") and width (", w,
               ") must be divisible by the downscale factor (", r, ")");
  Shape lead(t.shape().begin(), t.shape().end() - 3), split = lead, result = lead;
  split.insert(split.end(), {c, h / r, r, w / r, r});
  result.insert(result.end(), {c * r * r, h / r, w / r});
  // (*, C, H, r, W, r) -> (*, C, r, r, H, W)
  Shape perm(lead.size());
  std::iota(perm.begin(), perm.end(), 0);
  const int64_t b = nd - 3;
  perm.insert(perm.end(), {b, b + 2, b + 4, b + 1, b + 3});
  return reshape(permute(reshape(t, split), perm), result);
}

}  // namespace tandem
