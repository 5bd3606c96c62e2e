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
    wait_for_queued_draws();
    host->set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    SIM_TRACE("generator", "set_offset", c10::str("offset=", offset));
    wait_for_queued_draws();
    host->set_offset(offset);
  }
  uint64_t get_offset() const override {
    SIM_TRACE("generator", "get_offset", "");
    wait_for_queued_draws();
    return host->get_offset();
  }
  uint64_t current_seed() const override {
    SIM_TRACE("generator", "current_seed", "");
    wait_for_queued_draws();
    return host->current_seed();
  }
  uint64_t seed() override {
    SIM_TRACE("generator", "seed", "");
    wait_for_queued_draws();
    return host->seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    SIM_TRACE("generator", "set_state", c10::str("bytes=", new_state.numel()));
    wait_for_queued_draws();
    int64_t expected = host->get_state()->numel();
    TORCH_CHECK(new_state.numel() == expected, "sim: an RNG state is ", expected,
                " bytes (as get_rng_state() returns it), got ", new_state.numel(), " bytes");
    host->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    SIM_TRACE("generator", "get_state", "");
    wait_for_queued_draws();
    return host->get_state();
  }
  static c10::DeviceType device_type() { return kSim; }

  // Marks a draw that a kernel queued on `stream` makes from this generator.
  void queue_draw(const c10::Stream& stream) {
    wait_for_queued_draws(stream);
    std::lock_guard<std::mutex> lock(queued_mutex_);
    queued_on_ = stream;
    ++queued_draws_;
  }

  // Waits until the draws queued from this generator ran, unless they are queued on `unless_on` (a draw queued
  // behind them there runs after them anyway). A kernel does not wait: what it draws, it draws in its stream's order.
  void wait_for_queued_draws(std::optional<c10::Stream> unless_on = std::nullopt) const {
    if (on_device()) return;
    std::optional<c10::Stream> stream;
    uint64_t draws = 0;
    {
      std::lock_guard<std::mutex> lock(queued_mutex_);
      if (!queued_on_ || queued_on_ == unless_on) return;
      stream = queued_on_;
      draws = queued_draws_;
    }
    synchronize_stream(*stream);
    std::lock_guard<std::mutex> lock(queued_mutex_);
    if (queued_draws_ == draws) queued_on_.reset();
  }

 private:
  // The stream of the draws kernels were last queued to make, until the host saw that stream run them.
  mutable std::mutex queued_mutex_;
  mutable std::optional<c10::Stream> queued_on_;
  mutable uint64_t queued_draws_ = 0;

  SimGenerator* clone_impl() const override {
    SIM_TRACE("generator", "clone", c10::str("device=", device()));
    wait_for_queued_draws();
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

static SimGenerator* default_sim_generator(DeviceIndex device) {
  return static_cast<SimGenerator*>(default_generator(device).unsafeGetGeneratorImpl());
}

at::Generator queue_draw(const c10::Stream& stream) {
  SimGenerator* generator = default_sim_generator(stream.device_index());
  generator->queue_draw(stream);
  return at::Generator(generator->host);
}

void wait_for_queued_draws(DeviceIndex device) {
  if (g_generator_installed.load()) default_sim_generator(device)->wait_for_queued_draws();
}

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
