// Guide step "streams_events": torch.Stream and torch.Event on {{ name }}.
//
// PyTorch reaches a device's streams and events through its device guard (the GuardImpl declared
// in backend.h): the current stream per device and thread, a pool of streams, new streams, and
// events recorded on a stream, waited for, queried and timed. A PyTorch stream is a device and a
// number; this file maps the number to the runtime's stream (0 is the default stream). What a
// vendor replaces: nothing here; the runtime's streams and events are in runtime.cpp.
#include "backend.h"

#include <c10/core/DeviceGuard.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace torch_{{ name }} {

// [guide: streams_events]
namespace {

constexpr size_t kPoolSize = 8;  // streams handed out round-robin by getStreamFromGlobalPool

struct DeviceStreams {
  std::vector<runtime::Stream> streams{nullptr};  // index = stream id; 0 is the default stream
  size_t next_from_pool = 0;
};

std::mutex g_mutex;
std::unordered_map<DeviceIndex, DeviceStreams> g_streams;
thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;

// A device without an index means the current device; an index past the last device is refused.
c10::Device with_index(c10::Device device) {
  if (!device.has_index()) return c10::Device(kDevice, current_device());
  check_device(device.index());
  return device;
}

// A new runtime stream on `device`; PyTorch streams live as long as the process, so it is never destroyed.
c10::Stream create_stream(c10::Device device) {
  check_device(device.index());
  c10::DeviceGuard guard(device);
  runtime::Stream stream = nullptr;
  RUNTIME_CHECK(runtime::stream_create(&stream));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& streams = g_streams[device.index()].streams;
  streams.push_back(stream);
  return c10::Stream(c10::Stream::UNSAFE, device, static_cast<c10::StreamId>(streams.size() - 1));
}

}  // namespace

runtime::Stream runtime_stream(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& streams = g_streams[stream.device_index()].streams;
  TORCH_CHECK(stream.id() >= 0 && static_cast<size_t>(stream.id()) < streams.size(), "{{ name }}: unknown stream ",
              stream.id(), " on ", stream.device());
  return streams[stream.id()];
}

c10::Stream GuardImpl::getStream(c10::Device device) const {
  TRACE_INTERFACE("guard", "getStream", c10::str("device=", device));
  device = with_index(device);
  auto found = t_current_stream.find(device.index());
  return c10::Stream(c10::Stream::UNSAFE, device, found == t_current_stream.end() ? 0 : found->second);
}

c10::Stream GuardImpl::getDefaultStream(c10::Device device) const {
  TRACE_INTERFACE("guard", "getDefaultStream", c10::str("device=", device));
  return c10::Stream(c10::Stream::DEFAULT, with_index(device));
}

c10::Stream GuardImpl::getStreamFromGlobalPool(c10::Device device, bool) const {
  TRACE_INTERFACE("guard", "getStreamFromGlobalPool", c10::str("device=", device));
  device = with_index(device);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto& entry = g_streams[device.index()];
    if (entry.streams.size() > kPoolSize) {
      auto id = 1 + entry.next_from_pool++ % kPoolSize;
      return c10::Stream(c10::Stream::UNSAFE, device, static_cast<c10::StreamId>(id));
    }
  }
  return create_stream(device);
}

c10::Stream GuardImpl::getNewStream(c10::Device device, int) const {
  TRACE_INTERFACE("guard", "getNewStream", c10::str("device=", device));
  return create_stream(with_index(device));
}

c10::Stream GuardImpl::exchangeStream(c10::Stream stream) const {
  TRACE_INTERFACE("guard", "exchangeStream", c10::str("stream=", stream));
  c10::Stream previous = getStream(stream.device());
  t_current_stream[stream.device_index()] = stream.id();
  return previous;
}

bool GuardImpl::queryStream(const c10::Stream& stream) const {
  TRACE_INTERFACE("guard", "queryStream", c10::str("stream=", stream));
  runtime::Status status = runtime::stream_query(runtime_stream(stream));
  if (status == runtime::kErrorNotReady) return false;
  RUNTIME_CHECK(status);
  return true;
}

void GuardImpl::synchronizeStream(const c10::Stream& stream) const {
  TRACE_INTERFACE("guard", "synchronizeStream", c10::str("stream=", stream));
  refuse_while_capturing(stream, "synchronizing the stream");
  RUNTIME_CHECK(runtime::stream_synchronize(runtime_stream(stream)));
}

void GuardImpl::record(void** event, const c10::Stream& stream, const DeviceIndex, const c10::EventFlag flag) const {
  TRACE_INTERFACE("guard", "record", c10::str("stream=", stream));
  auto** handle = reinterpret_cast<runtime::Event*>(event);
  if (*handle == nullptr) {
    // BACKEND_DEFAULT is torch.Event(enable_timing=True); PYTORCH_DEFAULT events do not time.
    RUNTIME_CHECK(runtime::event_create(handle, flag == c10::EventFlag::BACKEND_DEFAULT));
  }
  RUNTIME_CHECK(runtime::event_record(*handle, runtime_stream(stream)));
}

void GuardImpl::block(void* event, const c10::Stream& stream) const {
  TRACE_INTERFACE("guard", "block", c10::str("event=", event, " stream=", stream));
  if (event == nullptr) return;  // an event never recorded: nothing to wait for
  RUNTIME_CHECK(runtime::stream_wait_event(runtime_stream(stream), static_cast<runtime::Event>(event)));
}

bool GuardImpl::queryEvent(void* event) const {
  TRACE_INTERFACE("guard", "queryEvent", c10::str("event=", event));
  if (event == nullptr) return true;
  runtime::Status status = runtime::event_query(static_cast<runtime::Event>(event));
  if (status == runtime::kErrorNotReady) return false;
  RUNTIME_CHECK(status);
  return true;
}

void GuardImpl::synchronizeEvent(void* event) const {
  TRACE_INTERFACE("guard", "synchronizeEvent", c10::str("event=", event));
  if (event != nullptr) RUNTIME_CHECK(runtime::event_synchronize(static_cast<runtime::Event>(event)));
}

// torch.Event refuses, before it calls this, a pair not both created with enable_timing=True or not
// both recorded, in PyTorch's words; a direct caller of the guard gets the same first sentence.
double GuardImpl::elapsedTime(void* start, void* end, const DeviceIndex) const {
  TRACE_INTERFACE("guard", "elapsedTime", "");
  TORCH_CHECK_VALUE(start != nullptr && end != nullptr,
                    "Both events must be recorded before calculating elapsed time.");
  float milliseconds = 0;
  RUNTIME_CHECK(runtime::event_elapsed_ms(&milliseconds, static_cast<runtime::Event>(start),
                                          static_cast<runtime::Event>(end)));
  return milliseconds;
}

void GuardImpl::destroyEvent(void* event, const DeviceIndex) const noexcept {
  TRACE_INTERFACE("guard", "destroyEvent", c10::str("event=", event));
  if (event != nullptr) runtime::event_destroy(static_cast<runtime::Event>(event));
}
// [/guide: streams_events]

}  // namespace torch_{{ name }}
