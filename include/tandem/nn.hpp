// Modules, layers, initialization and the bundled models.
#pragma once

#include "tandem/nn/attention.hpp"
#include "tandem/nn/functional.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/nn/layers.hpp"
#include "tandem/nn/loss.hpp"
#include "tandem/nn/models/resnet.hpp"
#include "tandem/nn/module.hpp"
#include "tandem/nn/rnn.hpp"
#include "tandem/nn/transformer.hpp"
