// Fits y = 3x - 1 by gradient descent through the installed tandem; exits non-zero on failure.
#include <cmath>
#include <iostream>

#include "tandem/tandem.hpp"

int main() {
  using namespace tandem;
  Tensor x = arange(-1.0, 1.0, 0.125, DType::f32).unsqueeze(1);  // (16, 1)
  Tensor y = sub(mul(x, 3.0), full({}, 1.0));
  Tensor w = zeros({1, 1}).set_requires_grad(), b = zeros({1}).set_requires_grad();
  for (int step = 0; step < 300; ++step) {
    Tensor loss = mse_loss(linear(x, w, b), y);
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    loss.backward();
    NoGradGuard no_grad;
    w.add_(w.grad(), -0.3);
    b.add_(b.grad(), -0.3);
  }
  float wv = w.item<float>(), bv = b.item<float>();
  std::cout << "downstream: fitted w = " << wv << ", b = " << bv << "\n";
  return std::fabs(wv - 3.0f) < 1e-3f && std::fabs(bv + 1.0f) < 1e-3f ? 0 : 1;
}
