// Step 2, hooks: tell PyTorch that the device exists and where its parts are.
//
// A vendor's hooks are an at::PrivateUse1HooksInterface registered once with
// at::RegisterPrivateUse1HooksInterface. PyTorch asks them whenever it needs the device outside an
// operator: is it available, how many devices, which is current, the default generators, the
// pinned-memory allocator, which device a pointer belongs to, how to resize a storage.
// The pinned-memory allocator is also registered as the device's host allocator
// (at::setHostAllocator): torch.accelerator.empty_host_cache() calls it without checking that one is
// registered, so a device without one crashes the interpreter there.
#include "sim.h"
#include "interface_trace.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <torch/csrc/utils/device_lazy_init.h>

#include <memory>

namespace sim {

struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    SIM_TRACE("hooks", "isBuilt", "");
    return true;
  }
  bool isAvailable() const override {
    SIM_TRACE("hooks", "isAvailable", "");
    return g_device_count.load() > 0;
  }
  // Before the generator step, PyTorch's own answer for hooks without generators: the base class raises it.
  const at::Generator& getDefaultGenerator(DeviceIndex device) const override {
    SIM_TRACE("hooks", "getDefaultGenerator", c10::str("device=", static_cast<int>(device)));
    if (!generator_installed()) return at::PrivateUse1HooksInterface::getDefaultGenerator(device);
    return default_generator(device);
  }
  at::Generator getNewGenerator(DeviceIndex device) const override {
    SIM_TRACE("hooks", "getNewGenerator", c10::str("device=", static_cast<int>(device)));
    if (!generator_installed()) return at::PrivateUse1HooksInterface::getNewGenerator(device);
    return new_generator(device);
  }
  c10::Device getDeviceFromPtr(void* data) const override {
    SIM_TRACE("hooks", "getDeviceFromPtr", c10::str("data=", data));
    auto device = device_of_pointer(data);
    TORCH_CHECK(device.has_value(), "sim: the pointer is not in sim device memory");
    return c10::Device(kSim, *device);
  }
  bool isPinnedPtr(const void* data) const override {
    SIM_TRACE("hooks", "isPinnedPtr", c10::str("data=", data));
    return is_pinned_address(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    SIM_TRACE("hooks", "getPinnedMemoryAllocator", "");
    return pinned_allocator();
  }
  bool hasPrimaryContext(DeviceIndex device) const override {
    SIM_TRACE("hooks", "hasPrimaryContext", c10::str("device=", static_cast<int>(device)));
    if (device < 0 || device >= g_device_count.load()) return false;
    int active = 0;  // a device's context starts with its first use: memory, a stream, a copy
    driver_call(simDevicePrimaryCtxGetState(device, &active), "simDevicePrimaryCtxGetState");
    return active != 0;
  }
  DeviceIndex deviceCount() const override {
    SIM_TRACE("hooks", "deviceCount", "");
    return static_cast<DeviceIndex>(g_device_count.load());
  }
  void setCurrentDevice(DeviceIndex device) const override {
    SIM_TRACE("hooks", "setCurrentDevice", c10::str("device=", static_cast<int>(device)));
    guard_impl().setDevice(c10::Device(kSim, device));
  }
  DeviceIndex getCurrentDevice() const override {
    SIM_TRACE("hooks", "getCurrentDevice", "");
    return t_current_device;
  }
  DeviceIndex exchangeDevice(DeviceIndex device) const override {
    SIM_TRACE("hooks", "exchangeDevice", c10::str("device=", static_cast<int>(device)));
    return guard_impl().exchangeDevice(c10::Device(kSim, device)).index();
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex device) const override {
    SIM_TRACE("hooks", "maybeExchangeDevice", c10::str("device=", static_cast<int>(device)));
    return exchangeDevice(device);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    SIM_TRACE("hooks", "resizePrivateUse1Bytes", c10::str("nbytes=", storage.nbytes(), " new_bytes=", new_bytes));
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable (a sim storage over memory sim "
                "does not own, such as from_blob's)");
    if (new_bytes > storage.nbytes()) {
      grow_storage(storage, new_bytes);
    } else {
      storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
    }
  }
};

static std::unique_ptr<SimHooks> g_hooks;

static void install_hooks() {
  if (g_hooks) return;
  g_hooks = std::make_unique<SimHooks>();
  at::RegisterPrivateUse1HooksInterface(g_hooks.get());
  at::setHostAllocator(kSim, pinned_allocator());
}

void bind_hooks(pybind11::module& module) {
  module.def("install_hooks", &install_hooks);
  // After the device has started, a forked child is marked "in a bad fork" and must not start it again.
  module.def("poison_forks", []() { torch::utils::register_fork_handler_for_device_init(kSim); });
  module.def("in_bad_fork", []() { return torch::utils::is_device_in_bad_fork(kSim); });
}

}  // namespace sim
