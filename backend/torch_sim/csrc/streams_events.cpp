// Step 6, streams and events: the torch.cuda stream and event API, on a device that runs synchronously.
//
// PyTorch reaches a device's streams and events through its DeviceGuardImplInterface (guard.cpp
// forwards to the functions here): the current stream per device and thread, a pool of streams,
// new streams, and events that are recorded on a stream and timed. sim runs every kernel
// synchronously, so a stream is always idle and an event completes when it is recorded; it keeps
// the host time of the recording, which is what elapsed_time() measures.
#include "sim.h"

#include <chrono>
#include <unordered_map>

namespace sim {

static std::atomic<bool> g_streams_installed{false};
static constexpr int kStreamPoolSize = 32;
static std::atomic<int64_t> g_next_stream_id{1};
static thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;

struct SimEvent {
  std::chrono::steady_clock::time_point recorded_at;
  bool recorded = false;
  bool timing = false;
  DeviceIndex device = 0;
};

// Before the step, sim answers as PyTorch's guard interface does for a backend without streams or
// events (`pytorchs_refusal`, its own sentence, which tests and users' code match), then says why.
static void require_streams(const char* pytorchs_refusal) {
  TORCH_CHECK(g_streams_installed.load(), pytorchs_refusal,
              " sim has only its default stream: the 'streams_events' step of the bring-up is not installed.");
}

c10::Stream current_stream(c10::Device device) {
  auto found = t_current_stream.find(device.index());
  c10::StreamId id = found == t_current_stream.end() ? 0 : found->second;
  return c10::Stream(c10::Stream::UNSAFE, device, id);
}

c10::Stream exchange_current_stream(c10::Stream stream) {
  auto previous = current_stream(stream.device());
  t_current_stream[stream.device_index()] = stream.id();
  return previous;
}

c10::Stream stream_from_pool(c10::Device device) {
  require_streams("Backend doesn't support acquiring a stream from pool.");
  static std::atomic<int> next{0};
  return c10::Stream(c10::Stream::UNSAFE, device, 1 + (next++ % kStreamPoolSize));
}

c10::Stream new_stream(c10::Device device) {
  require_streams("Backend doesn't support create a new Stream.");
  return c10::Stream(c10::Stream::UNSAFE, device, kStreamPoolSize + g_next_stream_id++);
}

void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  require_streams("Backend doesn't support events.");
  if (*event == nullptr) {
    auto* created = new SimEvent();
    created->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    *event = created;
  }
  auto* sim_event = static_cast<SimEvent*>(*event);
  sim_event->recorded_at = std::chrono::steady_clock::now();
  sim_event->recorded = true;
  sim_event->device = stream.device_index();
}

void destroy_event(void* event) noexcept { delete static_cast<SimEvent*>(event); }

// As CUDA's: only two recorded events that were both created with enable_timing=True are timed.
// PyTorch's own sentences come first (torch.Event checks the same before it reaches the guard),
// then sim's advice.
double elapsed_milliseconds(void* start, void* end) {
  auto* first = static_cast<SimEvent*>(start);
  auto* second = static_cast<SimEvent*>(end);
  TORCH_CHECK_VALUE(first != nullptr && second != nullptr && first->recorded && second->recorded,
                    "Both events must be recorded before calculating elapsed time.",
                    " Call record() on each sim event before elapsed_time().");
  TORCH_CHECK_VALUE(first->timing && second->timing,
                    "Both events must be created with argument 'enable_timing=True'.",
                    " Create them with torch.sim.Event(enable_timing=True).");
  return std::chrono::duration<double, std::milli>(second->recorded_at - first->recorded_at).count();
}

// Tensor.record_stream(s): the memory is in use on `s` too, which the allocator must know before it
// reuses the block (on an asynchronous device, not before `s` has run the kernels queued on it so far).
static void sim_record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kSim, "record_stream expects a stream of the tensor's device (", self.device(),
              "), got one of ", stream.device(), ". Pass a torch.sim.Stream or torch.Stream(device=\"sim\").");
  device_allocator().recordStream(self.storage().data_ptr(), stream);
}

static void install_streams_events() {
  g_streams_installed = true;
  new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__)
      .impl("record_stream", TORCH_FN(sim_record_stream));
}

void bind_streams_events(pybind11::module& module) {
  module.def("install_streams_events", &install_streams_events);
}

}  // namespace sim
