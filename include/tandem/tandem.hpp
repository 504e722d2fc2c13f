// Everything: #include "tandem/tandem.hpp".
#pragma once

#include "tandem/autograd.hpp"
#include "tandem/core.hpp"
#include "tandem/ops.hpp"
#include "tandem/nn.hpp"
#include "tandem/optim.hpp"
#include "tandem/amp.hpp"
#include "tandem/io.hpp"
#include "tandem/data.hpp"
#include "tandem/comm.hpp"
#include "tandem/parallel.hpp"
