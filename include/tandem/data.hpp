// Datasets, transforms, the distributed sampler and the data loader.
#pragma once

#include "tandem/data/dataset.hpp"
#include "tandem/data/idx.hpp"
#include "tandem/data/loader.hpp"
#include "tandem/data/pipeline.hpp"
#include "tandem/data/transforms.hpp"
