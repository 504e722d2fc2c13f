// Grad mode: whether ops record history. Held by the current execution context, so each
// data-parallel rank has its own (and each thread without a context its own, see context.hpp).
#pragma once

#include "tandem/core/context.hpp"

namespace tandem {

/// True when ops record autograd history in the current context (the default).
inline bool grad_mode_enabled() { return current_context().grad_mode(); }
/// Sets the current context's grad mode.
inline void set_grad_mode(bool enabled) { current_context().set_grad_mode(enabled); }

/// libtorch's names for the two calls above.
struct GradMode {
  static bool is_enabled() { return grad_mode_enabled(); }
  static void set_enabled(bool enabled) { set_grad_mode(enabled); }
};

/// Sets grad mode for a scope, like torch::AutoGradMode. The context current at construction
/// gets its mode back at destruction.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled)
      : context_(current_context()), previous_(context_.grad_mode()) {
    context_.set_grad_mode(enabled);
  }
  ~AutoGradMode() { context_.set_grad_mode(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  ExecutionContext& context_;
  bool previous_;
};

/// Disables history recording in a scope, like torch::NoGradGuard.
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

/// libtorch's c10::InferenceMode: grad mode off in the scope (on again with `false`). Tensors
/// made in it are ordinary tensors without history (libtorch's are "inference tensors", which
/// later autograd refuses; here they can be used anywhere).
class InferenceMode : public AutoGradMode {
 public:
  explicit InferenceMode(bool enabled = true) : AutoGradMode(!enabled) {}
};

}  // namespace tandem
