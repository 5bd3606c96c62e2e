// Step 5, operators: what operators_direct.cpp (PyTorch's structured kernels run on sim tensors) gives the runtime.
#pragma once

#include <torch/extension.h>

namespace sim {

// Binds install_direct_kernels() into torch_sim._C.
void bind_direct_operators(pybind11::module& module);

// Queues `target.copy_(source)` between two tensors of one sim device as the kernel `name`: the CPU's copy on their
// host views, on the device. The caller has checked that the CPU's copy takes the call (no overlap, shapes that
// broadcast), so that nothing is left to fail on the device.
void launch_copy(const at::Tensor& source, const at::Tensor& target, const std::string& name);

}  // namespace sim
