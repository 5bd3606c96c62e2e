// The stream sanitizer's recorder: for each operator called with PrivateUse1 tensors, which memory it
// read and wrote, on which of the backend's streams, and from which Python lines; and, in the same
// order, the device-trace events (event records and waits, synchronisations, memory handed out and
// taken back) that the sanitizer's Python callbacks note. The analysis is Python's (sanitizer.py).
//
// Operators are observed with a global RecordFunction callback, PyTorch's own observer interface,
// which sees every operator called on any thread (autograd's device threads too) with its inputs
// and outputs. Memory is named by its storage's address, so views of one tensor are one memory.
// An operator that runs in a backward pass gets the Python lines of the forward operator whose
// autograd node it computes (the two share a sequence number, as the profiler links them).
#include <torch/extension.h>

#include <ATen/record_function.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

constexpr size_t kMostFrames = 48;

// Python's frames at the moment of a call: code objects (referenced) and line numbers, made readable
// only when the recording is taken, so a call pays a walk of frame pointers and no strings.
struct Frames {
  std::vector<std::pair<PyCodeObject*, int>> code_lines;
  Frames() = default;
  Frames(const Frames&) = delete;
  Frames& operator=(const Frames&) = delete;
  ~Frames() {
    if (code_lines.empty() || !Py_IsInitialized()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    for (auto& [code, line] : code_lines) Py_DECREF(code);
    PyGILState_Release(state);
  }
};

std::shared_ptr<Frames> python_frames() {
  auto frames = std::make_shared<Frames>();
  if (!Py_IsInitialized()) return frames;
  PyGILState_STATE state = PyGILState_Ensure();
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame != nullptr && frames->code_lines.size() < kMostFrames) {
    frames->code_lines.emplace_back(PyFrame_GetCode(frame), PyFrame_GetLineNumber(frame));
    PyFrameObject* caller = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = caller;
  }
  Py_XDECREF(frame);
  PyGILState_Release(state);
  return frames;
}

struct Access {
  uintptr_t memory;
  bool write;
  std::string argument;
  std::vector<int64_t> shape;
  std::string dtype;
  int device;
};

struct Entry {
  std::string kind;      // "kernel", "record_stream", or the trace event's name
  std::string operator_name;
  uintptr_t stream = 0;  // the backend's native handle of the stream the operator ran on
  int64_t stream_id = 0;  // and PyTorch's id of it (c10::Stream::id), what users see of a stream
  uintptr_t first = 0;   // a trace event's arguments (event, memory, stream), as PyTorch's hooks pass them
  uintptr_t second = 0;
  std::vector<Access> accesses;
  std::shared_ptr<Frames> frames;
  bool in_backward = false;  // frames are then those of the forward operator of the node being computed
  int thread = 0;
  uint64_t order = 0;
};

// The autograd nodes this thread is computing, innermost last, by sequence number.
thread_local std::vector<int64_t> t_backward_nodes;

int thread_number() {
  static std::atomic<int> next{0};
  thread_local int number = next++;
  return number;
}

class Recorder;
std::atomic<Recorder*> g_recording{nullptr};

bool is_device_tensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1 && tensor.has_storage() &&
         tensor.storage().data() != nullptr;
}

template <typename Visit>
void each_tensor(const c10::IValue& value, Visit&& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector()) visit(tensor);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (item.isTensor()) visit(item.toTensor());
    }
  }
}

// PyTorch's CUDA sanitizer's rule: `new_*` and `*_like` factories read only their input's metadata.
bool reads_only_metadata(const std::string& name) {
  return name.rfind("new_", 0) == 0 || (name.size() > 5 && name.compare(name.size() - 5, 5, "_like") == 0);
}

// `empty`, `empty_strided`, `empty_like`, `new_empty`: memory handed out, nothing written into it.
bool writes_nothing(const std::string& name) {
  return name.rfind("empty", 0) == 0 || name.rfind("new_empty", 0) == 0;
}

uintptr_t native_handle(const c10::Stream& stream, bool& named_by_id) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
  try {
    return reinterpret_cast<uintptr_t>(guard.getStreamNativeHandle(stream));
  } catch (const c10::Error&) {
    named_by_id = true;  // the backend has no native handles: its trace hooks cannot be matched to operators
    return static_cast<uintptr_t>(stream.id());
  }
}

struct Call : at::ObserverContext {
  bool backward_node = false;  // a BACKWARD_FUNCTION record: its end leaves the node
  int64_t sequence_number = -1;
  Entry inputs;
  bool metadata_factory = false;
  bool writes_nothing = false;
  int device = -1;
};

// The calling thread's current stream on its current device: the stream a block handed out now belongs to.
void stamp_current_stream(Entry& entry, bool& named_by_id) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
  const c10::Stream stream = guard.getStream(guard.getDevice());
  entry.stream = native_handle(stream, named_by_id);
  entry.stream_id = stream.id();
}

class Recorder {
 public:
  void start() {
    TORCH_CHECK(handle_ == 0, "the recorder is already started");
    Recorder* expected = nullptr;
    TORCH_CHECK(g_recording.compare_exchange_strong(expected, this),
                "another stream sanitizer is recording in this process; one at a time");
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&Recorder::on_start, &Recorder::on_end)
                                        .needsInputs(true)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }

  void stop() {
    if (handle_ == 0) return;
    at::removeCallback(handle_);
    handle_ = 0;
    Recorder* self = this;
    g_recording.compare_exchange_strong(self, nullptr);
  }

  void note(const std::string& kind, uintptr_t first, uintptr_t second) {
    Entry entry;
    entry.kind = kind;
    entry.first = first;
    entry.second = second;
    bool named_by_id = false;
    stamp_current_stream(entry, named_by_id);
    entry.frames = python_frames();
    append(std::move(entry));
  }

  bool streams_named_by_id() const { return named_by_id_.load(); }

  // Everything recorded so far, in order, as plain tuples; the buffer is emptied.
  py::list take() {
    std::vector<Entry> taken;
    std::unordered_map<int64_t, std::shared_ptr<Frames>> forward_frames;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      taken.swap(entries_);
      forward_frames.swap(forward_frames_);
    }
    py::list result;
    for (const Entry& entry : taken) {
      py::list accesses;
      for (const Access& access : entry.accesses)
        accesses.append(py::make_tuple(access.memory, access.write, access.argument, py::tuple(py::cast(access.shape)),
                                       access.dtype, access.device));
      py::list frames;
      if (entry.frames) {
        for (const auto& [code, line] : entry.frames->code_lines)
          frames.append(py::make_tuple(py::reinterpret_borrow<py::object>(code->co_filename), line,
                                       py::reinterpret_borrow<py::object>(code->co_name)));
      }
      result.append(py::make_tuple(entry.order, entry.kind, entry.operator_name, entry.stream, entry.stream_id,
                                   entry.first, entry.second, accesses, frames, entry.thread, entry.in_backward));
    }
    return result;
  }

  ~Recorder() { stop(); }

 private:
  void append(Entry&& entry) {
    entry.thread = thread_number();
    std::lock_guard<std::mutex> lock(mutex_);
    entry.order = next_order_++;
    entries_.push_back(std::move(entry));
  }

  void add(Call& call, Entry& entry, const at::Tensor& tensor, bool write, const std::string& argument) {
    if (!is_device_tensor(tensor)) return;
    if (call.device < 0) call.device = tensor.device().index();
    entry.accesses.push_back({reinterpret_cast<uintptr_t>(tensor.storage().data()), write, argument,
                              tensor.sizes().vec(), std::string(c10::toString(tensor.scalar_type())),
                              tensor.device().index()});
  }

  void stamp(Call& call, Entry& entry) {
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
    bool named_by_id = false;
    const c10::Stream stream = guard.getStream(c10::Device(c10::DeviceType::PrivateUse1, call.device));
    entry.stream = native_handle(stream, named_by_id);
    entry.stream_id = stream.id();
    // A capturing stream records the kernel into a graph: it runs at each replay, which no operator call shows.
    if (guard.isStreamCapturing(stream)) entry.kind = "captured";
    if (named_by_id) named_by_id_ = true;
    if (!call.inputs.frames) {
      if (!t_backward_nodes.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto forward = forward_frames_.find(t_backward_nodes.back());
        if (forward != forward_frames_.end()) {
          call.inputs.frames = forward->second;
          call.inputs.in_backward = true;
        }
      }
      if (!call.inputs.frames) call.inputs.frames = python_frames();
      if (t_backward_nodes.empty() && call.sequence_number >= 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        forward_frames_[call.sequence_number] = call.inputs.frames;
      }
    }
    entry.frames = call.inputs.frames;
    entry.in_backward = call.inputs.in_backward;
  }

  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& function) {
    Recorder* self = g_recording.load();
    if (self == nullptr) return nullptr;
    if (function.scope() == at::RecordScope::BACKWARD_FUNCTION) {
      t_backward_nodes.push_back(function.seqNr());
      auto node = std::make_unique<Call>();
      node->backward_node = true;
      return node;
    }
    const auto schema = function.operator_schema();
    if (!schema) return nullptr;
    auto call = std::make_unique<Call>();
    call->sequence_number = function.seqNr();
    Entry& entry = call->inputs;
    entry.kind = "kernel";
    entry.operator_name = c10::toString(schema->operator_name());
    const std::string base = schema->name().substr(schema->name().find("::") + 2);
    call->metadata_factory = reads_only_metadata(base);
    call->writes_nothing = writes_nothing(base);
    const auto inputs = function.inputs();
    const auto& arguments = schema->arguments();
    if (entry.operator_name == "aten::record_stream" && inputs.size() == 2 && inputs[1].isStream()) {
      each_tensor(inputs[0], [&](const at::Tensor& tensor) { self->add(*call, entry, tensor, false, "self"); });
      if (call->device < 0) return nullptr;
      entry.kind = "record_stream";
      bool named_by_id = false;
      entry.second = native_handle(inputs[1].toStream(), named_by_id);
      entry.frames = python_frames();
      self->append(std::move(entry));
      return nullptr;
    }
    for (size_t i = 0; i < inputs.size() && i < arguments.size(); ++i) {
      const c10::AliasInfo* alias = arguments[i].alias_info();
      const bool write = alias != nullptr && alias->isWrite();
      if (!write && (call->metadata_factory || alias != nullptr)) continue;  // a view or a factory: no data read
      each_tensor(inputs[i], [&](const at::Tensor& tensor) { self->add(*call, entry, tensor, write, arguments[i].name()); });
    }
    if (!entry.accesses.empty()) {
      self->stamp(*call, entry);
      Entry launched = entry;
      entry.accesses.clear();
      self->append(std::move(launched));
    }
    return call;
  }

  static void on_end(const at::RecordFunction& function, at::ObserverContext* context) {
    auto* call = static_cast<Call*>(context);
    if (call != nullptr && call->backward_node) {
      if (!t_backward_nodes.empty()) t_backward_nodes.pop_back();
      return;
    }
    Recorder* self = g_recording.load();
    if (self == nullptr || call == nullptr) return;
    const auto schema = function.operator_schema();
    if (!schema) return;
    Entry entry;
    entry.kind = "kernel";
    entry.operator_name = call->inputs.operator_name;  // stamp() names it "captured" on a capturing stream
    const auto& returns = schema->returns();
    const auto& outputs = function.outputs();
    for (size_t i = 0; i < outputs.size() && i < returns.size(); ++i) {
      if (returns[i].alias_info() != nullptr) continue;  // in place (written above) or a view: no fresh memory
      each_tensor(outputs[i], [&](const at::Tensor& tensor) {
        self->add(*call, entry, tensor, true, returns[i].name().empty() ? "result" : returns[i].name());
      });
    }
    if (entry.accesses.empty() || call->writes_nothing) return;
    self->stamp(*call, entry);
    self->append(std::move(entry));
  }

  at::CallbackHandle handle_ = 0;
  std::mutex mutex_;
  std::vector<Entry> entries_;
  std::unordered_map<int64_t, std::shared_ptr<Frames>> forward_frames_;  // by autograd sequence number
  uint64_t next_order_ = 0;
  std::atomic<bool> named_by_id_{false};
};

}  // namespace

void bind_access_recorder(py::module& module) {
  py::class_<Recorder>(module, "AccessRecorder",
                       "What each operator on PrivateUse1 tensors read and wrote, on which stream, from which lines.")
      .def(py::init<>())
      .def("start", &Recorder::start, "Observe every operator from now on (one recorder at a time).")
      .def("stop", &Recorder::stop, "Stop observing; what was recorded stays until taken.")
      .def("note", &Recorder::note, py::arg("kind"), py::arg("first") = 0, py::arg("second") = 0,
           "Record a device-trace event in order with the operators, with the Python lines that caused it.")
      .def("streams_named_by_id", &Recorder::streams_named_by_id,
           "Whether the backend gave no native stream handles, so operators' streams are named by id.")
      .def("take", &Recorder::take,
           "The records so far as (order, kind, operator, stream, stream_id, first, second, accesses, frames, thread,"
           " in_backward); emptied.");
}
