// The runtime core (backend/torch_sim/runtime.py loads it as torch_sim._C): sim's devices, the one helper
// every registration with the dispatcher goes through, and the Python module that binds the
// functions of every step's file. A vendor's runtime starts the same way: how many devices
// there are and which one is current, per thread.
#include "sim.h"
#include "operators_direct.h"
#include "operators_rnn.h"
#include "graphs.h"
#include "interface_trace.h"

#include <memory>
#include <vector>

namespace sim {

std::atomic<int> g_device_count{0};
thread_local DeviceIndex t_current_device = 0;

void check_device_index(DeviceIndex index) {
  int count = g_device_count.load();
  TORCH_CHECK(  // PyTorch's own wording first (its tests and users' code match it), then sim's advice
      index >= 0 && index < count,
      "The device index is out of range. It must be in [0, ", count, "), but got ", static_cast<int>(index),
      ". sim:", static_cast<int>(index), " does not exist: this process has ", count, " sim device(s), sim:0 to sim:",
      count - 1, ". Use a smaller index or set SIM_DEVICE_COUNT before the backend starts.");
}

DeviceIndex checked(int64_t device) {
  check_device_index(static_cast<DeviceIndex>(device));
  return static_cast<DeviceIndex>(device);
}

std::string format_bytes(int64_t bytes) {
  char buffer[64];
  double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) snprintf(buffer, sizeof(buffer), "%.2f GiB", b / (1 << 30));
  else if (b >= (1 << 20)) snprintf(buffer, sizeof(buffer), "%.2f MiB", b / (1 << 20));
  else if (b >= (1 << 10)) snprintf(buffer, sizeof(buffer), "%.2f KiB", b / (1 << 10));
  else snprintf(buffer, sizeof(buffer), "%lld bytes", static_cast<long long>(bytes));
  return buffer;
}

void driver_call(simStatus_t status, const char* call) {
  if (status == simSuccess) return;
  std::string message = simGetLastErrorMessage();
  if (message.empty()) message = simGetErrorString(status);
  TORCH_CHECK_WITH(OutOfMemoryError, status != simErrorOutOfMemory, "sim's driver: ", call, " failed: ", message);
  TORCH_CHECK(false, "sim's driver: ", call, " failed (", simGetErrorName(status), "): ", message);
}

static std::vector<std::unique_ptr<torch::Library>> g_libraries;

torch::Library& new_library(torch::Library::Kind kind, const char* ns, c10::DispatchKey key, const char* file,
                            int line) {
  g_libraries.push_back(std::make_unique<torch::Library>(kind, ns, key, file, line));
  return *g_libraries.back();
}

static void install_runtime(int device_count, int64_t capacity) {
  TORCH_CHECK(device_count >= 1 && device_count <= 64, "SIM_DEVICE_COUNT must be between 1 and 64, got ",
              device_count);
  if (g_device_count.load() > 0) return;
  // The driver reads the same SIM_* variables; asking it for the configuration starts no device.
  int driver_devices = 0;
  driver_call(simGetDeviceCount(&driver_devices), "simGetDeviceCount");
  TORCH_CHECK(driver_devices == device_count, "sim's driver has ", driver_devices, " device(s) but sim expected ",
              device_count, "; set SIM_DEVICE_COUNT before the backend starts and do not change it afterwards");
  create_device_memory(device_count, capacity);
  g_device_count = device_count;
}

}  // namespace sim

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using namespace sim;
  module.def("install_runtime", &install_runtime);
  module.def("device_count", []() { return g_device_count.load(); });
  module.def("current_device", []() { return static_cast<int>(t_current_device); });
  module.def("set_device", [](int64_t device) { t_current_device = checked(device); });
  bind_hooks(module);
  bind_guard(module);
  bind_allocator(module);
  bind_operators(module);
  bind_launches(module);
  bind_recurrent_operators(module);
  bind_direct_operators(module);
  bind_streams_events(module);
  bind_generator(module);
  bind_amp(module);
  bind_serialization(module);
  bind_profiler(module);
  bind_distributed(module);
  bind_graphs(module);
  bind_interface_trace(module);
}
