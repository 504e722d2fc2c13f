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

#include "tandem/autograd/function.hpp"
#include "tandem/autograd/grad_mode.hpp"
#include "tandem/io/safetensors.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/optim/optimizer.hpp"

namespace tandem {

namespace serialize {

namespace detail {
// The metadata entry that keeps the kind of a value written as an IValue (or, for a string, the
// string itself): a plain tensor has none.
inline std::string ivalue_meta_key(const std::string& key) { return "tandem.ivalue." + key; }
inline const std::string kStringPrefix = "string:";
inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
// The keys of an archive: its tensors' in order, then its strings' (held in the metadata alone).
inline std::vector<std::string> archive_keys(const nn::StateDict& entries,
                                             const io::Metadata& metadata) {
  std::vector<std::string> out = entries.keys();
  const std::string from = ivalue_meta_key("");
  for (const auto& [name, kind] : metadata)
    if (starts_with(name, from) && starts_with(kind, kStringPrefix))
      out.push_back(name.substr(from.size()));
  return out;
}
// Copies the kinds of the values under key prefix `from` in `metadata` into `out`, under `to`.
inline void rename_kinds(const io::Metadata& metadata, const std::string& from,
                         const std::string& to, io::Metadata& out) {
  const std::string meta_from = ivalue_meta_key(from), meta_to = ivalue_meta_key(to);
  for (const auto& [name, kind] : metadata)
    if (starts_with(name, meta_from)) out[meta_to + name.substr(meta_from.size())] = kind;
}
}  // namespace detail

/// libtorch's OutputArchive: tensors by key, and archives nested under a key (their keys
/// become "key.name"), written as one safetensors file or stream.
class OutputArchive {
 public:
  /// `is_buffer` is libtorch's; both kinds are stored alike. A key written twice is an error.
  void write(const std::string& key, const Tensor& tensor, bool is_buffer = false) {
    (void)is_buffer;
    TANDEM_CHECK(tensor.defined(), "OutputArchive: the tensor for '", key, "' is undefined");
    check_new(key);
    entries_.emplace(key, tensor);
  }
  /// A value other than a tensor, as libtorch's `write(key, IValue)`: a bool, an integer or a
  /// double as a 0-dim tensor (bool, i64, f64), a list of integers or doubles as a 1-dim one, a
  /// string in the file's metadata. Its kind goes to the metadata too, so that
  /// InputArchive::read(key, IValue&) gives back the same kind (any other reader sees tensors).
  /// A tensor is written as write(key, tensor); None is refused.
  void write(const std::string& key, const IValue& value) {
    if (value.isTensor()) return write(key, value.toTensor());
    TANDEM_CHECK(
        !value.isNone(), "OutputArchive: the value for '", key,
        "' is None; an archive holds tensors, bools, numbers, strings and lists of numbers");
    check_new(key);
    const std::string kind = value.tagKind();
    if (value.isString()) {
      metadata_[detail::ivalue_meta_key(key)] = detail::kStringPrefix + value.toStringRef();
      return;
    }
    Tensor stored;
    if (value.isBool()) stored = tensor(value.toBool());
    if (value.isInt()) stored = tensor(value.toInt(), DType::i64);
    if (value.isDouble()) stored = tensor(value.toDouble(), DType::f64);
    if (value.isIntList()) stored = tensor(value.toIntVector(), DType::i64);
    if (value.isDoubleList()) stored = tensor(value.toDoubleVector(), DType::f64);
    entries_.emplace(key, stored);
    metadata_[detail::ivalue_meta_key(key)] = kind;
  }
  void write(const std::string& key, const OutputArchive& nested) {
    for (const std::string& name : nested.keys()) check_new(key + "." + name);  // all or nothing
    for (const auto& [name, tensor] : nested.entries_) entries_.emplace(key + "." + name, tensor);
    detail::rename_kinds(nested.metadata_, "", key + ".", metadata_);
  }
  /// Every tensor of `tensors` under its name (a state_dict).
  void write(const nn::StateDict& tensors) {
    for (const auto& [name, tensor] : tensors) check_new(name);
    for (const auto& [name, tensor] : tensors) write(name, tensor);
  }
  /// Atomically (a failed write leaves an existing file as it was).
  void save_to(const std::string& filename) const {
    io::atomic_write(filename, io::to_safetensors(entries_, metadata_));
  }
  void save_to(std::ostream& stream) const {
    const std::string bytes = io::to_safetensors(entries_, metadata_);
    stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    TANDEM_CHECK_T(io::IoError, stream.good(), "OutputArchive: writing ", bytes.size(),
                   " bytes to the stream failed");
  }
  const nn::StateDict& tensors() const { return entries_; }
  /// Every key written: the tensors' in order, then the strings'.
  std::vector<std::string> keys() const { return detail::archive_keys(entries_, metadata_); }

 private:
  void check_new(const std::string& key) const {
    TANDEM_CHECK(!entries_.contains(key) && !metadata_.count(detail::ivalue_meta_key(key)),
                 "OutputArchive: '", key, "' is written twice");
  }

  nn::StateDict entries_;
  io::Metadata metadata_;  // the kinds of the values written as IValues, and the strings
};

/// libtorch's InputArchive: what an OutputArchive (or any safetensors file) holds, by key.
class InputArchive {
 public:
  void load_from(const std::string& filename) {
    io::Metadata metadata;
    entries_ = io::load_safetensors(filename, &metadata);
    metadata_ = std::move(metadata);
    source_ = filename;
  }
  /// Reads the stream to its end.
  void load_from(std::istream& stream) {
    const std::string bytes{std::istreambuf_iterator<char>(stream), {}};
    io::Metadata metadata;
    entries_ = io::from_safetensors(bytes, &metadata, "<stream>");
    metadata_ = std::move(metadata);
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
  /// The value under `key` as it was written (OutputArchive::write(key, IValue)): a bool, an
  /// integer, a double, a list of them or a string; a tensor written as one (or any tensor of
  /// another tool's file) as a Tensor. False when there is no `key`.
  bool try_read(const std::string& key, IValue& value) const {
    const auto kind = metadata_.find(detail::ivalue_meta_key(key));
    const std::string k = kind == metadata_.end() ? "Tensor" : kind->second;
    if (detail::starts_with(k, detail::kStringPrefix)) {
      value = k.substr(detail::kStringPrefix.size());
      return true;
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    const Tensor& t = it->second;
    const bool scalar = t.dim() == 0, list = t.dim() == 1;
    auto check = [&](bool ok, DType dtype) {
      TANDEM_CHECK_T(io::IoError, ok && t.dtype() == dtype, "InputArchive: '", key, "' in ",
                     source_, " is marked as ", k, " but holds a ", t.dtype(), " tensor of shape ",
                     shape_str(t.shape()));
    };
    if (k == "Tensor") {
      value = t;
    } else if (k == "bool") {
      check(scalar, DType::boolean);
      value = t.item<bool>();
    } else if (k == "int") {
      check(scalar, DType::i64);
      value = t.item<int64_t>();
    } else if (k == "double") {
      check(scalar, DType::f64);
      value = t.item<double>();
    } else if (k == "int[]") {
      check(list, DType::i64);
      value = t.to_vector<int64_t>();
    } else if (k == "double[]") {
      check(list, DType::f64);
      value = t.to_vector<double>();
    } else {
      TANDEM_THROW(io::IoError, "InputArchive: '", key, "' in ", source_, " is of a kind ",
                   "this version does not know: '", k, "'");
    }
    return true;
  }
  /// try_read, throwing an IoError naming the key and the source when it is absent.
  void read(const std::string& key, IValue& value) const {
    TANDEM_CHECK_T(io::IoError, try_read(key, value), "InputArchive: ", source_, " holds no '", key,
                   "'");
  }
  /// The archive nested under `key` (the keys "key.name", as "name"). An archive of nothing
  /// (a module without parameters wrote it) leaves no trace in the bytes, so every key reads
  /// as one: read gives it empty, where try_read says false.
  void read(const std::string& key, InputArchive& nested) const {
    const std::string prefix = key + ".";
    InputArchive out;
    out.source_ = source_ + " ('" + key + "')";
    for (const auto& [name, tensor] : entries_)
      if (detail::starts_with(name, prefix)) out.entries_.emplace(name.substr(prefix.size()), tensor);
    detail::rename_kinds(metadata_, prefix, "", out.metadata_);
    nested = std::move(out);
  }
  bool try_read(const std::string& key, InputArchive& nested) const {
    read(key, nested);
    return !nested.keys().empty();
  }
  /// Every key: the tensors' in the file's order, then the strings'.
  std::vector<std::string> keys() const { return detail::archive_keys(entries_, metadata_); }
  const nn::StateDict& tensors() const { return entries_; }

 private:
  nn::StateDict entries_;
  io::Metadata metadata_;
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
