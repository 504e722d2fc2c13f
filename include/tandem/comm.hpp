// Communicators and their backends.
#pragma once

#include "tandem/comm/communicator.hpp"
#include "tandem/comm/local.hpp"
#include "tandem/comm/mpi.hpp"
#include "tandem/comm/nccl.hpp"
