// Streams and the executor: the one thread that runs the work of every stream of every device.
//
// Each stream is a queue run in order. The executor repeatedly takes the first task of a ready
// stream (highest priority first, then the stream served longest ago) and runs it with the driver's
// mutex released; a stream whose first task waits for an event that has not completed is not
// ready, so it holds back no other stream. Callers that wait (synchronize, synchronous copies)
// sleep on a condition variable the executor signals once the task a caller waits for, or an
// event record, has finished.
//
// The executor ends once every queue has been empty for kRetireAfter, and the next submission starts
// another. Kernels that parallelise with OpenMP give the executor a thread team of its own, and a
// team lives as long as its thread: while two teams live on a machine with few cores, libgomp stops
// letting every team's workers spin between parallel regions, so the host's own parallel work would
// keep paying for a device that has gone idle.
#include "driver.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace {

using simdriver::Driver;
using simdriver::driver;
using simdriver::fail;
using simdriver::Task;

constexpr auto kExitGrace = std::chrono::seconds(3);
// Before the executor sleeps, and before a caller sleeps on unfinished work, each watches for a moment for
// what it waits for: a launch and a wait that find each other in time cost no wake-up of a sleeping thread.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kRetireAfter = std::chrono::milliseconds(20);
constexpr int kAcquireAttempts = 100;

// Releases `lock` and waits up to kSpin for `counter` to move from `seen`; returns with `lock` held.
void spin_on(std::unique_lock<std::mutex>& lock, const std::atomic<uint64_t>& counter, uint64_t seen) {
  lock.unlock();
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (counter.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  simdriver::acquire(lock);
}
thread_local bool t_on_executor = false;

// Completes the waits at the head of the queues whose event has completed, forgets destroyed
// streams that have drained, and returns the stream whose first task should run next.
std::shared_ptr<simStream_st> next_ready_stream(Driver& state, bool* progressed) {
  std::shared_ptr<simStream_st> best;
  for (size_t index = 0; index < state.streams.size();) {
    auto& stream = state.streams[index];
    while (!stream->queue.empty() && stream->queue.front().kind == Task::Kind::Wait) {
      const Task& wait = stream->queue.front();
      if (wait.event->completed_generation < wait.generation) break;
      stream->queue.pop_front();
      stream->completed += 1;
      state.completions.fetch_add(1, std::memory_order_release);
      *progressed = true;
    }
    if (stream->destroyed && stream->queue.empty()) {
      state.streams.erase(state.streams.begin() + static_cast<std::ptrdiff_t>(index));
      continue;
    }
    ++index;
    if (stream->queue.empty() || stream->queue.front().kind == Task::Kind::Wait ||
        stream->queue.front().kind == Task::Kind::OnCaller)
      continue;
    if (best == nullptr || stream->priority < best->priority ||
        (stream->priority == best->priority && stream->last_served < best->last_served))
      best = stream;
  }
  return best;
}

std::string failure_message(const Task& task, int device, int code, const std::string& detail,
                            bool asynchronous = true) {
  std::string message = "the kernel '" + std::string(task.name) + "' failed on sim:" + std::to_string(device) +
                        " with code " + std::to_string(code);
  if (!detail.empty()) message += ": " + detail;
  if (asynchronous && !driver().config.launch_blocking)
    message += " (kernels run asynchronously, so this failure surfaces at the next synchronising call, not at "
               "the launch; set SIM_LAUNCH_BLOCKING=1 to have each launch report its own kernel's failure)";
  return message;
}

// Copies as the device's other work runs: large copies between disjoint blocks are split over the executor's
// OpenMP team, the one its kernels' parallel regions use, so a copy is as parallel as the host's copy_ and
// starts no team of its own.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  auto* to = static_cast<unsigned char*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  const bool overlap = to < from + bytes && from < to + bytes;
  if (bytes < simdriver::kParallelCopyBytes || overlap || omp_get_max_threads() < 2) {
    std::memmove(dst, src, bytes);
    return;
  }
#pragma omp parallel
  {
    // a part per thread of the team, in 64-byte lines; no num_threads clause, which makes libgomp rebuild its pool
    const size_t parts = static_cast<size_t>(omp_get_num_threads());
    const size_t chunk = (bytes / parts + 63) / 64 * 64;
    const size_t begin = std::min(bytes, static_cast<size_t>(omp_get_thread_num()) * chunk);
    const size_t end = std::min(bytes, begin + chunk);
    if (end > begin) std::memcpy(to + begin, from + begin, end - begin);
  }
}

// Runs a copy, memset or kernel with the mutex released; returns the kernel's code.
int run_outside_lock(Task& task, std::string* detail) {
  simdriver::ThreadMemoryAccess access;
  if (task.kind != Task::Kind::Copy && task.kind != Task::Kind::Memset) return simdriver::run_kernel(task, detail);
  const int64_t start_ns = task.activity ? simdriver::device_clock_ns() : 0;
  if (task.kind == Task::Kind::Copy) {
    copy_bytes(task.dst, task.src, task.bytes);
  } else {
    std::memset(task.dst, task.value, task.bytes);
  }
  if (task.activity) simdriver::report_activity(task, start_ns, simdriver::device_clock_ns());
  return 0;
}

bool awaited_task_finished(const simStream_st& stream) {
  return std::any_of(stream.awaited.begin(), stream.awaited.end(),
                     [&](uint64_t sequence) { return stream.completed >= sequence; });
}

bool every_queue_empty(const Driver& state) {
  return std::all_of(state.streams.begin(), state.streams.end(),
                     [](const std::shared_ptr<simStream_st>& stream) { return stream->queue.empty(); });
}

void executor_main(std::thread previous) {
  if (previous.joinable()) previous.join();  // the executor that retired before this one started
  t_on_executor = true;
  Driver& state = driver();
  std::unique_lock<std::mutex> lock(state.mutex);
  bool spun = false;
  while (!state.stopping.load()) {
    bool progressed = false;
    auto stream = next_ready_stream(state, &progressed);
    if (progressed) state.done.notify_all();
    if (stream == nullptr) {
      if (!spun) {
        spun = true;
        spin_on(lock, state.submissions, state.submissions.load(std::memory_order_acquire));
        continue;
      }
      spun = false;
      simdriver::close_device_memory();
      if (state.work.wait_for(lock, kRetireAfter) == std::cv_status::timeout && !state.stopping.load() &&
          every_queue_empty(state)) {
        next_ready_stream(state, &progressed);  // with every queue empty: only forgets destroyed streams
        state.executor_running = false;
        return;
      }
      continue;
    }
    spun = false;
    Task task = std::move(stream->queue.front());
    stream->queue.pop_front();
    stream->last_served = ++state.serve_counter;
    simContext_st& device = *state.devices[stream->device];
    if (task.kind == Task::Kind::Record) {
      if (task.generation > task.event->completed_generation) {
        task.event->completed_generation = task.generation;
        task.event->clock_ns = simdriver::device_clock_ns();
      }
    } else if (task.kind == Task::Kind::Free) {
      simdriver::release_allocation_at(task.dst);
    } else {
      // After a failure the device runs nothing until the error has been reported.
      bool skip = device.pending_error != simSuccess;
      simdriver::open_device_memory();
      state.running_task = task.name;
      lock.unlock();
      std::string detail;
      int code = skip ? 0 : run_outside_lock(task, &detail);
      simdriver::release_task(task);
      simdriver::acquire(lock);
      state.running_task = nullptr;
      if (code != 0 && device.pending_error == simSuccess) {
        device.pending_error = simErrorLaunchFailure;
        device.pending_message = failure_message(task, stream->device, code, detail);
      }
    }
    stream->completed += 1;
    state.completions.fetch_add(1, std::memory_order_release);
    // Discrete memory closes before a waiting caller wakes, so that its next host access is caught. With no
    // caller waiting it stays open through the idle spin: a launch that comes within it costs no mprotect.
    if (state.host_waiters > 0 && next_ready_stream(state, &progressed) == nullptr) simdriver::close_device_memory();
    // A host thread asleep behind a long queue wakes once, not at each task's end, when it would take a core from
    // the work still running.
    if (task.kind == Task::Kind::Record || progressed || awaited_task_finished(*stream)) state.done.notify_all();
  }
  simdriver::close_device_memory();
  state.executor_stopped = true;
  state.done.notify_all();
}

simStatus_t checked_stream(simStream_t stream, std::shared_ptr<simStream_st>* out) {
  simStatus_t status = simSuccess;
  *out = simdriver::resolve_stream(stream, &status);
  return status;
}

}  // namespace

namespace simdriver {

HostWaiter::~HostWaiter() {
  state.host_waiters -= 1;
  if (state.running_task == nullptr) close_device_memory();
}

void acquire(std::unique_lock<std::mutex>& lock) {
  for (int attempt = 0; attempt < kAcquireAttempts; ++attempt) {
    if (lock.try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
  lock.lock();
}

bool on_executor_thread() { return t_on_executor; }

simStatus_t refuse_on_executor(const char* call) {
  if (!t_on_executor) return simSuccess;
  return fail(simErrorNotPermitted, std::string(call) +
                                        " cannot be called from a kernel: kernels run on the driver's executor, "
                                        "which would wait for itself; call it from host code instead");
}

std::shared_ptr<simStream_st> resolve_stream(simStream_t stream, simStatus_t* status) {
  if (stream == nullptr) {
    simContext_st* device = activate_device(current_device(), status);
    return device == nullptr ? nullptr : device->default_stream;
  }
  auto found = driver().stream_handles.find(stream);
  if (found == driver().stream_handles.end()) {
    *status = fail(simErrorInvalidHandle, "the stream " + hex(stream) +
                                              " is not a live stream of sim's driver (destroyed already, or never "
                                              "created by simStreamCreate)");
    return nullptr;
  }
  return found->second;
}

uint64_t submit(const std::shared_ptr<simStream_st>& stream, Task task) {
  Driver& state = driver();
  stream->queue.push_back(std::move(task));
  stream->submitted += 1;
  state.submissions.fetch_add(1, std::memory_order_release);
  if (!state.executor_running && !state.stopping.load()) start_executor();
  state.work.notify_one();
  return stream->submitted;
}

void wait_for_task(std::unique_lock<std::mutex>& lock, const std::shared_ptr<simStream_st>& stream, uint64_t sequence) {
  Driver& state = driver();
  auto finished = [&] { return stream->completed >= sequence || state.executor_stopped; };
  simdriver::HostWaiter waiting(state);
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (!t_on_executor && !finished() && std::chrono::steady_clock::now() < deadline)
    spin_on(lock, state.completions, state.completions.load(std::memory_order_acquire));
  if (finished()) return;
  stream->awaited.push_back(sequence);
  state.done.wait(lock, finished);
  stream->awaited.erase(std::find(stream->awaited.begin(), stream->awaited.end(), sequence));
}

void wait_for_device(std::unique_lock<std::mutex>& lock, int device) {
  std::vector<std::pair<std::shared_ptr<simStream_st>, uint64_t>> targets;
  for (auto& stream : driver().streams)
    if (stream->device == device) targets.emplace_back(stream, stream->submitted);
  for (auto& [stream, sequence] : targets) wait_for_task(lock, stream, sequence);
}

simStatus_t take_pending_error(int device) {
  simContext_st& context = *driver().devices[device];
  if (context.pending_error == simSuccess) return simSuccess;
  simStatus_t status = context.pending_error;
  std::string message = std::move(context.pending_message);
  context.pending_error = simSuccess;
  context.pending_message.clear();
  return fail(status, message);
}

simStatus_t finish_submission(std::unique_lock<std::mutex>& lock, const std::shared_ptr<simStream_st>& stream,
                              uint64_t sequence) {
  if (!driver().config.launch_blocking || t_on_executor) return simSuccess;
  wait_for_task(lock, stream, sequence);
  return take_pending_error(stream->device);
}

simStatus_t run_on_caller(std::unique_lock<std::mutex>& lock, const std::shared_ptr<simStream_st>& stream, Task task) {
  Driver& state = driver();
  // A place in the stream's queue that the executor passes over: work queued after it waits for it.
  Task place;
  place.kind = Task::Kind::OnCaller;
  place.name = task.name;
  stream->queue.push_back(std::move(place));
  const uint64_t sequence = ++stream->submitted;
  if (stream->completed + 1 < sequence) wait_for_task(lock, stream, sequence - 1);
  if (state.stopping.load())  // the process began to exit while this call waited: its queues are gone
    return fail(simErrorDeinitialized, "sim's driver has shut down because the process is exiting");
  simContext_st& device = *state.devices[stream->device];
  int code = 0;
  std::string detail;
  const bool run = device.pending_error == simSuccess;
  if (run) {
    state.tasks_on_callers += 1;
    open_device_memory();
    lock.unlock();
    t_on_executor = true;  // a wait inside a kernel would wait for the kernel itself
    code = run_outside_lock(task, &detail);
    t_on_executor = false;
    lock.lock();
    state.tasks_on_callers -= 1;
  }
  if (state.stopping.load())  // the process began to exit while the kernel ran: its queues are gone
    return run ? simSuccess : take_pending_error(stream->device);
  stream->queue.pop_front();
  stream->completed += 1;
  state.completions.fetch_add(1, std::memory_order_release);
  if (state.running_task == nullptr) close_device_memory();
  if (!stream->queue.empty()) {  // work queued behind this kernel by other threads is ready now
    state.submissions.fetch_add(1, std::memory_order_release);
    if (!state.executor_running) start_executor();
    state.work.notify_one();
  }
  if (awaited_task_finished(*stream)) state.done.notify_all();
  if (!run) return take_pending_error(stream->device);
  if (code != 0) return fail(simErrorLaunchFailure, failure_message(task, stream->device, code, detail, false));
  return simSuccess;
}

void start_executor() {
  Driver& state = driver();
  state.executor = std::thread(executor_main, std::move(state.executor));
  // Linux keeps at most 15 characters of a thread's name and refuses a longer one.
  pthread_setname_np(state.executor.native_handle(), std::string("sim-executor").substr(0, 15).c_str());
  state.executor_running = true;
}

void stop_executor_at_exit() {
  Driver& state = driver();
  std::vector<Task> discarded;
  bool stopped = false;
  {
    std::unique_lock<std::mutex> lock(state.mutex);
    if (state.stopping.exchange(true) || !state.executor_started) return;
    for (auto& stream : state.streams) {
      while (!stream->queue.empty()) {
        discarded.push_back(std::move(stream->queue.front()));
        stream->queue.pop_front();
      }
    }
    state.work.notify_all();
    if (t_on_executor) return;  // exit() called by a kernel: the executor stops after it
    if (!state.executor_running) state.executor_stopped = true;  // it retired: only its join is left
    stopped = state.done.wait_for(lock, kExitGrace, [&] { return state.executor_stopped; });
    if (!stopped)
      std::fprintf(stderr,
                   "sim: the kernel '%s' was still running %lld s after the process began to exit; exiting without "
                   "waiting for it\n",
                   state.running_task, static_cast<long long>(kExitGrace.count()));
  }
  for (auto& task : discarded) release_task(task);
  if (stopped) state.executor.join();
}

}  // namespace simdriver

extern "C" {

simStatus_t simDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (least != nullptr) *least = simdriver::kPriorityLeast;
  if (greatest != nullptr) *greatest = simdriver::kPriorityGreatest;
  return simSuccess;
}

simStatus_t simStreamCreate(simStream_t* stream) {
  return simStreamCreateWithPriority(stream, simdriver::kPriorityLeast);
}

simStatus_t simStreamCreateWithPriority(simStream_t* stream, int priority) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (stream == nullptr) return fail(simErrorInvalidValue, "simStreamCreate: stream is NULL");
  std::lock_guard<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  simContext_st* device = simdriver::activate_device(simdriver::current_device(), &status);
  if (device == nullptr) return status;
  auto created = std::make_shared<simStream_st>();
  created->device = device->device;
  created->priority = std::clamp(priority, simdriver::kPriorityGreatest, simdriver::kPriorityLeast);
  created->id = driver().next_stream_id++;
  driver().streams.push_back(created);
  driver().stream_handles[created.get()] = created;
  *stream = created.get();
  return simSuccess;
}

simStatus_t simStreamDestroy(simStream_t stream) {
  if (simStatus_t status = simdriver::enter(true); status != simSuccess) return status;
  if (stream == nullptr) return fail(simErrorInvalidHandle, "simStreamDestroy: the default stream (NULL) cannot be destroyed");
  std::lock_guard<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  driver().stream_handles.erase(stream);
  found->destroyed = true;
  if (found->queue.empty()) {
    auto& streams = driver().streams;
    streams.erase(std::remove(streams.begin(), streams.end(), found), streams.end());
  }
  return simSuccess;
}

simStatus_t simStreamGetPriority(simStream_t stream, int* priority) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (priority == nullptr) return fail(simErrorInvalidValue, "simStreamGetPriority: priority is NULL");
  std::lock_guard<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  *priority = found->priority;
  return simSuccess;
}

simStatus_t simStreamGetDevice(simStream_t stream, int* device) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (device == nullptr) return fail(simErrorInvalidValue, "simStreamGetDevice: device is NULL");
  std::lock_guard<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  *device = found->device;
  return simSuccess;
}

simStatus_t simStreamGetId(simStream_t stream, unsigned long long* id) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (id == nullptr) return fail(simErrorInvalidValue, "simStreamGetId: id is NULL");
  std::lock_guard<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  *id = found->id;
  return simSuccess;
}

simStatus_t simStreamQuery(simStream_t stream) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  std::lock_guard<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  return found->completed >= found->submitted ? simSuccess : simErrorNotReady;
}

simStatus_t simStreamSynchronize(simStream_t stream) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = simdriver::refuse_on_executor("simStreamSynchronize"); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  simdriver::wait_for_task(lock, found, found->submitted);
  return simdriver::take_pending_error(found->device);
}

simStatus_t simStreamWaitEvent(simStream_t stream, simEvent_t event, unsigned int flags) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (flags != 0) return fail(simErrorInvalidValue, "simStreamWaitEvent: flags must be 0, got " + std::to_string(flags));
  std::lock_guard<std::mutex> lock(driver().mutex);
  std::shared_ptr<simStream_st> found;
  if (simStatus_t status = checked_stream(stream, &found); status != simSuccess) return status;
  auto handle = driver().event_handles.find(event);
  if (handle == driver().event_handles.end())
    return fail(simErrorInvalidHandle, "simStreamWaitEvent: the event " + simdriver::hex(event) +
                                           " is not a live event of sim's driver (destroyed already, or never created)");
  if (handle->second->recorded_generation == 0) return simSuccess;
  Task task;
  task.kind = Task::Kind::Wait;
  task.name = "wait";
  task.event = handle->second;
  task.generation = handle->second->recorded_generation;
  simdriver::submit(found, std::move(task));
  return simSuccess;
}

simStatus_t simDeviceSynchronize(void) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = simdriver::refuse_on_executor("simDeviceSynchronize"); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  simContext_st* device = simdriver::activate_device(simdriver::current_device(), &status);
  if (device == nullptr) return status;
  simdriver::wait_for_device(lock, device->device);
  return simdriver::take_pending_error(device->device);
}

}  // extern "C"
