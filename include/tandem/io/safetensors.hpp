// The safetensors format (8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw little-endian data), so other tools can read tandem's
// weights and tandem can read theirs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "tandem/core/error.hpp"
#include "tandem/nn/module.hpp"

namespace tandem::io {

/// A file could not be read or written, or its contents are invalid. The message names the file.
class IoError : public Error {
  using Error::Error;
};

using Metadata = std::map<std::string, std::string>;

/// Headers longer than this are refused (as the reference implementation does).
inline constexpr uint64_t kMaxHeaderBytes = 100u << 20;

/// The safetensors dtype name ("F32", "BF16", "BOOL", ...).
const char* safetensors_dtype(DType dtype);

/// Encodes tensors (any device; written from their CPU copies), their data in the dict's order
/// (from_safetensors gives them back in that order), with `metadata` as the header's
/// "__metadata__".
std::string to_safetensors(const nn::StateDict& tensors, const Metadata& metadata = {});
/// Decodes and validates everything before trusting it: header length limit, JSON syntax, known
/// dtypes, no duplicate names, shape x dtype size equal to each byte range (overflow-checked),
/// ranges contiguous from 0 to exactly the end of the data. `source` names the bytes in errors.
nn::StateDict from_safetensors(const std::string& bytes, Metadata* metadata = nullptr,
                               const std::string& source = "<memory>");

/// Writes `path` atomically: a temp file in the same folder, fsync, rename over `path`, fsync of
/// the folder. A failure at any point leaves an existing file at `path` untouched.
void atomic_write(const std::string& path, const std::string& bytes);
/// Reads a whole file; throws IoError naming it when it cannot.
std::string read_file(const std::string& path);

inline void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                             const Metadata& metadata = {}) {
  atomic_write(path, to_safetensors(tensors, metadata));
}
inline nn::StateDict load_safetensors(const std::string& path, Metadata* metadata = nullptr) {
  return from_safetensors(read_file(path), metadata, path);
}

}  // namespace tandem::io
