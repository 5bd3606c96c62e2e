// What the files of sim's C++ runtime share: one section per file that provides it.
// Each .cpp file implements one step of the integration guide; anything only one file
// needs stays inside that file.
#pragma once

#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/GPUTrace.h>

#include "simdriver.h"

#include <atomic>
#include <functional>
#include <cstdint>
#include <optional>
#include <string>

namespace at {
struct HostAllocator;
}  // namespace at

namespace sim {

using c10::DeviceIndex;
constexpr auto kSim = c10::DeviceType::PrivateUse1;

// ------------------------------------------------------------- runtime.cpp
extern std::atomic<int> g_device_count;
extern thread_local DeviceIndex t_current_device;
void check_device_index(DeviceIndex index);  // a clear error for sim:N that does not exist
DeviceIndex checked(int64_t device);          // the same, for indices that come from Python
std::string format_bytes(int64_t bytes);
// sim's PyTorch integration reaches the device only through its driver (backend/simdriver): a failed driver call
// becomes a C++ error (a RuntimeError in Python) with the driver's message, naming the call.
void driver_call(simStatus_t status, const char* call);
// Every registration with the dispatcher goes through here, so that it names the file and the
// line it was made at (the explorer shows them) and lives as long as the process.
torch::Library& new_library(torch::Library::Kind kind, const char* ns, c10::DispatchKey key, const char* file,
                            int line);

// ----------------------------------------------------------- allocator.cpp
c10::DeviceAllocator& device_allocator();
void sim_free(void* ptr);  // the deleter of every block of sim memory
bool is_sim_memory(const c10::Storage& storage);
bool discrete_memory();  // SIM_MEMORY=discrete: host code cannot touch device memory, only kernels and copies
void create_device_memory(int device_count, int64_t capacity);
std::optional<DeviceIndex> device_of_pointer(const void* data);  // nullopt outside sim memory
bool is_pinned_address(const void* data);
at::HostAllocator* pinned_allocator();  // registered for PrivateUse1 by the hooks
// While a host kernel computes for sim:N, the CPU allocator hands out sim:N's memory.
c10::Allocator* redirecting_cpu_allocator();
DeviceIndex exchange_host_redirect(DeviceIndex device);  // -1: no redirect; returns the previous one
// The blocks host threads have freed so far, counted: a kernel allocates only blocks freed before it was launched.
uint64_t host_frees_so_far();

// ------------------------------------------------------------- guard.cpp
c10::impl::DeviceGuardImplInterface& guard_impl();

// ---------------------------------------------------- streams_events.cpp
// PyTorch's device-trace hooks (c10::impl::GPUTrace), while a tool listens (it has a callback in
// torch.sim._gpu_trace): `hook` gets the interpreter's trace. Nothing is told, and nothing paid, while no callback
// is there. A Python error this thread is raising stays pending across the call, which runs Python.
extern std::atomic<bool> g_gpu_trace_listened;
template <typename Hook>
void tell_gpu_trace(Hook&& hook) {
  if (!g_gpu_trace_listened.load(std::memory_order_relaxed)) return;
  const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace();
  if (trace != nullptr && Py_IsInitialized()) {
    pybind11::gil_scoped_acquire gil;
    pybind11::error_scope raising;
    hook(*trace);
  }
}
c10::Stream current_stream(c10::Device device);
c10::Stream exchange_current_stream(c10::Stream stream);
c10::Stream stream_from_pool(c10::Device device, bool high_priority);
c10::Stream new_stream(c10::Device device, int priority);
// The driver's handle of a stream (NULL for a default stream), with the driver's current device set to the stream's.
simStream_t driver_stream(const c10::Stream& stream);
// Blocks the host until the calling thread's current stream of `device` has run all the work queued on it: host
// code that reads or writes the device's memory calls it first. In a kernel it returns at once.
void wait_for_current_stream(DeviceIndex device);
bool query_stream(const c10::Stream& stream);
void synchronize_stream(const c10::Stream& stream);
void synchronize_device(DeviceIndex device);
void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag);
void block_on_event(void* event, const c10::Stream& stream);
bool query_event(void* event);
void synchronize_event(void* event);
void destroy_event(void* event) noexcept;
double elapsed_milliseconds(void* start, void* end);

// ---------------------------------------------------------- generator.cpp
bool generator_installed();
const at::Generator& default_generator(DeviceIndex device);  // device -1: the current device
at::Generator new_generator(DeviceIndex device);
at::Generator host_generator_for(const at::Generator& generator);
// A draw from `stream`'s device's default generator, made by a kernel queued on `stream`: returns the host
// generator the kernel draws from. Until the host saw the stream run it, the generator's state is read and set only
// after it (the host waits), as are draws made at the call or queued on another stream: draws keep the program's order.
at::Generator queue_draw(const c10::Stream& stream);
// Waits until the draws queued from `device`'s default generator ran (a draw made at the call waits first).
void wait_for_queued_draws(DeviceIndex device);
// While a random operator's host kernel computes for a sim device, the host's default
// generator holds that device generator's state (the kernel's sub-operations draw from it too).
struct DeviceRandomScope {
  at::CPUGeneratorImpl* host_default = nullptr;
  at::CPUGeneratorImpl* device_host = nullptr;
  DeviceRandomScope(bool active, DeviceIndex device);
  ~DeviceRandomScope();
};

// ---------------------------------------------------------- operators.cpp
at::Tensor host_view(const at::Tensor& device_tensor);  // the same bytes, as a CPU tensor
// A tensor over `storage`, dispatched as `key`, with `geometry`'s sizes, strides, offset and lazy conjugate and
// negative bits (keys of its key set from the start: no call sets them afterwards).
at::Tensor tensor_on_storage(c10::Storage storage, c10::DispatchKey key, const at::Tensor& geometry);
// An operator's name with its overload ("aten::mul.Tensor"), and its kernel's name in profiler traces and
// graph dumps ("sim::mul.Tensor").
std::string qualified_operator_name(const c10::OperatorHandle& op);
std::string sim_kernel_name(const std::string& qualified_name);
void grow_storage(const c10::Storage& storage, size_t new_bytes);
// Runs an operator's host (CPU) kernel on device memory, from its boxed stack: sim's route for every operator.
void compute_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// A tensor list argument of a foreach or fused optimizer kernel, and whether the kernel writes its tensors.
struct TensorListUse {
  at::TensorList list;
  bool written;
};
bool tensors_a_list_kernel_takes(const std::vector<TensorListUse>& lists, c10::Device device);

// ---------------------------------------------------- operators_launch.cpp
// True while this thread runs a kernel for the device (on the driver's executor).
bool on_device();
// Of the kernel this thread runs: host_frees_so_far() when it was launched.
uint64_t host_frees_before_this_kernel();
// Runs `body` as a kernel on the current stream of `device`, after the work queued there, and returns once it
// ran, rethrowing what it threw. `name` names it in errors and, when `timed`, in the profiler's trace. Called
// from a kernel, it runs `body` at once. `serial_elements`, for a kernel whose host loops split their work between
// threads only above kSmallKernelElements (pointwise kernels), is the elements of all its
// tensors: a small one runs on the calling thread.
void run_kernel(c10::Device device, const std::string& name, c10::function_ref<void()> body, bool timed = true,
                std::optional<int64_t> serial_elements = std::nullopt);
// Such a kernel over at most this many elements in all its tensors runs on the thread that waits for it
// (simLaunchKernelSync) with one intra-op thread, as it would on the executor: the CPU's element-wise and reduction
// loops split their work between threads only above 32,768 elements. It computes the same bits and spares the
// hand-over to the executor and back, which costs more than such a kernel. Only such kernels: others (a matrix
// product, a softmax) may give other bits on one thread than on the CPU's intra-op threads, and a parallel one would
// start an OpenMP team owned by the calling thread, beside the executor's.
constexpr int64_t kSmallKernelElements = 32768;
// What a queued kernel runs: a callable object owned by its launch, and released by a host thread once the
// kernel ran. Made from the object itself, so that the launch allocates nothing more to hold it.
class KernelWork {
 public:
  KernelWork() = default;
  template <class Work>
  explicit KernelWork(std::unique_ptr<Work> work)
      : object_(work.release()),
        run_([](void* object) { (*static_cast<Work*>(object))(); }),
        destroy_([](void* object) { delete static_cast<Work*>(object); }) {}
  KernelWork(KernelWork&& other) noexcept { *this = std::move(other); }
  KernelWork& operator=(KernelWork&& other) noexcept {
    std::swap(object_, other.object_);
    std::swap(run_, other.run_);
    std::swap(destroy_, other.destroy_);
    return *this;
  }
  ~KernelWork() {
    if (object_ != nullptr) destroy_(object_);
  }
  explicit operator bool() const { return object_ != nullptr; }
  void operator()() { run_(object_); }

 private:
  void* object_ = nullptr;
  void (*run_)(void*) = nullptr;
  void (*destroy_)(void*) = nullptr;
};
// Queues `work` as a kernel on the current stream of `device` and returns at once; what it throws becomes the
// device's error, raised by the next synchronising call. `name` must live as long as the process. Called from a
// kernel, it runs `work` at once.
// `work` owns everything it uses (the launch returned long before it runs). A kernel that calls no operator (a
// TensorIterator's loop) is launched `without_caller_state`: the launching thread's state (grad mode, dispatch-key
// exclusions, the profiler's callbacks, Python modes) could change nothing in it, and capturing it costs the
// launching thread more than the loop of a small kernel takes.
void launch_kernel(c10::Device device, const std::string& name, KernelWork work, bool without_caller_state = false);
template <class Callable, class = std::enable_if_t<std::is_invocable_v<Callable&>>>
void launch_kernel(c10::Device device, const std::string& name, Callable work, bool without_caller_state = false) {
  launch_kernel(device, name, KernelWork(std::make_unique<Callable>(std::move(work))), without_caller_state);
}
// A host thread's wait for the device, as a scope around the driver call that waits: the thread lets go of the GIL
// while it waits (a kernel may need it: one registered from Python), and afterwards releases what the kernels
// the device finished owned. The executor never releases a launch itself: freeing a tensor or a dispatch mode
// that Python knows takes the GIL, which a host thread waiting for that executor may hold.
class HostWait {
 public:
  HostWait();
  ~HostWait();
  HostWait(const HostWait&) = delete;
  HostWait& operator=(const HostWait&) = delete;

 private:
  std::optional<pybind11::gil_scoped_release> without_gil_;
};
void release_finished_launches();

// ----------------------------------------------------------- profiler.cpp
bool recording_kernels();
// Records a kernel's device time, on this thread's current stream, for the innermost operator of this thread.
void record_kernel(const std::string& name, int64_t start_ns, int64_t end_ns, c10::Device device);
// The profiler's id of the innermost operator running on this thread (0 outside one), and a scope that makes
// an id the innermost on this thread: a kernel runs with the id of the operator that launched it.
uint64_t operator_correlation();
struct CorrelationScope {
  explicit CorrelationScope(uint64_t id);
  ~CorrelationScope();
};
// While the profiler records, the driver's copies queued in this scope on `stream` are recorded as that
// stream's device activity ("Memcpy HtoD (Pageable -> Device)"), timed by the driver and linked to this thread's
// innermost operator.
class CopyRecordScope {
 public:
  explicit CopyRecordScope(const c10::Stream& stream);
  ~CopyRecordScope();
  CopyRecordScope(const CopyRecordScope&) = delete;
  CopyRecordScope& operator=(const CopyRecordScope&) = delete;

 private:
  uint64_t id_ = 0;
};

// Each file's Python functions, bound into torch_sim._C by runtime.cpp.
void bind_allocator(pybind11::module& module);
void bind_hooks(pybind11::module& module);
void bind_guard(pybind11::module& module);
void bind_operators(pybind11::module& module);
void bind_launches(pybind11::module& module);
void bind_streams_events(pybind11::module& module);
void bind_generator(pybind11::module& module);
void bind_amp(pybind11::module& module);
void bind_serialization(pybind11::module& module);
void bind_profiler(pybind11::module& module);
void bind_distributed(pybind11::module& module);

}  // namespace sim
