// Native helpers of the explorer engine: the wrapped-number helper, the stream sanitizer's access
// recorder (access_recorder.cpp), demand's operator counter (operator_counter.cpp), and the native
// hop recorder of the tracer (boxed kernels that record each dispatcher hop into a C++ buffer and
// call the kernel that was computed for that key before).
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>

#include <array>
#include <atomic>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

// A scalar as the dispatcher passes it between kernels: a 0-dim CPU tensor marked as
// a "wrapped number", which takes part in type promotion like a Python number does.
// Python kernels receive such tensors as plain numbers; handing them back needs this.
static at::Tensor wrapped_number(py::handle value) {
  c10::Scalar scalar;
  if (PyBool_Check(value.ptr())) {
    scalar = c10::Scalar(value.ptr() == Py_True);
  } else if (PyLong_Check(value.ptr())) {
    scalar = c10::Scalar(static_cast<int64_t>(PyLong_AsLongLong(value.ptr())));
  } else if (PyFloat_Check(value.ptr())) {
    scalar = c10::Scalar(PyFloat_AsDouble(value.ptr()));
  } else if (PyComplex_Check(value.ptr())) {
    scalar = c10::Scalar(c10::complex<double>(PyComplex_RealAsDouble(value.ptr()), PyComplex_ImagAsDouble(value.ptr())));
  } else {
    TORCH_CHECK(false, "wrapped_number expects a bool, int, float or complex");
  }
  at::Tensor tensor = at::scalar_to_tensor(scalar);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

namespace {

std::optional<c10::OperatorHandle> find_operator(const std::string& full_name) {
  auto separator = full_name.find('.', full_name.find("::"));
  c10::OperatorName name(full_name.substr(0, separator),
                         separator == std::string::npos ? "" : full_name.substr(separator + 1));
  return c10::Dispatcher::singleton().findSchema(name);
}

int64_t now_ns() {
  // CLOCK_MONOTONIC, the clock of Python's time.perf_counter_ns() on Linux.
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

// A set of runtime dispatch keys, one bit per DispatchKey value.
static_assert(static_cast<uint16_t>(c10::DispatchKey::EndOfRuntimeBackendKeys) < 256, "runtime keys fit in 256 bits");
struct KeyBits {
  std::array<uint64_t, 4> words{};
  void set(uint16_t key) {
    if (key < 256) {
      words[key >> 6] |= uint64_t{1} << (key & 63);
    }
  }
  bool operator==(const KeyBits& other) const { return words == other.words; }
};

struct KeyBitsHash {
  size_t operator()(const KeyBits& bits) const {
    size_t hash = 0;
    for (uint64_t word : bits.words) hash = hash * 1000003u ^ std::hash<uint64_t>{}(word);
    return hash;
  }
};

// The runtime keys of a key set, by name: what iterating (and printing) the set yields.
const KeyBits& bits_of(c10::DispatchKeySet keyset) {
  thread_local std::unordered_map<uint64_t, KeyBits> cache;
  auto found = cache.find(keyset.raw_repr());
  if (found != cache.end()) return found->second;
  KeyBits bits;
  for (c10::DispatchKey key : keyset) bits.set(static_cast<uint16_t>(key));
  return cache.emplace(keyset.raw_repr(), bits).first->second;
}

struct TensorMeta {
  c10::SmallVector<int64_t, 5> shape;
  c10::ScalarType dtype;
  c10::Device device;
};

struct Record {
  int32_t site = 0;
  int32_t keyset = 0;
  int32_t parent = -1;
  int32_t depth = 0;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  bool backward = false;
  bool finished = false;
  bool failed = false;
  std::vector<TensorMeta> inputs;
  std::string error;
};

struct Site {
  std::string operator_name;
  std::string key_name;
  std::string tag;
  std::string debug;
  c10::OperatorName name;
  c10::DispatchKey key;
  int32_t operator_id;
  std::optional<c10::SafeKernelFunction> original;
  bool records = true;  // false: a passthrough that keeps another key's computed kernel as it was
};

// The plan's tag of a site that records nothing (see Session).
constexpr const char* kPassthroughTag = "passthrough";

class Session;

struct Frame {
  const Session* session;
  int32_t record;
  int32_t operator_id;
  int32_t keyset;
  int32_t depth;
};
thread_local std::vector<Frame> frames;

std::atomic<Session*> active_session{nullptr};

// The tracer's slot in PyTorch's thread-local debug information: the innermost hop open on a thread. PyTorch carries
// that information with the rest of a thread's state (at::ThreadLocalState) wherever work moves to another thread,
// among them a backend's kernels queued to threads of its own, so a call made there names the hop that launched it.
constexpr std::string_view kOpenHopName = "pu1_explorer.tracer.open_hop";
const c10::DebugInfoKind kOpenHop(&kOpenHopName);

struct OpenHopInfo final : c10::DebugInfoBase {
  OpenHopInfo(uint64_t session, const Frame& frame, bool backward) : session(session), frame(frame), backward(backward) {}
  uint64_t session;  // the serial number of the session that recorded the hop
  Frame frame;
  bool backward;
};

std::atomic<uint64_t> next_session_serial{1};

class QuietWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

// The exception being handled, as Python would show it: "TypeName: first line of the message".
std::string describe_current_exception() {
  auto first_line = [](const std::string& text) { return text.substr(0, text.find('\n')); };
  auto python_name = [](PyObject* type) {
    std::string name = reinterpret_cast<PyTypeObject*>(type)->tp_name;
    auto dot = name.rfind('.');
    return dot == std::string::npos ? name : name.substr(dot + 1);
  };
  auto python_text = [&](PyObject* type, PyObject* value) {
    std::string text;
    if (value != nullptr) {
      PyObject* str = PyObject_Str(value);
      if (str != nullptr) {
        const char* utf8 = PyUnicode_AsUTF8(str);
        if (utf8 != nullptr) text = utf8;
        Py_DECREF(str);
      }
      PyErr_Clear();
    }
    return python_name(type) + ": " + first_line(text);
  };
  auto c10_text = [&](const char* name, const c10::Error& error) {
    return std::string(name) + ": " + first_line(torch::processErrorMsg(error.what_without_backtrace()));
  };
  try {
    throw;
  } catch (python_error& error) {
    py::gil_scoped_acquire gil;
    if (error.type != nullptr) return python_text(error.type, error.value);
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    std::string text = type != nullptr ? python_text(type, value) : "RuntimeError: " + first_line(error.what());
    PyErr_Restore(type, value, traceback);
    return text;
  } catch (py::error_already_set& error) {
    py::gil_scoped_acquire gil;
    return python_text(error.type().ptr(), error.value().ptr());
  } catch (const c10::IndexError& error) {
    return c10_text("IndexError", error);
  } catch (const c10::ValueError& error) {
    return c10_text("ValueError", error);
  } catch (const c10::TypeError& error) {
    return c10_text("TypeError", error);
  } catch (const c10::NotImplementedError& error) {
    return c10_text("NotImplementedError", error);
  } catch (const c10::BufferError& error) {
    return c10_text("BufferError", error);
  } catch (const c10::SyntaxError& error) {
    return c10_text("SyntaxError", error);
  } catch (const c10::LinAlgError& error) {
    return c10_text("_LinAlgError", error);
  } catch (const c10::OutOfMemoryError& error) {
    return c10_text("OutOfMemoryError", error);
  } catch (const c10::DistBackendError& error) {
    return c10_text("DistBackendError", error);
  } catch (const c10::DistNetworkError& error) {
    return c10_text("DistNetworkError", error);
  } catch (const c10::DistQueueEmptyError& error) {
    return c10_text("DistQueueEmptyError", error);
  } catch (const c10::DistStoreError& error) {
    return c10_text("DistStoreError", error);
  } catch (const c10::DistError& error) {
    return c10_text("DistError", error);
  } catch (const c10::AcceleratorError& error) {
    return c10_text("AcceleratorError", error);
  } catch (const c10::Error& error) {
    return c10_text("RuntimeError", error);
  } catch (torch::PyTorchError& error) {
    py::gil_scoped_acquire gil;
    return python_name(error.python_type()) + ": " + first_line(torch::processErrorMsg(error.what()));
  } catch (const std::exception& error) {
    return "RuntimeError: " + first_line(torch::processErrorMsg(error.what()));
  } catch (...) {
    return "RuntimeError: unknown C++ exception";
  }
}

class Session {
 public:
  // Takes the wrapping plan: each (operator, key, tag) names a computed kernel that exists and is not a
  // fallthrough, with the provenance tag the dispatcher's table dump gives it (the plan is read from the
  // dumps in Python). An entry whose operator has no schema or whose kernel is gone is left out. A site tagged
  // "passthrough" calls its kernel without recording: wrapping a backend key whose kernel comes from
  // CompositeImplicitAutograd makes the dispatcher recompute that backend's autograd key, which then no longer
  // takes the same kernel, so the plan wraps the autograd key too, silently.
  explicit Session(const std::vector<std::tuple<std::string, std::string, std::string>>& plan) {
    std::unordered_map<std::string, int32_t> operator_ids;
    for (const auto& [operator_name, key_name, tag] : plan) {
      auto handle = find_operator(operator_name);
      if (!handle.has_value()) continue;
      c10::DispatchKey key = c10::parseDispatchKey(key_name);
      if (!handle->hasComputedKernelForDispatchKey(key)) continue;
      auto [found, added] = operator_ids.emplace(operator_name, static_cast<int32_t>(operator_names_.size()));
      if (added) operator_names_.push_back(operator_name);
      c10::SafeKernelFunction original = handle->getComputedKernelForDispatchKey(key);
      std::string debug = original.debug();
      sites_.push_back(Site{operator_name, key_name, tag, std::move(debug), handle->operator_name(), key,
                            found->second, std::move(original), tag != kPassthroughTag});
    }
  }

  ~Session() { uninstall(); }

  void install() {
    Session* expected = nullptr;
    TORCH_CHECK(active_session.compare_exchange_strong(expected, this),
                "a dispatcher trace is already active in this process; nested or concurrent traces are not supported");
    try {
      QuietWarnings quiet;  // overriding a kernel warns; the override is undone on exit
      c10::WarningUtils::WarningHandlerGuard guard(&quiet);
      auto& dispatcher = c10::Dispatcher::singleton();
      handles_.reserve(sites_.size());
      for (size_t i = 0; i < sites_.size(); ++i) {
        auto kernel = c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<HopKernel>(this, static_cast<int32_t>(i)));
        handles_.push_back(dispatcher.registerImpl(sites_[i].name, sites_[i].key, std::move(kernel), std::nullopt,
                                                   nullptr, "registered by the pu1_explorer tracer"));
      }
    } catch (...) {
      uninstall();
      throw;
    }
  }

  void uninstall() {
    handles_.clear();  // each handle deregisters its kernel
    Session* self = this;
    active_session.compare_exchange_strong(self, nullptr);
  }

  py::list sites() const {
    py::list result;
    for (const Site& site : sites_) {
      result.append(py::make_tuple(site.operator_name, site.key_name, site.tag, site.debug));
    }
    return result;
  }

  size_t operator_count() const { return operator_names_.size(); }
  size_t hop_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_.size();
  }

  // The interned key sets, each as the names of its runtime keys.
  py::list keysets() {
    std::lock_guard<std::mutex> lock(mutex_);
    py::list result;
    for (const KeyBits& bits : keysets_) {
      py::list names;
      for (uint16_t key = 0; key < 256; ++key) {
        if (bits.words[key >> 6] & (uint64_t{1} << (key & 63))) {
          names.append(c10::toString(static_cast<c10::DispatchKey>(key)));
        }
      }
      result.append(names);
    }
    return result;
  }

  // The hops recorded from index `start` on, in the order they started, as tuples
  // (site, keyset, parent, depth, start_ns, duration_ns, backward, inputs, error, finished),
  // inputs as (shape, dtype, device) tuples.
  py::list records(size_t start) {
    std::lock_guard<std::mutex> lock(mutex_);
    py::list result;
    for (size_t i = start; i < records_.size(); ++i) result.append(as_tuple(records_[i]));
    return result;
  }

  // (duration_ns, error, finished) of the given hops: those still running when last read.
  py::list endings(const std::vector<size_t>& indices) {
    std::lock_guard<std::mutex> lock(mutex_);
    py::list result;
    for (size_t i : indices) {
      const Record& record = records_.at(i);
      result.append(py::make_tuple(record.duration_ns, error_of(record), record.finished));
    }
    return result;
  }

 private:
  struct HopKernel final : c10::OperatorKernel {
    HopKernel(Session* session, int32_t site) : session(session), site(site) {}
    void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
      session->call(site, op, keyset, stack);
    }
    Session* session;
    int32_t site;
  };

  static py::object error_of(const Record& record) {
    return record.failed ? py::object(py::str(record.error)) : py::object(py::none());
  }

  py::tuple as_tuple(const Record& record) {
    py::list inputs;
    for (const TensorMeta& meta : record.inputs) {
      py::list shape;
      for (int64_t size : meta.shape) shape.append(size);
      auto& dtype = dtypes_[static_cast<int>(meta.dtype)];
      if (!dtype) dtype = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(meta.dtype)));
      auto& device = devices_[meta.device.str()];
      if (!device) device = py::str(meta.device.str());
      inputs.append(py::make_tuple(shape, dtype, device));
    }
    return py::make_tuple(record.site, record.keyset, record.parent < 0 ? py::object(py::none()) : py::int_(record.parent),
                          record.depth, record.start_ns, record.duration_ns, record.backward, inputs, error_of(record),
                          record.finished);
  }

  int32_t intern(const KeyBits& bits) {
    auto found = keyset_ids_.find(bits);
    if (found != keyset_ids_.end()) return found->second;
    int32_t id = static_cast<int32_t>(keysets_.size());
    keysets_.push_back(bits);
    keyset_ids_.emplace(bits, id);
    return id;
  }

  void call(int32_t site_index, const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
    const Site& site = sites_[site_index];
    if (!site.records) {
      site.original->callBoxed(op, keyset, stack);
      return;
    }
    const Frame* parent = (!frames.empty() && frames.back().session == this) ? &frames.back() : nullptr;
    bool backward = torch::autograd::get_current_node() != nullptr;
    // A call on a thread with no hop open comes from a kernel that a backend runs on a thread of its own (a
    // driver's executor). Its launcher is the hop that the launching thread's state names, when the backend
    // carries that state with the kernel (at::ThreadLocalState, as PyTorch's own threads do); the launch may
    // have returned and that hop ended. A backend that does not carry it is taken to wait for its kernel: the
    // newest open hop of another thread is then the launcher.
    Frame launcher;
    if (parent == nullptr && !backward) {
      const auto* launched_by = dynamic_cast<const OpenHopInfo*>(c10::ThreadLocalDebugInfo::get(kOpenHop));
      if (launched_by != nullptr && launched_by->session == serial_) {
        launcher = launched_by->frame;
        parent = &launcher;
        backward = launched_by->backward;
      } else {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto open = open_.rbegin(); open != open_.rend(); ++open) {
          if (open->thread == std::this_thread::get_id()) continue;
          launcher = open->frame;
          parent = &launcher;
          backward = open->backward;
          break;
        }
      }
    }
    size_t arguments = op.schema().arguments().size();
    auto values = torch::jit::last(*stack, arguments);

    std::vector<TensorMeta> inputs;
    c10::DispatchKeySet tensor_keys;
    bool continuing = parent != nullptr && parent->operator_id == site.operator_id;
    auto visit = [&](const c10::IValue& value) {
      if (!value.isTensor()) return;
      const at::Tensor& tensor = value.toTensor();
      if (!tensor.defined()) return;
      if (!continuing) tensor_keys = tensor_keys | tensor.key_set();
      TensorMeta meta{{}, tensor.scalar_type(), tensor.device()};
      try {
        for (const c10::SymInt& size : tensor.sym_sizes()) meta.shape.push_back(size.maybe_as_int().value_or(-1));
      } catch (const std::exception&) {
        meta.shape.clear();  // a tensor without sizes (e.g. nested)
      }
      inputs.push_back(std::move(meta));
    };
    for (const c10::IValue& value : values) {
      if (value.isList()) {
        for (const c10::IValue& element : value.toListRef()) visit(element);
      } else {
        visit(value);
      }
    }
    KeyBits keys;
    if (!continuing) {
      // The key set the dispatcher computes for the call, in its own arithmetic: removing an excluded
      // functionality (such as Autograd) removes it for every backend.
      c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
      keys = bits_of((tensor_keys | local.included_) - local.excluded_);
    }
    Record* record;
    int32_t index;
    int32_t depth = parent != nullptr ? parent->depth + 1 : 0;
    Frame frame;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      index = static_cast<int32_t>(records_.size());
      records_.emplace_back();
      record = &records_.back();  // a deque keeps element addresses stable as it grows
      record->site = site_index;
      record->keyset = continuing ? parent->keyset : intern(keys);
      record->parent = parent != nullptr ? parent->record : -1;
      record->depth = depth;
      record->backward = backward;
      record->inputs = std::move(inputs);
      record->start_ns = now_ns();
      frame = Frame{this, index, site.operator_id, record->keyset, depth};
      open_.push_back({frame, std::this_thread::get_id(), backward});
    }
    frames.push_back(frame);
    try {
      c10::DebugInfoGuard open_hop(kOpenHop, std::make_shared<OpenHopInfo>(serial_, frame, backward));
      site.original->callBoxed(op, keyset, stack);
    } catch (...) {
      std::string error = describe_current_exception();
      frames.pop_back();
      std::lock_guard<std::mutex> lock(mutex_);
      close(index);
      record->duration_ns = now_ns() - record->start_ns;
      record->failed = true;
      record->error = std::move(error);
      record->finished = true;
      throw;
    }
    frames.pop_back();
    std::lock_guard<std::mutex> lock(mutex_);
    close(index);
    record->duration_ns = now_ns() - record->start_ns;
    record->finished = true;
  }

  // Forgets an open hop that ended (called with mutex_ held).
  void close(int32_t index) {
    for (auto open = open_.rbegin(); open != open_.rend(); ++open) {
      if (open->frame.record != index) continue;
      open_.erase(std::next(open).base());
      return;
    }
  }

  struct OpenHop {
    Frame frame;
    std::thread::id thread;
    bool backward;
  };
  std::vector<OpenHop> open_;  // the hops that began and have not ended, in the order they began
  const uint64_t serial_ = next_session_serial.fetch_add(1);

  std::vector<Site> sites_;
  std::vector<std::string> operator_names_;
  std::unordered_map<int, py::object> dtypes_;
  std::unordered_map<std::string, py::object> devices_;
  std::vector<c10::RegistrationHandleRAII> handles_;
  std::mutex mutex_;
  std::deque<Record> records_;
  std::vector<KeyBits> keysets_;
  std::unordered_map<KeyBits, int32_t, KeyBitsHash> keyset_ids_;
};

}  // namespace

void bind_access_recorder(py::module& module);  // access_recorder.cpp
void bind_operator_counter(py::module& module);  // operator_counter.cpp

// The name of the autograd node this thread is computing in a backward pass, or None outside one.
std::optional<std::string> current_backward_node() {
  auto node = torch::autograd::get_current_node();
  if (!node) return std::nullopt;
  return node->name();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("wrapped_number", &wrapped_number);
  module.def("current_backward_node", &current_backward_node,
             "The name of the autograd node this thread computes in a backward pass, or None outside one.");
  bind_access_recorder(module);
  bind_operator_counter(module);
  py::class_<Session>(module, "HopRecorder",
                      "Boxed kernels that record each dispatcher hop natively and call the kernel computed before.")
      .def(py::init<const std::vector<std::tuple<std::string, std::string, std::string>>&>(), py::arg("plan"),
           "Wrap each (operator, key, tag) of the plan: computed kernels that exist and are not fallthroughs.")
      .def("install", &Session::install, "Register the recording kernels (refused while another recorder is installed).")
      .def("uninstall", &Session::uninstall, "Drop the recording kernels: the dispatch tables are as before.")
      .def("sites", &Session::sites,
           "The (operator, key, tag, debug) of each wrapped kernel: the table dump's tag and 'registered at' text.")
      .def("operator_count", &Session::operator_count, "How many operators have at least one wrapped key.")
      .def("endings", &Session::endings, "(duration_ns, error, finished) of the given hops.")
      .def("hop_count", &Session::hop_count, "How many hops were recorded so far.")
      .def("keysets", &Session::keysets, "The distinct key sets of the recorded calls, as key names.")
      .def("records", &Session::records, py::arg("start") = 0, "The recorded hops from `start` on, as tuples, in order.");
}
