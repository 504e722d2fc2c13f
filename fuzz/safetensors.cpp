// Fuzzes the safetensors reader with arbitrary bytes (fuzz::safetensors_file: as they are, or a
// header and data whose length prefix is computed). What it accepts must be readable whole, and
// must survive a round trip through the writer unchanged (the two agree on what is valid).
#include "tandem/io/safetensors.hpp"

#include "common.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = fuzz::safetensors_file(data, size);
  io::Metadata metadata;
  nn::StateDict tensors;
  try {
    tensors = io::from_safetensors(bytes, &metadata, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;  // a clean rejection
  }
  for (const auto& [name, t] : tensors) fuzz::touch(t);
  io::Metadata again_metadata;
  const nn::StateDict again =
      io::from_safetensors(io::to_safetensors(tensors, metadata), &again_metadata);
  TANDEM_FUZZ_CHECK(again_metadata == metadata && again.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    auto it = again.find(name);
    TANDEM_FUZZ_CHECK(it != again.end() && fuzz::same(it->second, t));
  }
  return 0;
}
