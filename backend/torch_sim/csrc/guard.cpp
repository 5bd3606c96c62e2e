// Step 3, guard: sim:1 is really device 1.
//
// A vendor's device guard is a c10::impl::DeviceGuardImplInterface registered for PrivateUse1 with
// C10_REGISTER_GUARD_IMPL (or a DeviceGuardImplRegistrar). It keeps the current device per thread,
// so that torch.sim.set_device, `with torch.sim.device(1)`, DeviceGuard in kernels and the
// allocator agree on it. PyTorch also asks it for streams and events; sim's are in
// streams_events.cpp.
#include "sim.h"
#include "graphs.h"
#include "interface_trace.h"

#include <memory>

namespace sim {

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    SIM_TRACE("guard", "type", "");
    return kSim;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    SIM_TRACE("guard", "exchangeDevice", c10::str("device=", device));
    auto previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override {
    SIM_TRACE("guard", "getDevice", "");
    return c10::Device(kSim, t_current_device);
  }
  void setDevice(c10::Device device) const override {
    SIM_TRACE("guard", "setDevice", c10::str("device=", device));
    TORCH_CHECK(device.type() == kSim, "sim: expected a sim device, got ", device);
    DeviceIndex index = device.has_index() ? device.index() : 0;
    check_device_index(index);
    t_current_device = index;
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    SIM_TRACE("guard", "uncheckedSetDevice", c10::str("device=", device));
    if (device.has_index() && device.index() >= 0 && device.index() < g_device_count.load())
      t_current_device = device.index();
  }
  // A device without an index (torch.Stream(device="sim")) means the current device, as on CUDA; an
  // index past the last device is refused before any stream of it is handed out.
  static c10::Device resolved(c10::Device device) {
    if (!device.has_index()) return c10::Device(kSim, t_current_device);
    check_device_index(device.index());
    return device;
  }
  c10::Stream getStream(c10::Device device) const override {
    SIM_TRACE("guard", "getStream", c10::str("device=", device));
    return current_stream(resolved(device));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    SIM_TRACE("guard", "getDefaultStream", c10::str("device=", device));
    return c10::Stream(c10::Stream::DEFAULT, resolved(device));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override {
    SIM_TRACE("guard", "getStreamFromGlobalPool", c10::str("device=", device));
    return stream_from_pool(resolved(device), high_priority);
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    SIM_TRACE("guard", "getNewStream", c10::str("device=", device, " priority=", priority));
    return new_stream(resolved(device), priority);
  }
  // sim computes with the host's kernels, so every dtype the CPU has is supported (the default).
  // Every dtype but the quantized ones: sim registers no QuantizedPrivateUse1 kernels, so it cannot hold them.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    SIM_TRACE("guard", "getDeviceCapability", c10::str("device=", device));
    check_device_index(resolved(device).index());
    c10::DeviceCapability capability;
    auto& dtypes = capability.capability_data.supported_scalar_types;
    dtypes.has_QInt8 = dtypes.has_QUInt8 = dtypes.has_QInt32 = dtypes.has_QUInt4x2 = dtypes.has_QUInt2x4 = false;
    return capability;
  }
  // The driver's handle of the stream (nullptr for a device's default stream, as CUDA's legacy stream is 0): the
  // name PyTorch's device-trace hooks give a stream (streams_events.cpp), so tools can match the two.
  void* getStreamNativeHandle(const c10::Stream stream) const override {
    SIM_TRACE("guard", "getStreamNativeHandle", c10::str("stream=", stream));
    return driver_stream(stream);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    SIM_TRACE("guard", "exchangeStream", c10::str("stream=", stream));
    return exchange_current_stream(stream);
  }
  DeviceIndex deviceCount() const noexcept override {
    SIM_TRACE("guard", "deviceCount", "");
    return static_cast<DeviceIndex>(g_device_count.load());
  }

  void record(void** event, const c10::Stream& stream, const DeviceIndex, const c10::EventFlag flag) const override {
    SIM_TRACE("guard", "record", c10::str("event=", *event, " stream=", stream));
    record_event(event, stream, flag);
  }
  void block(void* event, const c10::Stream& stream) const override {
    SIM_TRACE("guard", "block", c10::str("event=", event, " stream=", stream));
    block_on_event(event, stream);
  }
  bool queryEvent(void* event) const override {
    SIM_TRACE("guard", "queryEvent", c10::str("event=", event));
    return query_event(event);
  }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    SIM_TRACE("guard", "destroyEvent", c10::str("event=", event));
    destroy_event(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    SIM_TRACE("guard", "queryStream", c10::str("stream=", stream));
    return query_stream(stream);
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    SIM_TRACE("guard", "synchronizeStream", c10::str("stream=", stream));
    refuse_synchronize_while_capturing(stream.device_index(), stream.id());
    synchronize_stream(stream);
  }
  void synchronizeEvent(void* event) const override {
    SIM_TRACE("guard", "synchronizeEvent", c10::str("event=", event));
    synchronize_event(event);
  }
  void synchronizeDevice(const DeviceIndex device_index) const override {
    SIM_TRACE("guard", "synchronizeDevice", c10::str("device=", static_cast<int>(device_index)));
    check_device_index(device_index);
    refuse_synchronize_while_capturing(device_index, -1);
    synchronize_device(device_index);
  }
  // graphs.cpp: a stream captures between a graph's capture_begin and capture_end
  bool isStreamCapturing(const c10::Stream& stream) const override {
    SIM_TRACE("guard", "isStreamCapturing", c10::str("stream=", stream));
    return stream_is_capturing(stream);
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    SIM_TRACE("guard", "recordDataPtrOnStream", c10::str("data=", data.get(), " stream=", stream));
    device_allocator().recordStream(data, stream);
  }
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    SIM_TRACE("guard", "elapsedTime", c10::str("start=", start, " end=", end));
    return elapsed_milliseconds(start, end);
  }
};

static SimGuardImpl g_guard_impl;
static std::unique_ptr<c10::impl::DeviceGuardImplRegistrar> g_guard_registrar;

c10::impl::DeviceGuardImplInterface& guard_impl() { return g_guard_impl; }

static void install_guard() {
  if (g_guard_registrar) return;
  g_guard_registrar = std::make_unique<c10::impl::DeviceGuardImplRegistrar>(kSim, &g_guard_impl);
}

void bind_guard(pybind11::module& module) { module.def("install_guard", &install_guard); }

}  // namespace sim
