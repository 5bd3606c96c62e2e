// Events: markers queued on a stream that complete, with the device clock's time, when the
// executor reaches them; queried, waited for by the host, waited for by other streams, and timed.
#include "driver.h"

namespace {

using simdriver::driver;
using simdriver::fail;

std::shared_ptr<simEvent_st> live_event(simEvent_t event, const char* call, simStatus_t* status) {
  auto found = driver().event_handles.find(event);
  if (found != driver().event_handles.end()) return found->second;
  *status = fail(simErrorInvalidHandle, std::string(call) + ": the event " + simdriver::hex(event) +
                                            " is not a live event of sim's driver (destroyed already, or never "
                                            "created by simEventCreate)");
  return nullptr;
}

bool has_completed(const simEvent_st& event) { return event.completed_generation >= event.recorded_generation; }

}  // namespace

extern "C" {

simStatus_t simEventCreate(simEvent_t* event) { return simEventCreateWithFlags(event, simEventDefault); }

simStatus_t simEventCreateWithFlags(simEvent_t* event, unsigned int flags) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (event == nullptr) return fail(simErrorInvalidValue, "simEventCreate: event is NULL");
  if ((flags & ~static_cast<unsigned int>(simEventDisableTiming)) != 0)
    return fail(simErrorInvalidValue, "simEventCreateWithFlags: unknown flags " + std::to_string(flags) +
                                          "; pass simEventDefault or simEventDisableTiming");
  std::lock_guard<std::mutex> lock(driver().mutex);
  auto created = std::make_shared<simEvent_st>();
  created->timing = (flags & simEventDisableTiming) == 0;
  driver().event_handles[created.get()] = created;
  *event = created.get();
  return simSuccess;
}

simStatus_t simEventDestroy(simEvent_t event) {
  if (simStatus_t status = simdriver::enter(true); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  if (live_event(event, "simEventDestroy", &status) == nullptr) return status;
  driver().event_handles.erase(event);  // records and waits already queued hold it until they run
  return simSuccess;
}

simStatus_t simEventRecord(simEvent_t event, simStream_t stream) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  auto recorded = live_event(event, "simEventRecord", &status);
  if (recorded == nullptr) return status;
  auto target = simdriver::resolve_stream(stream, &status);
  if (target == nullptr) return status;
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Record;
  task.name = "event record";
  task.event = recorded;
  task.generation = ++recorded->recorded_generation;
  recorded->device = target->device;
  simdriver::submit(target, std::move(task));
  return simSuccess;
}

simStatus_t simEventQuery(simEvent_t event) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  auto queried = live_event(event, "simEventQuery", &status);
  if (queried == nullptr) return status;
  return has_completed(*queried) ? simSuccess : simErrorNotReady;
}

simStatus_t simEventSynchronize(simEvent_t event) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = simdriver::refuse_on_executor("simEventSynchronize"); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  auto waited = live_event(event, "simEventSynchronize", &status);
  if (waited == nullptr) return status;
  uint64_t generation = waited->recorded_generation;
  simdriver::HostWaiter waiting(driver());
  driver().done.wait(lock, [&] { return waited->completed_generation >= generation || driver().executor_stopped; });
  return waited->device < 0 ? simSuccess : simdriver::take_pending_error(waited->device);
}

simStatus_t simEventElapsedTime(float* milliseconds, simEvent_t start, simEvent_t end) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (milliseconds == nullptr) return fail(simErrorInvalidValue, "simEventElapsedTime: milliseconds is NULL");
  std::lock_guard<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  auto first = live_event(start, "simEventElapsedTime", &status);
  if (first == nullptr) return status;
  auto last = live_event(end, "simEventElapsedTime", &status);
  if (last == nullptr) return status;
  if (!first->timing || !last->timing)
    return fail(simErrorInvalidHandle, "simEventElapsedTime: both events must be created with timing; one was created "
                                       "with simEventDisableTiming");
  if (first->recorded_generation == 0 || last->recorded_generation == 0)
    return fail(simErrorInvalidValue, "simEventElapsedTime: both events must be recorded first; call simEventRecord "
                                      "on each");
  if (!has_completed(*first) || !has_completed(*last))
    return fail(simErrorNotReady, "simEventElapsedTime: an event has not completed yet; call simEventSynchronize "
                                  "on the end event first");
  *milliseconds = static_cast<float>(static_cast<double>(last->clock_ns - first->clock_ns) / 1e6);
  return simSuccess;
}

}  // extern "C"
