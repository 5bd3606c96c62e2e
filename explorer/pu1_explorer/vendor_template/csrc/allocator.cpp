// Guide step "allocator": device memory, with the statistics torch.accelerator reports.
//
// A vendor's allocator is a c10::DeviceAllocator registered for PrivateUse1 (REGISTER_ALLOCATOR):
// allocate() takes memory on the current device and returns it with the function that gives it
// back; getDeviceStats() and the resets answer torch.accelerator.memory_allocated(),
// max_memory_allocated(), reset_peak_memory_stats() and memory_stats(). This one asks the runtime
// for every block and frees it at once (no caching). Here too: the pinned host allocator the hooks
// hand out (an at::HostAllocator, registered with REGISTER_HOST_ALLOCATOR), and storage resizing.
// What a vendor replaces: nothing at first; a caching allocator (reuse of freed blocks per stream)
// is the usual next step once the device is fast.
#include "backend.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace torch_{{ name }} {

// [guide: allocator]
namespace {

using c10::CachingAllocator::StatType;

// PyTorch's own counters (current, peak, allocated, freed) for the bytes and the blocks of one device.
struct Counters {
  c10::CachingAllocator::Stat bytes, blocks;
};

struct Statistics {
  std::mutex mutex;
  std::unordered_map<DeviceIndex, Counters> counters;
};

// Made on first use and never destroyed: tensors may still be freed while the process exits.
Statistics& statistics() {
  static Statistics* created = new Statistics();
  return *created;
}

// Runs `change` on the counters of `device`, under the lock.
template <typename Change>
void update(DeviceIndex device, Change change) {
  Statistics& s = statistics();
  std::lock_guard<std::mutex> lock(s.mutex);
  change(s.counters[device]);
}

// What a DataPtr needs to give its memory back: the runtime's pointer, its size and its device.
struct Allocation {
  void* pointer;
  size_t bytes;
  DeviceIndex device;
};

void give_back(void* context) {
  TRACE_INTERFACE("allocator", "free", "");
  auto* allocation = static_cast<Allocation*>(context);
  runtime::free_device(allocation->pointer);  // a deleter must not throw
  update(allocation->device, [&](Counters& c) {
    c.bytes.decrease(allocation->bytes);
    c.blocks.decrease(1);
  });
  delete allocation;
}

struct RuntimeAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t bytes) override {
    TRACE_INTERFACE("allocator", "allocate", c10::str("bytes=", bytes));
    DeviceIndex device = current_device();
    if (bytes == 0) return c10::DataPtr(nullptr, c10::Device(kDevice, device));
    void* pointer = nullptr;
    runtime::Status status = runtime::malloc_device(&pointer, bytes);
    TORCH_CHECK_WITH(OutOfMemoryError, status != runtime::kErrorOutOfMemory, "{{ name }}:",
                     static_cast<int>(device), " out of memory: tried to allocate ", bytes, " bytes");
    RUNTIME_CHECK(status);
    update(device, [&](Counters& c) {
      c.bytes.increase(bytes);
      c.blocks.increase(1);
    });
    return c10::DataPtr(pointer, new Allocation{pointer, bytes, device}, &give_back, c10::Device(kDevice, device));
  }

  void copy_data(void* destination, const void* source, std::size_t bytes) const override {
    RUNTIME_CHECK(runtime::copy(destination, source, bytes, runtime::CopyKind::device_to_device));
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // blocks are never reused behind a stream's back

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex device) override {
    TRACE_INTERFACE("allocator", "getDeviceStats", c10::str("device=", static_cast<int>(device)));
    check_device(device);
    Statistics& s = statistics();
    std::lock_guard<std::mutex> lock(s.mutex);
    const Counters& c = s.counters[device];
    c10::CachingDeviceAllocator::DeviceStats stats;
    constexpr auto all = static_cast<size_t>(StatType::AGGREGATE);
    for (auto* bytes : {&stats.allocated_bytes, &stats.active_bytes, &stats.reserved_bytes, &stats.requested_bytes})
      (*bytes)[all] = c.bytes;
    for (auto* blocks : {&stats.allocation, &stats.active, &stats.segment}) (*blocks)[all] = c.blocks;
    stats.num_device_alloc = c.blocks.allocated;
    stats.num_device_free = c.blocks.freed;
    return stats;
  }

  void resetAccumulatedStats(DeviceIndex device) override {
    check_device(device);
    update(device, [](Counters& c) {
      c.bytes.reset_accumulated();
      c.blocks.reset_accumulated();
    });
  }

  void resetPeakStats(DeviceIndex device) override {
    check_device(device);
    update(device, [](Counters& c) {
      c.bytes.reset_peak();
      c.blocks.reset_peak();
    });
  }

  std::pair<size_t, size_t> getMemoryInfo(DeviceIndex device) override {
    if (device < 0) device = current_device();
    check_device(device);
    size_t free_bytes = 0, total_bytes = 0;
    RUNTIME_CHECK(runtime::memory_info(device, &free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }
};

RuntimeAllocator g_device_allocator;
REGISTER_ALLOCATOR(kDevice, &g_device_allocator);

// Pinned host memory: CPU tensors the device copies to and from directly (pin_memory(), is_pinned()).
// It is an at::HostAllocator registered for the device: torch.accelerator.empty_host_cache() calls the
// registered one without checking that there is one, so a backend without it crashes there. Blocks go
// back to the runtime when freed (no caching), so emptying the cache has nothing to give back.
struct PinnedBlocks {
  std::mutex mutex;
  std::unordered_map<void*, size_t> bytes;  // the blocks in use and their sizes
  at::HostStats stats;                      // what torch.<device>.host_memory_stats() would report
};

// Made on first use and never destroyed, like the device statistics.
PinnedBlocks& pinned_blocks() {
  static PinnedBlocks* created = new PinnedBlocks();
  return *created;
}

void free_pinned(void* pointer) {
  TRACE_INTERFACE("host_allocator", "free", "");
  runtime::free_host(pointer);  // a deleter must not throw
  PinnedBlocks& p = pinned_blocks();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto found = p.bytes.find(pointer);
  if (found == p.bytes.end()) return;
  for (auto* stat : {&p.stats.active_bytes, &p.stats.allocated_bytes}) stat->decrease(found->second);
  for (auto* stat : {&p.stats.active_requests, &p.stats.allocations}) stat->decrease(1);
  p.stats.num_host_free += 1;
  p.bytes.erase(found);
}

struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t bytes) override {
    TRACE_INTERFACE("host_allocator", "allocate", c10::str("bytes=", bytes));
    if (bytes == 0) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    void* pointer = nullptr;
    RUNTIME_CHECK(runtime::malloc_host(&pointer, bytes));
    PinnedBlocks& p = pinned_blocks();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.bytes[pointer] = bytes;
    for (auto* stat : {&p.stats.active_bytes, &p.stats.allocated_bytes}) stat->increase(bytes);
    for (auto* stat : {&p.stats.active_requests, &p.stats.allocations}) stat->increase(1);
    p.stats.num_host_alloc += 1;
    return c10::DataPtr(pointer, pointer, &free_pinned, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* destination, const void* source, std::size_t bytes) const override {
    std::memcpy(destination, source, bytes);
  }

  // A block is never reused behind a stream's back (it goes back to the runtime when freed), so there
  // is no event to record; true tells the caller the block is one of this allocator's.
  bool record_event(void* pointer, void*, c10::Stream) override {
    PinnedBlocks& p = pinned_blocks();
    std::lock_guard<std::mutex> lock(p.mutex);
    return p.bytes.count(pointer) > 0;
  }
  void empty_cache() override {}  // nothing is cached
  at::HostStats get_stats() override {
    PinnedBlocks& p = pinned_blocks();
    std::lock_guard<std::mutex> lock(p.mutex);
    return p.stats;
  }
  void reset_accumulated_stats() override {
    PinnedBlocks& p = pinned_blocks();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (auto* stat : {&p.stats.active_bytes, &p.stats.allocated_bytes, &p.stats.active_requests, &p.stats.allocations})
      stat->reset_accumulated();
    p.stats.num_host_alloc = p.stats.num_host_free = 0;
  }
  void reset_peak_stats() override {
    PinnedBlocks& p = pinned_blocks();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (auto* stat : {&p.stats.active_bytes, &p.stats.allocated_bytes, &p.stats.active_requests, &p.stats.allocations})
      stat->reset_peak();
  }
};

PinnedAllocator g_pinned_allocator;
REGISTER_HOST_ALLOCATOR(kDevice, &g_pinned_allocator);

}  // namespace

c10::Allocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

void resize_storage(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "{{ name }}: this storage is not resizable");
  size_t kept = std::min(storage.nbytes(), new_bytes);
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = g_device_allocator.allocate(new_bytes);
  if (kept > 0) {
    RUNTIME_CHECK(runtime::copy(fresh.get(), storage.data(), kept, runtime::CopyKind::device_to_device));
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
}
// [/guide: allocator]

}  // namespace torch_{{ name }}
