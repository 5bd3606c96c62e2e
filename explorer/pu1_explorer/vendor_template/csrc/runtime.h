// The vendor runtime: the one layer of this backend that a vendor replaces with its driver.
//
// Every other file here is the integration code PyTorch needs, written against the functions
// below the way it would be written against a real driver API: devices, the current device,
// device and pinned host memory, copies, streams and events, and activity tracing for the
// profiler. runtime.cpp implements them on host memory, synchronously, so that the backend builds
// and passes the scorecard before any hardware exists. Replace runtime.cpp's function bodies with
// calls into your driver (keep the signatures) and the rest of the backend runs on your device.
#pragma once

#include <cstddef>
#include <vector>

namespace runtime {

// Every call returns a status, as driver APIs do; the integration code checks it (RUNTIME_CHECK).
using Status = int;
constexpr Status kSuccess = 0;
constexpr Status kErrorInvalidDevice = 1;
constexpr Status kErrorOutOfMemory = 2;
constexpr Status kErrorInvalidValue = 3;
constexpr Status kErrorNotReady = 4;  // queries: the work is not finished yet
const char* error_string(Status status);

// Devices; the current device belongs to the calling thread.
Status device_count(int* count);
Status get_device(int* device);
Status set_device(int device);
Status synchronize_device(int device);  // waits for all work on the device
Status memory_info(int device, size_t* free_bytes, size_t* total_bytes);

// Device memory, on the current device; which device a pointer belongs to.
Status malloc_device(void** pointer, size_t bytes);
Status free_device(void* pointer);
Status device_of_pointer(const void* pointer, int* device);

// Pinned (page-locked) host memory, which the device reads and writes directly.
Status malloc_host(void** pointer, size_t bytes);
Status free_host(void* pointer);
Status is_pinned_host(const void* pointer, bool* pinned);  // also true inside a pinned block

enum class CopyKind { host_to_device, device_to_host, device_to_device };
Status copy(void* destination, const void* source, size_t bytes, CopyKind kind);

// Streams are queues of work on one device; the null stream is each device's default stream.
struct StreamHandle;
using Stream = StreamHandle*;
Status stream_create(Stream* stream);  // on the current device
Status stream_destroy(Stream stream);
Status stream_synchronize(Stream stream);
Status stream_query(Stream stream);  // kSuccess when idle, kErrorNotReady while busy

// Events mark a point in a stream's work: record, wait for, query, time.
struct EventHandle;
using Event = EventHandle*;
Status event_create(Event* event, bool timing);
Status event_destroy(Event event);
Status event_record(Event event, Stream stream);
Status stream_wait_event(Stream stream, Event event);
Status event_synchronize(Event event);
Status event_query(Event event);  // kSuccess once the recorded work is done
Status event_elapsed_ms(float* milliseconds, Event start, Event end);

// Activity tracing, the driver's profiling interface (CUPTI is CUDA's): while tracing is on, the
// runtime records each piece of work it does on a device, with its start and end on the host's
// real-time clock (the clock PyTorch's profiler uses), tagged with the calling thread's innermost
// correlation id (the profiler's id of the operator that issued the work; 0 outside any).
enum class ActivityKind { copy, kernel };
struct Activity {
  ActivityKind kind;
  const char* name;  // "Memcpy HtoD", or a kernel's name
  int device;
  long long start_ns;
  long long end_ns;
  unsigned long long correlation;
};
Status activity_enable();
Status activity_disable();
Status activity_push_correlation(unsigned long long id);
Status activity_pop_correlation();
Status activity_flush(std::vector<Activity>* activities);  // hands over the records made so far

}  // namespace runtime
