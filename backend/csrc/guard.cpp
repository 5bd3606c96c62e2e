// Step 3, guard: sim:1 is really device 1.
//
// A vendor's device guard is a c10::impl::DeviceGuardImplInterface registered for PrivateUse1 with
// C10_REGISTER_GUARD_IMPL (or a DeviceGuardImplRegistrar). It keeps the current device per thread,
// so that torch.sim.set_device, `with torch.sim.device(1)`, DeviceGuard in kernels and the
// allocator agree on it. PyTorch also asks it for streams and events; sim's are in
// streams_events.cpp.
#include "sim.h"

#include <memory>

namespace sim {

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kSim; }
  c10::Device exchangeDevice(c10::Device device) const override {
    auto previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return c10::Device(kSim, t_current_device); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kSim, "sim: expected a sim device, got ", device);
    DeviceIndex index = device.has_index() ? device.index() : 0;
    check_device_index(index);
    t_current_device = index;
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
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
  c10::Stream getStream(c10::Device device) const override { return current_stream(resolved(device)); }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, resolved(device));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return stream_from_pool(resolved(device));
  }
  c10::Stream getNewStream(c10::Device device, int) const override { return new_stream(resolved(device)); }
  // sim computes with the host's kernels, so every dtype the CPU has is supported (the default).
  // Every dtype but the quantized ones: sim registers no QuantizedPrivateUse1 kernels, so it cannot hold them.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_device_index(resolved(device).index());
    c10::DeviceCapability capability;
    auto& dtypes = capability.capability_data.supported_scalar_types;
    dtypes.has_QInt8 = dtypes.has_QUInt8 = dtypes.has_QInt32 = dtypes.has_QUInt4x2 = dtypes.has_QUInt2x4 = false;
    return capability;
  }
  c10::Stream exchangeStream(c10::Stream stream) const override { return exchange_current_stream(stream); }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(g_device_count.load()); }

  void record(void** event, const c10::Stream& stream, const DeviceIndex, const c10::EventFlag flag) const override {
    record_event(event, stream, flag);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override { destroy_event(event); }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex device_index) const override { check_device_index(device_index); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
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
