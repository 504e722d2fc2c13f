// amp::autocast: a scope in which conv, linear and matrix products run in f16 or bf16 and
// normalizations, losses and reductions in f32 (the table: tandem/ops/autocast.hpp). Parameters
// stay f32; backward runs in the dtypes forward chose.
#pragma once

#include "tandem/core/context.hpp"
#include "tandem/core/error.hpp"

namespace tandem::amp {

/// Turns autocast on (or off, with enabled = false) in the current execution context for its
/// scope, then restores the previous state: `{ amp::autocast guard(DType::bf16); loss = ...; }`.
class autocast {  // NOLINT(readability-identifier-naming): named like torch.autocast
 public:
  explicit autocast(DType dtype = DType::f16, bool enabled = true)
      : context_(current_context()), previous_(context_.autocast()) {
    TANDEM_CHECK_T(ValueError, dtype == DType::f16 || dtype == DType::bf16,
                   "autocast: the dtype must be f16 or bf16, got ", dtype_name(dtype));
    context_.set_autocast(AutocastState{enabled, dtype});
  }
  ~autocast() { context_.set_autocast(previous_); }
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  ExecutionContext& context_;
  AutocastState previous_;
};

/// Whether autocast is on in the current context, and its dtype.
inline bool is_autocast_enabled() { return current_context().autocast().enabled; }
inline DType autocast_dtype() { return current_context().autocast().dtype; }

}  // namespace tandem::amp
