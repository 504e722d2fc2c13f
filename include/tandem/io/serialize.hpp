// libtorch's torch::save and torch::load for a module, an optimizer, a tensor or a list of them.
// The calls are libtorch's; the files are safetensors (io/safetensors.hpp), not libtorch's
// archives, so other tools read them and a libtorch .pt file is refused with an IoError naming it.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

/// A list of tensors (libtorch's save of a std::vector<Tensor>), stored under the names "0",
/// "1", ...; `load` gives them back in that order (on the CPU).
inline void save(const std::vector<Tensor>& tensors, const std::string& path) {
  nn::StateDict state;
  for (size_t i = 0; i < tensors.size(); ++i) state.emplace(std::to_string(i), tensors[i]);
  io::save_safetensors(path, state);
}
inline void load(std::vector<Tensor>& tensors, const std::string& path) {
  nn::StateDict state = io::load_safetensors(path);
  std::vector<Tensor> loaded(state.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    const std::string key = std::to_string(i);
    TANDEM_CHECK_T(io::IoError, state.contains(key), "load: ", path, " holds ", state.size(),
                   " tensors but none named \"", key,
                   "\": it is not a list that save(std::vector<Tensor>, path) writes");
    loaded[i] = state[key];
  }
  tensors = std::move(loaded);
}

}  // namespace tandem
