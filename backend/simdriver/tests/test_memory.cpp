// Device memory, pinned memory, and copies in every direction, synchronous and stream-ordered, with
// unified memory (this process) and discrete memory (fresh processes with SIM_MEMORY=discrete).
#include "harness.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace {

std::vector<int32_t> sequence(size_t count, int32_t first) {
  std::vector<int32_t> values(count);
  std::iota(values.begin(), values.end(), first);
  return values;
}

struct FillArgs {
  int32_t* device_values;
  size_t count;
  int32_t value;
};

// A kernel that writes device memory, as a host kernel of sim's does.
int fill_kernel(void* args) {
  auto* fill = static_cast<FillArgs*>(args);
  for (size_t index = 0; index < fill->count; ++index) fill->device_values[index] = fill->value;
  return 0;
}

struct DelayedFlag {
  std::atomic<bool> ran{false};
};

int sleep_then_flag_kernel(void* args) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  static_cast<DelayedFlag*>(args)->ran = true;
  return 0;
}

}  // namespace

// The whole round trip, host -> device -> device (same and another device) -> host, through every
// copy call; run with unified memory here and with discrete memory in a fresh process.
static void copy_round_trips(size_t count) {
  const size_t bytes = count * sizeof(int32_t);
  auto original = sequence(count, 7);
  void *first = nullptr, *second = nullptr, *other_device = nullptr;
  CHECK_OK(simMalloc(&first, bytes));
  CHECK_OK(simMalloc(&second, bytes));
  CHECK_OK(simSetDevice(1));
  CHECK_OK(simMalloc(&other_device, bytes));
  CHECK_OK(simSetDevice(0));

  // Synchronous copies.
  CHECK_OK(simMemcpy(first, original.data(), bytes, simMemcpyHostToDevice));
  CHECK_OK(simMemcpy(second, first, bytes, simMemcpyDeviceToDevice));
  CHECK_OK(simMemcpy(other_device, second, bytes, simMemcpyDeviceToDevice));
  std::vector<int32_t> back(count, 0), host_copy(count, 0);
  CHECK_OK(simMemcpy(back.data(), other_device, bytes, simMemcpyDeviceToHost));
  CHECK(back == original);
  CHECK_OK(simMemcpy(host_copy.data(), back.data(), bytes, simMemcpyHostToHost));
  CHECK(host_copy == original);
  std::vector<int32_t> inferred(count, 0);
  CHECK_OK(simMemcpy(inferred.data(), first, bytes, simMemcpyDefault));
  CHECK(inferred == original);

  // Stream-ordered copies through pinned memory, on a stream of their own.
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  void* pinned = nullptr;
  CHECK_OK(simMallocHost(&pinned, bytes));
  auto shifted = sequence(count, 1000);
  std::memcpy(pinned, shifted.data(), bytes);
  CHECK_OK(simMemcpyAsync(first, pinned, bytes, simMemcpyHostToDevice, stream));
  CHECK_OK(simMemcpyAsync(other_device, first, bytes, simMemcpyDeviceToDevice, stream));
  CHECK_OK(simMemsetAsync(first, 0, bytes, stream));
  CHECK_OK(simMemcpyAsync(pinned, other_device, bytes, simMemcpyDeviceToHost, stream));
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(std::memcmp(pinned, shifted.data(), bytes) == 0);
  CHECK_OK(simMemcpy(back.data(), first, bytes, simMemcpyDeviceToHost));
  CHECK(back == std::vector<int32_t>(count, 0));

  // A kernel reaches device memory.
  FillArgs fill{static_cast<int32_t*>(second), count, -5};
  CHECK_OK(simLaunchKernel(stream, "fill", fill_kernel, &fill, sizeof fill, nullptr));
  CHECK_OK(simMemcpyAsync(back.data(), second, bytes, simMemcpyDeviceToHost, stream));
  CHECK(back == std::vector<int32_t>(count, -5));
  // And so does one the calling thread runs.
  fill.value = 9;
  CHECK_OK(simLaunchKernelSync(stream, "fill", fill_kernel, &fill));
  CHECK_OK(simMemcpy(back.data(), second, bytes, simMemcpyDeviceToHost));
  CHECK(back == std::vector<int32_t>(count, 9));

  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simFreeHost(pinned));
  CHECK_OK(simFree(first));
  CHECK_OK(simFree(second));
  CHECK_OK(simFree(other_device));
}

// A small copy, and one large enough for the executor to split over its threads (of a size no split divides evenly).
static void copy_round_trips() {
  copy_round_trips(1000);
  copy_round_trips((size_t(4) << 20) / sizeof(int32_t) + 3);
}

TEST(copies_in_every_direction_with_unified_memory) {
  simDeviceProp prop;
  CHECK_OK(simGetDeviceProperties(&prop, 0));
  CHECK(prop.discreteMemory == 0);
  copy_round_trips();
}

CHILD_TEST(copies_in_every_direction_here) {
  simDeviceProp prop;
  CHECK_OK(simGetDeviceProperties(&prop, 0));
  CHECK(prop.discreteMemory == 1);
  copy_round_trips();
}

TEST(copies_in_every_direction_with_discrete_memory) {
  auto child = harness::run_in_fresh_process("copies_in_every_direction_here", {"SIM_MEMORY=discrete"}, 60);
  CHECK_MESSAGE(child.exit_code == 0, child.summary());
  CHECK(harness::contains(child.out, "ok      copies_in_every_direction_here"));
}

// Discrete memory opens only as far as allocations have reached: memory allocated while a kernel runs, past that
// point, must open for the kernels queued behind it before they run (else they stop as a host access would).
CHILD_TEST(memory_allocated_while_a_kernel_runs_is_open_to_the_next_kernel_here) {
  void* first = nullptr;
  CHECK_OK(simMalloc(&first, 64));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(nullptr, gate));
  CHECK(harness::wait_until_entered(gate));  // the device's memory is open for the gate's kernel
  constexpr size_t kCount = (size_t(64) << 20) / sizeof(int32_t);
  void* far = nullptr;
  CHECK_OK(simMalloc(&far, kCount * sizeof(int32_t)));
  FillArgs fill{static_cast<int32_t*>(far), kCount, 41};
  CHECK_OK(simLaunchKernel(nullptr, "fill", fill_kernel, &fill, sizeof fill, nullptr));
  gate->open = true;
  CHECK_OK(simDeviceSynchronize());
  int32_t last = 0;
  CHECK_OK(simMemcpy(&last, static_cast<int32_t*>(far) + kCount - 1, sizeof last, simMemcpyDeviceToHost));
  CHECK(last == 41);
  CHECK_OK(simFree(far));
  CHECK_OK(simFree(first));
}

TEST(memory_allocated_while_a_kernel_runs_is_open_to_the_next_kernel) {
  auto child = harness::run_in_fresh_process("memory_allocated_while_a_kernel_runs_is_open_to_the_next_kernel_here",
                                             {"SIM_MEMORY=discrete"}, 60);
  CHECK_MESSAGE(child.exit_code == 0, child.summary());
  CHECK(harness::contains(child.out, "ok      memory_allocated_while_a_kernel_runs_is_open_to_the_next_kernel_here"));
}

TEST(a_large_copy_within_one_allocation_that_overlaps_itself_moves_the_bytes_as_memmove_does) {
  constexpr size_t kCount = (size_t(2) << 20) / sizeof(int32_t);
  const size_t bytes = kCount * sizeof(int32_t);
  auto original = sequence(kCount + 1, 0);
  void* block = nullptr;
  CHECK_OK(simMalloc(&block, bytes + sizeof(int32_t)));
  CHECK_OK(simMemcpy(block, original.data(), bytes + sizeof(int32_t), simMemcpyHostToDevice));
  auto* values = static_cast<int32_t*>(block);
  CHECK_OK(simMemcpy(values + 1, values, bytes, simMemcpyDeviceToDevice));
  std::vector<int32_t> back(kCount + 1, -1);
  CHECK_OK(simMemcpy(back.data(), block, bytes + sizeof(int32_t), simMemcpyDeviceToHost));
  std::vector<int32_t> expected(original);  // every value one place on, as memmove leaves them
  std::copy(original.begin(), original.end() - 1, expected.begin() + 1);
  CHECK(back == expected);
  CHECK_OK(simFree(block));
}

TEST(allocation_and_free) {
  size_t free_before = 0, total = 0;
  CHECK_OK(simMemGetInfo(&free_before, &total));
  CHECK(total > 0 && free_before <= total);
  void* pointer = nullptr;
  CHECK_OK(simMalloc(&pointer, 1000));
  CHECK(pointer != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(pointer) % 256 == 0);
  size_t free_after = 0;
  CHECK_OK(simMemGetInfo(&free_after, &total));
  CHECK(free_before - free_after >= 1000);

  simPointerAttributes attributes;
  CHECK_OK(simPointerGetAttributes(&attributes, static_cast<char*>(pointer) + 10));
  CHECK(attributes.type == simMemoryTypeDevice);
  CHECK(attributes.device == 0);
  CHECK(attributes.base == pointer);
  CHECK(attributes.size >= 1000);
  // Unified memory: host code may use it directly.
  static_cast<char*>(pointer)[999] = 42;
  char read_back = 0;
  CHECK_OK(simMemcpy(&read_back, static_cast<char*>(pointer) + 999, 1, simMemcpyDeviceToHost));
  CHECK(read_back == 42);

  CHECK_OK(simFree(pointer));
  CHECK_OK(simMemGetInfo(&free_after, &total));
  CHECK(free_after == free_before);
  CHECK_STATUS(simPointerGetAttributes(&attributes, pointer), simErrorInvalidDevicePointer);
  CHECK_STATUS(simFree(pointer), simErrorInvalidDevicePointer);
  CHECK(harness::contains(simGetLastErrorMessage(), "not the start of a live allocation"));
  CHECK_OK(simFree(nullptr));
  void* nothing = &read_back;
  CHECK_OK(simMalloc(&nothing, 0));
  CHECK(nothing == nullptr);

  // Freed memory is used again.
  void* again = nullptr;
  CHECK_OK(simMalloc(&again, 1000));
  CHECK(again == pointer);
  CHECK_OK(simFree(again));
}

TEST(pinned_memory_is_host_memory_the_driver_knows) {
  void* pinned = nullptr;
  CHECK_OK(simMallocHost(&pinned, 100));
  simPointerAttributes attributes;
  CHECK_OK(simPointerGetAttributes(&attributes, static_cast<char*>(pinned) + 99));
  CHECK(attributes.type == simMemoryTypeHost);
  CHECK(attributes.base == pinned);
  int pageable = 0;
  CHECK_OK(simPointerGetAttributes(&attributes, &pageable));
  CHECK(attributes.type == simMemoryTypeUnregistered);
  CHECK(attributes.device == -1);
  CHECK_OK(simFreeHost(pinned));
  CHECK_STATUS(simFreeHost(pinned), simErrorInvalidValue);
}

TEST(out_of_memory_names_the_device_and_its_limit) {
  simDeviceProp prop;
  CHECK_OK(simGetDeviceProperties(&prop, 1));
  CHECK_OK(simDeviceSetMemoryLimit(1, 1 << 20));
  CHECK_OK(simSetDevice(1));
  void* pointer = nullptr;
  simStatus_t status = simMalloc(&pointer, 2 << 20);
  std::string message = simGetLastErrorMessage();
  CHECK_OK(simDeviceSetMemoryLimit(1, prop.totalMemory));
  CHECK_STATUS(status, simErrorOutOfMemory);
  CHECK(pointer == nullptr);
  CHECK_MESSAGE(harness::contains(message, "sim:1 out of memory: tried to allocate 2.00 MiB"), message);
  CHECK_MESSAGE(harness::contains(message, "limit is 1.00 MiB"), message);
  CHECK_STATUS(simDeviceSetMemoryLimit(1, size_t(1) << 62), simErrorInvalidValue);
}

TEST(bad_copies_are_refused_with_the_reason) {
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 64));
  char host[128] = {};
  CHECK_STATUS(simMemcpy(host, host + 64, 8, simMemcpyHostToDevice), simErrorInvalidDevicePointer);
  CHECK(harness::contains(simGetLastErrorMessage(), "is not sim device memory"));
  CHECK_STATUS(simMemcpy(device, host, 128, simMemcpyHostToDevice), simErrorInvalidValue);
  CHECK(harness::contains(simGetLastErrorMessage(), "run past the end of its allocation"));
  CHECK_STATUS(simMemcpy(device, host, 8, simMemcpyHostToHost), simErrorInvalidValue);
  CHECK(harness::contains(simGetLastErrorMessage(), "but the copy kind says host memory"));
  CHECK_STATUS(simMemcpy(device, host, 8, static_cast<simMemcpyKind>(9)), simErrorInvalidValue);
  CHECK_STATUS(simMemsetAsync(host, 0, 8, nullptr), simErrorInvalidDevicePointer);
  CHECK_OK(simFree(device));
}

TEST(an_async_copy_from_pageable_memory_is_staged_and_from_pinned_memory_is_not) {
  constexpr size_t kCount = 256;
  const size_t bytes = kCount * sizeof(int32_t);
  void *from_pageable = nullptr, *from_pinned = nullptr, *pinned = nullptr;
  CHECK_OK(simMalloc(&from_pageable, bytes));
  CHECK_OK(simMalloc(&from_pinned, bytes));
  CHECK_OK(simMallocHost(&pinned, bytes));
  auto& pageable = harness::kept<std::vector<int32_t>>();
  pageable = sequence(kCount, 1);
  std::memcpy(pinned, pageable.data(), bytes);
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(stream, gate));
  // Both calls return while the gate holds the stream.
  CHECK_OK(simMemcpyAsync(from_pageable, pageable.data(), bytes, simMemcpyHostToDevice, stream));
  CHECK_OK(simMemcpyAsync(from_pinned, pinned, bytes, simMemcpyHostToDevice, stream));
  CHECK(simStreamQuery(stream) == simErrorNotReady);
  std::fill(pageable.begin(), pageable.end(), -1);
  std::memset(pinned, 0, bytes);
  gate->open = true;
  CHECK_OK(simStreamSynchronize(stream));
  std::vector<int32_t> back(kCount);
  CHECK_OK(simMemcpy(back.data(), from_pageable, bytes, simMemcpyDeviceToHost));
  CHECK(back == sequence(kCount, 1));  // staged when the call was made
  CHECK_OK(simMemcpy(back.data(), from_pinned, bytes, simMemcpyDeviceToHost));
  CHECK(back == std::vector<int32_t>(kCount, 0));  // read when the stream reached the copy
  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simFreeHost(pinned));
  CHECK_OK(simFree(from_pageable));
  CHECK_OK(simFree(from_pinned));
}

TEST(an_async_copy_into_pageable_memory_waits_and_into_pinned_memory_does_not) {
  constexpr size_t kCount = 64;
  const size_t bytes = kCount * sizeof(int32_t);
  void *device = nullptr, *pinned = nullptr;
  CHECK_OK(simMalloc(&device, bytes));
  CHECK_OK(simMallocHost(&pinned, bytes));
  std::memset(pinned, 0, bytes);
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(stream, gate));
  auto& fill = harness::kept<FillArgs>();
  fill = FillArgs{static_cast<int32_t*>(device), kCount, 9};
  CHECK_OK(simLaunchKernel(stream, "fill", fill_kernel, &fill, sizeof fill, nullptr));
  CHECK_OK(simMemcpyAsync(pinned, device, bytes, simMemcpyDeviceToHost, stream));
  CHECK(gate->left.load() == false);  // the call did not wait for the gate
  CHECK(static_cast<int32_t*>(pinned)[0] == 0);
  gate->open = true;
  std::vector<int32_t> pageable(kCount, 0);
  fill.value = 11;  // the launch copied its arguments: the kernel above still writes 9
  CHECK_OK(simLaunchKernel(stream, "fill", fill_kernel, &fill, sizeof fill, nullptr));
  CHECK_OK(simMemcpyAsync(pageable.data(), device, bytes, simMemcpyDeviceToHost, stream));
  CHECK(pageable == std::vector<int32_t>(kCount, 11));  // the call returned once the copy had run
  CHECK(static_cast<int32_t*>(pinned)[kCount - 1] == 9);
  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simFreeHost(pinned));
  CHECK_OK(simFree(device));
}

TEST(free_waits_for_the_work_queued_before_it) {
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 64));
  auto& flag = harness::kept<DelayedFlag>();
  CHECK_OK(simLaunchKernel(nullptr, "sleep_then_flag", sleep_then_flag_kernel, &flag, 0, nullptr));
  CHECK_OK(simFree(device));
  CHECK(flag.ran.load());
}

TEST(free_async_frees_when_the_stream_gets_there) {
  void* device = nullptr;
  CHECK_OK(simMalloc(&device, 64));
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(stream, gate));
  CHECK_OK(simFreeAsync(device, stream));
  simPointerAttributes attributes;
  CHECK_OK(simPointerGetAttributes(&attributes, device));
  CHECK(attributes.type == simMemoryTypeDevice);
  gate->open = true;
  CHECK_OK(simStreamSynchronize(stream));
  CHECK_STATUS(simPointerGetAttributes(&attributes, device), simErrorInvalidDevicePointer);
  CHECK_OK(simStreamDestroy(stream));
}
