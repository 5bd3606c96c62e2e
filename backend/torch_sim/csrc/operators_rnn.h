// Step 5, operators: what operators_rnn.cpp (the whole-sequence recurrent kernels) gives the runtime.
#pragma once

#include <torch/extension.h>

namespace sim {

// Binds install_recurrent_kernels(names) and install_recurrent_autograd(names) into torch_sim._C.
void bind_recurrent_operators(pybind11::module& module);

}  // namespace sim
