// The interface trace (see interface_trace.h): a process-wide list of records, filled while the
// trace is on by the SIM_TRACE lines at the entry of every interface method sim overrides and by
// ATen's RecordFunction callbacks (operator begin/end), read and cleared by stop_interface_trace.
#include "interface_trace.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <pybind11/stl.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

namespace sim {

std::atomic<bool> g_interface_trace_on{false};

namespace {

enum class RecordKind : uint8_t { call, operator_begin, operator_end };

const char* kind_name(RecordKind kind) {
  switch (kind) {
    case RecordKind::call: return "call";
    case RecordKind::operator_begin: return "operator_begin";
    case RecordKind::operator_end: return "operator_end";
  }
  return "call";
}

struct Record {
  RecordKind kind;
  const char* interface;  // a string literal, or a name interned by interned_interface
  std::string method;
  std::string arguments;
  int64_t thread;
  std::string python;
};

// A trace that runs away (a training loop left traced) stops growing here instead of eating memory.
constexpr size_t kMaxRecords = 2'000'000;

std::mutex g_mutex;
std::vector<Record> g_records;
size_t g_dropped = 0;
// Frames in files under these paths are not the user's line (read without g_mutex, so replaced whole).
std::shared_ptr<const std::vector<std::string>> g_ignored_paths = std::make_shared<std::vector<std::string>>();
std::optional<at::CallbackHandle> g_operator_callback;

int64_t native_thread_id() {
  thread_local int64_t id = static_cast<int64_t>(syscall(SYS_gettid));  // threading.get_native_id()
  return id;
}

bool ignored(const std::string& filename, const std::vector<std::string>& ignored_paths) {
  for (const auto& prefix : ignored_paths)
    if (filename.compare(0, prefix.size(), prefix) == 0) return true;
  return filename.compare(0, 8, "<frozen ") == 0;
}

// "file:line" of the innermost Python frame outside the ignored paths, "" without one. Needs the GIL.
std::string innermost_user_line() {
  auto ignored_paths = std::atomic_load(&g_ignored_paths);
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::string found;
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* utf8 = PyUnicode_AsUTF8(code->co_filename);
    std::string filename = utf8 != nullptr ? utf8 : "";
    if (utf8 == nullptr) PyErr_Clear();
    Py_DECREF(code);
    if (!filename.empty() && !ignored(filename, *ignored_paths)) {
      found = filename + ":" + std::to_string(PyFrame_GetLineNumber(frame));
      Py_DECREF(frame);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  return found;
}

// PyTorch's Python bindings release the GIL before they dispatch an operator, so the line that called
// an operator is read when the outermost operator of a thread begins (taking the GIL back for that
// moment, as Python kernels do) and lent to everything that runs inside it.
thread_local std::string t_operator_line;
thread_local int t_operator_depth = 0;
thread_local TraceOrigin t_origin;  // set while this thread runs a kernel launched by another
thread_local uint64_t t_generation = 0;
std::atomic<uint64_t> g_generation{0};  // one per trace: depths left by a trace stopped mid-operator reset

void sync_generation() {
  uint64_t generation = g_generation.load(std::memory_order_relaxed);
  if (t_generation != generation) {
    t_generation = generation;
    t_operator_depth = 0;
    t_operator_line.clear();
  }
}

// The line of the current call: read from the frames when this thread holds the GIL; else the line of the
// operator it runs in; else "" (a thread of PyTorch's own, such as autograd's, or no Python at all).
std::string current_line() {
  if (!Py_IsInitialized()) return "";
  if (PyGILState_Check()) return innermost_user_line();
  if (t_operator_depth > 0 && !t_operator_line.empty()) return t_operator_line;
  return t_origin.python;
}

void append(RecordKind kind, const char* interface, std::string method, std::string arguments,
            std::string python) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_interface_trace_on.load(std::memory_order_relaxed)) return;  // stopped while this call waited
    if (g_records.size() >= kMaxRecords) {
      ++g_dropped;
      return;
    }
    g_records.push_back(
        Record{kind, interface, std::move(method), std::move(arguments),
               t_origin.thread != 0 ? t_origin.thread : native_thread_id(), std::move(python)});
  } catch (...) {
    // A trace must never make the call it records fail (some interface methods are noexcept).
  }
}

std::unique_ptr<at::ObserverContext> operator_began(const at::RecordFunction& function) {
  try {
    sync_generation();
    if (t_operator_depth++ == 0) {
      t_operator_line = t_origin.python;
      if (t_origin.thread == 0 && Py_IsInitialized()) {
        if (PyGILState_Check()) {
          t_operator_line = innermost_user_line();
        } else if (PyGILState_GetThisThreadState() != nullptr) {  // a Python thread inside a binding
          PyGILState_STATE state = PyGILState_Ensure();
          t_operator_line = innermost_user_line();
          PyGILState_Release(state);
        }
      }
    }
    append(RecordKind::operator_begin, "operator", function.name(), "", current_line());
  } catch (...) {
  }
  return nullptr;
}

void operator_ended(const at::RecordFunction& function, at::ObserverContext*) {
  try {
    sync_generation();
    append(RecordKind::operator_end, "operator", function.name(), "", current_line());
    if (t_operator_depth > 0 && --t_operator_depth == 0) t_operator_line.clear();
  } catch (...) {
  }
}

void start_interface_trace(const std::vector<std::string>& ignored_paths) {
  std::lock_guard<std::mutex> lock(g_mutex);
  TORCH_CHECK(!g_interface_trace_on.load(), "an interface trace is already on: call stop_interface_trace() "
              "before starting another one");
  g_records.clear();
  g_dropped = 0;
  std::atomic_store(&g_ignored_paths, std::shared_ptr<const std::vector<std::string>>(
                                           std::make_shared<std::vector<std::string>>(ignored_paths)));
  g_generation.fetch_add(1);
  g_operator_callback = at::addGlobalCallback(
      at::RecordFunctionCallback(&operator_began, &operator_ended).scopes({at::RecordScope::FUNCTION}));
  g_interface_trace_on.store(true);
}

pybind11::list stop_interface_trace() {
  std::vector<Record> records;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    TORCH_CHECK(g_interface_trace_on.load(), "no interface trace is on: call start_interface_trace() first");
    g_interface_trace_on.store(false);
    if (g_operator_callback) at::removeCallback(*g_operator_callback);
    g_operator_callback.reset();
    records.swap(g_records);
    dropped = g_dropped;
  }
  if (dropped > 0)
    TORCH_WARN("the interface trace kept its first ", kMaxRecords, " records and dropped ", dropped, " more");
  pybind11::list result;
  int64_t sequence = 0;
  for (const auto& record : records) {
    pybind11::dict entry;
    entry["sequence"] = sequence++;
    entry["kind"] = kind_name(record.kind);
    entry["interface"] = record.interface;
    entry["method"] = record.method;
    entry["arguments"] = record.arguments;
    entry["thread"] = record.thread;
    entry["python"] = record.python;
    result.append(entry);
  }
  return result;
}

}  // namespace

TraceOrigin current_trace_origin() {
  if (t_origin.thread != 0) return t_origin;
  sync_generation();
  return {native_thread_id(), current_line()};
}

TraceOriginScope::TraceOriginScope(TraceOrigin origin) : previous(std::move(t_origin)) { t_origin = std::move(origin); }
TraceOriginScope::~TraceOriginScope() { t_origin = std::move(previous); }

void record_interface_call(const char* interface, const char* method, std::string arguments) {
  std::string python;
  try {
    python = current_line();
  } catch (...) {
  }
  append(RecordKind::call, interface, method, std::move(arguments), std::move(python));
}

namespace {

// An interface name that Python code records under, kept for the life of the process (records hold its pointer).
const char* interned_interface(const std::string& name) {
  static std::mutex mutex;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

}  // namespace

void bind_interface_trace(pybind11::module& module) {
  // For interfaces PyTorch calls in Python (the device module's functions): one "call" record, as SIM_TRACE makes.
  module.def(
      "record_interface_call",
      [](const std::string& interface, const std::string& method, const std::string& arguments) {
        if (!interface_trace_on()) return;
        std::string python;
        try {
          python = current_line();
        } catch (...) {
        }
        append(RecordKind::call, interned_interface(interface), method, arguments, std::move(python));
      },
      pybind11::arg("interface"), pybind11::arg("method"), pybind11::arg("arguments") = "");
  module.def("start_interface_trace", &start_interface_trace, pybind11::arg("ignored_paths"));
  module.def("stop_interface_trace", &stop_interface_trace);
  module.def("interface_trace_on", []() { return interface_trace_on(); });
}

}  // namespace sim
