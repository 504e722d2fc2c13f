// Training checkpoints: everything a bit-exact resume needs (model, optimizer, schedule, step,
// epoch, position in the epoch, RNG state) in one safetensors file, written atomically.
#pragma once

#include <string>

#include "tandem/core/generator.hpp"
#include "tandem/io/safetensors.hpp"
#include "tandem/nn/module.hpp"

namespace tandem::io {

struct TrainingState {
  nn::StateDict model, optimizer, scheduler;
  nn::StateDict scaler;  // amp::GradScaler's state (empty without loss scaling)
  int64_t step = 0;   // optimizer steps taken
  int64_t epoch = 0;  // the epoch in progress (0-based)
  int64_t batch = 0;  // batches of that epoch already consumed
  uint64_t rng_seed = 0, rng_offset = 0;  // a Generator's position (dropout, init, ...)
  Metadata metadata;  // free-form: model name, dataset, ...
};

/// Saves the state to `path` atomically (the previous file stays intact if this fails).
void save_checkpoint(const std::string& path, const TrainingState& state);
/// Loads and validates a file written by save_checkpoint; throws IoError naming the file when it
/// is damaged or not a tandem checkpoint.
TrainingState load_checkpoint(const std::string& path);

inline void capture_rng(TrainingState& state, const Generator& gen) {
  state.rng_seed = gen.seed();
  state.rng_offset = gen.offset();
}
inline void restore_rng(const TrainingState& state, Generator& gen) {
  gen.set_state(state.rng_seed, state.rng_offset);
}

}  // namespace tandem::io
