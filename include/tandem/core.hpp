// Devices, dtypes, storage, tensors, the RNG and the CPU thread pool.
#pragma once

#include "tandem/core/device.hpp"
#include "tandem/core/dtype.hpp"
#include "tandem/core/error.hpp"
#include "tandem/core/generator.hpp"
#include "tandem/core/philox.hpp"
#include "tandem/core/shape.hpp"
#include "tandem/core/storage.hpp"
#include "tandem/core/tensor.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/cuda/runtime.hpp"
