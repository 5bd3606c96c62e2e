// Guide step "distributed": torch.distributed on {{ name }} tensors, through the c10d backend "{{ name }}ccl".
//
// torch.distributed sends each collective to the c10d backend registered for the tensors' device
// (NCCL for CUDA), so init_process_group() with no backend argument picks it. A vendor writes one
// c10d::Backend over its collective communication library and registers it for the device name
// (torch_{{ name }}/distributed.py). This one has no such library to call: it copies the tensors
// to host memory with the runtime, runs the collective on the host copies with PyTorch's Gloo
// backend (the same processes, the same store) and copies the results back, so it works across
// processes and machines as Gloo does, one collective at a time. What a vendor replaces: the body
// of each collective, with the call into its collective library on the device memory itself.
#include "backend.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <vector>

namespace torch_{{ name }} {

// [guide: distributed]
namespace {

using Tensors = std::vector<at::Tensor>;

// An empty host tensor shaped as a {{ name }} tensor of a collective, which must be on a {{ name }} device.
at::Tensor host_like(const at::Tensor& tensor, const char* collective) {
  TORCH_CHECK(tensor.device().type() == kDevice, "{{ name }}ccl: ", collective, " got a tensor on ", tensor.device(),
              "; every tensor of a collective on {{ name }}ccl must be on a {{ name }} device: ",
              "move it with .to('{{ name }}')");
  return at::empty(tensor.sizes(), tensor.options().device(at::kCPU));
}

at::Tensor to_host(const at::Tensor& tensor, const char* collective) {
  at::Tensor host = host_like(tensor, collective);
  at::Tensor source = tensor.contiguous();
  c10::DeviceGuard guard(source.device());
  RUNTIME_CHECK(
      runtime::copy(host.data_ptr(), source.const_data_ptr(), host.nbytes(), runtime::CopyKind::device_to_host));
  return host;
}

void to_device(const at::Tensor& host, at::Tensor& tensor) {
  if (!tensor.is_contiguous()) {
    tensor.copy_(host);  // through the operators' copy, which calls the runtime for each piece
    return;
  }
  c10::DeviceGuard guard(tensor.device());
  RUNTIME_CHECK(
      runtime::copy(tensor.data_ptr(), host.const_data_ptr(), host.nbytes(), runtime::CopyKind::host_to_device));
}

Tensors to_host(const Tensors& tensors, const char* collective) {
  Tensors host;
  for (const auto& tensor : tensors) host.push_back(to_host(tensor, collective));
  return host;
}

Tensors host_like(const Tensors& tensors, const char* collective) {
  Tensors host;
  for (const auto& tensor : tensors) host.push_back(host_like(tensor, collective));
  return host;
}

void to_device(const Tensors& host, Tensors& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) to_device(host[i], tensors[i]);
}

// A finished work whose future holds the collective's {{ name }} tensors, as callers such as DDP's hooks expect.
c10::intrusive_ptr<c10d::Work> finished(const Tensors& outputs) {
  std::vector<c10::Device> devices;
  for (const auto& tensor : outputs) {
    if (std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) devices.push_back(tensor.device());
  }
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  future->markCompleted(c10::IValue(outputs));
  return c10d::Work::create_from_future(future);
}

// Each collective waits for Gloo's work on the host copies, then copies the results to the device.
class Collectives final : public c10d::Backend {
 public:
  Collectives(c10::intrusive_ptr<c10d::Backend> host, int rank, int size)
      : Backend(rank, size), host_(std::move(host)) {}

  // Gloo joins its worker threads when it is destroyed, and a worker may need the GIL to finish: never hold it then.
  ~Collectives() override {
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release without_gil;
      host_.reset();
    }
  }

  const std::string getBackendName() const override { return "{{ name }}ccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& options) override {
    Tensors host = to_host(tensors, "broadcast");
    host_->broadcast(host, options)->wait();
    to_device(host, tensors);
    return finished(tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& options) override {
    Tensors host = to_host(tensors, "all_reduce");
    host_->allreduce(host, options)->wait();
    to_device(host, tensors);
    return finished(tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& options) override {
    Tensors host = to_host(tensors, "reduce");
    host_->reduce(host, options)->wait();
    to_device(host, tensors);
    return finished(tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions& options) override {
    Tensors host_inputs = to_host(inputs, "all_gather");
    std::vector<Tensors> host_outputs;
    for (const auto& list : outputs) host_outputs.push_back(host_like(list, "all_gather"));
    host_->allgather(host_outputs, host_inputs, options)->wait();
    Tensors all;
    for (size_t i = 0; i < outputs.size(); ++i) {
      to_device(host_outputs[i], outputs[i]);
      all.insert(all.end(), outputs[i].begin(), outputs[i].end());
    }
    return finished(all);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& options) override {
    at::Tensor host_input = to_host(input, "all_gather_into_tensor");
    at::Tensor host_output = host_like(output, "all_gather_into_tensor");
    host_->_allgather_base(host_output, host_input, options)->wait();
    to_device(host_output, output);
    return finished({output});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& options) override {
    at::Tensor host_input = to_host(input, "reduce_scatter_tensor");
    at::Tensor host_output = host_like(output, "reduce_scatter_tensor");
    host_->_reduce_scatter_base(host_output, host_input, options)->wait();
    to_device(host_output, output);
    return finished({output});
  }

  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int destination, int tag) override {
    Tensors host = to_host(tensors, "send");
    host_->send(host, destination, tag)->wait();
    return finished(tensors);
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int source, int tag) override {
    Tensors host = host_like(tensors, "recv");
    host_->recv(host, source, tag)->wait();
    to_device(host, tensors);
    return finished(tensors);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options) override {
    return host_->barrier(options);
  }

 private:
  c10::intrusive_ptr<c10d::Backend> host_;
};

}  // namespace

// torch_{{ name }}._C.create_process_group(host, rank, size): {{ name }}ccl over `host`, a Gloo backend of the group.
PyObject* py_create_process_group(PyObject*, PyObject* arguments) {
  PyObject* host = nullptr;
  int rank = 0, size = 0;
  if (!PyArg_ParseTuple(arguments, "Oii", &host, &rank, &size)) return nullptr;
  try {
    auto host_backend = pybind11::handle(host).cast<c10::intrusive_ptr<c10d::Backend>>();
    c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<Collectives>(std::move(host_backend), rank, size);
    return pybind11::cast(backend).release().ptr();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}
// [/guide: distributed]

}  // namespace torch_{{ name }}
