// Checkpoints: safetensors files and full training state.
#pragma once

#include "tandem/io/checkpoint.hpp"
#include "tandem/io/safetensors.hpp"
#include "tandem/io/serialize.hpp"
