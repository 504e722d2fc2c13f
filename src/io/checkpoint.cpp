#include "tandem/io/checkpoint.hpp"

#include <cstring>

#include "tandem/ops/creation.hpp"

namespace tandem::io {

namespace {

constexpr const char* kFormat = "tandem-checkpoint";
constexpr const char* kVersion = "1";
const char* const kSections[] = {"model.", "optimizer.", "scheduler.", "scaler."};
constexpr int kNumSections = 4;

Tensor i64_scalar(int64_t v) {
  Tensor t = empty({}, TensorOptions(DType::i64).device(kCPU));
  *t.data_ptr<int64_t>() = v;
  return t;
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainingState& state) {
  nn::StateDict all;
  const nn::StateDict* parts[] = {&state.model, &state.optimizer, &state.scheduler, &state.scaler};
  for (int s = 0; s < kNumSections; ++s)
    for (const auto& [name, t] : *parts[s]) all.emplace(kSections[s] + name, t);
  all.emplace("train.step", i64_scalar(state.step));
  all.emplace("train.epoch", i64_scalar(state.epoch));
  all.emplace("train.batch", i64_scalar(state.batch));
  // u64 RNG words stored bit for bit in i64 slots.
  int64_t seed, offset;
  std::memcpy(&seed, &state.rng_seed, 8);
  std::memcpy(&offset, &state.rng_offset, 8);
  all.emplace("rng.seed", i64_scalar(seed));
  all.emplace("rng.offset", i64_scalar(offset));
  Metadata meta = state.metadata;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  save_safetensors(path, all, meta);
}

TrainingState load_checkpoint(const std::string& path) {
  TrainingState state;
  nn::StateDict all = load_safetensors(path, &state.metadata);
  TANDEM_CHECK_T(IoError, state.metadata["format"] == kFormat, path,
                 ": not a tandem training checkpoint (no format=", kFormat, " in its metadata)");
  TANDEM_CHECK_T(IoError, state.metadata["version"] == kVersion, path,
                 ": checkpoint version '", state.metadata["version"], "', this build reads ",
                 kVersion);
  auto scalar = [&](const char* key) {
    auto it = all.find(key);
    TANDEM_CHECK_T(IoError, it != all.end() && it->second.dtype() == DType::i64 &&
                                it->second.numel() == 1,
                   path, ": checkpoint lacks the i64 scalar '", key, "'");
    return *it->second.data_ptr<int64_t>();
  };
  state.step = scalar("train.step");
  state.epoch = scalar("train.epoch");
  state.batch = scalar("train.batch");
  int64_t seed = scalar("rng.seed"), offset = scalar("rng.offset");
  std::memcpy(&state.rng_seed, &seed, 8);
  std::memcpy(&state.rng_offset, &offset, 8);
  TANDEM_CHECK_T(IoError, state.step >= 0 && state.epoch >= 0 && state.batch >= 0, path,
                 ": negative step, epoch or batch in the checkpoint");
  nn::StateDict* parts[] = {&state.model, &state.optimizer, &state.scheduler, &state.scaler};
  for (auto& [name, t] : all) {
    bool placed = name.rfind("train.", 0) == 0 || name.rfind("rng.", 0) == 0;
    for (int s = 0; s < kNumSections && !placed; ++s) {
      size_t len = std::strlen(kSections[s]);
      if (name.compare(0, len, kSections[s]) == 0) {
        parts[s]->emplace(name.substr(len), t);
        placed = true;
      }
    }
    TANDEM_CHECK_T(IoError, placed, path, ": unexpected entry '", name, "' in the checkpoint");
  }
  return state;
}

}  // namespace tandem::io
