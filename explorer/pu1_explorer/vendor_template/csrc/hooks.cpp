// Guide step "hooks": tell PyTorch that the device exists and where its parts are.
//
// A vendor's hooks are an at::PrivateUse1HooksInterface registered once with
// at::RegisterPrivateUse1HooksInterface. PyTorch asks them about the device outside any operator:
// is it available, how many devices, which one is current, the default and new generators, the
// pinned-memory allocator, whether a host pointer is pinned, which device a pointer is on, how to
// resize a storage. What a vendor replaces: nothing; every answer comes from the runtime or from
// another step's file.
#include "backend.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace torch_{{ name }} {

// [guide: hooks]
namespace {

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    TRACE_INTERFACE("hooks", "isBuilt", "");
    return true;
  }
  bool isAvailable() const override {
    TRACE_INTERFACE("hooks", "isAvailable", "");
    return device_count() > 0;
  }
  bool hasPrimaryContext(DeviceIndex device) const override {
    TRACE_INTERFACE("hooks", "hasPrimaryContext", c10::str("device=", static_cast<int>(device)));
    return device >= 0 && device < device_count();
  }
  DeviceIndex deviceCount() const override {
    TRACE_INTERFACE("hooks", "deviceCount", "");
    return device_count();
  }
  DeviceIndex getCurrentDevice() const override {
    TRACE_INTERFACE("hooks", "getCurrentDevice", "");
    return current_device();
  }
  void setCurrentDevice(DeviceIndex device) const override {
    TRACE_INTERFACE("hooks", "setCurrentDevice", c10::str("device=", static_cast<int>(device)));
    set_current_device(device);
  }
  DeviceIndex exchangeDevice(DeviceIndex device) const override {
    TRACE_INTERFACE("hooks", "exchangeDevice", c10::str("device=", static_cast<int>(device)));
    DeviceIndex previous = current_device();
    if (device != previous) set_current_device(device);
    return previous;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex device) const override {
    TRACE_INTERFACE("hooks", "maybeExchangeDevice", c10::str("device=", static_cast<int>(device)));
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(DeviceIndex device) const override {
    TRACE_INTERFACE("hooks", "getDefaultGenerator", c10::str("device=", static_cast<int>(device)));
    return default_generator(device);
  }
  at::Generator getNewGenerator(DeviceIndex device) const override {
    TRACE_INTERFACE("hooks", "getNewGenerator", c10::str("device=", static_cast<int>(device)));
    return new_generator(device);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    TRACE_INTERFACE("hooks", "getPinnedMemoryAllocator", "");
    return pinned_allocator();
  }
  bool isPinnedPtr(const void* data) const override {
    TRACE_INTERFACE("hooks", "isPinnedPtr", c10::str("data=", data));
    bool pinned = false;
    return runtime::is_pinned_host(data, &pinned) == runtime::kSuccess && pinned;
  }
  c10::Device getDeviceFromPtr(void* data) const override {
    TRACE_INTERFACE("hooks", "getDeviceFromPtr", c10::str("data=", data));
    int device = 0;
    RUNTIME_CHECK(runtime::device_of_pointer(data, &device));
    return c10::Device(kDevice, static_cast<DeviceIndex>(device));
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    TRACE_INTERFACE("hooks", "resizePrivateUse1Bytes", c10::str("new_bytes=", new_bytes));
    resize_storage(storage, new_bytes);
  }
};

// Registered when the library loads, before Python code can ask for the device.
const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

}  // namespace
// [/guide: hooks]

}  // namespace torch_{{ name }}
