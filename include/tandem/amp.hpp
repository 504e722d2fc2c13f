// Mixed precision: autocast and dynamic loss scaling.
#pragma once

#include "tandem/amp/autocast.hpp"
#include "tandem/amp/grad_scaler.hpp"
