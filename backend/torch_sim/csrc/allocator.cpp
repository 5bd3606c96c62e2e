// Step 4, allocator: device memory with per-device statistics and a simulated capacity.
//
// A vendor's allocator is a c10::DeviceAllocator registered for PrivateUse1: allocate() hands out
// device memory with the deleter that gives it back, and getDeviceStats() and friends answer
// torch.accelerator.memory_allocated() and the rest. sim's blocks come from its driver (simMalloc,
// simFree), rounded to 512 bytes and cached after a free until empty_cache(), as a caching
// allocator keeps what its driver is slow to give; a capacity makes out-of-memory real.
// Two host allocators live here too: the pinned-memory allocator (an at::HostAllocator over the
// driver's simMallocHost) that the hooks hand out and register, and a CPU allocator that gives a
// host kernel computing for sim:N fresh outputs in sim:N's memory.
#include "sim.h"
#include "graphs.h"
#include "interface_trace.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace sim {

// A free block remembers the streams whose queued work may still use it: the stream it was allocated
// on and those recordStream() named. It goes back to its own stream at once (the stream's later work
// runs after the work that used it) and to another stream only once all of those streams are idle.
// "At once" holds for the host's allocations, whose work is queued after the free. A host kernel allocates
// as it runs, on the device, where its stream may still hold work queued before the free that uses the block
// (a direct kernel's handles do not own the memory they name): a kernel takes only blocks freed on the device,
// or by the host before the kernel was launched (host_free, counted by g_host_frees).
struct FreeBlock {
  void* ptr;
  c10::StreamId stream;
  std::vector<c10::StreamId> recorded;
  uint64_t host_free = 0;  // its number among the host's frees; 0: freed by a kernel
};
static std::atomic<uint64_t> g_host_frees{0};

uint64_t host_frees_so_far() { return g_host_frees.load(std::memory_order_acquire); }
using FreeBlocks = std::unordered_map<size_t, std::vector<FreeBlock>>;  // block size -> free blocks

// A graph's private pool (graphs.cpp): the blocks its captures allocated; a freed one waits for the
// pool's next allocation and is never handed to others while the pool lives.
struct GraphPool {
  int users = 0;
  int64_t reserved = 0, allocated = 0;
  FreeBlocks cached;
};

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
  FreeBlocks cached;
  std::map<c10::MempoolId_t, GraphPool> graph_pools;
  int64_t graph_pool_reserved = 0, graph_pool_allocated = 0;
};

struct Block {
  size_t size;
  size_t requested;
  DeviceIndex device;
  c10::MempoolId_t pool{0, 0};  // {0, 0}: the device's common cache
  c10::StreamId stream = 0;     // the stream current on the device when it was allocated
  std::vector<c10::StreamId> recorded;  // other streams that used it (recordStream)
};

static bool stream_idle(DeviceIndex device, c10::StreamId id) {
  return query_stream(c10::Stream(c10::Stream::UNSAFE, c10::Device(kSim, device), id));
}

// Takes a free block of `size` for work on `stream`: one freed on that stream, else one no busy stream may still use.
static void* take_free_block(FreeBlocks& cached, size_t size, DeviceIndex device, c10::StreamId stream) {
  auto found = cached.find(size);
  if (found == cached.end()) return nullptr;
  auto& blocks = found->second;
  const uint64_t freed_by_the_host_before = on_device() ? host_frees_before_this_kernel() : UINT64_MAX;
  auto usable = [&](const FreeBlock& block, bool other_streams) {
    if (block.host_free > freed_by_the_host_before) return false;
    if (!other_streams && (block.stream != stream || !block.recorded.empty())) return false;
    if (block.stream != stream && !stream_idle(device, block.stream)) return false;
    for (c10::StreamId used : block.recorded)
      if (used != stream && !stream_idle(device, used)) return false;
    return true;
  };
  for (bool other_streams : {false, true}) {
    for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
      if (!usable(*block, other_streams)) continue;
      void* ptr = block->ptr;
      blocks.erase(std::next(block).base());
      return ptr;
    }
  }
  return nullptr;
}

static std::vector<std::unique_ptr<DeviceMemory>> g_memory;
static std::mutex g_blocks_mutex;
static std::map<const char*, Block> g_blocks;  // live device blocks, by start address

static constexpr size_t kBlockRounding = 512;

static void release_cached_locked(DeviceMemory& memory) {
  for (auto& [size, blocks] : memory.cached) {
    for (const FreeBlock& block : blocks) {
      driver_call(simFree(block.ptr), "simFree");  // the driver frees it once the device's queued work has run
      memory.reserved -= static_cast<int64_t>(size);
      memory.segments -= 1;
      memory.device_frees += 1;
    }
  }
  memory.cached.clear();
}

static void* allocate_block(DeviceIndex device, size_t requested) {
  check_device_index(device);
  size_t size = std::max(kBlockRounding, (requested + kBlockRounding - 1) / kBlockRounding * kBlockRounding);
  DeviceMemory& memory = *g_memory[device];
  void* ptr = nullptr;
  c10::MempoolId_t pool_id{0, 0};
  if (any_capture()) pool_id = capture_pool_for_allocation(device).value_or(pool_id);
  const c10::StreamId stream = current_stream(c10::Device(kSim, device)).id();
  {
    std::lock_guard<std::mutex> lock(memory.mutex);
    auto pool = memory.graph_pools.find(pool_id);
    GraphPool* graph_pool = pool == memory.graph_pools.end() ? nullptr : &pool->second;
    auto& cached = graph_pool != nullptr ? graph_pool->cached : memory.cached;
    ptr = take_free_block(cached, size, device, stream);
    if (ptr == nullptr) {
      // A kernel (sim's host kernels allocate their outputs as they run) cannot return the cache: the driver
      // frees memory once the device has run the work queued before, and the kernel is such work itself.
      const bool in_kernel = on_device();
      if (memory.reserved + static_cast<int64_t>(size) > memory.capacity && !in_kernel) release_cached_locked(memory);
      if (memory.reserved + static_cast<int64_t>(size) > memory.capacity) {
        memory.ooms += 1;
        int64_t free_bytes = std::max<int64_t>(0, memory.capacity - memory.reserved);
        const int64_t cached = memory.reserved - memory.allocated - memory.graph_pool_reserved +
                               memory.graph_pool_allocated;
        const std::string unreturned =
            in_kernel && cached > 0 ? c10::str(", and ", format_bytes(cached), " is cached, which a kernel cannot "
                                               "return to the device (torch.sim.empty_cache() before the call can)")
                                    : std::string();
        TORCH_CHECK_WITH(OutOfMemoryError, false,
            "sim:", static_cast<int>(device), " out of memory: tried to allocate ", format_bytes(requested),
            "; the device has a capacity of ", format_bytes(memory.capacity), ", of which ",
            format_bytes(memory.allocated), " is allocated by tensors and ", format_bytes(free_bytes),
            " is free", unreturned, ". Free some tensors, or raise the capacity with torch.sim.set_memory_capacity() "
            "or SIM_MEMORY_CAPACITY.");
      }
      driver_call(simSetDevice(device), "simSetDevice");
      driver_call(simMalloc(&ptr, size), "simMalloc");
      memory.reserved += static_cast<int64_t>(size);
      memory.peak_reserved = std::max(memory.peak_reserved, memory.reserved);
      memory.segments += 1;
      memory.peak_segments = std::max(memory.peak_segments, memory.segments);
      memory.device_allocs += 1;
      if (graph_pool != nullptr) {
        graph_pool->reserved += static_cast<int64_t>(size);
        memory.graph_pool_reserved += static_cast<int64_t>(size);
      }
    }
    if (graph_pool != nullptr) {
      graph_pool->allocated += static_cast<int64_t>(size);
      memory.graph_pool_allocated += static_cast<int64_t>(size);
    } else {
      pool_id = {0, 0};
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
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    g_blocks.emplace(static_cast<const char*>(ptr), Block{size, requested, device, pool_id, stream, {}});
  }
  // PyTorch's device-trace hook (step 6 turns it on for a listening tool): a block handed out, from the cache or new.
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_memory_allocation(kSim, reinterpret_cast<uintptr_t>(ptr)); });
  return ptr;
}

// Returns false when ptr is not a live sim block.
static bool try_free_block(void* ptr) {
  Block block;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto found = g_blocks.find(static_cast<const char*>(ptr));
    if (found == g_blocks.end()) return false;
    block = std::move(found->second);
    g_blocks.erase(found);
  }
  tell_gpu_trace([&](auto& trace) { trace->trace_gpu_memory_deallocation(kSim, reinterpret_cast<uintptr_t>(ptr)); });
  DeviceMemory& memory = *g_memory[block.device];
  std::lock_guard<std::mutex> lock(memory.mutex);
  memory.allocated -= static_cast<int64_t>(block.size);
  memory.requested -= static_cast<int64_t>(block.requested);
  memory.active_blocks -= 1;
  memory.free_count += 1;
  memory.freed_total += static_cast<int64_t>(block.size);
  const uint64_t host_free = on_device() ? 0 : g_host_frees.fetch_add(1, std::memory_order_acq_rel) + 1;
  auto pool = memory.graph_pools.find(block.pool);
  if (pool != memory.graph_pools.end() && block.pool != c10::MempoolId_t{0, 0}) {
    pool->second.allocated -= static_cast<int64_t>(block.size);
    memory.graph_pool_allocated -= static_cast<int64_t>(block.size);
    pool->second.cached[block.size].push_back({ptr, block.stream, std::move(block.recorded), host_free});
  } else {
    memory.cached[block.size].push_back({ptr, block.stream, std::move(block.recorded), host_free});
  }
  return true;
}

void retain_graph_pool(DeviceIndex device, c10::MempoolId_t pool) {
  DeviceMemory& memory = *g_memory[device];
  std::lock_guard<std::mutex> lock(memory.mutex);
  memory.graph_pools[pool].users += 1;
}

c10::MempoolId_t graph_pool_of(const void* block) {
  std::lock_guard<std::mutex> lock(g_blocks_mutex);
  auto found = g_blocks.find(static_cast<const char*>(block));
  return found == g_blocks.end() ? c10::MempoolId_t{0, 0} : found->second.pool;
}

// The last user lets go: the pool's free blocks join the device's cache (empty_cache() can return them),
// and its blocks still in use go there when freed.
void release_graph_pool(DeviceIndex device, c10::MempoolId_t pool) {
  DeviceMemory& memory = *g_memory[device];
  std::lock_guard<std::mutex> lock(memory.mutex);
  auto found = memory.graph_pools.find(pool);
  if (found == memory.graph_pools.end() || --found->second.users > 0) return;
  for (auto& [size, blocks] : found->second.cached)
    memory.cached[size].insert(memory.cached[size].end(), blocks.begin(), blocks.end());
  memory.graph_pool_reserved -= found->second.reserved;
  memory.graph_pool_allocated -= found->second.allocated;
  memory.graph_pools.erase(found);
  std::lock_guard<std::mutex> blocks_lock(g_blocks_mutex);
  for (auto& [address, block] : g_blocks)
    if (block.pool == pool && block.device == device) block.pool = {0, 0};
}

void sim_free(void* ptr) {
  SIM_TRACE("allocator", "free", c10::str("ptr=", ptr));
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
    SIM_TRACE("allocator", "allocate", c10::str("nbytes=", nbytes, " device=", static_cast<int>(t_current_device)));
    DeviceIndex device = t_current_device;
    if (nbytes == 0) return {nullptr, nullptr, &sim_free, c10::Device(kSim, device)};
    void* ptr = allocate_block(device, nbytes);
    return {ptr, ptr, &sim_free, c10::Device(kSim, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    SIM_TRACE("allocator", "raw_deleter", "");
    return &sim_free;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    if (count == 0) return;
    if (on_device()) return static_cast<void>(std::memcpy(dest, src, count));  // a kernel's own copy, not one queued after it
    const DeviceIndex device = device_of_pointer(src).value_or(t_current_device);
    const c10::Stream stream = current_stream(c10::Device(kSim, device));
    CopyRecordScope recorded(stream);
    driver_call(simMemcpyAsync(dest, src, count, simMemcpyDeviceToDevice, driver_stream(stream)), "simMemcpyAsync");
  }
  bool initialized() override {
    SIM_TRACE("allocator", "initialized", "");
    return g_device_count.load() > 0;
  }
  void emptyCache(c10::MempoolId_t) override {
    SIM_TRACE("allocator", "emptyCache", "");
    for (auto& memory : g_memory) {
      std::lock_guard<std::mutex> lock(memory->mutex);
      release_cached_locked(*memory);
    }
  }
  void recordStream(const c10::DataPtr& data, c10::Stream stream) override {
    SIM_TRACE("allocator", "recordStream", c10::str("data=", data.get(), " stream=", stream));
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto found = g_blocks.find(static_cast<const char*>(data.get()));
    if (found == g_blocks.end() || stream.device_type() != kSim || stream.device_index() != found->second.device) return;
    auto& recorded = found->second.recorded;
    if (stream.id() != found->second.stream && std::find(recorded.begin(), recorded.end(), stream.id()) == recorded.end())
      recorded.push_back(stream.id());
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex device) override {
    SIM_TRACE("allocator", "getDeviceStats", c10::str("device=", static_cast<int>(device)));
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
    SIM_TRACE("allocator", "resetAccumulatedStats", c10::str("device=", static_cast<int>(device)));
    check_device_index(device);
    DeviceMemory& m = *g_memory[device];
    std::lock_guard<std::mutex> lock(m.mutex);
    m.allocation_count = m.free_count = m.allocated_total = m.freed_total = 0;
    m.device_allocs = m.device_frees = m.ooms = 0;
  }
  void resetPeakStats(DeviceIndex device) override {
    SIM_TRACE("allocator", "resetPeakStats", c10::str("device=", static_cast<int>(device)));
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
    SIM_TRACE("allocator", "getMemoryInfo", c10::str("device=", static_cast<int>(device)));
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
    SIM_TRACE("cpu_allocator", "allocate",
              c10::str("nbytes=", nbytes, " into sim:", static_cast<int>(t_host_redirect)));
    void* ptr = allocate_block(t_host_redirect, nbytes);
    return {ptr, ptr, &sim_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &redirect_raw_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }
};
static RedirectingCpuAllocator g_redirecting_cpu_allocator;

bool is_sim_memory(const c10::Storage& storage) {
  return storage.data_ptr().get_deleter() == &sim_free;
}

bool discrete_memory() {
  static const bool discrete = [] {
    simDeviceProp properties;
    driver_call(simGetDeviceProperties(&properties, 0), "simGetDeviceProperties");
    return properties.discreteMemory != 0;
  }();
  return discrete;
}

// Pinned host memory: an at::HostAllocator, registered for PrivateUse1 by the hooks, so that
// torch.accelerator.empty_host_cache() and the host statistics reach it (PyTorch calls the
// registered host allocator without checking that there is one). Blocks are rounded up to a power
// of two and kept after a free for the next request of that size until empty_cache(), as CUDA's
// caching host allocator does. A block that an asynchronous copy used (record_event) is handed out
// again only once the driver's events say that every stream that used it has run that copy.
struct PinnedBlock {
  size_t size;       // the rounded size taken from the host
  size_t requested;  // what the caller asked for: the range that is_pinned() answers true for
  std::vector<simEvent_t> uses;  // one event per asynchronous copy queued with the block
};
struct CachedPinnedBlock {
  void* ptr;
  std::vector<simEvent_t> uses;
};

static std::mutex g_pinned_mutex;
static std::map<const char*, PinnedBlock> g_pinned;                                // blocks in use, by start address
static std::unordered_map<size_t, std::vector<CachedPinnedBlock>> g_pinned_cached;  // free blocks, by size

// True once every copy that used the block has run; the events of a block found idle are destroyed.
static bool uses_finished(std::vector<simEvent_t>& uses) {
  for (simEvent_t event : uses)
    if (simEventQuery(event) == simErrorNotReady) return false;
  for (simEvent_t event : uses) simEventDestroy(event);
  uses.clear();
  return true;
}
static at::HostStats g_pinned_stats;

static constexpr size_t kPinnedMinimumBlock = 64;

// True for any address inside a pinned block in use (a slice of pinned memory is pinned too).
bool is_pinned_address(const void* data) {
  const char* address = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto after = g_pinned.upper_bound(address);
  if (after == g_pinned.begin()) return false;
  auto block = std::prev(after);
  return address < block->first + std::max<size_t>(block->second.requested, 1);
}

static size_t size_bucket(size_t size) { return static_cast<size_t>(c10::llvm::Log2_64_Ceil(size)); }

static void pinned_free(void* ptr) {
  SIM_TRACE("host_allocator", "free", c10::str("ptr=", ptr));
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto found = g_pinned.find(static_cast<const char*>(ptr));
  if (found == g_pinned.end()) return;
  size_t size = found->second.size;
  g_pinned_cached[size].push_back({ptr, std::move(found->second.uses)});
  g_pinned.erase(found);
  g_pinned_stats.active_requests.decrease(1);
  g_pinned_stats.active_bytes.decrease(size);
}

struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    SIM_TRACE("host_allocator", "allocate", c10::str("nbytes=", nbytes));
    if (nbytes == 0) return {nullptr, nullptr, &pinned_free, c10::Device(c10::kCPU)};
    size_t size = std::max(kPinnedMinimumBlock, static_cast<size_t>(c10::llvm::PowerOf2Ceil(nbytes)));
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    void* ptr = nullptr;
    auto cached = g_pinned_cached.find(size);
    if (cached != g_pinned_cached.end()) {
      auto& blocks = cached->second;
      for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
        if (!uses_finished(block->uses)) continue;
        ptr = block->ptr;
        blocks.erase(std::next(block).base());
        break;
      }
    }
    if (ptr == nullptr) {
      driver_call(simMallocHost(&ptr, size), "simMallocHost");
      g_pinned_stats.allocations.increase(1);
      g_pinned_stats.allocated_bytes.increase(size);
      g_pinned_stats.num_host_alloc += 1;
      g_pinned_stats.bucket_allocation[size_bucket(size)] += 1;
    }
    g_pinned.emplace(static_cast<const char*>(ptr), PinnedBlock{size, nbytes, {}});
    g_pinned_stats.active_requests.increase(1);
    g_pinned_stats.active_bytes.increase(size);
    return {ptr, ptr, &pinned_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    SIM_TRACE("host_allocator", "raw_deleter", "");
    return &pinned_free;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }

  // An asynchronous copy on `stream` uses the block: an event recorded there tells when it is done.
  bool record_event(void* ptr, void*, c10::Stream stream) override {
    SIM_TRACE("host_allocator", "record_event", c10::str("ptr=", ptr, " stream=", stream));
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto found = g_pinned.find(static_cast<const char*>(ptr));
    if (found == g_pinned.end()) return false;
    simEvent_t event = nullptr;
    driver_call(simEventCreateWithFlags(&event, simEventDisableTiming), "simEventCreateWithFlags");
    found->second.uses.push_back(event);
    driver_call(simEventRecord(event, driver_stream(stream)), "simEventRecord");
    return true;
  }
  void empty_cache() override {
    SIM_TRACE("host_allocator", "empty_cache", "");
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (auto& [size, blocks] : g_pinned_cached) {
      for (auto& [ptr, uses] : blocks) {
        for (simEvent_t event : uses) simEventDestroy(event);  // simFreeHost waits for the copies itself
        driver_call(simFreeHost(ptr), "simFreeHost");
        g_pinned_stats.allocations.decrease(1);
        g_pinned_stats.allocated_bytes.decrease(size);
        g_pinned_stats.num_host_free += 1;
      }
    }
    g_pinned_cached.clear();
  }
  at::HostStats get_stats() override {
    SIM_TRACE("host_allocator", "get_stats", "");
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned_stats;
  }
  void reset_accumulated_stats() override {
    SIM_TRACE("host_allocator", "reset_accumulated_stats", "");
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (auto* stat : {&g_pinned_stats.active_requests, &g_pinned_stats.active_bytes, &g_pinned_stats.allocations,
                       &g_pinned_stats.allocated_bytes})
      stat->reset_accumulated();
    g_pinned_stats.num_host_alloc = g_pinned_stats.num_host_free = 0;
    std::fill(g_pinned_stats.bucket_allocation.begin(), g_pinned_stats.bucket_allocation.end(), 0);
  }
  void reset_peak_stats() override {
    SIM_TRACE("host_allocator", "reset_peak_stats", "");
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (auto* stat : {&g_pinned_stats.active_requests, &g_pinned_stats.active_bytes, &g_pinned_stats.allocations,
                       &g_pinned_stats.allocated_bytes})
      stat->reset_peak();
  }
};
static PinnedAllocator g_pinned_allocator;

c10::DeviceAllocator& device_allocator() { return g_allocator; }
c10::Allocator* redirecting_cpu_allocator() { return &g_redirecting_cpu_allocator; }
at::HostAllocator* pinned_allocator() { return &g_pinned_allocator; }

DeviceIndex exchange_host_redirect(DeviceIndex device) {
  DeviceIndex previous = t_host_redirect;
  t_host_redirect = device;
  return previous;
}

std::optional<DeviceIndex> device_of_pointer(const void* data) {
  std::lock_guard<std::mutex> lock(g_blocks_mutex);
  auto after = g_blocks.upper_bound(static_cast<const char*>(data));
  if (after == g_blocks.begin()) return std::nullopt;
  auto& [start, block] = *std::prev(after);
  if (static_cast<const char*>(data) >= start + block.size) return std::nullopt;
  return block.device;
}

void create_device_memory(int device_count, int64_t capacity) {
  for (int i = 0; i < device_count; ++i) {
    g_memory.push_back(std::make_unique<DeviceMemory>());
    g_memory.back()->capacity = capacity;
    driver_call(simDeviceSetMemoryLimit(i, static_cast<size_t>(capacity)), "simDeviceSetMemoryLimit");
  }
}

static void install_allocator() {
  c10::SetAllocator(kSim, &g_allocator);
  g_base_cpu_allocator = c10::GetCPUAllocator();
  g_base_cpu_raw_deleter = g_base_cpu_allocator->raw_deleter();
  c10::SetCPUAllocator(&g_redirecting_cpu_allocator, /*priority=*/100);
}

void bind_allocator(pybind11::module& module) {
  module.def("install_allocator", &install_allocator);
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
        {"num_ooms", m.ooms}, {"capacity_bytes", m.capacity},
        {"reserved_bytes.graph_pool.current", m.graph_pool_reserved},
        {"allocated_bytes.graph_pool.current", m.graph_pool_allocated},
        {"graph_pools.current", static_cast<int64_t>(m.graph_pools.size())}};
  });
  module.def("reset_peak_memory_stats", [](int64_t device) { g_allocator.resetPeakStats(checked(device)); });
  module.def("reset_accumulated_memory_stats", [](int64_t device) { g_allocator.resetAccumulatedStats(checked(device)); });
  module.def("empty_cache", []() { g_allocator.emptyCache({0, 0}); });
  module.def("set_memory_capacity", [](int64_t device, int64_t capacity) {
    TORCH_CHECK(capacity > 0, "sim: the memory capacity must be a positive number of bytes, got ", capacity);
    DeviceMemory& m = *g_memory[checked(device)];
    std::lock_guard<std::mutex> lock(m.mutex);
    driver_call(simDeviceSetMemoryLimit(static_cast<int>(device), static_cast<size_t>(capacity)),
                "simDeviceSetMemoryLimit");
    m.capacity = capacity;
  });
  module.def("memory_mode", []() { return std::string(discrete_memory() ? "discrete" : "unified"); });
  // What the driver knows of an address: ("device", N), ("pinned", -1) or ("host", -1).
  module.def("pointer_attributes", [](int64_t address) {
    simPointerAttributes attributes;
    driver_call(simPointerGetAttributes(&attributes, reinterpret_cast<const void*>(address)),
                "simPointerGetAttributes");
    const char* kind = attributes.type == simMemoryTypeDevice ? "device"
                       : attributes.type == simMemoryTypeHost ? "pinned" : "host";
    return std::make_pair(std::string(kind), attributes.device);
  });

  module.def("host_memory_stats", []() {
    at::HostStats stats = g_pinned_allocator.get_stats();
    std::map<std::string, int64_t> flat{{"num_host_alloc", stats.num_host_alloc},
                                        {"num_host_free", stats.num_host_free}};
    auto add = [&flat](const std::string& name, const c10::CachingAllocator::Stat& stat) {
      flat[name + ".current"] = stat.current;
      flat[name + ".peak"] = stat.peak;
      flat[name + ".allocated"] = stat.allocated;
      flat[name + ".freed"] = stat.freed;
    };
    add("allocations", stats.allocations);
    add("allocated_bytes", stats.allocated_bytes);
    add("active_requests", stats.active_requests);
    add("active_bytes", stats.active_bytes);
    return flat;
  });
  module.def("reset_peak_host_memory_stats", []() { g_pinned_allocator.reset_peak_stats(); });
  module.def("reset_accumulated_host_memory_stats", []() { g_pinned_allocator.reset_accumulated_stats(); });
  module.def("empty_host_cache", []() { g_pinned_allocator.empty_cache(); });
  module.def("is_pinned_pointer",
             [](int64_t address) { return is_pinned_address(reinterpret_cast<const void*>(address)); });
}

}  // namespace sim
