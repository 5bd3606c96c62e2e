// Guide step "graphs": torch.accelerator.Graph on {{ name }}, capture once and replay many times.
//
// PyTorch looks up an at::GraphImplInterface registered for the device's name (REGISTER_GRAPH_IMPL)
// whenever a torch.accelerator.Graph is made, and asks the device guard whether a stream is
// capturing (isStreamCapturing). While a stream captures, the work issued on it is recorded, not
// run; replay() runs the recorded work again on the same memory. On a real device, capture is the
// driver's stream capture (the kernels the operators launch land in a driver graph) and this file
// only begins, ends, instantiates and launches it. The fake device here runs no kernels of its own:
// its operators compute on the host through the copying fallback (operators.cpp), so this file records
// the operators themselves. During capture each one runs on host copies of its arguments, to learn the
// shapes of its results, which are then allocated on the device and filled only at replay; nothing on
// the device changes until then, as on a real device. A tensor the graph touches lives as long as the
// graph: that is this backend's private memory pool. What cannot be captured is refused in one line:
// copies between the host and the device, reading a value to the host (.item()) and synchronizing the
// capturing stream or its device. What a vendor replaces: the recording below, by the driver's stream
// capture (begin, end, instantiate, launch), and the pool, by a private pool of its caching allocator.
#include "backend.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/GraphImplInterface.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace torch_{{ name }} {

// [guide: graphs]
namespace {

// One piece of recorded work: an operator with its arguments (device tensors alias device memory) and the device
// tensors that receive its new results, or a copy between two device tensors (no operator).
struct Node {
  std::optional<c10::OperatorHandle> op;
  std::vector<c10::IValue> arguments;
  std::vector<at::Tensor> results;  // an operator's new results; for a copy: {source, destination}
};

struct Capture;
std::mutex g_mutex;
std::map<std::pair<DeviceIndex, c10::StreamId>, Capture*> g_capturing;  // streams capturing now
std::atomic<int> g_captures{0};                                          // their number: 0 is the fast path
std::atomic<uint64_t> g_next_pool{1};

struct Capture {
  std::vector<Node> nodes;
  std::string failure;  // why the capture is invalid: the first refused operation, "" while it is valid
};

c10::Stream current_stream(DeviceIndex device) {
  return c10::impl::getDeviceGuardImpl(kDevice)->getStream(c10::Device(kDevice, device));
}

// The capture recording on the current stream of `device`, or nullptr.
Capture* capture_on(DeviceIndex device) {
  if (g_captures.load(std::memory_order_acquire) == 0) return nullptr;
  c10::Stream stream = current_stream(device < 0 ? current_device() : device);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = g_capturing.find({stream.device_index(), stream.id()});
  return found == g_capturing.end() ? nullptr : found->second;
}

// Host copies of device tensors, one per device storage, so that tensors sharing memory share it on the host too.
struct HostCopies {
  std::vector<std::pair<c10::StorageImpl*, at::Tensor>> storages;  // device storage -> host bytes

  at::Tensor of(const at::Tensor& tensor) {
    if (!tensor.defined() || tensor.device().type() != kDevice) return tensor;
    auto* storage = tensor.storage().unsafeGetStorageImpl();
    at::Tensor bytes;
    for (auto& [known, host] : storages)
      if (known == storage) bytes = host;
    if (!bytes.defined()) {
      bytes = at::empty({static_cast<int64_t>(tensor.storage().nbytes())}, at::TensorOptions().dtype(at::kByte));
      if (bytes.numel() > 0)
        RUNTIME_CHECK(runtime::copy(bytes.data_ptr(), tensor.storage().data(), tensor.storage().nbytes(),
                                    runtime::CopyKind::device_to_host));
      storages.emplace_back(storage, bytes);
    }
    at::Tensor host = at::empty({0}, at::TensorOptions().dtype(tensor.scalar_type()));
    host.set_(bytes.storage(), tensor.storage_offset(), tensor.sizes(), tensor.strides());
    return host;
  }

  c10::IValue of(const c10::IValue& value) {
    if (value.isTensor()) return of(value.toTensor());
    if (value.isTensorList()) {
      std::vector<at::Tensor> tensors;
      for (const at::Tensor& tensor : value.toTensorList()) tensors.push_back(of(tensor));
      return c10::List<at::Tensor>(tensors);
    }
    if (value.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> tensors;
      for (const std::optional<at::Tensor>& tensor : value.toOptionalTensorList())
        tensors.push_back(tensor.has_value() ? std::optional<at::Tensor>(of(*tensor)) : std::nullopt);
      return tensors;
    }
    return value;
  }

  // Every host copy back into its device storage: what the operator wrote reaches the device.
  void write_back(const std::vector<c10::StorageImpl*>& written) {
    for (auto& [storage, bytes] : storages)
      if (std::find(written.begin(), written.end(), storage) != written.end() && bytes.numel() > 0)
        RUNTIME_CHECK(runtime::copy(storage->mutable_data(), bytes.data_ptr(), bytes.numel(),
                                    runtime::CopyKind::host_to_device));
  }
};

void for_each_tensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& visit) {
  if (value.isTensor()) visit(value.toTensor());
  if (value.isTensorList())
    for (const at::Tensor& tensor : value.toTensorList()) visit(tensor);
  if (value.isOptionalTensorList())
    for (const std::optional<at::Tensor>& tensor : value.toOptionalTensorList())
      if (tensor.has_value()) visit(*tensor);
}

bool writes(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

// Runs `op` with `arguments` on host copies; returns its host results. With `write`, what it writes to its
// arguments goes back to the device and its new results into `results`.
std::vector<c10::IValue> run_on_host(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments,
                                     const std::vector<at::Tensor>* results) {
  HostCopies copies;
  torch::jit::Stack stack;
  const auto& schema = op.schema().arguments();
  std::vector<std::pair<at::Tensor, at::Tensor>> written_arguments;  // (device tensor, its host copy)
  for (size_t i = 0; i < arguments.size(); ++i) {
    stack.push_back(copies.of(arguments[i]));
    if (i < schema.size() && writes(schema[i])) {
      std::vector<at::Tensor> on_device, on_host;
      for_each_tensor(arguments[i], [&](const at::Tensor& t) { on_device.push_back(t); });
      for_each_tensor(stack.back(), [&](const at::Tensor& t) { on_host.push_back(t); });
      for (size_t t = 0; t < on_device.size(); ++t) written_arguments.emplace_back(on_device[t], on_host[t]);
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
  if (results == nullptr) return stack;
  std::vector<c10::StorageImpl*> written;
  for (auto& [device, host] : written_arguments) {
    if (!device.defined() || device.device().type() != kDevice) continue;
    // A CPU kernel that used its out= tensor as scratch space may have moved it to new memory: bring it back.
    at::Tensor in_place = copies.of(device);
    if (host.data_ptr() != in_place.data_ptr() && host.sizes() == in_place.sizes()) in_place.copy_(host);
    written.push_back(device.storage().unsafeGetStorageImpl());
  }
  size_t next = 0;
  for (size_t i = 0; i < stack.size(); ++i) {
    if (i < op.schema().returns().size() && op.schema().returns()[i].alias_info() != nullptr) continue;
    for_each_tensor(stack[i], [&](const at::Tensor& host) {
      if (!host.defined()) return;
      const at::Tensor& device = (*results)[next++];
      copies.of(device).copy_(host);
      written.push_back(device.storage().unsafeGetStorageImpl());
    });
  }
  copies.write_back(written);
  return stack;
}

// A device tensor shaped as `host`, not written: the graph fills it at replay.
at::Tensor device_like(const at::Tensor& host, DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kDevice, device));
  return at::detail::empty_strided_generic(host.sizes(), host.strides(), device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.scalar_type());
}

// The dtype as Python spells it (torch.float32 -> "float32").
std::string python_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return "float32";
    case c10::kDouble: return "float64";
    case c10::kHalf: return "float16";
    case c10::kBFloat16: return "bfloat16";
    case c10::kLong: return "int64";
    case c10::kInt: return "int32";
    case c10::kBool: return "bool";
    default: return c10::toString(dtype);
  }
}

std::string json_tensor(const at::Tensor& tensor, std::map<const void*, int>& ids) {
  const void* address = tensor.defined() ? tensor.data_ptr() : nullptr;
  int id = ids.emplace(address, static_cast<int>(ids.size())).first->second;
  std::ostringstream out;
  out << "{\"id\": \"t" << id << "\", \"address\": \"" << address << "\", \"shape\": [";
  for (size_t d = 0; d < tensor.sizes().size(); ++d) out << (d ? ", " : "") << tensor.sizes()[d];
  out << "], \"dtype\": \"" << python_dtype(tensor.scalar_type()) << "\"}";
  return out.str();
}

struct GraphImpl final : at::GraphImplInterface {
  explicit GraphImpl(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~GraphImpl() override { stop_capturing(); }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TRACE_INTERFACE("graphs", "capture_begin", c10::str("pool=(", pool.first, ", ", pool.second, ") mode=",
                                                       static_cast<int>(mode)));
    TORCH_CHECK(!captured_ && !capturing_, "{{ name }}: this graph holds a capture already; call reset() first");
    c10::Stream stream = current_stream(current_device());
    TORCH_CHECK(stream.id() != 0, "{{ name }}: graphs are captured on a side stream, not the default stream: "
                "`with torch.Stream(device=\"{{ name }}\"), graph:` (replay may run on any stream)");
    stream_ = stream;
    pool_ = pool.first != 0 || pool.second != 0 ? pool : c10::MempoolId_t{g_next_pool++, 0};
    std::lock_guard<std::mutex> lock(g_mutex);
    TORCH_CHECK(g_capturing.emplace(std::make_pair(stream.device_index(), stream.id()), &capture_).second,
                "{{ name }}: stream ", stream.id(), " is capturing another graph already");
    capturing_ = true;
    ++g_captures;
  }

  void capture_end() override {
    TRACE_INTERFACE("graphs", "capture_end", "");
    TORCH_CHECK(capturing_, "{{ name }}: capture_end() without capture_begin()");
    c10::Stream stream = current_stream(stream_.device_index());
    TORCH_CHECK(stream == stream_, "{{ name }}: capture_end() on stream ", stream.id(), ", but the capture began on ",
                stream_.id(), ": end it on the stream it began on");
    stop_capturing();
    if (!capture_.failure.empty()) {  // as a driver does: a capture that met a refused operation is discarded
      std::string failure = std::move(capture_.failure);
      reset();
      TORCH_CHECK(false, "{{ name }}: the capture failed and was discarded: ", failure);
    }
    captured_ = true;
    if (!keep_graph_) instantiate();
  }

  // A driver turns its captured graph into an executable one here; the recorded nodes are already executable.
  void instantiate() override {
    TRACE_INTERFACE("graphs", "instantiate", "");
    TORCH_CHECK(captured_, "{{ name }}: nothing captured to instantiate: capture the graph first");
    instantiated_ = true;
  }

  void replay() override {
    TRACE_INTERFACE("graphs", "replay", c10::str("nodes=", capture_.nodes.size()));
    TORCH_CHECK(captured_, "{{ name }}: replay() before a capture: capture the graph first");
    if (!instantiated_) instantiate();
    c10::DeviceGuard guard(stream_.device());
    for (const Node& node : capture_.nodes) {
      if (node.op.has_value()) {
        run_on_host(*node.op, node.arguments, &node.results);
      } else {
        HostCopies copies;
        copies.of(node.results[1]).copy_(copies.of(node.results[0]));
        copies.write_back({node.results[1].storage().unsafeGetStorageImpl()});
      }
    }
  }

  void reset() override {
    TRACE_INTERFACE("graphs", "reset", "");
    stop_capturing();
    capture_.nodes.clear();  // the tensors the graph kept alive go back to the allocator
    captured_ = instantiated_ = false;
  }

  c10::MempoolId_t pool() const override {
    TRACE_INTERFACE("graphs", "pool", "");
    return pool_;
  }

  void enable_debug_mode() override {
    TRACE_INTERFACE("graphs", "enable_debug_mode", "");
    debug_ = true;
  }

  // The recorded nodes as JSON: {"device", "pool", "kernels": [{"index", "operator", "kernel", "reads",
  // "writes"}]}, the shape the PrivateUse1 explorer reads (pu1_explorer.graphs.read_graph_dump).
  void debug_dump(const std::string& path) override {
    TRACE_INTERFACE("graphs", "debug_dump", c10::str("path=", path));
    TORCH_CHECK(debug_, "{{ name }}: debug_dump() needs enable_debug_mode() before the capture");
    TORCH_CHECK(captured_, "{{ name }}: nothing captured to dump");
    std::map<const void*, int> ids;
    std::ostringstream out;
    out << "{\"device\": \"{{ name }}:" << static_cast<int>(stream_.device_index()) << "\", \"pool\": ["
        << pool_.first << ", " << pool_.second << "], \"kernels\": [";
    for (size_t n = 0; n < capture_.nodes.size(); ++n) {
      const Node& node = capture_.nodes[n];
      std::vector<std::string> reads, written;
      std::string name = "aten::copy_", kernel = "runtime::copy";
      if (node.op.has_value()) {
        const auto& schema = node.op->schema();
        name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
        kernel = "host (copying fallback)";
        for (size_t i = 0; i < node.arguments.size(); ++i)
          for_each_tensor(node.arguments[i], [&](const at::Tensor& t) {
            if (t.defined() && t.device().type() == kDevice)
              (writes(schema.arguments()[i]) ? written : reads).push_back(json_tensor(t, ids));
          });
        for (const at::Tensor& t : node.results) written.push_back(json_tensor(t, ids));
      } else {
        reads.push_back(json_tensor(node.results[0], ids));
        written.push_back(json_tensor(node.results[1], ids));
      }
      auto join = [](const std::vector<std::string>& parts) {
        std::string text;
        for (const auto& part : parts) text += (text.empty() ? "" : ", ") + part;
        return text;
      };
      out << (n ? ", " : "") << "{\"index\": " << n << ", \"operator\": \"" << name << "\", \"kernel\": \"" << kernel
          << "\", \"reads\": [" << join(reads) << "], \"writes\": [" << join(written) << "]}";
    }
    out << "]}\n";
    std::ofstream file(path);
    TORCH_CHECK(file << out.str(), "{{ name }}: could not write the graph dump to ", path);
  }

 private:
  void stop_capturing() {
    if (!capturing_) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_capturing.erase({stream_.device_index(), stream_.id()});
    capturing_ = false;
    --g_captures;
  }

  bool keep_graph_;
  bool capturing_ = false, captured_ = false, instantiated_ = false, debug_ = false;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(kDevice, 0)};
  c10::MempoolId_t pool_{0, 0};
  Capture capture_;
};

}  // namespace

bool GuardImpl::isStreamCapturing(const c10::Stream& stream) const {
  TRACE_INTERFACE("guard", "isStreamCapturing", c10::str("stream=", stream));
  if (g_captures.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_capturing.count({stream.device_index(), stream.id()}) > 0;
}

bool record_operator(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack, size_t first,
                     DeviceIndex device) {
  Capture* capture = capture_on(device);
  if (capture == nullptr) return false;
  Node node{op, std::vector<c10::IValue>(stack->begin() + first, stack->end()), {}};
  std::vector<c10::IValue> host = run_on_host(op, node.arguments, nullptr);  // learns the results' shapes only
  const auto& returns = op.schema().returns();
  stack->resize(first);
  for (size_t i = 0; i < host.size(); ++i) {
    const c10::AliasInfo* alias = i < returns.size() ? returns[i].alias_info() : nullptr;
    if (alias != nullptr) {  // an in-place or out= result: the device argument it names
      const auto& arguments = op.schema().arguments();
      size_t a = 0;
      while (a < arguments.size() &&
             (arguments[a].alias_info() == nullptr || arguments[a].alias_info()->beforeSets() != alias->beforeSets()))
        ++a;
      TORCH_CHECK(a < arguments.size(), "{{ name }}: cannot capture ", op.schema().name(), ": its result ", i,
                  " aliases no argument");
      stack->push_back(node.arguments[a]);
    } else if (host[i].isTensor() && host[i].toTensor().defined()) {
      node.results.push_back(device_like(host[i].toTensor(), device));
      stack->push_back(node.results.back());
    } else if (host[i].isTensorList()) {
      std::vector<at::Tensor> tensors;
      for (const at::Tensor& tensor : host[i].toTensorList()) {
        node.results.push_back(device_like(tensor, device));
        tensors.push_back(node.results.back());
      }
      stack->push_back(c10::List<at::Tensor>(tensors));
    } else {
      stack->push_back(host[i]);
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  capture->nodes.push_back(std::move(node));
  return true;
}

bool record_copy(const at::Tensor& source, const at::Tensor& destination) {
  bool on_device = source.device().type() == kDevice && destination.device().type() == kDevice;
  DeviceIndex device = destination.device().type() == kDevice ? destination.device().index() : source.device().index();
  Capture* capture = capture_on(device);
  if (capture == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!on_device) {
    capture->failure = "a copy between the host and the device cannot be captured (the host memory may change "
                       "before a replay); copy into a static device tensor before the capture";
    TORCH_CHECK(false, "{{ name }}: ", capture->failure);
  }
  capture->nodes.push_back(Node{std::nullopt, {}, {source, destination}});
  return true;
}

// The capture of `stream` fails: its graph is discarded at capture_end, and the stream works again after it.
void refuse_while_capturing(const c10::Stream& stream, const char* what) {
  if (g_captures.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = g_capturing.find({stream.device_index(), stream.id()});
  if (found == g_capturing.end()) return;
  std::ostringstream reason;
  reason << what << " is not allowed while stream " << stream.id() << " captures a graph (it would wait for work "
         << "that only runs at replay); do it before or after the capture";
  if (found->second->failure.empty()) found->second->failure = reason.str();
  TORCH_CHECK(false, "{{ name }}: ", reason.str());
}

}  // namespace torch_{{ name }}

// The registry looks graphs up under c10::DeviceTypeName(PrivateUse1, false): after the rename, the device's
// name in capitals. The macro belongs in namespace at, where the registry is.
namespace at {
REGISTER_GRAPH_IMPL({{ NAME }}, torch_{{ name }}::GraphImpl);
}  // namespace at
// [/guide: graphs]
