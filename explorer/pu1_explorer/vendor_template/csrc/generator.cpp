// Guide step "generator": torch.Generator(device="{{ name }}") and a default generator per device.
//
// A vendor's generator is a c10::GeneratorImpl for PrivateUse1 that the hooks hand out
// (getDefaultGenerator, getNewGenerator); seeds, offsets, get_state/set_state and
// torch.{{ name }}.manual_seed all go through it. Until the device has random kernels of its own,
// random operators run on the CPU through the copying fallback, so this generator carries a CPU
// generator's state and the fallback hands that to the CPU kernels (operators.cpp). What a vendor
// replaces: the state (typically a seed and a Philox offset its kernels read) once it writes
// random kernels for the device.
#include "backend.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <vector>

namespace torch_{{ name }} {

// [guide: generator]
namespace {

struct DeviceGenerator final : c10::GeneratorImpl {
  c10::intrusive_ptr<at::CPUGeneratorImpl> host;  // the state the CPU kernels draw from

  explicit DeviceGenerator(DeviceIndex device)
      : c10::GeneratorImpl(c10::Device(kDevice, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host(c10::make_intrusive<at::CPUGeneratorImpl>(c10::default_rng_seed_val)) {}

  void set_current_seed(uint64_t seed) override {
    TRACE_INTERFACE("generator", "set_current_seed", c10::str("seed=", seed));
    host->set_current_seed(seed);
  }
  uint64_t current_seed() const override {
    TRACE_INTERFACE("generator", "current_seed", "");
    return host->current_seed();
  }
  uint64_t seed() override { return host->seed(); }
  void set_offset(uint64_t offset) override { host->set_offset(offset); }
  uint64_t get_offset() const override { return host->get_offset(); }
  void set_state(const c10::TensorImpl& state) override {
    TRACE_INTERFACE("generator", "set_state", "");
    host->set_state(state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    TRACE_INTERFACE("generator", "get_state", "");
    return host->get_state();
  }
  static c10::DeviceType device_type() { return kDevice; }

 private:
  DeviceGenerator* clone_impl() const override {
    auto* copy = new DeviceGenerator(device().index());
    copy->host->set_state(*host->get_state());
    return copy;
  }
};

std::once_flag g_defaults_created;
std::vector<at::Generator> g_defaults;

}  // namespace

const at::Generator& default_generator(DeviceIndex device) {
  std::call_once(g_defaults_created, [] {
    for (DeviceIndex i = 0; i < device_count(); ++i) g_defaults.push_back(at::make_generator<DeviceGenerator>(i));
  });
  DeviceIndex index = device < 0 ? current_device() : device;
  check_device(index);
  return g_defaults[index];
}

at::Generator new_generator(DeviceIndex device) {
  DeviceIndex index = device < 0 ? current_device() : device;
  check_device(index);
  return at::make_generator<DeviceGenerator>(index);
}

at::Generator host_generator(const at::Generator& generator) {
  auto* device_generator = dynamic_cast<DeviceGenerator*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(device_generator != nullptr, "{{ name }}: expected a {{ name }} generator, got one for ",
              generator.device());
  return at::Generator(device_generator->host);
}
// [/guide: generator]

}  // namespace torch_{{ name }}
