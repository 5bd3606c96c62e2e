// The interface trace: while it is on, every call PyTorch makes into one of sim's integration
// interfaces (hooks, guard, allocator, generator, streams and events, serialization, profiler,
// distributed, graphs, and the device module's Python functions, which record through the binding
// record_interface_call) is recorded with its arguments, its thread and the user's Python line,
// between the begin/end markers of the operators that caused it (ATen's RecordFunction callbacks).
//
// A call site is one line at the entry of the method:
//   SIM_TRACE("guard", "exchangeDevice", c10::str("device=", device));
// When the trace is off that line costs one relaxed atomic load: the arguments are not evaluated.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <string>

namespace sim {

extern std::atomic<bool> g_interface_trace_on;

inline bool interface_trace_on() { return g_interface_trace_on.load(std::memory_order_relaxed); }

// Appends one "call" record (interface, method, arguments, the calling thread and Python line).
void record_interface_call(const char* interface, const char* method, std::string arguments);

// The thread and Python line a kernel was launched from. A kernel runs on the driver's executor for the
// operator that launched it: while the executor runs it (TraceOriginScope), its records carry that origin.
struct TraceOrigin {
  int64_t thread = 0;  // 0: none
  std::string python;
};
TraceOrigin current_trace_origin();
struct TraceOriginScope {
  explicit TraceOriginScope(TraceOrigin origin);
  ~TraceOriginScope();
  TraceOrigin previous;
};

// Binds start_interface_trace / stop_interface_trace into torch_sim._C (called from runtime.cpp).
void bind_interface_trace(pybind11::module& module);

}  // namespace sim

#define SIM_TRACE(interface, method, arguments_expression)                               \
  do {                                                                                   \
    if (::sim::interface_trace_on())                                                     \
      ::sim::record_interface_call((interface), (method), std::string(arguments_expression)); \
  } while (0)
