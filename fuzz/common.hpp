// What the fuzz targets share: a scratch folder for the readers that take paths, the checks that
// turn a wrong answer into a crash libFuzzer records, and a read of every tensor a reader returns.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tandem/core/tensor.hpp"

namespace tandem::fuzz {

/// A finding: libFuzzer saves the input that led here.
#define TANDEM_FUZZ_CHECK(cond)                                                          \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

/// This process's own folder for the files a reader is given (several fuzzing jobs may run).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("tandem-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  TANDEM_FUZZ_CHECK(out.good());
}

/// The bytes of a safetensors file from a fuzz input. First byte even: the rest, as it is. Odd:
/// the rest is the JSON header, a NUL, then the data, and the 8-byte little-endian header length
/// is written here, so that a mutation of the header need not keep the length in step with it.
inline std::string safetensors_file(const uint8_t* data, size_t size) {
  if (size == 0) return "";
  const char* rest = reinterpret_cast<const char*>(data) + 1;
  if (data[0] % 2 == 0) return std::string(rest, size - 1);
  const char* nul = static_cast<const char*>(std::memchr(rest, '\0', size - 1));
  const size_t header = nul ? static_cast<size_t>(nul - rest) : size - 1;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{header} >> (8 * i)) & 0xff);
  out.append(rest, header);
  if (nul) out.append(nul + 1, size - 1 - header - 1);
  return out;
}

/// Reads the first and the last byte that the tensor's shape and strides address: a tensor whose
/// shape claims more than its storage holds is a heap overflow that ASan reports here.
inline void touch(const Tensor& t) {
  TANDEM_FUZZ_CHECK(t.defined() && t.is_cpu());
  if (t.numel() == 0) return;
  int64_t last = 0;  // the last element's index, overflow-checked: a shape can be impossible
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t step;
    TANDEM_FUZZ_CHECK(!__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &step) &&
                      !__builtin_add_overflow(last, step, &last));
  }
  int64_t end;  // its last byte
  TANDEM_FUZZ_CHECK(!__builtin_mul_overflow(last + 1, t.element_size(), &end));
  end -= 1;
  TANDEM_FUZZ_CHECK((t.storage_offset() + last + 1) * t.element_size() <=
                    static_cast<int64_t>(t.storage().nbytes()));
  const auto* p = static_cast<const volatile unsigned char*>(t.raw_data());
  (void)p[0];
  (void)p[end];
}

/// Same dtype, shape and bytes.
inline bool same(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.numel() == 0) return true;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(),
                     static_cast<size_t>(x.numel() * x.element_size())) == 0;
}

}  // namespace tandem::fuzz
