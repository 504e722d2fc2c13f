// libtorch's torch::save and torch::load for a module, an optimizer or a tensor. The calls are
// libtorch's; the files are safetensors (io/safetensors.hpp), not libtorch's archives, so other
// tools read them and a libtorch .pt file is refused with an IoError naming it.
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "tandem/io/safetensors.hpp"
#include "tandem/optim/optimizer.hpp"

namespace tandem {

/// Writes a module's state_dict (parameters and buffers by torch's names), atomically.
template <typename M, typename = std::enable_if_t<std::is_base_of_v<nn::Module, M>>>
void save(const std::shared_ptr<M>& module, const std::string& path) {
  io::save_safetensors(path, module->state_dict());
}

/// Reads a module's state_dict back (strict: every key and shape must match).
template <typename M, typename = std::enable_if_t<std::is_base_of_v<nn::Module, M>>>
void load(const std::shared_ptr<M>& module, const std::string& path) {
  module->load_state_dict(io::load_safetensors(path));
}

/// An optimizer's hyper-parameters and state (momentum buffers, moments, step counts).
inline void save(const optim::Optimizer& optimizer, const std::string& path) {
  io::save_safetensors(path, optimizer.state_dict());
}
inline void load(optim::Optimizer& optimizer, const std::string& path) {
  optimizer.load_state_dict(io::load_safetensors(path));
}

/// One tensor, written from its CPU copy; `load` gives `tensor` the stored one (on the CPU).
inline void save(const Tensor& tensor, const std::string& path) {
  io::save_safetensors(path, nn::StateDict{{"tensor", tensor}});
}
inline void load(Tensor& tensor, const std::string& path) {
  nn::StateDict state = io::load_safetensors(path);
  TANDEM_CHECK_T(io::IoError, state.size() == 1 && state.contains("tensor"), "load: ", path,
                 " holds ", state.size(), " tensors, not the one that save(tensor, path) writes");
  tensor = state["tensor"];
}

}  // namespace tandem
