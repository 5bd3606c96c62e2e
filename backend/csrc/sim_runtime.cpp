// The C++ runtime core of the simulated accelerator `sim` (PrivateUse1).
// Each part is registered by its own function so that the Python side can bring
// the backend up step by step, in the order of the integration guide.
#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace sim {

using c10::DeviceIndex;
constexpr auto kSim = c10::DeviceType::PrivateUse1;

// ---------------------------------------------------------------- devices
static std::atomic<int> g_device_count{0};
static thread_local DeviceIndex t_current_device = 0;

static void check_device_index(DeviceIndex index) {
  int count = g_device_count.load();
  TORCH_CHECK(  // a RuntimeError, as CUDA raises for an invalid device ordinal
      index >= 0 && index < count,
      "sim:", static_cast<int>(index), " does not exist: this process has ", count,
      " sim device(s), sim:0 to sim:", count - 1,
      ". Use a smaller index or set SIM_DEVICE_COUNT before the backend starts.");
}

// -------------------------------------------------------------- allocator
struct DeviceMemory {
  std::mutex mutex;
  int64_t capacity = int64_t(8) << 30;
  int64_t allocated = 0, peak_allocated = 0;
  int64_t reserved = 0, peak_reserved = 0;
  int64_t requested = 0, peak_requested = 0;
  int64_t active_blocks = 0, peak_active_blocks = 0;
  int64_t segments = 0, peak_segments = 0;
  int64_t allocation_count = 0, free_count = 0;
  int64_t allocated_total = 0, freed_total = 0;
  int64_t device_allocs = 0, device_frees = 0, ooms = 0;
  std::unordered_map<size_t, std::vector<void*>> cached;  // block size -> free blocks
};

struct Block {
  size_t size;
  size_t requested;
  DeviceIndex device;
};

static std::vector<std::unique_ptr<DeviceMemory>> g_memory;
static std::mutex g_blocks_mutex;
static std::map<const char*, Block> g_blocks;  // live device blocks, by start address

static constexpr size_t kBlockRounding = 512;

static std::string format_bytes(int64_t bytes) {
  char buffer[64];
  double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) snprintf(buffer, sizeof(buffer), "%.2f GiB", b / (1 << 30));
  else if (b >= (1 << 20)) snprintf(buffer, sizeof(buffer), "%.2f MiB", b / (1 << 20));
  else if (b >= (1 << 10)) snprintf(buffer, sizeof(buffer), "%.2f KiB", b / (1 << 10));
  else snprintf(buffer, sizeof(buffer), "%lld bytes", static_cast<long long>(bytes));
  return buffer;
}

static void release_cached_locked(DeviceMemory& memory) {
  for (auto& [size, blocks] : memory.cached) {
    for (void* p : blocks) {
      std::free(p);
      memory.reserved -= static_cast<int64_t>(size);
      memory.segments -= 1;
      memory.device_frees += 1;
    }
  }
  memory.cached.clear();
}

static void sim_free(void* ptr);

static void* allocate_block(DeviceIndex device, size_t requested) {
  check_device_index(device);
  size_t size = std::max(kBlockRounding, (requested + kBlockRounding - 1) / kBlockRounding * kBlockRounding);
  DeviceMemory& memory = *g_memory[device];
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(memory.mutex);
    auto found = memory.cached.find(size);
    if (found != memory.cached.end() && !found->second.empty()) {
      ptr = found->second.back();
      found->second.pop_back();
    } else {
      if (memory.reserved + static_cast<int64_t>(size) > memory.capacity) release_cached_locked(memory);
      if (memory.reserved + static_cast<int64_t>(size) > memory.capacity) {
        memory.ooms += 1;
        int64_t free_bytes = std::max<int64_t>(0, memory.capacity - memory.reserved);
        TORCH_CHECK_WITH(OutOfMemoryError, false,
            "sim:", static_cast<int>(device), " out of memory: tried to allocate ", format_bytes(requested),
            "; the device has a capacity of ", format_bytes(memory.capacity), ", of which ",
            format_bytes(memory.allocated), " is allocated by tensors and ", format_bytes(free_bytes),
            " is free. Free some tensors, or raise the capacity with torch.sim.set_memory_capacity() "
            "or SIM_MEMORY_CAPACITY.");
      }
      ptr = std::aligned_alloc(64, size);
      TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "sim:", static_cast<int>(device),
                       ": the host could not provide ", format_bytes(size), " for the simulated device memory.");
      memory.reserved += static_cast<int64_t>(size);
      memory.peak_reserved = std::max(memory.peak_reserved, memory.reserved);
      memory.segments += 1;
      memory.peak_segments = std::max(memory.peak_segments, memory.segments);
      memory.device_allocs += 1;
    }
    memory.allocated += static_cast<int64_t>(size);
    memory.peak_allocated = std::max(memory.peak_allocated, memory.allocated);
    memory.requested += static_cast<int64_t>(requested);
    memory.peak_requested = std::max(memory.peak_requested, memory.requested);
    memory.active_blocks += 1;
    memory.peak_active_blocks = std::max(memory.peak_active_blocks, memory.active_blocks);
    memory.allocation_count += 1;
    memory.allocated_total += static_cast<int64_t>(size);
  }
  std::lock_guard<std::mutex> lock(g_blocks_mutex);
  g_blocks.emplace(static_cast<const char*>(ptr), Block{size, requested, device});
  return ptr;
}

// Returns false when ptr is not a live sim block.
static bool try_free_block(void* ptr) {
  Block block;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto found = g_blocks.find(static_cast<const char*>(ptr));
    if (found == g_blocks.end()) return false;
    block = found->second;
    g_blocks.erase(found);
  }
  DeviceMemory& memory = *g_memory[block.device];
  std::lock_guard<std::mutex> lock(memory.mutex);
  memory.allocated -= static_cast<int64_t>(block.size);
  memory.requested -= static_cast<int64_t>(block.requested);
  memory.active_blocks -= 1;
  memory.free_count += 1;
  memory.freed_total += static_cast<int64_t>(block.size);
  memory.cached[block.size].push_back(ptr);
  return true;
}

static void sim_free(void* ptr) {
  if (ptr != nullptr) try_free_block(ptr);
}

static void fill_stat(c10::CachingAllocator::StatArray& stat, int64_t current, int64_t peak,
                      int64_t allocated, int64_t freed) {
  auto& s = stat[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  s.current = current;
  s.peak = peak;
  s.allocated = allocated;
  s.freed = freed;
}

struct SimAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    DeviceIndex device = t_current_device;
    if (nbytes == 0) return {nullptr, nullptr, &sim_free, c10::Device(kSim, device)};
    void* ptr = allocate_block(device, nbytes);
    return {ptr, ptr, &sim_free, c10::Device(kSim, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &sim_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }
  bool initialized() override { return g_device_count.load() > 0; }
  void emptyCache(c10::MempoolId_t) override {
    for (auto& memory : g_memory) {
      std::lock_guard<std::mutex> lock(memory->mutex);
      release_cached_locked(*memory);
    }
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex device) override {
    check_device_index(device);
    DeviceMemory& m = *g_memory[device];
    std::lock_guard<std::mutex> lock(m.mutex);
    c10::CachingDeviceAllocator::DeviceStats stats;
    fill_stat(stats.allocated_bytes, m.allocated, m.peak_allocated, m.allocated_total, m.freed_total);
    fill_stat(stats.active_bytes, m.allocated, m.peak_allocated, m.allocated_total, m.freed_total);
    fill_stat(stats.requested_bytes, m.requested, m.peak_requested, 0, 0);
    fill_stat(stats.reserved_bytes, m.reserved, m.peak_reserved, 0, 0);
    fill_stat(stats.allocation, m.active_blocks, m.peak_active_blocks, m.allocation_count, m.free_count);
    fill_stat(stats.active, m.active_blocks, m.peak_active_blocks, m.allocation_count, m.free_count);
    fill_stat(stats.segment, m.segments, m.peak_segments, m.device_allocs, m.device_frees);
    stats.num_device_alloc = m.device_allocs;
    stats.num_device_free = m.device_frees;
    stats.num_ooms = m.ooms;
    return stats;
  }
  void resetAccumulatedStats(DeviceIndex device) override {
    check_device_index(device);
    DeviceMemory& m = *g_memory[device];
    std::lock_guard<std::mutex> lock(m.mutex);
    m.allocation_count = m.free_count = m.allocated_total = m.freed_total = 0;
    m.device_allocs = m.device_frees = m.ooms = 0;
  }
  void resetPeakStats(DeviceIndex device) override {
    check_device_index(device);
    DeviceMemory& m = *g_memory[device];
    std::lock_guard<std::mutex> lock(m.mutex);
    m.peak_allocated = m.allocated;
    m.peak_reserved = m.reserved;
    m.peak_requested = m.requested;
    m.peak_active_blocks = m.active_blocks;
    m.peak_segments = m.segments;
  }
  std::pair<size_t, size_t> getMemoryInfo(DeviceIndex device) override {
    check_device_index(device);
    DeviceMemory& m = *g_memory[device];
    std::lock_guard<std::mutex> lock(m.mutex);
    return {static_cast<size_t>(std::max<int64_t>(0, m.capacity - m.reserved)), static_cast<size_t>(m.capacity)};
  }
};

static SimAllocator g_allocator;

// While a host kernel computes for the device, the CPU allocator hands out sim
// memory, so that the kernel's fresh outputs already live on the device.
static thread_local DeviceIndex t_host_redirect = -1;
static c10::Allocator* g_base_cpu_allocator = nullptr;
static c10::DeleterFnPtr g_base_cpu_raw_deleter = nullptr;

static void redirect_raw_delete(void* ptr) {
  if (!try_free_block(ptr) && g_base_cpu_raw_deleter != nullptr) g_base_cpu_raw_deleter(ptr);
}

struct RedirectingCpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    if (t_host_redirect < 0 || nbytes == 0) return g_base_cpu_allocator->allocate(nbytes);
    void* ptr = allocate_block(t_host_redirect, nbytes);
    return {ptr, ptr, &sim_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &redirect_raw_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }
};
static RedirectingCpuAllocator g_redirecting_cpu_allocator;

static bool is_sim_memory(const c10::Storage& storage) {
  return storage.data_ptr().get_deleter() == &sim_free;
}

// ---------------------------------------------------------- pinned memory
static std::mutex g_pinned_mutex;
static std::map<const char*, size_t> g_pinned;  // pinned blocks: start -> size

// True for any address inside a pinned block (a slice of pinned memory is pinned too).
static bool is_pinned_address(const void* data) {
  const char* address = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto after = g_pinned.upper_bound(address);
  if (after == g_pinned.begin()) return false;
  auto block = std::prev(after);
  return address < block->first + std::max<size_t>(block->second, 1);
}

static void pinned_free(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(static_cast<const char*>(ptr));
  }
  std::free(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return {nullptr, nullptr, &pinned_free, c10::Device(c10::kCPU)};
    void* ptr = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "sim: could not pin ", format_bytes(nbytes), " of host memory.");
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.emplace(static_cast<const char*>(ptr), nbytes);
    return {ptr, ptr, &pinned_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }
};
static PinnedAllocator g_pinned_allocator;

// -------------------------------------------------------------- generator
struct SimGenerator final : c10::GeneratorImpl {
  // The random numbers come from a host generator that lives inside the device
  // generator: host kernels computing for the device draw from it.
  c10::intrusive_ptr<at::CPUGeneratorImpl> host;

  explicit SimGenerator(DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kSim, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host(c10::make_intrusive<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override { host->set_current_seed(seed); }
  void set_offset(uint64_t offset) override { host->set_offset(offset); }
  uint64_t get_offset() const override { return host->get_offset(); }
  uint64_t current_seed() const override { return host->current_seed(); }
  uint64_t seed() override { return host->seed(); }
  void set_state(const c10::TensorImpl& new_state) override {
    int64_t expected = host->get_state()->numel();
    TORCH_CHECK(new_state.numel() == expected, "sim: an RNG state is ", expected,
                " bytes (as get_rng_state() returns it), got ", new_state.numel(), " bytes");
    host->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override { return host->get_state(); }
  static c10::DeviceType device_type() { return kSim; }

 private:
  SimGenerator* clone_impl() const override {
    auto* copy = new SimGenerator(device().index());
    copy->host = c10::make_intrusive<at::CPUGeneratorImpl>();
    copy->host->set_state(*host->get_state());
    return copy;
  }
};

static std::vector<at::Generator> g_default_generators;
static std::atomic<bool> g_generator_installed{false};

static const at::Generator& default_generator(DeviceIndex device);

static void swap_generator_states(at::CPUGeneratorImpl* a, at::CPUGeneratorImpl* b) {
  std::scoped_lock lock(a->mutex_, b->mutex_);
  auto engine = a->engine();
  a->set_engine(b->engine());
  b->set_engine(engine);
  auto next_float = a->next_float_normal_sample();
  a->set_next_float_normal_sample(b->next_float_normal_sample());
  b->set_next_float_normal_sample(next_float);
  auto next_double = a->next_double_normal_sample();
  a->set_next_double_normal_sample(b->next_double_normal_sample());
  b->set_next_double_normal_sample(next_double);
}

// Host kernels of random operators draw from the host's default generator, also in
// the sub-operations they call; while one computes for a sim device, that generator
// holds the device generator's state.
struct DeviceRandomScope {
  at::CPUGeneratorImpl* host_default = nullptr;
  at::CPUGeneratorImpl* device_host = nullptr;
  DeviceRandomScope(bool active, DeviceIndex device);
  ~DeviceRandomScope() {
    if (host_default != nullptr) swap_generator_states(host_default, device_host);
  }
};

static const at::Generator& default_generator(DeviceIndex device) {
  TORCH_CHECK(g_generator_installed.load(),
              "sim has no random number generator yet: the 'generator' step of the bring-up is not installed.");
  if (device < 0) device = t_current_device;
  check_device_index(device);
  return g_default_generators[device];
}

DeviceRandomScope::DeviceRandomScope(bool active, DeviceIndex device) {
  if (!active || !g_generator_installed.load()) return;
  host_default = at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator());
  auto* device_generator = dynamic_cast<SimGenerator*>(default_generator(device).unsafeGetGeneratorImpl());
  device_host = device_generator->host.get();
  swap_generator_states(host_default, device_host);
}

static at::Generator host_generator_for(const at::Generator& generator) {
  auto* sim_generator = dynamic_cast<SimGenerator*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(sim_generator != nullptr, "sim: expected a sim generator, got one for ", generator.device());
  return at::Generator(sim_generator->host);
}

// ------------------------------------------------------------------ guard
static std::atomic<bool> g_streams_installed{false};
static constexpr int kStreamPoolSize = 32;
static std::atomic<int64_t> g_next_stream_id{1};
static thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;

struct SimEvent {
  std::chrono::steady_clock::time_point recorded_at;
  bool recorded = false;
  bool timing = false;
  DeviceIndex device = 0;
};

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kSim; }
  c10::Device exchangeDevice(c10::Device device) const override {
    auto previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return c10::Device(kSim, t_current_device); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kSim, "sim: expected a sim device, got ", device);
    DeviceIndex index = device.has_index() ? device.index() : 0;
    check_device_index(index);
    t_current_device = index;
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index() && device.index() >= 0 && device.index() < g_device_count.load())
      t_current_device = device.index();
  }
  // A device without an index (torch.Stream(device="sim")) means the current device, as on CUDA.
  static c10::Device resolved(c10::Device device) {
    return device.has_index() ? device : c10::Device(kSim, t_current_device);
  }
  c10::Stream getStream(c10::Device device) const override {
    device = resolved(device);
    auto found = t_current_stream.find(device.index());
    c10::StreamId id = found == t_current_stream.end() ? 0 : found->second;
    return c10::Stream(c10::Stream::UNSAFE, device, id);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, resolved(device));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    require_streams();
    static std::atomic<int> next{0};
    return c10::Stream(c10::Stream::UNSAFE, resolved(device), 1 + (next++ % kStreamPoolSize));
  }
  c10::Stream getNewStream(c10::Device device, int) const override {
    require_streams();
    return c10::Stream(c10::Stream::UNSAFE, resolved(device), kStreamPoolSize + g_next_stream_id++);
  }
  // sim computes with the host's kernels, so every dtype the CPU has is supported (the default).
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_device_index(resolved(device).index());
    return c10::DeviceCapability();
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    auto previous = getStream(stream.device());
    t_current_stream[stream.device_index()] = stream.id();
    return previous;
  }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(g_device_count.load()); }

  // The simulated device runs every kernel synchronously, so streams are always idle
  // and an event completes when it is recorded.
  void record(void** event, const c10::Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    require_streams();
    if (*event == nullptr) {
      auto* created = new SimEvent();
      created->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = created;
    }
    auto* sim_event = static_cast<SimEvent*>(*event);
    sim_event->recorded_at = std::chrono::steady_clock::now();
    sim_event->recorded = true;
    sim_event->device = stream.device_index();
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override { delete static_cast<SimEvent*>(event); }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex device_index) const override { check_device_index(device_index); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "sim: both events must be recorded before elapsed_time() is called.");
    auto* first = static_cast<SimEvent*>(start);
    auto* second = static_cast<SimEvent*>(end);
    TORCH_CHECK(first->recorded && second->recorded,
                "sim: both events must be recorded before elapsed_time() is called.");
    return std::chrono::duration<double, std::milli>(second->recorded_at - first->recorded_at).count();
  }

 private:
  static void require_streams() {
    TORCH_CHECK(g_streams_installed.load(),
                "sim has only its default stream: the 'streams_events' step of the bring-up is not installed.");
  }
};

static SimGuardImpl g_guard_impl;

// ------------------------------------------------------------------ hooks
struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_device_count.load() > 0; }
  const at::Generator& getDefaultGenerator(DeviceIndex device) const override { return default_generator(device); }
  at::Generator getNewGenerator(DeviceIndex device) const override {
    TORCH_CHECK(g_generator_installed.load(),
                "sim has no random number generator yet: the 'generator' step of the bring-up is not installed.");
    if (device < 0) device = t_current_device;
    check_device_index(device);
    return at::make_generator<SimGenerator>(device);
  }
  c10::Device getDeviceFromPtr(void* data) const override {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto after = g_blocks.upper_bound(static_cast<const char*>(data));
    TORCH_CHECK(after != g_blocks.begin(), "sim: the pointer is not in sim device memory");
    auto& [start, block] = *std::prev(after);
    TORCH_CHECK(static_cast<const char*>(data) < start + block.size, "sim: the pointer is not in sim device memory");
    return c10::Device(kSim, block.device);
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_address(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  bool hasPrimaryContext(DeviceIndex device) const override { return device >= 0 && device < g_device_count.load(); }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(g_device_count.load()); }
  void setCurrentDevice(DeviceIndex device) const override { g_guard_impl.setDevice(c10::Device(kSim, device)); }
  DeviceIndex getCurrentDevice() const override { return t_current_device; }
  DeviceIndex exchangeDevice(DeviceIndex device) const override {
    return g_guard_impl.exchangeDevice(c10::Device(kSim, device)).index();
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex device) const override { return exchangeDevice(device); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override;
};

// ---------------------------------------------------------------- storage
static void grow_storage(const c10::Storage& storage, size_t new_bytes) {
  if (new_bytes <= storage.nbytes()) return;
  DeviceIndex device = storage.device().type() == kSim ? storage.device().index() : t_current_device;
  DeviceIndex previous = t_current_device;
  t_current_device = device;
  c10::DataPtr fresh;
  try {
    fresh = g_allocator.allocate(new_bytes);
  } catch (...) {
    t_current_device = previous;
    throw;
  }
  t_current_device = previous;
  if (storage.nbytes() > 0 && storage.data() != nullptr) std::memcpy(fresh.get(), storage.data(), storage.nbytes());
  auto* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

void SimHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const {
  TORCH_CHECK(storage.resizable(), "sim: this storage is not resizable");
  if (new_bytes > storage.nbytes()) {
    grow_storage(storage, new_bytes);
  } else {
    storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
  }
}

// ------------------------------------------------------- host computation
// Host kernels compute on device memory in place: a sim tensor is shown to them as
// a CPU tensor whose storage points at the same bytes (and keeps the device
// storage alive), so nothing is copied in either direction.
static void release_storage_reference(void* context) { delete static_cast<c10::Storage*>(context); }

static c10::Storage host_view_of_storage(const c10::Storage& device_storage) {
  auto* keep_alive = new c10::Storage(device_storage);
  c10::DataPtr data(device_storage.unsafeGetStorageImpl()->mutable_data(), keep_alive, &release_storage_reference,
                    c10::Device(c10::kCPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), device_storage.nbytes(), std::move(data),
                      &g_redirecting_cpu_allocator, device_storage.resizable());
}

static at::Tensor tensor_on_storage(c10::Storage storage, c10::DispatchKey key, const at::Tensor& geometry) {
  auto result = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                         geometry.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                      geometry.storage_offset());
  if (geometry.is_conj()) result._set_conj(true);
  if (geometry.is_neg()) result._set_neg(true);
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

at::Tensor host_view(const at::Tensor& device_tensor) { return host_alias(device_tensor); }

// Takes over a host tensor whose bytes the sim allocator handed out (a fresh output
// of a host kernel) as a sim tensor, without copying.
static at::Tensor wrap_device_storage(const at::Tensor& host, c10::Device device) {
  auto* storage = host.storage().unsafeGetStorageImpl();
  storage->mutable_data_ptr().unsafe_set_device(device);
  storage->set_allocator(&g_allocator);
  return tensor_on_storage(host.storage(), c10::DispatchKey::PrivateUse1, host);
}

// Everything a host kernel needs to compute for one device.
struct HostScope {
  c10::DeviceGuard device_guard;
  DeviceIndex previous_redirect;
  c10::impl::ExcludeDispatchKeyGuard no_autograd{c10::autograd_dispatch_keyset_with_ADInplaceOrView};
  explicit HostScope(c10::Device device) : device_guard(device), previous_redirect(t_host_redirect) {
    t_host_redirect = device.index();
  }
  ~HostScope() { t_host_redirect = previous_redirect; }
};

static at::Tensor to_device(const at::Tensor& host, c10::Device device) {
  if (!host.defined() || host.device().type() == kSim) return host;
  check_strided(host);
  if (is_sim_memory(host.storage())) return wrap_device_storage(host, device);
  c10::DeviceGuard guard(device);  // the copy lands on the device of the call, not the current one
  at::Tensor result = at::detail::empty_strided_generic(host.sizes(), host.strides(), &g_allocator,
                                                  c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                  host.scalar_type());
  host_alias(result).copy_(host);
  return result;
}

struct OperatorEntry {
  std::string name;
  std::string kernel_name;  // its kernel in profiler traces: "sim::mm" for aten::mm
  bool takes_host_indices = false;  // like CUDA, indexing accepts index tensors that live on the host
  bool has_host_kernel = false;
  bool is_random = false;
  std::vector<int> generator_arguments;  // Generator? arguments, filled in from the device generator
};
static std::mutex g_operator_entries_mutex;
static std::unordered_map<const c10::FunctionSchema*, OperatorEntry> g_operator_entries;

static OperatorEntry& operator_entry(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_operator_entries_mutex);
  auto& entry = g_operator_entries[&op.schema()];
  if (entry.name.empty()) {
    const auto& name = op.schema().operator_name();
    entry.name = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    entry.kernel_name = "sim::" + entry.name.substr(entry.name.find("::") + 2);
    const auto& arguments = op.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      auto type = arguments[i].real_type();
      if (type->kind() == c10::TypeKind::OptionalType)
        type = type->castRaw<c10::OptionalType>()->getElementType();
      if (type->kind() == c10::TypeKind::GeneratorType) entry.generator_arguments.push_back(static_cast<int>(i));
    }
    entry.is_random = op.hasTag(at::Tag::nondeterministic_seeded);
    static const std::unordered_set<std::string> indexing{"index", "index_put", "index_put_", "_index_put_impl_",
                                                          "_unsafe_index", "_unsafe_index_put"};
    entry.takes_host_indices = indexing.count(name.name.substr(name.name.find("::") + 2)) > 0;
    entry.has_host_kernel = op.hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                            op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                            op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
                            op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  }
  return entry;
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
  std::vector<Entry> entries;
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> storages;  // host storage -> device storage

  at::Tensor add(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kSim) return t;
    check_strided(t);
    // The same tensor passed twice (`cat([x, y], out=x)`) gets the same alias: kernels check
    // overlap by identity first, and an empty tensor overlaps nothing but itself.
    for (auto& entry : entries)
      if (entry.device_tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return entry.host_tensor;
    c10::Storage host_storage;
    for (auto& [host, device_storage] : storages)
      if (device_storage.unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl()) {
        host_storage = c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(host));
        break;
      }
    if (!host_storage) {
      host_storage = host_view_of_storage(t.storage());
      storages.emplace_back(host_storage.unsafeGetStorageImpl(), t.storage());
    }
    at::Tensor host = tensor_on_storage(std::move(host_storage), c10::DispatchKey::CPU, t);
    entries.push_back({t, host});
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
      if (host_impl->sizes() != device_impl->sizes() || host_impl->strides() != device_impl->strides() ||
          host_impl->storage_offset() != device_impl->storage_offset())
        device_impl->set_sizes_and_strides(host_impl->sizes(), host_impl->strides(), host_impl->storage_offset());
      // a kernel may flip the lazy conjugate or negative bit of its out= tensor
      if (host_impl->is_conj() != device_impl->is_conj()) device_impl->_set_conj(host_impl->is_conj());
      if (host_impl->is_neg() != device_impl->is_neg()) device_impl->_set_neg(host_impl->is_neg());
    }
  }

  at::Tensor back_to_device(const at::Tensor& host, c10::Device device) {
    if (!host.defined() || host.device().type() == kSim) return host;
    for (auto& entry : entries)
      if (entry.host_tensor.unsafeGetTensorImpl() == host.unsafeGetTensorImpl()) return entry.device_tensor;
    if (host.layout() == c10::kStrided && host.has_storage()) {
      for (auto& [host_storage, device_storage] : storages)
        if (host_storage == host.storage().unsafeGetStorageImpl())
          return tensor_on_storage(device_storage, c10::DispatchKey::PrivateUse1, host);
    }
    return to_device(host, device);
  }
};

bool recording_kernels();  // profiler.cpp
void record_kernel(const std::string& name, int64_t start_ns, int64_t end_ns, c10::Device device);

// Runs an operator's host (CPU) kernel on device memory: the boxed kernel behind
// the per-op native kernels and the fallback alike.
static void compute_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
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

  HostAliases aliases;
  auto alias = [&](const at::Tensor& t) { return aliases.add(t); };
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
      if (g_generator_installed.load() && !entry.is_random)
        value = host_generator_for(default_generator(device.index()));
    } else if (value.isGenerator() && value.toGenerator().device().type() == kSim) {
      value = host_generator_for(value.toGenerator());
    }
  }

  {
    HostScope scope(device);
    DeviceRandomScope random(entry.is_random, device.index());
    const int64_t start_ns = recording_kernels() ? c10::getTime() : 0;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    if (start_ns != 0) record_kernel(entry.kernel_name, start_ns, c10::getTime(), device);
  }

  aliases.write_back_resizes(device);
  auto back = [&](const at::Tensor& host) { return aliases.back_to_device(host, device); };
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
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   requested_dtype(dtype), memory_format);
}

at::Tensor sim_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                             std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "sim supports strided tensors only, got layout ",
              *layout);
  check_pin_memory(pin_memory);
  c10::DeviceGuard guard(device_or_current(device));
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
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
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, &g_allocator, /*resizable=*/true);
  return sim_set_storage(self, empty, 0, {0}, {1});
}

at::Tensor sim_copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  c10::Device device = self.device().type() == kSim ? self.device() : dst.device();
  HostScope scope(device);
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

at::Tensor sim_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return sim_copy_from(self, dst, false);
}

c10::Scalar sim_local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(host_alias(self));
}

// ------------------------------------------------- convolution (explicit)
at::Tensor sim_convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                        c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                        c10::IntArrayRef output_padding, int64_t groups) {
  DeviceOfArguments where;
  where.see(input, "convolution_overrideable");
  where.see(weight, "convolution_overrideable");
  if (bias) where.see(*bias, "convolution_overrideable");
  at::Tensor output;
  {
    HostScope scope(input.device());
    std::optional<at::Tensor> host_bias = bias ? std::optional<at::Tensor>(host_alias(*bias)) : std::nullopt;
    output = at::convolution(host_alias(input), host_alias(weight), host_bias, stride, padding, dilation,
                             transposed, output_padding, groups);
  }
  return to_device(output, input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sim_convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  {
    HostScope scope(input.device());
    std::vector<int64_t> bias_sizes{grad_output.size(1)};
    grads = at::convolution_backward(host_alias(grad_output), host_alias(input), host_alias(weight), bias_sizes,
                                     stride, padding, dilation, transposed, output_padding, groups, output_mask);
  }
  return {to_device(std::get<0>(grads), input.device()), to_device(std::get<1>(grads), input.device()),
          to_device(std::get<2>(grads), input.device())};
}

// ---------------------------------------------------------- registration
static std::vector<std::unique_ptr<torch::Library>> g_libraries;
static std::unique_ptr<SimHooks> g_hooks;
static std::unique_ptr<c10::impl::DeviceGuardImplRegistrar> g_guard_registrar;

static torch::Library& new_library(torch::Library::Kind kind, const char* ns, c10::DispatchKey key, int line) {
  g_libraries.push_back(std::make_unique<torch::Library>(kind, ns, key, __FILE__, line));
  return *g_libraries.back();
}

void install_runtime(int device_count, int64_t capacity) {
  TORCH_CHECK(device_count >= 1 && device_count <= 64, "SIM_DEVICE_COUNT must be between 1 and 64, got ",
              device_count);
  if (g_device_count.load() > 0) return;
  for (int i = 0; i < device_count; ++i) {
    g_memory.push_back(std::make_unique<DeviceMemory>());
    g_memory.back()->capacity = capacity;
  }
  g_device_count = device_count;
}

void install_hooks() {
  if (g_hooks) return;
  g_hooks = std::make_unique<SimHooks>();
  at::RegisterPrivateUse1HooksInterface(g_hooks.get());
}

void install_guard() {
  if (g_guard_registrar) return;
  g_guard_registrar = std::make_unique<c10::impl::DeviceGuardImplRegistrar>(kSim, &g_guard_impl);
}

void install_allocator() {
  c10::SetAllocator(kSim, &g_allocator);
  g_base_cpu_allocator = c10::GetCPUAllocator();
  g_base_cpu_raw_deleter = g_base_cpu_allocator->raw_deleter();
  c10::SetCPUAllocator(&g_redirecting_cpu_allocator, /*priority=*/100);
}

at::Tensor sim_refuse_sparse(c10::IntArrayRef, std::optional<c10::ScalarType>, std::optional<c10::Layout> layout,
                             std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "sim supports strided (dense) tensors only, got layout ",
                              layout.value_or(c10::kSparse), "; create the tensor on the CPU instead.");
}

void install_minimal_operators() {
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __LINE__);
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
  auto& sparse = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::SparsePrivateUse1, __LINE__);
  sparse.impl("empty.memory_format", TORCH_FN(sim_refuse_sparse));
}

void install_native_kernels(const std::vector<std::string>& operator_names) {
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __LINE__);
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

void install_attention_choice() {
  at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&attention_choice);
  auto& m = new_library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __LINE__);
  m.impl("_fused_sdp_choice", TORCH_FN(attention_choice));
}

void install_fallback() {
  auto& m = new_library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __LINE__);
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&host_fallback>());
}

void install_streams_events() { g_streams_installed = true; }

void install_generator() {
  if (g_generator_installed.load()) return;
  for (int i = 0; i < g_device_count.load(); ++i)
    g_default_generators.push_back(at::make_generator<SimGenerator>(static_cast<DeviceIndex>(i)));
  g_generator_installed = true;
}

// CUDA refuses binary_cross_entropy under autocast (a float16 sigmoid output loses too much
// precision); sim refuses it the same way, with the way out in the message.
static at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                               int64_t) {
  TORCH_CHECK(false,
              "sim: binary_cross_entropy is not allowed under autocast, as on CUDA: a sigmoid output in lower "
              "precision makes it unsafe. Use binary_cross_entropy_with_logits (BCEWithLogitsLoss), which "
              "takes the logits and is safe, or compute this loss outside the autocast region.");
}

// CUDA's whole policy, from PyTorch's shared op lists. Each category is its own registration
// (its own line), so torch.sim.cast_policy() can read the categories back from the dispatcher.
void install_autocast() {
  using at::IntArrayRef, at::Scalar, at::ScalarType, at::Tensor;  // the names PyTorch's op lists use
  auto& everything = new_library(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __LINE__);
  everything.fallback(torch::CppFunction::makeFallthrough());
  constexpr auto kAutocast = c10::DispatchKey::AutocastPrivateUse1;
#define SIM_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SIM_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SIM_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define SIM_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __LINE__);
    AT_FORALL_LOWER_PRECISION_FP(SIM_LOWER_PRECISION)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __LINE__);
    AT_FORALL_FP32(SIM_FP32)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __LINE__);
    AT_FORALL_FP32_SET_OPT_DTYPE(SIM_FP32_SET_OPT_DTYPE)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __LINE__);
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  }
  {
    auto& m = new_library(torch::Library::IMPL, "aten", kAutocast, __LINE__);
    AT_FORALL_PROMOTE(SIM_PROMOTE)
  }
  new_library(torch::Library::IMPL, "aten", kAutocast, __LINE__)
      .impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
#undef SIM_LOWER_PRECISION
#undef SIM_FP32
#undef SIM_FP32_SET_OPT_DTYPE
#undef SIM_PROMOTE
}

// ----------------------------------------------------------- Python glue
static DeviceIndex checked(int64_t device) {
  check_device_index(static_cast<DeviceIndex>(device));
  return static_cast<DeviceIndex>(device);
}

void install_tensor_metadata();  // serialization.cpp
void install_profiler();         // profiler.cpp
void bind_distributed(pybind11::module& module);  // distributed.cpp

}  // namespace sim

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using namespace sim;
  module.def("install_runtime", &install_runtime);
  module.def("install_hooks", &install_hooks);
  module.def("install_guard", &install_guard);
  module.def("install_allocator", &install_allocator);
  module.def("install_minimal_operators", &install_minimal_operators);
  module.def("install_native_kernels", &install_native_kernels);
  module.def("install_fallback", &install_fallback);
  module.def("install_attention_choice", &install_attention_choice);
  module.def("install_streams_events", &install_streams_events);
  module.def("install_generator", &install_generator);
  module.def("install_autocast", &install_autocast);
  module.def("install_tensor_metadata", &install_tensor_metadata);
  module.def("install_profiler", &install_profiler);
  bind_distributed(module);

  module.def("device_count", []() { return g_device_count.load(); });
  module.def("current_device", []() { return static_cast<int>(t_current_device); });
  module.def("set_device", [](int64_t device) { t_current_device = checked(device); });

  module.def("memory_stats", [](int64_t device) {
    DeviceMemory& m = *g_memory[checked(device)];
    std::lock_guard<std::mutex> lock(m.mutex);
    return std::map<std::string, int64_t>{
        {"allocated_bytes.all.current", m.allocated}, {"allocated_bytes.all.peak", m.peak_allocated},
        {"allocated_bytes.all.allocated", m.allocated_total}, {"allocated_bytes.all.freed", m.freed_total},
        {"reserved_bytes.all.current", m.reserved}, {"reserved_bytes.all.peak", m.peak_reserved},
        {"requested_bytes.all.current", m.requested}, {"requested_bytes.all.peak", m.peak_requested},
        {"active.all.current", m.active_blocks}, {"active.all.peak", m.peak_active_blocks},
        {"allocation.all.allocated", m.allocation_count}, {"allocation.all.freed", m.free_count},
        {"segment.all.current", m.segments}, {"segment.all.peak", m.peak_segments},
        {"num_device_alloc", m.device_allocs}, {"num_device_free", m.device_frees},
        {"num_ooms", m.ooms}, {"capacity_bytes", m.capacity}};
  });
  module.def("reset_peak_memory_stats", [](int64_t device) { g_allocator.resetPeakStats(checked(device)); });
  module.def("reset_accumulated_memory_stats", [](int64_t device) { g_allocator.resetAccumulatedStats(checked(device)); });
  module.def("empty_cache", []() { g_allocator.emptyCache({0, 0}); });
  module.def("set_memory_capacity", [](int64_t device, int64_t capacity) {
    TORCH_CHECK(capacity > 0, "sim: the memory capacity must be a positive number of bytes, got ", capacity);
    DeviceMemory& m = *g_memory[checked(device)];
    std::lock_guard<std::mutex> lock(m.mutex);
    m.capacity = capacity;
  });

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

  module.def("default_generator", [](int64_t device) { return default_generator(checked(device)); });
  module.def("is_pinned_pointer",
             [](int64_t address) { return is_pinned_address(reinterpret_cast<const void*>(address)); });
}
