// Matrix products. bmm is the one kernel-backed op; mm, matmul and linear are built on it, so
// their gradients come from bmm's. The kernel reads transposed operands through their strides.
#include "common.hpp"

namespace tandem {
using namespace ops_detail;

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast_changes("bmm", {a, b})) return bmm(autocast_input("bmm", a), autocast_input("bmm", b));
  check_defined(a, "bmm", "first operand");
  check_defined(b, "bmm", "second operand");
  check_inputs({a, b}, "bmm");
  check_floating(a, "bmm", "first operand");
  check_floating(b, "bmm", "second operand");
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

}  // namespace tandem
