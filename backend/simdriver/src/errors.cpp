// Error codes, their names and descriptions, and each thread's last error.
#include "driver.h"

#include <cstdio>

namespace {

struct LastError {
  simStatus_t status = simSuccess;
  std::string message;
};

thread_local LastError t_last_error;

}  // namespace

namespace simdriver {

simStatus_t fail(simStatus_t status, const std::string& message) {
  t_last_error.status = status;
  t_last_error.message = message;
  return status;
}

std::string hex(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(pointer)));
  return text;
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[48];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%zu bytes", bytes);
  else
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

}  // namespace simdriver

extern "C" {

const char* simGetErrorName(simStatus_t status) {
  switch (status) {
    case simSuccess: return "simSuccess";
    case simErrorInvalidValue: return "simErrorInvalidValue";
    case simErrorOutOfMemory: return "simErrorOutOfMemory";
    case simErrorInitializationError: return "simErrorInitializationError";
    case simErrorDeinitialized: return "simErrorDeinitialized";
    case simErrorInvalidDevice: return "simErrorInvalidDevice";
    case simErrorInvalidHandle: return "simErrorInvalidHandle";
    case simErrorInvalidDevicePointer: return "simErrorInvalidDevicePointer";
    case simErrorNotReady: return "simErrorNotReady";
    case simErrorLaunchFailure: return "simErrorLaunchFailure";
    case simErrorNotPermitted: return "simErrorNotPermitted";
    case simErrorForkedChild: return "simErrorForkedChild";
  }
  return "unrecognized error code";
}

const char* simGetErrorString(simStatus_t status) {
  switch (status) {
    case simSuccess: return "no error";
    case simErrorInvalidValue: return "invalid argument";
    case simErrorOutOfMemory: return "out of device memory";
    case simErrorInitializationError: return "sim's driver could not initialise";
    case simErrorDeinitialized: return "sim's driver has shut down because the process is exiting";
    case simErrorInvalidDevice: return "invalid device ordinal";
    case simErrorInvalidHandle: return "invalid stream, event or context handle";
    case simErrorInvalidDevicePointer: return "invalid device pointer";
    case simErrorNotReady: return "device not ready";
    case simErrorLaunchFailure: return "a kernel failed on the device";
    case simErrorNotPermitted: return "operation not permitted";
    case simErrorForkedChild: return "sim's driver cannot re-initialise in a forked child";
  }
  return "unrecognized error code";
}

simStatus_t simGetLastError(void) {
  simStatus_t status = t_last_error.status;
  t_last_error.status = simSuccess;
  t_last_error.message.clear();
  return status;
}

simStatus_t simPeekAtLastError(void) { return t_last_error.status; }

const char* simGetLastErrorMessage(void) { return t_last_error.message.c_str(); }

}  // extern "C"
