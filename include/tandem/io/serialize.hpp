// libtorch's torch::save and torch::load for a module, an optimizer, a tensor or a list of them,
// to a file or a stream, and its serialize::OutputArchive / InputArchive. The calls are
// libtorch's; the bytes are safetensors (io/safetensors.hpp), not libtorch's archives, so other
// tools read them and a libtorch .pt file is refused with an IoError naming it.
#pragma once

#include <istream>
#include <iterator>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/io/safetensors.hpp"
#include "tandem/optim/optimizer.hpp"

namespace tandem {

namespace serialize {

/// libtorch's OutputArchive: tensors by key, and archives nested under a key (their keys
/// become "key.name"), written as one safetensors file or stream.
class OutputArchive {
 public:
  /// `is_buffer` is libtorch's; both kinds are stored alike. A key written twice is an error.
  void write(const std::string& key, const Tensor& tensor, bool is_buffer = false) {
    (void)is_buffer;
    TANDEM_CHECK(tensor.defined(), "OutputArchive: the tensor for '", key, "' is undefined");
    TANDEM_CHECK(entries_.emplace(key, tensor).second, "OutputArchive: '", key,
                 "' is written twice");
  }
  void write(const std::string& key, const OutputArchive& nested) {
    for (const auto& [name, tensor] : nested.entries_)  // all or nothing
      TANDEM_CHECK(!entries_.contains(key + "." + name), "OutputArchive: '", key, ".", name,
                   "' is written twice");
    for (const auto& [name, tensor] : nested.entries_) write(key + "." + name, tensor);
  }
  /// Every tensor of `tensors` under its name (a state_dict).
  void write(const nn::StateDict& tensors) {
    for (const auto& [name, tensor] : tensors)
      TANDEM_CHECK(!entries_.contains(name), "OutputArchive: '", name, "' is written twice");
    for (const auto& [name, tensor] : tensors) write(name, tensor);
  }
  /// Atomically (a failed write leaves an existing file as it was).
  void save_to(const std::string& filename) const {
    io::atomic_write(filename, io::to_safetensors(entries_));
  }
  void save_to(std::ostream& stream) const {
    const std::string bytes = io::to_safetensors(entries_);
    stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    TANDEM_CHECK_T(io::IoError, stream.good(), "OutputArchive: writing ", bytes.size(),
                   " bytes to the stream failed");
  }
  const nn::StateDict& tensors() const { return entries_; }

 private:
  nn::StateDict entries_;
};

/// libtorch's InputArchive: what an OutputArchive (or any safetensors file) holds, by key.
class InputArchive {
 public:
  void load_from(const std::string& filename) {
    entries_ = io::load_safetensors(filename);
    source_ = filename;
  }
  /// Reads the stream to its end.
  void load_from(std::istream& stream) {
    const std::string bytes{std::istreambuf_iterator<char>(stream), {}};
    entries_ = io::from_safetensors(bytes, nullptr, "<stream>");
    source_ = "<stream>";
  }
  /// The tensor under `key`. Into a defined `tensor` the values are copied (its shape; its
  /// dtype and device stay, and so every handle on it, a module's member say, sees them);
  /// an undefined one becomes the stored tensor (on the CPU). False when there is no `key`.
  bool try_read(const std::string& key, Tensor& tensor, bool is_buffer = false) const {
    (void)is_buffer;
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    const Tensor& stored = it->second;
    if (!tensor.defined()) {
      tensor = stored;
      return true;
    }
    TANDEM_CHECK_T(io::IoError, tensor.shape() == stored.shape(), "InputArchive: '", key, "' in ",
                   source_, " has shape ", shape_str(stored.shape()),
                   " but the tensor to read it into has shape ", shape_str(tensor.shape()));
    NoGradGuard no_grad;
    Tensor(tensor).copy_(stored);
    return true;
  }
  /// try_read, throwing an IoError naming the key and the source when it is absent.
  void read(const std::string& key, Tensor& tensor, bool is_buffer = false) const {
    TANDEM_CHECK_T(io::IoError, try_read(key, tensor, is_buffer), "InputArchive: ", source_,
                   " holds no '", key, "'");
  }
  /// The archive nested under `key` (the keys "key.name", as "name"). An archive of nothing
  /// (a module without parameters wrote it) leaves no trace in the bytes, so every key reads
  /// as one: read gives it empty, where try_read says false.
  void read(const std::string& key, InputArchive& nested) const {
    const std::string prefix = key + ".";
    InputArchive out;
    out.source_ = source_ + " ('" + key + "')";
    for (const auto& [name, tensor] : entries_)
      if (name.compare(0, prefix.size(), prefix) == 0)
        out.entries_.emplace(name.substr(prefix.size()), tensor);
    nested = std::move(out);
  }
  bool try_read(const std::string& key, InputArchive& nested) const {
    read(key, nested);
    return !nested.entries_.empty();
  }
  std::vector<std::string> keys() const { return entries_.keys(); }
  const nn::StateDict& tensors() const { return entries_; }

 private:
  nn::StateDict entries_;
  std::string source_ = "an empty archive";
};

}  // namespace serialize

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

/// The same to and from a stream (the bytes a file would hold; load reads to the stream's end).
template <typename M, typename = std::enable_if_t<std::is_base_of_v<nn::Module, M>>>
void save(const std::shared_ptr<M>& module, std::ostream& stream) {
  serialize::OutputArchive archive;
  module->save(archive);
  archive.save_to(stream);
}
template <typename M, typename = std::enable_if_t<std::is_base_of_v<nn::Module, M>>>
void load(const std::shared_ptr<M>& module, std::istream& stream) {
  serialize::InputArchive archive;
  archive.load_from(stream);
  module->load(archive);
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
