// Step 5, operators: the minimal kernels, sim's own kernels, and a fallback for everything else.
//
// A vendor registers kernels for the PrivateUse1 key with TORCH_LIBRARY_IMPL(aten, PrivateUse1, m):
// first the minimal set every device needs (empty, empty_strided, as_strided, view, resize_,
// _copy_from, _local_scalar_dense, set_), then real kernels, and a boxed fallback for the operators
// that have none (m.fallback on the "_" namespace). sim has no device code: every kernel runs the
// host's (CPU) kernel on device memory in place, through compute_on_host below, as a kernel launched on
// the driver (operators_launch.cpp); the fallback does the same, and counts and reports each operator
// it catches.
#include "sim.h"
#include "graphs.h"
#include "operators_direct.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sim {

// ------------------------------------------------------------ storage
void grow_storage(const c10::Storage& storage, size_t new_bytes) {
  if (new_bytes <= storage.nbytes()) return;
  DeviceIndex device = storage.device().type() == kSim ? storage.device().index() : t_current_device;
  DeviceIndex previous = t_current_device;
  t_current_device = device;
  c10::DataPtr fresh;
  try {
    fresh = device_allocator().allocate(new_bytes);
  } catch (...) {
    t_current_device = previous;
    throw;
  }
  t_current_device = previous;
  if (storage.nbytes() > 0 && storage.data() != nullptr) {
    device_allocator().copy_data(fresh.get(), storage.data(), storage.nbytes());
  }
  auto* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

// ------------------------------------------------------- host computation
// Host kernels compute on device memory in place: a sim tensor is shown to them as
// a CPU tensor whose storage points at the same bytes (and keeps the device
// storage alive), so nothing is copied in either direction.
// The host storage's context is the device StorageImpl itself, holding one reference (no allocation).
static void release_storage_reference(void* context) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(context));
}

static c10::Storage host_view_of_storage(const c10::Storage& device_storage) {
  c10::StorageImpl* keep_alive = device_storage.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(keep_alive);
  c10::DataPtr data(keep_alive->mutable_data(), keep_alive, &release_storage_reference, c10::Device(c10::kCPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), device_storage.nbytes(), std::move(data),
                      redirecting_cpu_allocator(), device_storage.resizable());
}

at::Tensor tensor_on_storage(c10::Storage storage, c10::DispatchKey key, const at::Tensor& geometry) {
  c10::DispatchKeySet keys(key);
  if (geometry.is_conj()) keys = keys.add(c10::DispatchKey::Conjugate);
  if (geometry.is_neg()) keys = keys.add(c10::DispatchKey::Negative);
  auto result = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, geometry.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                      geometry.storage_offset());
  return result;
}

static void check_strided(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "sim supports strided tensors only, got layout ", t.layout());
}

static at::Tensor host_alias(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kSim) return t;
  check_strided(t);
  return tensor_on_storage(host_view_of_storage(t.storage()), c10::DispatchKey::CPU, t);
}

at::Tensor host_view(const at::Tensor& device_tensor) {
  if (device_tensor.defined() && device_tensor.device().type() == kSim)
    wait_for_current_stream(device_tensor.device().index());
  return host_alias(device_tensor);
}

// Takes over a host tensor whose bytes the sim allocator handed out (a fresh output
// of a host kernel) as a sim tensor, without copying.
static at::Tensor wrap_device_storage(const at::Tensor& host, c10::Device device) {
  auto* storage = host.storage().unsafeGetStorageImpl();
  storage->mutable_data_ptr().unsafe_set_device(device);
  storage->set_allocator(&device_allocator());
  return tensor_on_storage(host.storage(), c10::DispatchKey::PrivateUse1, host);
}

// Everything a host kernel needs to compute for one device, inside a sim kernel (operators_launch.cpp).
struct HostScope {
  c10::DeviceGuard device_guard;
  DeviceIndex previous_redirect;
  c10::impl::ExcludeDispatchKeyGuard no_autograd{c10::autograd_dispatch_keyset_with_ADInplaceOrView};
  explicit HostScope(c10::Device device)
      : device_guard(device), previous_redirect(exchange_host_redirect(device.index())) {}
  ~HostScope() { exchange_host_redirect(previous_redirect); }
};

static at::Tensor to_device(const at::Tensor& host, c10::Device device) {
  if (!host.defined() || host.device().type() == kSim) return host;
  check_strided(host);
  if (is_sim_memory(host.storage())) return wrap_device_storage(host, device);
  c10::DeviceGuard guard(device);  // the copy lands on the device of the call, not the current one
  at::Tensor result = at::detail::empty_strided_generic(host.sizes(), host.strides(), &device_allocator(),
                                                  c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                  host.scalar_type());
  host_alias(result).copy_(host);
  return result;
}

std::string qualified_operator_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

std::string sim_kernel_name(const std::string& qualified_name) {
  return "sim::" + qualified_name.substr(qualified_name.find("::") + 2);
}

// ------------------------------------------------------- outputs known from an earlier call
// A host kernel sizes its own outputs, so the host waits for it. For the operators in kOutputsFollowGeometry, the
// outputs' sizes, strides and dtypes follow from the geometry of the arguments alone (their sizes, strides and dtypes
// and the other arguments' values), and so do the CPU's errors: the first call with each geometry runs at the call,
// raising what the CPU raises, and its outputs' geometry is kept; a later call with the same geometry allocates its
// outputs at the call and is queued, the host kernel computing into host tensors that are copied into them.
static const std::unordered_set<std::string> kOutputsFollowGeometry{
    "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward", "aten::avg_pool2d",
    "aten::avg_pool2d_backward", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward",
    "aten::native_batch_norm", "aten::native_batch_norm_backward"};

// The geometry of a call's arguments as a list of numbers, two calls with equal lists having equal outputs' geometry.
class GeometryKey {
 public:
  void add(const at::Tensor& t) {
    if (!t.defined()) return push({-1});
    if (t.device().type() != kSim || t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) usable_ = false;
    push({-2, static_cast<int64_t>(t.scalar_type()), t.device().index(), t.dim()});
    for (int64_t size : t.sizes()) numbers_.push_back(size);
    for (int64_t stride : t.strides()) numbers_.push_back(stride);
  }
  void add(c10::IntArrayRef values, int64_t tag = -3) {
    push({tag, static_cast<int64_t>(values.size())});
    for (int64_t value : values) numbers_.push_back(value);
  }
  void add(int64_t value) { push({-4, value}); }
  void add(bool value) { push({-5, value ? 1 : 0}); }
  void add(double value) {
    int64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    push({-6, bits});
  }
  void add(const c10::IValue& value) {
    if (value.isTensor()) return add(value.toTensor());
    if (value.isNone()) return push({-7});
    if (value.isBool()) return add(value.toBool());
    if (value.isInt()) return add(value.toInt());
    if (value.isDouble()) return add(value.toDouble());
    if (value.isIntList()) return add(c10::IntArrayRef(value.toIntVector()));
    if (value.isBoolList()) {
      std::vector<int64_t> flags;
      for (bool flag : value.toBoolList()) flags.push_back(flag ? 1 : 0);
      return add(flags, -8);
    }
    usable_ = false;  // a value this key does not describe (a tensor list, a string, a generator)
  }
  bool usable() const { return usable_; }
  const std::vector<int64_t>& numbers() const { return numbers_; }

 private:
  void push(std::initializer_list<int64_t> numbers) { numbers_.insert(numbers_.end(), numbers); }
  std::vector<int64_t> numbers_;
  bool usable_ = true;
};

struct OutputGeometry {
  bool defined = false;
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype = c10::kFloat;
};

// The outputs' geometry of each geometry of arguments that ran, per operator: the newest kMostGeometries (more than a
// model's layers have), an older one forgotten for each new one beyond them.
class KnownGeometries {
 public:
  std::optional<std::vector<OutputGeometry>> find(const GeometryKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = known_.find(key.numbers());
    if (found == known_.end()) return std::nullopt;
    return found->second;
  }
  // Keeps the geometry of `outputs` if they are new tensors: none a view of another or of an argument.
  void record(const GeometryKey& key, const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& arguments) {
    std::vector<OutputGeometry> geometry;
    std::vector<const void*> storages;
    for (const at::Tensor& t : arguments)
      if (t.defined()) storages.push_back(t.storage().unsafeGetStorageImpl());
    for (const at::Tensor& t : outputs) {
      if (!t.defined()) {
        geometry.emplace_back();
        continue;
      }
      const void* storage = t.storage().unsafeGetStorageImpl();
      if (std::find(storages.begin(), storages.end(), storage) != storages.end() || t.device().type() != kSim) return;
      storages.push_back(storage);
      geometry.push_back({true, t.sizes().vec(), t.strides().vec(), t.scalar_type()});
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!known_.emplace(key.numbers(), std::move(geometry)).second) return;
    order_.push_back(key.numbers());
    if (order_.size() > kMostGeometries) {
      known_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  static constexpr size_t kMostGeometries = 512;
  std::mutex mutex_;
  std::map<std::vector<int64_t>, std::vector<OutputGeometry>> known_;
  std::deque<std::vector<int64_t>> order_;  // the keys of known_, oldest first
};

// Outputs of the known geometry on `device`, allocated now.
static std::vector<at::Tensor> allocated_outputs(const std::vector<OutputGeometry>& geometry, c10::Device device) {
  c10::DeviceGuard guard(device);
  std::vector<at::Tensor> outputs;
  for (const OutputGeometry& output : geometry)
    outputs.push_back(output.defined ? at::detail::empty_strided_generic(
                                           output.sizes, output.strides, &device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), output.dtype)
                                     : at::Tensor());
  return outputs;
}

// Copies a host kernel's result into the output allocated for it at the call, which has its sizes and dtype unless the
// operator broke the rule of kOutputsFollowGeometry.
static void copy_into_output(const at::Tensor& result, const at::Tensor& output_alias, const std::string& name) {
  if (!output_alias.defined()) return;
  TORCH_CHECK(result.defined() && result.sizes() == output_alias.sizes() &&
                  result.scalar_type() == output_alias.scalar_type(),
              "sim allocated an output of ", name, " as an earlier call with the same arguments' geometry returned it "
              "(sizes ", output_alias.sizes(), ", ", output_alias.scalar_type(), "), but the host kernel returned ",
              result.defined() ? c10::str("sizes ", result.sizes(), ", ", result.scalar_type()) : "none",
              "; report it with the call that did this");
  output_alias.copy_(result);
}

struct OperatorEntry {
  std::string name;
  std::string kernel_name;  // its kernel in profiler traces: "sim::mm" for aten::mm
  bool takes_host_indices = false;  // like CUDA, indexing accepts index tensors that live on the host
  bool has_host_kernel = false;
  bool is_random = false;
  bool pointwise = false;  // each output element from the same elements of the inputs alone, not drawn at random
  bool updates_in_place_only = false;  // returns nothing: a foreach or fused optimizer update of its arguments
  // of an out-of-place foreach operator, its in-place twin (`_foreach_sqrt_` of `_foreach_sqrt`): the route that
  // does not wait computes the new tensors in place over copies of the first list
  std::optional<c10::OperatorHandle> in_place_twin;
  std::vector<int> generator_arguments;  // Generator? arguments, filled in from the device generator
  std::shared_ptr<KnownGeometries> known_geometries;  // of the operators in kOutputsFollowGeometry
};
static std::mutex g_operator_entries_mutex;
static std::unordered_map<const c10::FunctionSchema*, OperatorEntry> g_operator_entries;

static bool same_arguments(const c10::FunctionSchema& a, const c10::FunctionSchema& b) {
  if (a.arguments().size() != b.arguments().size()) return false;
  for (size_t i = 0; i < a.arguments().size(); ++i)
    if (a.arguments()[i].name() != b.arguments()[i].name() || *a.arguments()[i].type() != *b.arguments()[i].type())
      return false;
  return true;
}

static OperatorEntry& filled_operator_entry(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_operator_entries_mutex);
  auto& entry = g_operator_entries[&op.schema()];
  if (entry.name.empty()) {
    const auto& name = op.schema().operator_name();
    entry.name = qualified_operator_name(op);
    entry.kernel_name = sim_kernel_name(entry.name);
    const auto& arguments = op.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      auto type = arguments[i].real_type();
      if (type->kind() == c10::TypeKind::OptionalType)
        type = type->castRaw<c10::OptionalType>()->getElementType();
      if (type->kind() == c10::TypeKind::GeneratorType) entry.generator_arguments.push_back(static_cast<int>(i));
    }
    entry.is_random = op.hasTag(at::Tag::nondeterministic_seeded);
    entry.pointwise = op.hasTag(at::Tag::pointwise) && !entry.is_random;
    const std::string base = name.name.substr(name.name.find("::") + 2);
    const auto& returns = op.schema().returns();
    entry.updates_in_place_only = returns.empty() && !base.empty() && base.back() == '_' &&
                                  (base.rfind("_foreach_", 0) == 0 || base.rfind("_fused_", 0) == 0);
    if (base.rfind("_foreach_", 0) == 0 && base.back() != '_' && returns.size() == 1 &&
        returns[0].type()->isSubtypeOf(*c10::ListType::ofTensors())) {
      auto twin = c10::Dispatcher::singleton().findOp({name.name + "_", name.overload_name});
      if (twin && same_arguments(twin->schema(), op.schema())) entry.in_place_twin = twin;
    }
    static const std::unordered_set<std::string> indexing{"index", "index_put", "index_put_", "_index_put_impl_",
                                                          "_unsafe_index", "_unsafe_index_put"};
    entry.takes_host_indices = indexing.count(base) > 0;
    if (kOutputsFollowGeometry.count(entry.name) > 0) entry.known_geometries = std::make_shared<KnownGeometries>();
    entry.has_host_kernel = op.hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                            op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                            op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
                            op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  }
  return entry;
}

// Every call looks its operator up: a small per-thread cache of filled entries (whose addresses never change,
// the map's nodes being stable) spares the lock and the hash of the shared map.
static OperatorEntry& operator_entry(const c10::OperatorHandle& op) {
  struct Slot {
    const c10::FunctionSchema* schema = nullptr;
    OperatorEntry* entry = nullptr;
  };
  constexpr size_t kSlots = 256;
  thread_local Slot slots[kSlots];
  const c10::FunctionSchema* schema = &op.schema();
  Slot& slot = slots[(reinterpret_cast<uintptr_t>(schema) >> 4) % kSlots];
  if (slot.schema != schema) slot = {schema, &filled_operator_entry(op)};
  return *slot.entry;
}

struct DeviceOfArguments {
  std::optional<c10::Device> device;
  std::optional<c10::Device> host_tensor;  // a CPU tensor that is not a scalar
  void see(const at::Tensor& t, const std::string& op_name) {
    if (!t.defined()) return;
    if (t.device().type() == kSim) {
      if (device && *device != t.device()) mismatch(*device, t.device(), op_name);
      device = t.device();
    } else if (t.device().is_cpu() && t.dim() > 0) {
      host_tensor = t.device();
    }
  }
  [[noreturn]] static void mismatch(c10::Device a, c10::Device b, const std::string& op_name) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a,
                " and ", b, "! (in ", op_name, "; move them with .to(device) first)");
  }
};

// The host aliases of one operator call, and the way back from host results to
// sim tensors: the argument itself (in-place and out= results), a view of an
// argument's storage, a fresh output in sim memory, or else a copy.
struct HostAliases {
  struct Entry {
    at::Tensor device_tensor;
    at::Tensor host_tensor;
  };
  // Inline room for the usual few tensors of a call: no heap allocation on the common path.
  c10::SmallVector<Entry, 4> entries;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 4> storages;  // host storage -> device storage

  at::Tensor add(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kSim) return t;
    check_strided(t);
    // The same tensor passed twice (`cat([x, y], out=x)`) gets the same alias: kernels check
    // overlap by identity first, and an empty tensor overlaps nothing but itself.
    if (auto known = find(entries, entry_of_device_tensor, t.unsafeGetTensorImpl(), device_tensor_of))
      return entries[*known].host_tensor;
    c10::Storage host_storage;
    if (auto known = find(storages, storage_of_device_storage, t.storage().unsafeGetStorageImpl(), device_storage_of))
      host_storage = c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storages[*known].first));
    if (!host_storage) {
      host_storage = host_view_of_storage(t.storage());
      storages.emplace_back(host_storage.unsafeGetStorageImpl(), t.storage());
      indexed(storages, storage_of_device_storage, device_storage_of);
      indexed(storages, storage_of_host_storage, host_storage_of);
    }
    at::Tensor host = tensor_on_storage(std::move(host_storage), c10::DispatchKey::CPU, t);
    entries.push_back({t, host});
    indexed(entries, entry_of_device_tensor, device_tensor_of);
    indexed(entries, entry_of_host_tensor, host_tensor_of);
    return host;
  }

  // An out= kernel may have resized its output: the device tensor takes the new
  // bytes and geometry over.
  void write_back_resizes(c10::Device device) {
    for (auto& [host_impl, device_storage] : storages) {
      if (host_impl->data() == device_storage.data() && host_impl->nbytes() == device_storage.nbytes()) continue;
      auto* device_impl = device_storage.unsafeGetStorageImpl();
      if (host_impl->data_ptr().get_deleter() == &sim_free) {
        c10::DataPtr moved = host_impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
        moved.unsafe_set_device(device);
        device_impl->set_data_ptr_noswap(std::move(moved));
        device_impl->set_nbytes(host_impl->nbytes());
      } else {
        grow_storage(device_storage, host_impl->nbytes());
        std::memcpy(device_impl->mutable_data(), host_impl->data(), host_impl->nbytes());
      }
    }
    for (auto& entry : entries) {
      auto* host_impl = entry.host_tensor.unsafeGetTensorImpl();
      auto* device_impl = entry.device_tensor.unsafeGetTensorImpl();
      if (host_impl->is_conj() != device_impl->is_conj() || host_impl->is_neg() != device_impl->is_neg()) {
        // a kernel flipped the lazy conjugate or negative bit of its out= tensor: the device tensor takes the
        // host tensor's metadata whole (its autograd state and version counter stay its own)
        at::Tensor flipped = tensor_on_storage(entry.device_tensor.storage(), c10::DispatchKey::PrivateUse1,
                                               entry.host_tensor);
        device_impl->shallow_copy_from(flipped.getIntrusivePtr());
      } else if (host_impl->sizes() != device_impl->sizes() || host_impl->strides() != device_impl->strides() ||
                 host_impl->storage_offset() != device_impl->storage_offset()) {
        device_impl->set_sizes_and_strides(host_impl->sizes(), host_impl->strides(), host_impl->storage_offset());
      }
    }
  }

  at::Tensor back_to_device(const at::Tensor& host, c10::Device device) {
    if (!host.defined() || host.device().type() == kSim) return host;
    if (auto known = find(entries, entry_of_host_tensor, host.unsafeGetTensorImpl(), host_tensor_of))
      return entries[*known].device_tensor;
    if (host.layout() == c10::kStrided && host.has_storage()) {
      if (auto known = find(storages, storage_of_host_storage, host.storage().unsafeGetStorageImpl(), host_storage_of))
        return tensor_on_storage(storages[*known].second, c10::DispatchKey::PrivateUse1, host);
    }
    return to_device(host, device);
  }

 private:
  // A foreach call's lists hold a model's parameters, hundreds of tensors: past kScanned items a lookup goes
  // through an index (built at the first lookup that needs it) instead of a scan, which made such a call's
  // launch grow with the square of its tensors.
  static constexpr size_t kScanned = 8;
  // Open addressing in one array: an index of hundreds of tensors allocates once, not a node for each.
  using Index = ska::flat_hash_map<const void*, size_t>;
  Index entry_of_device_tensor, entry_of_host_tensor, storage_of_device_storage, storage_of_host_storage;

  static const void* device_tensor_of(const Entry& entry) { return entry.device_tensor.unsafeGetTensorImpl(); }
  static const void* host_tensor_of(const Entry& entry) { return entry.host_tensor.unsafeGetTensorImpl(); }
  static const void* device_storage_of(const std::pair<c10::StorageImpl*, c10::Storage>& storage) {
    return storage.second.unsafeGetStorageImpl();
  }
  static const void* host_storage_of(const std::pair<c10::StorageImpl*, c10::Storage>& storage) {
    return storage.first;
  }

  // The position of the first item whose key is `key`.
  template <typename Items, typename KeyOf>
  static std::optional<size_t> find(const Items& items, Index& index, const void* key, KeyOf key_of) {
    if (items.size() <= kScanned) {
      for (size_t i = 0; i < items.size(); ++i)
        if (key_of(items[i]) == key) return i;
      return std::nullopt;
    }
    if (index.empty()) {
      index.reserve(items.size());
      for (size_t i = 0; i < items.size(); ++i) index.emplace(key_of(items[i]), i);  // keeps each key's first item
    }
    auto found = index.find(key);
    return found == index.end() ? std::nullopt : std::optional<size_t>(found->second);
  }

  // Keeps an index that was built up to date with the item just appended to `items`.
  template <typename Items, typename KeyOf>
  static void indexed(const Items& items, Index& index, KeyOf key_of) {
    if (!index.empty()) index.emplace(key_of(items.back()), items.size() - 1);
  }
};

// ------------------------------------------------------- quantized tensors
// sim holds no quantized tensors: it has no QuantizedPrivateUse1 kernels (dequantize, int_repr, copy_,
// printing), so a quantized tensor on sim could not be used. Creating one is refused on each route:
// a host kernel that returns one (quantize_per_tensor and its siblings) and any operator that reaches
// the QuantizedPrivateUse1 key (the quantized factories, `.to("sim")` of a quantized CPU tensor).
[[noreturn]] static void refuse_quantized(const std::string& name, const std::string& dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "\"", name, "\" not implemented for '", dtype, "' on sim: sim holds no quantized "
      "tensors. Quantize on the CPU, or use the operators PT2E quantization emits "
      "(torch.ops.quantized_decomposed.*), which run on sim");
}

static void refuse_quantized_operator(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  std::string dtype = "Quantized" + c10::get_privateuse1_backend(true);
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_quantized()) {
      dtype = c10::toString(value.toTensor().scalar_type());
      break;
    }
    if (arguments[i].name() == "dtype" && value.isInt() &&
        c10::isQIntType(static_cast<c10::ScalarType>(value.toInt()))) {
      dtype = c10::toString(static_cast<c10::ScalarType>(value.toInt()));
      break;
    }
  }
  refuse_quantized(operator_entry(op).name, dtype);
}

// Whether the CPU's kernel of a foreach or fused optimizer call will take these lists: every tensor on `device`,
// strided, floating point and without lazy bits; the first list not empty, the others of its length or empty (as
// fused Adam's `max_exp_avg_sqs` without amsgrad); at each position one dtype and one shape (a list it only reads
// may hold 0-dim tensors there, as the optimizers' steps); a written tensor dense and without internal overlap.
bool tensors_a_list_kernel_takes(const std::vector<TensorListUse>& lists, c10::Device device) {
  if (lists.empty() || lists.front().list.empty()) return false;
  const size_t length = lists.front().list.size();
  for (const TensorListUse& use : lists)
    if (!use.list.empty() && use.list.size() != length) return false;
  for (size_t j = 0; j < length; ++j) {
    const at::Tensor& reference = lists.front().list[j];
    if (!reference.defined()) return false;
    for (const auto& [list, written] : lists) {
      if (list.empty()) continue;
      const at::Tensor& t = list[j];
      if (!t.defined() || t.device() != device || t.layout() != c10::kStrided || !t.is_floating_point() ||
          t.scalar_type() != reference.scalar_type() || t.is_conj() || t.is_neg())
        return false;
      if (t.sizes() != reference.sizes() && (written || t.dim() != 0)) return false;
      if (written && !t.is_non_overlapping_and_dense()) return false;
    }
  }
  return true;
}

// Whether the CPU's kernel will take a foreach or fused optimizer call's boxed arguments: lists it takes, a lone
// tensor 0-dim and on `device`, no complex scalar. Such a call's results are known before it runs (its arguments
// updated, or new tensors shaped as its first list), so it is launched without waiting, as CUDA's foreach kernels
// are; any other call takes the waiting route, where the CPU's kernel raises its own error at once.
static bool cpu_kernel_takes(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first,
                             c10::Device device) {
  const auto& arguments = schema.arguments();
  std::vector<std::pair<std::vector<at::Tensor>, bool>> tensor_lists;  // and whether the kernel writes it
  c10::SmallVector<size_t, 2> scalar_list_lengths;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    const bool written = arguments[i].alias_info() != nullptr && arguments[i].alias_info()->isWrite();
    if (value.isTensorList()) {
      tensor_lists.emplace_back(value.toTensorList().vec(), written);
    } else if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (t.defined() && (written || t.dim() != 0 || t.device() != device || t.is_complex())) return false;
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef())
        if (!element.isDouble() && !element.isInt() && !element.isBool()) return false;
      scalar_list_lengths.push_back(value.toListRef().size());
    } else if (value.isComplexDouble() || value.isGenerator() || value.isDevice()) {
      return false;
    }
  }
  std::vector<TensorListUse> lists;
  for (const auto& [list, written] : tensor_lists) lists.push_back({list, written});
  if (!tensors_a_list_kernel_takes(lists, device)) return false;
  for (size_t scalars : scalar_list_lengths)
    if (scalars != lists.front().list.size()) return false;
  return true;
}

// Runs an operator's host (CPU) kernel on device memory: the boxed kernel behind
// the per-op native kernels and the fallback alike.
void compute_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OperatorEntry& entry = operator_entry(op);
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();

  DeviceOfArguments where;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      where.see(value.toTensor(), entry.name);
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) where.see(t, entry.name);
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef())
        if (element.isTensor()) where.see(element.toTensor(), entry.name);
    } else if (value.isDevice() && value.toDevice().type() == kSim && !where.device) {
      where.device = value.toDevice();
    }
  }
  c10::Device device = where.device.value_or(c10::Device(kSim, t_current_device));
  if (!device.has_index()) device = c10::Device(kSim, t_current_device);
  if (where.device && where.host_tensor && !entry.takes_host_indices)
    DeviceOfArguments::mismatch(device, *where.host_tensor, entry.name);
  TORCH_CHECK_NOT_IMPLEMENTED(entry.has_host_kernel, "'", entry.name,
      "' has no sim kernel and no host kernel to fall back to. Register a kernel for PrivateUse1 "
      "with torch.library.impl('", entry.name, "', 'PrivateUse1').");
  if (any_capture() && capture_kernel(op, stack, device)) return;  // graphs.cpp: recorded, not run
  std::optional<GeometryKey> key;  // of an operator whose outputs follow the arguments' geometry
  std::optional<std::vector<OutputGeometry>> known;
  std::vector<at::Tensor> argument_tensors;
  if (entry.known_geometries && !any_capture()) {  // the key refuses a tensor on the host
    key.emplace();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::IValue& value = (*stack)[first + i];
      key->add(value);
      if (value.isTensor()) argument_tensors.push_back(value.toTensor());
    }
    if (key->usable()) {
      known = entry.known_geometries->find(*key);
    } else {
      key.reset();
    }
  }
  const bool without_waiting = (entry.updates_in_place_only || entry.in_place_twin) && !where.host_tensor &&
                               cpu_kernel_takes(op.schema(), *stack, first, device);
  // An out-of-place foreach call that need not wait: its new tensors, of the first list's shapes and dtypes, are
  // allocated now; the kernel copies the first list into them and runs the in-place twin over them.
  c10::List<at::Tensor> new_tensors;
  std::optional<size_t> first_list;
  if (without_waiting && entry.in_place_twin) {
    for (size_t i = 0; i < arguments.size() && !first_list; ++i)
      if ((*stack)[first + i].isTensorList()) first_list = i;
    for (const at::Tensor& t : (*stack)[first + *first_list].toTensorList()) new_tensors.push_back(at::empty_like(t));
  }

  HostAliases aliases;
  int64_t elements = 0;  // for run_kernel, of a pointwise kernel
  auto alias = [&](const at::Tensor& t) {
    if (t.defined()) elements += t.numel();
    return aliases.add(t);
  };
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      value = alias(value.toTensor());
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, alias(list.get(j)));
    } else if (value.isList()) {
      auto list = value.toList();
      for (size_t j = 0; j < list.size(); ++j) {
        c10::IValue element = list.get(j);
        if (element.isTensor()) list.set(j, alias(element.toTensor()));
      }
    } else if (value.isDevice() && value.toDevice().type() == kSim) {
      value = c10::Device(c10::kCPU);
    }
  }
  for (int index : entry.generator_arguments) {
    c10::IValue& value = (*stack)[first + index];
    if (value.isNone()) {
      // Random operators already draw from the device's state through DeviceRandomScope.
      if (generator_installed() && !entry.is_random)
        value = host_generator_for(default_generator(device.index()));
    } else if (value.isGenerator() && value.toGenerator().device().type() == kSim) {
      value = host_generator_for(value.toGenerator());
    }
  }

  if (known) {
    // The launch holds host aliases of the outputs, which do not own them: autograd takes a gradient that nothing
    // else holds as the parameter's own, where it would copy one that a launch holds.
    std::vector<at::Tensor> outputs = allocated_outputs(*known, device);
    std::vector<at::Tensor> output_aliases;
    for (const at::Tensor& t : outputs) output_aliases.push_back(host_alias(t));
    std::vector<c10::IValue> host_arguments(std::make_move_iterator(stack->begin() + first),
                                            std::make_move_iterator(stack->end()));
    stack->erase(stack->begin() + first, stack->end());
    launch_kernel(device, entry.kernel_name, [op, device, host_arguments = std::move(host_arguments),
                                              aliases = std::move(aliases), output_aliases = std::move(output_aliases),
                                              name = entry.name]() mutable {
      HostScope scope(device);
      torch::jit::Stack host_stack = std::move(host_arguments);
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &host_stack);
      for (size_t i = 0; i < output_aliases.size(); ++i)
        copy_into_output(host_stack[i].isTensor() ? host_stack[i].toTensor() : at::Tensor(), output_aliases[i], name);
    });
    for (at::Tensor& t : outputs) stack->emplace_back(std::move(t));
    return;
  }

  if (without_waiting) {
    // The launch owns the arguments' host aliases and, through them, the device tensors, until the kernel ran.
    std::vector<c10::IValue> host_arguments(std::make_move_iterator(stack->begin() + first),
                                            std::make_move_iterator(stack->end()));
    stack->erase(stack->begin() + first, stack->end());
    c10::List<at::Tensor> sources, targets;  // an out-of-place call: its first list, and the new tensors' aliases
    if (first_list) {
      sources = host_arguments[*first_list].toTensorList();
      for (const at::Tensor& t : new_tensors) targets.push_back(aliases.add(t));
      host_arguments[*first_list] = targets;
      stack->emplace_back(new_tensors);
    }
    const c10::OperatorHandle kernel = first_list ? *entry.in_place_twin : op;
    launch_kernel(device, entry.kernel_name, [kernel, device, host_arguments = std::move(host_arguments),
                                              aliases = std::move(aliases), sources, targets]() mutable {
      HostScope scope(device);
      for (size_t j = 0; j < targets.size(); ++j) targets.get(j).copy_(sources.get(j));
      torch::jit::Stack host_stack = std::move(host_arguments);
      kernel.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &host_stack);
    });
    return;
  }

  if (entry.is_random) wait_for_queued_draws(device.index());
  // The host kernel, and the way back from its results to sim tensors, run on the device as one kernel.
  run_kernel(device, entry.kernel_name, [&] {
    {
      HostScope scope(device);
      DeviceRandomScope random(entry.is_random, device.index());
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    }
    aliases.write_back_resizes(device);
    auto back = [&](const at::Tensor& host) {
      if (host.defined() && host.is_quantized()) refuse_quantized(entry.name, c10::toString(host.scalar_type()));
      return aliases.back_to_device(host, device);
    };
    const size_t returns = op.schema().returns().size();
    for (size_t i = stack->size() - returns; i < stack->size(); ++i) {
      c10::IValue& value = (*stack)[i];
      if (value.isTensor()) {
        value = back(value.toTensor());
      } else if (value.isTensorList()) {
        auto list = value.toTensorList();
        for (size_t j = 0; j < list.size(); ++j) list.set(j, back(list.get(j)));
      }
    }
  }, true, entry.pointwise ? std::optional<int64_t>(elements) : std::nullopt);
  if (key) {
    std::vector<at::Tensor> outputs;
    for (size_t i = stack->size() - op.schema().returns().size(); i < stack->size(); ++i) {
      if (!(*stack)[i].isTensor()) return;
      outputs.push_back((*stack)[i].toTensor());
    }
    entry.known_geometries->record(*key, outputs, argument_tensors);
  }
}

static void native_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  compute_on_host(op, stack);
}

// --------------------------------------------------------------- fallback
enum class FallbackPolicy : int { warn = 0, silent = 1, error = 2 };
static std::atomic<int> g_fallback_policy{0};
static std::mutex g_fallback_mutex;
static std::unordered_map<std::string, int64_t> g_fallback_counts;
static std::unordered_set<std::string> g_fallback_warned;
static PyObject* g_fallback_observer = nullptr;  // called with the op name when set

static void notify_observer(const std::string& name) {
  if (g_fallback_observer == nullptr) return;
  pybind11::gil_scoped_acquire gil;
  if (g_fallback_observer == nullptr) return;
  PyObject* result = PyObject_CallFunction(g_fallback_observer, "s", name.c_str());
  if (result == nullptr) {
    PyErr_Clear();  // an observer must never break the computation it watches
  } else {
    Py_DECREF(result);
  }
}

static void host_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const std::string& name = operator_entry(op).name;
  auto policy = static_cast<FallbackPolicy>(g_fallback_policy.load());
  TORCH_CHECK_NOT_IMPLEMENTED(policy != FallbackPolicy::error,
      "The operator '", name, "' has no sim kernel and SIM_FALLBACK=error forbids the host fallback. "
      "Set SIM_FALLBACK=warn (or torch.sim.set_fallback_policy('warn')) to let it run on the fallback.");
  bool first_time = false;
  {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    g_fallback_counts[name] += 1;
    if (policy == FallbackPolicy::warn) first_time = g_fallback_warned.insert(name).second;
  }
  if (first_time) {
    TORCH_WARN("The operator '", name, "' has no sim kernel and falls back to the generic host fallback; "
               "it still computes on device memory, but slower than a kernel would. "
               "Set SIM_FALLBACK=silent to hide this warning or SIM_FALLBACK=error to forbid the fallback.");
  }
  notify_observer(name);
  compute_on_host(op, stack);
}

// ----------------------------------------------------- the minimal op set
static c10::ScalarType requested_dtype(std::optional<c10::ScalarType> dtype) {
  return dtype.value_or(c10::get_default_dtype_as_scalartype());
}

static c10::Device device_or_current(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(c10::Device(kSim, t_current_device));
  TORCH_CHECK(d.type() == kSim, "sim: expected a sim device, got ", d);
  return d.has_index() ? d : c10::Device(kSim, t_current_device);
}

static void check_pin_memory(std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned; sim tensors live on the device.");
}

at::Tensor sim_empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                     std::optional<c10::Device> device, std::optional<bool> pin_memory,
                     std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "sim supports strided tensors only, got layout ",
              *layout);
  check_pin_memory(pin_memory);
  c10::DeviceGuard guard(device_or_current(device));
  return at::detail::empty_generic(size, &device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   requested_dtype(dtype), memory_format);
}

at::Tensor sim_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                             std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "sim supports strided tensors only, got layout ",
              *layout);
  check_pin_memory(pin_memory);
  c10::DeviceGuard guard(device_or_current(device));
  return at::detail::empty_strided_generic(size, stride, &device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           requested_dtype(dtype));
}

static size_t bytes_needed(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t offset, size_t itemsize) {
  int64_t extent = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == 0) return 0;
    extent += (size[i] - 1) * stride[i];
  }
  return static_cast<size_t>((offset + extent) * static_cast<int64_t>(itemsize));
}

const at::Tensor& sim_resize_(const at::Tensor& self, c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
  grow_storage(self.storage(), bytes_needed(self.sizes(), self.strides(), self.storage_offset(), self.itemsize()));
  return self;
}

at::Tensor& sim_set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                            c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kSim, "sim: set_() needs a sim storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(source);
  std::vector<int64_t> strides(stride.begin(), stride.end());
  if (strides.empty() && !size.empty()) {
    auto contiguous = c10::contiguous_strides(size);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  impl->set_sizes_and_strides(size, strides, offset);
  grow_storage(self.storage(), bytes_needed(size, strides, offset, self.itemsize()));
  return self;
}

at::Tensor& sim_set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t elements = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return sim_set_storage(self, source, 0, {elements}, {1});
}

at::Tensor& sim_set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return sim_set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& sim_set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, &device_allocator(), /*resizable=*/true);
  return sim_set_storage(self, empty, 0, {0}, {1});
}

// A copy of one dense block of bytes (same dtype, sizes, strides and lazy bits, no overlap) is the driver's
// simMemcpyAsync on the current stream of the sim device involved (the source's between two devices), as CUDA's
// copies run on the current stream; anything else (a conversion, a gather of strided elements) is a kernel.
// The host waits for the copy unless it may not (non_blocking=True with pinned host memory, or a copy within
// one device, which later work on the stream is ordered after), as on CUDA.
static bool copy_with_driver(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.scalar_type() != dst.scalar_type() || self.sizes() != dst.sizes() || self.strides() != dst.strides() ||
      self.is_conj() != dst.is_conj() || self.is_neg() != dst.is_neg() || !self.is_non_overlapping_and_dense() ||
      self.numel() == 0)
    return false;
  const bool from_device = self.device().type() == kSim, to_device = dst.device().type() == kSim;
  if (from_device && to_device && self.storage().is_alias_of(dst.storage())) return false;
  const simMemcpyKind kind = !from_device ? simMemcpyHostToDevice
                             : !to_device ? simMemcpyDeviceToHost : simMemcpyDeviceToDevice;
  const c10::Device device = from_device ? self.device() : dst.device();
  const bool across_devices = from_device && to_device && self.device() != dst.device();
  if (across_devices) wait_for_current_stream(dst.device().index());  // its stream may still read the destination
  const c10::Stream stream = current_stream(device);
  simStream_t handle = driver_stream(stream);
  {
    std::optional<HostWait> wait;  // into pageable memory, the driver returns once the copy ran
    if (kind != simMemcpyDeviceToDevice) wait.emplace();
    // dense with equal strides: both blocks start at element 0 and span nbytes()
    CopyRecordScope recorded(stream);
    driver_call(simMemcpyAsync(dst.data_ptr(), self.data_ptr(), self.nbytes(), kind, handle), "simMemcpyAsync");
  }
  const at::Tensor& host = from_device ? dst : self;
  const bool pinned_host = kind != simMemcpyDeviceToDevice && is_pinned_address(host.data_ptr());
  if (pinned_host && non_blocking) {
    // the pinned block must not be handed out again before the stream has run the copy
    const c10::DataPtr& block = host.storage().data_ptr();
    pinned_allocator()->record_event(block.get(), block.get_context(), stream);
    return true;
  }
  if (kind == simMemcpyDeviceToDevice && !across_devices) return true;
  HostWait wait;
  driver_call(simStreamSynchronize(handle), "simStreamSynchronize");
  return true;
}

// A copy within one sim device (the caller checks that) that the CPU's copy takes without an error or a warning is
// queued, as CUDA's are: no memory shared between the two, a destination that does not overlap itself, a source that
// broadcasts to it, and no complex source into a real destination (the CPU warns that it drops the imaginary part).
// Others wait, so that their error or warning comes from the call.
static bool queued_copy(const at::Tensor& self, const at::Tensor& dst) {
  const auto zero_tensor = [](const at::Tensor& t) { return t.key_set().has(c10::DispatchKey::ZeroTensor); };
  return !self.storage().is_alias_of(dst.storage()) && at::has_internal_overlap(dst) == at::MemOverlap::No &&
         at::is_expandable_to(self.sizes(), dst.sizes()) && !(self.is_complex() && !dst.is_complex()) &&
         !zero_tensor(self) && !zero_tensor(dst);
}

at::Tensor sim_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  c10::Device device = self.device().type() == kSim ? self.device() : dst.device();
  if (any_capture() && capture_copy(self, dst)) return dst;  // graphs.cpp: recorded, not run
  // Nothing to copy into an empty destination, once the CPU's copy would take the call: the host does not wait for
  // the device, as CUDA's copy of no elements returns at once.
  if (dst.numel() == 0 && at::is_expandable_to(self.sizes(), dst.sizes()) && !(self.is_complex() && !dst.is_complex()))
    return dst;
  // A copy a kernel makes is part of that kernel: the driver would queue it behind the stream's later work.
  if (!on_device() && copy_with_driver(self, dst, non_blocking)) return dst;
  static const std::string kernel_name = "sim::copy_";
  const bool within_one_device = self.device().type() == kSim && self.device() == dst.device();
  if (within_one_device && self.storage().is_alias_of(dst.storage())) {
    // the checks the CPU's copy makes, which the kernel's host aliases (two storages over the same bytes) would miss
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
  }
  if (within_one_device && queued_copy(self, dst)) {
    launch_copy(self, dst, kernel_name);
    return dst;
  }
  if (self.device().type() == kSim && dst.device().type() == kSim && self.device() != dst.device()) {
    wait_for_current_stream(self.device().index());
    wait_for_current_stream(dst.device().index());
  }
  run_kernel(device, kernel_name, [&] {
    HostScope scope(device);
    host_alias(dst).copy_(host_alias(self));
  }, true, self.numel() + dst.numel());
  return dst;
}

at::Tensor sim_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return sim_copy_from(self, dst, false);
}

c10::Scalar sim_local_scalar_dense(const at::Tensor& self) {
  if (any_capture())
    refuse_if_capturing(self.device().index(), "aten::_local_scalar_dense (.item(), or a tensor in a Python "
                        "condition) reads a value that exists only after a replay; read it after the replay");
  if (self.is_conj() || self.is_neg()) {
    static const std::string kernel_name = "sim::_local_scalar_dense";
    c10::Scalar value;
    run_kernel(self.device(), kernel_name, [&] { value = host_alias(self).item(); }, true, 1);
    return value;
  }
  at::Tensor value = at::empty({}, self.options().device(c10::kCPU));
  copy_with_driver(self.as_strided({}, {}), value, false);
  return value.item();
}

// ------------------------------------------------- convolution (explicit)
// The outputs are contiguous whatever the layout of the inputs: for a device's *_overrideable convolutions,
// torch's fake kernels (which torch.compile plans its buffers with) predict the contiguous format, while the host
// CPU kernel may answer in channels-last; inductor asserts the strides it planned.
static at::Tensor contiguous_if_defined(const at::Tensor& t) { return t.defined() ? t.contiguous() : t; }

// The CPU's convolution and its gradient on the host aliases of sim tensors, in a kernel (under a HostScope).
static at::Tensor host_convolution(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                   c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                   c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> host_bias = bias ? std::optional<at::Tensor>(host_alias(*bias)) : std::nullopt;
  return at::convolution(host_alias(input), host_alias(weight), host_bias, stride, padding, dilation, transposed,
                         output_padding, groups);
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> host_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  std::vector<int64_t> bias_sizes{grad_output.size(1)};
  return at::convolution_backward(host_alias(grad_output), host_alias(input), host_alias(weight), bias_sizes, stride,
                                  padding, dilation, transposed, output_padding, groups, output_mask);
}

at::Tensor sim_convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                        c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                        c10::IntArrayRef output_padding, int64_t groups) {
  DeviceOfArguments where;
  where.see(input, "convolution_overrideable");
  where.see(weight, "convolution_overrideable");
  if (bias) where.see(*bias, "convolution_overrideable");
  if (any_capture())  // graphs.cpp: recorded, not run
    if (auto captured = capture_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                            groups))
      return *captured;
  static const std::string kernel_name = "sim::convolution_overrideable";
  static KnownGeometries known_geometries;
  GeometryKey key;
  for (const at::Tensor& t : {input, weight, bias.value_or(at::Tensor())}) key.add(t);
  for (c10::IntArrayRef values : {stride, padding, dilation, output_padding}) key.add(values);
  key.add(transposed);
  key.add(groups);
  if (key.usable() && !any_capture())
    if (auto known = known_geometries.find(key)) {
      at::Tensor output = allocated_outputs(*known, input.device())[0];
      launch_kernel(input.device(), kernel_name,
                    [input, weight, bias, stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(),
                     transposed, output_padding = output_padding.vec(), groups, output = host_alias(output)] {
                      HostScope scope(input.device());
                      copy_into_output(host_convolution(input, weight, bias, stride, padding, dilation, transposed,
                                                        output_padding, groups),
                                       output, "aten::convolution_overrideable");
                    });
      return output;
    }
  at::Tensor output;
  run_kernel(input.device(), kernel_name, [&] {
    at::Tensor host_output;
    {
      HostScope scope(input.device());
      host_output = host_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                     groups).contiguous();
    }
    output = to_device(host_output, input.device());
  });
  if (key.usable()) known_geometries.record(key, {output}, {input, weight, bias.value_or(at::Tensor())});
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sim_convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  if (any_capture())  // graphs.cpp: recorded, not run
    if (auto captured = capture_convolution_backward(grad_output, input, weight, stride, padding, dilation, transposed,
                                                     output_padding, groups, output_mask))
      return *captured;
  static const std::string kernel_name = "sim::convolution_backward_overrideable";
  static KnownGeometries known_geometries;
  GeometryKey key;
  for (const at::Tensor& t : {grad_output, input, weight}) key.add(t);
  for (c10::IntArrayRef values : {stride, padding, dilation, output_padding}) key.add(values);
  key.add(transposed);
  key.add(groups);
  for (bool wanted : output_mask) key.add(wanted);
  if (key.usable() && !any_capture())
    if (auto known = known_geometries.find(key)) {
      std::vector<at::Tensor> outputs = allocated_outputs(*known, input.device());
      launch_kernel(input.device(), kernel_name,
                    [grad_output, input, weight, stride = stride.vec(), padding = padding.vec(),
                     dilation = dilation.vec(), transposed, output_padding = output_padding.vec(), groups, output_mask,
                     output_aliases = std::array{host_alias(outputs[0]), host_alias(outputs[1]),
                                                 host_alias(outputs[2])}] {
                      HostScope scope(input.device());
                      auto [grad_input, grad_weight, grad_bias] = host_convolution_backward(
                          grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
                          output_mask);
                      const std::string name = "aten::convolution_backward_overrideable";
                      copy_into_output(grad_input, output_aliases[0], name);
                      copy_into_output(grad_weight, output_aliases[1], name);
                      copy_into_output(grad_bias, output_aliases[2], name);
                    });
      return {outputs[0], outputs[1], outputs[2]};
    }
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result;
  run_kernel(input.device(), kernel_name, [&] {
    std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
    {
      HostScope scope(input.device());
      auto [grad_input, grad_weight, grad_bias] = host_convolution_backward(
          grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask);
      grads = {contiguous_if_defined(grad_input), contiguous_if_defined(grad_weight),
               contiguous_if_defined(grad_bias)};
    }
    result = {to_device(std::get<0>(grads), input.device()), to_device(std::get<1>(grads), input.device()),
              to_device(std::get<2>(grads), input.device())};
  });
  if (key.usable())
    known_geometries.record(key, {std::get<0>(result), std::get<1>(result), std::get<2>(result)},
                            {grad_output, input, weight});
  return result;
}

static at::Tensor sim_refuse_sparse(c10::IntArrayRef, std::optional<c10::ScalarType>, std::optional<c10::Layout> layout,
                             std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "sim supports strided (dense) tensors only, got layout ",
                              layout.value_or(c10::kSparse), "; create the tensor on the CPU instead.");
}

static void install_minimal_operators() {
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  m.impl("empty.memory_format", TORCH_FN(sim_empty));
  m.impl("empty_strided", TORCH_FN(sim_empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("resize_", TORCH_FN(sim_resize_));
  m.impl("_copy_from", TORCH_FN(sim_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(sim_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(sim_local_scalar_dense));
  m.impl("set_.source_Storage", TORCH_FN(sim_set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(sim_set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(sim_set_source_tensor));
  m.impl("set_", TORCH_FN(sim_set_empty));
  m.impl("convolution_overrideable", TORCH_FN(sim_convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(sim_convolution_backward_overrideable));
  auto& sparse = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::SparsePrivateUse1, __FILE__, __LINE__);
  sparse.impl("empty.memory_format", TORCH_FN(sim_refuse_sparse));
}

static void install_native_kernels(const std::vector<std::string>& operator_names) {
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& name : operator_names) m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&native_kernel>());
}

// scaled_dot_product_attention asks a per-device hook (a DispatchStub, not the operator) which
// fused kernel to run. sim answers what the CPU would answer for the same tensors, and offers
// the host's flash kernel under OVERRIDEABLE, the choice PyTorch reserves for PrivateUse1.
static int64_t attention_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                                std::optional<double> scale, bool enable_gqa) {
  int64_t choice = at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), query, key,
                                                           value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  return choice == static_cast<int64_t>(sdp::SDPBackend::flash_attention)
             ? static_cast<int64_t>(sdp::SDPBackend::overrideable)
             : choice;
}

static void install_attention_choice() {
  at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&attention_choice);
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  m.impl("_fused_sdp_choice", TORCH_FN(attention_choice));
}

static void install_fallback() {
  auto& m = new_library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&host_fallback>());
  auto& quantized = new_library(torch::Library::IMPL, "_", c10::DispatchKey::QuantizedPrivateUse1, __FILE__, __LINE__);
  quantized.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized_operator>());
}

void bind_operators(pybind11::module& module) {
  module.def("install_minimal_operators", &install_minimal_operators);
  module.def("install_native_kernels", &install_native_kernels);
  module.def("install_fallback", &install_fallback);
  module.def("install_attention_choice", &install_attention_choice);
  module.def("set_fallback_policy", [](int policy) { g_fallback_policy = policy; });
  module.def("fallback_policy", []() { return g_fallback_policy.load(); });
  module.def("fallback_counts", []() {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    return std::map<std::string, int64_t>(g_fallback_counts.begin(), g_fallback_counts.end());
  });
  module.def("reset_fallback_counts", []() {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    g_fallback_counts.clear();
    g_fallback_warned.clear();
  });
  module.def("set_fallback_observer", [](pybind11::object observer) {
    PyObject* previous = g_fallback_observer;
    if (observer.is_none()) {
      g_fallback_observer = nullptr;
    } else {
      g_fallback_observer = observer.ptr();
      Py_INCREF(g_fallback_observer);
    }
    Py_XDECREF(previous);
  });
}

}  // namespace sim
