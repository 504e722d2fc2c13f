#include "tandem/ops/autocast.hpp"

#include <cstring>

#include "tandem/core/context.hpp"

namespace tandem {

const std::vector<AutocastRule>& autocast_policy() {
  static const std::vector<AutocastRule> rules{
      // Products: tensor cores on GPUs, half the memory traffic everywhere.
      {"conv1d", AutocastPolicy::lower},
      {"conv2d", AutocastPolicy::lower},
      {"conv3d", AutocastPolicy::lower},
      {"conv_transpose1d", AutocastPolicy::lower},
      {"conv_transpose2d", AutocastPolicy::lower},
      {"conv_transpose3d", AutocastPolicy::lower},
      {"linear", AutocastPolicy::lower},
      {"bmm", AutocastPolicy::lower},  // mm and matmul run through bmm
      {"addmm", AutocastPolicy::lower},
      {"baddbmm", AutocastPolicy::lower},
      // Batch norm takes a low-precision input as it is (its statistics and parameters are f32
      // inside), as PyTorch runs it under autocast: a bf16 convolution's output is normalized
      // without an f32 copy kept for backward. `widest` so a residual of another dtype joins.
      {"batch_norm", AutocastPolicy::widest},  // batch_norm_relu and sync_batch_norm too
      // Statistics and losses: range and precision matter.
      {"softmax", AutocastPolicy::fp32},
      {"log_softmax", AutocastPolicy::fp32},
      {"cross_entropy", AutocastPolicy::fp32},
      {"nll_loss", AutocastPolicy::fp32},
      {"mse_loss", AutocastPolicy::fp32},
      {"l1_loss", AutocastPolicy::fp32},
      {"smooth_l1_loss", AutocastPolicy::fp32},
      {"huber_loss", AutocastPolicy::fp32},
      {"kl_div", AutocastPolicy::fp32},
      {"cosine_similarity", AutocastPolicy::fp32},
      {"binary_cross_entropy", AutocastPolicy::fp32},
      {"binary_cross_entropy_with_logits", AutocastPolicy::fp32},
      {"sum", AutocastPolicy::fp32},
      {"mean", AutocastPolicy::fp32},
      {"var", AutocastPolicy::fp32},
      {"norm", AutocastPolicy::fp32},
  };
  return rules;
}

namespace ops_detail {
namespace {

// As PyTorch's autocast: f64 is left alone (it was asked for on purpose).
bool eligible(const Tensor& t) {
  return t.defined() && t.is_floating_point() && t.dtype() != DType::f64;
}

// The dtype `op` wants for its floating inputs (`first`, when given, and `rest`) now; false when
// autocast is off or the op is not in the table (or, for a `widest` row, none is eligible).
bool target(const char* op, const Tensor* first, const std::vector<Tensor>& rest, DType& out) {
  const AutocastState state = current_context().autocast();
  if (!state.enabled) return false;
  for (const AutocastRule& rule : autocast_policy()) {
    if (std::strcmp(rule.op, op) != 0) continue;
    switch (rule.policy) {
      case AutocastPolicy::lower: out = state.dtype; return true;
      case AutocastPolicy::fp32: out = DType::f32; return true;
      case AutocastPolicy::widest: {
        bool any = false;
        auto widen = [&](const Tensor& t) {
          if (!eligible(t)) return;
          out = any ? promote_types(out, t.dtype()) : t.dtype();
          any = true;
        };
        if (first) widen(*first);
        for (const Tensor& t : rest) widen(t);
        return any;
      }
    }
  }
  return false;
}

}  // namespace

Tensor autocast_input(const char* op, const Tensor& t, const std::vector<Tensor>& with) {
  DType want;
  if (!eligible(t) || !target(op, &t, with, want) || t.dtype() == want) return t;
  return t.to(want);
}

bool autocast_changes(const char* op, const std::vector<Tensor>& ts) {
  DType want;
  if (!target(op, nullptr, ts, want)) return false;
  for (const Tensor& t : ts)
    if (eligible(t) && t.dtype() != want) return true;
  return false;
}

}  // namespace ops_detail
}  // namespace tandem
