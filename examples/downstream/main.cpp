// Fits y = 3x - 1 with an nn::Linear and optim::SGD through the installed tandem, saves and
// reloads the weights as safetensors; exits non-zero on failure.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "tandem/tandem.hpp"

int main() {
  using namespace tandem;
  Tensor x = arange(-1.0, 1.0, 0.125, DType::f32).unsqueeze(1);  // (16, 1)
  Tensor y = sub(mul(x, 3.0), full({}, 1.0));
  auto model = std::make_shared<nn::Linear>(nn::LinearOptions(1, 1));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.3));
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    opt.step();
  }
  const std::string path = "downstream.safetensors";
  io::save_safetensors(path, model->state_dict());
  auto reloaded = std::make_shared<nn::Linear>(1, 1);
  reloaded->load_state_dict(io::load_safetensors(path));
  std::remove(path.c_str());
  float wv = reloaded->weight.item<float>(), bv = reloaded->bias.item<float>();
  std::cout << "downstream: fitted w = " << wv << ", b = " << bv << "\n";
  return std::fabs(wv - 3.0f) < 1e-3f && std::fabs(bv + 1.0f) < 1e-3f ? 0 : 1;
}
