// Step 6, streams and events: the torch.cuda stream and event API, over the driver's streams and events.
//
// PyTorch reaches a device's streams and events through its DeviceGuardImplInterface (guard.cpp
// forwards to the functions here): the current stream per device and thread, a pool of streams,
// new streams, and events that are recorded on a stream and timed. A c10::Stream is a device and
// a 64-bit id: id 0 is the device's default stream (the driver's NULL stream), any other id is the
// driver's own number for a stream sim created (simStreamGetId). Event records, waits and queries
// are the driver's, so they complete when the device reaches them, not when the host asks, and
// elapsed_time() is the device's clock between two records.
#include "sim.h"

#include <torch/csrc/PyInterpreter.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace sim {

static std::atomic<bool> g_streams_installed{false};
static constexpr int kStreamPoolSize = 32;  // per device and priority, as CUDA's pools
static thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;

struct DriverStream {
  simStream_t handle;
  DeviceIndex device;
};
static std::mutex g_streams_mutex;
static std::unordered_map<c10::StreamId, DriverStream> g_streams;  // every stream sim created, by id

struct SimEvent {
  simEvent_t handle = nullptr;
  bool timing = false;
  DeviceIndex device = -1;  // the device of its first record; -1 while never recorded
};

// PyTorch's device-trace hooks (tell_gpu_trace): once a tool listens, each new stream, event record, wait and
// host synchronisation is told to it, as torch.cuda tells PyTorch's CUDA sanitizer. A stream is named by its
// driver handle (getStreamNativeHandle), an event by its address; the allocator tells its blocks.

static uintptr_t traced(const c10::Stream& stream) { return reinterpret_cast<uintptr_t>(driver_stream(stream)); }
static uintptr_t traced(const void* event) { return reinterpret_cast<uintptr_t>(event); }

std::atomic<bool> g_gpu_trace_listened{false};

// PyTorch keeps the first interpreter that turns tracing on, for good; sim tells it only while a tool listens.
static void listen_to_gpu_trace(bool listening) {
  if (listening) c10::impl::GPUTrace::set_trace(getPyInterpreter());
  g_gpu_trace_listened = listening;
}

// Before the step, sim answers as PyTorch's guard interface does for a backend without streams or
// events (`pytorchs_refusal`, its own sentence, which tests and users' code match), then says why.
static void require_streams(const char* pytorchs_refusal) {
  TORCH_CHECK(g_streams_installed.load(), pytorchs_refusal,
              " sim has only its default stream: the 'streams_events' step of the bring-up is not installed.");
}

simStream_t driver_stream(const c10::Stream& stream) {
  driver_call(simSetDevice(stream.device_index()), "simSetDevice");
  if (stream.id() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  auto found = g_streams.find(stream.id());
  TORCH_CHECK(found != g_streams.end() && found->second.device == stream.device_index(), "sim:",
              static_cast<int>(stream.device_index()), " has no stream with id ", stream.id(),
              ": use a stream that torch.sim.Stream(), torch.Stream(device=\"sim\") or torch.sim.default_stream() "
              "gave you");
  return found->second.handle;
}

static c10::Stream created_stream(c10::Device device, int priority) {
  driver_call(simSetDevice(device.index()), "simSetDevice");
  simStream_t handle = nullptr;
  driver_call(simStreamCreateWithPriority(&handle, priority), "simStreamCreateWithPriority");
  unsigned long long id = 0;
  driver_call(simStreamGetId(handle, &id), "simStreamGetId");
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    g_streams[static_cast<c10::StreamId>(id)] = {handle, device.index()};
  }
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_stream_creation(kSim, reinterpret_cast<uintptr_t>(handle)); });
  return c10::Stream(c10::Stream::UNSAFE, device, static_cast<c10::StreamId>(id));
}

c10::Stream current_stream(c10::Device device) {
  auto found = t_current_stream.find(device.index());
  c10::StreamId id = found == t_current_stream.end() ? 0 : found->second;
  return c10::Stream(c10::Stream::UNSAFE, device, id);
}

c10::Stream exchange_current_stream(c10::Stream stream) {
  driver_stream(stream);  // refuses an id that is no stream of this device
  auto previous = current_stream(stream.device());
  t_current_stream[stream.device_index()] = stream.id();
  return previous;
}

void wait_for_current_stream(DeviceIndex device) {
  if (on_device()) return;  // a kernel runs after the work queued before it
  simStream_t stream = driver_stream(current_stream(c10::Device(kSim, device)));
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_stream_synchronization(kSim, reinterpret_cast<uintptr_t>(stream)); });
  HostWait wait;
  driver_call(simStreamSynchronize(stream), "simStreamSynchronize");
}

c10::Stream stream_from_pool(c10::Device device, bool high_priority) {
  require_streams("Backend doesn't support acquiring a stream from pool.");
  static std::mutex pool_mutex;
  static std::unordered_map<int, std::vector<c10::Stream>> pools;  // by device * 2 + high_priority
  static std::unordered_map<int, size_t> next;
  std::lock_guard<std::mutex> lock(pool_mutex);
  const int key = device.index() * 2 + (high_priority ? 1 : 0);
  auto& pool = pools[key];
  if (pool.empty()) {
    int least = 0, greatest = 0;
    driver_call(simDeviceGetStreamPriorityRange(&least, &greatest), "simDeviceGetStreamPriorityRange");
    for (int i = 0; i < kStreamPoolSize; ++i) pool.push_back(created_stream(device, high_priority ? greatest : least));
  }
  return pool[next[key]++ % pool.size()];
}

c10::Stream new_stream(c10::Device device, int priority) {
  require_streams("Backend doesn't support create a new Stream.");
  return created_stream(device, priority);
}

bool query_stream(const c10::Stream& stream) {
  const simStatus_t status = simStreamQuery(driver_stream(stream));
  if (status == simErrorNotReady) return false;
  driver_call(status, "simStreamQuery");
  return true;
}

void synchronize_stream(const c10::Stream& stream) {
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_stream_synchronization(kSim, traced(stream)); });
  HostWait wait;
  driver_call(simStreamSynchronize(driver_stream(stream)), "simStreamSynchronize");
}

void synchronize_device(DeviceIndex device) {
  driver_call(simSetDevice(device), "simSetDevice");
  tell_gpu_trace([](auto& trace) { trace->trace_gpu_device_synchronization(kSim); });
  HostWait wait;
  driver_call(simDeviceSynchronize(), "simDeviceSynchronize");
}

void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  require_streams("Backend doesn't support events.");
  simStream_t handle = driver_stream(stream);
  if (*event == nullptr) {
    auto* created = new SimEvent();
    created->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    simStatus_t status = simEventCreateWithFlags(&created->handle, created->timing ? simEventDefault : simEventDisableTiming);
    if (status != simSuccess) delete created;
    driver_call(status, "simEventCreateWithFlags");
    *event = created;
    tell_gpu_trace([&](auto& trace) { trace->trace_gpu_event_creation(kSim, traced(created)); });
  }
  auto* sim_event = static_cast<SimEvent*>(*event);
  TORCH_CHECK(sim_event->device < 0 || sim_event->device == stream.device_index(), "Event device ",
              static_cast<int>(sim_event->device), " does not match recording stream's device ",
              static_cast<int>(stream.device_index()), ". Record a sim event on streams of one device only.");
  driver_call(simEventRecord(sim_event->handle, handle), "simEventRecord");
  sim_event->device = stream.device_index();
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_event_record(kSim, traced(sim_event), traced(stream)); });
}

void block_on_event(void* event, const c10::Stream& stream) {
  if (event == nullptr) return;  // never recorded: nothing to wait for
  simStream_t handle = driver_stream(stream);
  driver_call(simStreamWaitEvent(handle, static_cast<SimEvent*>(event)->handle, 0), "simStreamWaitEvent");
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_event_wait(kSim, traced(event), traced(stream)); });
}

bool query_event(void* event) {
  if (event == nullptr) return true;
  const simStatus_t status = simEventQuery(static_cast<SimEvent*>(event)->handle);
  if (status == simErrorNotReady) return false;
  driver_call(status, "simEventQuery");
  return true;
}

void synchronize_event(void* event) {
  if (event == nullptr) return;
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_event_synchronization(kSim, traced(event)); });
  HostWait wait;
  driver_call(simEventSynchronize(static_cast<SimEvent*>(event)->handle), "simEventSynchronize");
}

void destroy_event(void* event) noexcept {
  auto* sim_event = static_cast<SimEvent*>(event);
  if (sim_event == nullptr) return;
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_event_deletion(kSim, traced(sim_event)); });
  simEventDestroy(sim_event->handle);  // fails only when the driver is gone (exit, a forked child): nothing to free
  delete sim_event;
}

// As CUDA's: only two recorded events that were both created with enable_timing=True are timed.
// PyTorch's own sentences come first (torch.Event checks the same before it reaches the guard),
// then sim's advice.
double elapsed_milliseconds(void* start, void* end) {
  auto* first = static_cast<SimEvent*>(start);
  auto* second = static_cast<SimEvent*>(end);
  TORCH_CHECK_VALUE(first != nullptr && second != nullptr && first->device >= 0 && second->device >= 0,
                    "Both events must be recorded before calculating elapsed time.",
                    " Call record() on each sim event before elapsed_time().");
  TORCH_CHECK_VALUE(first->timing && second->timing,
                    "Both events must be created with argument 'enable_timing=True'.",
                    " Create them with torch.sim.Event(enable_timing=True).");
  float milliseconds = 0;
  driver_call(simEventElapsedTime(&milliseconds, first->handle, second->handle), "simEventElapsedTime");
  return milliseconds;
}

// Tensor.record_stream(s): the memory is in use on `s` too, which the allocator must know before it
// reuses the block (on an asynchronous device, not before `s` has run the kernels queued on it so far).
static void sim_record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kSim, "record_stream expects a stream of the tensor's device (", self.device(),
              "), got one of ", stream.device(), ". Pass a torch.sim.Stream or torch.Stream(device=\"sim\").");
  device_allocator().recordStream(self.storage().data_ptr(), stream);
}

// A kernel that keeps its stream busy for a while and computes nothing, as torch.cuda._sleep does on CUDA: it
// makes asynchrony visible (a stream that is not idle, a copy that has not landed) for demonstrations and tests.
// The host may end it early (DeviceSleep.wake()), as it could end a kernel on a real device that polls a flag in
// host-mapped memory: a test then waits only as long as it looks at the pending work.
struct DeviceSleep {
  std::mutex mutex;
  std::condition_variable woken_up;
  bool woken = false;

  void wake() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      woken = true;
    }
    woken_up.notify_all();
  }
};

struct SleepArgs {
  double milliseconds;
  std::shared_ptr<DeviceSleep>* sleep;  // the launch's reference, dropped by release_sleep
};

static int sleep_kernel(void* args) {
  auto* sleep_args = static_cast<SleepArgs*>(args);
  DeviceSleep& sleep = **sleep_args->sleep;
  std::unique_lock<std::mutex> lock(sleep.mutex);
  sleep.woken_up.wait_for(lock, std::chrono::duration<double, std::milli>(sleep_args->milliseconds),
                          [&] { return sleep.woken; });
  return 0;
}

static void release_sleep(void* args) { delete static_cast<SleepArgs*>(args)->sleep; }

static std::shared_ptr<DeviceSleep> device_sleep(double milliseconds, int64_t device) {
  TORCH_CHECK_VALUE(milliseconds >= 0 && milliseconds <= 60000, "torch.sim.device_sleep takes 0 to 60000 milliseconds, got ",
                    milliseconds);
  simStream_t stream = driver_stream(current_stream(c10::Device(kSim, checked(device))));
  auto sleep = std::make_shared<DeviceSleep>();
  SleepArgs args{milliseconds, new std::shared_ptr<DeviceSleep>(sleep)};
  driver_call(simLaunchKernel(stream, "sim::device_sleep", &sleep_kernel, &args, sizeof(args), &release_sleep),
              "simLaunchKernel");
  return sleep;
}

static void install_streams_events() {
  g_streams_installed = true;
  new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__)
      .impl("record_stream", TORCH_FN(sim_record_stream));
}

void bind_streams_events(pybind11::module& module) {
  module.def("install_streams_events", &install_streams_events);
  module.def("listen_to_gpu_trace", &listen_to_gpu_trace, pybind11::arg("listening"));
  pybind11::class_<DeviceSleep, std::shared_ptr<DeviceSleep>>(module, "DeviceSleep")
      .def("wake", &DeviceSleep::wake, pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def("device_sleep", &device_sleep, pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def("synchronize_device", [](int64_t device) { synchronize_device(checked(device)); },
             pybind11::call_guard<pybind11::gil_scoped_release>());
}

}  // namespace sim
