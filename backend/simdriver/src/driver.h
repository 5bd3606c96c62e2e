// What the driver's source files share: the objects behind the handles, the one driver state and
// the helpers every entry point uses. Not installed: the API is include/simdriver.h.
#pragma once

#include "simdriver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

struct simEvent_st {
  bool timing = true;
  uint64_t recorded_generation = 0;   // one more per simEventRecord call
  uint64_t completed_generation = 0;  // the newest record the executor has reached
  int64_t clock_ns = 0;               // the device clock at that record
  int device = -1;                    // the device of the newest record
};

namespace simdriver {

constexpr int kMaxDevices = 64;
constexpr int kPriorityLeast = 0;
constexpr int kPriorityGreatest = -2;
constexpr size_t kAlignment = 256;
// A copy this large is split over the executor's OpenMP team; a smaller one is one memmove, which a host thread
// may also run (run_on_caller) without starting a team of its own.
constexpr size_t kParallelCopyBytes = size_t(512) << 10;

// A copy or memset queued while activity reports are on: whom to tell once it ran, and what.
struct ActivityNote {
  simActivityCallback_t callback = nullptr;
  void* user_data = nullptr;
  simActivityRecord record{};
};

// One unit of a stream's work.
struct Task {
  enum class Kind { Kernel, Copy, Memset, Record, Wait, Free, OnCaller };  // OnCaller: simLaunchKernelSync's place
  Kind kind = Kind::Kernel;
  const char* name = "";  // the kernel's name (intern_name), or what the task is ("copy", "memset") in messages
  simKernelFunc_t kernel = nullptr;
  std::shared_ptr<unsigned char[]> args_copy;  // the launch's copy of the kernel's arguments
  void* args = nullptr;                        // what the kernel receives
  simKernelArgsRelease_t release = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  int value = 0;
  std::unique_ptr<unsigned char[]> staging;  // a pageable source's bytes, copied at submission
  std::shared_ptr<simEvent_st> event;
  uint64_t generation = 0;  // Record: the generation it completes; Wait: the one it waits for
  std::unique_ptr<ActivityNote> activity;  // Copy, Memset: reported once it ran (activity.cpp)
};

// Runs the release callback of a task that will never run, or has run.
void release_task(Task& task);

// A stream's tasks in order: a ring over storage it keeps, so that a queue in steady use allocates nothing.
class TaskQueue {
 public:
  bool empty() const { return count_ == 0; }
  Task& front() { return slots_[head_]; }
  void push_back(Task task) {
    if (count_ == slots_.size()) grow();
    slots_[(head_ + count_) % slots_.size()] = std::move(task);
    count_ += 1;
  }
  void pop_front() {
    slots_[head_] = Task();
    head_ = (head_ + 1) % slots_.size();
    count_ -= 1;
  }

 private:
  Task& at(size_t index) { return slots_[(head_ + index) % slots_.size()]; }
  void grow() {
    std::vector<Task> larger(std::max<size_t>(16, slots_.size() * 2));
    for (size_t index = 0; index < count_; ++index) larger[index] = std::move(at(index));
    slots_ = std::move(larger);
    head_ = 0;
  }
  std::vector<Task> slots_;
  size_t head_ = 0;
  size_t count_ = 0;
};

// The driver's lasting copy of a kernel's name: launches of one kernel share it, so queueing a task copies no
// string. Names are kept for the process's life; a program launches a bounded set of kernels.
const char* intern_name(const char* name);

}  // namespace simdriver

struct simStream_st {
  int device = 0;
  int priority = simdriver::kPriorityLeast;
  unsigned long long id = 0;
  bool is_default = false;
  bool destroyed = false;  // its handle is gone; it lives until its queue has drained
  simdriver::TaskQueue queue;
  uint64_t submitted = 0;  // tasks ever queued; the n-th has finished once completed >= n
  uint64_t completed = 0;
  uint64_t last_served = 0;  // the executor's round-robin order among equal priorities
  std::vector<uint64_t> awaited;  // the task each host thread asleep in wait_for_task waits for
};

// A device's primary context: the device's memory and default stream.
struct simContext_st {
  int device = 0;
  bool active = false;
  char* base = nullptr;   // the device's reserved address range
  size_t reserved = 0;
  size_t limit = 0;       // simDeviceSetMemoryLimit
  size_t used = 0;
  bool open_for_executor = false;                 // discrete memory: mprotect'ed readable and writable
  size_t extent = 0;  // discrete memory: the part of the range allocations have reached, the only part ever opened
  size_t opened = 0;  // discrete memory: how much of the range is open now
  std::map<size_t, size_t> free_ranges;           // offset -> bytes
  struct Allocation {
    size_t size;       // rounded up to kAlignment: what it takes of the range
    size_t requested;  // what simMalloc was asked for: what copies may reach
  };
  std::map<size_t, Allocation> allocations;       // by offset
  std::shared_ptr<simStream_st> default_stream;
  simStatus_t pending_error = simSuccess;         // a kernel's failure, until a synchronising call returns it
  std::string pending_message;
};

namespace simdriver {

struct Config {
  int device_count = 2;
  size_t memory_capacity = size_t(8) << 30;
  bool discrete = false;
  bool launch_blocking = false;
};

struct Driver {
  std::mutex mutex;                    // guards everything below
  std::condition_variable work;        // the executor waits here for ready work
  std::condition_variable done;        // callers wait here for finished work
  Config config;
  std::chrono::steady_clock::time_point epoch;  // the device clock's zero
  std::vector<std::unique_ptr<simContext_st>> devices;
  std::vector<std::shared_ptr<simStream_st>> streams;  // every stream with a handle or queued work
  std::unordered_map<const simStream_st*, std::shared_ptr<simStream_st>> stream_handles;
  std::unordered_map<const simEvent_st*, std::shared_ptr<simEvent_st>> event_handles;
  std::map<uintptr_t, size_t> pinned;  // simMallocHost blocks: start -> bytes
  unsigned long long next_stream_id = 0;
  simActivityCallback_t activity_callback = nullptr;  // simActivityEnable
  void* activity_user_data = nullptr;
  uint64_t serve_counter = 0;
  std::thread executor;               // the running executor, or the last one, which retired
  bool executor_started = false;     // at the first device's activation
  bool executor_running = false;     // false once it retired (kRetireAfter without work), until a submission
  bool executor_stopped = false;
  const char* running_task = nullptr;  // the name of the task the executor runs, for the exit message
  // What every entry point reads, and each counter the executor and host threads watch as they spin, has a cache
  // line of its own: apart from the mutex and from each other, a write to one costs the readers of another nothing.
  alignas(64) std::atomic<bool> stopping{false};  // the process is exiting: no new work
  alignas(64) std::atomic<uint64_t> submissions{0};  // tasks ever queued, for the executor's idle spin
  alignas(64) std::atomic<uint64_t> completions{0};  // tasks ever finished, for a waiter's spin
  alignas(64) int host_waiters = 0;  // host threads waiting for work to finish (discrete memory closes before they wake)
  int tasks_on_callers = 0;  // tasks host threads run (run_on_caller): discrete memory stays open while any does
};

// Counts a host thread as waiting for the device while it lives, under the driver's mutex. When the wait ends
// with the executor between tasks, discrete memory is closed again, so that the host's next access is caught.
struct HostWaiter {
  explicit HostWaiter(Driver& state) : state(state) { state.host_waiters += 1; }
  ~HostWaiter();
  Driver& state;
};

// Takes the driver's mutex, trying for a moment before sleeping on it: its holders keep it for well under a
// microsecond, less than it costs to put a thread to sleep and wake it again.
void acquire(std::unique_lock<std::mutex>& lock);

// The driver's state; valid once enter() has succeeded.
Driver& driver();

// Every entry point starts here: initialises the driver on first use, and refuses in a forked
// child, after a failed initialisation or after shutdown (unless `after_shutdown_ok`).
simStatus_t enter(bool after_shutdown_ok = false);
// Records the calling thread's last error and returns `status`.
simStatus_t fail(simStatus_t status, const std::string& message);
bool on_executor_thread();
// simErrorNotPermitted for a call that waits, made by a kernel (it would wait for itself).
simStatus_t refuse_on_executor(const char* call);
int current_device();
std::string hex(const void* pointer);
std::string format_bytes(size_t bytes);

// Under the driver's mutex: ------------------------------------------------------------
// The device's context, reserving its memory and creating its default stream on first use; nullptr
// after recording the error in `status`.
simContext_st* activate_device(int device, simStatus_t* status);
// NULL: the current device's default stream. nullptr after recording the error in `status`.
std::shared_ptr<simStream_st> resolve_stream(simStream_t stream, simStatus_t* status);
// Queues a task and wakes the executor; returns the task's number within its stream.
uint64_t submit(const std::shared_ptr<simStream_st>& stream, Task task);
// Waits until the stream has finished its `sequence`-th task.
void wait_for_task(std::unique_lock<std::mutex>& lock, const std::shared_ptr<simStream_st>& stream,
                   uint64_t sequence);
// Waits until every stream of the device has finished what was queued before the call.
void wait_for_device(std::unique_lock<std::mutex>& lock, int device);
// The device's pending kernel failure, returned once (as the caller's error) and then cleared.
simStatus_t take_pending_error(int device);
// After submitting: with SIM_LAUNCH_BLOCKING=1, waits for the task and returns the pending error.
simStatus_t finish_submission(std::unique_lock<std::mutex>& lock, const std::shared_ptr<simStream_st>& stream,
                              uint64_t sequence);
int64_t device_clock_ns();
// Runs `task` on the calling thread as the stream's next task, for a caller that would wait for it anyway
// (simLaunchKernelSync, a small copy into pageable memory): waits for the stream's earlier work, runs it with
// device memory open, and returns its failure, or the device's pending error without running it. The hand-over to
// the executor and back costs more than such a task.
simStatus_t run_on_caller(std::unique_lock<std::mutex>& lock, const std::shared_ptr<simStream_st>& stream, Task task);

// Memory (memory.cpp), under the driver's mutex: -----------------------------------------
simStatus_t reserve_device_memory(simContext_st& device);
// Discrete memory: the SIGSEGV handler that names sim's device memory (installed once, at initialisation).
void install_memory_guard();
// Opens (or closes) every active device's memory to the whole process, for discrete memory guarded with mprotect;
// nothing where a protection key guards it.
void open_device_memory();
void close_device_memory();
// Lifts a protection key's denial of discrete memory for the calling thread while it lives, and restores the
// thread's rights after; nothing where no key guards the memory. A task runs inside one.
class ThreadMemoryAccess {
 public:
  ThreadMemoryAccess();
  ~ThreadMemoryAccess();
  ThreadMemoryAccess(const ThreadMemoryAccess&) = delete;
  ThreadMemoryAccess& operator=(const ThreadMemoryAccess&) = delete;

 private:
  int previous_rights_ = 0;
};
// Frees the allocation starting at `pointer` (a queued simFreeAsync); nothing if there is none.
void release_allocation_at(void* pointer);

// Activity (activity.cpp): under the driver's mutex, gives a copy or memset about to be queued on `stream` its
// note while reports are on; outside it, reports a task that ran between the two device clock times.
void note_activity(Task& task, simActivityKind kind, simMemcpyKind copy_kind, bool source_pinned,
                   bool destination_pinned, const simStream_st& stream);
void report_activity(Task& task, int64_t start_ns, int64_t end_ns);

// Runs a kernel task on the executor; non-zero: it failed, and `message` may say why (launch.cpp).
int run_kernel(Task& task, std::string* message);

// The executor (stream.cpp).
void start_executor();
void stop_executor_at_exit();

}  // namespace simdriver
