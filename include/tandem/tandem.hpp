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

// What torch/torch.h also brings, for code ported from libtorch with a namespace change: assert,
// and libtorch's checking macros (where libtorch's own are not defined), which throw
// ValueError with the condition and the streamed message.
#include <cassert>
#include <iostream>

#ifndef TORCH_CHECK
#define TORCH_CHECK(cond, ...) \
  TANDEM_CHECK(cond, "Expected " #cond " to be true, but got false. ", ##__VA_ARGS__)
#endif
#ifndef TORCH_INTERNAL_ASSERT
#define TORCH_INTERNAL_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#endif
#ifndef AT_ASSERT
#define AT_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#endif
#ifndef TORCH_WARN
#define TORCH_WARN(...) (std::cerr << "Warning: " << ::tandem::detail::str_cat(__VA_ARGS__) << '\n')
#endif
