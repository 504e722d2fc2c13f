// Fuzzes the training-checkpoint reader (a safetensors file with sections, scalars and metadata
// it checks) with arbitrary file contents (fuzz::safetensors_file). What it accepts must be
// readable whole, and must be saved and loaded again unchanged.
#include "tandem/io/checkpoint.hpp"

#include "common.hpp"

using namespace tandem;

namespace {

void check_same(const nn::StateDict& a, const nn::StateDict& b) {
  TANDEM_FUZZ_CHECK(a.size() == b.size());
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    TANDEM_FUZZ_CHECK(it != b.end() && fuzz::same(it->second, t));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch_dir() / "checkpoint.safetensors";
  const std::string bytes = fuzz::safetensors_file(data, size);
  fuzz::write_file(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  io::TrainingState state;
  try {
    state = io::load_checkpoint(path.string());
  } catch (const Error&) {
    return 0;  // a clean rejection
  }
  for (const nn::StateDict* part : {&state.model, &state.optimizer, &state.scheduler})
    for (const auto& [name, t] : *part) fuzz::touch(t);
  const auto saved = fuzz::scratch_dir() / "saved.safetensors";
  io::save_checkpoint(saved.string(), state);
  const io::TrainingState again = io::load_checkpoint(saved.string());
  check_same(again.model, state.model);
  check_same(again.optimizer, state.optimizer);
  check_same(again.scheduler, state.scheduler);
  TANDEM_FUZZ_CHECK(again.step == state.step && again.epoch == state.epoch &&
                    again.batch == state.batch && again.rng_seed == state.rng_seed &&
                    again.rng_offset == state.rng_offset && again.metadata == state.metadata);
  return 0;
}
