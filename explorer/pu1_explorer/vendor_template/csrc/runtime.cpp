// The fake vendor runtime (see runtime.h): {{ name }}'s "driver", on host memory.
//
// Replace every function body below with your driver's call. This version keeps device memory in
// host memory, runs everything synchronously (a stream is always idle, an event completes when it
// is recorded) and takes the number of devices from {{ NAME }}_DEVICE_COUNT (default 2), so the
// integration code around it can be built, tested and graded before the hardware exists.
#include "runtime.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace runtime {

namespace {

constexpr size_t kCapacity = size_t(16) << 30;  // bytes each fake device claims to have
constexpr size_t kAlignment = 64;

struct Block {
  size_t bytes;
  int device;
};

struct State {
  std::mutex mutex;
  std::map<const char*, Block> device_blocks;  // device memory, by start address
  std::map<const char*, size_t> pinned_blocks;  // pinned host memory, by start address
  std::vector<size_t> used_bytes;
  std::vector<Activity> activities;  // recorded while tracing is on
};

// Made on first use and never destroyed: tensors may still be freed while the process exits.
State& state() {
  static State* created = new State();
  return *created;
}

thread_local int t_current_device = 0;
std::atomic<bool> g_tracing{false};
thread_local std::vector<unsigned long long> t_correlation;

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int count_from_environment() {
  const char* text = std::getenv("{{ NAME }}_DEVICE_COUNT");
  int count = text == nullptr ? 2 : std::atoi(text);
  return count >= 1 && count <= 64 ? count : 2;
}

// Read once, on first use (a function-local static is safe from the order of static initializers).
int devices() {
  static const int count = count_from_environment();
  return count;
}

bool valid(int device) { return device >= 0 && device < devices(); }

// The entry of `blocks` (start address -> block) whose bytes contain `pointer`, or end().
template <typename Map, typename SizeOf>
typename Map::const_iterator containing(const Map& blocks, const void* pointer, SizeOf size_of) {
  const char* address = static_cast<const char*>(pointer);
  auto after = blocks.upper_bound(address);
  if (after == blocks.begin()) return blocks.end();
  auto block = std::prev(after);
  size_t bytes = size_of(block->second);
  return address < block->first + (bytes > 0 ? bytes : 1) ? block : blocks.end();
}

}  // namespace

struct StreamHandle {
  int device;
};

struct EventHandle {
  bool timing;
  bool recorded = false;
  std::chrono::steady_clock::time_point recorded_at;
};

const char* error_string(Status status) {
  switch (status) {
    case kSuccess: return "success";
    case kErrorInvalidDevice: return "invalid device ordinal";
    case kErrorOutOfMemory: return "out of memory";
    case kErrorInvalidValue: return "invalid argument";
    case kErrorNotReady: return "device not ready";
    default: return "unknown error";
  }
}

Status device_count(int* count) {
  *count = devices();
  return kSuccess;
}

Status get_device(int* device) {
  *device = t_current_device;
  return kSuccess;
}

Status set_device(int device) {
  if (!valid(device)) return kErrorInvalidDevice;
  t_current_device = device;
  return kSuccess;
}

Status synchronize_device(int device) { return valid(device) ? kSuccess : kErrorInvalidDevice; }

Status memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (!valid(device)) return kErrorInvalidDevice;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.used_bytes.resize(devices(), 0);
  *total_bytes = kCapacity;
  *free_bytes = kCapacity - s.used_bytes[device];
  return kSuccess;
}

Status malloc_device(void** pointer, size_t bytes) {
  if (bytes == 0) return kErrorInvalidValue;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.used_bytes.resize(devices(), 0);
  if (s.used_bytes[t_current_device] + bytes > kCapacity) return kErrorOutOfMemory;
  void* memory = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (memory == nullptr) return kErrorOutOfMemory;
  s.device_blocks.emplace(static_cast<const char*>(memory), Block{bytes, t_current_device});
  s.used_bytes[t_current_device] += bytes;
  *pointer = memory;
  return kSuccess;
}

Status free_device(void* pointer) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.device_blocks.find(static_cast<const char*>(pointer));
  if (found == s.device_blocks.end()) return kErrorInvalidValue;
  s.used_bytes[found->second.device] -= found->second.bytes;
  s.device_blocks.erase(found);
  std::free(pointer);
  return kSuccess;
}

Status device_of_pointer(const void* pointer, int* device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto block = containing(s.device_blocks, pointer, [](const Block& b) { return b.bytes; });
  if (block == s.device_blocks.end()) return kErrorInvalidValue;
  *device = block->second.device;
  return kSuccess;
}

Status malloc_host(void** pointer, size_t bytes) {
  if (bytes == 0) return kErrorInvalidValue;
  void* memory = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (memory == nullptr) return kErrorOutOfMemory;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.pinned_blocks.emplace(static_cast<const char*>(memory), bytes);
  *pointer = memory;
  return kSuccess;
}

Status free_host(void* pointer) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.pinned_blocks.erase(static_cast<const char*>(pointer)) == 0) return kErrorInvalidValue;
  std::free(pointer);
  return kSuccess;
}

Status is_pinned_host(const void* pointer, bool* pinned) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *pinned = containing(s.pinned_blocks, pointer, [](size_t bytes) { return bytes; }) != s.pinned_blocks.end();
  return kSuccess;
}

Status copy(void* destination, const void* source, size_t bytes, CopyKind kind) {
  if (bytes == 0) return kSuccess;
  if (destination == nullptr || source == nullptr) return kErrorInvalidValue;
  bool tracing = g_tracing.load(std::memory_order_relaxed);
  long long start = tracing ? now_ns() : 0;
  std::memmove(destination, source, bytes);
  if (tracing) {
    static const char* const names[] = {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD"};
    const void* on_device = kind == CopyKind::device_to_host ? source : destination;
    unsigned long long correlation = t_correlation.empty() ? 0 : t_correlation.back();
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto block = containing(s.device_blocks, on_device, [](const Block& b) { return b.bytes; });
    int device = block == s.device_blocks.end() ? t_current_device : block->second.device;
    s.activities.push_back({ActivityKind::copy, names[static_cast<int>(kind)], device, start, now_ns(), correlation});
  }
  return kSuccess;
}

Status stream_create(Stream* stream) {
  *stream = new StreamHandle{t_current_device};
  return kSuccess;
}

Status stream_destroy(Stream stream) {
  delete stream;
  return kSuccess;
}

// Work runs when it is issued, so a stream is always idle.
Status stream_synchronize(Stream) { return kSuccess; }
Status stream_query(Stream) { return kSuccess; }

Status event_create(Event* event, bool timing) {
  *event = new EventHandle{timing};
  return kSuccess;
}

Status event_destroy(Event event) {
  delete event;
  return kSuccess;
}

Status event_record(Event event, Stream) {
  if (event == nullptr) return kErrorInvalidValue;
  event->recorded = true;
  event->recorded_at = std::chrono::steady_clock::now();
  return kSuccess;
}

Status stream_wait_event(Stream, Event event) { return event == nullptr ? kErrorInvalidValue : kSuccess; }
Status event_synchronize(Event event) { return event == nullptr ? kErrorInvalidValue : kSuccess; }
Status event_query(Event event) { return event == nullptr ? kErrorInvalidValue : kSuccess; }

Status event_elapsed_ms(float* milliseconds, Event start, Event end) {
  if (start == nullptr || end == nullptr || !start->timing || !end->timing) return kErrorInvalidValue;
  if (!start->recorded || !end->recorded) return kErrorNotReady;
  *milliseconds = std::chrono::duration<float, std::milli>(end->recorded_at - start->recorded_at).count();
  return kSuccess;
}

// Only copies are device work here: the fake device runs no kernels (operators compute on the host).
Status activity_enable() {
  g_tracing = true;
  return kSuccess;
}

Status activity_disable() {
  g_tracing = false;
  return kSuccess;
}

Status activity_push_correlation(unsigned long long id) {
  t_correlation.push_back(id);
  return kSuccess;
}

Status activity_pop_correlation() {
  if (t_correlation.empty()) return kErrorInvalidValue;
  t_correlation.pop_back();
  return kSuccess;
}

Status activity_flush(std::vector<Activity>* activities) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  activities->swap(s.activities);
  s.activities.clear();
  return kSuccess;
}

}  // namespace runtime
