// Devices and contexts: the driver's initialisation from the environment, each thread's current
// device, primary contexts, and what becomes of the driver across fork() and exit().
#include "driver.h"

#include <pthread.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using simdriver::Driver;
using simdriver::fail;

std::atomic<bool> g_forked_child{false};
std::once_flag g_initialise_once;
simStatus_t g_initialise_status = simSuccess;
std::string g_initialise_message;
Driver* g_driver = nullptr;  // never destroyed: the executor may outlive static destructors at exit
thread_local int t_current_device = 0;

bool parse_device_count(const char* raw, int* count, std::string* error) {
  char* end = nullptr;
  long value = std::strtol(raw, &end, 10);
  if (end == raw || *end != '\0' || value < 1 || value > simdriver::kMaxDevices) {
    *error = std::string("SIM_DEVICE_COUNT must be a whole number from 1 to 64, got '") + raw + "'";
    return false;
  }
  *count = static_cast<int>(value);
  return true;
}

// "8589934592", "512M", "2GiB": the grammar of torch_sim's SIM_MEMORY_CAPACITY.
bool parse_bytes(const char* raw, size_t* bytes, std::string* error) {
  std::string text(raw);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  text = text.substr(start);
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  size_t unit_start = text.find_last_not_of("KMGIB") + 1;  // npos + 1 == 0: no digits at all
  std::string number = text.substr(0, unit_start), unit = text.substr(unit_start);
  const std::map<std::string, double> units = {{"", 1.0}, {"B", 1.0}, {"K", 1024.0}, {"KB", 1024.0},
                                               {"KIB", 1024.0}, {"M", 1048576.0}, {"MB", 1048576.0},
                                               {"MIB", 1048576.0}, {"G", 1073741824.0}, {"GB", 1073741824.0},
                                               {"GIB", 1073741824.0}};
  char* end = nullptr;
  double value = number.empty() ? 0.0 : std::strtod(number.c_str(), &end);
  auto found = units.find(unit);
  if (number.empty() || end != number.c_str() + number.size() || found == units.end() ||
      !std::isfinite(value) || value * found->second < 1.0 || value * found->second > 1e18) {
    *error = std::string("SIM_MEMORY_CAPACITY must be a positive number of bytes such as 1073741824, 512M or 2G, got '") +
             raw + "'";
    return false;
  }
  *bytes = static_cast<size_t>(value * found->second);
  return true;
}

bool read_config(simdriver::Config* config, std::string* error) {
  if (const char* raw = std::getenv("SIM_DEVICE_COUNT"); raw != nullptr && *raw != '\0')
    if (!parse_device_count(raw, &config->device_count, error)) return false;
  if (const char* raw = std::getenv("SIM_MEMORY_CAPACITY"); raw != nullptr && *raw != '\0')
    if (!parse_bytes(raw, &config->memory_capacity, error)) return false;
  if (const char* raw = std::getenv("SIM_MEMORY"); raw != nullptr && *raw != '\0') {
    if (std::strcmp(raw, "discrete") != 0 && std::strcmp(raw, "unified") != 0) {
      *error = std::string("SIM_MEMORY must be 'unified' or 'discrete', got '") + raw + "'";
      return false;
    }
    config->discrete = std::strcmp(raw, "discrete") == 0;
  }
  if (const char* raw = std::getenv("SIM_LAUNCH_BLOCKING"); raw != nullptr && *raw != '\0') {
    if (std::strcmp(raw, "0") != 0 && std::strcmp(raw, "1") != 0) {
      *error = std::string("SIM_LAUNCH_BLOCKING must be '0' or '1', got '") + raw + "'";
      return false;
    }
    config->launch_blocking = std::strcmp(raw, "1") == 0;
  }
  return true;
}

void after_fork_in_child() { g_forked_child.store(true); }

void at_exit() {
  if (!g_forked_child.load()) simdriver::stop_executor_at_exit();
}

void initialise() {
  simdriver::Config config;
  std::string error;
  if (!read_config(&config, &error)) {
    g_initialise_status = simErrorInitializationError;
    g_initialise_message = "sim's driver cannot start: " + error + "; correct or unset the variable";
    return;
  }
  auto* driver = new Driver();
  driver->config = config;
  driver->epoch = std::chrono::steady_clock::now();
  driver->next_stream_id = simdriver::kMaxDevices;  // below: the default streams' ids
  for (int index = 0; index < config.device_count; ++index) {
    auto device = std::make_unique<simContext_st>();
    device->device = index;
    device->limit = config.memory_capacity;
    driver->devices.push_back(std::move(device));
  }
  g_driver = driver;
  if (config.discrete) simdriver::install_memory_guard();
  std::atexit(at_exit);
}

simStatus_t check_device(int device) {
  int count = static_cast<int>(g_driver->devices.size());
  if (device < 0 || device >= count)
    return fail(simErrorInvalidDevice, "sim:" + std::to_string(device) + " does not exist: the driver has " +
                                           std::to_string(count) + " device(s), sim:0 to sim:" +
                                           std::to_string(count - 1) + " (set SIM_DEVICE_COUNT for more)");
  return simSuccess;
}

simContext_st* checked_context(simContext_t context, simStatus_t* status) {
  for (auto& device : g_driver->devices)
    if (device.get() == context) return device.get();
  *status = fail(simErrorInvalidHandle, "the context " + simdriver::hex(context) +
                                            " is not a context of sim's driver; get one from simDevicePrimaryCtxRetain");
  return nullptr;
}

}  // namespace

namespace simdriver {

Driver& driver() { return *g_driver; }

simStatus_t enter(bool after_shutdown_ok) {
  if (g_forked_child.load())
    return fail(simErrorForkedChild,
                "sim's driver cannot re-initialise in a forked child: the parent had started using a device, and "
                "the driver's executor thread does not exist here; start children with exec (multiprocessing's "
                "'spawn') or fork before the first device is used");
  std::call_once(g_initialise_once, initialise);
  if (g_initialise_status != simSuccess) return fail(g_initialise_status, g_initialise_message);
  if (!after_shutdown_ok && g_driver->stopping.load())
    return fail(simErrorDeinitialized, "sim's driver has shut down because the process is exiting");
  return simSuccess;
}

int current_device() { return t_current_device; }

int64_t device_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - g_driver->epoch)
      .count();
}

simContext_st* activate_device(int device, simStatus_t* status) {
  if ((*status = check_device(device)) != simSuccess) return nullptr;
  simContext_st& context = *g_driver->devices[device];
  if (context.active) return &context;
  if ((*status = reserve_device_memory(context)) != simSuccess) return nullptr;
  if (!g_driver->executor_started) {
    // The first device in use starts the executor; from then on a forked child cannot use the driver.
    start_executor();
    g_driver->executor_started = true;
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
  }
  auto stream = std::make_shared<simStream_st>();
  stream->device = device;
  stream->id = static_cast<unsigned long long>(device);
  stream->is_default = true;
  context.default_stream = stream;
  g_driver->streams.push_back(stream);
  context.active = true;
  return &context;
}

}  // namespace simdriver

extern "C" {

simStatus_t simGetDeviceCount(int* count) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (count == nullptr) return fail(simErrorInvalidValue, "simGetDeviceCount: count is NULL");
  *count = static_cast<int>(g_driver->devices.size());
  return simSuccess;
}

simStatus_t simGetDeviceProperties(simDeviceProp* prop, int device) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (prop == nullptr) return fail(simErrorInvalidValue, "simGetDeviceProperties: prop is NULL");
  if (simStatus_t status = check_device(device); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(g_driver->mutex);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "sim:%d", device);
  prop->totalMemory = g_driver->devices[device]->limit;
  prop->discreteMemory = g_driver->config.discrete ? 1 : 0;
  prop->launchBlocking = g_driver->config.launch_blocking ? 1 : 0;
  prop->streamPriorityLeast = simdriver::kPriorityLeast;
  prop->streamPriorityGreatest = simdriver::kPriorityGreatest;
  return simSuccess;
}

simStatus_t simSetDevice(int device) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = check_device(device); status != simSuccess) return status;
  t_current_device = device;
  return simSuccess;
}

simStatus_t simGetDevice(int* device) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (device == nullptr) return fail(simErrorInvalidValue, "simGetDevice: device is NULL");
  *device = t_current_device;
  return simSuccess;
}

simStatus_t simDevicePrimaryCtxRetain(simContext_t* context, int device) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (context == nullptr) return fail(simErrorInvalidValue, "simDevicePrimaryCtxRetain: context is NULL");
  std::lock_guard<std::mutex> lock(g_driver->mutex);
  simStatus_t status = simSuccess;
  simContext_st* active = simdriver::activate_device(device, &status);
  if (active == nullptr) return status;
  *context = active;
  return simSuccess;
}

simStatus_t simDevicePrimaryCtxGetState(int device, int* active) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (active == nullptr) return fail(simErrorInvalidValue, "simDevicePrimaryCtxGetState: active is NULL");
  if (simStatus_t status = check_device(device); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(g_driver->mutex);
  *active = g_driver->devices[device]->active ? 1 : 0;
  return simSuccess;
}

simStatus_t simCtxGetDevice(int* device, simContext_t context) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (device == nullptr) return fail(simErrorInvalidValue, "simCtxGetDevice: device is NULL");
  simStatus_t status = simSuccess;
  simContext_st* checked = checked_context(context, &status);
  if (checked == nullptr) return status;
  *device = checked->device;
  return simSuccess;
}

simStatus_t simCtxSetCurrent(simContext_t context) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  simStatus_t status = simSuccess;
  simContext_st* checked = checked_context(context, &status);
  if (checked == nullptr) return status;
  t_current_device = checked->device;
  return simSuccess;
}

simStatus_t simCtxGetCurrent(simContext_t* context) {
  return simDevicePrimaryCtxRetain(context, t_current_device);
}

simStatus_t simDeviceSetMemoryLimit(int device, size_t bytes) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = check_device(device); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(g_driver->mutex);
  simContext_st& context = *g_driver->devices[device];
  if (bytes == 0) return fail(simErrorInvalidValue, "simDeviceSetMemoryLimit: the limit must be positive, got 0");
  if (context.active && bytes > context.reserved)
    return fail(simErrorInvalidValue, "simDeviceSetMemoryLimit: sim:" + std::to_string(device) + " reserved " +
                                          simdriver::format_bytes(context.reserved) +
                                          " of addresses when it started; the limit can be at most that, got " +
                                          simdriver::format_bytes(bytes) +
                                          " (set SIM_MEMORY_CAPACITY for a larger range)");
  context.limit = bytes;
  return simSuccess;
}

simStatus_t simMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (free_bytes == nullptr || total_bytes == nullptr)
    return fail(simErrorInvalidValue, "simMemGetInfo: free_bytes and total_bytes must not be NULL");
  std::lock_guard<std::mutex> lock(g_driver->mutex);
  simStatus_t status = simSuccess;
  simContext_st* context = simdriver::activate_device(t_current_device, &status);
  if (context == nullptr) return status;
  *total_bytes = context->limit;
  *free_bytes = context->limit > context->used ? context->limit - context->used : 0;
  return simSuccess;
}

}  // extern "C"
