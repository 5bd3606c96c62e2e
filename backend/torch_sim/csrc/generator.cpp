// Step 7, generator: torch.Generator(device="sim") and a default generator per device.
//
// A vendor's generator is a c10::GeneratorImpl for PrivateUse1 that the hooks hand out
// (getDefaultGenerator, getNewGenerator); seeding, offsets and get/set_rng_state go through it.
// sim's generator carries a host Mersenne-Twister state, and its random operators draw from it on
// the host: a seeded draw on sim is the CPU's draw with the same seed, number for number.
#include "sim.h"
#include "interface_trace.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <vector>

namespace sim {

struct SimGenerator final : c10::GeneratorImpl {
  // The random numbers come from a host generator that lives inside the device
  // generator: host kernels computing for the device draw from it.
  c10::intrusive_ptr<at::CPUGeneratorImpl> host;

  explicit SimGenerator(DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kSim, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host(c10::make_intrusive<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override {
    SIM_TRACE("generator", "set_current_seed", c10::str("seed=", seed));
    host->set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    SIM_TRACE("generator", "set_offset", c10::str("offset=", offset));
    host->set_offset(offset);
  }
  uint64_t get_offset() const override {
    SIM_TRACE("generator", "get_offset", "");
    return host->get_offset();
  }
  uint64_t current_seed() const override {
    SIM_TRACE("generator", "current_seed", "");
    return host->current_seed();
  }
  uint64_t seed() override {
    SIM_TRACE("generator", "seed", "");
    return host->seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    SIM_TRACE("generator", "set_state", c10::str("bytes=", new_state.numel()));
    int64_t expected = host->get_state()->numel();
    TORCH_CHECK(new_state.numel() == expected, "sim: an RNG state is ", expected,
                " bytes (as get_rng_state() returns it), got ", new_state.numel(), " bytes");
    host->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    SIM_TRACE("generator", "get_state", "");
    return host->get_state();
  }
  static c10::DeviceType device_type() { return kSim; }

 private:
  SimGenerator* clone_impl() const override {
    SIM_TRACE("generator", "clone", c10::str("device=", device()));
    auto* copy = new SimGenerator(device().index());
    copy->host = c10::make_intrusive<at::CPUGeneratorImpl>();
    copy->host->set_state(*host->get_state());
    return copy;
  }
};

static std::vector<at::Generator> g_default_generators;
static std::atomic<bool> g_generator_installed{false};

static void swap_generator_states(at::CPUGeneratorImpl* a, at::CPUGeneratorImpl* b) {
  std::scoped_lock lock(a->mutex_, b->mutex_);
  auto engine = a->engine();
  a->set_engine(b->engine());
  b->set_engine(engine);
  auto next_float = a->next_float_normal_sample();
  a->set_next_float_normal_sample(b->next_float_normal_sample());
  b->set_next_float_normal_sample(next_float);
  auto next_double = a->next_double_normal_sample();
  a->set_next_double_normal_sample(b->next_double_normal_sample());
  b->set_next_double_normal_sample(next_double);
}

const at::Generator& default_generator(DeviceIndex device) {
  TORCH_CHECK(g_generator_installed.load(),
              "sim has no random number generator yet: the 'generator' step of the bring-up is not installed.");
  if (device < 0) device = t_current_device;
  check_device_index(device);
  return g_default_generators[device];
}

DeviceRandomScope::DeviceRandomScope(bool active, DeviceIndex device) {
  if (!active || !g_generator_installed.load()) return;
  host_default = at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator());
  // Through PyTorch's context and the hooks, as a vendor's kernel finds the device's default generator.
  const at::Generator& generator = at::globalContext().defaultGenerator(c10::Device(kSim, device));
  auto* device_generator = dynamic_cast<SimGenerator*>(generator.unsafeGetGeneratorImpl());
  device_host = device_generator->host.get();
  swap_generator_states(host_default, device_host);
}

DeviceRandomScope::~DeviceRandomScope() {
  if (host_default != nullptr) swap_generator_states(host_default, device_host);
}

at::Generator host_generator_for(const at::Generator& generator) {
  auto* sim_generator = dynamic_cast<SimGenerator*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(sim_generator != nullptr, "sim: expected a sim generator, got one for ", generator.device());
  return at::Generator(sim_generator->host);
}

bool generator_installed() { return g_generator_installed.load(); }

at::Generator new_generator(DeviceIndex device) {
  TORCH_CHECK(g_generator_installed.load(),
              "sim has no random number generator yet: the 'generator' step of the bring-up is not installed.");
  if (device < 0) device = t_current_device;
  check_device_index(device);
  return at::make_generator<SimGenerator>(device);
}

static void install_generator() {
  if (g_generator_installed.load()) return;
  for (int i = 0; i < g_device_count.load(); ++i)
    g_default_generators.push_back(at::make_generator<SimGenerator>(static_cast<DeviceIndex>(i)));
  g_generator_installed = true;
}

void bind_generator(pybind11::module& module) {
  module.def("install_generator", &install_generator);
  module.def("default_generator", [](int64_t device) { return default_generator(checked(device)); });
}

}  // namespace sim
