// Step 15, graphs (continued): how sim records a capture. While a stream captures, compute_on_host
// (operators.cpp) and sim's explicit kernels hand each call here instead of computing it: the
// operator's Meta kernel gives the outputs' sizes and strides, the graph's private pool gives them
// memory (allocator.cpp), and the call is kept as its host kernel with CPU aliases of the device
// memory, ready for graphs.cpp to replay. What a replay could not reproduce is refused in CUDA's words.
#include "graphs.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace sim {

std::atomic<int> g_capturing_streams{0};
const char* const kRefusal = "operation not permitted when stream is capturing";  // CUDA's wording

// ------------------------------------------------------------ operators
static std::mutex g_operator_info_mutex;
static std::unordered_map<const c10::FunctionSchema*, OperatorInfo> g_operator_info;

static OperatorInfo& operator_info(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_operator_info_mutex);
  auto& info = g_operator_info[&op.schema()];
  if (info.name.empty()) {
    info.name = qualified_operator_name(op);
    info.kernel_name = sim_kernel_name(info.name);
    info.random = op.hasTag(at::Tag::nondeterministic_seeded);
    for (const auto& argument : op.schema().arguments())
      info.writes.push_back(argument.alias_info() != nullptr && argument.alias_info()->isWrite());
  }
  return info;
}

static bool same_kind(const c10::Argument& a, const c10::Argument& b) {
  return a.real_type()->kind() == b.real_type()->kind();
}

// The out= overload of a functional operator: the same arguments, then one out= argument per return.
static std::optional<c10::OperatorHandle> find_out_overload(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  if (schema.is_mutable() || schema.returns().empty()) return std::nullopt;
  const auto& name = schema.operator_name();
  std::vector<std::string> candidates{"out"};
  if (!name.overload_name.empty()) candidates.insert(candidates.begin(), name.overload_name + "_out");
  for (const auto& candidate : candidates) {
    auto handle = c10::Dispatcher::singleton().findSchema({name.name, candidate});
    if (!handle) continue;
    const auto& arguments = handle->schema().arguments();
    const size_t inputs = schema.arguments().size(), outputs = schema.returns().size();
    if (arguments.size() != inputs + outputs) continue;
    bool matches = true;
    for (size_t i = 0; i < inputs && matches; ++i)
      matches = arguments[i].name() == schema.arguments()[i].name() && !arguments[i].is_out() &&
                same_kind(arguments[i], schema.arguments()[i]);
    for (size_t j = 0; j < outputs && matches; ++j)
      matches = arguments[inputs + j].is_out() && same_kind(arguments[inputs + j], schema.returns()[j]);
    if (matches && (handle->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                    handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)))
      return handle;
  }
  return std::nullopt;
}

const std::optional<c10::OperatorHandle>& out_overload(const c10::OperatorHandle& op, OperatorInfo& info) {
  std::lock_guard<std::mutex> lock(g_operator_info_mutex);
  if (!info.out_resolved) {
    info.out = find_out_overload(op);
    info.out_resolved = true;
  }
  return info.out;
}




static std::mutex g_captures_mutex;
static std::vector<Recording*> g_captures;

void start_recording(Recording* recording) {
  {
    std::lock_guard<std::mutex> lock(g_captures_mutex);
    g_captures.push_back(recording);
  }
  g_capturing_streams++;
}

void stop_recording(Recording* recording) {
  {
    std::lock_guard<std::mutex> lock(g_captures_mutex);
    for (auto it = g_captures.begin(); it != g_captures.end(); ++it)
      if (*it == recording) {
        g_captures.erase(it);
        break;
      }
  }
  g_capturing_streams--;
}

Recording* capture_of_stream(DeviceIndex device, c10::StreamId stream_id) {
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  for (Recording* recording : g_captures)
    if (recording->device == device && recording->stream_id == stream_id) return recording;
  return nullptr;
}

static Recording* capture_of_current_stream(DeviceIndex device) {
  if (!any_capture() || device < 0) return nullptr;
  return capture_of_stream(device, current_stream(c10::Device(kSim, device)).id());
}

[[noreturn]] static void refuse(Recording& recording, const std::string& what) {
  std::string message = std::string(kRefusal) + ": " + what;
  {
    std::lock_guard<std::mutex> lock(recording.mutex);
    if (recording.failure.empty()) recording.failure = message;
  }
  TORCH_CHECK(false, message);
}

std::optional<c10::MempoolId_t> capture_pool_for_allocation(DeviceIndex device) {
  Recording* recording = capture_of_current_stream(device);
  if (recording == nullptr) return std::nullopt;
  return recording->pool;
}

bool stream_is_capturing(const c10::Stream& stream) {
  return any_capture() && capture_of_stream(stream.device_index(), stream.id()) != nullptr;
}

void refuse_if_capturing(DeviceIndex device, const std::string& what) {
  if (Recording* recording = capture_of_current_stream(device)) refuse(*recording, what);
}

void refuse_synchronize_while_capturing(DeviceIndex device, int64_t stream_id) {
  if (!any_capture()) return;
  Recording* recording = nullptr;
  if (stream_id >= 0) {
    recording = capture_of_stream(device, stream_id);
  } else {
    std::lock_guard<std::mutex> lock(g_captures_mutex);
    for (Recording* r : g_captures)
      if (r->device == device) recording = r;
  }
  if (recording != nullptr)
    refuse(*recording, c10::str("synchronizing ", stream_id >= 0 ? "a capturing stream of " : "", "sim:",
                                static_cast<int>(device), " while it captures would wait for work that runs only at "
                                "replay; synchronize before capture_begin or after capture_end"));
}

// A host alias that does not own its bytes: for memory of the graph's own pool, which stays reserved for
// the pool as long as the graph lives, so that a block freed during the capture serves a later allocation
// of the same capture (the replay runs in the capture's order, as a device's stream does).
static at::Tensor unowned_host_alias(const at::Tensor& t) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                       c10::DataPtr(t.storage().mutable_data(), c10::Device(c10::kCPU)), nullptr, false);
  return tensor_on_storage(std::move(storage), c10::DispatchKey::CPU, t);
}

// The device tensors of one call and their stand-ins: meta tensors for the shape computation, host
// aliases (CPU tensors on the same bytes) for the replay. An alias of memory from outside the graph's
// pool keeps the device storage alive, so a tensor the graph uses cannot be freed under it.
struct CallTensors {
  c10::Device device;
  c10::MempoolId_t pool;
  std::unordered_map<c10::StorageImpl*, c10::Storage> meta_storages;    // device storage -> meta storage
  std::unordered_map<c10::StorageImpl*, c10::Storage> device_storages;  // meta storage -> device storage
  std::unordered_map<c10::TensorImpl*, at::Tensor> device_of_meta;      // meta argument -> device argument
  std::unordered_map<c10::TensorImpl*, at::Tensor> meta_of_device;
  std::unordered_map<c10::TensorImpl*, at::Tensor> host_of_device;

  at::Tensor meta(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kSim) return t;
    auto known = meta_of_device.find(t.unsafeGetTensorImpl());
    if (known != meta_of_device.end()) return known->second;
    auto* device_storage = t.storage().unsafeGetStorageImpl();
    auto& storage = meta_storages[device_storage];
    if (!storage) {
      storage = c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                             c10::DataPtr(nullptr, c10::Device(c10::kMeta)), c10::GetAllocator(c10::kMeta),
                             t.storage().resizable());
      device_storages[storage.unsafeGetStorageImpl()] = t.storage();
    }
    at::Tensor result = tensor_on_storage(storage, c10::DispatchKey::Meta, t);
    meta_of_device[t.unsafeGetTensorImpl()] = result;
    device_of_meta[result.unsafeGetTensorImpl()] = t;
    return result;
  }

  at::Tensor alias(const at::Tensor& t) const {
    if (!t.defined() || t.device().type() != kSim) return t;
    const void* block = t.storage().data();
    return block != nullptr && graph_pool_of(block) == pool ? unowned_host_alias(t) : host_view(t);
  }

  at::Tensor host(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kSim) return t;
    auto& known = host_of_device[t.unsafeGetTensorImpl()];
    if (!known.defined()) known = alias(t);
    return known;
  }

  // A result of the Meta kernel as a device tensor: the argument itself (in-place, out=), a view of an
  // argument's storage, or a fresh tensor in the graph's pool (`fresh` says which).
  at::Tensor device_result(const at::Tensor& meta_result, bool& fresh) {
    fresh = false;
    if (!meta_result.defined()) return meta_result;
    auto argument = device_of_meta.find(meta_result.unsafeGetTensorImpl());
    if (argument != device_of_meta.end()) return argument->second;
    auto* meta_storage = meta_result.storage().unsafeGetStorageImpl();
    auto& storage = device_storages[meta_storage];
    if (!storage) {
      c10::DeviceGuard guard(device);
      size_t bytes = meta_result.storage().nbytes();
      storage = c10::Storage(c10::Storage::use_byte_size_t(), bytes, device_allocator().allocate(bytes),
                             &device_allocator(), true);
      fresh = true;
    }
    at::Tensor result = tensor_on_storage(storage, c10::DispatchKey::PrivateUse1, meta_result);
    device_of_meta[meta_result.unsafeGetTensorImpl()] = result;
    return result;
  }
};

// Applies `f` to every tensor inside an argument or return value (a tensor, a list, a list of optionals).
template <typename F>
static c10::IValue map_tensors(const c10::IValue& value, F&& f) {
  if (value.isTensor()) return f(value.toTensor());
  if (value.isTensorList()) {
    auto list = value.toTensorList().copy();
    for (size_t j = 0; j < list.size(); ++j) list.set(j, f(list.get(j)));
    return list;
  }
  if (value.isList()) {
    auto list = value.toList().copy();
    for (size_t j = 0; j < list.size(); ++j) {
      c10::IValue element = list.get(j);
      if (element.isTensor()) list.set(j, f(element.toTensor()));
    }
    return list;
  }
  return value;
}

template <typename F>
static void for_each_tensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) f(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef())
      if (element.isTensor()) f(element.toTensor());
  }
}

static void note_use(std::vector<TensorUse>& uses, const at::Tensor& t) {
  if (!t.defined()) return;
  const void* address = t.data_ptr();
  for (const auto& use : uses)
    if (use.address == address && use.shape == t.sizes().vec() && use.dtype == t.scalar_type()) return;
  uses.push_back({address, t.sizes().vec(), t.scalar_type()});
}

static at::Tensor snapshot_host_scalar(Recording& recording, const OperatorInfo& info, const at::Tensor& t) {
  if (!t.defined() || t.device().type() == kSim) return t;
  if (t.dim() > 0)
    refuse(recording, c10::str(info.name, " reads a host tensor of shape ", t.sizes(), " on ", t.device(),
                               ", which a replay could not reach; move it to sim before capture_begin"));
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;  // a Python number: nobody changes it
  at::Tensor copy = t.clone();  // a 0-dim host tensor's value is taken at capture, as a kernel argument would be
  return copy;
}

static void record_kernel_call(Recording& recording, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                               c10::Device device) {
  OperatorInfo& info = operator_info(op);
  const auto& schema_arguments = op.schema().arguments();
  const size_t count = schema_arguments.size();
  const size_t first = stack->size() - count;
  CallTensors tensors{device, recording.pool};

  // the outputs' sizes and strides, from the Meta kernel (nothing computes)
  torch::jit::Stack meta_stack;
  meta_stack.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    c10::IValue value = map_tensors((*stack)[first + i], [&](const at::Tensor& t) {
      return tensors.meta(snapshot_host_scalar(recording, info, t));
    });
    if (value.isDevice() && value.toDevice().type() == kSim) value = c10::Device(c10::kMeta);
    if (value.isGenerator()) value = c10::IValue();
    meta_stack.push_back(std::move(value));
  }
  if (op.hasTag(at::Tag::dynamic_output_shape))
    refuse(recording, c10::str(info.name, " cannot be captured: the shape of its output depends on data that exists "
                               "only at replay; run it outside the captured region"));
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const c10::NotImplementedError& error) {
    refuse(recording, c10::str(info.name, " cannot be captured: without a Meta kernel the sizes of its outputs "
                               "depend on data that exists only at replay (",
                               error.what_without_backtrace(), "); run it outside the captured region"));
  }

  // out= and in-place arguments whose Meta kernel changed their geometry
  for (size_t i = 0; i < count; ++i) {
    if (!info.writes[i]) continue;
    for_each_tensor((*stack)[first + i], [&](const at::Tensor& t) {
      if (t.device().type() != kSim) return;
      const at::Tensor& meta = tensors.meta_of_device.at(t.unsafeGetTensorImpl());
      if (meta.sizes() == t.sizes() && meta.strides() == t.strides() && meta.storage_offset() == t.storage_offset())
        return;
      if (meta.storage().nbytes() > t.storage().nbytes())
        refuse(recording, c10::str(info.name, " would grow its out= tensor from ", t.sizes(), " to ", meta.sizes(),
                                   "; give out= tensors their final size before capture_begin"));
      t.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes(), meta.strides(), meta.storage_offset());
    });
  }

  KernelRecord record{op, &info, {}, {}, {}, false, info.random, {}, {}};
  record.arguments.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    c10::IValue value = map_tensors((*stack)[first + i], [&](const at::Tensor& t) {
      return tensors.host(snapshot_host_scalar(recording, info, t));
    });
    if (value.isDevice() && value.toDevice().type() == kSim) value = c10::Device(c10::kCPU);
    record.arguments.push_back(std::move(value));
  }
  if (recording.debug) {
    for (size_t i = 0; i < count; ++i)
      for_each_tensor((*stack)[first + i], [&](const at::Tensor& t) {
        if (t.device().type() == kSim) note_use(info.writes[i] ? record.writes : record.reads, t);
      });
  }

  // the outputs: arguments, views of them, or fresh tensors from the pool that replay fills
  const size_t returns = op.schema().returns().size();
  std::vector<c10::IValue> results;
  for (size_t r = meta_stack.size() - returns; r < meta_stack.size(); ++r) {
    bool any_fresh = false;
    c10::IValue result = map_tensors(meta_stack[r], [&](const at::Tensor& meta) {
      bool fresh = false;
      at::Tensor out = tensors.device_result(meta, fresh);
      any_fresh = any_fresh || fresh;
      if (recording.debug) note_use(record.writes, out);
      return out;
    });
    record.targets.push_back(any_fresh ? map_tensors(result, [&](const at::Tensor& t) { return tensors.host(t); })
                                       : c10::IValue());
    record.fallback_targets.push_back(
        any_fresh ? map_tensors(result, [&](const at::Tensor& t) { return tensors.alias(t); }) : c10::IValue());
    results.push_back(std::move(result));
  }
  {
    std::lock_guard<std::mutex> lock(recording.mutex);
    recording.kernels.push_back(std::move(record));
  }
  torch::jit::drop(*stack, count);
  for (auto& result : results) stack->push_back(std::move(result));
}

bool capture_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device) {
  Recording* recording = capture_of_current_stream(device.index());
  if (recording == nullptr) return false;
  record_kernel_call(*recording, op, stack, device);
  return true;
}

bool capture_copy(const at::Tensor& source, const at::Tensor& destination) {
  c10::Device device = source.device().type() == kSim ? source.device() : destination.device();
  Recording* recording = capture_of_current_stream(device.index());
  if (recording == nullptr) return false;
  for (const at::Tensor* t : {&source, &destination})
    if (t->device().is_cpu() && t->numel() > 0 && !is_pinned_address(t->data_ptr()))
      refuse(*recording, c10::str("a copy ", t == &source ? "from" : "to", " pageable host memory (a ",
                                  t->sizes(), " tensor on the CPU) cannot be captured; copy through pinned memory "
                                  "(tensor.pin_memory()) instead"));
  static const c10::OperatorHandle copy = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_copy_from", "");
  // recorded as a call of _copy_from, replayed by the host's copy_ on the aliases
  c10::IValue non_blocking(false);
  static const c10::OperatorHandle host_copy = c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  OperatorInfo& info = operator_info(copy);
  CallTensors tensors{device, recording->pool};
  KernelRecord record{host_copy, &info, {tensors.host(destination), tensors.host(source), non_blocking},
                      {c10::IValue()}, {c10::IValue()}, false, false, {}, {}};
  if (recording->debug) {
    note_use(record.reads, source);
    note_use(record.writes, destination);
  }
  std::lock_guard<std::mutex> lock(recording->mutex);
  recording->kernels.push_back(std::move(record));
  return true;
}

std::optional<at::Tensor> capture_convolution(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                              c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                              c10::IntArrayRef output_padding, int64_t groups) {
  static const c10::OperatorHandle convolution =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  torch::jit::Stack stack{input, weight, bias, stride.vec(), padding.vec(), dilation.vec(), transposed,
                          output_padding.vec(), groups};
  if (!capture_kernel(convolution, &stack, input.device())) return std::nullopt;
  return stack.back().toTensor();
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> capture_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  static const c10::OperatorHandle backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  torch::jit::Stack stack{grad_output, input, weight, std::vector<int64_t>{grad_output.size(1)}, stride.vec(),
                          padding.vec(), dilation.vec(), transposed, output_padding.vec(), groups,
                          c10::List<bool>({output_mask[0], output_mask[1], output_mask[2]})};
  if (!capture_kernel(backward, &stack, input.device())) return std::nullopt;
  return std::make_tuple(stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor());
}

}  // namespace sim
