// Matrix products: matmul with torch's rules (1-D, 2-D and broadcast batches), bmm and linear.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem {

Tensor matmul(const Tensor& a, const Tensor& b);
/// (B, M, K) x (B, K, N) -> (B, M, N)
Tensor bmm(const Tensor& a, const Tensor& b);
/// (M, K) x (K, N) -> (M, N)
Tensor mm(const Tensor& a, const Tensor& b);
/// (N) . (N) -> a 0-dim tensor.
Tensor dot(const Tensor& a, const Tensor& b);
/// (M, N) x (N) -> (M)
Tensor mv(const Tensor& mat, const Tensor& vec);
/// (M) x (N) -> (M, N): a_i b_j.
Tensor outer(const Tensor& a, const Tensor& b);
/// beta * self + alpha * mat1 mat2, self broadcast to (M, N).
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta = 1.0,
             double alpha = 1.0);
/// beta * self + alpha * b1 b2 for batches (B, M, K) x (B, K, N), self broadcast to (B, M, N);
/// with beta 0, self is not read (its NaNs do not spread), as torch's.
Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta = 1.0,
               double alpha = 1.0);
/// The sum of a matrix's diagonal.
Tensor trace(const Tensor& t);
/// The cross product of 3-vectors along dim (a and b broadcast); without a dim, the first dim of
/// size 3, as torch.cross.
Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim = std::nullopt);
/// The p-norm distance between each row of x1 (*, P, M) and each row of x2 (*, R, M): (*, P, R).
/// For p = 2 and more than 25 rows on a side, through a matrix product, as torch's default
/// compute mode. The gradient at distance 0 is 0.
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);
/// input (*, in) x weight (out, in)^T + bias (out) -> (*, out)
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());
/// Einstein summation, as torch.einsum: "bij,bjk->bik", "bhqd,bhkd->bhqk", "ij->ji", "i,i->",
/// "...ij,...jk" (an implicit output: the broadcast dims, then the subscripts used once, in
/// alphabetical order). Operands are contracted left to right, each pair as one bmm; size-1
/// dims broadcast. A subscript repeated within one operand (a diagonal) is refused.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

/// torch.linalg's factorizations under their older names (ops/decompositions.cpp): inverse
/// (linalg::inv), det, slogdet, cholesky; logdet (NaN for a negative determinant, -inf for 0);
/// cholesky_solve(B, L) solves A X = B given A's Cholesky factor L (U when upper), and
/// cholesky_inverse(L) is A^-1 from it; matrix_power (negative n through the inverse).
Tensor inverse(const Tensor& a);
Tensor det(const Tensor& a);
std::tuple<Tensor, Tensor> slogdet(const Tensor& a);
Tensor logdet(const Tensor& a);
Tensor cholesky(const Tensor& a, bool upper = false);
Tensor cholesky_solve(const Tensor& b, const Tensor& l, bool upper = false);
Tensor cholesky_inverse(const Tensor& l, bool upper = false);
Tensor matrix_power(const Tensor& a, int64_t n);
/// linalg::pinv under its older name.
Tensor pinverse(const Tensor& a, double rcond = 1e-15);
/// linalg::matrix_exp under its older name.
Tensor matrix_exp(const Tensor& a);
/// P, L and U with A = P L U from linalg::lu_factor's LU and pivots, as torch.lu_unpack: P
/// (..., m, m), L (..., m, k), U (..., k, n), k = min(m, n); L and U are empty when not
/// `unpack_data`, P when not `unpack_pivots`. L and U carry LU's gradient. The pivots (i32,
/// each in [1, m]) and LU broadcast over their batch dims.
std::tuple<Tensor, Tensor, Tensor> lu_unpack(const Tensor& lu, const Tensor& pivots,
                                             bool unpack_data = true, bool unpack_pivots = true);

namespace linalg {
/// Factorizations of batches of matrices (..., n, n), f32 or f64, as torch.linalg's: computed in
/// f64 on the host for every device (a GPU tensor's matrices go there and back), each
/// differentiable, and its gradients too. A singular matrix is refused by inv and solve, naming
/// it; det's gradient at one is refused (torch takes it through an SVD).
Tensor inv(const Tensor& a);
Tensor det(const Tensor& a);
/// (sign, log |det|): sign 0 and -inf for a singular matrix; the gradient is log |det|'s.
std::tuple<Tensor, Tensor> slogdet(const Tensor& a);
/// X with A X = B (or X A = B when not `left`); B (..., n, k), or a vector (n) or (..., n) of
/// A's leading shape; batch dims broadcast.
Tensor solve(const Tensor& a, const Tensor& b, bool left = true);
/// The same for a triangular A (its `upper` or lower triangle is read; its diagonal taken as
/// ones when `unitriangular`); B (..., n, k), never a vector.
Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left = true,
                        bool unitriangular = false);
/// L (lower) with A = L L^T, reading A's lower triangle; L^T when `upper`. A matrix that is not
/// positive-definite is refused, naming the order of its first leading minor that is not.
Tensor cholesky(const Tensor& a, bool upper = false);
Tensor matrix_power(const Tensor& a, int64_t n);
/// (inverse, info), as torch.linalg.inv_ex: info (i32, one per matrix) is 0, or for a singular
/// matrix the 1-based index of the first zero on U's diagonal in the LU factorization of A^T
/// (of A where A is not contiguous: as torch's, which hands LAPACK a column-major copy), whose
/// "inverse" holds no meaningful values (with `check_errors`, such a matrix is refused as inv
/// refuses it).
std::tuple<Tensor, Tensor> inv_ex(const Tensor& a, bool check_errors = false);
/// The LU factorization with partial pivoting of (..., m, n) matrices, as LAPACK's getrf: LU
/// holds L (unit lower triangular, its ones not stored) below the diagonal and U on and above
/// it; pivots (i32, (..., min(m, n)), 1-based) name the row swapped with row i at step i. A
/// singular matrix (a zero on U's diagonal) is refused, as torch's; lu_factor_ex factors it and
/// says so in info (i32, one per matrix: 0, or the 1-based index of the first zero pivot),
/// refusing it only with `check_errors`. Differentiable for any shape (PyTorch's formulas).
/// `pivot` = false is refused, as torch refuses it on the CPU.
std::tuple<Tensor, Tensor> lu_factor(const Tensor& a, bool pivot = true);
std::tuple<Tensor, Tensor, Tensor> lu_factor_ex(const Tensor& a, bool pivot = true,
                                                bool check_errors = false);
/// P, L, U with A = P L U (a singular A too): lu_unpack of A's factorization.
std::tuple<Tensor, Tensor, Tensor> lu(const Tensor& a, bool pivot = true);
/// X with A X = B from A's lu_factor (A^T X = B when `adjoint`; X A = B, or X A^T = B, when not
/// `left`); batch dims broadcast. Differentiable in LU and B.
Tensor lu_solve(const Tensor& lu, const Tensor& pivots, const Tensor& b, bool left = true,
                bool adjoint = false);
/// e^A of square matrices (..., n, n): the degree-13 Pade approximant with scaling and squaring
/// (Higham 2005), each matrix scaled by its own power of two, in A's dtype; NaN for a matrix with
/// inf or NaN. Composed of ops, so it runs on every device and differentiates twice.
Tensor matrix_exp(const Tensor& a);

/// The eigenvalues, ascending, and orthonormal eigenvectors (columns) of symmetric matrices,
/// read from their lower triangle ("L") or upper ("U"), as torch.linalg.eigh (ops/spectral.cpp,
/// computed as the factorizations above). An eigenvector's sign is not determined; gradients
/// through eigenvectors are PyTorch's, and need distinct eigenvalues.
std::tuple<Tensor, Tensor> eigh(const Tensor& a, const std::string& uplo = "L");
Tensor eigvalsh(const Tensor& a, const std::string& uplo = "L");
/// U, S, Vh with A = U diag(S) Vh, S descending; U (..., m, m) and Vh (..., n, n) when
/// `full_matrices`, else (..., m, k) and (..., k, n), k = min(m, n). As torch, a `driver` is
/// refused (cuSOLVER's). The gradient through U and Vh needs distinct singular values (and
/// nonzero ones where m != n); through S alone it always exists.
std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& a, bool full_matrices = true,
                                       const std::optional<std::string>& driver = std::nullopt);
Tensor svdvals(const Tensor& a, const std::optional<std::string>& driver = std::nullopt);
/// Q, R with A = Q R (Householder: R's diagonal may be negative): mode "reduced" (Q m x k),
/// "complete" (Q m x m) or "r" (R only; Q empty). As torch, R from "r" has no gradient, nor do
/// "complete"'s factors of a matrix with more rows than columns.
std::tuple<Tensor, Tensor> qr(const Tensor& a, const std::string& mode = "reduced");
/// Matrix norms over the two `dim` of a: ord 'fro', 'nuc' (the sum of the singular values), 2
/// and -2 (the largest and smallest), 1 and -1 (the largest and smallest column sum of |a|),
/// inf and -inf (row sums). With a dtype, computed in it.
Tensor matrix_norm(const Tensor& a, const std::string& ord = "fro", const Shape& dim = {-2, -1},
                   bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor matrix_norm(const Tensor& a, double ord, const Shape& dim = {-2, -1}, bool keepdim = false,
                   std::optional<DType> dtype = std::nullopt);
/// The pseudo-inverse: singular values at or below rcond times the largest are taken as zero
/// (with `hermitian`, eigenvalues by their absolute value). Differentiable where A's rank is
/// locally constant.
Tensor pinv(const Tensor& a, double rcond = 1e-15, bool hermitian = false);
/// The number of singular values (|eigenvalues| with `hermitian`) above max(atol, rtol * the
/// largest), as an i64 tensor; by default rtol = eps * max(m, n), as torch. The second form's
/// `tol` is an atol.
Tensor matrix_rank(const Tensor& a, std::optional<double> atol = std::nullopt,
                   std::optional<double> rtol = std::nullopt, bool hermitian = false);
Tensor matrix_rank(const Tensor& a, double tol, bool hermitian);
/// The least-squares solution X of A X = B (B (..., m, k), or vectors (..., m)), batch dims
/// broadcast, and (residuals, rank, singular values) as torch's `driver` gives them: 'gelsy' (the
/// default) the rank; 'gels' the residuals; 'gelsd' and 'gelss' all three. Residuals, ||A X -
/// B||^2 per column, only where A has more rows than columns and full rank; the others empty.
/// X is the minimum-norm solution A^+ B (singular values at or below rcond times the largest
/// taken as zero; by default rcond is the dtype's eps times max(m, n)).
std::tuple<Tensor, Tensor, Tensor, Tensor> lstsq(
    const Tensor& a, const Tensor& b, std::optional<double> rcond = std::nullopt,
    const std::optional<std::string>& driver = std::nullopt);

/// The ord-norm of the elements over dims (all when none), as torch.linalg.vector_norm:
/// (sum |x|^ord)^(1/ord) for any other ord, inf (largest |x|), -inf (smallest |x|) or 0 (the
/// nonzero count). With a dtype, computed in it (libtorch's five-argument form).
Tensor vector_norm(const Tensor& t, double ord = 2.0, const Shape& dims = {}, bool keepdim = false);
Tensor vector_norm(const Tensor& t, double ord, const Shape& dims, bool keepdim,
                   std::optional<DType> dtype);
/// torch.linalg.cross: along dim (the last by default); a and b broadcast.
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1);
/// torch.linalg.norm: a vector norm over one dim, a matrix norm over two. Without a dim, an ord
/// needs a 1-d (vector) or 2-d (matrix) input; with neither, the 2-norm of all elements.
/// A string ord ('fro', 'nuc') is a matrix norm (over the last two dims of a 2-d input, or dim).
Tensor norm(const Tensor& a, std::optional<double> ord = std::nullopt,
            OptionalIntArrayRef dim = std::nullopt, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
Tensor norm(const Tensor& a, const std::string& ord, OptionalIntArrayRef dim = std::nullopt,
            bool keepdim = false, std::optional<DType> dtype = std::nullopt);
/// The condition number of (..., m, n) matrices in ord (2 by default: the largest singular value
/// over the smallest; -2 the inverse ratio), or, for square ones, ||A|| ||A^-1|| in ord 1, -1,
/// inf, -inf, 'fro' or 'nuc' (inf for a singular matrix), as torch.linalg.cond. 0 for empty ones.
Tensor cond(const Tensor& a, std::optional<double> ord = std::nullopt);
Tensor cond(const Tensor& a, const std::string& ord);
/// The product of two or more matrices in the order of fewest multiplications, as
/// torch.linalg.multi_dot: the first may be a vector (a row) and the last one (a column), the
/// others are 2-d; the result loses the vectors' dims.
Tensor multi_dot(const std::vector<Tensor>& tensors);
/// The dot products of x and y (broadcast) along dim, as torch.linalg.vecdot.
Tensor vecdot(const Tensor& x, const Tensor& y, int64_t dim = -1);
/// The inverse of A as a linear map from its dims after the first `ind` to those first ones, as
/// torch.linalg.tensorinv: A seen as a (prod(shape[:ind]), prod(shape[ind:])) matrix, which
/// must be square, inverted and shaped shape[ind:] + shape[:ind].
Tensor tensorinv(const Tensor& a, int64_t ind = 2);
/// X with tensordot(A, X, X.dim()) = B, as torch.linalg.tensorsolve: A's shape is B's followed
/// by X's, after `dims` of A (when given) are moved to its end.
Tensor tensorsolve(const Tensor& a, const Tensor& b, const OptionalIntArrayRef& dims = {});
}  // namespace linalg

}  // namespace tandem
