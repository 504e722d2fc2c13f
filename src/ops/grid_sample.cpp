// torch.nn.functional.grid_sample and affine_grid, composed of gathers and elementwise ops: the
// input's gradient is the gathers' (scatter_add), the grid's comes through the interpolation
// weights, as torch's. Every device the ops run on.
#include <cmath>
#include <vector>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

// torch's reflect_coordinates: x reflected into [twice_low / 2, twice_high / 2].
Tensor reflect(const Tensor& x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return zeros_like(x);
  const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  const Tensor in = abs(sub(x, low));
  const Tensor extra = fmod(in, span);
  const Tensor even = eq(remainder(floor(div(in, span)), 2.0), 0.0);
  return where(even, add(extra, low), add(neg(extra), span + low));
}

// The position along an axis of `size` of normalized coordinates in [-1, 1] (torch's
// grid_sampler_unnormalize).
Tensor unnormalize(const Tensor& coord, int64_t size, bool corners) {
  const auto s = static_cast<double>(size);
  return corners ? mul(div(add(coord, 1.0), 2.0), s - 1)
                 : div(sub(mul(add(coord, 1.0), s), 1.0), 2.0);
}

// A position brought inside by the padding mode, as torch's compute_coordinates: border clamps,
// reflection reflects then clamps, zeros leaves it (what lies outside then reads as zero).
Tensor padded(Tensor x, int64_t size, GridPadding padding, bool corners) {
  const auto s = static_cast<double>(size);
  if (padding == GridPadding::reflection)
    x = corners ? reflect(x, 0, 2 * (s - 1)) : reflect(x, -1, 2 * s - 1);
  if (padding != GridPadding::zeros) x = clamp(x, 0.0, s - 1);
  return x;
}

// Keys' cubic convolution weights (A = -0.75, torch's get_cubic_upsample_coefficients) of the
// four taps floor(x) - 1 .. floor(x) + 2 at fraction t = x - floor(x): tensors, so the grid's
// gradient comes through them.
std::vector<Tensor> cubic_weights(const Tensor& t) {
  const double A = -0.75;
  auto near = [&](const Tensor& x) {  // |x| <= 1: ((A + 2) x - (A + 3)) x x + 1
    return add(mul(mul(sub(mul(x, A + 2), A + 3), x), x), 1.0);
  };
  auto far = [&](const Tensor& x) {  // 1 < |x| < 2: ((A x - 5 A) x + 8 A) x - 4 A
    return sub(mul(add(mul(sub(mul(x, A), 5 * A), x), 8 * A), x), 4 * A);
  };
  const Tensor rest = add(neg(t), 1.0);  // 1 - t
  return {far(add(t, 1.0)), near(t), near(rest), far(add(rest, 1.0))};
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const std::string& mode,
                   GridPadding padding, std::optional<bool> align_corners) {
  const char* op = "grid_sample";
  check_defined(input, op, "input");
  check_defined(grid, op, "grid");
  check_floating(input, op);
  check_inputs({input, grid}, op);
  TANDEM_CHECK(input.dim() == 4 || input.dim() == 5, op,
               ": expected an (N, C, H, W) or (N, C, D, H, W) input, got shape ",
               shape_str(input.shape()));
  const int64_t k = input.dim() - 2;
  TANDEM_CHECK(grid.dim() == input.dim() && grid.size(0) == input.size(0) && grid.size(-1) == k, op,
               ": expected a grid of shape (N, ..., ", k, ") with the input's N (", input.size(0),
               ") and ", input.dim(), " dims, got ", shape_str(grid.shape()));
  TANDEM_CHECK(grid.dtype() == input.dtype(), op, ": the grid's dtype ", grid.dtype(),
               " differs from the input's ", input.dtype());
  TANDEM_CHECK(mode == "bilinear" || mode == "nearest" || mode == "bicubic", op, ": mode '", mode,
               "' is not supported (bilinear, which is trilinear for a 5-d input, nearest and "
               "bicubic are)");
  TANDEM_CHECK(mode != "bicubic" || input.dim() == 4, op, ": bicubic mode takes a 4-d input, got ",
               input.dim(), " dims (as torch's)");
  const bool corners = align_corners.value_or(false);
  const int64_t n = input.size(0), channels = input.size(1);
  Shape out_shape{n, channels};
  for (int64_t d = 1; d <= k; ++d) out_shape.push_back(grid.size(d));
  const int64_t points = grid.numel() / (n * k);
  const Tensor flat = input.reshape({n, channels, -1});
  // Per spatial axis (D, H, W order), each candidate source index once: its offset into the
  // flattened plane (clamped inside it), whether it lies inside, and its weight (none for
  // nearest). Nearest and bilinear pad the position, then take 1 or 2 taps around it; bicubic
  // takes 4 taps around the position as it is and pads each tap, as torch's.
  struct Candidate {
    Tensor offset, inside, weight;
  };
  const size_t taps = mode == "nearest" ? 1 : mode == "bilinear" ? 2 : 4;
  std::vector<std::vector<Candidate>> candidates(static_cast<size_t>(k));
  int64_t stride = 1;
  for (int64_t a = k - 1; a >= 0; --a) {
    const int64_t size = input.size(a + 2);
    // The grid's last dim lists x (W) first.
    const Tensor at = unnormalize(grid.select(-1, k - 1 - a).reshape({n, points}), size, corners);
    auto candidate = [&](const Tensor& i, const Tensor& weight) {
      return Candidate{mul(clamp(i, 0.0, static_cast<double>(size - 1)).to(DType::i64), stride),
                       logical_and(ge(i, 0.0), le(i, static_cast<double>(size - 1))), weight};
    };
    auto& axis = candidates[static_cast<size_t>(a)];
    if (mode == "nearest") {
      // half to even, as torch's nearbyint
      axis = {candidate(round(padded(at, size, padding, corners)).detach(), Tensor())};
    } else if (mode == "bilinear") {
      const Tensor c = padded(at, size, padding, corners);
      const Tensor low = floor(c).detach(), high = add(low, 1.0);
      axis = {candidate(low, sub(high, c)), candidate(high, sub(c, low))};
    } else {
      const Tensor low = floor(at).detach();
      const std::vector<Tensor> w = cubic_weights(sub(at, low));
      for (size_t j = 0; j < taps; ++j)
        axis.push_back(candidate(
            padded(add(low, static_cast<double>(j) - 1.0), size, padding, corners).detach(), w[j]));
    }
    stride *= size;
  }
  // Every corner (lexicographic over the axes, as torch's nw, ne, sw, se): the value there if it
  // lies inside the input, times its weight (the product from the last axis to the first).
  Tensor out;
  size_t corner_count = 1;
  for (int64_t a = 0; a < k; ++a) corner_count *= taps;
  for (size_t corner = 0; corner < corner_count; ++corner) {
    Tensor position, inside, w;
    size_t digits = corner;  // base `taps`, the last axis's tap in the lowest digit
    for (int64_t a = k - 1; a >= 0; --a) {
      const size_t tap = digits % taps;
      digits /= taps;
      const Candidate& at = candidates[static_cast<size_t>(a)][tap];
      position = position.defined() ? add(position, at.offset) : at.offset;
      inside = inside.defined() ? logical_and(inside, at.inside) : at.inside;
      if (at.weight.defined()) w = w.defined() ? mul(w, at.weight) : at.weight;
    }
    const Tensor scale = w.defined() ? mul(w, inside.to(w.dtype())) : inside.to(input.dtype());
    const Tensor values = gather(flat, 2, position.unsqueeze(1).expand({n, channels, points}));
    const Tensor part = mul(values, scale.unsqueeze(1));
    out = out.defined() ? add(out, part) : part;
  }
  out = out.reshape(out_shape);
  if (mode == "nearest" && grad_mode_enabled() && grid.requires_grad()) {
    // The grid's gradient is zeros, as torch's (the positions are rounded): a zero joined to the
    // output whose backward gives them.
    Tensor zero = zeros({}, input.options());
    autograd::record("grid_sample", {grid}, zero,
                     [shape = grid.shape()](const Tensor& g) -> std::vector<Tensor> {
                       return {zeros(shape, g.options())};
                     });
    out = add(out, zero);
  }
  return out;
}

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners) {
  const char* op = "affine_grid";
  check_defined(theta, op, "theta");
  check_floating(theta, op, "theta");
  TANDEM_CHECK(size.size() == 4 || size.size() == 5, op,
               ": size must be (N, C, H, W) or (N, C, D, H, W), got ", shape_str(size));
  const auto k = static_cast<int64_t>(size.size()) - 2;
  TANDEM_CHECK(
      theta.dim() == 3 && theta.size(0) == size[0] && theta.size(1) == k && theta.size(2) == k + 1,
      op, ": theta must be (N, ", k, ", ", k + 1, ") for size ", shape_str(size), ", got ",
      shape_str(theta.shape()));
  for (int64_t d = 2; d < static_cast<int64_t>(size.size()); ++d)
    TANDEM_CHECK(size[static_cast<size_t>(d)] > 0, op, ": spatial sizes must be positive, got ",
                 shape_str(size));
  const auto options = TensorOptions(theta.dtype()).device(theta.device());
  // Each axis's coordinates from -1 to 1 (0 for a single step; without align_corners, scaled to
  // the pixels' centres), as torch's linspace_from_neg_one.
  auto axis = [&](int64_t steps) {
    if (steps <= 1) return zeros({1}, options);
    const Tensor r = linspace(-1, 1, steps, options);
    return align_corners ? r : mul(r, static_cast<double>(steps - 1) / static_cast<double>(steps));
  };
  // The base grid (spatial..., k + 1): x, y(, z), 1, the spatial dims in (D,) H, W order.
  Shape spatial(size.begin() + 2, size.end());
  std::vector<Tensor> columns;
  for (int64_t j = 0; j < k; ++j) {  // column j is the coordinate along spatial dim k - 1 - j
    const int64_t d = k - 1 - j;
    Shape along(static_cast<size_t>(k), 1);
    along[static_cast<size_t>(d)] = spatial[static_cast<size_t>(d)];
    columns.push_back(axis(spatial[static_cast<size_t>(d)]).reshape(along).expand(spatial));
  }
  columns.push_back(ones(spatial, options));
  const Tensor base = stack(columns, -1).reshape({-1, k + 1});  // (points, k + 1)
  Shape out_shape{size[0]};
  out_shape.insert(out_shape.end(), spatial.begin(), spatial.end());
  out_shape.push_back(k);
  return matmul(base, theta.transpose(1, 2)).reshape(out_shape);
}

}  // namespace tandem
