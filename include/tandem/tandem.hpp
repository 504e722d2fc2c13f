// Everything: #include "tandem/tandem.hpp".
#pragma once

#include "tandem/autograd.hpp"
#include "tandem/core.hpp"
#include "tandem/ops.hpp"
