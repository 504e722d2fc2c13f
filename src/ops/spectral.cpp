// torch.linalg's symmetric eigendecomposition, SVD and QR, and what is built on them: eigvalsh,
// svdvals, matrix_norm, pinv, matrix_rank. As in decompositions.cpp, each factorization runs on
// the host in f64 through Eigen for every device, and its result is rounded to the input's
// dtype. The backward closures are PyTorch's formulas (its FunctionsManual.cpp) written with
// ops, so gradients of gradients work, and the golden tests compare them with torch's.
#include <Eigen/Eigenvalues>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <functional>
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

// A batch of vectors on the diagonals of matrices: (..., n) -> (..., n, n) (a select, so an inf
// spreads no NaN into the rest of its row).
Tensor diag_embed(const Tensor& v) {
  const Tensor on_diagonal = eye(v.size(-1), TensorOptions(DType::boolean).device(v.device()));
  return where(on_diagonal, v.unsqueeze(-1), 0.0);
}

// Refuses a factorization Eigen could not finish: non-finite elements (its SVDs stop at them,
// leaving their results unwritten) or no convergence.
void check_finished(Eigen::ComputationInfo info, const char* op, int64_t k) {
  TANDEM_CHECK(info == Eigen::Success, op, ": the factorization of matrix ", k,
               " of the batch failed (its elements are not all finite, or it did not converge)");
}

bool all_zero(const Tensor& t) {
  NoGradGuard no_grad;
  return t.eq(0.0).all().item<bool>();
}

// Several outputs of one factorization under one autograd node: each output's matrices
// flattened side by side along a last dim, and the outputs given back as views of their parts.
// A gradient into any of them reaches the node, as zeros for the others.
Tensor pack(const std::vector<Tensor>& parts, const Shape& batch,
            const std::vector<Shape>& shapes) {
  std::vector<Tensor> flat;
  for (size_t i = 0; i < parts.size(); ++i) {
    Shape s = batch;
    s.push_back(numel_of(shapes[i]));
    flat.push_back(parts[i].reshape(s));
  }
  return cat(flat, -1);
}

std::vector<Tensor> unpack(const Tensor& packed, const Shape& batch,
                           const std::vector<Shape>& shapes) {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const Shape& m : shapes) {
    Shape s = batch;
    s.insert(s.end(), m.begin(), m.end());
    out.push_back(packed.narrow(-1, at, numel_of(m)).reshape(s));
    at += numel_of(m);
  }
  return out;
}

// The gradient of A from the gradients of the outputs and the outputs (all of the same batch).
using OutputsBackward =
    std::function<Tensor(const std::vector<Tensor>& grads, const std::vector<Tensor>& outputs)>;

// Records `outputs` of a factorization of `a` as one node (see pack), when a needs a gradient.
std::vector<Tensor> record_outputs(const char* name, const Tensor& a, std::vector<Tensor> outputs,
                                   OutputsBackward backward) {
  if (!autograd::needs_grad({a})) return outputs;
  const Shape batch = batch_of(a);
  std::vector<Shape> shapes;
  for (const Tensor& o : outputs)
    shapes.emplace_back(o.shape().begin() + batch.size(), o.shape().end());
  Tensor packed;
  {
    NoGradGuard no_grad;
    packed = pack(outputs, batch, shapes);
  }
  autograd::record(
      name, {a}, packed,
      [pd = packed.detach(), batch, shapes, backward](const Tensor& g) -> std::vector<Tensor> {
        return {
            backward(unpack(g, batch, shapes), unpack(autograd::saved_output(pd), batch, shapes))};
      },
      kDifferentiable);
  autograd::save_for_backward(packed, {packed});  // an in-place change of an output is refused
  return unpack(packed, batch, shapes);
}

// A node whose backward refuses by name: outputs torch does not differentiate.
void record_refusal(const char* name, const Tensor& a, Tensor& out, std::string message) {
  autograd::record(name, {a}, out, [message](const Tensor&) -> std::vector<Tensor> {
    TANDEM_THROW(Error, message);
  });
}

// Host buffers of `count` matrices rows x cols, each the identity's leading block: what the
// full factors of empty matrices are, and the start of every other.
std::vector<double> identities(int64_t count, int64_t rows, int64_t cols) {
  std::vector<double> v(static_cast<size_t>(count * rows * cols), 0.0);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < std::min(rows, cols); ++i)
      v[static_cast<size_t>(b * rows * cols + i * cols + i)] = 1.0;
  return v;
}

// --- eigh ---------------------------------------------------------------------------------

// Eigenvalues ascending and eigenvectors as columns (LAPACK's syevd), of the symmetric matrices
// A's lower triangle gives (or its upper, when not `lower`).
std::vector<Tensor> eigh_values(const Tensor& a, bool lower, bool vectors, const char* op) {
  std::vector<double> v = host_matrices(lower ? a : mT(a));  // A^T's lower triangle: A's upper
  const int64_t n = a.size(-1);
  const Shape batch = batch_of(a);
  std::vector<double> values(static_cast<size_t>(numel_of(batch) * n));
  each_matrix(v, n, n, [&](int64_t k, MatrixMap m) {
    const Eigen::SelfAdjointEigenSolver<Matrix> solver(
        m, vectors ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    check_finished(solver.info(), op, k);
    Eigen::Map<Eigen::VectorXd>(values.data() + k * n, n) = solver.eigenvalues();
    if (vectors) m = solver.eigenvectors();
  });
  std::vector<Tensor> out{from_host(values, with_dims(batch, {n}), a)};
  if (vectors) out.push_back(from_host(v, a.shape(), a));
  return out;
}

// torch's linalg_eig_backward for a symmetric A = Q diag(L) Q^T:
// dA = Q (diag(dL) + skew(Q^T dQ) / E) Q^T, E_ij = L_j - L_i (ones on its diagonal).
Tensor eigh_backward(const std::vector<Tensor>& g, const std::vector<Tensor>& out) {
  const Tensor &gl = g[0], &gq = g[1], &l = out[0], &q = out[1];
  Tensor inner = diag_embed(gl);
  if (!all_zero(gq)) {  // eigenvalues alone: no division by their gaps (torch's undefined dQ)
    const Tensor vhgv = matmul(mT(q), gq);
    const Tensor skew = mul(sub(vhgv, mT(vhgv)), 0.5);
    const Tensor gaps = add(sub(l.unsqueeze(-2), l.unsqueeze(-1)), identity_like(l.size(-1), l));
    inner = add(inner, div(skew, gaps));
  }
  return matmul(matmul(q, inner), mT(q));
}

bool uplo_lower(const std::string& uplo, const char* op) {
  TANDEM_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u", op,
               ": UPLO must be 'L' or 'U', got '", uplo, "'");
  return uplo == "L" || uplo == "l";
}

// --- SVD ----------------------------------------------------------------------------------

// U (m x ucols), S (k), Vh (vrows x n) with S descending; the full factors when `full`.
std::vector<Tensor> svd_values(const Tensor& a, bool full, bool vectors, const char* op) {
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const int64_t ucols = full ? m : k, vrows = full ? n : k;
  const Shape batch = batch_of(a);
  const int64_t count = numel_of(batch);
  std::vector<double> v = host_matrices(a), s(static_cast<size_t>(count * k));
  std::vector<double> u = identities(count, m, ucols), vh = identities(count, vrows, n);
  const unsigned options = !vectors ? 0u
                           : full   ? unsigned(Eigen::ComputeFullU | Eigen::ComputeFullV)
                                    : unsigned(Eigen::ComputeThinU | Eigen::ComputeThinV);
  each_matrix(v, m, n, [&](int64_t b, MatrixMap mat) {
    const Eigen::JacobiSVD<Matrix> svd(mat, options);
    check_finished(svd.info(), op, b);
    Eigen::Map<Eigen::VectorXd>(s.data() + b * k, k) = svd.singularValues();
    if (!vectors) return;
    MatrixMap(u.data() + b * m * ucols, m, ucols) = svd.matrixU();
    MatrixMap(vh.data() + b * vrows * n, vrows, n) = svd.matrixV().transpose();
  });
  std::vector<Tensor> out{from_host(s, with_dims(batch, {k}), a)};
  if (vectors) {
    out.insert(out.begin(), from_host(u, with_dims(batch, {m, ucols}), a));
    out.push_back(from_host(vh, with_dims(batch, {vrows, n}), a));
  }
  return out;
}

// torch's svd_backward, for the reduced factors (the full ones' first k columns of U and rows
// of Vh, as torch narrows them).
Tensor svd_backward(const std::vector<Tensor>& g, const std::vector<Tensor>& out) {
  const int64_t k = out[1].size(-1);
  const Tensor u = out[0].narrow(-1, 0, k), s = out[1], vh = out[2].narrow(-2, 0, k);
  const Tensor gu = g[0].narrow(-1, 0, k), gs = g[1], gvh = g[2].narrow(-2, 0, k);
  const int64_t m = u.size(-2), n = vh.size(-1);
  if (all_zero(gu) && all_zero(gvh))  // singular values alone: U diag(dS) Vh
    return m >= n ? matmul(u, mul(gs.unsqueeze(-1), vh)) : matmul(mul(u, gs.unsqueeze(-2)), vh);
  const auto skew = [](const Tensor& x) { return sub(x, mT(x)); };
  const Tensor uhgu = skew(matmul(mT(u), gu)), vhgv = skew(matmul(vh, mT(gvh)));
  // (skew(U^T dU) S + S skew(V^T dV)) / E + diag(dS), E_ij = S_j^2 - S_i^2 (ones on its diagonal)
  const Tensor s2 = mul(s, s);
  const Tensor gaps = add(sub(s2.unsqueeze(-2), s2.unsqueeze(-1)), identity_like(k, s));
  Tensor ga =
      add(div(add(mul(uhgu, s.unsqueeze(-2)), mul(s.unsqueeze(-1), vhgv)), gaps), diag_embed(gs));
  // (only where that gradient is not zero, as torch's for an undefined one: S^-1 is inf at rank
  // deficiency)
  if (m > k && !all_zero(gu)) {  // the part of dU outside U's span: (I - U U^T) dU S^-1
    const Tensor gu_sinv = div(gu, s.unsqueeze(-2));
    ga = add(matmul(u, ga), sub(gu_sinv, matmul(u, matmul(mT(u), gu_sinv))));
    return matmul(ga, vh);
  }
  if (n > k && !all_zero(gvh)) {  // and dVh's outside Vh's: S^-1 dVh (I - V Vh)
    const Tensor sinv_gvh = div(gvh, s.unsqueeze(-1));
    ga = add(matmul(ga, vh), sub(sinv_gvh, matmul(matmul(sinv_gvh, mT(vh)), vh)));
    return matmul(u, ga);
  }
  return matmul(u, matmul(ga, vh));
}

void check_no_driver(const std::optional<std::string>& driver, const char* op) {
  TANDEM_CHECK(!driver, op, ": driver='", driver.value_or(""),
               "' is refused: as torch, a driver is only taken for CUDA inputs with cuSOLVER, and "
               "tandem computes this on the host");
}

// --- QR -----------------------------------------------------------------------------------

// Householder QR (LAPACK's geqrf: R's diagonal may be negative): Q (m x q), R (q x n), q = m
// when `complete`, else min(m, n).
std::vector<Tensor> qr_values(const Tensor& a, bool complete) {
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const int64_t qcols = complete ? m : k;
  const Shape batch = batch_of(a);
  const int64_t count = numel_of(batch);
  std::vector<double> v = host_matrices(a), q = identities(count, m, qcols),
                      r(static_cast<size_t>(count * qcols * n), 0.0);
  each_matrix(v, m, n, [&](int64_t b, MatrixMap mat) {
    const Eigen::HouseholderQR<Matrix> qr(mat);
    MatrixMap(q.data() + b * m * qcols, m, qcols) = qr.householderQ() * Matrix::Identity(m, qcols);
    MatrixMap(r.data() + b * qcols * n, qcols, n) =
        qr.matrixQR().topRows(qcols).triangularView<Eigen::Upper>();
  });
  return {from_host(q, with_dims(batch, {m, qcols}), a),
          from_host(r, with_dims(batch, {qcols, n}), a)};
}

// torch's linalg_qr_backward for m >= n (R square): dA = (dQ + Q syminvadj(triu(M))) R^-T with
// M = dR R^T - Q^T dQ, syminvadj(X) = X + X^T less X's diagonal once.
Tensor qr_backward(const std::vector<Tensor>& g, const std::vector<Tensor>& out) {
  const Tensor &gq = g[0], &gr = g[1], &q = out[0], &r = out[1];
  const Tensor t = triu(sub(matmul(gr, mT(r)), matmul(mT(q), gq)));
  const Tensor sym = sub(add(t, mT(t)), diag_embed(diagonal(t, 0, -2, -1)));
  return linalg::solve_triangular(mT(r), add(gq, matmul(q, sym)), /*upper=*/false, /*left=*/false);
}

// --- norms and the pseudo-inverse ---------------------------------------------------------

// The two dims of a matrix norm, each wrapped into [0, dim), distinct.
std::pair<int64_t, int64_t> matrix_dims(const Tensor& a, const Shape& dims, const char* op) {
  TANDEM_CHECK(dims.size() == 2, op, ": dim must be a 2-tuple, got ", dims.size(), " dims");
  TANDEM_CHECK(a.dim() >= 2, op, ": the input must have at least 2 dimensions, got shape ",
               shape_str(a.shape()));
  const int64_t d0 = wrap_dim(dims[0], a.dim(), op), d1 = wrap_dim(dims[1], a.dim(), op);
  TANDEM_CHECK(d0 != d1, op, ": dims must be different, got (", dims[0], ", ", dims[1], ")");
  return {d0, d1};
}

// A matrix norm of a's matrices over dims (d0, d1) through `norm` of the matrices moved last.
Tensor matrix_norm_over(const Tensor& a0, const Shape& dims, bool keepdim,
                        std::optional<DType> dtype, const char* op,
                        const std::function<Tensor(const Tensor&)>& norm) {
  check_defined(a0, op, "input");
  TANDEM_CHECK(is_floating(a0.dtype()) && (!dtype || is_floating(*dtype)), op,
               ": expected a floating-point input and dtype, got ", a0.dtype(),
               dtype ? " and " + std::string(dtype_name(*dtype)) : std::string());
  const Tensor a = dtype ? a0.to(*dtype) : a0;
  const auto [d0, d1] = matrix_dims(a, dims, op);
  Tensor r = norm(movedim(a, Shape{d0, d1}, Shape{-2, -1}));
  if (keepdim) r = r.unsqueeze(std::min(d0, d1)).unsqueeze(std::max(d0, d1));
  return r;
}

// torch's default rtol for a rank: the dtype's eps times max(m, n).
double default_rtol(const Tensor& a) {
  const double eps = a.dtype() == DType::f32 ? std::numeric_limits<float>::epsilon()
                                             : std::numeric_limits<double>::epsilon();
  return eps * double(std::max(a.size(-2), a.size(-1)));
}

// The rank of each matrix of `a` from its singular values (or |eigenvalues|) `values`: how
// many lie above max(atol, rtol * the largest), as an i64 tensor of a's batch shape.
Tensor rank_from(const Tensor& values, double atol, double rtol, const Tensor& a) {
  NoGradGuard no_grad;
  if (values.size(-1) == 0) return zeros(batch_of(a), TensorOptions(DType::i64).device(a.device()));
  const Tensor largest = amax(values, Shape{-1}, true);
  const Tensor tol = maximum(full_like(largest, atol), mul(largest, rtol));
  return sum(gt(values, tol), Shape{-1}, false, DType::i64);
}

// torch's pinv_backward: the derivative of A^+ through A^+ itself (as smooth as A's rank).
Tensor pinv_backward(const Tensor& grad, const Tensor& pinv_a, const Tensor& a) {
  const Tensor pinv_ah = mT(pinv_a), gradh = mT(grad);
  if (a.size(-2) <= a.size(-1)) {
    const Tensor k = matmul(gradh, pinv_a), k_pinv_ah = matmul(k, pinv_ah);
    return add(sub(k_pinv_ah, mT(matmul(pinv_a, k))),
               sub(matmul(matmul(pinv_ah, pinv_a), sub(gradh, matmul(k, a))),
                   matmul(matmul(a, pinv_a), k_pinv_ah)));
  }
  const Tensor k = matmul(pinv_a, gradh), pinv_ah_k = matmul(pinv_ah, k);
  return add(sub(matmul(matmul(sub(gradh, matmul(a, k)), pinv_a), pinv_ah), mT(matmul(k, pinv_a))),
             sub(pinv_ah_k, matmul(matmul(pinv_ah_k, pinv_a), a)));
}

}  // namespace

std::tuple<Tensor, Tensor> linalg::eigh(const Tensor& a, const std::string& uplo) {
  check_square(a, "linalg.eigh");
  const bool lower = uplo_lower(uplo, "linalg.eigh");
  const std::vector<Tensor> out =
      record_outputs("linalg_eigh", a, eigh_values(a, lower, true, "linalg.eigh"), eigh_backward);
  return {out[0], out[1]};
}

Tensor linalg::eigvalsh(const Tensor& a, const std::string& uplo) {
  check_square(a, "linalg.eigvalsh");
  const bool lower = uplo_lower(uplo, "linalg.eigvalsh");
  if (autograd::needs_grad({a})) return std::get<0>(eigh(a, uplo));  // the gradient needs Q
  return eigh_values(a, lower, false, "linalg.eigvalsh")[0];
}

std::tuple<Tensor, Tensor, Tensor> linalg::svd(const Tensor& a, bool full_matrices,
                                               const std::optional<std::string>& driver) {
  check_matrices(a, "linalg.svd", "A");
  check_no_driver(driver, "linalg.svd");
  const std::vector<Tensor> out = record_outputs(
      "linalg_svd", a, svd_values(a, full_matrices, true, "linalg.svd"), svd_backward);
  return {out[0], out[1], out[2]};
}

Tensor linalg::svdvals(const Tensor& a, const std::optional<std::string>& driver) {
  check_matrices(a, "linalg.svdvals", "A");
  check_no_driver(driver, "linalg.svdvals");
  if (autograd::needs_grad({a})) return std::get<1>(svd(a, false));  // the gradient needs U, Vh
  return svd_values(a, false, false, "linalg.svdvals")[0];
}

std::tuple<Tensor, Tensor> linalg::qr(const Tensor& a, const std::string& mode) {
  check_matrices(a, "linalg.qr", "A");
  TANDEM_CHECK(mode == "reduced" || mode == "complete" || mode == "r",
               "linalg.qr: mode must be 'reduced' (the default), 'complete' or 'r', got '", mode,
               "'");
  const int64_t m = a.size(-2), n = a.size(-1);
  if (mode == "r") {  // R alone: Q is empty, as torch's, and R has no derivative without Q
    Tensor r = qr_values(a, false)[1];
    record_refusal("linalg_qr", a, r,
                   "linalg.qr: the derivative of R depends on Q, which is not computed when "
                   "mode='r'; use mode='reduced' to differentiate through linalg.qr");
    return {empty({0}, TensorOptions(a.dtype()).device(a.device())), r};
  }
  if (m < n) {  // A = Q [R1 R2]: the square A1 = Q R1, then R2 = Q^T A2 (so both differentiate)
    auto [q, r1] = qr(a.narrow(-1, 0, m), "reduced");
    return {q, cat({r1, matmul(mT(q), a.narrow(-1, m, n - m))}, -1)};
  }
  std::vector<Tensor> out = qr_values(a, mode == "complete");
  if (mode == "complete" && m > n) {  // Q's last m - n columns are not determined by A
    const Shape batch = batch_of(a);
    const std::vector<Shape> shapes{{m, m}, {m, n}};
    Tensor packed = pack(out, batch, shapes);
    record_refusal("linalg_qr", a, packed,
                   "linalg.qr: the QR decomposition is not differentiable when mode='complete' "
                   "and A has more rows than columns");
    const std::vector<Tensor> parts = unpack(packed, batch, shapes);
    return {parts[0], parts[1]};
  }
  out = record_outputs("linalg_qr", a, std::move(out), qr_backward);
  return {out[0], out[1]};
}

Tensor linalg::matrix_norm(const Tensor& a, double ord, const Shape& dim, bool keepdim,
                           std::optional<DType> dtype) {
  const char* op = "linalg.matrix_norm";
  const double inf = std::numeric_limits<double>::infinity();
  TANDEM_CHECK(ord == 1 || ord == -1 || ord == 2 || ord == -2 || ord == inf || ord == -inf, op,
               ": ord must be one of 1, -1, 2, -2, inf, -inf, 'fro' or 'nuc', got ", ord);
  return matrix_norm_over(a, dim, keepdim, dtype, op, [&](const Tensor& x) {
    if (std::abs(ord) == 2) {  // the largest or smallest singular value
      const Tensor s = svdvals(x);
      return ord > 0 ? amax(s, Shape{-1}) : amin(s, Shape{-1});
    }
    // 1: the largest column sum of |x|; inf: the largest row sum (the smallest for -1, -inf)
    const Tensor sums = sum(abs(x), Shape{std::abs(ord) == 1 ? -2 : -1});
    return ord > 0 ? amax(sums, Shape{-1}) : amin(sums, Shape{-1});
  });
}

Tensor linalg::matrix_norm(const Tensor& a, const std::string& ord, const Shape& dim, bool keepdim,
                           std::optional<DType> dtype) {
  const char* op = "linalg.matrix_norm";
  TANDEM_CHECK(ord == "fro" || ord == "nuc", op,
               ": ord must be 'fro' or 'nuc' (or a number: 1, -1, 2, -2, inf, -inf), got '", ord,
               "'");
  return matrix_norm_over(a, dim, keepdim, dtype, op, [&](const Tensor& x) {
    return ord == "fro" ? vector_norm(x, 2.0, Shape{-2, -1}) : sum(svdvals(x), Shape{-1});
  });
}

namespace {

// pinv, recorded; with `singular_values`, A's singular values (descending, no history) from the
// same SVD (lstsq's, which would otherwise factor A twice).
Tensor pinv_recorded(const Tensor& a, double rcond, bool hermitian, Tensor* singular_values) {
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  std::vector<double> v = host_matrices(a), out(static_cast<size_t>(v.size()), 0.0), values;
  if (singular_values) values.resize(static_cast<size_t>(numel_of(batch_of(a)) * k));
  // A^+ = V diag(1/S) U^T over the singular values above rcond times the largest (for a
  // symmetric A, Q diag(1/L) Q^T over |L| above rcond times the largest |L|), as torch's.
  each_matrix(v, m, n, [&](int64_t b, MatrixMap mat) {
    MatrixMap p(out.data() + b * m * n, n, m);
    const auto inverted = [&](const Eigen::VectorXd& values) {
      const double tol = rcond * values.cwiseAbs().maxCoeff();
      Eigen::VectorXd inv(values.size());
      for (Eigen::Index i = 0; i < values.size(); ++i)
        inv(i) = std::abs(values(i)) > tol ? 1.0 / values(i) : 0.0;
      return inv;
    };
    if (hermitian) {
      const Eigen::SelfAdjointEigenSolver<Matrix> solver(mat);
      check_finished(solver.info(), "linalg.pinv", b);
      const Matrix& q = solver.eigenvectors();
      p = q * inverted(solver.eigenvalues()).asDiagonal() * q.transpose();
    } else {
      const Eigen::JacobiSVD<Matrix> svd(mat, Eigen::ComputeThinU | Eigen::ComputeThinV);
      check_finished(svd.info(), "linalg.pinv", b);
      p = svd.matrixV() * inverted(svd.singularValues()).asDiagonal() * svd.matrixU().transpose();
      if (singular_values)
        Eigen::Map<Eigen::VectorXd>(values.data() + b * k, k) = svd.singularValues();
    }
  });
  Tensor result = from_host(out, with_dims(batch_of(a), {n, m}), a);
  autograd::record(
      "linalg_pinv", {a}, result,
      [a, rd = result.detach()](const Tensor& g) -> std::vector<Tensor> {
        return {pinv_backward(g, autograd::saved_output(rd), a)};
      },
      kDifferentiable);
  autograd::save_for_backward(result, {a, result});
  if (singular_values) *singular_values = from_host(values, with_dims(batch_of(a), {k}), a);
  return result;
}

}  // namespace

Tensor linalg::pinv(const Tensor& a, double rcond, bool hermitian) {
  check_matrices(a, "linalg.pinv", "A");
  if (hermitian) check_square(a, "linalg.pinv");
  return pinv_recorded(a, rcond, hermitian, nullptr);
}

Tensor linalg::matrix_rank(const Tensor& a, std::optional<double> atol, std::optional<double> rtol,
                           bool hermitian) {
  check_matrices(a, "linalg.matrix_rank", "A");
  NoGradGuard no_grad;
  const Tensor s = hermitian ? abs(eigvalsh(a)) : svdvals(a);
  // torch's default: rtol = eps * max(m, n) unless an atol above 0 is given.
  const double r = rtol.value_or(atol && *atol > 0 ? 0.0 : default_rtol(a));
  return rank_from(s, atol.value_or(0.0), r, a);
}

Tensor linalg::matrix_rank(const Tensor& a, double tol, bool hermitian) {
  return matrix_rank(a, tol, 0.0, hermitian);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> linalg::lstsq(const Tensor& a, const Tensor& b0,
                                                         std::optional<double> rcond,
                                                         const std::optional<std::string>& driver) {
  const char* op = "linalg.lstsq";
  check_matrices(a, op, "A");
  check_defined(b0, op, "B");
  const std::string drv = driver.value_or("gelsy");
  TANDEM_CHECK(drv == "gels" || drv == "gelsy" || drv == "gelsd" || drv == "gelss", op,
               ": driver must be one of 'gels', 'gelsy' (the default), 'gelsd' or 'gelss', got '",
               drv, "'");
  TANDEM_CHECK(a.dtype() == b0.dtype(), op, ": A and B must have one dtype, got ", a.dtype(),
               " and ", b0.dtype());
  check_inputs({a, b0}, op);
  // B is a vector (or a batch of them) when it is one dim short of A with A's leading shape.
  const bool vector = b0.dim() == a.dim() - 1 && Shape(a.shape().begin(), a.shape().end() - 1) ==
                                                     Shape(b0.shape().begin(), b0.shape().end());
  const Tensor b = vector ? b0.unsqueeze(-1) : b0;
  check_matrices(b, op, "B");
  const int64_t m = a.size(-2), n = a.size(-1);
  TANDEM_CHECK(b.size(-2) == m, op, ": A of shape ", shape_str(a.shape()), " and B of shape ",
               shape_str(b0.shape()), " do not match (", m, " rows against ", b.size(-2), ")");
  // The rank from the singular values above rcond times the largest (torch's default rcond:
  // the dtype's eps times max(m, n)); the solution is the minimum-norm one, A^+ B, as gelsy's
  // and gelsd's, and its gradients are torch's (pinv's and the product's).
  const double cond = drv == "gels" ? 0.0 : rcond.value_or(default_rtol(a));
  const TensorOptions index_options = TensorOptions(DType::i64).device(a.device());
  const TensorOptions empty_options = TensorOptions(a.dtype()).device(a.device());
  Tensor rank = empty({0}, index_options), values = empty({0}, empty_options);
  Tensor residuals = empty({0}, empty_options);
  Tensor solution = matmul(pinv_recorded(a, cond, false, drv == "gels" ? nullptr : &values), b);
  if (drv != "gels") {
    NoGradGuard no_grad;
    rank = rank_from(values, 0.0, cond, a);
  }
  // ||A X - B||^2 per column, where A has more rows than columns and every matrix full rank.
  const bool full_rank = drv == "gels" || !rank.lt(double(n)).any().item<bool>();
  if (drv != "gelsy" && m > n && full_rank) {
    const Tensor r = sub(matmul(a, solution), b);
    residuals = sum(mul(r, r), Shape{-2});  // (..., 1) for vectors too, as torch's
  }
  if (drv != "gelsd" && drv != "gelss") values = empty({0}, empty_options);
  return {vector ? solution.squeeze(-1) : solution, residuals, rank, values};
}

Tensor linalg::norm(const Tensor& a, std::optional<double> ord, OptionalIntArrayRef dim,
                    bool keepdim, std::optional<DType> dtype) {
  check_defined(a, "linalg.norm", "input");
  if (dim)
    TANDEM_CHECK(dim->size() == 1 || dim->size() == 2,
                 "linalg.norm: dim must name 1 dim (a vector norm) or 2 (a matrix norm), got ",
                 shape_str(*dim));
  else if (ord)
    TANDEM_CHECK(a.dim() == 1 || a.dim() == 2,
                 "linalg.norm: with an ord but no dim, the input must be 1-d or 2-d, got shape ",
                 shape_str(a.shape()));
  if (ord && (dim ? dim->size() == 2 : a.dim() == 2))
    return matrix_norm(a, *ord, dim.value_or(Shape{0, 1}), keepdim, dtype);
  // Without an ord, the 2-norm of the elements over dim (the Frobenius norm over two).
  return vector_norm(a, ord.value_or(2.0), dim.value_or(Shape{}), keepdim, dtype);
}

Tensor linalg::norm(const Tensor& a, const std::string& ord, OptionalIntArrayRef dim, bool keepdim,
                    std::optional<DType> dtype) {
  check_defined(a, "linalg.norm", "input");
  TANDEM_CHECK(dim ? dim->size() == 2 : a.dim() == 2, "linalg.norm: ord '", ord,
               "' is a matrix norm: it needs two dims, or a 2-d input without dim; got shape ",
               shape_str(a.shape()), dim ? " and dim " + shape_str(*dim) : std::string());
  return matrix_norm(a, ord, dim.value_or(Shape{0, 1}), keepdim, dtype);
}

namespace {

// ||A|| ||A^-1|| in `norm`, inf where A is singular and where the product is NaN (0 inf, or a
// NaN in A), as torch's cond for ords other than +-2.
Tensor cond_through_inverse(const Tensor& a, const std::function<Tensor(const Tensor&)>& norm) {
  const double inf = std::numeric_limits<double>::infinity();
  auto [inverse, info] = linalg::inv_ex(a);
  const Tensor singular = gt(info, 0.0).unsqueeze(-1).unsqueeze(-1);
  const Tensor product = mul(norm(a), norm(where(singular, inf, inverse)));
  return where(isnan(product), inf, product);
}

Tensor no_matrices_cond(const Tensor& a) {  // torch's 0 for empty matrices
  return zeros(batch_of(a), TensorOptions(a.dtype()).device(a.device()));
}

}  // namespace

Tensor linalg::cond(const Tensor& a, std::optional<double> ord) {
  const char* op = "linalg.cond";
  check_matrices(a, op, "A");
  const double o = ord.value_or(2.0), inf = std::numeric_limits<double>::infinity();
  TANDEM_CHECK(o == 1 || o == -1 || o == 2 || o == -2 || o == inf || o == -inf, op,
               ": ord must be one of 1, -1, 2, -2, inf, -inf, 'fro' or 'nuc', got ", o);
  if (a.numel() == 0) return no_matrices_cond(a);
  if (std::abs(o) == 2) {  // the ratio of the extreme singular values, for any shape
    const Tensor s = svdvals(a);
    const Tensor largest = s.narrow(-1, 0, 1), smallest = s.narrow(-1, s.size(-1) - 1, 1);
    return (o > 0 ? div(largest, smallest) : div(smallest, largest)).squeeze(-1);
  }
  check_square(a, op);
  return cond_through_inverse(a, [o](const Tensor& x) { return matrix_norm(x, o); });
}

Tensor linalg::cond(const Tensor& a, const std::string& ord) {
  const char* op = "linalg.cond";
  TANDEM_CHECK(ord == "fro" || ord == "nuc", op,
               ": ord must be 'fro' or 'nuc' (or a number: 1, -1, 2, -2, inf, -inf), got '", ord,
               "'");
  check_square(a, op);
  if (a.numel() == 0) return no_matrices_cond(a);
  if (ord == "nuc") {  // from the singular values, as torch (no inverse of a singular matrix)
    const Tensor s = svdvals(a);
    return mul(sum(s, Shape{-1}), sum(reciprocal(s), Shape{-1}));
  }
  return cond_through_inverse(a, [](const Tensor& x) { return matrix_norm(x, "fro"); });
}

Tensor pinverse(const Tensor& a, double rcond) { return linalg::pinv(a, rcond); }

}  // namespace tandem
