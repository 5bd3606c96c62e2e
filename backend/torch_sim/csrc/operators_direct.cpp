// Step 5, operators (continued): direct kernels, PyTorch's own structured kernels run on sim tensors.
//
// Most element-wise and reduction operators are structured kernels: a meta() that checks the
// arguments and decides the output's shape, strides and dtype, and an impl() that builds a
// TensorIterator and calls a per-device DispatchStub. A vendor reuses both halves for its own key
// by allocating the outputs itself (set_output_*) and registering its device's loop for each stub
// (set_privateuse1_dispatch_ptr). sim's kernels run on the host (its driver's executor, where device
// memory is open in either memory mode), so its loop for every stub is the CPU's: the call reaches
// the host kernel with no boxed stack, no host aliases and no copy. meta() and the output's allocation run at the call; impl() is a kernel launched on the
// current stream, which returns at once (operators_launch.cpp), as a vendor's launch does. compute_on_host (operators.cpp) remains the route for everything else, and for the calls
// a direct kernel cannot take as the CPU would: arguments on another device, mixed dtypes the
// CPU promotes first, and kernels launched while a stream captures a graph. Each call that takes
// that route is counted against its operator (torch.sim.direct_route_exits()).
#include "sim.h"
#include "graphs.h"
#include "interface_trace.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/Version.h>
#include <ATen/native/Activation.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Fill.h>
#include <ATen/native/Pow.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/_log_softmax_backward_data_native.h>
#include <ATen/ops/_log_softmax_native.h>
#include <ATen/ops/_softmax_backward_data_native.h>
#include <ATen/ops/_softmax_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addmm_native.h>
#include <ATen/ops/amax_native.h>
#include <ATen/ops/_assert_async_native.h>
#include <ATen/ops/_fused_adam_native.h>
#include <ATen/ops/_fused_adamw_native.h>
#include <ATen/ops/_fused_sgd_native.h>
#include <ATen/ops/bmm_native.h>
#include <ATen/ops/clamp_max_native.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/cos_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/eq_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/bernoulli_cpu_dispatch.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_cpu_dispatch.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_cpu_dispatch.h>
#include <ATen/ops/arange_cpu_dispatch.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/cat_cpu_dispatch.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/embedding_dense_backward_cpu_dispatch.h>
#include <ATen/ops/gather_native.h>
#include <ATen/ops/index_select_cpu_dispatch.h>
#include <ATen/ops/where_cpu_dispatch.h>
#include <ATen/ops/native_layer_norm_backward_cpu_dispatch.h>
#include <ATen/ops/native_layer_norm_cpu_dispatch.h>
#include <ATen/ops/nll_loss_backward_native.h>
#include <ATen/ops/nll_loss_forward_native.h>
#include <ATen/ops/ge_native.h>
#include <ATen/ops/gelu_backward_native.h>
#include <ATen/ops/gelu_native.h>
#include <ATen/ops/gt_native.h>
#include <ATen/ops/le_native.h>
#include <ATen/ops/log_native.h>
#include <ATen/ops/lt_native.h>
#include <ATen/ops/maximum_native.h>
#include <ATen/ops/mean_native.h>
#include <ATen/ops/minimum_native.h>
#include <ATen/ops/mm_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/ne_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/pow_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sigmoid_backward_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/tanh_backward_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/tril_native.h>
#include <ATen/ops/triu_native.h>
#include <ATen/ops/where_native.h>
#include <c10/core/DynamicCast.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>

#include "operators_direct.h"

namespace sim {
namespace {

// ------------------------------------------------------------------ stubs
// sim's loop for a stub is the CPU's own function for this processor, chosen by the rule the
// CPU's dispatch follows: the widest instruction set the processor has and the stub provides.
// (setup.py compiles with the instruction-set definitions torch itself was built with.)
template <class Stub>
typename Stub::FnPtr host_loop(Stub&) {
  static const std::string capability = at::get_cpu_capability();
#if defined(HAVE_AVX512_CPU_DEFINITION)
  if (capability == "AVX512" && Stub::AVX512 != nullptr) return Stub::AVX512;
#endif
#if defined(HAVE_AVX2_CPU_DEFINITION)
  if ((capability == "AVX512" || capability == "AVX2") && Stub::AVX2 != nullptr) return Stub::AVX2;
#endif
  TORCH_CHECK(Stub::DEFAULT != nullptr, "sim: a host loop has no kernel for this processor");
  return Stub::DEFAULT;
}
#define SIM_HOST_LOOP(name) at::native::name.set_privateuse1_dispatch_ptr(host_loop(at::native::name))

void install_host_loops() {
  SIM_HOST_LOOP(add_stub);
  SIM_HOST_LOOP(mul_stub);
  SIM_HOST_LOOP(div_true_stub);
  SIM_HOST_LOOP(exp_stub);
  SIM_HOST_LOOP(neg_stub);
  SIM_HOST_LOOP(sqrt_stub);
  SIM_HOST_LOOP(pow_tensor_scalar_stub);
  SIM_HOST_LOOP(rsqrt_stub);
  SIM_HOST_LOOP(log_stub);
  SIM_HOST_LOOP(tanh_stub);
  SIM_HOST_LOOP(sin_stub);
  SIM_HOST_LOOP(cos_stub);
  SIM_HOST_LOOP(sigmoid_stub);
  SIM_HOST_LOOP(clamp_min_scalar_stub);
  SIM_HOST_LOOP(clamp_max_scalar_stub);
  SIM_HOST_LOOP(maximum_stub);
  SIM_HOST_LOOP(minimum_stub);
  SIM_HOST_LOOP(eq_stub);
  SIM_HOST_LOOP(ne_stub);
  SIM_HOST_LOOP(lt_stub);
  SIM_HOST_LOOP(le_stub);
  SIM_HOST_LOOP(gt_stub);
  SIM_HOST_LOOP(ge_stub);
  SIM_HOST_LOOP(max_values_stub);
  SIM_HOST_LOOP(threshold_stub);
  SIM_HOST_LOOP(tanh_backward_stub);
  SIM_HOST_LOOP(sigmoid_backward_stub);
  SIM_HOST_LOOP(fill_stub);
  SIM_HOST_LOOP(where_kernel);
}

// ---------------------------------------------------------------- outputs
// The kernel runs later, on the driver's executor, and outlives the call: it holds its own handles of the
// tensors (the same bytes and geometry, without the Python object or the autograd metadata of the caller's
// tensor, so that dropping them on the executor never needs the GIL) and its own copies of list arguments.
// A handle of device memory does not own it, as a kernel's pointer argument does not on a real device: when
// the caller's tensor dies before the kernel ran, the block returns to the allocator's cache at once, and the
// stream's order keeps its next user after the kernel (the cache hands a block to another stream only once
// the block's stream is idle). Host memory (a 0-dim CPU tensor) the handle owns.
// The handles of one launch share one storage per device storage, so that the kernel sees arguments that
// alias as aliasing (TensorIterator refuses a partial overlap between an input and the output).
thread_local std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> t_launch_storages;
thread_local int t_launches_built = 0;  // LaunchStorages scopes open on this thread

struct LaunchStorages {
  LaunchStorages() { ++t_launches_built; }
  ~LaunchStorages() {
    if (--t_launches_built == 0) t_launch_storages.clear();
  }
};

// Launches are many and alike, so a launching thread reuses the byte storages and the handles of device memory
// that launches the device has run no longer hold, instead of allocating new ones: it keeps a reference to each
// in a ring, and an entry whose only reference is the ring's is free. (An entry still in use when the ring comes
// round to it is left to its launch and replaced.)
bool present(const c10::Storage& storage) { return static_cast<bool>(storage); }
bool present(const at::Tensor& tensor) { return tensor.defined(); }

template <class Entry>
class Recycler {
 public:
  // The ring's next entry if it is free, or a new one from `make`, which the ring then keeps.
  template <class Make>
  Entry& next(bool* reused, Make make) {
    Entry& slot = ring_[cursor_++ % ring_.size()];
    *reused = present(slot) && slot.use_count() == 1;
    if (!*reused) slot = make();
    return slot;
  }

 private:
  std::array<Entry, 256> ring_;
  size_t cursor_ = 0;
};
thread_local Recycler<c10::Storage> t_byte_storages;
thread_local Recycler<at::Tensor> t_device_handles;

c10::Storage device_bytes(const c10::Storage& storage) {
  for (const auto& [owner, bytes] : t_launch_storages)
    if (owner == storage.unsafeGetStorageImpl()) return bytes;
  void* data = storage.unsafeGetStorageImpl()->mutable_data();
  bool reused = false;
  c10::Storage& bytes = t_byte_storages.next(&reused, [&] {
    return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(), c10::DataPtr(data, storage.device()),
                        /*allocator=*/nullptr, /*resizable=*/false);
  });
  if (reused) {
    bytes.set_data_ptr_noswap(c10::DataPtr(data, storage.device()));
    bytes.set_nbytes(storage.nbytes());
  }
  if (t_launches_built > 0) t_launch_storages.emplace_back(storage.unsafeGetStorageImpl(), bytes);
  return bytes;
}

// A handle of device memory: plain ones (no conjugate or negative bit) come from the thread's ring.
at::Tensor device_handle(const at::Tensor& t) {
  auto fresh = [&] { return tensor_on_storage(device_bytes(t.storage()), c10::DispatchKey::PrivateUse1, t); };
  if (t.is_conj() || t.is_neg()) return fresh();
  bool reused = false;
  at::Tensor& handle = t_device_handles.next(&reused, fresh);
  if (reused) {
    c10::TensorImpl* impl = handle.unsafeGetTensorImpl();
    impl->set_storage_and_dtype(device_bytes(t.storage()), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  }
  return handle;
}

at::Tensor kernel_handle(const at::Tensor& t) {
  if (!t.defined()) return t;
  if (t.device().type() == kSim) return device_handle(t);
  at::Tensor handle = tensor_on_storage(c10::Storage(t.storage()), c10::DispatchKey::CPU, t);
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) handle.unsafeGetTensorImpl()->set_wrapped_number(true);
  return handle;
}

// The arguments of a CPU impl() that runs on the host views of sim tensors.
template <class T>
const T& host_argument(const T& value) {
  return value;
}
at::Tensor host_argument(const at::Tensor& t) { return host_view(t); }
// An optional tensor argument (`weight` of nll_loss) as impl() takes it, a reference, to a host view this owns.
struct HostOptionalTensor {
  at::Tensor view;
  operator at::OptionalTensorRef() const {
    return view.defined() ? at::OptionalTensorRef(view) : at::OptionalTensorRef();
  }
};
HostOptionalTensor host_argument(const at::OptionalTensorRef& t) {
  return {t.has_value() ? host_view(*t) : at::Tensor()};
}

at::Tensor device_output(c10::IntArrayRef sizes, c10::IntArrayRef strides, const c10::TensorOptions& options) {
  TORCH_CHECK(options.device().type() == kSim, "sim: a direct kernel's output must live on sim, not ",
              options.device());
  DeviceIndex previous = t_current_device;
  t_current_device = options.device().has_index() ? options.device().index() : previous;
  struct Restore {
    DeviceIndex device;
    ~Restore() { t_current_device = device; }
  } restore{previous};
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  if (strides.empty())
    return at::detail::empty_generic(sizes, &device_allocator(), keys, options.dtype().toScalarType(),
                                     options.memory_format_opt());
  return at::detail::empty_strided_generic(sizes, strides, &device_allocator(), keys,
                                           options.dtype().toScalarType());
}

// A structured kernel whose outputs sim allocates (the functional form: `mul`; `nll_loss_forward` has two).
// `on_host_views`: its impl() is the CPU's own and takes the host views of its tensors (see DirectHostImpl).
template <class Kernel, bool on_host_views = false, size_t output_count = 1>
struct Functional final : Kernel {
  template <class Arguments>
  explicit Functional(const Arguments&) {}
  std::array<at::Tensor, output_count> outputs;  // what the call returns
  std::array<at::Tensor, output_count> handles;  // the launch's handles of them (kernel_handle), which it computes into
  void set_output_strided(int64_t index, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          c10::TensorOptions options) override {
    SIM_TRACE("structured_kernel", "set_output_strided", c10::str("index=", index, " sizes=", sizes));
    set(index, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t index, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    SIM_TRACE("structured_kernel", "set_output_raw_strided", c10::str("index=", index, " sizes=", sizes));
    set(index, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t index) override {
    SIM_TRACE("structured_kernel", "maybe_get_output", c10::str("index=", index));
    return handles.at(index);
  }
  template <class... Args>
  void impl_on_device(const Args&... args) {
    impl_into(std::make_index_sequence<output_count>(), args...);
  }

 private:
  template <size_t... index, class... Args>
  void impl_into(std::index_sequence<index...>, const Args&... args) {
    if constexpr (on_host_views) {
      this->impl(host_argument(args)..., host_view(handles[index])...);
    } else {
      this->impl(args..., handles[index]...);
    }
  }
  void set(int64_t index, c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::TensorOptions options) {
    outputs.at(index) = device_output(sizes, strides, options);
    handles[index] = kernel_handle(outputs[index]);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Kernel>)
      Kernel::set_output_raw_strided(index, sizes, strides, options);
  }
};

// A structured kernel writing into its first argument (the in-place form: `mul_`). When the
// kernel wants other strides than the argument's, it computes into a proxy that is copied back.
template <class Kernel>
struct InPlace final : Kernel {
  template <class Arguments>
  explicit InPlace(const Arguments& arguments) : self(std::get<0>(arguments)) {}
  const at::Tensor& self;  // the launch's handle of the argument
  std::optional<at::Tensor> proxy;
  void set_output_strided(int64_t index, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          c10::TensorOptions options) override {
    SIM_TRACE("structured_kernel", "set_output_strided", c10::str("index=", index, " sizes=", sizes, " in place"));
    check(sizes, options);
    if (self.strides() != strides) proxy = device_output(sizes, strides, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Kernel>)
      Kernel::set_output_raw_strided(index, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t index, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    SIM_TRACE("structured_kernel", "set_output_raw_strided", c10::str("index=", index, " sizes=", sizes, " in place"));
    check(sizes, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Kernel>)
      Kernel::set_output_raw_strided(index, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t index) override {
    SIM_TRACE("structured_kernel", "maybe_get_output", c10::str("index=", index, " in place"));
    return proxy ? *proxy : self;
  }
  template <class... Args>
  void impl_on_device(const Args&... args) {
    this->impl(args..., maybe_get_output(0));
  }

 private:
  void check(c10::IntArrayRef sizes, const c10::TensorOptions& options) const {
    TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: the result's dtype ", options.dtype(),
                " differs from the tensor's, ", self.dtype());
    TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: the result's size ", sizes,
                " differs from the tensor's, ", self.sizes());
  }
};

// ------------------------------------------------------------ eligibility
// A direct kernel takes sim tensors and, as the CPU does, 0-dim CPU tensors (Python numbers).
template <class T>
bool accepted(const T&) {
  return true;
}
bool accepted(const at::Tensor& t) {
  return t.defined() && (t.device().type() == kSim || (t.device().is_cpu() && t.dim() == 0));
}

// An optional tensor argument that is given (`weight`): a tensor like the others; one that is not: no tensor at all.
bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

template <class T>
bool on_sim(const T&) {
  return true;
}
bool on_sim(const at::Tensor& t) { return t.defined() && t.device().type() == kSim; }
bool on_sim(const std::optional<at::Tensor>& t) { return !given(t) || on_sim(*t); }

// When the computation's dtype differs from an input's, TensorIterator converts that input first,
// but only when the common device is the CPU; such calls need care (see promoted below).
bool computes_as_the_cpu(const at::TensorIteratorBase& kernel) {
  const auto common = kernel.maybe_common_dtype();
  if (!common) return true;
  for (int i = 0; i < kernel.ninputs(); ++i)
    if (kernel.input_dtype(i) != *common) return false;
  return true;
}

// The CPU converts a 0-dim CPU input of another dtype with a cast of its value; sim does the same
// before the kernel sees it. Half and bfloat16 computations are left to the boxed route: some CPU
// loops read such an input's value as it was before the conversion.
bool converts_like_the_cpu(c10::ScalarType common) {
  return !at::isReducedFloatingType(common) && !c10::isQIntType(common) && !c10::isBitsType(common) &&
         !c10::isFloat8Type(common) && !c10::isBarebonesUnsignedType(common);
}
template <class T>
bool promotable(const T&, c10::ScalarType) {
  return true;
}
bool promotable(const at::Tensor& t, c10::ScalarType common) {
  if (t.device().type() == kSim) return t.scalar_type() == common;
  const auto type = t.scalar_type();
  return type == common || type == c10::kDouble || type == c10::kFloat || type == c10::kLong ||
         type == c10::kInt || type == c10::kShort || type == c10::kChar || type == c10::kByte ||
         type == c10::kBool || type == c10::kComplexDouble || type == c10::kComplexFloat;
}
template <class T>
const T& promoted(const T& value, c10::ScalarType) {
  return value;
}
at::Tensor promoted(const at::Tensor& t, c10::ScalarType common) {
  if (t.device().type() == kSim || t.scalar_type() == common) return t;
  at::Tensor result = at::detail::empty_cpu({}, common, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  const void* source = t.const_data_ptr();
  void* target = result.mutable_data_ptr();
  const auto type = t.scalar_type();
  if (c10::isComplexType(type)) {
    c10::cast_and_store(common, target, c10::fetch_and_cast<c10::complex<double>>(type, source));
  } else if (c10::isFloatingType(type)) {
    c10::cast_and_store(common, target, c10::fetch_and_cast<double>(type, source));
  } else {
    c10::cast_and_store(common, target, c10::fetch_and_cast<int64_t>(type, source));
  }
  return result;
}

// ------------------------------------------------------------------ calls
struct Registered {
  c10::OperatorHandle op;
  std::string kernel_name;  // "sim::mul.Tensor", as compute_on_host names it in profiler traces
  std::atomic<int64_t>* route_exits;  // the calls of this operator that took the boxed route instead
  // its host loops split their work between threads only above kSmallKernelElements (run_kernel)
  bool serial_when_small = op.hasTag(at::Tag::pointwise);
};

// The first launch of an operator with each combination of operand dtypes runs to its end before the call
// returns: a host loop refuses a dtype it has no loop for only when it runs, and the CPU raises that refusal
// at the call, as CUDA does (it chooses its loop by dtype when it launches). Later launches of a combination
// that ran return at once.
template <class T>
uint64_t kind_of(const T&) {
  return 0;
}
uint64_t kind_of(const at::Tensor& t) {
  if (!t.defined()) return 0;
  return 1 + static_cast<uint64_t>(t.scalar_type()) + (t.device().type() == kSim ? 0 : 256);
}
uint64_t kind_of(const c10::Scalar& s) { return 1 + static_cast<uint64_t>(s.type()); }
uint64_t kind_of(const std::optional<at::Tensor>& t) { return given(t) ? kind_of(*t) : 0; }

template <class... Args>
uint64_t operand_kinds(const Args&... args) {
  uint64_t kinds = 0;
  ((kinds = kinds * 1031 + kind_of(args)), ...);
  return kinds;
}

std::mutex g_launched_kinds_mutex;
std::set<std::pair<const Registered*, uint64_t>> g_launched_kinds;

template <class Launch>
void launch_direct(const Registered& registered, c10::Device device, uint64_t kinds, std::unique_ptr<Launch> launch) {
  bool launched_before = false;
  {
    std::lock_guard<std::mutex> lock(g_launched_kinds_mutex);
    launched_before = g_launched_kinds.count({&registered, kinds}) > 0;
  }
  if (!launched_before) {
    run_kernel(device, registered.kernel_name, [&] { (*launch)(); });
    std::lock_guard<std::mutex> lock(g_launched_kinds_mutex);
    g_launched_kinds.insert({&registered, kinds});
    return;
  }
  launch_kernel(device, registered.kernel_name, KernelWork(std::move(launch)), Launch::calls_no_operator);
}

template <class... Args>
torch::jit::Stack boxed_stack(const Args&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  (torch::jit::push(stack, args), ...);
  return stack;
}

// The boxed route's results, as the operator returns them.
template <class... Args>
torch::jit::Stack host_route_results(const Registered& registered, const Args&... args) {
  registered.route_exits->fetch_add(1, std::memory_order_relaxed);
  auto stack = boxed_stack(args...);
  compute_on_host(registered.op, &stack);
  return stack;
}

template <size_t... index>
auto tensors_of(torch::jit::Stack&& stack, std::index_sequence<index...>) {
  return std::make_tuple(std::move(stack[index]).toTensor()...);
}

// The boxed route's results as an operator of `output_count` tensor results returns them.
template <size_t output_count, class... Args>
auto host_route_tensors(const Registered& registered, const Args&... args) {
  return tensors_of(host_route_results(registered, args...), std::make_index_sequence<output_count>());
}

template <class... Args>
at::Tensor on_host_route(const Registered& registered, const Args&... args) {
  auto stack = host_route_results(registered, args...);
  return stack.empty() ? at::Tensor() : std::move(stack.back()).toTensor();  // empty: an operator with no result
}

// ------------------------------------------------------------ launches
template <class T>
T held(const T& value) {
  return value;
}
at::Tensor held(const at::Tensor& t) { return kernel_handle(t); }
std::vector<int64_t> held(c10::IntArrayRef list) { return list.vec(); }
std::string held(c10::string_view text) { return std::string(text); }
std::optional<at::Tensor> held(const std::optional<at::Tensor>& t) {
  return given(t) ? std::optional<at::Tensor>(kernel_handle(*t)) : std::nullopt;
}
std::optional<std::vector<int64_t>> held(at::OptionalIntArrayRef list) {
  return list ? std::optional<std::vector<int64_t>>(list->vec()) : std::nullopt;
}

template <class T>
const T& used(const T& value) {
  return value;
}
at::OptionalIntArrayRef used(const std::optional<std::vector<int64_t>>& list) {
  return list ? at::OptionalIntArrayRef(c10::IntArrayRef(*list)) : at::OptionalIntArrayRef();
}

c10::string_view used(const std::string& text) { return text; }
at::OptionalTensorRef used(const std::optional<at::Tensor>& t) {
  return t ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}

template <class T>
using Held = decltype(held(std::declval<const T&>()));

// A structured kernel's launch: meta() runs at the call, on the kernel's handles of the arguments (so that its
// TensorIterator borrows tensors the launch owns); impl() runs on the device.
template <class Kernel, class... Args>
struct StructuredLaunch {
  // A TensorIterator kernel's impl() hands the iterator to its DispatchStub: the loop, and no other operator.
  static constexpr bool calls_no_operator = std::is_base_of_v<at::TensorIteratorBase, Kernel>;
  std::tuple<Held<Args>...> arguments;
  Kernel kernel;
  explicit StructuredLaunch(const Args&... args) : arguments(held(args)...), kernel(arguments) {}
  void meta() {
    std::apply([&](const auto&... args) { kernel.meta(used(args)...); }, arguments);
  }
  void operator()() {
    std::apply([&](const auto&... args) { kernel.impl_on_device(used(args)...); }, arguments);
  }
};

// A direct kernel never takes a zero tensor: its handle would lose the key.
// The elements of the tensor arguments, for run_kernel.
template <class T>
int64_t elements(const T&) {
  return 0;
}
int64_t elements(const at::Tensor& t) { return t.defined() ? t.numel() : 0; }

template <class T>
bool plain(const T&) {
  return true;
}
bool plain(const at::Tensor& t) { return !t.defined() || !t.key_set().has(c10::DispatchKey::ZeroTensor); }
bool plain(const std::optional<at::Tensor>& t) { return !given(t) || plain(*t); }

template <class Kernel, class... Args>
std::optional<at::Tensor> run_functional(const Registered& registered, bool may_promote, const Args&... args) {
  LaunchStorages storages;
  auto launch = std::make_unique<StructuredLaunch<Functional<Kernel>, Args...>>(args...);
  launch->meta();
  auto& kernel = launch->kernel;
  if constexpr (std::is_base_of_v<at::TensorIteratorBase, Kernel>) {
    if (!computes_as_the_cpu(kernel)) {
      const auto common = kernel.maybe_common_dtype();
      if (!may_promote || !common || !converts_like_the_cpu(*common) || !(promotable(args, *common) && ...))
        return std::nullopt;
      return run_functional<Kernel>(registered, false, promoted(args, *common)...);
    }
  }
  at::Tensor output = std::move(kernel.outputs[0]);  // the caller's: the launch computes into its handle only
  launch_direct(registered, output.device(), operand_kinds(args...), std::move(launch));
  return output;
}

template <class Kernel, class... Args>
struct DirectFunctional {
  static inline std::optional<Registered> registered;

  static at::Tensor call(Args... args) {
    if (!any_capture() && (accepted(args) && ...) && (plain(args) && ...))
      if (auto result = run_functional<Kernel>(*registered, true, args...)) return std::move(*result);
    return on_host_route(*registered, args...);
  }
};

// An overload taking a Python number (`gt.Scalar`) runs the tensor overload's kernel with the number
// as a 0-dim CPU tensor, which is what the CPU's own kernel for the overload does.
template <class Kernel>
struct DirectScalarOverload {
  static inline std::optional<Registered> registered;

  static at::Tensor call(const at::Tensor& self, const c10::Scalar& other) {
    if (!any_capture() && on_sim(self))
      if (auto result = run_functional<Kernel>(*registered, true, self, at::native::wrapped_scalar_tensor(other)))
        return std::move(*result);
    return on_host_route(*registered, self, other);
  }
};

// pow's impl() fills its output with ones for an exponent of 0, and copies the base into it for an exponent of 1:
// operators, where a launched TensorIterator kernel may run its loop only (StructuredLaunch::calls_no_operator). Such
// a call allocates the output meta() decides and runs those operators at the call, in the stream's order; any other
// exponent is a direct kernel of pow's loop.
struct DirectPowTensorScalar {
  using Kernel = at::native::structured_pow_Tensor_Scalar_out;
  static inline std::optional<Registered> registered;

  static at::Tensor call(const at::Tensor& self, const c10::Scalar& exponent) {
    if (any_capture() || !on_sim(self) || !plain(self)) return on_host_route(*registered, self, exponent);
    const bool fills_ones = exponent.equal(0.0) || exponent.equal(false);
    const bool copies_base = exponent.equal(1.0) || exponent.equal(true);
    if (!fills_ones && !copies_base) {
      if (auto result = run_functional<Kernel>(*registered, true, self, exponent)) return std::move(*result);
      return on_host_route(*registered, self, exponent);
    }
    LaunchStorages storages;
    StructuredLaunch<Functional<Kernel>, at::Tensor, c10::Scalar> launch(self, exponent);
    launch.meta();
    at::Tensor output = std::move(launch.kernel.outputs[0]);
    return fills_ones ? output.fill_(1) : output.copy_(self);
  }
};

template <class Kernel, class... Args>
struct DirectInPlace {
  static inline std::optional<Registered> registered;

  static at::Tensor& call(at::Tensor& self, Args... args) {
    if (any_capture() || !on_sim(self) || !plain(self) || !(accepted(args) && ...) || !(plain(args) && ...) ||
        !run(self, true, args...))
      on_host_route(*registered, self, args...);
    return self;
  }

  template <class... Given>
  static bool run(at::Tensor& self, bool may_promote, const Given&... args) {
    LaunchStorages storages;
    auto launch = std::make_unique<StructuredLaunch<InPlace<Kernel>, at::Tensor, Given...>>(self, args...);
    launch->meta();
    auto& kernel = launch->kernel;
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Kernel>) {
      if (!computes_as_the_cpu(kernel)) {
        const auto common = kernel.maybe_common_dtype();
        if (!may_promote || !common || *common != self.scalar_type() || !converts_like_the_cpu(*common) ||
            !(promotable(args, *common) && ...))
          return false;
        return run(self, false, promoted(args, *common)...);
      }
    }
    std::optional<at::Tensor> proxy = kernel.proxy;
    launch_direct(*registered, self.device(), operand_kinds(self, args...), std::move(launch));
    if (proxy) self.copy_(*proxy);
    return true;
  }
};

// A structured kernel whose impl() takes another path on the CPU than on other devices (`mean` sums
// and divides on the CPU only; `sum` accumulates half precision in a float buffer on the CPU only), or
// is the CPU's own impl() (`structured_mm_out_cpu`, which calls the host's BLAS or oneDNN on CPU tensors): meta() runs at
// the call on the launch's handles, impl() on the device on their host views.
template <class T>
bool agrees(const T&, std::optional<c10::Device>&) {
  return true;
}
bool agrees(const at::Tensor& t, std::optional<c10::Device>& device) {
  if (!device) device = t.device();
  return t.device() == *device;
}
bool agrees(const std::optional<at::Tensor>& t, std::optional<c10::Device>& device) {
  return !given(t) || agrees(*t, device);
}
// Every tensor on one sim device: a meta() that does not build a TensorIterator checks no devices.
template <class... Args>
bool on_one_sim_device(const Args&... args) {
  std::optional<c10::Device> device;
  return (on_sim(args) && ...) && (agrees(args, device) && ...);
}

template <class Kernel, class... Args>
struct DirectHostImpl {
  static inline std::optional<Registered> registered;

  static at::Tensor call(Args... args) {
    if (!direct(args...)) return on_host_route(*registered, args...);
    return std::move(launched<1>(args...)[0]);
  }

  static bool direct(const Args&... args) {
    return !any_capture() && on_one_sim_device(args...) && (plain(args) && ...);
  }

  // meta() at the call, impl() queued; returns the caller's outputs (the launch computes into its handles only).
  // impl() is the CPU's, which may call operators of its own on the host views: the launch carries the caller's
  // thread-local state, so that they run on the executor as they would have run at the call.
  template <size_t output_count>
  static std::array<at::Tensor, output_count> launched(const Args&... args) {
    LaunchStorages storages;
    auto launch = std::make_unique<StructuredLaunch<Functional<Kernel, true, output_count>, Args...>>(args...);
    launch->meta();
    std::array<at::Tensor, output_count> outputs = std::move(launch->kernel.outputs);
    launch_direct(*registered, outputs[0].device(), operand_kinds(args...), std::move(launch));
    return outputs;
  }
};

// gelu and its gradient. Their impl() reads the name of the approximation, which the call checks first, so that a
// wrong name is refused there, as on the CPU, and not by the device later. The CPU's impl() takes oneDNN for a
// contiguous float input, and oneDNN refuses a gradient and an input of two shapes: such calls take the boxed route,
// which raises that refusal at the call, as the CPU does (autograd's calls have one shape).
struct DirectGelu : DirectHostImpl<at::native::structured_gelu_out_cpu, const at::Tensor&, c10::string_view> {
  static at::Tensor call(const at::Tensor& self, c10::string_view approximate) {
    at::native::get_gelutype_enum(approximate);
    return DirectHostImpl::call(self, approximate);
  }
};

struct DirectGeluBackward
    : DirectHostImpl<at::native::structured_gelu_backward_out_cpu, const at::Tensor&, const at::Tensor&,
                     c10::string_view> {
  static at::Tensor call(const at::Tensor& grad, const at::Tensor& self, c10::string_view approximate) {
    at::native::get_gelutype_enum(approximate);
    if (grad.sizes() != self.sizes()) return on_host_route(*registered, grad, self, approximate);
    return DirectHostImpl::call(grad, self, approximate);
  }
};

// The gradient of softmax or log_softmax, from the forward's output. The CPU's meta() never compares the two shapes,
// and its loop reads as many elements of the output as the gradient has: sim refuses a call whose shapes differ,
// which would read past the output's memory.
template <class Kernel>
struct DirectSoftmaxBackward
    : DirectHostImpl<Kernel, const at::Tensor&, const at::Tensor&, int64_t, c10::ScalarType> {
  static at::Tensor call(const at::Tensor& grad, const at::Tensor& output, int64_t dim, c10::ScalarType input_dtype) {
    TORCH_CHECK(grad.sizes() == output.sizes(), DirectSoftmaxBackward::registered->op.operator_name().name,
                " needs the gradient (sizes ", grad.sizes(), ") and the forward's output (sizes ", output.sizes(),
                ") of one shape; pass the output that the forward returned for this gradient");
    return DirectSoftmaxBackward::DirectHostImpl::call(grad, output, dim, input_dtype);
  }
};

// The negative log-likelihood loss and its gradient, as cross_entropy calls them. The forward has two outputs, the
// loss and the total weight of the targets counted. Both check at the call what their meta() checks (shapes); the
// targets' values the kernel reads on the device, so a class out of range is the device's error, raised by the next
// synchronising call, as CUDA's device-side assertion is.
struct DirectNllLossForward
    : DirectHostImpl<at::native::structured_nll_loss_forward_out_cpu, const at::Tensor&, const at::Tensor&,
                     const std::optional<at::Tensor>&, int64_t, int64_t> {
  static std::tuple<at::Tensor, at::Tensor> call(const at::Tensor& self, const at::Tensor& target,
                                                 const std::optional<at::Tensor>& weight, int64_t reduction,
                                                 int64_t ignore_index) {
    if (!direct(self, target, weight, reduction, ignore_index))
      return host_route_tensors<2>(*registered, self, target, weight, reduction, ignore_index);
    auto [output, total_weight] = launched<2>(self, target, weight, reduction, ignore_index);
    return {std::move(output), std::move(total_weight)};
  }
};

using DirectNllLossBackward =
    DirectHostImpl<at::native::structured_nll_loss_backward_out_cpu, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, const std::optional<at::Tensor>&, int64_t, int64_t, const at::Tensor&>;

// ------------------------------------------------- sized at the call, computed by the CPU's operator
// An operator that is neither structured nor device-generic (`native_layer_norm`), on calls whose outputs sim sizes
// at the call by the CPU kernel's own rule, so that its kernel is queued: the CPU's kernel runs on the device, on
// host views (called as `at::cpu::`, not through the dispatcher again), and its results are copied into the outputs.
// Other calls take the boxed route, which raises the CPU's own errors at the call. A result of other geometry than
// its output fails the kernel, naming both.
std::optional<at::Tensor> host_argument(const std::optional<at::Tensor>& t) {
  return given(t) ? std::optional<at::Tensor>(host_view(*t)) : std::nullopt;
}

template <size_t output_count>
void copy_results(const Registered& registered, const std::array<at::Tensor, output_count>& outputs,
                  const std::array<at::Tensor, output_count>& results) {
  for (size_t index = 0; index < output_count; ++index) {
    if (!outputs[index].defined()) continue;
    const at::Tensor& result = results[index];
    TORCH_CHECK(result.sizes() == outputs[index].sizes() && result.strides() == outputs[index].strides() &&
                    result.dtype() == outputs[index].dtype(),
                "sim sized output ", index, " of ", registered.op.operator_name().name, " (sizes ",
                outputs[index].sizes(), ", strides ", outputs[index].strides(), ", ", outputs[index].dtype(),
                ") unlike the CPU's kernel (sizes ", result.sizes(), ", strides ", result.strides(), ", ",
                result.dtype(), "); report it with the call that did this");
    host_view(outputs[index]).copy_(result);
  }
}

at::Tensor contiguous_output(c10::IntArrayRef sizes, const at::Tensor& like) {
  return at::empty(sizes, like.options().memory_format(at::MemoryFormat::Contiguous));
}

// The floating dtypes the CPU's layer norm and embedding gradient compute in.
bool computed_floating(c10::ScalarType type) {
  return type == c10::kFloat || type == c10::kDouble || type == c10::kHalf || type == c10::kBFloat16;
}

// A parameter of layer norm (weight, bias) as the CPU's kernel takes it without converting anything: absent, or of the
// normalized shape and the input's dtype.
bool plain_parameter(const std::optional<at::Tensor>& parameter, c10::IntArrayRef normalized_shape,
                     const at::Tensor& input) {
  return !given(parameter) ||
         (plain(*parameter) && parameter->sizes() == normalized_shape && parameter->dtype() == input.dtype());
}

// The input, on one sim device with its parameters, normalized over its last dimensions, in a dtype the CPU's kernel
// computes in, with parameters of its own dtype (mixed precision takes the boxed route).
bool layer_norm_sized_at_call(const at::Tensor& input, c10::IntArrayRef normalized_shape,
                              const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  const auto normalized_dims = static_cast<int64_t>(normalized_shape.size());
  return !any_capture() && on_one_sim_device(input, weight, bias) && plain(input) &&
         computed_floating(input.scalar_type()) && normalized_dims > 0 && input.dim() >= normalized_dims &&
         input.sizes().slice(input.dim() - normalized_dims) == normalized_shape &&
         plain_parameter(weight, normalized_shape, input) && plain_parameter(bias, normalized_shape, input);
}

// The sizes of layer norm's mean and reciprocal standard deviation: the input's, with 1 for each normalized dimension.
std::vector<int64_t> layer_norm_statistics_sizes(const at::Tensor& input, c10::IntArrayRef normalized_shape) {
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - normalized_shape.size());
  sizes.resize(input.dim(), 1);
  return sizes;
}

struct DirectLayerNorm {
  static inline std::optional<Registered> registered;
  using Results = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

  static Results call(const at::Tensor& input, c10::IntArrayRef normalized_shape,
                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
    if (!layer_norm_sized_at_call(input, normalized_shape, weight, bias))
      return host_route_tensors<3>(*registered, input, normalized_shape, weight, bias, eps);
    const auto statistics = layer_norm_statistics_sizes(input, normalized_shape);
    Results outputs{contiguous_output(input.sizes(), input), contiguous_output(statistics, input),
                    contiguous_output(statistics, input)};
    launch_kernel(input.device(), registered->kernel_name,
                  [input = kernel_handle(input), shape = normalized_shape.vec(), weight = held(weight),
                   bias = held(bias), eps,
                   handles = std::array{kernel_handle(std::get<0>(outputs)), kernel_handle(std::get<1>(outputs)),
                                        kernel_handle(std::get<2>(outputs))}] {
                    auto [output, mean, rstd] = at::cpu::native_layer_norm(host_view(input), shape,
                                                                           host_argument(weight), host_argument(bias),
                                                                           eps);
                    copy_results<3>(*registered, handles, {output, mean, rstd});
                  });
    return outputs;
  }
};

// Its gradient: of the input (contiguous, as the input's), of the weight and of the bias (each as the parameter),
// the ones `output_mask` asks for. The forward's mean and deviation must have its sizes and the input's dtype.
struct DirectLayerNormBackward {
  static inline std::optional<Registered> registered;
  using Results = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

  static bool sized_at_call(const at::Tensor& grad_out, const at::Tensor& input, c10::IntArrayRef normalized_shape,
                            const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
    const auto statistics = layer_norm_statistics_sizes(input, normalized_shape);
    const auto like_the_forward = [&](const at::Tensor& t) {
      return plain(t) && t.sizes() == c10::IntArrayRef(statistics) && t.dtype() == input.dtype();
    };
    return layer_norm_sized_at_call(input, normalized_shape, weight, bias) &&
           on_one_sim_device(grad_out, input, mean, rstd) && plain(grad_out) && grad_out.sizes() == input.sizes() &&
           grad_out.dtype() == input.dtype() && like_the_forward(mean) && like_the_forward(rstd) &&
           (!output_mask[1] || given(weight)) && (!output_mask[2] || given(bias));
  }

  static Results call(const at::Tensor& grad_out, const at::Tensor& input, c10::IntArrayRef normalized_shape,
                      const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
    if (!sized_at_call(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask))
      return host_route_tensors<3>(*registered, grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                   output_mask);
    Results outputs{output_mask[0] ? contiguous_output(input.sizes(), input) : at::Tensor(),
                    output_mask[1] ? contiguous_output(weight->sizes(), *weight) : at::Tensor(),
                    output_mask[2] ? contiguous_output(bias->sizes(), *bias) : at::Tensor()};
    launch_kernel(input.device(), registered->kernel_name,
                  [grad_out = kernel_handle(grad_out), input = kernel_handle(input), shape = normalized_shape.vec(),
                   mean = kernel_handle(mean), rstd = kernel_handle(rstd), weight = held(weight), bias = held(bias),
                   output_mask,
                   handles = std::array{kernel_handle(std::get<0>(outputs)), kernel_handle(std::get<1>(outputs)),
                                        kernel_handle(std::get<2>(outputs))}] {
                    auto [input_gradient, weight_gradient, bias_gradient] = at::cpu::native_layer_norm_backward(
                        host_view(grad_out), host_view(input), shape, host_view(mean), host_view(rstd),
                        host_argument(weight), host_argument(bias), output_mask);
                    copy_results<3>(*registered, handles, {input_gradient, weight_gradient, bias_gradient});
                  });
    return outputs;
  }
};

// The gradient of an embedding's weight: a row for each of `num_weights` rows, of the gradient's last size. Calls whose
// indices are of the dtypes the CPU takes and number the gradient's rows, with a floating gradient, are queued.
struct DirectEmbeddingBackward {
  static inline std::optional<Registered> registered;

  static bool sized_at_call(const at::Tensor& grad, const at::Tensor& indices, int64_t num_weights) {
    return !any_capture() && on_one_sim_device(grad, indices) && plain(grad) && plain(indices) &&
           computed_floating(grad.scalar_type()) &&
           (indices.scalar_type() == c10::kLong || indices.scalar_type() == c10::kInt) && grad.dim() > 0 &&
           num_weights >= 0 && grad.numel() == indices.numel() * grad.size(-1);
  }

  static at::Tensor call(const at::Tensor& grad, const at::Tensor& indices, int64_t num_weights, int64_t padding_idx,
                         bool scale_grad_by_freq) {
    if (!sized_at_call(grad, indices, num_weights))
      return on_host_route(*registered, grad, indices, num_weights, padding_idx, scale_grad_by_freq);
    at::Tensor output = contiguous_output({num_weights, grad.size(-1)}, grad);
    launch_kernel(grad.device(), registered->kernel_name,
                  [grad = kernel_handle(grad), indices = kernel_handle(indices), num_weights, padding_idx,
                   scale_grad_by_freq, handle = kernel_handle(output)] {
                    at::Tensor result = at::cpu::embedding_dense_backward(host_view(grad), host_view(indices),
                                                                          num_weights, padding_idx, scale_grad_by_freq);
                    copy_results<1>(*registered, {handle}, {result});
                  });
    return output;
  }
};

// ------------------------------------------------------------------------------------------- dropout
// The output `a * b` has on the CPU (shape, strides and dtype, as mul's meta() decides them), allocated on a's device.
at::Tensor product_output(const at::Tensor& a, const at::Tensor& b) {
  LaunchStorages storages;
  StructuredLaunch<Functional<at::native::structured_mul_out>, at::Tensor, at::Tensor> product(a, b);
  product.meta();
  return std::move(product.kernel.outputs[0]);
}

// `a * b * scale` into `output`, in the CPU's two steps (the product, rounded to its dtype, then the scaling).
void scaled_product(at::Tensor output, const at::Tensor& a, const at::Tensor& b, double scale) {
  at::mul_out(output, a, b);
  output.mul_(scale);
}

// native_dropout as the CPU computes it in training: a boolean mask drawn from the default generator (bernoulli_
// with the probability of keeping an element), and the input times the mask times 1 / that probability. Both
// outputs are allocated at the call, as the CPU lays them out (the mask like the input, the output as the product's
// TensorIterator decides), and the draw and the products are one kernel, queued. It draws from the device's
// generator when it runs, which the host waits for wherever it reads or sets that generator's state (queue_draw),
// so that every draw sees the state the program's order gives it. An empty input, and a call outside training,
// draw nothing and run at the call, as the CPU's do. Other dtypes, and a probability outside [0, 1], take the boxed
// route, which raises the CPU's error at the call, as do calls before the bring-up's generator step is installed.
struct DirectNativeDropout {
  static inline std::optional<Registered> registered;

  static std::tuple<at::Tensor, at::Tensor> call(const at::Tensor& input, double p, std::optional<bool> train) {
    if (any_capture() || !on_sim(input) || !plain(input))
      return host_route_tensors<2>(*registered, input, p, train);
    if (input.numel() == 0) return {input, at::empty_like(input, input.options())};
    const auto mask_options = input.options().dtype(at::kBool);
    if (!train.value_or(true)) return {input.clone(), at::ones_like(input, mask_options)};
    const double keep = 1. - p;
    if (!computed_floating(input.scalar_type()) || !(keep >= 0 && keep <= 1) || !generator_installed())
      return host_route_tensors<2>(*registered, input, p, train);
    const double scale = keep == 0 ? 0. : 1. / keep;
    at::Tensor mask = at::empty_like(input, mask_options);
    at::Tensor output = product_output(input, mask);
    launch_kernel(input.device(), registered->kernel_name,
                  [input = kernel_handle(input), mask = kernel_handle(mask), output = kernel_handle(output), keep,
                   scale, generator = queue_draw(current_stream(input.device()))] {
                    at::Tensor drawn = host_view(mask);
                    at::cpu::bernoulli_(drawn, keep, generator);
                    scaled_product(host_view(output), host_view(input), drawn, scale);
                  });
    return {output, mask};
  }
};

// Its gradient, the gradient times the mask times the scale, as the CPU computes it, for a floating product of
// tensors on one sim device; other calls (an integer gradient, whose product becomes floating only with the scale)
// take the boxed route.
struct DirectNativeDropoutBackward {
  static inline std::optional<Registered> registered;

  static at::Tensor call(const at::Tensor& grad, const at::Tensor& mask, double scale) {
    if (any_capture() || !on_one_sim_device(grad, mask) || !plain(grad) || !plain(mask))
      return on_host_route(*registered, grad, mask, scale);
    at::Tensor output = product_output(grad, mask);
    if (!computed_floating(output.scalar_type())) return on_host_route(*registered, grad, mask, scale);
    launch_kernel(grad.device(), registered->kernel_name,
                  [grad = kernel_handle(grad), mask = kernel_handle(mask), output = kernel_handle(output), scale] {
                    scaled_product(host_view(output), host_view(grad), host_view(mask), scale);
                  });
    return output;
  }
};

// A native function that is not structured but device-generic (`where`), called as it is.
template <auto function, class Result, class... Args>
struct DirectNative {
  static inline std::optional<Registered> registered;

  static Result call(Args... args) {
    if (any_capture() || !(on_sim(args) && ...)) {
      if constexpr (std::is_reference_v<Result>) {
        on_host_route(*registered, args...);
        return std::get<written_argument()>(std::forward_as_tuple(args...));
      } else {
        return on_host_route(*registered, args...);
      }
    }
    const c10::Device device = first_device(args...);
    if constexpr (std::is_reference_v<Result>) {
      run_kernel(device, registered->kernel_name, [&] { function(args...); }, true, serial_elements(args...));
      return std::get<written_argument()>(std::forward_as_tuple(args...));
    } else {
      Result result;
      run_kernel(device, registered->kernel_name, [&] { result = function(args...); }, true,
                 serial_elements(args...));
      return result;
    }
  }

  // The elements of the arguments of an operator whose loops run serially when small, for run_kernel.
  static std::optional<int64_t> serial_elements(const Args&... args) {
    if (!registered->serial_when_small) return std::nullopt;
    return (elements(args) + ...);
  }

  // The argument an in-place or out= function writes and returns: its one non-const tensor.
  static constexpr size_t written_argument() {
    constexpr bool written[] = {std::is_same_v<Args, at::Tensor&>...};
    for (size_t i = 0; i < sizeof...(Args); ++i)
      if (written[i]) return i;
    return 0;
  }

  template <class First, class... Rest>
  static c10::Device first_device(const First& first, const Rest&... rest) {
    if constexpr (std::is_same_v<std::decay_t<First>, at::Tensor>) {
      return first.device();
    } else {
      return first_device(rest...);
    }
  }
};

// A native function whose body only checks its arguments and calls other operators (`relu` is `clamp_min(self, 0)`, on
// every device): it runs at the call, on the calling thread, and the kernels of the operators it calls are launched, and
// queued, as theirs are. Other calls take DirectNative's host route.
template <auto function, class Result, class... Args>
struct DirectComposite : DirectNative<function, Result, Args...> {
  static Result call(Args... args) {
    if (any_capture() || !(on_sim(args) && ...)) return DirectNative<function, Result, Args...>::call(args...);
    return function(args...);
  }
};

// The dtypes every CPU kernel the direct kernels run has a loop for.
bool standard_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::kBool: case c10::kByte: case c10::kChar: case c10::kShort: case c10::kInt: case c10::kLong:
    case c10::kHalf: case c10::kBFloat16: case c10::kFloat: case c10::kDouble: case c10::kComplexFloat:
    case c10::kComplexDouble:
      return true;
    default:
      return false;
  }
}

// fill_ with a number: the one way a fill fails is a number its tensor's dtype cannot hold, and the CPU and CUDA
// both convert the number before their loop, so the conversion runs at the call and the fill is queued. Dtypes
// other than the standard ones take DirectNative's route, whose kernel the host waits for.
struct DirectFill : DirectNative<static_cast<at::Tensor& (*)(at::Tensor&, const c10::Scalar&)>(&at::native::fill_),
                                 at::Tensor&, at::Tensor&, const c10::Scalar&> {
  static at::Tensor& call(at::Tensor& self, const c10::Scalar& value) {
    if (any_capture() || !on_sim(self) || !plain(self) || !standard_dtype(self.scalar_type()))
      return DirectNative::call(self, value);
    AT_DISPATCH_V2(self.scalar_type(), "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), c10::kHalf, c10::kBFloat16, c10::kBool);
    launch_kernel(self.device(), registered->kernel_name,
                  [handle = kernel_handle(self), value] () mutable { at::native::fill_(handle, value); },
                  /*without_caller_state=*/true);
    return self;
  }
};

// clone: the result is allocated at the call as PyTorch's own clone allocates it (the source's strides where it is
// dense, else those of the memory format), and the copy into it is a kernel, queued; the copy resolves a conjugate
// or negative view's bit, as the CPU's does.
struct DirectClone {
  static inline std::optional<Registered> registered;
  static at::Tensor call(const at::Tensor& self, std::optional<at::MemoryFormat> memory_format) {
    if (any_capture() || !on_sim(self) || !plain(self)) return on_host_route(*registered, self, memory_format);
    const auto format = memory_format.value_or(at::MemoryFormat::Preserve);
    at::Tensor result = format == at::MemoryFormat::Preserve && self.is_non_overlapping_and_dense()
                            ? at::empty_strided(self.sizes(), self.strides(), self.options())
                            : at::empty_like(self, self.options(), format);
    launch_copy(self, result, registered->kernel_name);
    return result;
  }
};

// where of a boolean condition and two values of one standard dtype, all on one sim device (and an out= of that dtype
// there): the output is sized at the call by the TensorIterator that the CPU's where builds (which resizes an empty
// output), and the CPU's where runs into it on the device. Other calls (a conversion first, a 0-dim value on the CPU)
// run as DirectNative's, on the device.
constexpr at::Tensor (*where_of_tensors)(const at::Tensor&, const at::Tensor&, const at::Tensor&) = &at::native::where;

bool where_of_one_dtype(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  return !any_capture() && on_one_sim_device(condition, self, other) && plain(condition) && plain(self) &&
         plain(other) && condition.scalar_type() == at::kBool && self.scalar_type() == other.scalar_type() &&
         standard_dtype(self.scalar_type());
}

// Sizes `output` (resizing it, as the CPU's where does) by the TensorIterator the CPU's where builds, which raises at the
// call what that iterator refuses, and queues the CPU's where into it.
void launch_where(const Registered& registered, const at::Tensor& condition, const at::Tensor& self,
                  const at::Tensor& other, const at::Tensor& output) {
  at::TensorIteratorConfig()
      .check_all_same_dtype(false)
      .add_output(output)
      .add_const_input(condition)
      .add_const_input(self)
      .add_const_input(other)
      .build();
  launch_kernel(self.device(), registered.kernel_name,
                [condition = kernel_handle(condition), self = kernel_handle(self), other = kernel_handle(other),
                 output = kernel_handle(output)] {
                  at::Tensor into = host_view(output);
                  at::cpu::where_out(into, host_view(condition), host_view(self), host_view(other));
                });
}

struct DirectWhere
    : DirectNative<where_of_tensors, at::Tensor, const at::Tensor&, const at::Tensor&, const at::Tensor&> {
  static at::Tensor call(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
    if (!where_of_one_dtype(condition, self, other)) return DirectNative::call(condition, self, other);
    at::Tensor output = at::empty({0}, self.options());
    launch_where(*registered, condition, self, other, output);
    return output;
  }
};

// The out= form, into an output of the values' dtype on their device; other calls run as DirectNative's.
struct DirectWhereOut : DirectNative<&at::native::where_self_out, at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, at::Tensor&> {
  static at::Tensor& call(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                          at::Tensor& out) {
    if (!where_of_one_dtype(condition, self, other) || !on_one_sim_device(self, out) || !plain(out) ||
        out.scalar_type() != self.scalar_type())
      return DirectNative::call(condition, self, other, out);
    launch_where(*registered, condition, self, other, out);
    return out;
  }
};

// ------------------------------------------------------------------------------------ ranges
// arange's out= form, which torch.arange calls on every device (a model's positions). The CPU's own rule runs at the
// call on a meta tensor of the output's dtype: it sizes the output and raises at the call every error the CPU raises
// (a zero step, a range that does not end). The CPU resizes an output only when its number of elements differs, and
// warns when it had elements: an empty output is resized at the call, one with elements takes the boxed route, which
// warns as the CPU does. The CPU's kernel fills the output on the device.
struct DirectArange {
  static inline std::optional<Registered> registered;

  static at::Tensor& call(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, at::Tensor& out) {
    const c10::ScalarType type = out.scalar_type();  // the dtypes of the CPU's kernel; others raise its error
    if (any_capture() || !on_sim(out) || !plain(out) || !standard_dtype(type) || type == c10::kBool ||
        c10::isComplexType(type)) {
      on_host_route(*registered, start, end, step, out);
      return out;
    }
    at::Tensor sized = at::empty({0}, out.options().device(c10::kMeta));
    at::native::arange_out(start, end, step, sized);  // not through the dispatcher: one arange a call, as profiled
    if (out.numel() != sized.numel()) {
      if (out.numel() > 0) {
        on_host_route(*registered, start, end, step, out);
        return out;
      }
      out.resize_({sized.numel()});
    }
    // the CPU's kernel fills a contiguous tensor and copies it into any other, which refuses an overlapping one
    if (!out.is_contiguous()) at::assert_no_internal_overlap(out);
    launch_kernel(out.device(), registered->kernel_name, [start, end, step, out = kernel_handle(out)] {
      at::Tensor into = host_view(out);
      at::cpu::arange_out(into, start, end, step);
    });
    return out;
  }
};

// ------------------------------------------------------------------------------------ gathering rows
// index_select (an embedding's lookup), gather (a BERT's token types, looked up by position; a structured kernel,
// DirectHostImpl, installed below) and cat (the gradient of a split, joined key and value heads), for tensors on
// one sim device of the standard dtypes. The output is sized at the call by the CPU's own rule (cat's and gather's
// meta(), cat's run on the meta device; index_select's contiguous result), which also raises at the call every error
// those rules raise; the CPU's kernel runs on the device into it. An index out of range is read on the device, so it
// is the device's error, raised by the next synchronising call (SIM_LAUNCH_BLOCKING=1: by the call), as on CUDA.
struct DirectIndexSelect {
  static inline std::optional<Registered> registered;

  static bool sized_at_call(const at::Tensor& self, const at::Tensor& index) {
    return !any_capture() && on_one_sim_device(self, index) && plain(self) && plain(index) &&
           standard_dtype(self.scalar_type()) &&
           (index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt) && index.dim() <= 1 &&
           (self.dim() > 0 || index.numel() == 1);
  }

  static at::Tensor call(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
    if (!sized_at_call(self, index)) return on_host_route(*registered, self, dim, index);
    dim = at::maybe_wrap_dim(dim, self.dim());
    std::vector<int64_t> sizes = self.sizes().vec();
    if (self.dim() > 0) sizes[dim] = index.numel();
    at::Tensor output = contiguous_output(sizes, self);
    launch_kernel(self.device(), registered->kernel_name,
                  [self = kernel_handle(self), dim, index = kernel_handle(index), output = kernel_handle(output)] {
                    at::Tensor into = host_view(output);
                    at::cpu::index_select_out(into, host_view(self), dim, host_view(index));
                  });
    return output;
  }
};

struct DirectCat {
  static inline std::optional<Registered> registered;

  static at::Tensor call(const at::ITensorListRef& tensors, int64_t dim) {
    std::optional<c10::Device> device;
    bool sized_at_call = !any_capture();
    for (const at::Tensor& t : tensors)
      sized_at_call = sized_at_call && on_sim(t) && agrees(t, device) && plain(t) && standard_dtype(t.scalar_type());
    if (!sized_at_call || !device)
      return on_host_route(*registered, std::vector<at::Tensor>(tensors.begin(), tensors.end()), dim);
    const at::Tensor shape = at::meta::cat(tensors, dim);
    at::Tensor output = at::empty_strided(shape.sizes(), shape.strides(), shape.options().device(*device));
    std::vector<at::Tensor> handles;
    for (const at::Tensor& t : tensors) handles.push_back(kernel_handle(t));
    launch_kernel(*device, registered->kernel_name,
                  [handles = std::move(handles), dim, output = kernel_handle(output)] {
                    std::vector<at::Tensor> views;
                    views.reserve(handles.size());
                    for (const at::Tensor& handle : handles) views.push_back(host_view(handle));
                    at::Tensor into = host_view(output);
                    at::cpu::cat_out(into, views, dim);
                  });
    return output;
  }
};

// ------------------------------------------------------------------------------------------ fused optimizers
// The fused optimizers' updates (`_fused_adamw_`, `_fused_adam_`, `_fused_sgd_`), which update their lists in place and
// return nothing. A call whose lists the CPU's kernel takes as they are (the rule of the boxed route's queued updates,
// tensors_a_list_kernel_takes in operators.cpp), with its optional scale and flag on the same device, is queued: the
// launch holds handles of every tensor, and the CPU's kernel runs on their host views on the device. Any other call
// takes the boxed route, where the CPU's kernel raises its own error at the call.

// What a fused update's launch keeps of an argument: handles of its tensors, its numbers as they are.
template <class T>
auto kept(const T& value) {
  if constexpr (std::is_same_v<T, at::TensorList>) {
    std::vector<at::Tensor> handles;
    handles.reserve(value.size());
    for (const at::Tensor& t : value) handles.push_back(kernel_handle(t));
    return handles;
  } else {
    return held(value);
  }
}

// A kept argument as the CPU's kernel takes it, on the device: host views of the handles.
template <class T>
auto on_host(const T& value) {
  if constexpr (std::is_same_v<T, std::vector<at::Tensor>>) {
    std::vector<at::Tensor> views;
    views.reserve(value.size());
    for (const at::Tensor& handle : value) views.push_back(host_view(handle));
    return views;
  } else if constexpr (std::is_same_v<T, std::optional<at::Tensor>>) {
    return value ? std::optional<at::Tensor>(host_view(*value)) : std::nullopt;
  } else {
    return value;
  }
}

template <class T>
void add_list(const T&, std::vector<TensorListUse>&, bool) {}
void add_list(at::TensorList list, std::vector<TensorListUse>& lists, bool written) { lists.push_back({list, written}); }

// A scale or a flag the kernel reads from device memory: absent, or one float on the lists' device.
template <class T>
bool a_read_number(const T&, c10::Device) {
  return true;
}
bool a_read_number(const std::optional<at::Tensor>& t, c10::Device device) {
  return !given(t) || (t->device() == device && t->scalar_type() == c10::kFloat && t->numel() == 1 && plain(*t));
}

template <auto function, class Signature = decltype(function)>
struct DirectFusedUpdate;

template <auto function, class... Args>
struct DirectFusedUpdate<function, void (*)(Args...)> {
  static inline std::optional<Registered> registered;

  static void call(Args... args) {
    std::vector<TensorListUse> lists;
    const auto& arguments = registered->op.schema().arguments();
    size_t index = 0;
    ((add_list(args, lists, arguments[index].alias_info() != nullptr && arguments[index].alias_info()->isWrite()),
      ++index), ...);
    const std::optional<c10::Device> device = lists.front().list.empty()
                                                  ? std::nullopt
                                                  : std::optional<c10::Device>(lists.front().list.front().device());
    if (any_capture() || !device || device->type() != kSim || !tensors_a_list_kernel_takes(lists, *device) ||
        !(a_read_number(args, *device) && ...)) {
      on_host_route(*registered, args...);
      return;
    }
    LaunchStorages storages;
    launch_direct(*registered, *device, operand_kinds(lists.front().list.front()), std::make_unique<Launch>(args...));
  }

  struct Launch {
    static constexpr bool calls_no_operator = false;  // the kernel reads each step's number with item()
    std::tuple<decltype(kept(std::declval<const std::decay_t<Args>&>()))...> arguments;
    explicit Launch(const Args&... args) : arguments(kept(args)...) {}
    void operator()() {
      std::apply([](const auto&... kept_arguments) { function(on_host(kept_arguments)...); }, arguments);
    }
  };
};

// ------------------------------------------------------------------------------------------ attention
// The CPU's flash attention (PrivateUse1's attention hook runs it, torch_sim/operators.py) and its gradient, for
// query, key and value of one floating dtype on one sim device, of shapes (batch, heads, tokens, features) that agree,
// and an additive mask the CPU's kernel broadcasts (2 or 4 dimensions, each of its size or 1; float or the query's
// dtype). The outputs are allocated at the call as the CPU allocates them (the result like the query, the log-sum-exp
// and the gradients in the (batch, tokens, heads) order the kernel writes), and the CPU's kernel runs on the device
// into host copies that are copied into them. Other calls take the boxed route, which raises the CPU's error at the
// call; what the CPU's kernel cannot compute is refused at the call (check_attention_inputs).
bool attention_heads(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value) {
  return query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && computed_floating(query.scalar_type()) &&
         key.scalar_type() == query.scalar_type() && value.scalar_type() == query.scalar_type() &&
         key.size(0) == query.size(0) && value.size(0) == query.size(0) && key.size(1) == query.size(1) &&
         value.size(1) == query.size(1) && value.size(2) == key.size(2) && key.size(3) == query.size(3) &&
         value.size(3) == query.size(3);
}

bool broadcast_mask(const std::optional<at::Tensor>& mask, const at::Tensor& query, const at::Tensor& key) {
  if (!given(mask)) return true;
  const at::Tensor& m = *mask;
  if (!plain(m) || (m.scalar_type() != c10::kFloat && m.scalar_type() != query.scalar_type())) return false;
  if (m.dim() != 2 && m.dim() != 4) return false;
  const auto one_or = [](int64_t size, int64_t full) { return size == 1 || size == full; };
  const bool leading = m.dim() == 2 || (one_or(m.size(0), query.size(0)) && one_or(m.size(1), query.size(1)));
  return leading && one_or(m.size(-2), query.size(2)) && one_or(m.size(-1), key.size(2));
}

// Refuses, on either route, what the CPU's flash kernel cannot compute: it divides by the numbers of heads and tokens
// of the query and the key (without them it stops the process), and reads each row of features of its tensors as
// contiguous (with other strides its result is wrong).
void check_attention_inputs(const at::Tensor& query, const at::Tensor& key,
                            std::initializer_list<std::pair<const char*, const at::Tensor*>> rows) {
  if (query.dim() != 4 || key.dim() != 4) return;
  TORCH_CHECK_VALUE(query.size(1) > 0 && query.size(2) > 0 && key.size(1) > 0 && key.size(2) > 0,
                    "sim: flash attention needs at least one head and one token in the query and the key, got a "
                    "query of sizes ", query.sizes(), " and a key of sizes ", key.sizes(), " (the CPU's flash kernel "
                    "divides by these numbers and stops the process); call scaled_dot_product_attention, which "
                    "computes empty attention another way");
  for (const auto& [name, t] : rows)
    TORCH_CHECK_VALUE(!t->defined() || t->dim() != 4 || t->size(3) <= 1 || t->stride(3) == 1,
                      "sim: flash attention reads each row of features as contiguous, but ", name, " has strides ",
                      t->strides(), " (the CPU's flash kernel gives a wrong result for it); pass ", name,
                      ".contiguous(), or call scaled_dot_product_attention");
}

// The log-sum-exp (batch, heads, tokens) in the query's math dtype, laid out (batch, tokens, heads) as the kernel
// writes it.
at::Tensor attention_logsumexp(const at::Tensor& query) {
  const auto options = query.options().dtype(at::toOpMathType(query.scalar_type()));
  return at::empty({query.size(0), query.size(2), query.size(1)}, options).transpose(1, 2);
}

// A gradient of `like`'s sizes, laid out (batch, tokens, heads, features) as the kernel writes it.
at::Tensor attention_gradient(const at::Tensor& like) {
  return at::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options()).transpose(1, 2);
}

struct DirectFlashAttention {
  static inline std::optional<Registered> registered;
  using Results = std::tuple<at::Tensor, at::Tensor>;

  static Results call(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double dropout_p,
                      bool is_causal, const std::optional<at::Tensor>& attn_mask, std::optional<double> scale) {
    check_attention_inputs(query, key, {{"query", &query}, {"key", &key}, {"value", &value}});
    if (any_capture() || !on_one_sim_device(query, key, value, attn_mask) || !plain(query) || !plain(key) ||
        !plain(value) || dropout_p != 0.0 || !attention_heads(query, key, value) ||
        !broadcast_mask(attn_mask, query, key))
      return host_route_tensors<2>(*registered, query, key, value, dropout_p, is_causal, attn_mask, scale);
    Results outputs{at::empty_like(query), attention_logsumexp(query)};
    launch_kernel(query.device(), registered->kernel_name,
                  [query = kernel_handle(query), key = kernel_handle(key), value = kernel_handle(value), is_causal,
                   mask = held(attn_mask), scale,
                   handles = std::array{kernel_handle(std::get<0>(outputs)), kernel_handle(std::get<1>(outputs))}] {
                    auto [output, logsumexp] = at::cpu::_scaled_dot_product_flash_attention_for_cpu(
                        host_view(query), host_view(key), host_view(value), 0.0, is_causal, host_argument(mask),
                        scale);
                    copy_results<2>(*registered, handles, {output, logsumexp});
                  });
    return outputs;
  }
};

struct DirectFlashAttentionBackward {
  static inline std::optional<Registered> registered;
  using Results = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

  // The forward's result and log-sum-exp as the forward makes them, and a gradient like the result.
  static bool from_the_forward(const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& out,
                               const at::Tensor& logsumexp) {
    const auto like_the_result = [&](const at::Tensor& t) {
      return plain(t) && t.sizes() == query.sizes() && t.scalar_type() == query.scalar_type();
    };
    return like_the_result(grad_out) && like_the_result(out) && plain(logsumexp) &&
           logsumexp.sizes() == query.sizes().slice(0, 3) &&
           logsumexp.scalar_type() == at::toOpMathType(query.scalar_type());
  }

  static Results call(const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
                      const at::Tensor& value, const at::Tensor& out, const at::Tensor& logsumexp, double dropout_p,
                      bool is_causal, const std::optional<at::Tensor>& attn_mask, std::optional<double> scale) {
    if (grad_out.defined())
      check_attention_inputs(query, key, {{"query", &query}, {"key", &key}, {"value", &value}, {"out", &out}});
    if (any_capture() || !grad_out.defined() ||
        !on_one_sim_device(grad_out, query, key, value, out, logsumexp, attn_mask) || !plain(query) || !plain(key) ||
        !plain(value) || dropout_p != 0.0 || !attention_heads(query, key, value) ||
        !broadcast_mask(attn_mask, query, key) || !from_the_forward(grad_out, query, out, logsumexp))
      return host_route_tensors<3>(*registered, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
                                   attn_mask, scale);
    Results outputs{attention_gradient(query), attention_gradient(key), attention_gradient(value)};
    launch_kernel(query.device(), registered->kernel_name,
                  [grad_out = kernel_handle(grad_out), query = kernel_handle(query), key = kernel_handle(key),
                   value = kernel_handle(value), out = kernel_handle(out), logsumexp = kernel_handle(logsumexp),
                   is_causal, mask = held(attn_mask), scale,
                   handles = std::array{kernel_handle(std::get<0>(outputs)), kernel_handle(std::get<1>(outputs)),
                                        kernel_handle(std::get<2>(outputs))}] {
                    auto [grad_query, grad_key, grad_value] =
                        at::cpu::_scaled_dot_product_flash_attention_for_cpu_backward(
                            host_view(grad_out), host_view(query), host_view(key), host_view(value), host_view(out),
                            host_view(logsumexp), 0.0, is_causal, host_argument(mask), scale);
                    copy_results<3>(*registered, handles, {grad_query, grad_key, grad_value});
                  });
    return outputs;
  }
};

// torch._assert_async: the host's check runs on the device, and its failure is the device's, raised by the
// next synchronising call, as CUDA's device-side assertions are.
void check_on_device(const at::Tensor& condition, const std::optional<std::string>& message) {
  if (message) {
    at::native::_assert_async_msg_cpu(host_view(condition), *message);
  } else {
    at::native::_assert_async_cpu(host_view(condition));
  }
}

void launch_assert(const Registered& registered, const at::Tensor& condition, std::optional<std::string> message) {
  TORCH_CHECK(condition.numel() == 1, "torch._assert_async on sim needs a tensor of one element, got ",
              condition.numel(), " elements");
  launch_kernel(condition.device(), registered.kernel_name,
                [condition = kernel_handle(condition), message = std::move(message)] {
                  check_on_device(condition, message);
                });
}

struct DirectAssertAsync {
  static inline std::optional<Registered> registered;
  static void call(const at::Tensor& condition) {
    if (any_capture() || !on_sim(condition) || !plain(condition)) {
      on_host_route(*registered, condition);
      return;
    }
    launch_assert(*registered, condition, std::nullopt);
  }
};

struct DirectAssertAsyncWithMessage {
  static inline std::optional<Registered> registered;
  static void call(const at::Tensor& condition, c10::string_view message) {
    if (any_capture() || !on_sim(condition) || !plain(condition)) {
      on_host_route(*registered, condition, std::string(message));
      return;
    }
    launch_assert(*registered, condition, std::string(message));
  }
};

std::vector<std::string> g_direct_operators;
// One counter per entry of g_direct_operators (a deque: its elements never move once made).
std::deque<std::atomic<int64_t>> g_route_exits;

Registered registration(const char* name, std::atomic<int64_t>& route_exits) {
  std::string qualified = std::string("aten::") + name;
  const auto dot = qualified.find('.');
  const std::string base = qualified.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
  return {c10::Dispatcher::singleton().findSchemaOrThrow(base.c_str(), overload.c_str()),
          sim_kernel_name(qualified), &route_exits};
}

template <class Direct>
void install(torch::Library& m, const char* name) {
  Direct::registered = registration(name, g_route_exits.emplace_back(0));
  m.impl(name, TORCH_FN(Direct::call));
  g_direct_operators.emplace_back(name);
}

// The calls of each direct operator that left its direct kernel for the boxed route, by "aten::name.overload";
// operators with none are left out.
std::map<std::string, int64_t> route_exits() {
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i < g_direct_operators.size(); ++i)
    if (const int64_t count = g_route_exits[i].load(std::memory_order_relaxed))
      counts["aten::" + g_direct_operators[i]] = count;
  return counts;
}

// The assertions are not direct kernels of a host loop (torch_sim.operators.direct_operators() leaves them out).
void install_assert_async(torch::Library& m) {
  static std::atomic<int64_t> plain_exits{0}, message_exits{0};
  DirectAssertAsync::registered = registration("_assert_async", plain_exits);
  DirectAssertAsyncWithMessage::registered = registration("_assert_async.msg", message_exits);
  m.impl("_assert_async", TORCH_FN(DirectAssertAsync::call));
  m.impl("_assert_async.msg", TORCH_FN(DirectAssertAsyncWithMessage::call));
}

template <class Kernel, class... Args>
void functional(torch::Library& m, const char* name) {
  install<DirectFunctional<Kernel, Args...>>(m, name);
}

template <class Kernel, class... Args>
void in_place(torch::Library& m, const char* name) {
  install<DirectInPlace<Kernel, Args...>>(m, name);
}

template <class Kernel>
void scalar_overload(torch::Library& m, const char* name) {
  install<DirectScalarOverload<Kernel>>(m, name);
}

using Tensor = const at::Tensor&;
using Scalar = const c10::Scalar&;
namespace native = at::native;
using Lists = at::TensorList;
using OptionalTensor = const std::optional<at::Tensor>&;
// The CPU's fused Adam and AdamW (lr as a number): params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps;
// lr, beta1, beta2, weight_decay, eps; amsgrad, maximize; grad_scale, found_inf.
using AdamUpdate = void (*)(Lists, Lists, Lists, Lists, Lists, Lists, double, double, double, double, double, bool,
                            bool, OptionalTensor, OptionalTensor);
// The CPU's fused SGD (lr as a number): params, grads, momentum_buffer_list; weight_decay, momentum, lr, dampening;
// nesterov, maximize, is_first_step; grad_scale, found_inf.
using SgdUpdate = void (*)(Lists, Lists, Lists, double, double, double, double, bool, bool, bool, OptionalTensor,
                           OptionalTensor);

// Returns the operators it gave a direct kernel.
std::vector<std::string> install_direct_kernels() {
  install_host_loops();
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  functional<native::structured_ufunc_add_CPU, Tensor, Tensor, Scalar>(m, "add.Tensor");
  in_place<native::structured_ufunc_add_CPU, Tensor, Scalar>(m, "add_.Tensor");
  functional<native::structured_sub_out, Tensor, Tensor, Scalar>(m, "sub.Tensor");
  in_place<native::structured_sub_out, Tensor, Scalar>(m, "sub_.Tensor");
  functional<native::structured_mul_out, Tensor, Tensor>(m, "mul.Tensor");
  in_place<native::structured_mul_out, Tensor>(m, "mul_.Tensor");
  functional<native::structured_div_out, Tensor, Tensor>(m, "div.Tensor");
  in_place<native::structured_div_out, Tensor>(m, "div_.Tensor");
  functional<native::structured_maximum_out, Tensor, Tensor>(m, "maximum");
  functional<native::structured_minimum_out, Tensor, Tensor>(m, "minimum");
  functional<native::structured_eq_Tensor_out, Tensor, Tensor>(m, "eq.Tensor");
  functional<native::structured_ne_Tensor_out, Tensor, Tensor>(m, "ne.Tensor");
  functional<native::structured_lt_Tensor_out, Tensor, Tensor>(m, "lt.Tensor");
  functional<native::structured_le_Tensor_out, Tensor, Tensor>(m, "le.Tensor");
  functional<native::structured_gt_Tensor_out, Tensor, Tensor>(m, "gt.Tensor");
  functional<native::structured_ge_Tensor_out, Tensor, Tensor>(m, "ge.Tensor");
  functional<native::structured_exp_out, Tensor>(m, "exp");
  functional<native::structured_neg_out, Tensor>(m, "neg");
  functional<native::structured_sqrt_out, Tensor>(m, "sqrt");
  install<DirectPowTensorScalar>(m, "pow.Tensor_Scalar");
  functional<native::structured_rsqrt_out, Tensor>(m, "rsqrt");
  functional<native::structured_log_out, Tensor>(m, "log");
  functional<native::structured_tanh_out, Tensor>(m, "tanh");
  functional<native::structured_sin_out, Tensor>(m, "sin");
  functional<native::structured_cos_out, Tensor>(m, "cos");
  functional<native::structured_sigmoid_out, Tensor>(m, "sigmoid");
  functional<native::structured_clamp_min_out, Tensor, Scalar>(m, "clamp_min");
  functional<native::structured_clamp_max_out, Tensor, Scalar>(m, "clamp_max");
  functional<native::structured_threshold_backward_out, Tensor, Tensor, Scalar>(m, "threshold_backward");
  functional<native::structured_tanh_backward_out, Tensor, Tensor>(m, "tanh_backward");
  functional<native::structured_sigmoid_backward_out, Tensor, Tensor>(m, "sigmoid_backward");
  functional<native::structured_amax_out, Tensor, c10::IntArrayRef, bool>(m, "amax");
  scalar_overload<native::structured_eq_Tensor_out>(m, "eq.Scalar");
  scalar_overload<native::structured_ne_Tensor_out>(m, "ne.Scalar");
  scalar_overload<native::structured_lt_Tensor_out>(m, "lt.Scalar");
  scalar_overload<native::structured_le_Tensor_out>(m, "le.Scalar");
  scalar_overload<native::structured_gt_Tensor_out>(m, "gt.Scalar");
  scalar_overload<native::structured_ge_Tensor_out>(m, "ge.Scalar");
  in_place<native::structured_clamp_min_out, Scalar>(m, "clamp_min_");
  install<DirectComposite<&native::relu, at::Tensor, Tensor>>(m, "relu");
  install<DirectComposite<&native::relu_, at::Tensor&, at::Tensor&>>(m, "relu_");
  install<DirectHostImpl<native::structured_sum_out, Tensor, at::OptionalIntArrayRef, bool,
                         std::optional<c10::ScalarType>>>(m, "sum.dim_IntList");
  install<DirectHostImpl<native::structured_tril_cpu, Tensor, int64_t>>(m, "tril");
  install<DirectHostImpl<native::structured_triu_cpu, Tensor, int64_t>>(m, "triu");
  install<DirectHostImpl<native::structured_mm_out_cpu, Tensor, Tensor>>(m, "mm");
  install<DirectHostImpl<native::structured_bmm_out_cpu, Tensor, Tensor>>(m, "bmm");
  install<DirectHostImpl<native::structured_addmm_out_cpu, Tensor, Tensor, Tensor, Scalar, Scalar>>(m, "addmm");
  install<DirectHostImpl<native::structured_softmax_cpu_out, Tensor, int64_t, bool>>(m, "_softmax");
  install<DirectHostImpl<native::structured_log_softmax_cpu_out, Tensor, int64_t, bool>>(m, "_log_softmax");
  install<DirectHostImpl<native::structured_mean_out, Tensor, at::OptionalIntArrayRef, bool,
                         std::optional<c10::ScalarType>>>(m, "mean.dim");
  install<DirectGelu>(m, "gelu");
  install<DirectGeluBackward>(m, "gelu_backward");
  install<DirectSoftmaxBackward<native::structured_softmax_backward_cpu_out>>(m, "_softmax_backward_data");
  install<DirectSoftmaxBackward<native::structured_log_softmax_backward_cpu_out>>(m, "_log_softmax_backward_data");
  install<DirectNllLossForward>(m, "nll_loss_forward");
  install<DirectNllLossBackward>(m, "nll_loss_backward");
  install<DirectLayerNorm>(m, "native_layer_norm");
  install<DirectLayerNormBackward>(m, "native_layer_norm_backward");
  install<DirectEmbeddingBackward>(m, "embedding_dense_backward");
  install<DirectNativeDropout>(m, "native_dropout");
  install<DirectNativeDropoutBackward>(m, "native_dropout_backward");
  install<DirectFill>(m, "fill_.Scalar");
  install<DirectComposite<&native::zero_, at::Tensor&, at::Tensor&>>(m, "zero_");
  install<DirectClone>(m, "clone");
  install<DirectArange>(m, "arange.start_out");
  install<DirectIndexSelect>(m, "index_select");
  install<DirectHostImpl<native::structured_gather_out, Tensor, int64_t, Tensor, bool>>(m, "gather");
  install<DirectCat>(m, "cat");
  install<DirectFlashAttention>(m, "_scaled_dot_product_flash_attention_for_cpu");
  install<DirectFlashAttentionBackward>(m, "_scaled_dot_product_flash_attention_for_cpu_backward");
  install<DirectFusedUpdate<static_cast<AdamUpdate>(&native::_fused_adamw_kernel_cpu_)>>(m, "_fused_adamw_");
  install<DirectFusedUpdate<static_cast<AdamUpdate>(&native::_fused_adam_kernel_cpu_)>>(m, "_fused_adam_");
  install<DirectFusedUpdate<static_cast<SgdUpdate>(&native::_fused_sgd_kernel_cpu_)>>(m, "_fused_sgd_");
  install<DirectWhere>(m, "where.self");
  install<DirectWhereOut>(m, "where.self_out");
  install_assert_async(m);
  return g_direct_operators;
}

}  // namespace

void launch_copy(const at::Tensor& source, const at::Tensor& target, const std::string& name) {
  launch_kernel(target.device(), name, [source = kernel_handle(source), target = kernel_handle(target)] {
    host_view(target).copy_(host_view(source));
  });
}

void bind_direct_operators(pybind11::module& module) {
  module.def("install_direct_kernels", &install_direct_kernels);
  module.def("direct_operators", []() { return g_direct_operators; });
  module.def("direct_route_exits", &route_exits);
  module.def("reset_direct_route_exits", []() {
    for (auto& count : g_route_exits) count.store(0, std::memory_order_relaxed);
  });
}

}  // namespace sim
