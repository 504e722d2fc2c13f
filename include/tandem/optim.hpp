// Optimizers and learning-rate schedules.
#pragma once

#include "tandem/optim/lbfgs.hpp"
#include "tandem/optim/optimizer.hpp"
#include "tandem/optim/schedule.hpp"
