// Data parallelism: launch (one rank per device) and DistributedDataParallel.
#pragma once

#include "tandem/parallel/ddp.hpp"
#include "tandem/parallel/launch.hpp"
