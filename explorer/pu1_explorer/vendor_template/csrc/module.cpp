// Guide step "device_module": the C++ half of torch.{{ name }}, the Python module torch_{{ name }}._C.
//
// torch.{{ name }} (torch_{{ name }}/device_module.py) answers device_count(), current_device(),
// set_device(), synchronize() and the default generators from the functions below. Loading this
// library also runs every other file's registrations (hooks, guard, allocator, operators,
// autocast, profiler). It uses Python's C API directly, which compiles faster than pybind11. What a vendor
// replaces: nothing; add a function here when the device module needs something new from C++.
#include <Python.h>  // first, as Python asks

#include "backend.h"

#include <ATen/record_function.h>
#include <torch/csrc/Generator.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <optional>
#include <vector>

namespace torch_{{ name }} {

// The interface trace (the explorer's protocol, not a guide step): while it is on, every call PyTorch makes into
// this backend's interfaces (TRACE_INTERFACE at the entry of each method, backend.h) and each operator's begin and
// end (ATen's RecordFunction callbacks) is recorded with its thread and the user's Python line.
std::atomic<bool> g_interface_trace_on{false};

namespace {

struct TraceRecord {
  const char* kind;
  const char* interface;
  std::string method, arguments;
  long thread;
  std::string python;
};

std::mutex g_trace_mutex;
std::vector<TraceRecord> g_trace;
std::vector<std::string> g_ignored_paths;  // set while the trace is off, read while it is on
std::optional<at::CallbackHandle> g_operator_callback;
thread_local std::string t_operator_line;  // the line of this thread's outermost operator
thread_local int t_operator_depth = 0;

long native_thread_id() {
  thread_local long id = static_cast<long>(syscall(SYS_gettid));
  return id;
}

// "file:line" of the innermost Python frame outside the ignored paths. Needs the GIL.
std::string innermost_user_line() {
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename");
    const char* utf8 = name != nullptr ? PyUnicode_AsUTF8(name) : nullptr;
    std::string filename = utf8 != nullptr ? utf8 : "";
    PyErr_Clear();
    Py_XDECREF(name);
    Py_DECREF(code);
    bool ignored = filename.empty() || filename.rfind("<frozen ", 0) == 0;
    for (const auto& prefix : g_ignored_paths) ignored = ignored || filename.rfind(prefix, 0) == 0;
    if (!ignored) {
      std::string found = filename + ":" + std::to_string(PyFrame_GetLineNumber(frame));
      Py_DECREF(frame);
      return found;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return "";
}

// PyTorch's bindings release the GIL before an operator: its line is read when the thread's outermost operator
// begins (taking the GIL back for that moment) and lent to the calls inside it.
std::string current_line() {
  if (!Py_IsInitialized()) return "";
  if (PyGILState_Check()) return innermost_user_line();
  return t_operator_depth > 0 ? t_operator_line : std::string();
}

void append(const char* kind, const char* interface, std::string method, std::string arguments) noexcept {
  try {
    std::string python = current_line();
    std::lock_guard<std::mutex> lock(g_trace_mutex);
    if (g_interface_trace_on.load(std::memory_order_relaxed))
      g_trace.push_back({kind, interface, std::move(method), std::move(arguments), native_thread_id(),
                         std::move(python)});
  } catch (...) {  // a trace never makes the call it records fail
  }
}

std::unique_ptr<at::ObserverContext> operator_began(const at::RecordFunction& function) {
  if (t_operator_depth++ == 0) {
    t_operator_line.clear();
    if (Py_IsInitialized() && !PyGILState_Check() && PyGILState_GetThisThreadState() != nullptr) {
      PyGILState_STATE state = PyGILState_Ensure();
      t_operator_line = innermost_user_line();
      PyGILState_Release(state);
    }
  }
  append("operator_begin", "operator", function.name(), "");
  return nullptr;
}

void operator_ended(const at::RecordFunction& function, at::ObserverContext*) {
  append("operator_end", "operator", function.name(), "");
  if (t_operator_depth > 0 && --t_operator_depth == 0) t_operator_line.clear();
}

PyObject* py_start_interface_trace(PyObject*, PyObject* paths) {
  std::vector<std::string> ignored;
  PyObject* iterator = PyObject_GetIter(paths);
  if (iterator == nullptr) return nullptr;
  while (PyObject* item = PyIter_Next(iterator)) {
    const char* text = PyUnicode_AsUTF8(item);
    Py_DECREF(item);
    if (text == nullptr) break;
    ignored.emplace_back(text);
  }
  Py_DECREF(iterator);
  if (PyErr_Occurred()) return nullptr;
  std::lock_guard<std::mutex> lock(g_trace_mutex);
  if (g_interface_trace_on.load()) {
    PyErr_SetString(PyExc_RuntimeError,
                    "an interface trace is already on: call stop_interface_trace() before starting another one");
    return nullptr;
  }
  g_trace.clear();
  g_ignored_paths = std::move(ignored);
  g_operator_callback = at::addGlobalCallback(
      at::RecordFunctionCallback(&operator_began, &operator_ended).scopes({at::RecordScope::FUNCTION}));
  g_interface_trace_on.store(true);
  Py_RETURN_NONE;
}

PyObject* py_stop_interface_trace(PyObject*, PyObject*) {
  std::vector<TraceRecord> records;
  {
    std::lock_guard<std::mutex> lock(g_trace_mutex);
    if (!g_interface_trace_on.load()) {
      PyErr_SetString(PyExc_RuntimeError, "no interface trace is on: call start_interface_trace() first");
      return nullptr;
    }
    g_interface_trace_on.store(false);
    at::removeCallback(*g_operator_callback);
    g_operator_callback.reset();
    records.swap(g_trace);
  }
  PyObject* list = PyList_New(0);
  for (size_t i = 0; list != nullptr && i < records.size(); ++i) {
    const TraceRecord& r = records[i];
    PyObject* entry = Py_BuildValue("{s:n,s:s,s:s,s:s,s:s,s:l,s:s}", "sequence", static_cast<Py_ssize_t>(i), "kind",
                                    r.kind, "interface", r.interface, "method", r.method.c_str(), "arguments",
                                    r.arguments.c_str(), "thread", r.thread, "python", r.python.c_str());
    if (entry == nullptr || PyList_Append(list, entry) != 0) Py_CLEAR(list);
    Py_XDECREF(entry);
  }
  return list;
}

}  // namespace

void record_interface_call(const char* interface, const char* method, std::string arguments) {
  append("call", interface, method, std::move(arguments));
}

// [guide: device_module]
namespace {

// Runs `body`, turning a C++ exception (TORCH_CHECK's c10::Error) into a Python RuntimeError.
template <typename Body>
PyObject* guarded(Body body) {
  try {
    return body();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

bool read_index(PyObject* argument, DeviceIndex* index) {
  long value = PyLong_AsLong(argument);
  if (value == -1 && PyErr_Occurred()) return false;
  *index = static_cast<DeviceIndex>(value);
  return true;
}

PyObject* py_device_count(PyObject*, PyObject*) { return PyLong_FromLong(device_count()); }

PyObject* py_current_device(PyObject*, PyObject*) {
  return guarded([] { return PyLong_FromLong(current_device()); });
}

PyObject* py_set_device(PyObject*, PyObject* argument) {
  DeviceIndex index = 0;
  if (!read_index(argument, &index)) return nullptr;
  return guarded([index] {
    set_current_device(index);
    Py_RETURN_NONE;
  });
}

PyObject* py_synchronize(PyObject*, PyObject* argument) {
  DeviceIndex index = 0;
  if (!read_index(argument, &index)) return nullptr;
  return guarded([index] {
    check_device(index);
    RUNTIME_CHECK(runtime::synchronize_device(index));
    Py_RETURN_NONE;
  });
}

// torch.Generator objects for the default generators, made once (as torch.cuda.default_generators).
PyObject* py_default_generator(PyObject*, PyObject* argument) {
  DeviceIndex index = 0;
  if (!read_index(argument, &index)) return nullptr;
  return guarded([index]() -> PyObject* {
    static std::vector<PyObject*> wrappers(device_count(), nullptr);
    check_device(index);
    if (wrappers[index] == nullptr) wrappers[index] = THPGenerator_initDefaultGenerator(default_generator(index));
    Py_XINCREF(wrappers[index]);
    return wrappers[index];
  });
}

PyMethodDef g_methods[] = {
    {"device_count", py_device_count, METH_NOARGS, "The number of {{ name }} devices."},
    {"current_device", py_current_device, METH_NOARGS, "This thread's current {{ name }} device."},
    {"set_device", py_set_device, METH_O, "Make a {{ name }} device current for this thread."},
    {"synchronize", py_synchronize, METH_O, "Wait for all work on a {{ name }} device."},
    {"default_generator", py_default_generator, METH_O, "The default torch.Generator of a {{ name }} device."},
    {"start_interface_trace", py_start_interface_trace, METH_O,
     "Record the calls PyTorch makes into {{ name }}'s interfaces; frames under the given paths are not the user's."},
    {"stop_interface_trace", py_stop_interface_trace, METH_NOARGS, "Stop the interface trace; its records in order."},
    {"create_process_group", py_create_process_group, METH_VARARGS,
     "The c10d backend {{ name }}ccl over a Gloo backend (distributed.cpp)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "torch_{{ name }}._C", "{{ name }}'s C++ runtime.", -1, g_methods};

}  // namespace
// [/guide: device_module]

}  // namespace torch_{{ name }}

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&torch_{{ name }}::g_module); }
