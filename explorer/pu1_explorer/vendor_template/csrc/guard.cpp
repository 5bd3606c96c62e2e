// Guide step "guard": {{ name }}:1 is really device 1.
//
// A vendor's device guard is a c10::impl::DeviceGuardImplInterface registered for PrivateUse1
// (C10_REGISTER_GUARD_IMPL). PyTorch switches devices through it around every kernel, for
// torch.accelerator.set_device_index, `with torch.device("{{ name }}:1")` and
// torch.{{ name }}.set_device. This half holds the device part; the stream and event part is
// in streams_events.cpp. What a vendor replaces: nothing here; the device calls go to runtime.h.
#include "backend.h"

namespace torch_{{ name }} {

// [guide: guard]
DeviceIndex device_count() noexcept {
  int count = 0;
  return runtime::device_count(&count) == runtime::kSuccess ? static_cast<DeviceIndex>(count) : 0;
}

void check_device(DeviceIndex device) {
  // PyTorch's own wording, which its tests and users' code match.
  TORCH_CHECK(device >= 0 && device < device_count(), "The device index is out of range. It must be in [0, ",
              static_cast<int>(device_count()), "), but got ", static_cast<int>(device), ".");
}

DeviceIndex current_device() {
  int device = 0;
  RUNTIME_CHECK(runtime::get_device(&device));
  return static_cast<DeviceIndex>(device);
}

void set_current_device(DeviceIndex device) {
  check_device(device);
  RUNTIME_CHECK(runtime::set_device(device));
}

c10::Device GuardImpl::getDevice() const {
  TRACE_INTERFACE("guard", "getDevice", "");
  return c10::Device(kDevice, current_device());
}

void GuardImpl::setDevice(c10::Device device) const {
  TRACE_INTERFACE("guard", "setDevice", c10::str("device=", device));
  TORCH_CHECK(device.type() == kDevice, "{{ name }}: expected a {{ name }} device, got ", device);
  set_current_device(device.has_index() ? device.index() : current_device());
}

c10::Device GuardImpl::exchangeDevice(c10::Device device) const {
  TRACE_INTERFACE("guard", "exchangeDevice", c10::str("device=", device));
  c10::Device previous = getDevice();
  if (device.index() != previous.index()) setDevice(device);
  return previous;
}

void GuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  TRACE_INTERFACE("guard", "uncheckedSetDevice", c10::str("device=", device));
  if (device.has_index()) runtime::set_device(device.index());  // may not throw: a failure is ignored
}

void GuardImpl::synchronizeDevice(const DeviceIndex device) const {
  TRACE_INTERFACE("guard", "synchronizeDevice", c10::str("device=", static_cast<int>(device)));
  DeviceIndex index = device < 0 ? current_device() : device;
  check_device(index);
  refuse_while_capturing(getStream(c10::Device(kDevice, index)), "synchronizing the device");
  RUNTIME_CHECK(runtime::synchronize_device(index));
}

// torch.accelerator.get_device_capability(): every dtype starts supported; clear the ones the device
// cannot hold. The operators here compute on the host, so only the quantized dtypes are missing (they
// would need the QuantizedPrivateUse1 kernels this backend does not register).
c10::DeviceCapability GuardImpl::getDeviceCapability(c10::Device device) const {
  TRACE_INTERFACE("guard", "getDeviceCapability", c10::str("device=", device));
  check_device(device.has_index() ? device.index() : current_device());
  c10::DeviceCapability capability;
  auto& dtypes = capability.capability_data.supported_scalar_types;
  dtypes.has_QInt8 = dtypes.has_QUInt8 = dtypes.has_QInt32 = dtypes.has_QUInt4x2 = dtypes.has_QUInt2x4 = false;
  return capability;
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);
// [/guide: guard]

}  // namespace torch_{{ name }}
