// Demand's counter: how many times each operator overload is reached while a workload runs.
//
// A call counts when it takes or makes a tensor of the measured device and nothing but composites
// stands between it and the user's code: a call made from Python or by autograd's engine, or from
// inside the kernel of a composite operator (one with a CompositeImplicitAutograd or
// CompositeExplicitAutograd kernel and no kernel of the measured backend's own, so its
// decomposition runs there and each operator of it needs a kernel). Calls that a backend's own
// kernel makes inside itself are its implementation, not demand: not counted.
//
// Operators are observed with a global RecordFunction callback, PyTorch's own observer interface.
// On the thread that counts, every call counts; on other threads only what autograd's nodes call
// (the engine's device threads): the threads a backend runs its kernels on (a device's executor)
// call operators as their implementation.
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/TensorOptions.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

class Counter;
std::atomic<Counter*> g_counting{nullptr};

// For each operator call open on this thread, innermost last: whether the calls it makes count.
thread_local std::vector<bool> t_open_calls;

struct OpenCall : at::ObserverContext {
  bool counted = false;   // nothing but composites between it and the user's code
  bool on_device = false;  // it took a tensor (or a device argument) of the measured device
  std::string name;
};

bool names_device(const c10::IValue& value, c10::DeviceType type) {
  if (value.isTensor()) return value.toTensor().defined() && value.toTensor().device().type() == type;
  if (value.isDevice()) return value.toDevice().type() == type;
  if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector())
      if (tensor.defined() && tensor.device().type() == type) return true;
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef())
      if (names_device(item, type)) return true;
  }
  return false;
}

template <typename Values>
bool any_names_device(const Values& values, c10::DeviceType type) {
  for (const c10::IValue& value : values)
    if (names_device(value, type)) return true;
  return false;
}

class Counter {
 public:
  void start(const std::string& backend_key) {
    TORCH_CHECK(handle_ == 0, "the counter is already started");
    backend_key_ = c10::parseDispatchKey(backend_key);
    device_type_ = c10::dispatchKeyToDeviceType(backend_key_);
    counting_thread_ = std::this_thread::get_id();
    Counter* expected = nullptr;
    TORCH_CHECK(g_counting.compare_exchange_strong(expected, this),
                "another operator counter is counting in this process; one at a time");
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&Counter::on_start, &Counter::on_end)
                                        .needsInputs(true)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }

  void stop() {
    if (handle_ == 0) return;
    at::removeCallback(handle_);
    handle_ = 0;
    Counter* self = this;
    g_counting.compare_exchange_strong(self, nullptr);
  }

  // The counts so far, by "namespace::name.overload"; emptied.
  std::unordered_map<std::string, int64_t> take() {
    std::unordered_map<std::string, int64_t> taken;
    std::lock_guard<std::mutex> lock(mutex_);
    taken.swap(counts_);
    return taken;
  }

  ~Counter() { stop(); }

 private:
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& function) {
    Counter* self = g_counting.load();
    if (self == nullptr) return nullptr;
    auto call = std::make_unique<OpenCall>();
    call->counted =
        t_open_calls.empty() ? std::this_thread::get_id() == self->counting_thread_ : t_open_calls.back();
    if (function.scope() == at::RecordScope::BACKWARD_FUNCTION) {
      call->counted = false;  // an autograd node, not an operator: what it calls is the engine's demand
      t_open_calls.push_back(true);
      return call;
    }
    const auto schema = function.operator_schema();
    bool decomposes = false;
    if (schema && call->counted) {
      call->name = c10::toString(schema->operator_name());
      call->on_device = any_names_device(function.inputs(), self->device_type_);
      std::lock_guard<std::mutex> lock(self->mutex_);
      decomposes = self->decomposes(schema->operator_name(), call->name);
    } else {
      call->counted = false;
    }
    t_open_calls.push_back(decomposes);
    return call;
  }

  // A call counts when it ends, once its outputs show the device a factory was asked for.
  static void on_end(const at::RecordFunction& function, at::ObserverContext* context) {
    if (context == nullptr) return;
    if (!t_open_calls.empty()) t_open_calls.pop_back();
    auto* call = static_cast<OpenCall*>(context);
    Counter* self = g_counting.load();
    if (self == nullptr || !call->counted) return;
    if (!call->on_device && !any_names_device(function.outputs(), self->device_type_)) return;
    std::lock_guard<std::mutex> lock(self->mutex_);
    ++self->counts_[call->name];
  }

  // Whether the operator's composite kernel runs on the measured backend (cached; called under mutex_).
  bool decomposes(const c10::OperatorName& operator_name, const std::string& name) {
    auto known = composite_.find(name);
    if (known != composite_.end()) return known->second;
    bool composite = false;
    if (auto handle = c10::Dispatcher::singleton().findOp(operator_name)) {
      composite = !handle->hasKernelForDispatchKey(backend_key_) &&
                  (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
                   handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                   handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional));
    }
    composite_.emplace(name, composite);
    return composite;
  }

  at::CallbackHandle handle_ = 0;
  c10::DispatchKey backend_key_ = c10::DispatchKey::CPU;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  std::thread::id counting_thread_;
  std::mutex mutex_;
  std::unordered_map<std::string, int64_t> counts_;
  std::unordered_map<std::string, bool> composite_;
};

}  // namespace

void bind_operator_counter(py::module& module) {
  py::class_<Counter>(module, "OperatorCounter",
                      "How often each operator overload is reached below the composites, on every thread.")
      .def(py::init<>())
      .def("start", &Counter::start, py::arg("backend_key"),
           "Count from now on; composites are those without a kernel for `backend_key` ('PrivateUse1', 'CPU', ...).")
      .def("stop", &Counter::stop, "Stop counting; the counts stay until taken.")
      .def("take", &Counter::take, "The counts so far by operator overload; emptied.");
}
