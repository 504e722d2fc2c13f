// Fuzzes the IDX reader (MNIST, Fashion-MNIST). The first byte picks the file: even, the rest of
// the input as it is (a plain file, or a gzip stream the fuzzer damages itself); odd, the rest
// gzip-compressed here, so that mutations reach the reader through a valid stream.
#include "tandem/data/idx.hpp"

#include <zlib.h>

#include "common.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto path = fuzz::scratch_dir() / "input.idx";
  if (data[0] % 2 == 0) {
    fuzz::write_file(path, data + 1, size - 1);
  } else {
    gzFile f = gzopen(path.c_str(), "wb");
    TANDEM_FUZZ_CHECK(f != nullptr);
    TANDEM_FUZZ_CHECK(size == 1 || gzwrite(f, data + 1, static_cast<unsigned>(size - 1)) > 0);
    TANDEM_FUZZ_CHECK(gzclose(f) == Z_OK);
  }
  Tensor t;
  try {
    t = data::read_idx(path.string());
  } catch (const Error&) {
    return 0;  // a clean rejection
  }
  TANDEM_FUZZ_CHECK(t.dtype() == DType::u8 && t.dim() >= 1 && t.dim() <= 4);
  fuzz::touch(t);
  return 0;
}
