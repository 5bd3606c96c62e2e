// Errors: codes and their strings, each thread's last error, a kernel's failure surfacing at the
// next synchronising call with the kernel's name, and a configuration the driver cannot use.
#include "harness.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace {

int failing_kernel(void*) {
  simKernelSetErrorMessage("index 7 is out of bounds for dimension 0 with size 3");
  return 3;
}

int throwing_kernel(void*) { throw std::runtime_error("a vector too long"); }

struct Counter {
  std::atomic<int> runs{0};
};

int count_kernel(void* args) {
  static_cast<Counter*>(args)->runs += 1;
  return 0;
}

struct Release {
  std::atomic<int> calls{0};
};

// The kernel's arguments hold a pointer the release callback is given back.
void release_args(void* args) { (*static_cast<Release**>(args))->calls += 1; }

int succeed_kernel(void*) { return 0; }

}  // namespace

TEST(every_code_has_a_name_and_a_description) {
  CHECK(std::strcmp(simGetErrorName(simSuccess), "simSuccess") == 0);
  CHECK(std::strcmp(simGetErrorName(simErrorLaunchFailure), "simErrorLaunchFailure") == 0);
  CHECK(std::strcmp(simGetErrorName(static_cast<simStatus_t>(1000)), "unrecognized error code") == 0);
  for (int code = simErrorInvalidValue; code <= simErrorForkedChild; ++code) {
    auto status = static_cast<simStatus_t>(code);
    CHECK(std::strcmp(simGetErrorName(status), "unrecognized error code") != 0);
    CHECK(std::strcmp(simGetErrorString(status), "unrecognized error code") != 0);
    CHECK(std::strcmp(simGetErrorString(status), simGetErrorString(simSuccess)) != 0);
  }
  CHECK(harness::contains(simGetErrorString(simErrorForkedChild), "forked child"));
}

TEST(a_failed_call_is_the_threads_last_error_until_read) {
  CHECK_STATUS(simSetDevice(99), simErrorInvalidDevice);
  CHECK(simPeekAtLastError() == simErrorInvalidDevice);
  CHECK(harness::contains(simGetLastErrorMessage(), "sim:99 does not exist"));
  CHECK(simGetLastError() == simErrorInvalidDevice);
  CHECK(simPeekAtLastError() == simSuccess);
  CHECK(std::strcmp(simGetLastErrorMessage(), "") == 0);
  simStatus_t other_thread = simErrorInvalidValue;
  std::thread([&] { other_thread = simPeekAtLastError(); }).join();
  CHECK_STATUS(simSetDevice(-1), simErrorInvalidDevice);
  CHECK(other_thread == simSuccess);
}

TEST(a_failing_kernel_surfaces_at_the_next_synchronize_naming_it) {
  auto& counter = harness::kept<Counter>();
  simStream_t stream = nullptr, other = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  CHECK_OK(simStreamCreate(&other));
  CHECK_OK(simLaunchKernel(stream, "sim::index.Tensor", failing_kernel, nullptr, 0, nullptr));
  CHECK_OK(simLaunchKernel(stream, "count", count_kernel, &counter, 0, nullptr));
  CHECK_OK(simLaunchKernel(other, "count", count_kernel, &counter, 0, nullptr));
  // The error belongs to the device: a synchronize of its other stream reports it.
  CHECK_STATUS(simStreamSynchronize(other), simErrorLaunchFailure);
  std::string message = simGetLastErrorMessage();
  CHECK_MESSAGE(harness::contains(message, "the kernel 'sim::index.Tensor' failed on sim:0 with code 3: index 7 is "
                                           "out of bounds for dimension 0 with size 3"),
                message);
  CHECK_MESSAGE(harness::contains(message, "SIM_LAUNCH_BLOCKING=1"), message);
  CHECK(counter.runs.load() == 0);  // the device skipped what was queued after the failure
  CHECK_OK(simStreamSynchronize(stream));  // reported once
  CHECK_OK(simLaunchKernel(stream, "count", count_kernel, &counter, 0, nullptr));
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(counter.runs.load() == 1);  // and then the device works again
  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simStreamDestroy(other));
}

TEST(a_kernels_name_is_the_drivers_copy_so_the_caller_may_reuse_its_buffer) {
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  char name[32] = "first_name_of_the_buffer";
  CHECK_OK(simLaunchKernel(stream, name, succeed_kernel, nullptr, 0, nullptr));
  std::strcpy(name, "second_name_in_the_buffer");  // the same buffer, another kernel's name
  CHECK_OK(simLaunchKernel(stream, name, failing_kernel, nullptr, 0, nullptr));
  std::strcpy(name, "overwritten_after_launch");
  CHECK_STATUS(simStreamSynchronize(stream), simErrorLaunchFailure);
  std::string message = simGetLastErrorMessage();
  CHECK_MESSAGE(harness::contains(message, "the kernel 'second_name_in_the_buffer' failed"), message);
  CHECK_OK(simStreamDestroy(stream));
}

TEST(a_synchronous_launch_returns_its_own_kernels_failure_at_once) {
  CHECK_STATUS(simLaunchKernelSync(nullptr, "sim::index.Tensor", failing_kernel, nullptr), simErrorLaunchFailure);
  std::string message = simGetLastErrorMessage();
  CHECK_MESSAGE(harness::contains(message, "the kernel 'sim::index.Tensor' failed on sim:0 with code 3: index 7 is "
                                           "out of bounds for dimension 0 with size 3"),
                message);
  CHECK_MESSAGE(!harness::contains(message, "SIM_LAUNCH_BLOCKING"), message);  // not asynchronous: nothing to find
  CHECK_OK(simDeviceSynchronize());  // nothing left pending
}

TEST(a_synchronous_launch_after_a_failed_kernel_reports_that_failure_and_does_not_run) {
  auto& counter = harness::kept<Counter>();
  CHECK_OK(simLaunchKernel(nullptr, "sim::index.Tensor", failing_kernel, nullptr, 0, nullptr));
  CHECK_STATUS(simLaunchKernelSync(nullptr, "count", count_kernel, &counter), simErrorLaunchFailure);
  CHECK(harness::contains(simGetLastErrorMessage(), "the kernel 'sim::index.Tensor' failed"));
  CHECK(counter.runs.load() == 0);
  CHECK_OK(simLaunchKernelSync(nullptr, "count", count_kernel, &counter));
  CHECK(counter.runs.load() == 1);
}

TEST(every_synchronising_call_reports_a_kernels_failure) {
  simEvent_t event = nullptr;
  CHECK_OK(simEventCreate(&event));
  char host = 0;
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 1));

  CHECK_OK(simLaunchKernel(nullptr, "fails_before_device_synchronize", failing_kernel, nullptr, 0, nullptr));
  CHECK_STATUS(simDeviceSynchronize(), simErrorLaunchFailure);
  CHECK(harness::contains(simGetLastErrorMessage(), "'fails_before_device_synchronize'"));

  CHECK_OK(simLaunchKernel(nullptr, "fails_before_event", failing_kernel, nullptr, 0, nullptr));
  CHECK_OK(simEventRecord(event, nullptr));
  CHECK_STATUS(simEventSynchronize(event), simErrorLaunchFailure);
  CHECK(harness::contains(simGetLastErrorMessage(), "'fails_before_event'"));

  CHECK_OK(simLaunchKernel(nullptr, "fails_before_copy", failing_kernel, nullptr, 0, nullptr));
  CHECK_STATUS(simMemcpy(&host, device, 1, simMemcpyDeviceToHost), simErrorLaunchFailure);
  CHECK(harness::contains(simGetLastErrorMessage(), "'fails_before_copy'"));

  CHECK_OK(simLaunchKernel(nullptr, "throws", throwing_kernel, nullptr, 0, nullptr));
  CHECK_STATUS(simDeviceSynchronize(), simErrorLaunchFailure);
  CHECK(harness::contains(simGetLastErrorMessage(), "'throws' failed on sim:0 with code -1: it threw a C++ exception: "
                                                    "a vector too long"));
  CHECK_OK(simDeviceSynchronize());
  CHECK_OK(simEventDestroy(event));
  CHECK_OK(simFree(device));
}

TEST(a_launch_releases_its_arguments_whether_the_kernel_ran_or_not) {
  auto& release = harness::kept<Release>();
  Release* pointer = &release;
  CHECK_OK(simLaunchKernel(nullptr, "succeeds", succeed_kernel, &pointer, sizeof pointer, release_args));
  CHECK_OK(simLaunchKernel(nullptr, "fails", failing_kernel, nullptr, 0, nullptr));
  CHECK_OK(simLaunchKernel(nullptr, "skipped", succeed_kernel, &pointer, sizeof pointer, release_args));
  CHECK_STATUS(simDeviceSynchronize(), simErrorLaunchFailure);
  CHECK(release.calls.load() == 2);
  CHECK_STATUS(simLaunchKernel(nullptr, "", succeed_kernel, nullptr, 0, nullptr), simErrorInvalidValue);
  CHECK(harness::contains(simGetLastErrorMessage(), "needs a name"));
  CHECK_STATUS(simLaunchKernel(nullptr, "null", nullptr, nullptr, 0, nullptr), simErrorInvalidValue);
  CHECK_STATUS(simLaunchKernel(reinterpret_cast<simStream_t>(&release), "stale", succeed_kernel, nullptr, 0, nullptr),
               simErrorInvalidHandle);
}

CHILD_TEST(a_bad_configuration_is_named_here) {
  int count = 0;
  CHECK_STATUS(simGetDeviceCount(&count), simErrorInitializationError);
  std::string message = simGetLastErrorMessage();
  CHECK_MESSAGE(harness::contains(message, "SIM_MEMORY must be 'unified' or 'discrete', got 'shared'"), message);
  void* pointer = nullptr;
  CHECK_STATUS(simMalloc(&pointer, 8), simErrorInitializationError);  // every call, not only the first
}

CHILD_TEST(a_bad_device_count_is_named_here) {
  int count = 0;
  CHECK_STATUS(simGetDeviceCount(&count), simErrorInitializationError);
  std::string message = simGetLastErrorMessage();
  CHECK_MESSAGE(harness::contains(message, "SIM_DEVICE_COUNT must be a whole number from 1 to 64, got '0'"), message);
}

CHILD_TEST(the_environment_configures_the_devices_here) {
  int count = 0;
  CHECK_OK(simGetDeviceCount(&count));
  CHECK(count == 3);
  simDeviceProp prop;
  CHECK_OK(simGetDeviceProperties(&prop, 2));
  CHECK(prop.totalMemory == size_t(512) << 20);
  CHECK(std::strcmp(prop.name, "sim:2") == 0);
}

TEST(the_driver_reads_its_environment) {
  auto memory = harness::run_in_fresh_process("a_bad_configuration_is_named_here", {"SIM_MEMORY=shared"}, 60);
  CHECK_MESSAGE(memory.exit_code == 0, memory.summary());
  auto count = harness::run_in_fresh_process("a_bad_device_count_is_named_here", {"SIM_DEVICE_COUNT=0"}, 60);
  CHECK_MESSAGE(count.exit_code == 0, count.summary());
  auto good = harness::run_in_fresh_process("the_environment_configures_the_devices_here",
                                            {"SIM_DEVICE_COUNT=3", "SIM_MEMORY_CAPACITY=512M"}, 60);
  CHECK_MESSAGE(good.exit_code == 0, good.summary());
}
