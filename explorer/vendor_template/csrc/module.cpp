// Guide step "device_module": the C++ half of torch.{{ name }}, the Python module torch_{{ name }}._C.
//
// torch.{{ name }} (torch_{{ name }}/device_module.py) answers device_count(), current_device(),
// set_device(), synchronize() and the default generators from the functions below. Loading this
// library also runs every other file's registrations (hooks, guard, allocator, operators,
// autocast, profiler). It uses Python's C API directly, which compiles faster than pybind11. What a vendor
// replaces: nothing; add a function here when the device module needs something new from C++.
#include <Python.h>  // first, as Python asks

#include "backend.h"

#include <torch/csrc/Generator.h>

#include <vector>

namespace torch_{{ name }} {

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
    {"create_process_group", py_create_process_group, METH_VARARGS,
     "The c10d backend {{ name }}ccl over a Gloo backend (distributed.cpp)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "torch_{{ name }}._C", "{{ name }}'s C++ runtime.", -1, g_methods};

}  // namespace
// [/guide: device_module]

}  // namespace torch_{{ name }}

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&torch_{{ name }}::g_module); }
