// Grad mode: whether ops record history. Per thread, so each data-parallel worker has its own.
#pragma once

namespace tandem {

/// True when ops record autograd history on this thread (the default).
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

/// Disables history recording in a scope, like torch::NoGradGuard.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem
