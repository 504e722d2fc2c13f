// torch.linalg's decompositions and solvers: LU (inv, det, slogdet, solve, lu_factor, lu_solve),
// Cholesky and triangular solves, and the matrix exponential. Each factorization runs on the host
// in f64 through Eigen, for every device (a GPU tensor's matrices go to the host and back: there is
// no cuSOLVER backend), and its result is rounded to the input's dtype. Their backward closures are
// written with these ops and matmul, so gradients of gradients work.
#include <Eigen/Cholesky>
#include <Eigen/LU>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common.hpp"
#include "host_matrices.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/linalg.hpp"
#include "tandem/ops/reduction.hpp"
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

// LAPACK's getf2 on one m x n matrix in place: partial pivoting (the first largest |element| of
// the column), `pivots` 1-based; a zero pivot leaves its column unscaled, as getf2 does. Returns
// getf2's info: 0, or the 1-based index of the first zero pivot.
int32_t getf2(MatrixMap m, int32_t* pivots) {
  const Eigen::Index rows = m.rows(), cols = m.cols();
  int32_t info = 0;
  for (Eigen::Index j = 0; j < std::min(rows, cols); ++j) {
    Eigen::Index p = j;
    for (Eigen::Index i = j + 1; i < rows; ++i)
      if (std::abs(m(i, j)) > std::abs(m(p, j))) p = i;
    pivots[j] = static_cast<int32_t>(p + 1);
    if (p != j) m.row(p).swap(m.row(j));
    if (m(j, j) == 0.0) {
      if (info == 0) info = static_cast<int32_t>(j + 1);
      continue;
    }
    const Eigen::Index below = rows - j - 1, right = cols - j - 1;
    m.col(j).tail(below) /= m(j, j);
    m.bottomRightCorner(below, right).noalias() -= m.col(j).tail(below) * m.row(j).tail(right);
  }
  return info;
}

// L (m x k, unit lower) and U (k x n, upper) of a packed LU, as ops of it (so they carry its
// gradient).
Tensor unpack_l(const Tensor& lu) {
  const int64_t m = lu.size(-2), k = std::min(m, lu.size(-1));
  return add(tril(lu, -1).narrow(-1, 0, k),
             eye(m, k, TensorOptions(lu.dtype()).device(lu.device())));
}
Tensor unpack_u(const Tensor& lu) {
  return triu(lu).narrow(-2, 0, std::min(lu.size(-2), lu.size(-1)));
}

// The permutation matrices P (A = P L U) of getrf's pivots (..., k) for m rows, in like's dtype.
Tensor permutation_of(const Tensor& pivots, int64_t m, const Tensor& like) {
  const std::vector<int32_t> piv = pivots.to(kCPU).contiguous().to_vector<int32_t>();
  const Shape batch(pivots.shape().begin(), pivots.shape().end() - 1);
  const int64_t k = pivots.size(-1), count = numel_of(batch);
  std::vector<double> p(static_cast<size_t>(count * m * m), 0.0);
  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m; ++i) rows[i] = i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t to = piv[static_cast<size_t>(b * k + i)] - 1;
      TANDEM_CHECK(to >= 0 && to < m, "lu_unpack: pivot ", to + 1, " at position ", i + 1,
                   " of matrix ", b, " is out of range [1, ", m, "]");
      std::swap(rows[i], rows[to]);
    }
    // Row i of L U is row rows[i] of A: P[rows[i], i] = 1.
    for (int64_t i = 0; i < m; ++i) p[static_cast<size_t>((b * m + rows[i]) * m + i)] = 1.0;
  }
  return from_host(p, with_dims(batch, {m, m}), like);
}

// The gradient of A = P L U from those of L and U (PyTorch's linalg_lu_backward, derived from
// dL = L tril(X, -1), dU = triu(X) U with X = L^-1 P^T dA U^-1, and for a wide or tall A the
// parts of U or L beyond the square).
Tensor lu_backward(Tensor gl, Tensor gu, const Tensor& p, const Tensor& l, const Tensor& u) {
  const int64_t m = l.size(-2), n = u.size(-1);
  gl = tril(gl, -1);
  gu = triu(gu);
  Tensor ga;
  if (m <= n) {  // L m x m; U = [U1 U2], U1 m x m
    const Tensor u1 = u.narrow(-1, 0, m), gu1 = gu.narrow(-1, 0, m);
    Tensor lower = matmul(mT(l), gl);
    if (n > m) lower = sub(lower, matmul(gu.narrow(-1, m, n - m), mT(u.narrow(-1, m, n - m))));
    Tensor x = add(tril(lower, -1), triu(matmul(gu1, mT(u1))));
    x = linalg::solve_triangular(mT(u1), x, false, false);  // X U1^-T
    if (n > m) x = cat({x, gu.narrow(-1, m, n - m)}, -1);
    ga = linalg::solve_triangular(mT(l), x, true, true, true);  // L^-T [...]
  } else {                                                      // L = [L1; L2], L1 n x n; U n x n
    const Tensor l1 = l.narrow(-2, 0, n), gl1 = gl.narrow(-2, 0, n);
    const Tensor l2 = l.narrow(-2, n, m - n), gl2 = gl.narrow(-2, n, m - n);
    const Tensor upper = sub(matmul(gu, mT(u)), matmul(mT(l2), gl2));
    Tensor x = add(tril(matmul(mT(l1), gl1), -1), triu(upper));
    x = linalg::solve_triangular(mT(l1), x, true, true, true);              // L1^-T X
    ga = linalg::solve_triangular(mT(u), cat({x, gl2}, -2), false, false);  // [...] U^-T
  }
  return matmul(p, ga);
}

// lu_factor_ex: the packed LU is the recorded op (pivots and info carry no gradient). With
// `op`, a singular matrix is refused by its name.
std::tuple<Tensor, Tensor, Tensor> lu_factor_recorded(const Tensor& a, const char* op) {
  std::vector<double> v = host_matrices(a);
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(a);
  std::vector<int32_t> piv(static_cast<size_t>(numel_of(batch) * k)),
      info(static_cast<size_t>(numel_of(batch)), 0);
  each_matrix(v, m, n, [&](int64_t b, MatrixMap mat) {
    const int32_t zero_at = getf2(mat, piv.data() + b * k);
    TANDEM_CHECK(!op || zero_at == 0, op, ": matrix ", b,
                 " of the batch is singular (U's diagonal element ", zero_at,
                 " is zero), and lu_solve would divide by it; linalg::lu or "
                 "linalg::lu_factor_ex factor it");
    info[static_cast<size_t>(b)] = zero_at;
  });
  Tensor pivots, infos;
  {
    NoGradGuard no_grad;
    pivots = from_vector(piv, with_dims(batch, {k})).to(a.device());
    infos = from_vector(info, batch).to(a.device());
  }
  Tensor lu = from_host(v, a.shape(), a);
  autograd::record(
      "linalg_lu_factor", {a}, lu,
      [ld = lu.detach(), pivots](const Tensor& g) -> std::vector<Tensor> {
        const Tensor packed = autograd::saved_output(ld);
        const Tensor p = permutation_of(pivots, packed.size(-2), packed);
        const int64_t k = std::min(packed.size(-2), packed.size(-1));
        return {lu_backward(g.narrow(-1, 0, k), g.narrow(-2, 0, k), p, unpack_l(packed),
                            unpack_u(packed))};
      },
      kDifferentiable);
  return {lu, pivots, infos};
}

// Records `out`, A's inverse, as the op `name` of A: d(A^-1) = -A^-T dY A^-T (inv and inv_ex).
Tensor record_inverse(const char* name, const Tensor& a, Tensor out) {
  autograd::record(
      name, {a}, out,
      [od = out.detach()](const Tensor& g) -> std::vector<Tensor> {
        const Tensor y = mT(autograd::saved_output(od));
        return {neg(matmul(matmul(y, g), y))};
      },
      kDifferentiable);
  return out;
}

}  // namespace

Tensor linalg::inv(const Tensor& a) {
  check_square(a, "linalg.inv");
  return record_inverse("linalg_inv", a, inv_values(a));
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

std::tuple<Tensor, Tensor> linalg::inv_ex(const Tensor& a, bool check_errors) {
  check_square(a, "linalg.inv_ex");
  if (check_errors) {
    Tensor out = inv(a);
    return {out, zeros(batch_of(a), TensorOptions(DType::i32).device(a.device()))};
  }
  std::vector<double> v = host_matrices(a);
  const int64_t n = a.size(-1);
  std::vector<int32_t> info(static_cast<size_t>(numel_of(batch_of(a))), 0);
  const bool transposed = a.is_contiguous();
  each_matrix(v, n, n, [&](int64_t k, MatrixMap m) {
    // info as torch's: it hands LAPACK a row-major (contiguous) A as a column-major A^T, and
    // any other A as A. The inverse is inf and NaN for a singular matrix.
    const Eigen::PartialPivLU<Matrix> lu(transposed ? Matrix(m.transpose()) : Matrix(m));
    const auto diagonal = lu.matrixLU().diagonal();
    for (Eigen::Index i = diagonal.size() - 1; i >= 0; --i)
      if (diagonal(i) == 0.0) info[static_cast<size_t>(k)] = static_cast<int32_t>(i + 1);
    m = transposed ? Matrix(lu.inverse().transpose()) : Matrix(lu.inverse());
  });
  Tensor out = record_inverse("linalg_inv_ex", a, from_host(v, a.shape(), a));
  NoGradGuard no_grad;
  return {out, from_vector(info, batch_of(a)).to(a.device())};
}

namespace {
void check_lu_operand(const Tensor& a, bool pivot, const char* op) {
  check_matrices(a, op, "A");
  TANDEM_CHECK(pivot, op, ": LU without pivoting is not implemented (nor is it on torch's CPU)");
}
}  // namespace

std::tuple<Tensor, Tensor, Tensor> linalg::lu_factor_ex(const Tensor& a, bool pivot,
                                                        bool check_errors) {
  const char* op = "linalg.lu_factor_ex";
  check_lu_operand(a, pivot, op);
  return lu_factor_recorded(a, check_errors ? op : nullptr);
}

std::tuple<Tensor, Tensor> linalg::lu_factor(const Tensor& a, bool pivot) {
  const char* op = "linalg.lu_factor";
  check_lu_operand(a, pivot, op);
  auto [packed, pivots, info] = lu_factor_recorded(a, op);
  return {packed, pivots};
}

std::tuple<Tensor, Tensor, Tensor> linalg::lu(const Tensor& a, bool pivot) {
  check_lu_operand(a, pivot, "linalg.lu");
  auto [packed, pivots, info] = lu_factor_recorded(a, nullptr);
  return lu_unpack(packed, pivots);
}

std::tuple<Tensor, Tensor, Tensor> lu_unpack(const Tensor& lu, const Tensor& pivots,
                                             bool unpack_data, bool unpack_pivots) {
  check_matrices(lu, "lu_unpack", "LU");
  check_defined(pivots, "lu_unpack", "pivots");
  const int64_t k = std::min(lu.size(-2), lu.size(-1));
  TANDEM_CHECK(pivots.dtype() == DType::i32 && pivots.dim() >= 1 && pivots.size(-1) == k,
               "lu_unpack: pivots must be i32 of shape (..., ", k, ") for LU of shape ",
               shape_str(lu.shape()), ", got ", pivots.dtype(), " of shape ",
               shape_str(pivots.shape()));
  // The batch dims broadcast (torch's do where LU has them and the pivots do not).
  const Shape pivots_batch(pivots.shape().begin(), pivots.shape().end() - 1);
  Shape batch = broadcast_shapes(batch_of(lu), pivots_batch, "lu_unpack");
  Shape lu_shape = batch, pivots_shape = batch;
  lu_shape.insert(lu_shape.end(), {lu.size(-2), lu.size(-1)});
  pivots_shape.push_back(k);
  const Tensor packed = lu.shape() == lu_shape ? lu : lu.expand(lu_shape);
  const TensorOptions empty_options = TensorOptions(lu.dtype()).device(lu.device());
  Tensor p = unpack_pivots ? permutation_of(pivots.expand(pivots_shape), lu.size(-2), lu)
                           : zeros({0}, empty_options);
  if (!unpack_data) return {p, zeros({0}, empty_options), zeros({0}, empty_options)};
  return {p, unpack_l(packed), unpack_u(packed)};
}

Tensor linalg::lu_solve(const Tensor& lu, const Tensor& pivots, const Tensor& b, bool left,
                        bool adjoint) {
  check_square(lu, "linalg.lu_solve", "LU");
  check_matrices(b, "linalg.lu_solve", "B");
  TANDEM_CHECK(lu.dtype() == b.dtype(), "linalg.lu_solve: LU and B must have one dtype, got ",
               lu.dtype(), " and ", b.dtype());
  const int64_t n = lu.size(-1);
  TANDEM_CHECK(b.size(left ? -2 : -1) == n, "linalg.lu_solve: LU of shape ", shape_str(lu.shape()),
               " and B of shape ", shape_str(b.shape()), " do not match (", n,
               left ? " rows needed in B)" : " columns needed in B)");
  if (!left) return mT(lu_solve(lu, pivots, mT(b), true, !adjoint));  // A^T X^T = B^T
  auto [p, l, u] = lu_unpack(lu, pivots);
  if (adjoint)  // A^T = U^T L^T P^T: X = P L^-T U^-T B
    return matmul(p, solve_triangular(mT(l), solve_triangular(mT(u), b, false), true, true, true));
  // X = U^-1 L^-1 P^T B
  return solve_triangular(u, solve_triangular(l, matmul(mT(p), b), false, true, true), true);
}

Tensor linalg::matrix_exp(const Tensor& a) {
  check_square(a, "linalg.matrix_exp");
  const int64_t n = a.size(-1);
  if (a.numel() == 0) return a.clone();
  if (n == 1) return exp(a);
  // Higham's coefficients b0..b13 and the 1-norm below which degree 13 needs no scaling.
  static constexpr double b[14] = {64764752532480000.0,
                                   32382376266240000.0,
                                   7771770303897600.0,
                                   1187353796428800.0,
                                   129060195264000.0,
                                   10559470521600.0,
                                   670442572800.0,
                                   33522128640.0,
                                   1323241920.0,
                                   40840800.0,
                                   960960.0,
                                   16380.0,
                                   182.0,
                                   1.0};
  constexpr double theta13 = 5.371920351148152;
  const Shape batch = batch_of(a);
  // Each matrix's scaling s (A / 2^s within theta13): a constant of the computation. A matrix
  // with inf or NaN gives NaN (torch's result for inf), computed as a zero matrix meanwhile.
  std::vector<double> scale, steps;
  std::vector<bool> finite;
  {
    NoGradGuard no_grad;
    const Tensor norms = matrix_norm(a, 1.0).to(DType::f64).to(kCPU).contiguous();
    for (double norm1 : norms.to_vector<double>()) {
      finite.push_back(std::isfinite(norm1));
      const double s = finite.back() && norm1 > theta13 ? std::ceil(std::log2(norm1 / theta13)) : 0;
      steps.push_back(s);
      scale.push_back(finite.back() ? std::ldexp(1.0, -static_cast<int>(s)) : 0.0);
    }
  }
  const auto batch_mask = [&](const std::vector<bool>& flags) {
    NoGradGuard no_grad;
    return from_vector(flags, with_dims(batch, {1, 1})).to(a.device());
  };
  const bool all_finite = std::all_of(finite.begin(), finite.end(), [](bool f) { return f; });
  const Tensor finite_mask = all_finite ? Tensor() : batch_mask(finite);
  const Tensor x = mul(all_finite ? a : where(finite_mask, a, 0.0),
                       from_host(scale, with_dims(batch, {1, 1}), a));
  const Tensor identity = identity_like(n, a);
  const Tensor x2 = matmul(x, x), x4 = matmul(x2, x2), x6 = matmul(x4, x2);
  const Tensor u_inner = add(add(mul(x6, b[13]), mul(x4, b[11])), mul(x2, b[9]));
  const Tensor u_poly =
      add(add(add(add(matmul(x6, u_inner), mul(x6, b[7])), mul(x4, b[5])), mul(x2, b[3])),
          mul(identity, b[1]));
  const Tensor u = matmul(x, u_poly);
  const Tensor v_inner = add(add(mul(x6, b[12]), mul(x4, b[10])), mul(x2, b[8]));
  const Tensor v =
      add(add(add(add(matmul(x6, v_inner), mul(x6, b[6])), mul(x4, b[4])), mul(x2, b[2])),
          mul(identity, b[0]));
  Tensor r = solve(sub(v, u), add(v, u));
  // Squared s times, each matrix as often as its own s.
  const double most = *std::max_element(steps.begin(), steps.end());
  for (int i = 0; i < static_cast<int>(most); ++i) {
    std::vector<bool> more;
    for (double s : steps) more.push_back(s > i);
    const Tensor squared = matmul(r, r);
    const bool all = std::all_of(more.begin(), more.end(), [](bool f) { return f; });
    r = all ? squared : where(batch_mask(more), squared, r);
  }
  return all_finite ? r : where(finite_mask, r, std::numeric_limits<double>::quiet_NaN());
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
Tensor matrix_exp(const Tensor& a) { return linalg::matrix_exp(a); }

}  // namespace tandem
