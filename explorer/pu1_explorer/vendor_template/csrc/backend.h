// What the files of {{ name }}'s integration share: one section per file that provides it.
//
// Each .cpp file is one step of the integration guide and talks to the device only through the
// vendor runtime (runtime.h); what a single file needs stays inside that file.
#pragma once

#include "runtime.h"

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>
#include <vector>

namespace at {
class Tensor;
}
namespace c10 {
class OperatorHandle;
struct IValue;
}  // namespace c10

// A failed runtime call is a RuntimeError that names the call and the runtime's reason.
#define RUNTIME_CHECK(call)                                                                  \
  do {                                                                                       \
    ::runtime::Status status_of_call = (call);                                               \
    TORCH_CHECK(status_of_call == ::runtime::kSuccess, "{{ name }}: ", #call, " failed: ", \
                ::runtime::error_string(status_of_call));                                    \
  } while (0)

// One line at the entry of each interface method: recorded while the interface trace is on (module.cpp); while it
// is off, one relaxed atomic load and the arguments are not evaluated.
#define TRACE_INTERFACE(interface, method, arguments)                                                  \
  do {                                                                                                 \
    if (::torch_{{ name }}::g_interface_trace_on.load(std::memory_order_relaxed))                       \
      ::torch_{{ name }}::record_interface_call((interface), (method), std::string(arguments));          \
  } while (0)

namespace torch_{{ name }} {

using c10::DeviceIndex;
constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

// ---------------------------------------------------------------- guard.cpp
DeviceIndex device_count() noexcept;
DeviceIndex current_device();
void set_current_device(DeviceIndex device);  // checks the index: PyTorch's "The device index is out of range"
void check_device(DeviceIndex device);

// The device guard: guard.cpp implements its device half, streams_events.cpp its stream and event half.
struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;
  DeviceIndex deviceCount() const noexcept override { return device_count(); }
  void synchronizeDevice(const DeviceIndex device) const override;
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override;  // the dtypes the device holds

  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority = false) const override;
  c10::Stream getNewStream(c10::Device device, int priority = 0) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void record(void** event, const c10::Stream& stream, const DeviceIndex device,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* start, void* end, const DeviceIndex device) const override;
  void destroyEvent(void* event, const DeviceIndex device) const noexcept override;
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  bool isStreamCapturing(const c10::Stream& stream) const override;  // graphs.cpp
};

// ---------------------------------------------------------- streams_events.cpp
runtime::Stream runtime_stream(const c10::Stream& stream);  // the runtime's stream behind a PyTorch stream

// ------------------------------------------------------------- allocator.cpp
c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();
void resize_storage(const c10::Storage& storage, size_t new_bytes);  // keeps the bytes it had

// ------------------------------------------------------------- generator.cpp
const at::Generator& default_generator(DeviceIndex device);  // -1: the current device
at::Generator new_generator(DeviceIndex device);
// The host generator inside a device generator: the copying fallback's CPU kernels draw from it.
at::Generator host_generator(const at::Generator& generator);

// ---------------------------------------------------------------- graphs.cpp
// While the current stream of `device` captures a graph, the fallback hands its operator (the arguments from
// `first` on the stack) to the graph, which leaves the operator's results on the stack; true when it did so.
bool record_operator(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack, size_t first,
                     DeviceIndex device);
// The same for a copy: true when a capturing graph recorded it (one between the host and the device is refused).
bool record_copy(const at::Tensor& source, const at::Tensor& destination);
// Refuses `what` (a synchronization, reading a value to the host) while `stream` captures.
void refuse_while_capturing(const c10::Stream& stream, const char* what);

// ---------------------------------------------------------------- module.cpp
extern std::atomic<bool> g_interface_trace_on;
void record_interface_call(const char* interface, const char* method, std::string arguments);

// ----------------------------------------------------------- distributed.cpp
#ifdef Py_PYTHON_H  // in the files that include Python.h: module.cpp lists it among torch_{{ name }}._C's functions
// create_process_group(host, rank, size): the c10d backend {{ name }}ccl over `host`, a Gloo backend of the group.
PyObject* py_create_process_group(PyObject* self, PyObject* arguments);
#endif

}  // namespace torch_{{ name }}
