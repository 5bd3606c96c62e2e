// Step 5, operators: recurrent networks as whole-sequence kernels that take the CPU's route.
//
// aten::lstm, gru, rnn_tanh and rnn_relu (padded and packed) and the *_cell operators are composites
// (CompositeImplicitAutograd) that choose their route from the device of their tensors. CPU tensors take a
// route over the whole sequence on the host: oneDNN's mkldnn_rnn_layer per layer and direction for a float
// LSTM, otherwise a loop over the time steps whose input projection is computed for all steps at once. Any
// other device gets the fused cell kernels (_thnn_fused_*_cell) once per time step, with a few small
// operators around each: on sim every one of them pays the dispatcher and the per-call cost, and the fused
// cells round differently from the CPU's route.
//
// sim registers one boxed kernel for these operators on PrivateUse1 (step 5) and AutogradPrivateUse1 (step 8,
// autograd). It shows the
// device tensors to the host as CPU tensors over the same bytes and calls the operator on them, so ATen
// makes the CPU's own choice for the same tensors and computes what the CPU computes. When a gradient is
// wanted, the host's autograd records its graph exactly as on the CPU; one sim autograd node stands for
// that graph in the device's graph and runs the host's backward on device memory when it is reached.
// Tensors that are not plain sim tensors (fake, functional, batched) take the composite route instead.
#include "operators_rnn.h"

#include "interface_trace.h"
#include "sim.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <cctype>
#include <typeinfo>
#include <utility>
#include <vector>

namespace sim {
namespace {

using torch::autograd::variable_list;

// While the host computes for a sim device: that device is current and the CPU allocator hands out its memory.
struct OnHostFor {
  c10::DeviceGuard device_guard;
  DeviceIndex previous_redirect;
  explicit OnHostFor(c10::Device device)
      : device_guard(device), previous_redirect(exchange_host_redirect(device.index())) {}
  ~OnHostFor() { exchange_host_redirect(previous_redirect); }
};

void release_storage(void* context) { delete static_cast<c10::Storage*>(context); }

// A storage over `owner`'s bytes, claiming `device`, that keeps `owner` alive.
c10::Storage storage_over(const c10::Storage& owner, c10::Device device, c10::Allocator* allocator) {
  auto* keep_alive = new c10::Storage(owner);
  c10::DataPtr data(owner.unsafeGetStorageImpl()->mutable_data(), keep_alive, &release_storage, device);
  return c10::Storage(c10::Storage::use_byte_size_t(), owner.nbytes(), std::move(data), allocator,
                      owner.resizable());
}

// The host tensors shown for one call's sim tensors (one per tensor, one host storage per device storage),
// and the way back for host results: a tensor over the device storage they were shown from, the result's
// own bytes when they are sim memory (host kernels allocate there while they compute for sim), else a copy.
class HostExchange {
 public:
  explicit HostExchange(c10::Device device) : device_(device) {}

  // The host tensor for `t` and whether this call shows it for the first time.
  std::pair<at::Tensor, bool> to_host(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kSim) return {t, false};
    for (auto& [device_tensor, host_tensor] : tensors_)
      if (device_tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return {host_tensor, false};
    c10::Storage host_storage;
    for (auto& [device_storage, shown] : storages_)
      if (device_storage.unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl()) host_storage = shown;
    if (!host_storage) {
      host_storage = storage_over(t.storage(), c10::Device(c10::kCPU), redirecting_cpu_allocator());
      storages_.emplace_back(t.storage(), host_storage);
    }
    at::Tensor host = tensor_on_storage(host_storage, c10::DispatchKey::CPU, t);
    tensors_.emplace_back(t, host);
    return {host, true};
  }

  at::Tensor to_device(const at::Tensor& host) {
    if (!host.defined() || host.device().type() == kSim) return host;
    for (auto& [device_storage, shown] : storages_)
      if (shown.unsafeGetStorageImpl() == host.storage().unsafeGetStorageImpl())
        return tensor_on_storage(device_storage, c10::DispatchKey::PrivateUse1, host);
    if (is_sim_memory(host.storage()))
      return tensor_on_storage(storage_over(host.storage(), device_, &device_allocator()),
                               c10::DispatchKey::PrivateUse1, host);
    auto options = host.options().device(device_);
    at::Tensor copy = host.is_non_overlapping_and_dense()
                          ? at::empty_strided(host.sizes(), host.strides(), options)
                          : at::empty(host.sizes(), options);
    return copy.copy_(host);
  }

 private:
  c10::Device device_;
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors_;     // a sim tensor and the host tensor shown for it
  std::vector<std::pair<c10::Storage, c10::Storage>> storages_;  // a device storage and the host's view of it
};

// The host's autograd graph of one call, as one node of the device's graph: its inputs are the host
// results (the roots of the host graph), its next edges the sim tensors the host leaves stand for.
struct HostGraphBackward : torch::autograd::Node {
  HostGraphBackward(std::string name, c10::Device device, torch::autograd::edge_list&& next_edges,
                    variable_list roots, variable_list leaves, bool second_order)
      : Node(std::move(next_edges)),
        name_(std::move(name)),
        backward_kernel_name_("sim::" + name_),
        device_(device),
        roots_(std::move(roots)),
        leaves_(std::move(leaves)),
        second_order_(second_order) {}

  std::string name() const override {
    SIM_TRACE("autograd_node", "name", name_);
    return name_;
  }
  void release_variables() override {
    SIM_TRACE("autograd_node", "release_variables", name_);
    roots_.clear();
    leaves_.clear();
    released_ = true;
  }

  variable_list apply(variable_list&& grads) override {
    SIM_TRACE("autograd_node", "apply", name_);
    TORCH_CHECK(!released_, torch::autograd::ERR_BACKWARD_TWICE);
    const bool create_graph = c10::GradMode::is_enabled();  // the engine enables it for create_graph=True
    HostExchange exchange(device_);
    variable_list roots, root_grads, grad_leaves;
    torch::autograd::edge_list grad_edges;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      auto [host, first_time] = exchange.to_host(grads[i]);
      if (create_graph && first_time && grads[i].requires_grad()) {
        host.set_requires_grad(true);
        grad_leaves.push_back(host);
        grad_edges.push_back(torch::autograd::impl::gradient_edge(grads[i]));
      }
      roots.push_back(roots_[i]);
      root_grads.push_back(host);
    }
    variable_list result(leaves_.size());
    if (roots.empty()) return result;
    // Outside an engine's graph task (none is current) nothing tells whether the graph is needed again: keep
    // it. A second-order node's host graph reaches into the first-order host graph, which the first-order
    // node (reached after it) still runs: it keeps the host graph, the first-order node frees it.
    const bool keep_graph = second_order_ || torch::autograd::get_current_graph_task_id() == -1 ||
                            torch::autograd::get_current_graph_task_keep_graph();
    if (!create_graph) {
      // backward, not grad(): the host graph runs as on the CPU, its leaves' AccumulateGrad taking the
      // sums (no search for the nodes that lead to given inputs); each leaf belongs to this call alone.
      run_kernel(device_, backward_kernel_name_, [&] {
        OnHostFor on_host(device_);
        torch::autograd::backward(roots, root_grads, keep_graph, /*create_graph=*/false);
      });
      for (size_t i = 0; i < leaves_.size(); ++i) {
        at::Tensor& grad = leaves_[i].mutable_grad();
        result[i] = exchange.to_device(grad);
        grad.reset();
      }
      return result;
    }
    // A second derivative: the host records the graph of its backward, which joins the device's graph in turn.
    variable_list host_grads;
    run_kernel(device_, backward_kernel_name_, [&] {
      OnHostFor on_host(device_);
      host_grads = torch::autograd::grad(roots, leaves_, root_grads, keep_graph, /*create_graph=*/true,
                                         /*allow_unused=*/true);
    });
    for (size_t i = 0; i < host_grads.size(); ++i) result[i] = exchange.to_device(host_grads[i]);
    torch::autograd::edge_list edges = next_edges();
    edges.insert(edges.end(), grad_edges.begin(), grad_edges.end());
    variable_list leaves = leaves_;
    leaves.insert(leaves.end(), grad_leaves.begin(), grad_leaves.end());
    connect(name_ + "Backward", device_, std::move(edges), host_grads, std::move(leaves), result,
            /*second_order=*/true);
    return result;
  }

  // Makes the host results that need a gradient (`host_results`, with their sim tensors `results`) the
  // inputs of one new node whose next edges `edges` match the host leaves `leaves`.
  static void connect(std::string name, c10::Device device, torch::autograd::edge_list&& edges,
                      const variable_list& host_results, variable_list&& leaves, const variable_list& results,
                      bool second_order) {
    variable_list roots, connected;
    for (size_t i = 0; i < host_results.size(); ++i) {
      if (!host_results[i].defined() || !host_results[i].requires_grad()) continue;
      // in-place changes on the device reach the version checks of the host graph's saved tensors
      results[i].unsafeGetTensorImpl()->set_version_counter(host_results[i].unsafeGetTensorImpl()->version_counter());
      roots.push_back(host_results[i]);
      connected.push_back(results[i]);
    }
    if (roots.empty()) return;
    auto node = c10::make_intrusive<HostGraphBackward>(std::move(name), device, std::move(edges), std::move(roots),
                                                       std::move(leaves), second_order);
    for (const auto& result : connected) torch::autograd::set_history(result, node);
  }

 private:
  std::string name_;
  std::string backward_kernel_name_;
  c10::Device device_;
  variable_list roots_;
  variable_list leaves_;
  bool second_order_;
  bool released_ = false;
};

// Only plain sim tensors are shown to the host: a fake, functional or batched tensor has no bytes to show.
bool is_plain(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return typeid(*impl) == typeid(c10::TensorImpl) && impl->has_storage() && t.layout() == c10::kStrided &&
         !impl->key_set().has(c10::DispatchKey::Python);
}

std::string short_name(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  return name.substr(name.find("::") + 2);
}

// "rnn_tanh" -> "SimRnnTanhBackward", the name the device's graph shows for the host graph.
std::string node_name(const c10::OperatorHandle& op) {
  std::string name = "Sim";
  bool capital = true;
  for (char c : short_name(op)) {
    if (c == '_') {
      capital = true;
      continue;
    }
    name += capital ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    capital = false;
  }
  return name + "Backward";
}

void run_on_host_route(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool with_autograd) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  std::optional<c10::Device> device;
  std::optional<c10::Device> host_tensor;
  bool plain = true;
  bool wants_grad = false;
  auto see = [&](const at::Tensor& t, size_t argument) {
    if (!t.defined()) return;
    if (!is_plain(t)) {
      plain = false;
    } else if (t.device().type() == kSim) {
      if (device && *device != t.device()) host_tensor = t.device();
      device = device.value_or(t.device());
      wants_grad = wants_grad || t.requires_grad();
    } else if (t.dim() > 0 && arguments[argument].name() != "batch_sizes") {  // packed lengths live on the host
      host_tensor = t.device();
    }
  };
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      see(value.toTensor(), i);
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) see(t, i);
    }
  }
  if (!plain || !device) {
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
    return;
  }
  TORCH_CHECK(!host_tensor, "Expected all tensors to be on the same device, but found at least two devices, ", *device,
              " and ", *host_tensor, "! (in ", op.schema().name(), "; move them with .to(device) first)");

  const bool record = with_autograd && wants_grad && c10::GradMode::is_enabled();
  HostExchange exchange(*device);
  variable_list device_leaves, host_leaves;
  auto show = [&](const at::Tensor& t) {
    auto [host, first_time] = exchange.to_host(t);
    if (record && first_time) {
      // in-place changes on the device reach the version checks of the host graph's saved tensors
      host.unsafeGetTensorImpl()->set_version_counter(t.unsafeGetTensorImpl()->version_counter());
      if (t.requires_grad()) {
        host.set_requires_grad(true);
        device_leaves.push_back(t);
        host_leaves.push_back(host);
      }
    }
    return host;
  };
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      value = show(value.toTensor());
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, show(list.get(j)));
    }
  }

  const std::string kernel_name = "sim::" + short_name(op);
  wait_for_queued_draws(device->index());
  run_kernel(*device, kernel_name, [&] {
    OnHostFor on_host(*device);
    DeviceRandomScope random(/*active=*/true, device->index());  // dropout between layers draws from sim's state
    if (with_autograd) {
      op.callBoxed(stack);
    } else {
      c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    }
  });

  variable_list host_results, results;
  const size_t returns = op.schema().returns().size();
  for (size_t i = stack->size() - returns; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (!value.isTensor()) continue;
    host_results.push_back(value.toTensor());
    results.push_back(exchange.to_device(host_results.back()));
    value = results.back();
  }
  if (!record) return;
  torch::autograd::edge_list next_edges;
  for (const auto& t : device_leaves) next_edges.push_back(torch::autograd::impl::gradient_edge(t));
  HostGraphBackward::connect(node_name(op), *device, std::move(next_edges), host_results, std::move(host_leaves),
                             results, /*second_order=*/false);
}

void autograd_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_on_host_route(op, stack, /*with_autograd=*/true);
}

void device_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_on_host_route(op, stack, /*with_autograd=*/false);
}

void install_recurrent_kernels(const std::vector<std::string>& operator_names) {
  auto& device = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& name : operator_names)
    device.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&device_kernel>());
}

// Step 8 (autograd) installs these: until then the composites' own derivatives train recurrent layers.
void install_recurrent_autograd(const std::vector<std::string>& operator_names) {
  auto& autograd =
      new_library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  for (const auto& name : operator_names)
    autograd.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&autograd_kernel>());
}

}  // namespace

void bind_recurrent_operators(pybind11::module& module) {
  module.def("install_recurrent_kernels", &install_recurrent_kernels);
  module.def("install_recurrent_autograd", &install_recurrent_autograd);
}

}  // namespace sim
