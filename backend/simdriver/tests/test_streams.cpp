// Streams and the executor: order within a stream, interleaving across streams, priorities, the
// one executor thread, its end when the device is idle, launches that return before their kernel
// ran, and SIM_LAUNCH_BLOCKING.
#include "harness.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace {

// What kernels did, in the order the executor ran them.
struct Log {
  std::mutex mutex;
  std::vector<std::string> entries;
  std::vector<std::string> snapshot() {
    std::lock_guard<std::mutex> lock(mutex);
    return entries;
  }
};

struct LogArgs {
  Log* log;
  char label[16];
};

int log_kernel(void* args) {
  auto* entry = static_cast<LogArgs*>(args);
  std::lock_guard<std::mutex> lock(entry->log->mutex);
  entry->log->entries.emplace_back(entry->label);
  return 0;
}

simStatus_t launch_log(simStream_t stream, Log& log, const std::string& label) {
  LogArgs args{&log, {}};
  label.copy(args.label, sizeof args.label - 1);
  return simLaunchKernel(stream, label.c_str(), log_kernel, &args, sizeof args, nullptr);
}

size_t position(const std::vector<std::string>& entries, const std::string& label) {
  for (size_t index = 0; index < entries.size(); ++index)
    if (entries[index] == label) return index;
  return entries.size();
}

struct Threads {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::atomic<int> running{0};
  std::atomic<int> most_running{0};
  std::atomic<long> last_task_id{0};  // the kernel's thread, as /proc/self/task names it
};

int thread_id_kernel(void* args) {
  auto* threads = *static_cast<Threads**>(args);
  const int running = threads->running.fetch_add(1) + 1;
  int most = threads->most_running.load();
  while (running > most && !threads->most_running.compare_exchange_weak(most, running)) {
  }
  {
    std::lock_guard<std::mutex> lock(threads->mutex);
    threads->ids.insert(std::this_thread::get_id());
  }
  threads->last_task_id = static_cast<long>(syscall(SYS_gettid));
  threads->running.fetch_sub(1);
  return 0;
}

bool thread_is_alive(long task_id) {
  return std::filesystem::exists("/proc/self/task/" + std::to_string(task_id));
}

struct Flag {
  std::atomic<bool> go{false};
  std::atomic<bool> finished{false};
};

int wait_for_flag_kernel(void* args) {
  auto* flag = static_cast<Flag*>(args);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!flag->go.load()) {
    if (std::chrono::steady_clock::now() > deadline) return 1;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  flag->finished = true;
  return 0;
}

int sleep_then_finish_kernel(void* args) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  static_cast<Flag*>(args)->finished = true;
  return 0;
}

struct NestedCall {
  simStatus_t status = simSuccess;
  std::string message;
};

// A kernel that logs its label and the thread that ran it.
struct ThreadLogArgs {
  Log* log;
  std::atomic<long> task_id{0};
};

int thread_log_kernel(void* args) {
  auto* entry = static_cast<ThreadLogArgs*>(args);
  entry->task_id = static_cast<long>(syscall(SYS_gettid));
  std::lock_guard<std::mutex> lock(entry->log->mutex);
  entry->log->entries.emplace_back("sync");
  return 0;
}

int synchronising_kernel(void* args) {
  auto* call = static_cast<NestedCall*>(args);
  call->status = simStreamSynchronize(nullptr);
  call->message = simGetLastErrorMessage();
  return 0;
}

}  // namespace

TEST(work_on_one_stream_runs_in_order) {
  auto& log = harness::kept<Log>();
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  std::vector<std::string> expected;
  for (int index = 0; index < 200; ++index) {
    expected.push_back("k" + std::to_string(index));
    CHECK_OK(launch_log(stream, log, expected.back()));
  }
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(simStreamQuery(stream) == simSuccess);
  CHECK(log.snapshot() == expected);
  CHECK_OK(simStreamDestroy(stream));
}

TEST(a_stream_keeps_its_order_while_its_queue_grows_around_the_executor) {
  auto& log = harness::kept<Log>();
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  std::vector<std::string> expected;
  // Each round holds the stream behind a kernel waiting for the host, queues more than the round before and
  // releases it: the queue's tasks start further along its storage each time, and it grows while they wrap.
  for (int round = 0, queued = 5; round < 4; ++round, queued *= 3) {
    auto& flag = harness::kept<Flag>();
    CHECK_OK(simLaunchKernel(stream, "wait_for_flag", wait_for_flag_kernel, &flag, 0, nullptr));
    for (int index = 0; index < queued; ++index) {
      expected.push_back("r" + std::to_string(round) + "k" + std::to_string(index));
      CHECK_OK(launch_log(stream, log, expected.back()));
    }
    CHECK(simStreamQuery(stream) == simErrorNotReady);
    flag.go = true;
    CHECK_OK(simStreamSynchronize(stream));
  }
  CHECK(log.snapshot() == expected);
  CHECK_OK(simStreamDestroy(stream));
}

TEST(a_stream_waiting_on_an_event_does_not_hold_back_another_stream) {
  auto& log = harness::kept<Log>();
  simStream_t producer = nullptr, waiting = nullptr, independent = nullptr;
  CHECK_OK(simStreamCreate(&producer));
  CHECK_OK(simStreamCreate(&waiting));
  CHECK_OK(simStreamCreate(&independent));
  simEvent_t produced = nullptr;
  CHECK_OK(simEventCreate(&produced));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(producer, gate));
  CHECK(harness::wait_until_entered(gate));
  for (int index = 0; index < 20; ++index) CHECK_OK(launch_log(producer, log, "p" + std::to_string(index)));
  CHECK_OK(simEventRecord(produced, producer));
  CHECK_OK(simStreamWaitEvent(waiting, produced, 0));
  CHECK_OK(launch_log(waiting, log, "after-wait"));
  CHECK_OK(launch_log(independent, log, "independent"));
  CHECK(simStreamQuery(waiting) == simErrorNotReady);
  gate->open = true;
  CHECK_OK(simStreamSynchronize(independent));
  CHECK_OK(simStreamSynchronize(waiting));
  auto entries = log.snapshot();
  // The independent stream ran while the waiting stream's event was still pending...
  CHECK(position(entries, "independent") < position(entries, "p19"));
  // ...and the waiting stream ran only after the event.
  CHECK(position(entries, "after-wait") == entries.size() - 1);
  CHECK_OK(simEventDestroy(produced));
  for (auto* stream : {producer, waiting, independent}) CHECK_OK(simStreamDestroy(stream));
}

TEST(streams_of_equal_priority_take_turns) {
  auto& log = harness::kept<Log>();
  simStream_t held = nullptr, first = nullptr, second = nullptr;
  CHECK_OK(simStreamCreate(&held));
  CHECK_OK(simStreamCreate(&first));
  CHECK_OK(simStreamCreate(&second));
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(held, gate));
  CHECK(harness::wait_until_entered(gate));
  for (int index = 0; index < 4; ++index) CHECK_OK(launch_log(first, log, "a"));
  for (int index = 0; index < 4; ++index) CHECK_OK(launch_log(second, log, "b"));
  gate->open = true;
  CHECK_OK(simDeviceSynchronize());
  CHECK(log.snapshot() == (std::vector<std::string>{"a", "b", "a", "b", "a", "b", "a", "b"}));
  for (auto* stream : {held, first, second}) CHECK_OK(simStreamDestroy(stream));
}

TEST(a_higher_priority_stream_runs_first) {
  int least = 1, greatest = 1;
  CHECK_OK(simDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(least == 0 && greatest < least);
  auto& log = harness::kept<Log>();
  simStream_t held = nullptr, low = nullptr, high = nullptr;
  CHECK_OK(simStreamCreate(&held));
  CHECK_OK(simStreamCreateWithPriority(&low, least));
  CHECK_OK(simStreamCreateWithPriority(&high, greatest - 5));  // clamped to the greatest
  int priority = 0;
  CHECK_OK(simStreamGetPriority(high, &priority));
  CHECK(priority == greatest);
  auto* gate = harness::new_gate();
  CHECK_OK(harness::launch_gate(held, gate));
  CHECK(harness::wait_until_entered(gate));
  CHECK_OK(launch_log(low, log, "low"));
  CHECK_OK(launch_log(high, log, "high"));
  gate->open = true;
  CHECK_OK(simDeviceSynchronize());
  CHECK(log.snapshot() == (std::vector<std::string>{"high", "low"}));
  for (auto* stream : {held, low, high}) CHECK_OK(simStreamDestroy(stream));
}

TEST(one_executor_thread_at_a_time_runs_every_kernel_and_never_a_host_thread) {
  auto& threads = harness::kept<Threads>();
  Threads* pointer = &threads;
  std::vector<std::thread> launchers;
  std::vector<simStatus_t> results(4, simSuccess);
  std::set<std::thread::id> host_threads{std::this_thread::get_id()};
  std::mutex host_mutex;
  for (int thread = 0; thread < 4; ++thread) {
    launchers.emplace_back([&, thread] {
      {
        std::lock_guard<std::mutex> lock(host_mutex);
        host_threads.insert(std::this_thread::get_id());
      }
      simStatus_t status = simSetDevice(thread % 2);
      simStream_t stream = nullptr;
      if (status == simSuccess) status = simStreamCreateWithPriority(&stream, -(thread % 3));
      for (int index = 0; index < 20 && status == simSuccess; ++index)
        status = simLaunchKernel(index % 2 == 0 ? stream : nullptr, "thread_id", thread_id_kernel, &pointer,
                                 sizeof pointer, nullptr);
      if (status == simSuccess) status = simDeviceSynchronize();
      if (status == simSuccess) status = simStreamDestroy(stream);
      results[thread] = status;
    });
  }
  for (auto& launcher : launchers) launcher.join();
  for (simStatus_t status : results) CHECK_OK(status);
  CHECK(threads.most_running.load() == 1);
  std::lock_guard<std::mutex> lock(threads.mutex);
  CHECK(!threads.ids.empty());
  for (const auto& id : threads.ids) CHECK(host_threads.count(id) == 0);
}

// The executor's thread, and any OpenMP team its kernels started, does not outlive the device's work by long.
TEST(the_executor_ends_once_every_stream_is_idle_and_the_next_launch_starts_another) {
  auto& threads = harness::kept<Threads>();
  Threads* pointer = &threads;
  CHECK_OK(simLaunchKernel(nullptr, "thread_id", thread_id_kernel, &pointer, sizeof pointer, nullptr));
  CHECK_OK(simDeviceSynchronize());
  const long first = threads.last_task_id.load();
  CHECK(first != 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (thread_is_alive(first) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(!thread_is_alive(first));
  threads.last_task_id = 0;
  CHECK_OK(simLaunchKernel(nullptr, "thread_id", thread_id_kernel, &pointer, sizeof pointer, nullptr));
  CHECK_OK(simDeviceSynchronize());
  CHECK(threads.last_task_id.load() != 0);
}

TEST(a_launch_returns_before_its_kernel_runs) {
  auto& flag = harness::kept<Flag>();
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  // The kernel finishes only once the host sets the flag, which it does after the launch returned.
  CHECK_OK(simLaunchKernel(stream, "wait_for_flag", wait_for_flag_kernel, &flag, 0, nullptr));
  CHECK(!flag.finished.load());
  CHECK(simStreamQuery(stream) == simErrorNotReady);
  flag.go = true;
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(flag.finished.load());
  CHECK_OK(simStreamDestroy(stream));
}

CHILD_TEST(launches_wait_for_their_kernel_here) {
  simDeviceProp prop;
  CHECK_OK(simGetDeviceProperties(&prop, 0));
  CHECK(prop.launchBlocking == 1);
  auto& flag = harness::kept<Flag>();
  CHECK_OK(simLaunchKernel(nullptr, "sleep_then_finish", sleep_then_finish_kernel, &flag, 0, nullptr));
  CHECK(flag.finished.load());
}

TEST(launch_blocking_makes_launches_synchronous) {
  auto child = harness::run_in_fresh_process("launches_wait_for_their_kernel_here", {"SIM_LAUNCH_BLOCKING=1"}, 60);
  CHECK_MESSAGE(child.exit_code == 0, child.summary());
  CHECK(harness::contains(child.out, "ok      launches_wait_for_their_kernel_here"));
}

TEST(streams_know_their_device_and_id) {
  simStream_t on_zero = nullptr, on_one = nullptr;
  CHECK_OK(simStreamCreate(&on_zero));
  CHECK_OK(simSetDevice(1));
  CHECK_OK(simStreamCreate(&on_one));
  int device = -1;
  CHECK_OK(simStreamGetDevice(on_one, &device));
  CHECK(device == 1);
  CHECK_OK(simStreamGetDevice(nullptr, &device));  // the current device's default stream
  CHECK(device == 1);
  unsigned long long default_id = 99, first_id = 0, second_id = 0;
  CHECK_OK(simStreamGetId(nullptr, &default_id));
  CHECK(default_id == 1);
  CHECK_OK(simSetDevice(0));
  CHECK_OK(simStreamGetDevice(on_zero, &device));
  CHECK(device == 0);
  CHECK_OK(simStreamGetId(on_zero, &first_id));
  CHECK_OK(simStreamGetId(on_one, &second_id));
  CHECK(first_id != second_id && first_id > 1 && second_id > 1);
  CHECK_OK(simStreamDestroy(on_zero));
  CHECK_OK(simStreamDestroy(on_one));
  CHECK_STATUS(simStreamSynchronize(on_one), simErrorInvalidHandle);
  CHECK(harness::contains(simGetLastErrorMessage(), "is not a live stream"));
  CHECK_STATUS(simStreamDestroy(nullptr), simErrorInvalidHandle);
}

TEST(a_kernel_cannot_synchronise) {
  auto& call = harness::kept<NestedCall>();
  CHECK_OK(simLaunchKernel(nullptr, "synchronising", synchronising_kernel, &call, 0, nullptr));
  CHECK_OK(simDeviceSynchronize());
  CHECK_STATUS(call.status, simErrorNotPermitted);
  CHECK(harness::contains(call.message, "cannot be called from a kernel"));
}

TEST(a_synchronous_launch_runs_on_the_calling_thread_after_the_work_queued_before_it) {
  auto& log = harness::kept<Log>();
  auto& sync = harness::kept<ThreadLogArgs>();
  sync.log = &log;
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  harness::Gate* gate = harness::new_gate();
  CHECK_OK(launch_log(stream, log, "before"));
  CHECK_OK(harness::launch_gate(stream, gate));
  CHECK(harness::wait_until_entered(gate));
  std::atomic<long> caller{0};
  std::atomic<bool> returned{false};
  simStatus_t status = simErrorNotReady;
  std::thread host([&] {
    caller = static_cast<long>(syscall(SYS_gettid));
    status = simLaunchKernelSync(stream, "sync", thread_log_kernel, &sync);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool waited_for_the_gate = !returned.load() && log.snapshot() == std::vector<std::string>{"before"};
  gate->open = true;
  host.join();
  CHECK(waited_for_the_gate);
  CHECK_OK(status);
  CHECK(sync.task_id.load() == caller.load());
  CHECK_OK(launch_log(stream, log, "after"));
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(log.snapshot() == (std::vector<std::string>{"before", "sync", "after"}));
  CHECK_OK(simStreamDestroy(stream));
}

TEST(work_launched_while_a_synchronous_kernel_runs_waits_for_it) {
  auto& log = harness::kept<Log>();
  auto& flag = harness::kept<Flag>();
  simStream_t stream = nullptr, other = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  CHECK_OK(simStreamCreate(&other));
  simStatus_t status = simErrorNotReady;
  std::thread host([&] { status = simLaunchKernelSync(stream, "wait_for_flag", wait_for_flag_kernel, &flag); });
  while (simStreamQuery(stream) == simSuccess) std::this_thread::yield();  // its kernel has begun
  CHECK_OK(launch_log(stream, log, "behind"));
  CHECK_OK(launch_log(other, log, "beside"));
  CHECK_OK(simStreamSynchronize(other));  // the device's other streams go on meanwhile
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const bool held_back = log.snapshot() == std::vector<std::string>{"beside"};
  flag.go = true;
  host.join();
  CHECK(held_back);
  CHECK_OK(status);
  CHECK(flag.finished.load());
  CHECK_OK(simStreamSynchronize(stream));
  CHECK(log.snapshot() == (std::vector<std::string>{"beside", "behind"}));
  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simStreamDestroy(other));
}

TEST(a_synchronously_launched_kernel_cannot_synchronise) {
  auto& call = harness::kept<NestedCall>();
  CHECK_OK(simLaunchKernelSync(nullptr, "synchronising", synchronising_kernel, &call));
  CHECK_STATUS(call.status, simErrorNotPermitted);
  CHECK(harness::contains(call.message, "cannot be called from a kernel"));
  CHECK_STATUS(simLaunchKernelSync(nullptr, "null", nullptr, nullptr), simErrorInvalidValue);
  CHECK(harness::contains(simGetLastErrorMessage(), "kernel is NULL"));
}

TEST(contexts_start_when_a_device_is_first_used) {
  int count = 0;
  CHECK_OK(simGetDeviceCount(&count));
  CHECK(count >= 2);
  int active = 1;
  CHECK_OK(simDevicePrimaryCtxGetState(count - 1, &active));
  // Other tests may have used the last device already; retaining makes it active either way.
  simContext_t context = nullptr;
  CHECK_OK(simDevicePrimaryCtxRetain(&context, count - 1));
  CHECK_OK(simDevicePrimaryCtxGetState(count - 1, &active));
  CHECK(active == 1);
  int device = -1;
  CHECK_OK(simCtxGetDevice(&device, context));
  CHECK(device == count - 1);
  CHECK_OK(simCtxSetCurrent(context));
  CHECK_OK(simGetDevice(&device));
  CHECK(device == count - 1);
  simContext_t current = nullptr;
  CHECK_OK(simCtxGetCurrent(&current));
  CHECK(current == context);
  CHECK_STATUS(simSetDevice(count), simErrorInvalidDevice);
  CHECK_STATUS(simCtxSetCurrent(reinterpret_cast<simContext_t>(&device)), simErrorInvalidHandle);
}
