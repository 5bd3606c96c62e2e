// "toy": a deliberately small PrivateUse1 backend, the second backend the explorer runs on.
//
// Everything registers from static initializers when the library is loaded. Device memory is
// host memory from malloc, so kernels compute directly on the bytes. The pieces differ from sim
// on purpose: a plain c10::Allocator with no statistics, a guard with only the default stream,
// no generator, no pinned memory, and every operator without a kernel goes through PyTorch's
// copying at::native::cpu_fallback.
#include <Python.h>

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/Dispatch.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace toy {

using c10::DeviceIndex;
constexpr c10::DeviceType kToy = c10::DeviceType::PrivateUse1;
constexpr DeviceIndex kDeviceCount = 2;

thread_local DeviceIndex current_index = 0;

void require_index(DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "toy: device index ", static_cast<int>(index),
              " is out of range (toy has ", static_cast<int>(kDeviceCount), " devices)");
}

// ------------------------------------------------------------------ allocator

void release(void* ptr) { std::free(ptr); }

struct MallocAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::Device device(kToy, current_index);
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &release, device);
    void* ptr = std::malloc(nbytes);
    TORCH_CHECK(ptr != nullptr, "toy: out of host memory allocating ", nbytes, " bytes");
    return c10::DataPtr(ptr, ptr, &release, device);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

MallocAllocator malloc_allocator;
REGISTER_ALLOCATOR(kToy, &malloc_allocator)

// ---------------------------------------------------------------------- guard

struct ToyGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kToy; }
  c10::Device getDevice() const override { return c10::Device(kToy, current_index); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kToy, "toy: cannot make ", device, " current");
    DeviceIndex index = device.has_index() ? device.index() : 0;
    require_index(index);
    current_index = index;
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < kDeviceCount) current_index = device.index();
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device before = getDevice();
    setDevice(device);
    return before;
  }
  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device.has_index() ? device : getDevice());
  }
  c10::Stream getDefaultStream(c10::Device device) const override { return getStream(device); }
  c10::Stream exchangeStream(c10::Stream stream) const override { return getStream(stream.device()); }
  DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, ToyGuard);

// ---------------------------------------------------------------------- hooks

struct ToyHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(DeviceIndex index) const override { return index >= 0 && index < kDeviceCount; }
  DeviceIndex deviceCount() const override { return kDeviceCount; }
  DeviceIndex getCurrentDevice() const override { return current_index; }
  void setCurrentDevice(DeviceIndex index) const override {
    require_index(index);
    current_index = index;
  }
  DeviceIndex exchangeDevice(DeviceIndex index) const override {
    DeviceIndex before = current_index;
    setCurrentDevice(index);
    return before;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex index) const override { return exchangeDevice(index); }
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(kToy, current_index); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), nbytes);
  }
};

const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new ToyHooks());
  return true;
}();

// -------------------------------------------------------------------- kernels

constexpr c10::DispatchKeySet kToyKeys(c10::DispatchKey::PrivateUse1);

// The same bytes seen as a CPU tensor; CPU tensors (wrapped scalars, copy sources) pass through.
at::Tensor on_host(const at::Tensor& tensor) {
  if (tensor.device().is_cpu()) return tensor;
  return at::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.strides(),
                       tensor.options().device(c10::kCPU));
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout>, std::optional<c10::Device> device, std::optional<bool>,
                               std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, &malloc_allocator, kToyKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout>, std::optional<c10::Device> device, std::optional<bool>) {
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, &malloc_allocator, kToyKeys, c10::dtype_or_default(dtype));
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(self.device());
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "toy: resize_ cannot preserve a memory format");
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  TORCH_CHECK(self.sizes() == dst.sizes(), "toy: _copy_from needs equal shapes, got ", self.sizes(), " and ",
              dst.sizes());
  if (dst.numel() > 0) on_host(dst).copy_(on_host(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) { return on_host(self).item(); }

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() > 0) on_host(self).fill_(value);
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &malloc_allocator, /*resizable=*/true);
  return at::native::set_storage_cpu_(self, storage, 0, {0}, {});
}

// Strides that read `tensor` broadcast to `shape`: 0 along every dimension it is repeated in.
std::vector<int64_t> broadcast_strides(const at::Tensor& tensor, c10::IntArrayRef shape) {
  std::vector<int64_t> strides(shape.size(), 0);
  size_t lead = shape.size() - static_cast<size_t>(tensor.dim());
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.size(d) != 1) strides[lead + d] = tensor.stride(d);
  }
  return strides;
}

template <typename T, typename Op>
void binary_loop(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, Op op) {
  c10::IntArrayRef shape = out.sizes();
  std::vector<int64_t> stride_a = broadcast_strides(a, shape), stride_b = broadcast_strides(b, shape);
  std::vector<int64_t> position(shape.size(), 0);
  const T* in_a = a.const_data_ptr<T>();
  const T* in_b = b.const_data_ptr<T>();
  T* result = out.mutable_data_ptr<T>();
  int64_t offset_a = 0, offset_b = 0;
  for (int64_t n = 0, total = out.numel(); n < total; ++n) {
    result[n] = op(in_a[offset_a], in_b[offset_b]);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++position[d] < shape[d]) {
        offset_a += stride_a[d];
        offset_b += stride_b[d];
        break;
      }
      offset_a -= stride_a[d] * (shape[d] - 1);
      offset_b -= stride_b[d] * (shape[d] - 1);
      position[d] = 0;
    }
  }
}

// An operand in the result's dtype, on `device`; CPU operands are accepted only as 0-dim wrapped scalars.
at::Tensor operand(const at::Tensor& tensor, c10::Device device, c10::ScalarType dtype, const char* op) {
  TORCH_CHECK(tensor.device() == device || (tensor.device().is_cpu() && tensor.dim() == 0), "toy: ", op,
              " expects all tensors on ", device, " (or CPU scalars), got a tensor on ", tensor.device());
  return tensor.scalar_type() == dtype ? tensor : tensor.to(dtype);
}

template <typename Combine>
at::Tensor binary(const at::Tensor& self, const at::Tensor& other, const char* name, Combine combine) {
  const at::Tensor& anchor = self.device().type() == kToy ? self : other;
  c10::DeviceGuard guard(anchor.device());
  c10::ScalarType dtype = at::result_type(self, other);
  at::Tensor a = operand(self, anchor.device(), dtype, name), b = operand(other, anchor.device(), dtype, name);
  std::vector<int64_t> shape = at::infer_size(a.sizes(), b.sizes());
  at::Tensor out = at::detail::empty_generic(shape, &malloc_allocator, kToyKeys, dtype, std::nullopt);
  AT_DISPATCH_ALL_TYPES_AND3(c10::kHalf, c10::kBFloat16, c10::kBool, dtype, "toy_binary",
                             [&] { combine(out, a, b, scalar_t{}); });
  return out;
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  return binary(self, other, "add", [&](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, auto tag) {
    using T = decltype(tag);
    T factor = alpha.to<T>();
    binary_loop<T>(out, a, b, [factor](T x, T y) { return static_cast<T>(x + factor * y); });
  });
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  return binary(self, other, "mul", [](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, auto tag) {
    using T = decltype(tag);
    binary_loop<T>(out, a, b, [](T x, T y) { return static_cast<T>(x * y); });
  });
}

// Copies every tensor argument to the CPU (aten::_to_cpu), runs the CPU kernel, copies results back.
void copy_to_host_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(at::native::set_storage_cpu_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("add.Tensor", TORCH_FN(add));
  m.impl("mul.Tensor", TORCH_FN(mul));
  m.impl("sub.Tensor", torch::CppFunction::makeFromBoxedFunction<&copy_to_host_fallback>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&copy_to_host_fallback>());
}

// ------------------------------------------------------------ Python module

PyObject* py_device_count(PyObject*, PyObject*) { return PyLong_FromLong(kDeviceCount); }

PyObject* py_current_device(PyObject*, PyObject*) { return PyLong_FromLong(current_index); }

PyObject* py_set_device(PyObject*, PyObject* argument) {
  long index = PyLong_AsLong(argument);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  if (index < 0 || index >= kDeviceCount) {
    PyErr_Format(PyExc_ValueError, "toy: device index %ld is out of range (toy has %d devices)", index,
                 static_cast<int>(kDeviceCount));
    return nullptr;
  }
  current_index = static_cast<DeviceIndex>(index);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"device_count", py_device_count, METH_NOARGS, "Number of toy devices."},
    {"current_device", py_current_device, METH_NOARGS, "Index of this thread's current toy device."},
    {"set_device", py_set_device, METH_O, "Make a toy device current for this thread."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_definition = {PyModuleDef_HEAD_INIT, "torch_toy._C", "The toy backend's runtime.", -1, methods};

}  // namespace toy

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&toy::module_definition); }
