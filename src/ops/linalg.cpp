// Matrix products. bmm is the one kernel-backed op (floats and, on the CPU, integers); mm, matmul
// and linear are built on it, so their gradients come from bmm's. The kernel reads transposed
// operands through their strides.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast_changes("bmm", {a, b})) return bmm(autocast_input("bmm", a), autocast_input("bmm", b));
  check_defined(a, "bmm", "first operand");
  check_defined(b, "bmm", "second operand");
  check_inputs({a, b}, "bmm");
  // Integers multiply too (on the CPU, as torch's; cuBLAS refuses them), bools do not.
  TANDEM_CHECK(a.dtype() != DType::boolean && b.dtype() != DType::boolean,
               "bmm: bool operands are not multiplied; convert them to an integer or floating "
               "dtype first (got ",
               a.dtype(), " and ", b.dtype(), ")");
  TANDEM_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
               "bmm: expected (B, M, K) and (B, K, N), got ", shape_str(a.shape()), " and ",
               shape_str(b.shape()));
  DType dt = promote_types(a.dtype(), b.dtype());
  if (a.dtype() != b.dtype()) return bmm(a.to(dt), b.to(dt));  // differentiable promotion
  kernels::bmm.at(a, "bmm");
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, TensorOptions(dt).device(a.device()));
  kernels::bmm(out, a.detach(), b.detach());
  autograd::record("bmm", {a, b}, out, [a, b](const Tensor& g) -> std::vector<Tensor> {
    return {a.requires_grad() ? bmm(g, b.transpose(1, 2)) : Tensor(),
            b.requires_grad() ? bmm(a.transpose(1, 2), g) : Tensor()};
  }, kDifferentiable);
  autograd::save_for_backward(out,
                              {b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()});
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_defined(a, "mm", "first operand");
  check_defined(b, "mm", "second operand");
  TANDEM_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
               "mm: expected (M, K) and (K, N), got ", shape_str(a.shape()), " and ",
               shape_str(b.shape()));
  return bmm(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_defined(a, "dot", "first operand");
  check_defined(b, "dot", "second operand");
  TANDEM_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0),
               "dot: expected two 1-d tensors of the same size, got ", shape_str(a.shape()),
               " and ", shape_str(b.shape()));
  return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
}

Tensor mv(const Tensor& mat, const Tensor& vec) {
  check_defined(mat, "mv", "matrix");
  check_defined(vec, "mv", "vector");
  TANDEM_CHECK(mat.dim() == 2 && vec.dim() == 1 && mat.size(1) == vec.size(0),
               "mv: expected (M, N) and (N), got ", shape_str(mat.shape()), " and ",
               shape_str(vec.shape()));
  return mm(mat, vec.unsqueeze(1)).squeeze(1);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_defined(a, "outer", "first operand");
  check_defined(b, "outer", "second operand");
  TANDEM_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected two 1-d tensors, got ",
               shape_str(a.shape()), " and ", shape_str(b.shape()));
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

namespace {
// beta * self + alpha * product, self broadcast to the product's shape; with beta 0 self is
// not read, NaNs included (torch's rule).
Tensor add_scaled(const Tensor& self, Tensor product, double beta, double alpha, const char* op) {
  check_broadcasts_to(self, product.shape(), op, "input");
  if (alpha != 1.0) product = mul(product, alpha);
  if (beta == 0.0) return product;
  return add(product, beta == 1.0 ? self : mul(self, beta));
}
}  // namespace

Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta,
             double alpha) {
  check_defined(self, "addmm", "input");
  if (autocast_changes("addmm", {self, mat1, mat2}))
    return addmm(autocast_input("addmm", self), autocast_input("addmm", mat1),
                 autocast_input("addmm", mat2), beta, alpha);
  return add_scaled(self, mm(mat1, mat2), beta, alpha, "addmm");
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
               double alpha) {
  check_defined(self, "baddbmm", "input");
  if (autocast_changes("baddbmm", {self, batch1, batch2}))
    return baddbmm(autocast_input("baddbmm", self), autocast_input("baddbmm", batch1),
                   autocast_input("baddbmm", batch2), beta, alpha);
  return add_scaled(self, bmm(batch1, batch2), beta, alpha, "baddbmm");
}

Tensor trace(const Tensor& t) {
  check_defined(t, "trace", "input");
  TANDEM_CHECK(t.dim() == 2, "trace: expected a matrix, got ", shape_str(t.shape()));
  return sum(diagonal(t));
}

namespace {
Tensor cross_along(const Tensor& a, const Tensor& b, int64_t dim, const char* op) {
  check_defined(a, op, "input");
  check_defined(b, op, "other");
  check_inputs({a, b}, op);
  TANDEM_CHECK(a.dim() == b.dim(), op, ": expected inputs of the same number of dims, got ",
               shape_str(a.shape()), " and ", shape_str(b.shape()));
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(shape.size()), op);
  TANDEM_CHECK(shape[d] == 3, op, ": dim ", d, " must have size 3, got ", shape_str(shape));
  const Tensor x = expand(a, shape), y = expand(b, shape);
  auto at = [d](const Tensor& t, int64_t i) { return select(t, d, i); };
  return stack({sub(mul(at(x, 1), at(y, 2)), mul(at(x, 2), at(y, 1))),
                sub(mul(at(x, 2), at(y, 0)), mul(at(x, 0), at(y, 2))),
                sub(mul(at(x, 0), at(y, 1)), mul(at(x, 1), at(y, 0)))},
               d);
}
}  // namespace

Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim) {
  if (dim) return cross_along(a, b, *dim, "cross");
  check_defined(a, "cross", "input");
  check_defined(b, "cross", "other");
  // torch.cross's: the first dim of size 3 of the first input.
  const auto three = std::find(a.shape().begin(), a.shape().end(), 3);
  TANDEM_CHECK(three != a.shape().end(), "cross: no dim of size 3 in ", shape_str(a.shape()));
  return cross_along(a, b, three - a.shape().begin(), "cross");
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  check_defined(x1, "cdist", "x1");
  check_defined(x2, "cdist", "x2");
  check_floating(x1, "cdist", "x1");
  check_floating(x2, "cdist", "x2");
  check_inputs({x1, x2}, "cdist");
  TANDEM_CHECK(x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1),
               "cdist: expected (*, P, M) and (*, R, M), got ", shape_str(x1.shape()), " and ",
               shape_str(x2.shape()));
  TANDEM_CHECK(p >= 0, "cdist: p must be >= 0 or inf, got ", p);
  if (p == 2 && (x1.size(-2) > 25 || x2.size(-2) > 25)) {
    // |x|^2 + |y|^2 - 2 x.y, clamped at 1e-30 before the root: torch's formula, whose gradient
    // is 0 where the distance is (numerically) 0.
    const Tensor sq1 = sum(mul(x1, x1), {-1}, true), sq2 = sum(mul(x2, x2), {-1}, true);
    const Tensor cross_term = matmul(x1, x2.transpose(-1, -2));
    const Tensor d2 = add(sub(sq1, mul(cross_term, 2.0)), sq2.transpose(-1, -2));
    return sqrt(clamp_min(d2, 1e-30));
  }
  return norm(sub(x1.unsqueeze(-2), x2.unsqueeze(-3)), p, {-1});
}

Tensor linalg::vector_norm(const Tensor& t, double ord, const Shape& dims, bool keepdim) {
  TANDEM_CHECK(!std::isnan(ord), "vector_norm: ord must be a number, got NaN");
  if (ord >= 0) return norm(t, ord, dims, keepdim);
  // norm() takes ord >= 0. -inf: the smallest |x|; otherwise a zero element makes this 0, as
  // torch's.
  check_defined(t, "vector_norm", "input");
  check_floating(t, "vector_norm");
  const Tensor a = abs(t);
  if (std::isinf(ord)) return amin(a, dims, keepdim);
  // A slice holding a zero has norm 0 and, as torch's, gradient 0: the zeros' 0^ord is infinite,
  // so such a slice is computed over ones and its result replaced.
  Tensor zeros_in;  // per slice, its dims kept
  {
    NoGradGuard guard;
    zeros_in = gt(sum(eq(a, 0.0).to(a.dtype()), dims, true), 0.0);
  }
  const Tensor norms = pow(sum(pow(where(zeros_in, 1.0, a), ord), dims, keepdim), 1.0 / ord);
  return where(zeros_in.reshape(norms.shape()), 0.0, norms);
}

Tensor linalg::vector_norm(const Tensor& t, double ord, const Shape& dims, bool keepdim,
                           std::optional<DType> dtype) {
  check_defined(t, "vector_norm", "input");
  return vector_norm(dtype ? t.to(*dtype) : t, ord, dims, keepdim);
}

Tensor linalg::cross(const Tensor& a, const Tensor& b, int64_t dim) {
  return cross_along(a, b, dim, "linalg.cross");
}

Tensor linalg::tensorinv(const Tensor& a, int64_t ind) {
  const char* op = "linalg.tensorinv";
  check_defined(a, op, "input");
  TANDEM_CHECK(ind > 0, op, ": ind must be positive, got ", ind);
  const auto split = a.shape().begin() + std::min<int64_t>(ind, a.dim());
  const Shape lead(a.shape().begin(), split), rest(split, a.shape().end());
  const int64_t rows = numel_of(lead), cols = numel_of(rest);
  TANDEM_CHECK(rows == cols, op, ": the first ", ind, " dims of ", shape_str(a.shape()), " hold ",
               rows, " elements and the others ", cols, "; they must be equal");
  Shape shape = rest;
  shape.insert(shape.end(), lead.begin(), lead.end());
  return inv(a.reshape({rows, cols})).reshape(shape);
}

Tensor linalg::tensorsolve(const Tensor& a, const Tensor& b, const OptionalIntArrayRef& dims) {
  const char* op = "linalg.tensorsolve";
  check_defined(a, op, "input");
  check_defined(b, op, "other");
  Tensor moved = a;
  if (dims.has_value()) {  // those dims last, the others in order before them
    Shape last;
    for (int64_t d : *dims) last.push_back(wrap_dim(d, a.dim(), op));
    Shape order;
    for (int64_t d = 0; d < a.dim(); ++d)
      if (std::find(last.begin(), last.end(), d) == last.end()) order.push_back(d);
    order.insert(order.end(), last.begin(), last.end());
    moved = permute(a, order);
  }
  TANDEM_CHECK(b.dim() <= moved.dim(), op, ": B ", shape_str(b.shape()), " has more dims than A ",
               shape_str(moved.shape()));
  const auto split = moved.shape().begin() + b.dim();
  const Shape lead(moved.shape().begin(), split), rest(split, moved.shape().end());
  const int64_t rows = numel_of(lead), cols = numel_of(rest);
  TANDEM_CHECK(rows == cols && b.numel() == rows, op, ": A ", shape_str(moved.shape()),
               " must be B's shape ", shape_str(b.shape()),
               " followed by dims of as many elements, as a square system");
  return solve(moved.reshape({rows, cols}), b.reshape({rows})).reshape(rest);
}

Tensor linalg::multi_dot(const std::vector<Tensor>& tensors) {
  const char* op = "linalg.multi_dot";
  const size_t n = tensors.size();
  TANDEM_CHECK(n >= 2, op, ": expected at least 2 tensors, got ", n);
  for (size_t i = 0; i < n; ++i) {
    check_defined(tensors[i], op, "each tensor");
    const bool end = i == 0 || i == n - 1;
    TANDEM_CHECK(tensors[i].dim() == 2 || (end && tensors[i].dim() == 1), op, ": tensor ", i,
                 end ? " must be 1-d or 2-d" : " must be 2-d", ", got shape ",
                 shape_str(tensors[i].shape()));
    TANDEM_CHECK(tensors[i].dtype() == tensors[0].dtype(), op,
                 ": all tensors must have one dtype, but tensor 0 is ", tensors[0].dtype(),
                 " and tensor ", i, " is ", tensors[i].dtype());
  }
  check_inputs(tensors, op);
  // A first vector is a row, a last one a column; the result loses them again.
  std::vector<Tensor> m = tensors;
  const bool row = m.front().dim() == 1, column = m.back().dim() == 1;
  if (row) m.front() = m.front().unsqueeze(0);
  if (column) m.back() = m.back().unsqueeze(1);
  std::vector<int64_t> p{m[0].size(0)};  // m[i] is p[i] x p[i + 1]
  for (size_t i = 0; i < n; ++i) {
    TANDEM_CHECK(i == 0 || m[i].size(0) == p[i], op, ": tensors ", i - 1, " and ", i,
                 " with shapes ", shape_str(tensors[i - 1].shape()), " and ",
                 shape_str(tensors[i].shape()), " cannot be multiplied");
    p.push_back(m[i].size(1));
  }
  // The order of fewest scalar multiplications (the matrix-chain recurrence): cost[i][j] of
  // m[i..j], split[i][j] the last product's split.
  std::vector<std::vector<int64_t>> cost(n, std::vector<int64_t>(n, 0)), split = cost;
  for (size_t len = 1; len < n; ++len)
    for (size_t i = 0; i + len < n; ++i) {
      const size_t j = i + len;
      cost[i][j] = std::numeric_limits<int64_t>::max();
      for (size_t k = i; k < j; ++k) {
        const int64_t c = cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1];
        if (c < cost[i][j]) {
          cost[i][j] = c;
          split[i][j] = static_cast<int64_t>(k);
        }
      }
    }
  const std::function<Tensor(size_t, size_t)> product = [&](size_t i, size_t j) -> Tensor {
    if (i == j) return m[i];
    const size_t k = static_cast<size_t>(split[i][j]);
    return mm(product(i, k), product(k + 1, j));
  };
  Tensor result = product(0, n - 1);
  if (row) result = result.squeeze(0);
  if (column) result = result.squeeze(-1);
  return result;
}

Tensor linalg::vecdot(const Tensor& x, const Tensor& y, int64_t dim) {
  check_defined(x, "linalg.vecdot", "x");
  check_defined(y, "linalg.vecdot", "y");
  check_floating(x, "linalg.vecdot", "x");
  TANDEM_CHECK(x.dtype() == y.dtype(), "linalg.vecdot: x and y must have one dtype, got ",
               x.dtype(), " and ", y.dtype());
  return sum(mul(x, y), Shape{dim});
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined(a, "matmul", "first operand");
  check_defined(b, "matmul", "second operand");
  const int64_t da = a.dim(), db = b.dim();
  TANDEM_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dim, got ",
               shape_str(a.shape()), " and ", shape_str(b.shape()));
  int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  TANDEM_CHECK(ka == kb, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
               " cannot be multiplied (", ka, " != ", kb, ")");
  if (da == 1 && db == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (da == 2 && db == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
  if (da == 1 && db == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (da == 2 && db == 2) return mm(a, b);
  if (db == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  if (da == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (db == 2) {  // (..., M, K) x (K, N): fold the batch into M, one GEMM
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.size(1));
    return mm(a.reshape({-1, ka}), b).reshape(out_shape);
  }
  // Broadcast the batch dims, then one bmm over their product.
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {a.size(-2), ka});
  eb.insert(eb.end(), {kb, b.size(-1)});
  int64_t nb = numel_of(batch);
  Tensor out = bmm(a.expand(ea).reshape({nb, a.size(-2), ka}),
                   b.expand(eb).reshape({nb, kb, b.size(-1)}));
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {a.size(-2), b.size(-1)});
  return out.reshape(out_shape);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (autocast_changes("linear", {input, weight, bias}))
    return linear(autocast_input("linear", input), autocast_input("linear", weight),
                  autocast_input("linear", bias));
  check_defined(input, "linear", "input");
  check_defined(weight, "linear", "weight");
  check_inputs({input, weight, bias}, "linear");
  TANDEM_CHECK(weight.dim() == 2, "linear: weight must be 2-d (out_features, in_features), got ",
               shape_str(weight.shape()));
  TANDEM_CHECK(
      input.dim() >= 1 && input.size(-1) == weight.size(1),
      "linear: input (*, in_features) with in_features == weight.size(1) == ", weight.size(1),
      " expected, got input ", shape_str(input.shape()), " and weight ", shape_str(weight.shape()));
  Tensor out = matmul(input, weight.t());
  if (!bias.defined()) return out;
  TANDEM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias must be (",
               weight.size(0), "), got ", shape_str(bias.shape()));
  return add(out, bias);
}

// --- einsum ----------------------------------------------------------------------------------

namespace {

// An operand with one subscript per dim; the dims "..." stands for are named '0', '1', ...,
// aligned to the right across operands (as broadcasting aligns them).
struct Term {
  Tensor t;
  std::string subs;
};

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// `spec` ("ij", "...ij") with its ellipsis spelled out as the last `count` of `broadcast` names.
std::string expand_ellipsis(const std::string& spec, int64_t count, int64_t broadcast,
                            const std::string& equation) {
  const size_t at = spec.find("...");
  std::string out;
  for (size_t k = 0; k < spec.size(); ++k) {
    if (k == at) {
      for (int64_t d = broadcast - count; d < broadcast; ++d) out += static_cast<char>('0' + d);
      k += 2;
      continue;
    }
    TANDEM_CHECK(is_letter(spec[k]), "einsum: '", spec[k], "' in \"", equation,
                 "\" is not a subscript (a-z, A-Z) or \"...\"");
    out += spec[k];
  }
  return out;
}

// t summed over the subscripts not in `keep`.
Term sum_out(const Term& x, const std::string& keep) {
  Shape dims;
  std::string subs;
  for (size_t d = 0; d < x.subs.size(); ++d) {
    if (keep.find(x.subs[d]) == std::string::npos) {
      dims.push_back(static_cast<int64_t>(d));
    } else {
      subs += x.subs[d];
    }
  }
  return dims.empty() ? x : Term{sum(x.t, dims), subs};
}

int64_t size_of(const Term& x, char c) { return x.t.size(static_cast<int64_t>(x.subs.find(c))); }

// x's dims in the order of `order` (each of its subscripts once), as a (sizes of the groups)
// matrix: the groups are consecutive runs of `order` of lengths `groups`.
Tensor grouped(const Term& x, const std::string& order, const std::map<char, int64_t>& sizes,
               const std::vector<size_t>& groups) {
  Shape perm, expanded;
  for (char c : order) {
    perm.push_back(static_cast<int64_t>(x.subs.find(c)));
    expanded.push_back(sizes.at(c));
  }
  Tensor t = x.t.permute(perm).expand(expanded);
  Shape shape;
  size_t at = 0;
  for (size_t n : groups) {
    int64_t size = 1;
    for (size_t k = 0; k < n; ++k) size *= expanded[at + k];
    shape.push_back(size);
    at += n;
  }
  return t.reshape(shape);
}

// a and b contracted over the subscripts they share that `keep` lacks; `keep`'s subscripts
// stay: the shared ones as a batch of one bmm.
Term contract(Term a, Term b, const std::string& keep) {
  auto in = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  a = sum_out(a, keep + b.subs);
  b = sum_out(b, keep + a.subs);
  std::string batch, left, right, inner;
  std::map<char, int64_t> sizes;
  for (char c : a.subs) {
    sizes[c] = size_of(a, c);
    if (!in(b.subs, c)) {
      left += c;
    } else {
      (in(keep, c) ? batch : inner) += c;
    }
  }
  for (char c : b.subs) {
    if (!in(a.subs, c)) right += c;
    const int64_t sa = in(a.subs, c) ? size_of(a, c) : 1, sb = size_of(b, c);
    TANDEM_CHECK(sa == sb || sa == 1 || sb == 1, "einsum: subscript '", c, "' has size ", sa,
                 " in one operand and ", sb, " in another");
    sizes[c] = std::max(sa, sb);
  }
  const Tensor m =
      grouped(a, batch + left + inner, sizes, {batch.size(), left.size(), inner.size()});
  const Tensor n =
      grouped(b, batch + inner + right, sizes, {batch.size(), inner.size(), right.size()});
  Shape shape;
  for (char c : batch + left + right) shape.push_back(sizes.at(c));
  return {bmm(m, n).reshape(shape), batch + left + right};
}

}  // namespace

Tensor einsum(const std::string& equation_in, const std::vector<Tensor>& operands) {
  std::string equation;
  for (char c : equation_in)
    if (c != ' ') equation += c;
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> specs(1);
  for (char c : lhs) {
    if (c == ',') {
      specs.emplace_back();
    } else {
      specs.back() += c;
    }
  }
  TANDEM_CHECK(specs.size() == operands.size(), "einsum: \"", equation, "\" names ", specs.size(),
               " operands, ", operands.size(), " given");
  // How many dims each "..." stands for; the most of them is the output's broadcast dims.
  std::vector<int64_t> counts;
  int64_t broadcast = 0;
  for (size_t k = 0; k < specs.size(); ++k) {
    check_defined(operands[k], "einsum", "operand");
    const bool ellipsis = specs[k].find("...") != std::string::npos;
    const auto letters = static_cast<int64_t>(specs[k].size()) - (ellipsis ? 3 : 0);
    const int64_t count = operands[k].dim() - letters;
    TANDEM_CHECK(ellipsis ? count >= 0 : count == 0, "einsum: operand ", k, " has ",
                 operands[k].dim(), " dims, but \"", specs[k], "\" names ", letters);
    TANDEM_CHECK(count <= 10, "einsum: \"...\" stands for at most 10 dims");
    counts.push_back(count);
    broadcast = std::max(broadcast, count);
  }
  std::vector<Term> terms;
  std::map<char, int> uses;
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::string subs = expand_ellipsis(specs[k], counts[k], broadcast, equation);
    for (size_t d = 0; d < subs.size(); ++d)
      TANDEM_CHECK(subs.find(subs[d], d + 1) == std::string::npos, "einsum: subscript '", subs[d],
                   "' appears twice in operand ", k, " (a diagonal), which is not supported");
    for (char c : subs) ++uses[c];
    terms.push_back({operands[k], subs});
  }
  std::string out;
  if (arrow == std::string::npos) {  // the broadcast dims, then the subscripts used once
    for (const auto& [c, n] : uses)
      if (c >= '0' && c <= '9') out += c;
    for (const auto& [c, n] : uses)
      if (n == 1 && is_letter(c)) out += c;
  } else {
    const std::string rhs = equation.substr(arrow + 2);
    out = expand_ellipsis(rhs, rhs.find("...") == std::string::npos ? 0 : broadcast, broadcast,
                          equation);
    for (size_t d = 0; d < out.size(); ++d) {
      TANDEM_CHECK(uses.count(out[d]) != 0, "einsum: output subscript '", out[d],
                   "' is in no operand");
      TANDEM_CHECK(out.find(out[d], d + 1) == std::string::npos, "einsum: output subscript '",
                   out[d], "' appears twice");
    }
  }
  TANDEM_CHECK(!terms.empty(), "einsum: no operands");
  Term acc = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    std::string later = out;  // the subscripts still needed after this pair
    for (size_t j = k + 1; j < terms.size(); ++j) later += terms[j].subs;
    acc = contract(acc, terms[k], later);
  }
  acc = sum_out(acc, out);
  Shape perm;
  for (char c : out) perm.push_back(static_cast<int64_t>(acc.subs.find(c)));
  return acc.t.permute(perm);
}

}  // namespace tandem
