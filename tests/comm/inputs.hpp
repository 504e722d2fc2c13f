// Collective test inputs and references: rank r's tensor is a pure function of (rank, size,
// dtype, salt), so every rank (thread or process) can build every other rank's input and the
// expected result.
#pragma once

#include <cstring>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/tandem.hpp"

namespace tandem::testing {

/// Uniform in [-20, 20), converted to `dtype` (integers truncate).
inline Tensor comm_input(int rank, int64_t n, DType dtype, int salt = 0) {
  Generator gen(static_cast<uint64_t>(1000 * rank + salt + 1));
  return add(mul(rand({n}, DType::f64, &gen), 40.0), -20.0).to(dtype);
}

inline const std::vector<DType>& comm_dtypes() {
  static const std::vector<DType> all{DType::f32, DType::f64, DType::f16,
                                      DType::bf16, DType::i32, DType::i64};
  return all;
}

/// The reduction of every rank's input in rank order, accumulating f16/bf16 in f32.
inline Tensor comm_reference(const std::vector<Tensor>& ins, comm::ReduceOp op) {
  const DType dtype = ins[0].dtype(), acc = is_reduced_float(dtype) ? DType::f32 : dtype;
  Tensor r = ins[0].to(acc);
  for (size_t q = 1; q < ins.size(); ++q) {
    Tensor x = ins[q].to(acc);
    r = op == comm::ReduceOp::max   ? maximum(r, x)
        : op == comm::ReduceOp::min ? minimum(r, x)
                                    : add(r, x);
  }
  if (op == comm::ReduceOp::avg) r = div(r, full({}, static_cast<double>(ins.size()), acc));
  return r.to(dtype);
}

/// Same shape, dtype and bytes (stricter than equal(), and without its conversion to double).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * x.element_size()) == 0;
}

/// Equal up to a few roundings of the dtype (integers exactly).
inline bool close_bits(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) return false;
  if (!is_floating(got.dtype())) return same_bits(got, want);
  const double rtol = got.dtype() == DType::f64   ? 1e-12
                      : got.dtype() == DType::f32 ? 1e-5
                      : got.dtype() == DType::f16 ? 4e-3
                                                  : 2e-2;
  return allclose(got.to(DType::f64), want.to(DType::f64), rtol, rtol * 20);
}

}  // namespace tandem::testing
