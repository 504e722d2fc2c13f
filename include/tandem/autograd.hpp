// Autograd: grad mode, graph nodes, the backward engine (backward, grad) and custom functions.
#pragma once

#include "tandem/autograd/function.hpp"
#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
