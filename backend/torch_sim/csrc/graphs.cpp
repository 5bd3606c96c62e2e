// Step 15, graphs: capture the kernels of a stream once, replay them many times.
//
// A vendor implements at::GraphImplInterface (ATen/core/GraphImplInterface.h) and registers it in
// at::GraphImplRegistry under c10::DeviceTypeName(PrivateUse1, false), the backend's name after the
// rename ("SIM"); torch.accelerator.Graph then creates one per graph. capture_begin() makes the
// current (non-default) stream record instead of compute (graphs_capture.cpp records each kernel,
// its outputs in the graph's private pool); replay() calls the recorded host kernels directly,
// writing into the recorded outputs (an operator's out= overload when it has one, else a copy),
// without the dispatcher's autograd and device keys, the argument scans and the alias building of
// an eager call. On a real device, capture is the driver's stream capture and replay its graph launch.
#include "graphs.h"

#include "interface_trace.h"

#include <ATen/core/GraphImplInterface.h>
#include <ATen/ops/copy_native.h>
#include <c10/util/ApproximateClock.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace sim {

static std::atomic<uint64_t> g_next_pool_id{1};

// --------------------------------------------------------------- graphs
// A kernel ready to replay: its boxed stack is built once, the kernel pops a copy of it.
struct ReplayKernel {
  c10::OperatorHandle op;
  std::vector<c10::IValue> stack;
  std::vector<std::pair<size_t, c10::IValue>> copies;  // result index -> where it lands (no out= overload)
  bool random;
  const std::string* kernel_name;
  KernelRecord* record;
  bool verified;  // an out= overload's first run checked that it wrote in place
};

struct QuietWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

struct OutputPlace {
  const void* data;
  std::vector<int64_t> sizes, strides;
  bool operator==(const OutputPlace& other) const {
    return data == other.data && sizes == other.sizes && strides == other.strides;
  }
};

static std::vector<OutputPlace> output_places(const std::vector<c10::IValue>& targets) {
  std::vector<OutputPlace> places;
  for (const auto& target : targets)
    for (const at::Tensor& t : target.isTensor() ? std::vector<at::Tensor>{target.toTensor()}
                               : target.isTensorList() ? target.toTensorList().vec() : std::vector<at::Tensor>{})
      places.push_back({t.storage().data(), t.sizes().vec(), t.strides().vec()});
  return places;
}

static void copy_into(const c10::IValue& result, const c10::IValue& target) {
  if (target.isTensor()) {
    at::Tensor destination = target.toTensor();
    at::native::copy_(destination, result.toTensor(), false);
  } else if (target.isTensorList()) {
    auto sources = result.toTensorList();
    auto destinations = target.toTensorList();
    for (size_t j = 0; j < destinations.size(); ++j) {
      at::Tensor destination = destinations.get(j);
      at::native::copy_(destination, sources.get(j), false);
    }
  }
}

class SimGraph final : public at::GraphImplInterface {
 public:
  explicit SimGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~SimGraph() override {
    if (recording_ && capturing_) stop_recording_stream();
    release_pool();
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    SIM_TRACE("graphs", "capture_begin", c10::str("pool=(", pool.first, ", ", pool.second, ") mode=",
                                                  static_cast<int>(mode)));
    TORCH_CHECK(!capturing_, "This sim graph is capturing already; call capture_end() first.");
    TORCH_CHECK(!captured_, "This sim graph holds a capture already; call reset() before capturing again.");
    TORCH_CHECK(pool.first == 0 || pool.second == 0, "A graph pool id has one zero half, as graph_pool_handle() "
                "or another graph's pool() returns it; got (", pool.first, ", ", pool.second, ")");
    DeviceIndex device = t_current_device;
    c10::Stream stream = current_stream(c10::Device(kSim, device));
    TORCH_CHECK(stream.id() != 0, "Graphs must be captured on a non-default stream: make a sim stream current "
                "(with torch.Stream(device=\"sim\"): ...) around the capture; a replay may run on any stream.");
    TORCH_CHECK(capture_of_stream(device, stream.id()) == nullptr, kRefusal, ": sim:", static_cast<int>(device),
                "'s stream ", stream.id(), " is capturing another graph; end that capture first");
    if (pool.first == 0 && pool.second == 0) pool = {g_next_pool_id++, 0};
    retain_graph_pool(device, pool);
    device_ = device;
    pool_ = pool;
    holds_pool_ = true;
    recording_ = std::make_unique<Recording>();
    recording_->device = device;
    recording_->stream_id = stream.id();
    recording_->pool = pool;
    recording_->debug = debug_;
    start_recording(recording_.get());
    capturing_ = true;
  }

  void capture_end() override {
    SIM_TRACE("graphs", "capture_end", "");
    TORCH_CHECK(capturing_, "capture_end() without capture_begin(): this sim graph is not capturing.");
    c10::Stream stream = current_stream(c10::Device(kSim, device_));
    TORCH_CHECK(stream.id() == recording_->stream_id, "Capture must end on the stream it began on: sim:",
                static_cast<int>(device_), " stream ", recording_->stream_id, ", but the current stream is ",
                stream.id());
    stop_recording_stream();
    capturing_ = false;
    std::string failure = recording_->failure;
    if (!failure.empty()) {
      reset_state();
      TORCH_CHECK(false, "operation failed due to a previous error during capture: ", failure);
    }
    captured_ = true;
    if (recording_->kernels.empty())
      TORCH_WARN("The sim graph is empty: nothing ran on sim:", static_cast<int>(device_), "'s stream ",
                 recording_->stream_id, " during the capture (was the work on another device or stream?)");
    if (!keep_graph_) instantiate_kernels();
  }

  void instantiate() override {
    SIM_TRACE("graphs", "instantiate", "");
    TORCH_CHECK(captured_, "instantiate() needs a preceding successful capture of this sim graph.");
    TORCH_CHECK(keep_graph_, "instantiate() is for graphs made with keep_graph=True; this one was instantiated at "
                "capture_end().");
    instantiate_kernels();
  }

  void replay() override {
    std::lock_guard<std::mutex> lock(replay_mutex_);
    SIM_TRACE("graphs", "replay", c10::str("kernels=", replay_kernels_.size()));
    TORCH_CHECK(captured_, "Called replay() on a sim graph without a preceding successful capture; capture it "
                "first (with torch.Stream(device=\"sim\"), graph: ...).");
    if (!instantiated_) instantiate_kernels();
    refuse_if_capturing(device_, "replaying a graph inside another capture is not supported by sim; replay it "
                        "after capture_end()");
    // A replay is one launch: the whole graph runs on the device, each kernel timed as it was captured.
    static const std::string kernel_name = "sim::graph_replay";
    const c10::Device device(kSim, device_);
    wait_for_queued_draws(device_);
    run_kernel(device, kernel_name, [&] {
      c10::DeviceGuard device_guard(device);
      c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      const c10::DispatchKeySet cpu(c10::DispatchKey::CPU);
      const bool profiling = recording_kernels();
      torch::jit::Stack stack;
      for (ReplayKernel& kernel : replay_kernels_) {
        stack = kernel.stack;
        const int64_t start_ns = profiling ? c10::getTime() : 0;
        if (!kernel.verified) {
          run_and_verify(kernel, stack, cpu);
        } else if (kernel.random) {
          DeviceRandomScope random(true, device_);
          kernel.op.redispatchBoxed(cpu, &stack);
        } else {
          kernel.op.redispatchBoxed(cpu, &stack);
        }
        for (const auto& [index, target] : kernel.copies) copy_into(stack[index], target);
        if (profiling) record_kernel(*kernel.kernel_name, start_ns, c10::getTime(), device);
      }
    }, /*timed=*/false);
  }

  void reset() override {
    SIM_TRACE("graphs", "reset", "");
    TORCH_CHECK(!capturing_, "reset() while this sim graph captures; call capture_end() first.");
    reset_state();
  }

  c10::MempoolId_t pool() const override {
    SIM_TRACE("graphs", "pool", "");
    TORCH_CHECK(captured_, "Called pool() on a sim graph without a preceding successful capture.");
    return pool_;
  }

  void enable_debug_mode() override {
    SIM_TRACE("graphs", "enable_debug_mode", "");
    debug_ = true;
  }

  void debug_dump(const std::string& path) override {
    SIM_TRACE("graphs", "debug_dump", c10::str("path=", path));
    if (!debug_ || !captured_ || !recording_ || !recording_->debug) {
      TORCH_WARN("sim graph debug dump skipped: call enable_debug_mode() before the capture, then capture, then "
                 "debug_dump(path).");
      return;
    }
    std::ofstream file(path);
    TORCH_CHECK(file.good(), "debug_dump: cannot write ", path);
    file << dump_json();
  }

 private:
  void stop_recording_stream() { stop_recording(recording_.get()); }

  void release_pool() {
    if (!holds_pool_) return;
    holds_pool_ = false;
    release_graph_pool(device_, pool_);
  }

  void reset_state() {
    replay_kernels_.clear();
    recording_.reset();
    captured_ = instantiated_ = false;
    release_pool();
  }

  void instantiate_kernels() {
    std::vector<ReplayKernel> kernels;
    kernels.reserve(recording_->kernels.size());
    for (KernelRecord& record : recording_->kernels) {
      bool fresh_outputs = false;
      for (const auto& target : record.targets) fresh_outputs = fresh_outputs || !target.isNone();
      const auto& out = fresh_outputs ? out_overload(record.op, *record.info)
                                      : std::optional<c10::OperatorHandle>();
      bool use_out = out.has_value();
      for (const auto& target : record.targets) use_out = use_out && !target.isNone();
      use_out = use_out && !record.random && !record.out_unusable;  // a random kernel runs once per replay
      ReplayKernel kernel{use_out ? *out : record.op, record.arguments, {}, record.random, &record.info->kernel_name,
                          &record, !use_out};
      if (use_out) {
        for (const auto& target : record.targets) kernel.stack.push_back(target);
      } else {
        for (size_t r = 0; r < record.targets.size(); ++r)
          if (!record.targets[r].isNone()) kernel.copies.emplace_back(r, record.targets[r]);
      }
      kernels.push_back(std::move(kernel));
    }
    replay_kernels_ = std::move(kernels);
    instantiated_ = true;
  }

  // Some out= overloads use their output as scratch space and resize it (the host's mse_loss.out), which
  // moves it off the device memory. The first run of each checks the output stayed in place; one that
  // did not is replayed from then on as its functional operator plus a copy.
  void run_and_verify(ReplayKernel& kernel, torch::jit::Stack& stack, const c10::DispatchKeySet& cpu) {
    KernelRecord& record = *kernel.record;
    auto before = output_places(record.targets);
    bool in_place = true;
    try {
      QuietWarnings quiet;
      c10::WarningUtils::WarningHandlerGuard guard(&quiet);
      kernel.op.redispatchBoxed(cpu, &stack);
    } catch (const c10::Error&) {
      in_place = false;  // e.g. it tried to grow an output whose bytes belong to the device
    }
    kernel.verified = true;
    if (in_place && output_places(record.targets) == before) return;
    record.out_unusable = true;
    kernel.op = record.op;
    kernel.stack = record.arguments;
    kernel.copies.clear();
    for (size_t r = 0; r < record.fallback_targets.size(); ++r)
      if (!record.fallback_targets[r].isNone()) kernel.copies.emplace_back(r, record.fallback_targets[r]);
    stack = kernel.stack;
    kernel.op.redispatchBoxed(cpu, &stack);  // the replay loop copies the results into place
  }

  std::string dump_json() const {
    std::unordered_map<const void*, int> ids;
    auto tensor_json = [&](const TensorUse& use) {
      auto [found, added] = ids.emplace(use.address, static_cast<int>(ids.size()));
      std::ostringstream out;
      char address[32];
      std::snprintf(address, sizeof(address), "%p", use.address);
      out << "{\"id\": \"t" << found->second << "\", \"address\": \"" << address << "\", \"shape\": [";
      for (size_t i = 0; i < use.shape.size(); ++i) out << (i ? ", " : "") << use.shape[i];
      out << "], \"dtype\": \"" << c10::getDtypeNames(use.dtype).first << "\"}";
      return out.str();
    };
    auto list_json = [&](const std::vector<TensorUse>& uses) {
      std::string out = "[";
      for (size_t i = 0; i < uses.size(); ++i) out += (i ? ", " : "") + tensor_json(uses[i]);
      return out + "]";
    };
    std::ostringstream out;
    out << "{\"device\": \"sim:" << static_cast<int>(device_) << "\", \"pool\": [" << pool_.first << ", "
        << pool_.second << "], \"kernels\": [";
    const auto& kernels = recording_->kernels;
    for (size_t k = 0; k < kernels.size(); ++k) {
      const KernelRecord& record = kernels[k];
      std::string reads = list_json(record.reads);
      std::string writes = list_json(record.writes);
      out << (k ? ", " : "") << "{\"index\": " << k << ", \"operator\": \"" << record.info->name
          << "\", \"kernel\": \"" << record.info->kernel_name << "\", \"reads\": " << reads
          << ", \"writes\": " << writes << "}";
    }
    out << "]}\n";
    return out.str();
  }

  bool keep_graph_;
  bool debug_ = false;
  bool capturing_ = false, captured_ = false, instantiated_ = false, holds_pool_ = false;
  DeviceIndex device_ = 0;
  c10::MempoolId_t pool_{0, 0};
  std::unique_ptr<Recording> recording_;
  std::vector<ReplayKernel> replay_kernels_;
  std::mutex replay_mutex_;  // a replay from another thread waits for the one running
};

static std::string registry_key() { return c10::DeviceTypeName(kSim, /*lower_case=*/false); }

static void install_graphs() {
  static bool installed = false;
  if (installed) return;
  at::GraphImplRegistry()->Register(registry_key(), [](at::GraphImplArgs args) {
    return std::unique_ptr<at::GraphImplInterface>(std::make_unique<SimGraph>(args));
  });
  installed = true;
}

void bind_graphs(pybind11::module& module) {
  module.def("install_graphs", &install_graphs);
  module.def("graph_registry_key", &registry_key);
  module.def("graph_pool_handle", []() { return std::make_pair(uint64_t{0}, g_next_pool_id++); });
  module.def("is_stream_capturing", [](int64_t device, int64_t stream_id) {
    return any_capture() && capture_of_stream(checked(device), stream_id) != nullptr;
  });
  module.def("refuse_if_any_capturing", [](const std::string& what) {
    if (!any_capture()) return;
    for (int device = 0; device < g_device_count.load(); ++device) refuse_if_capturing(device, what);
  });
  module.def("refuse_synchronize_while_capturing",
             [](int64_t device) { refuse_synchronize_while_capturing(checked(device), -1); });
}

}  // namespace sim
