// The differentiable functional API.
#pragma once

#include "tandem/ops/autocast.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/index_ops.hpp"
#include "tandem/ops/linalg.hpp"
#include "tandem/ops/nn_ops.hpp"
#include "tandem/ops/reduction.hpp"
#include "tandem/ops/rnn.hpp"
#include "tandem/ops/shape_ops.hpp"
