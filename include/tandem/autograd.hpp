// Autograd: grad mode, graph nodes and the backward engine.
#pragma once

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
