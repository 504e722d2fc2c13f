#include "tandem/ops/autocast.hpp"

#include <cstring>

#include "tandem/core/context.hpp"

namespace tandem {

const std::vector<AutocastRule>& autocast_policy() {
  static const std::vector<AutocastRule> rules{
      // Products: tensor cores on GPUs, half the memory traffic everywhere.
      {"conv2d", AutocastPolicy::lower},
      {"linear", AutocastPolicy::lower},
      {"bmm", AutocastPolicy::lower},  // mm and matmul run through bmm
      // Statistics, normalizations and losses: range and precision matter.
      {"batch_norm", AutocastPolicy::fp32},  // batch_norm_relu too
      {"softmax", AutocastPolicy::fp32},
      {"log_softmax", AutocastPolicy::fp32},
      {"cross_entropy", AutocastPolicy::fp32},
      {"nll_loss", AutocastPolicy::fp32},
      {"mse_loss", AutocastPolicy::fp32},
      {"sum", AutocastPolicy::fp32},
      {"mean", AutocastPolicy::fp32},
      {"var", AutocastPolicy::fp32},
  };
  return rules;
}

namespace ops_detail {
namespace {

// The dtype `op` wants for its floating inputs now; false when autocast is off or the op is not
// in the table.
bool target(const char* op, DType& out) {
  const AutocastState state = current_context().autocast();
  if (!state.enabled) return false;
  for (const AutocastRule& rule : autocast_policy())
    if (std::strcmp(rule.op, op) == 0) {
      out = rule.policy == AutocastPolicy::lower ? state.dtype : DType::f32;
      return true;
    }
  return false;
}

}  // namespace

// As PyTorch's autocast: f64 is left alone (it was asked for on purpose).
bool eligible(const Tensor& t) {
  return t.defined() && t.is_floating_point() && t.dtype() != DType::f64;
}

Tensor autocast_input(const char* op, const Tensor& t) {
  DType want;
  if (!eligible(t) || !target(op, want) || t.dtype() == want) return t;
  return t.to(want);
}

bool autocast_changes(const char* op, const std::vector<Tensor>& ts) {
  DType want;
  if (!target(op, want)) return false;
  for (const Tensor& t : ts)
    if (eligible(t) && t.dtype() != want) return true;
  return false;
}

}  // namespace ops_detail
}  // namespace tandem
