// The process around the driver: host code touching discrete device memory, fork() after the driver
// started, and exit() with work still queued.
#include "harness.h"

#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

std::atomic<bool> g_never{false};
std::atomic<bool> g_spinning{false};

int spin_forever_kernel(void*) {
  g_spinning = true;
  while (!g_never.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

std::atomic<int> g_runs{0};

int count_kernel(void*) {
  g_runs += 1;
  return 0;
}

// Runs until the driver refuses calls because the process is exiting.
int until_exit_kernel(void*) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int count = 0;
  while (simGetDeviceCount(&count) != simErrorDeinitialized) {
    if (std::chrono::steady_clock::now() > deadline) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

void report_runs_at_exit() {
  std::printf("count kernels run: %d\n", g_runs.load());
  std::fflush(stdout);
}

std::string address_text(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(pointer)));
  return text;
}

}  // namespace

CHILD_TEST(host_code_reads_discrete_memory_here) {
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 4096));
  CHECK_OK(simMemsetAsync(device, 1, 4096, nullptr));
  CHECK_OK(simDeviceSynchronize());
  volatile char* touched = static_cast<volatile char*>(device) + 100;
  std::printf("touching %s\n", address_text(const_cast<char*>(touched)).c_str());
  std::fflush(stdout);
  char value = *touched;  // stops the process
  std::printf("read %d without being stopped\n", value);
}

CHILD_TEST(an_ordinary_segfault_still_crashes_here) {
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 64));  // the guard is installed
  void* closed = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(closed != MAP_FAILED);
  volatile char value = *static_cast<volatile char*>(closed);
  std::printf("read %d without being stopped\n", value);
}

TEST(host_code_touching_discrete_memory_stops_with_the_address) {
  auto child = harness::run_in_fresh_process("host_code_reads_discrete_memory_here", {"SIM_MEMORY=discrete"}, 60);
  CHECK_MESSAGE(child.signal == SIGABRT, child.summary());
  std::string touching = "touching ";
  size_t at = child.out.find(touching);
  CHECK_MESSAGE(at != std::string::npos, child.summary());
  std::string address = child.out.substr(at + touching.size(), child.out.find('\n', at) - at - touching.size());
  CHECK_MESSAGE(harness::contains(child.err, "sim: host code touched sim's device memory at " + address + " (sim:0)"),
                child.summary());
  CHECK(!harness::contains(child.out, "without being stopped"));
}

TEST(other_segfaults_go_to_the_previous_handler) {
  auto child = harness::run_in_fresh_process("an_ordinary_segfault_still_crashes_here", {"SIM_MEMORY=discrete"}, 60);
  CHECK_MESSAGE(child.signal == SIGSEGV, child.summary());
  CHECK(!harness::contains(child.err, "sim's device memory"));
}

TEST(a_forked_child_gets_an_error_and_the_parent_carries_on) {
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 64));
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(stream, gate));
  CHECK_OK(simLaunchKernel(stream, "count", count_kernel, nullptr, 0, nullptr));  // queued at the fork
  auto child = harness::run_in_fork(
      [] {
        void* pointer = nullptr;
        int count = 0;
        if (simMalloc(&pointer, 64) != simErrorForkedChild) return 10;
        if (!harness::contains(simGetLastErrorMessage(), "cannot re-initialise in a forked child")) return 11;
        if (simGetDeviceCount(&count) != simErrorForkedChild) return 12;
        if (simDeviceSynchronize() != simErrorForkedChild) return 13;
        return 0;  // and exit() returns, though the parent had work queued
      },
      60);
  CHECK_MESSAGE(child.exit_code == 0 && !child.timed_out, child.summary());
  int before = g_runs.load();
  gate->open = true;
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(g_runs.load() == before + 1);
  char byte = 5, back = 0;
  CHECK_OK(simMemcpy(device, &byte, 1, simMemcpyHostToDevice));
  CHECK_OK(simMemcpy(&back, device, 1, simMemcpyDeviceToHost));
  CHECK(back == 5);
  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simFree(device));
}

CHILD_TEST(forks_before_any_device_is_used_here) {
  int count = 0;
  simDeviceProp prop;
  int active = 1;
  CHECK_OK(simGetDeviceCount(&count));  // reading the configuration starts no executor
  CHECK_OK(simGetDeviceProperties(&prop, 0));
  CHECK_OK(simDevicePrimaryCtxGetState(0, &active));
  CHECK(active == 0);
  auto child = harness::run_in_fork(
      [] {
        void* device = nullptr;
        char byte = 7, back = 0;
        if (simMalloc(&device, 64) != simSuccess) return 10;
        if (simMemcpy(device, &byte, 1, simMemcpyHostToDevice) != simSuccess) return 11;
        if (simMemcpy(&back, device, 1, simMemcpyDeviceToHost) != simSuccess || back != 7) return 12;
        if (simLaunchKernel(nullptr, "count", count_kernel, nullptr, 0, nullptr) != simSuccess) return 13;
        if (simDeviceSynchronize() != simSuccess || g_runs.load() != 1) return 14;
        return 0;
      },
      60);
  CHECK_MESSAGE(child.exit_code == 0 && !child.timed_out, child.summary());
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 64));
  CHECK_OK(simFree(device));
}

TEST(a_child_forked_before_any_device_is_used_has_a_working_driver) {
  auto child = harness::run_in_fresh_process("forks_before_any_device_is_used_here", {}, 60);
  CHECK_MESSAGE(child.exit_code == 0 && !child.timed_out, child.summary());
}

CHILD_TEST(exits_with_work_queued_here) {
  // Registered before the driver's exit handler (the driver starts at its first call), so it runs after it.
  std::atexit(report_runs_at_exit);
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  CHECK_OK(simLaunchKernel(stream, "until_exit", until_exit_kernel, nullptr, 0, nullptr));
  for (int index = 0; index < 1000; ++index)
    CHECK_OK(simLaunchKernel(stream, "count", count_kernel, nullptr, 0, nullptr));
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 1 << 20));
  CHECK_OK(simMemsetAsync(device, 0, 1 << 20, stream));
  std::printf("queued\n");
}

CHILD_TEST(exits_while_a_kernel_never_ends_here) {
  CHECK_OK(simLaunchKernel(nullptr, "spin_forever", spin_forever_kernel, nullptr, 0, nullptr));
  CHECK_OK(simLaunchKernel(nullptr, "count", count_kernel, nullptr, 0, nullptr));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!g_spinning.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(g_spinning.load());  // running, not only queued, when the process exits
  std::printf("queued\n");
}

TEST(exit_with_work_queued_is_clean) {
  for (const char* memory : {"SIM_MEMORY=unified", "SIM_MEMORY=discrete"}) {
    auto child = harness::run_in_fresh_process("exits_with_work_queued_here", {memory}, 60);
    CHECK_MESSAGE(child.exit_code == 0 && !child.timed_out, child.summary());
    CHECK_MESSAGE(harness::contains(child.out, "queued\nok      exits_with_work_queued_here"), child.summary());
    // What was still queued at exit was discarded, not run.
    CHECK_MESSAGE(harness::contains(child.out, "count kernels run: 0\n"), child.summary());
    CHECK_MESSAGE(child.err.empty(), child.summary());
  }
}

TEST(exit_while_a_kernel_never_ends_is_clean) {
  auto child = harness::run_in_fresh_process("exits_while_a_kernel_never_ends_here", {}, 60);
  CHECK_MESSAGE(child.exit_code == 0 && !child.timed_out, child.summary());
  CHECK_MESSAGE(harness::contains(child.err, "sim: the kernel 'spin_forever' was still running"), child.summary());
}
