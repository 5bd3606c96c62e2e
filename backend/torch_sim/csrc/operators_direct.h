// Step 5, operators: what operators_direct.cpp (PyTorch's structured kernels run on sim tensors) gives the runtime.
#pragma once

#include <torch/extension.h>

namespace sim {

// Binds install_direct_kernels() into torch_sim._C.
void bind_direct_operators(pybind11::module& module);

}  // namespace sim
