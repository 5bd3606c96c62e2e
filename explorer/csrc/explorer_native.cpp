// Small native helpers of the explorer engine; nothing here registers anything.
#include <torch/extension.h>

// A scalar as the dispatcher passes it between kernels: a 0-dim CPU tensor marked as
// a "wrapped number", which takes part in type promotion like a Python number does.
// Python kernels receive such tensors as plain numbers; handing them back needs this.
static at::Tensor wrapped_number(pybind11::handle value) {
  c10::Scalar scalar;
  if (PyBool_Check(value.ptr())) {
    scalar = c10::Scalar(value.ptr() == Py_True);
  } else if (PyLong_Check(value.ptr())) {
    scalar = c10::Scalar(static_cast<int64_t>(PyLong_AsLongLong(value.ptr())));
  } else if (PyFloat_Check(value.ptr())) {
    scalar = c10::Scalar(PyFloat_AsDouble(value.ptr()));
  } else if (PyComplex_Check(value.ptr())) {
    scalar = c10::Scalar(c10::complex<double>(PyComplex_RealAsDouble(value.ptr()), PyComplex_ImagAsDouble(value.ptr())));
  } else {
    TORCH_CHECK(false, "wrapped_number expects a bool, int, float or complex");
  }
  at::Tensor tensor = at::scalar_to_tensor(scalar);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("wrapped_number", &wrapped_number);
}
