// Activity: the copies and memsets the device ran, reported to a profiler as a real driver's activity interface
// reports them. A copy queued while reports are on carries a note (the callback, and the record filled in at
// submission); the thread that runs it notes the device clock around it and hands the record over.
#include "driver.h"

namespace {

using simdriver::driver;

thread_local unsigned long long t_correlation = 0;

}  // namespace

namespace simdriver {

void note_activity(Task& task, simActivityKind kind, simMemcpyKind copy_kind, bool source_pinned,
                   bool destination_pinned, const simStream_st& stream) {
  Driver& state = driver();
  if (state.activity_callback == nullptr) return;
  auto note = std::make_unique<ActivityNote>();
  note->callback = state.activity_callback;
  note->user_data = state.activity_user_data;
  note->record.kind = kind;
  note->record.copy_kind = copy_kind;
  note->record.source_pinned = source_pinned;
  note->record.destination_pinned = destination_pinned;
  note->record.bytes = task.bytes;
  note->record.device = stream.device;
  note->record.stream_id = stream.id;
  note->record.correlation = t_correlation;
  task.activity = std::move(note);
}

void report_activity(Task& task, int64_t start_ns, int64_t end_ns) {
  if (!task.activity) return;
  task.activity->record.start_ns = start_ns;
  task.activity->record.end_ns = end_ns;
  task.activity->callback(&task.activity->record, task.activity->user_data);
}

}  // namespace simdriver

extern "C" {

simStatus_t simActivityEnable(simActivityCallback_t callback, void* user_data) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  driver().activity_callback = callback;
  driver().activity_user_data = callback == nullptr ? nullptr : user_data;
  return simSuccess;
}

simStatus_t simActivitySetCorrelation(unsigned long long correlation) {
  t_correlation = correlation;
  return simSuccess;
}

simStatus_t simActivityGetTimestamp(long long* nanoseconds) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (nanoseconds == nullptr)
    return simdriver::fail(simErrorInvalidValue, "simActivityGetTimestamp: nanoseconds is NULL");
  *nanoseconds = simdriver::device_clock_ns();
  return simSuccess;
}

}  // extern "C"
