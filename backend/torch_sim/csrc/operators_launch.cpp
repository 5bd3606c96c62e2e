// Step 5, operators (continued): kernel launches. Every kernel sim runs is a launch through its driver's
// simLaunchKernel on the current stream of its device, as a vendor's kernels are launches on its device:
// the driver's executor runs it after the work queued before it, while the host goes on.
//
// A kernel's host code runs on the executor thread, not on the thread that called the operator, so the
// launch carries what that thread's state means to the kernel: PyTorch's thread-local state (grad mode,
// dispatch-key exclusions, the profiler's callbacks), the current device and stream, and the profiler's
// id of the operator that launched it, its number of intra-op threads, and, while the interface trace is on,
// its thread and Python line (the kernel's interface calls are that operator's); a kernel that calls no operator
// (a TensorIterator's loop) goes without PyTorch's thread-local state, which nothing in it reads. Two kinds of launch:
//   run_kernel     waits until the kernel ran and rethrows what it threw: for operators whose outputs only
//                  the kernel can decide (most host kernels size their own outputs). A small one whose loops
//                  run serially at its size (a pointwise kernel, a sum) runs on the calling thread once the work
//                  queued before it has run (simLaunchKernelSync);
//   launch_kernel  returns at once: for kernels whose outputs were allocated before the launch, among them the
//                  foreach and fused optimizer kernels (operators.cpp, compute_on_host). A failure
//                  is the device's, reported by the next synchronising call, naming the kernel.
// A kernel that calls another operator of sim's runs that operator's kernel inline: it is already on the
// device, and the driver refuses a wait from its executor.
#include "sim.h"
#include "interface_trace.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/autograd/python_variable.h>

#include <omp.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sim {
namespace {

thread_local bool t_on_device = false;
thread_local uint64_t t_host_frees_before = 0;  // of the kernel this thread runs

// What a launched kernel runs with: the launching thread's state, and the work itself.
struct Launch {
  bool on_caller;                              // its launching thread runs it (simLaunchKernelSync)
  std::optional<at::ThreadLocalState> state;  // none on the caller, which has that state, or without_caller_state
  c10::Stream stream;
  const std::string* name;
  bool timed;  // the profiler records kernels: the launch notes the device time it ran
  uint64_t correlation;
  int threads = at::get_num_threads();  // the launcher's intra-op threads (torch.set_num_threads)
  uint64_t host_frees = host_frees_so_far();  // the blocks the kernel's own allocations may take (allocator.cpp)
  TraceOrigin origin = interface_trace_on() ? current_trace_origin() : TraceOrigin{};  // for the interface trace
  c10::WarningHandler* warnings = nullptr;  // run_kernel: the caller's handler, alive while it waits
  const c10::function_ref<void()>* body = nullptr;  // run_kernel: the caller's, alive while it waits
  KernelWork work;                                    // launch_kernel: owned by the launch until the kernel ran
  std::exception_ptr error;                           // run_kernel: what the body threw, for the caller
  Launch* next_finished = nullptr;                     // launch_kernel: the list of launches the device ran
  Launch(c10::Stream stream, const std::string& name, bool on_caller = false, bool without_caller_state = false)
      : on_caller(on_caller), stream(stream), name(&name), timed(recording_kernels()),
        correlation(operator_correlation()) {
    if (!on_caller && !without_caller_state) state.emplace();
  }
};

// The current device and stream of the launching thread, on the executor for the kernel's duration.
struct DeviceContext {
  DeviceIndex previous_device = t_current_device;
  c10::Stream previous_stream;
  explicit DeviceContext(const c10::Stream& stream) : previous_stream(exchange_current_stream(stream)) {
    t_current_device = stream.device_index();
  }
  ~DeviceContext() {
    exchange_current_stream(previous_stream);
    t_current_device = previous_device;
  }
};

// A kernel its launching thread runs has one intra-op thread, as it would on the executor (kSmallKernelElements),
// even where it asks for more: a parallel region would start an OpenMP team owned by that thread.
struct OneIntraOpThread {
  int previous = at::get_num_threads();  // also gives this thread its intra-op threads first, if it had none yet
  OneIntraOpThread() {
    if (previous != 1) omp_set_num_threads(1);
  }
  ~OneIntraOpThread() {
    if (previous != 1) omp_set_num_threads(previous);
  }
};

std::string failure_text(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) return c10_error->what_without_backtrace();
  return error.what();
}

int run_launch(void* argument) {
  Launch& launch = *static_cast<Launch*>(argument);
  t_on_device = true;
  t_host_frees_before = launch.host_frees;
  std::optional<OneIntraOpThread> one_thread;
  if (launch.on_caller) {
    one_thread.emplace();
  } else if (at::get_num_threads() != launch.threads) {
    at::set_num_threads(launch.threads);
  }
  try {
    std::optional<at::ThreadLocalStateGuard> state;
    if (launch.state) state.emplace(*launch.state);
    DeviceContext context(launch.stream);
    CorrelationScope correlation(launch.correlation);
    TraceOriginScope origin(launch.origin);
    std::optional<c10::WarningUtils::WarningHandlerGuard> warnings;
    if (launch.warnings != nullptr) warnings.emplace(launch.warnings);
    const int64_t start_ns = launch.timed ? c10::getTime() : 0;
    if (launch.work) {
      launch.work();
    } else {
      (*launch.body)();
    }
    if (start_ns != 0) record_kernel(*launch.name, start_ns, c10::getTime(), launch.stream.device());
  } catch (const std::exception& error) {
    t_on_device = false;
    if (!launch.work) {
      launch.error = std::current_exception();
      return 0;
    }
    simKernelSetErrorMessage(failure_text(error).c_str());
    return 1;
  } catch (...) {
    t_on_device = false;
    if (!launch.work) {
      launch.error = std::current_exception();
      return 0;
    }
    return 1;
  }
  t_on_device = false;
  return 0;
}

// Launches the device ran, waiting for a host thread to release them (HostWait): a list the executor pushes onto
// and a host thread takes whole, without a lock. A launch left at exit is never freed: it would free its tensors
// after Python has gone.
std::atomic<Launch*> g_finished{nullptr};

void release_launch(void* argument) {
  auto* launch = static_cast<Launch*>(argument);
  Launch* head = g_finished.load(std::memory_order_relaxed);
  do {
    launch->next_finished = head;
  } while (!g_finished.compare_exchange_weak(head, launch, std::memory_order_release, std::memory_order_relaxed));
}

}  // namespace

void release_finished_launches() {
  if (t_on_device || g_finished.load(std::memory_order_relaxed) == nullptr) return;
  Launch* finished = g_finished.exchange(nullptr, std::memory_order_acquire);
  while (finished != nullptr) {
    Launch* next = finished->next_finished;
    delete finished;
    finished = next;
  }
}

HostWait::HostWait() {
  if (Py_IsInitialized() && PyGILState_Check()) without_gil_.emplace();
}

HostWait::~HostWait() {
  without_gil_.reset();
  release_finished_launches();
}

bool on_device() { return t_on_device; }
uint64_t host_frees_before_this_kernel() { return t_host_frees_before; }

void run_kernel(c10::Device device, const std::string& name, c10::function_ref<void()> body, bool timed,
                std::optional<int64_t> serial_elements) {
  if (t_on_device) return body();
  const bool on_caller = serial_elements && *serial_elements <= kSmallKernelElements;
  Launch launch(current_stream(device), name, on_caller);
  launch.timed = launch.timed && timed;
  launch.body = &body;
  if (!on_caller) launch.warnings = c10::WarningUtils::get_warning_handler();
  simStream_t stream = driver_stream(launch.stream);
  {
    HostWait wait;
    if (on_caller) {
      driver_call(simLaunchKernelSync(stream, name.c_str(), &run_launch, &launch), "simLaunchKernelSync");
    } else {
      driver_call(simLaunchKernel(stream, name.c_str(), &run_launch, &launch, 0, nullptr), "simLaunchKernel");
      driver_call(simStreamSynchronize(stream), "simStreamSynchronize");
    }
  }
  if (launch.error) std::rethrow_exception(launch.error);
}

void launch_kernel(c10::Device device, const std::string& name, KernelWork work, bool without_caller_state) {
  if (t_on_device) return work();
  release_finished_launches();
  auto launch = std::make_unique<Launch>(current_stream(device), name, false, without_caller_state);
  launch->work = std::move(work);
  simStream_t stream = driver_stream(launch->stream);
  Launch* queued = launch.release();  // the driver calls release_launch once the kernel ran or was discarded
  const simStatus_t status = simLaunchKernel(stream, name.c_str(), &run_launch, queued, 0, &release_launch);
  // simErrorLaunchFailure comes after the kernel ran (SIM_LAUNCH_BLOCKING=1); any other failure, before it was queued
  if (status != simSuccess && status != simErrorLaunchFailure) delete queued;
  driver_call(status, "simLaunchKernel");
}

// The executor's Python thread state, made when it first calls Python and kept until the thread ends. A scoped
// acquire of the GIL on a thread Python did not start makes a thread state and deletes it again at every call,
// which cost a compiled kernel's launch most of its time. Once the interpreter has begun to exit, a thread that
// ends leaves its state to the interpreter: taking the GIL then could stop the thread inside its own exit.
namespace {
std::atomic<bool> g_python_exiting{false};
std::atomic<int> g_python_states_being_deleted{0};

class ExecutorPython {
 public:
  static ExecutorPython& of_this_thread() {
    thread_local ExecutorPython state;
    return state;
  }

  // Holds the GIL for one call, in the thread's kept state (or leaves it to a caller on this thread that holds it).
  struct Call {
    const bool nested = PyGILState_Check();
    Call() {
      if (nested) return;
      ExecutorPython& python = of_this_thread();
      if (python.saved_ == nullptr) {
        python.gil_state_ = PyGILState_Ensure();
      } else {
        PyEval_RestoreThread(std::exchange(python.saved_, nullptr));
      }
    }
    ~Call() {
      if (!nested) of_this_thread().saved_ = PyEval_SaveThread();
    }
  };

  ~ExecutorPython() {
    if (saved_ == nullptr) return;  // it never called Python
    g_python_states_being_deleted.fetch_add(1);
    if (!g_python_exiting.load()) {
      PyEval_RestoreThread(saved_);
      PyGILState_Release(gil_state_);
    }
    g_python_states_being_deleted.fetch_sub(1);
  }

 private:
  PyGILState_STATE gil_state_{};
  PyThreadState* saved_ = nullptr;  // between calls, the kept state
};

// Registered with Python's atexit: from here on, an executor that ends leaves its thread state alone. One ending at
// this moment may be deleting its state: it gets the GIL, for a while (a forked child may have inherited the count
// of a thread it does not have).
void stop_deleting_executor_python() {
  g_python_exiting.store(true);
  pybind11::gil_scoped_release without_gil;
  for (int waited_ms = 0; g_python_states_being_deleted.load() > 0 && waited_ms < 1000; ++waited_ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
}  // namespace

// Runs a kernel compiled for the host (torch.compile's C++ kernels for sim) as a kernel of the device of its first
// sim tensor argument: on the driver's executor, in that device's current stream's order, where device memory is
// open to it. Returns once it ran. `kernel` is a Python callable; the executor takes the GIL to call it.
static void run_host_kernel(const std::string& name, const pybind11::function& kernel, const pybind11::args& args) {
  c10::Device device(kSim, t_current_device);
  for (const auto& argument : args) {
    if (THPVariable_Check(argument.ptr())) {
      const at::Tensor& tensor = THPVariable_Unpack(argument.ptr());
      if (tensor.device().type() == kSim) {
        device = tensor.device();
        break;
      }
    }
  }
  run_kernel(device, name, [&] {
    ExecutorPython::Call with_gil;
    kernel(*args);
  });
}

void bind_launches(pybind11::module& module) {
  module.def("run_host_kernel", &run_host_kernel);
  pybind11::module_::import("atexit").attr("register")(pybind11::cpp_function(&stop_deleting_executor_python));
}

}  // namespace sim
