// torch.linalg's decompositions and solvers: LU (inv, det, slogdet, solve), Cholesky and
// triangular solves. Each factorization runs on the host in f64 through Eigen, for every device
// (a GPU tensor's matrices go to the host and back: there is no cuSOLVER backend), and its
// result is rounded to the input's dtype. Their backward closures are written with these ops
// and matmul, so gradients of gradients work.
#include <Eigen/Cholesky>
#include <Eigen/LU>
#include <cmath>
#include <limits>

#include "common.hpp"
#include "host_matrices.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/linalg.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

// The LU factorization of a square matrix with partial pivoting, refusing a singular one (an
// exact zero on U's diagonal, as LAPACK's getrf reports) by `op`'s name.
Eigen::PartialPivLU<Matrix> nonsingular_lu(const MatrixMap& m, int64_t k, const char* op) {
  Eigen::PartialPivLU<Matrix> lu(m);
  const auto diagonal = lu.matrixLU().diagonal();
  for (Eigen::Index i = 0; i < diagonal.size(); ++i)
    TANDEM_CHECK(diagonal(i) != 0.0, op, ": matrix ", k,
                 " of the batch is singular (U's diagonal element ", i + 1,
                 " is zero), so it has no inverse");
  return lu;
}

// inv without autograd.
Tensor inv_values(const Tensor& a) {
  std::vector<double> v = host_matrices(a);
  const int64_t n = a.size(-1);
  each_matrix(v, n, n,
              [&](int64_t k, MatrixMap m) { m = nonsingular_lu(m, k, "linalg.inv").inverse(); });
  return from_host(v, a.shape(), a);
}

// X = A^-1 B for A (..., n, n) and B (..., n, k) of one batch shape, without autograd.
Tensor solve_values(const Tensor& a, const Tensor& b) {
  std::vector<double> va = host_matrices(a), vb = host_matrices(b);
  const int64_t n = a.size(-1), cols = b.size(-1);
  // No columns: nothing to solve (and Eigen's maps of no data bind null references).
  if (vb.empty()) return from_host(vb, b.shape(), b);
  each_matrix(va, n, n, [&](int64_t k, MatrixMap m) {
    MatrixMap x(vb.data() + k * n * cols, n, cols);
    x = nonsingular_lu(m, k, "linalg.solve").solve(Matrix(x));
  });
  return from_host(vb, b.shape(), b);
}

// solve for matrices of one batch shape: the recorded op.
Tensor solve_matrices(const Tensor& a, const Tensor& b) {
  Tensor x = solve_values(a, b);
  autograd::record(
      "linalg_solve", {a, b}, x,
      [a, xd = x.detach()](const Tensor& g) -> std::vector<Tensor> {
        // dB = A^-T dX, dA = -dB X^T.
        const Tensor gb = solve_matrices(mT(a), g);
        return {a.requires_grad() ? neg(matmul(gb, mT(autograd::saved_output(xd)))) : Tensor(), gb};
      },
      kDifferentiable);
  return x;
}

// The triangular solve on the left, for matrices of one batch shape: the recorded op.
Tensor solve_triangular_left(const Tensor& a, const Tensor& b, bool upper, bool unitriangular) {
  std::vector<double> va = host_matrices(a), vb = host_matrices(b);
  const int64_t n = a.size(-1), cols = b.size(-1);
  // No columns: nothing to solve (and Eigen's maps of no data bind null references).
  each_matrix(vb.empty() ? vb : va, n, n, [&](int64_t k, MatrixMap m) {
    MatrixMap x(vb.data() + k * n * cols, n, cols);
    // A zero on the diagonal gives inf and NaN, as LAPACK's trsm (nothing checks).
    if (upper && unitriangular) m.triangularView<Eigen::UnitUpper>().solveInPlace(x);
    if (upper && !unitriangular) m.triangularView<Eigen::Upper>().solveInPlace(x);
    if (!upper && unitriangular) m.triangularView<Eigen::UnitLower>().solveInPlace(x);
    if (!upper && !unitriangular) m.triangularView<Eigen::Lower>().solveInPlace(x);
  });
  Tensor x = from_host(vb, b.shape(), b);
  autograd::record(
      "linalg_solve_triangular", {a, b}, x,
      [a, xd = x.detach(), upper, unitriangular](const Tensor& g) -> std::vector<Tensor> {
        // dB = A^-T dX; dA = -dB X^T on A's triangle (less the diagonal when it is taken as ones).
        const Tensor gb = solve_triangular_left(mT(a), g, !upper, unitriangular);
        Tensor ga;
        if (a.requires_grad()) {
          const Tensor full = neg(matmul(gb, mT(autograd::saved_output(xd))));
          const int64_t skip = unitriangular ? 1 : 0;
          ga = upper ? triu(full, skip) : tril(full, -skip);
        }
        return {ga, gb};
      },
      kDifferentiable);
  return x;
}

// A and B (or a vector b) with their batch dims broadcast together: torch.linalg.solve's rule
// for a vector (b is 1-d, or one dim short of A with A's leading shape).
struct SolveOperands {
  Tensor a, b;
  bool vector;
};
SolveOperands broadcast_for_solve(const Tensor& a, const Tensor& b, bool allow_vector,
                                  const char* op) {
  check_matrices(allow_vector && b.dim() == 1 ? b.unsqueeze(-1) : b, op, "B");
  TANDEM_CHECK(a.dtype() == b.dtype(), op, ": A and B must have one dtype, got ", a.dtype(),
               " and ", b.dtype());
  check_inputs({a, b}, op);
  const bool vector =
      allow_vector &&
      (b.dim() == 1 ||
       (b.dim() == a.dim() - 1 && Shape(a.shape().begin(), a.shape().end() - 1) == b.shape()));
  const Tensor b2 = vector ? b.unsqueeze(-1) : b;
  TANDEM_CHECK(b2.size(-2) == a.size(-1), op, ": A of shape ", shape_str(a.shape()),
               " and B of shape ", shape_str(b.shape()), " do not match (", a.size(-1),
               " columns, ", b2.size(-2), " rows)");
  const Shape batch = broadcast_shapes(batch_of(a), batch_of(b2), op);
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {a.size(-2), a.size(-1)});
  sb.insert(sb.end(), {b2.size(-2), b2.size(-1)});
  return {a.expand(sa), b2.expand(sb), vector};
}

// The lower Cholesky factor: the recorded op.
Tensor cholesky_lower(const Tensor& a) {
  std::vector<double> v = host_matrices(a);
  const int64_t n = a.size(-1);
  each_matrix(v, n, n, [&](int64_t k, MatrixMap m) {
    const Eigen::LLT<Matrix, Eigen::Lower> llt(m);  // reads A's lower triangle only, as torch
    if (llt.info() != Eigen::Success || !llt.matrixLLT().diagonal().allFinite()) {
      // The order of the first leading minor that is not positive: the factorization by hand.
      Matrix l = Matrix::Zero(n, n);
      int64_t order = n;
      for (int64_t j = 0; j < n && order == n; ++j) {
        double d = m(j, j);
        for (int64_t p = 0; p < j; ++p) d -= l(j, p) * l(j, p);
        if (!(d > 0)) order = j + 1;
        l(j, j) = std::sqrt(d);
        for (int64_t i = j + 1; i < n; ++i) {
          double s = m(i, j);
          for (int64_t p = 0; p < j; ++p) s -= l(i, p) * l(j, p);
          l(i, j) = s / l(j, j);
        }
      }
      TANDEM_THROW(Error, "linalg.cholesky: matrix ", k,
                   " of the batch is not positive-definite (its leading minor of order ", order,
                   " is not)");
    }
    m = llt.matrixL().toDenseMatrix();
  });
  Tensor l = from_host(v, a.shape(), a);
  autograd::record(
      "linalg_cholesky", {a}, l,
      [ld = l.detach()](const Tensor& g) -> std::vector<Tensor> {
        // torch's formula: P = tril(L^T dL), S = (P + tril(P, -1)^T) / 2, dA = L^-T S L^-1.
        const Tensor lo = autograd::saved_output(ld);
        const Tensor p = tril(matmul(mT(lo), g));
        const Tensor s = mul(add(p, mT(tril(p, -1))), 0.5);
        const Tensor left = solve_triangular_left(mT(lo), s, true, false);  // L^-T S
        return {mT(solve_triangular_left(mT(lo), mT(left), true, false))};  // (L^-T (L^-T S)^T)^T
      },
      kDifferentiable);
  return l;
}

}  // namespace

Tensor linalg::inv(const Tensor& a) {
  check_square(a, "linalg.inv");
  Tensor out = inv_values(a);
  autograd::record(
      "linalg_inv", {a}, out,
      [od = out.detach()](const Tensor& g) -> std::vector<Tensor> {
        const Tensor y = mT(autograd::saved_output(od));  // d(A^-1) = -A^-T dY A^-T
        return {neg(matmul(matmul(y, g), y))};
      },
      kDifferentiable);
  return out;
}

std::tuple<Tensor, Tensor> linalg::slogdet(const Tensor& a) {
  check_square(a, "linalg.slogdet");
  std::vector<double> v = host_matrices(a);
  const int64_t n = a.size(-1);
  const Shape batch = batch_of(a);
  std::vector<double> signs(static_cast<size_t>(numel_of(batch)), 1.0), logs(signs.size(), 0.0);
  each_matrix(v, n, n, [&](int64_t k, MatrixMap m) {
    const Eigen::PartialPivLU<Matrix> lu(m);
    double sign = lu.permutationP().determinant(), log_abs = 0;
    const auto diagonal = lu.matrixLU().diagonal();
    for (Eigen::Index i = 0; i < diagonal.size(); ++i) {
      if (diagonal(i) < 0) sign = -sign;
      if (diagonal(i) == 0) sign = 0;
      log_abs += std::log(std::abs(diagonal(i)));
    }
    signs[static_cast<size_t>(k)] = sign;
    logs[static_cast<size_t>(k)] = log_abs;
  });
  Tensor sign = from_host(signs, batch, a), log_abs = from_host(logs, batch, a);
  autograd::record(
      "linalg_slogdet", {a}, log_abs,
      [a](const Tensor& g) -> std::vector<Tensor> {
        return {mul(g.unsqueeze(-1).unsqueeze(-1), mT(inv(a)))};  // d log|det A| = A^-T
      },
      kDifferentiable);
  return {sign, log_abs};
}

Tensor linalg::det(const Tensor& a) {
  check_square(a, "linalg.det");
  std::vector<double> v = host_matrices(a);
  const int64_t n = a.size(-1);
  const Shape batch = batch_of(a);
  std::vector<double> dets(static_cast<size_t>(numel_of(batch)), 1.0);
  each_matrix(v, n, n, [&](int64_t k, MatrixMap m) {
    dets[static_cast<size_t>(k)] = Eigen::PartialPivLU<Matrix>(m).determinant();
  });
  Tensor out = from_host(dets, batch, a);
  autograd::record(
      "linalg_det", {a}, out,
      [a, od = out.detach()](const Tensor& g) -> std::vector<Tensor> {
        // d det A = det A * A^-T. torch reaches singular matrices through an SVD; here they are
        // refused by name.
        TANDEM_CHECK(!od.eq(0.0).any().item<bool>(),
                     "linalg.det: the gradient at a singular matrix "
                     "is not computed here (torch takes it through an SVD)");
        const Tensor d = autograd::saved_output(od);
        return {mul(mul(g, d).unsqueeze(-1).unsqueeze(-1), mT(inv(a)))};
      },
      kDifferentiable);
  return out;
}

Tensor linalg::solve(const Tensor& a, const Tensor& b, bool left) {
  check_square(a, "linalg.solve");
  check_defined(b, "linalg.solve", "B");
  if (!left) {  // X A = B: A^T X^T = B^T, for matrices only (torch's vector rule is for left)
    TANDEM_CHECK(b.dim() >= 2 && !(b.dim() == a.dim() - 1 &&
                                   Shape(a.shape().begin(), a.shape().end() - 1) == b.shape()),
                 "linalg.solve: with left=false, B must be a batch of matrices (..., k, n), not "
                 "vectors: got A ",
                 shape_str(a.shape()), " and B ", shape_str(b.shape()));
    return mT(solve(mT(a), mT(b)));
  }
  const SolveOperands s = broadcast_for_solve(a, b, true, "linalg.solve");
  const Tensor x = solve_matrices(s.a, s.b);
  return s.vector ? x.squeeze(-1) : x;
}

Tensor linalg::solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left,
                                bool unitriangular) {
  check_square(a, "linalg.solve_triangular");
  check_defined(b, "linalg.solve_triangular", "B");
  if (!left) return mT(solve_triangular(mT(a), mT(b), !upper, true, unitriangular));
  const SolveOperands s = broadcast_for_solve(a, b, false, "linalg.solve_triangular");
  return solve_triangular_left(s.a, s.b, upper, unitriangular);
}

Tensor linalg::cholesky(const Tensor& a, bool upper) {
  check_square(a, "linalg.cholesky");
  // U = L^T of A^T's factor: the upper form reads A's upper triangle, as torch's.
  return upper ? mT(cholesky_lower(mT(a))) : cholesky_lower(a);
}

Tensor linalg::matrix_power(const Tensor& a, int64_t n) {
  check_square(a, "linalg.matrix_power");
  if (n == 0) return identity_like(a.size(-1), a).expand(a.shape()).clone();
  if (n == 1) return a.clone();
  Tensor base = n < 0 ? inv(a) : a, result;
  // Repeated squaring: the product of base^(2^i) over the set bits of |n|.
  for (uint64_t e = n < 0 ? uint64_t(-(n + 1)) + 1 : uint64_t(n); e; e >>= 1) {
    if (e & 1) result = result.defined() ? matmul(result, base) : base;
    if (e > 1) base = matmul(base, base);
  }
  return result;
}

Tensor inverse(const Tensor& a) { return linalg::inv(a); }
Tensor det(const Tensor& a) { return linalg::det(a); }
std::tuple<Tensor, Tensor> slogdet(const Tensor& a) { return linalg::slogdet(a); }

Tensor logdet(const Tensor& a) {
  check_square(a, "logdet");
  auto [sign, log_abs] = linalg::slogdet(a);
  return add(log_abs, log(sign));  // NaN for a negative determinant, -inf for zero, as torch
}

Tensor cholesky(const Tensor& a, bool upper) { return linalg::cholesky(a, upper); }

Tensor cholesky_solve(const Tensor& b0, const Tensor& l0, bool upper) {
  check_square(l0, "cholesky_solve", "the factor");
  check_matrices(b0, "cholesky_solve", "B");
  // The batch dims broadcast first: the node's inputs are the expanded views, whose backward
  // sums the gradients back to each operand's shape.
  const SolveOperands s = broadcast_for_solve(l0, b0, false, "cholesky_solve");
  const Tensor& l = s.a;
  const Tensor& b = s.b;
  // A = L L^T (or U^T U), from the factor's triangle: X = L^-T (L^-1 B).
  Tensor x;
  {
    NoGradGuard no_grad;
    const Tensor lower = upper ? mT(l) : l;
    x = linalg::solve_triangular(mT(lower), linalg::solve_triangular(lower, b, false), true);
  }
  // torch's gradients, which treat the factor as a full matrix (those of (L L^T)^-1 B): dB =
  // A^-1 dX, dL = -(dB X^T + X dB^T) L (U (...) when upper).
  autograd::record(
      "cholesky_solve", {b, l}, x,
      [l, xd = x.detach(), upper](const Tensor& g) -> std::vector<Tensor> {
        const Tensor gb = cholesky_solve(g, l, upper), xs = autograd::saved_output(xd);
        const Tensor common = add(matmul(gb, mT(xs)), matmul(xs, mT(gb)));
        return {gb, neg(upper ? matmul(l, common) : matmul(common, l))};
      },
      kDifferentiable);
  return x;
}

Tensor cholesky_inverse(const Tensor& l, bool upper) {
  check_square(l, "cholesky_inverse", "the factor");
  const Tensor identity = identity_like(l.size(-1), l);
  return cholesky_solve(identity.expand(l.shape()), l, upper);
}

Tensor matrix_power(const Tensor& a, int64_t n) { return linalg::matrix_power(a, n); }

}  // namespace tandem
