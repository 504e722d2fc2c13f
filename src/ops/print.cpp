// operator<< for tensors, following torch's layout: one format for all elements (integers
// print as "1.", fixed with 4 decimals, or scientific when the range is wide), right-aligned,
// rows broken per dim, and long dims summarized with "..." past 1000 elements.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "tandem/autograd/node.hpp"
#include "tandem/core/tensor.hpp"

namespace tandem {
namespace {

struct Formatter {
  enum class Mode { integer_valued, fixed, sci, integer, boolean } mode;
  size_t width = 1;

  std::string format(double v) const {
    char buf[64];
    if (mode == Mode::boolean) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::integer: std::snprintf(buf, sizeof buf, "%.0f", v); break;
      case Mode::integer_valued: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Mode::fixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
      default: std::snprintf(buf, sizeof buf, "%.4e", v); break;
    }
    return buf;
  }
};

Formatter make_formatter(const std::vector<double>& values, DType dtype) {
  Formatter f;
  if (dtype == DType::boolean) {
    f.mode = Formatter::Mode::boolean;
  } else if (!is_floating(dtype)) {
    f.mode = Formatter::Mode::integer;
  } else {
    bool all_int = true;
    double max_abs = 0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::nearbyint(v)) all_int = false;
      double a = std::fabs(v);
      max_abs = std::max(max_abs, a);
      if (a != 0) min_abs = std::min(min_abs, a);
    }
    if (all_int) {
      f.mode = max_abs > 1e8 ? Formatter::Mode::sci : Formatter::Mode::integer_valued;
    } else {
      bool sci = max_abs > 1e8 || (min_abs != INFINITY && (min_abs < 1e-4 || max_abs / min_abs > 1e3));
      f.mode = sci ? Formatter::Mode::sci : Formatter::Mode::fixed;
    }
  }
  for (double v : values) f.width = std::max(f.width, f.format(v).size());
  return f;
}

struct Printer {
  const std::vector<double>& values;
  const Shape& shape;
  const Formatter& fmt;
  bool summarize;
  std::ostream& os;

  // Indices shown along a dim: all, or the first and last 3 when summarizing.
  std::vector<int64_t> shown(int64_t size) const {
    std::vector<int64_t> idx;
    if (summarize && size > 6) {
      for (int64_t i : {0, 1, 2}) idx.push_back(i);
      idx.push_back(-1);  // "..."
      for (int64_t i = size - 3; i < size; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < size; ++i) idx.push_back(i);
    }
    return idx;
  }

  void print(size_t dim, int64_t offset, int indent) {
    if (dim == shape.size()) {
      std::string s = fmt.format(values[offset]);
      os << std::string(fmt.width - s.size(), ' ') << s;
      return;
    }
    int64_t inner = 1;
    for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
    os << '[';
    auto idx = shown(shape[dim]);
    bool last_dim = dim + 1 == shape.size();
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k) {
        os << ',';
        if (last_dim) {
          os << ' ';
        } else {
          os << std::string(shape.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
      if (idx[k] < 0) {
        os << "...";
        continue;
      }
      print(dim + 1, offset + idx[k] * inner, indent + 1);
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(";
  // The nesting recurses once per dim: past 64 dims (more than any kernel's loops take), the
  // values are left out rather than the stack overflowed.
  constexpr int64_t kMostDims = 64;
  std::vector<double> values = t.dim() <= kMostDims ? t.to_vector<double>() : std::vector<double>();
  Formatter fmt = make_formatter(values, t.dtype());
  if (t.dim() > kMostDims) {
    os << "[...]";
  } else if (t.dim() == 0) {
    os << fmt.format(values[0]);
  } else {
    Printer{values, t.shape(), fmt, t.numel() > 1000, os}.print(0, 0, 7);
  }
  os << ", shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (t.grad_fn()) {
    os << ", grad_fn=<" << t.grad_fn()->name() << ">";
  } else if (t.requires_grad()) {
    os << ", requires_grad=True";
  }
  return os << ')';
}

}  // namespace tandem
