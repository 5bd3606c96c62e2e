// Events: pending until the stream reaches them, waited for by the host and by other streams, and
// timed with the device's clock.
#include "harness.h"

#include <chrono>
#include <thread>

namespace {

int sleep_kernel(void* args) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(args)));
  return 0;
}

struct Shared {
  std::atomic<int> written{0};
  std::atomic<int> seen{-1};
};

int write_kernel(void* args) {
  auto* shared = static_cast<Shared*>(args);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  shared->written = 1;
  return 0;
}

int read_kernel(void* args) {
  auto* shared = static_cast<Shared*>(args);
  shared->seen = shared->written.load();
  return 0;
}

}  // namespace

TEST(an_event_is_pending_until_its_stream_reaches_it) {
  simEvent_t event = nullptr;
  CHECK_OK(simEventCreate(&event));
  CHECK_OK(simEventQuery(event));  // never recorded: nothing to wait for
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(stream, gate));
  CHECK_OK(simEventRecord(event, stream));
  CHECK_STATUS(simEventQuery(event), simErrorNotReady);
  float milliseconds = 0;
  CHECK_STATUS(simEventElapsedTime(&milliseconds, event, event), simErrorNotReady);
  gate->open = true;
  CHECK_OK(simEventSynchronize(event));
  CHECK_OK(simEventQuery(event));
  CHECK_OK(simEventElapsedTime(&milliseconds, event, event));
  CHECK(milliseconds == 0.0f);
  CHECK_OK(simEventDestroy(event));
  CHECK_STATUS(simEventQuery(event), simErrorInvalidHandle);
  CHECK_OK(simStreamDestroy(stream));
}

TEST(elapsed_time_comes_from_the_device_clock) {
  simEvent_t start = nullptr, middle = nullptr, end = nullptr;
  for (auto* event : {&start, &middle, &end}) CHECK_OK(simEventCreate(event));
  int milliseconds_asleep = 5;
  CHECK_OK(simEventRecord(start, nullptr));
  CHECK_OK(simLaunchKernel(nullptr, "sleep", sleep_kernel, &milliseconds_asleep, sizeof milliseconds_asleep, nullptr));
  CHECK_OK(simEventRecord(middle, nullptr));
  CHECK_OK(simLaunchKernel(nullptr, "sleep", sleep_kernel, &milliseconds_asleep, sizeof milliseconds_asleep, nullptr));
  CHECK_OK(simEventRecord(end, nullptr));
  CHECK_OK(simEventSynchronize(end));
  float first = 0, second = 0, whole = 0, backwards = 0;
  CHECK_OK(simEventElapsedTime(&first, start, middle));
  CHECK_OK(simEventElapsedTime(&second, middle, end));
  CHECK_OK(simEventElapsedTime(&whole, start, end));
  CHECK_OK(simEventElapsedTime(&backwards, end, start));
  // Each interval holds a 5 ms sleep of the device, and the clock only moves forward.
  CHECK(first >= 5.0f && second >= 5.0f);
  CHECK(whole > first && whole > second);
  CHECK(whole - (first + second) < 0.01f && (first + second) - whole < 0.01f);
  CHECK(backwards == -whole);
  for (auto* event : {start, middle, end}) CHECK_OK(simEventDestroy(event));
}

TEST(elapsed_time_refuses_events_it_cannot_time) {
  simEvent_t timed = nullptr, untimed = nullptr, unrecorded = nullptr;
  CHECK_OK(simEventCreate(&timed));
  CHECK_OK(simEventCreateWithFlags(&untimed, simEventDisableTiming));
  CHECK_OK(simEventCreate(&unrecorded));
  CHECK_OK(simEventRecord(timed, nullptr));
  CHECK_OK(simEventRecord(untimed, nullptr));
  CHECK_OK(simDeviceSynchronize());
  float milliseconds = 0;
  CHECK_STATUS(simEventElapsedTime(&milliseconds, timed, untimed), simErrorInvalidHandle);
  CHECK(harness::contains(simGetLastErrorMessage(), "simEventDisableTiming"));
  CHECK_STATUS(simEventElapsedTime(&milliseconds, timed, unrecorded), simErrorInvalidValue);
  CHECK(harness::contains(simGetLastErrorMessage(), "must be recorded first"));
  CHECK_STATUS(simEventCreateWithFlags(&unrecorded, 8), simErrorInvalidValue);
  for (auto* event : {timed, untimed, unrecorded}) CHECK_OK(simEventDestroy(event));
}

TEST(a_stream_waits_for_an_event_of_another_stream) {
  auto& shared = harness::kept<Shared>();
  simStream_t writer = nullptr, reader = nullptr;
  CHECK_OK(simStreamCreate(&writer));
  CHECK_OK(simStreamCreate(&reader));
  simEvent_t written = nullptr;
  CHECK_OK(simEventCreate(&written));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(writer, gate));
  CHECK_OK(simLaunchKernel(writer, "write", write_kernel, &shared, 0, nullptr));
  CHECK_OK(simEventRecord(written, writer));
  CHECK_OK(simStreamWaitEvent(reader, written, 0));
  CHECK_OK(simLaunchKernel(reader, "read", read_kernel, &shared, 0, nullptr));
  // The event may go before its record runs: the queued record and wait keep it.
  CHECK_OK(simEventDestroy(written));
  gate->open = true;
  CHECK_OK(simStreamSynchronize(reader));
  CHECK(shared.seen.load() == 1);
  CHECK_STATUS(simStreamWaitEvent(reader, written, 0), simErrorInvalidHandle);
  CHECK_OK(simStreamDestroy(writer));
  CHECK_OK(simStreamDestroy(reader));
}

TEST(a_new_record_replaces_the_previous_one) {
  simStream_t held = nullptr;
  CHECK_OK(simStreamCreate(&held));
  simEvent_t event = nullptr;
  CHECK_OK(simEventCreate(&event));
  CHECK_OK(simEventRecord(event, nullptr));
  CHECK_OK(simEventSynchronize(event));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(held, gate));
  CHECK_OK(simEventRecord(event, held));
  CHECK_STATUS(simEventQuery(event), simErrorNotReady);  // the newer record has not run
  gate->open = true;
  CHECK_OK(simEventSynchronize(event));
  CHECK_OK(simEventQuery(event));
  CHECK_OK(simEventDestroy(event));
  CHECK_OK(simStreamDestroy(held));
}
