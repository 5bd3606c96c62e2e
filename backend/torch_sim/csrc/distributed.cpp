// Step 14, distributed: a c10d process-group backend ("simccl") for sim tensors.
//
// torch.distributed sends every collective through one c10d::Backend per device type; a vendor
// writes one for its device (NCCL for CUDA, HCCL for Ascend) and registers it for the device name,
// so init_process_group() with no backend argument picks it. simccl moves the bytes through the host's Gloo
// backend: with unified memory it hands Gloo CPU views of the very same device memory (no staging copies); with
// discrete memory, which host code cannot touch, it stages each tensor through host memory (HostBuffers). It
// wraps Gloo's work so that wait() and futures give back the caller's sim tensors. Every tensor is checked to be
// on sim before anything is sent.
#include "graphs.h"
#include "interface_trace.h"
#include "sim.h"

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sim {

constexpr const char* kBackendName = "simccl";

// A collective runs at once on the host (Gloo) and no capture records it: a graph replay would skip it and give a
// silently wrong answer, so a capture fails instead, as for any other work a capture cannot hold.
static void refuse_collective_if_capturing(DeviceIndex device, const char* collective) {
  refuse_if_capturing(device, c10::str("simccl's ", collective, " runs at once on the host (Gloo) and a graph cannot "
                                       "record it; run collectives outside the capture, between replays"));
}

static void check_on_sim(const at::Tensor& tensor, const char* argument, const char* collective) {
  TORCH_CHECK(!tensor.defined() || tensor.device().type() == c10::DeviceType::PrivateUse1,
              "simccl: ", collective, " got a tensor on ", tensor.device(), " in '", argument,
              "'; every tensor of a collective on the simccl backend must be on a sim device: move it with .to('sim')");
  if (tensor.defined() && any_capture()) refuse_collective_if_capturing(tensor.device().index(), collective);
}

// The host memory a collective's bytes go through. With unified memory Gloo works on CPU views of the sim tensors'
// own bytes. With discrete memory the host cannot touch them: each tensor is copied to host memory first, and the
// collective's outputs are copied back once it finished, as a collectives library stages the memory of a device
// it cannot address.
class HostBuffers {
 public:
  explicit HostBuffers(const char* collective) : collective_(collective) {}

  at::Tensor of(const at::Tensor& tensor, const char* argument) {
    check_on_sim(tensor, argument, collective_);
    if (!tensor.defined() || !discrete_memory()) return host_view(tensor);
    at::Tensor staged = tensor.to(at::kCPU);
    staged_.emplace_back(tensor, staged);
    return staged;
  }
  std::vector<at::Tensor> of(const std::vector<at::Tensor>& tensors, const char* argument) {
    std::vector<at::Tensor> buffers;
    buffers.reserve(tensors.size());
    for (const auto& tensor : tensors) buffers.push_back(of(tensor, argument));
    return buffers;
  }
  std::vector<std::vector<at::Tensor>> of(const std::vector<std::vector<at::Tensor>>& lists, const char* argument) {
    std::vector<std::vector<at::Tensor>> buffers;
    buffers.reserve(lists.size());
    for (const auto& list : lists) buffers.push_back(of(list, argument));
    return buffers;
  }
  // The (sim tensor, host buffer) pairs to copy back into `outputs` once the collective finished.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_back(const std::vector<at::Tensor>& outputs) const {
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;
    for (const auto& output : outputs) {
      for (const auto& [tensor, staged] : staged_) {
        if (tensor.unsafeGetTensorImpl() == output.unsafeGetTensorImpl()) {
          copies.emplace_back(tensor, staged);
          break;
        }
      }
    }
    return copies;
  }

 private:
  const char* collective_;
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_;
};

// Copies a finished collective's staged outputs back to the device, once, whoever asks first (wait() or the future).
class CopyBack {
 public:
  explicit CopyBack(std::vector<std::pair<at::Tensor, at::Tensor>> copies) : copies_(std::move(copies)) {}
  void run() {
    std::call_once(done_, [this] {
      for (auto& [tensor, staged] : copies_) tensor.copy_(staged);
      copies_.clear();
    });
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;
  std::once_flag done_;
};

// Gloo's work, seen through sim: waiting waits for Gloo; the result and the future hold the
// caller's sim tensors (DDP's reducer makes the gradients views of them), not the host views.
class SimWork : public c10d::Work {
 public:
  SimWork(c10::intrusive_ptr<c10d::Work> host_work, std::vector<at::Tensor> outputs,
          std::shared_ptr<CopyBack> copy_back)
      : host_work_(std::move(host_work)), outputs_(std::move(outputs)), copy_back_(std::move(copy_back)) {}

  bool isCompleted() override {
    SIM_TRACE("distributed", "isCompleted", "");
    return host_work_->isCompleted();
  }
  bool isSuccess() const override {
    SIM_TRACE("distributed", "isSuccess", "");
    return host_work_->isSuccess();
  }
  std::exception_ptr exception() const override {
    SIM_TRACE("distributed", "exception", "");
    return host_work_->exception();
  }
  int sourceRank() const override {
    SIM_TRACE("distributed", "sourceRank", "");
    return host_work_->sourceRank();
  }
  std::vector<at::Tensor> result() override {
    SIM_TRACE("distributed", "result", "");
    return outputs_;
  }
  void synchronize() override {
    SIM_TRACE("distributed", "synchronize", "");
    host_work_->synchronize();
    copy_back_->run();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    SIM_TRACE("distributed", "wait", c10::str("timeout_ms=", timeout.count()));
    bool finished = host_work_->wait(timeout);
    if (finished) copy_back_->run();
    return finished;
  }
  void abort() override {
    SIM_TRACE("distributed", "abort", "");
    host_work_->abort();
  }
  // Made on first use: some of Gloo's works have no future, and only asking for it is an error.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    SIM_TRACE("distributed", "getFuture", "");
    if (!future_) {
      auto tensors = outputs_;
      auto copy_back = copy_back_;
      future_ = host_work_->getFuture()->then(
          [tensors, copy_back](c10::ivalue::Future& finished) {
            if (!finished.hasError()) copy_back->run();
            return c10::IValue(tensors);
          },
          c10::ListType::create(c10::TensorType::get()));
    }
    return future_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> host_work_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<CopyBack> copy_back_;
};

class SimCollectives : public c10d::Backend {
 public:
  SimCollectives(c10::intrusive_ptr<c10d::Backend> host, int rank, int size)
      : Backend(rank, size), host_(std::move(host)) {}

  // Gloo's destructor joins its worker threads, and a worker that frees a finished work takes the GIL (the
  // work's saved thread-local state can hold Python objects). The last reference often goes with a Python
  // object (DDP's reducer, collected after destroy_process_group): never wait for the workers holding the GIL.
  ~SimCollectives() override {
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release without_gil;
      host_.reset();
    } else {
      host_.reset();
    }
  }

  const std::string getBackendName() const override {
    SIM_TRACE("distributed", "getBackendName", "");
    return kBackendName;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    SIM_TRACE("distributed", "broadcast", c10::str("rank=", getRank()));
    HostBuffers buffers("broadcast");
    auto views = buffers.of(tensors, "tensor");
    return wrap(host_->broadcast(views, opts), tensors, buffers);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    SIM_TRACE("distributed", "allreduce", c10::str("rank=", getRank()));
    HostBuffers buffers("all_reduce");
    auto views = buffers.of(tensors, "tensor");
    return wrap(host_->allreduce(views, opts), tensors, buffers);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    SIM_TRACE("distributed", "allreduce_coalesced", c10::str("rank=", getRank()));
    HostBuffers buffers("all_reduce_coalesced");
    auto views = buffers.of(tensors, "tensors");
    return wrap(host_->allreduce_coalesced(views, opts), tensors, buffers);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    SIM_TRACE("distributed", "reduce", c10::str("rank=", getRank()));
    HostBuffers buffers("reduce");
    auto views = buffers.of(tensors, "tensor");
    return wrap(host_->reduce(views, opts), tensors, buffers);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    SIM_TRACE("distributed", "allgather", c10::str("rank=", getRank()));
    HostBuffers buffers("all_gather");
    auto output_views = buffers.of(outputs, "tensor_list");
    auto input_views = buffers.of(inputs, "tensor");
    return wrap(host_->allgather(output_views, input_views, opts), flatten(outputs), buffers);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    SIM_TRACE("distributed", "_allgather_base", c10::str("rank=", getRank()));
    HostBuffers buffers("all_gather_into_tensor");
    auto output_view = buffers.of(output, "output_tensor");
    auto input_view = buffers.of(input, "input_tensor");
    return wrap(host_->_allgather_base(output_view, input_view, opts), {output}, buffers);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    SIM_TRACE("distributed", "allgather_into_tensor_coalesced", c10::str("rank=", getRank()));
    HostBuffers buffers("all_gather_into_tensor (coalesced)");
    auto output_views = buffers.of(outputs, "output_tensors");
    auto input_views = buffers.of(inputs, "input_tensors");
    return wrap(host_->allgather_into_tensor_coalesced(output_views, input_views, opts), outputs, buffers);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    SIM_TRACE("distributed", "gather", c10::str("rank=", getRank()));
    HostBuffers buffers("gather");
    auto output_views = buffers.of(outputs, "gather_list");
    auto input_views = buffers.of(inputs, "tensor");
    return wrap(host_->gather(output_views, input_views, opts), flatten(outputs), buffers);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    SIM_TRACE("distributed", "scatter", c10::str("rank=", getRank()));
    HostBuffers buffers("scatter");
    auto output_views = buffers.of(outputs, "tensor");
    auto input_views = buffers.of(inputs, "scatter_list");
    return wrap(host_->scatter(output_views, input_views, opts), outputs, buffers);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    SIM_TRACE("distributed", "reduce_scatter", c10::str("rank=", getRank()));
    HostBuffers buffers("reduce_scatter");
    auto output_views = buffers.of(outputs, "output");
    auto input_views = buffers.of(inputs, "input_list");
    return wrap(host_->reduce_scatter(output_views, input_views, opts), outputs, buffers);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    SIM_TRACE("distributed", "_reduce_scatter_base", c10::str("rank=", getRank()));
    HostBuffers buffers("reduce_scatter_tensor");
    auto output_view = buffers.of(output, "output");
    auto input_view = buffers.of(input, "input");
    return wrap(host_->_reduce_scatter_base(output_view, input_view, opts), {output}, buffers);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    SIM_TRACE("distributed", "reduce_scatter_tensor_coalesced", c10::str("rank=", getRank()));
    HostBuffers buffers("reduce_scatter_tensor (coalesced)");
    auto output_views = buffers.of(outputs, "outputs");
    auto input_views = buffers.of(inputs, "inputs");
    return wrap(host_->reduce_scatter_tensor_coalesced(output_views, input_views, opts), outputs, buffers);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override {
    SIM_TRACE("distributed", "alltoall_base", c10::str("rank=", getRank()));
    HostBuffers buffers("all_to_all_single");
    auto output_view = buffers.of(output, "output");
    auto input_view = buffers.of(input, "input");
    return wrap(host_->alltoall_base(output_view, input_view, output_split_sizes, input_split_sizes, opts), {output}, buffers);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    SIM_TRACE("distributed", "alltoall", c10::str("rank=", getRank()));
    HostBuffers buffers("all_to_all");
    auto output_views = buffers.of(outputs, "output_tensor_list");
    auto input_views = buffers.of(inputs, "input_tensor_list");
    return wrap(host_->alltoall(output_views, input_views, opts), outputs, buffers);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int destination, int tag) override {
    SIM_TRACE("distributed", "send", c10::str("rank=", getRank(), " destination=", destination, " tag=", tag));
    HostBuffers buffers("send");
    auto views = buffers.of(tensors, "tensor");
    return wrap(host_->send(views, destination, tag), tensors, buffers, /*written=*/false);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int source, int tag) override {
    SIM_TRACE("distributed", "recv", c10::str("rank=", getRank(), " source=", source, " tag=", tag));
    HostBuffers buffers("recv");
    auto views = buffers.of(tensors, "tensor");
    return wrap(host_->recv(views, source, tag), tensors, buffers);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    SIM_TRACE("distributed", "recvAnysource", c10::str("rank=", getRank(), " tag=", tag));
    HostBuffers buffers("recv");
    auto views = buffers.of(tensors, "tensor");
    return wrap(host_->recvAnysource(views, tag), tensors, buffers);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    SIM_TRACE("distributed", "barrier", c10::str("rank=", getRank()));
    if (any_capture()) refuse_collective_if_capturing(t_current_device, "barrier");
    return host_->barrier(opts);
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    SIM_TRACE("distributed", "setTimeout", c10::str("timeout_ms=", timeout.count()));
    host_->setTimeout(timeout);
  }
  void abort() override {
    SIM_TRACE("distributed", "abort", c10::str("rank=", getRank()));
    host_->abort();
  }
  void shutdown() override {
    SIM_TRACE("distributed", "shutdown", c10::str("rank=", getRank()));
    host_->shutdown();
  }

 private:
  // `outputs` are what the work's result and future give back; the collective wrote them unless it is a send.
  static c10::intrusive_ptr<c10d::Work> wrap(c10::intrusive_ptr<c10d::Work> host_work, std::vector<at::Tensor> outputs,
                                             const HostBuffers& buffers, bool written = true) {
    auto copy_back = std::make_shared<CopyBack>(written ? buffers.copies_back(outputs)
                                                        : std::vector<std::pair<at::Tensor, at::Tensor>>{});
    return c10::make_intrusive<SimWork>(std::move(host_work), std::move(outputs), std::move(copy_back));
  }

  static std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
    std::vector<at::Tensor> all;
    for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
    return all;
  }

  c10::intrusive_ptr<c10d::Backend> host_;
};

// DDP times each iteration's forward, backward and communication through a timer made for the
// parameters' device. sim's timer keeps the host clock at each event, so its figures are the host's
// time, which runs ahead of the device's; a real device's timer records events on the stream, as CUDA's does.
class SimTimer : public c10d::Timer {
 public:
  explicit SimTimer(c10::Device /* device */) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    SIM_TRACE("distributed", "measureDifference", "");
    auto started = getTimestamp(start), ended = getTimestamp(end);
    if (!started || !ended || *ended < *started) return std::nullopt;
    return *ended - *started;
  }
};

static void install_distributed() {
  if (!c10d::TimerRegistry()->Has(c10::DeviceType::PrivateUse1)) {
    c10d::TimerRegistry()->Register(c10::DeviceType::PrivateUse1, [](c10::Device device) -> std::unique_ptr<c10d::Timer> {
      return std::make_unique<SimTimer>(device);
    });
  }
}

void bind_distributed(pybind11::module& module) {
  module.def("install_distributed", &install_distributed);
  module.def(
      "create_process_group",
      [](c10::intrusive_ptr<c10d::Backend> host, int rank, int size) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<SimCollectives>(std::move(host), rank, size);
      },
      "simccl for one process: sim tensors' collectives run by `host` (a Gloo backend) on views of their memory");
}

}  // namespace sim
