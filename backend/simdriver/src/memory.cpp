// Memory: each device's address range and its allocations, pinned host memory, copies and memsets,
// and the guard that stops host code touching discrete device memory.
//
// Each device reserves one range of addresses when its context starts (mmap with MAP_NORESERVE, so
// no memory is committed until touched) and hands out pieces of it, first fit. With discrete memory
// a SIGSEGV inside a range is reported as a host access to device memory, and the range is guarded
// in one of two ways:
// - Where the processor and kernel have memory protection keys (x86's PKU), the ranges carry a key
//   that denies access, and a thread running a task (the executor, or a host thread running one on
//   the caller's side) lifts the denial for itself alone while the task runs: a write of its own
//   PKRU register, no system call. Every other thread stays shut out, even while the device works.
// - Otherwise the range is PROT_NONE; the executor opens it for the whole process with mprotect
//   while it runs tasks and closes it when it goes idle. An mprotect costs in proportion to the pages
//   it changes, and a host thread waiting on a kernel pays one on each side of it, so this memory is
//   backed by huge pages (transparent, where the kernel lets a range ask for them) and only the part
//   allocations have reached is ever opened or closed. That part alone asks for huge pages, which
//   keeps it a mapping (VMA) of its own, so that opening and closing it never splits and merges the
//   range's mapping.
#include "driver.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace {

using simdriver::Driver;
using simdriver::driver;
using simdriver::fail;
using simdriver::hex;

constexpr size_t kMinimumReservation = size_t(64) << 30;
constexpr size_t kHugePage = size_t(2) << 20;  // x86-64's; a range opened in whole ones never splits one

// The ranges the SIGSEGV handler recognises; written once per device, read without locks.
std::atomic<uintptr_t> g_range_start[simdriver::kMaxDevices];
std::atomic<uintptr_t> g_range_end[simdriver::kMaxDevices];
struct sigaction g_previous_segv_action;
// The protection key of discrete device memory, or -1: no memory is discrete, or the processor, the kernel or an
// earlier user of the process's keys left none, and the ranges are guarded with mprotect.
int g_memory_key = -1;

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Async-signal-safe output for the SIGSEGV handler.
void write_text(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void write_number(uintptr_t value, unsigned base) {
  char digits[24];
  int length = 0;
  do {
    digits[length++] = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0);
  char text[28];
  int position = 0;
  if (base == 16) {
    text[position++] = '0';
    text[position++] = 'x';
  }
  while (length > 0) text[position++] = digits[--length];
  text[position] = '\0';
  write_text(text);
}

void on_segmentation_fault(int signal_number, siginfo_t* info, void* context) {
  uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // raised by a fault, so si_addr is the address touched
    for (int device = 0; device < simdriver::kMaxDevices; ++device) {
      uintptr_t start = g_range_start[device].load(std::memory_order_acquire);
      uintptr_t end = g_range_end[device].load(std::memory_order_acquire);
      if (start != 0 && address >= start && address < end) {
        write_text("sim: host code touched sim's device memory at ");
        write_number(address, 16);
        write_text(" (sim:");
        write_number(static_cast<uintptr_t>(device), 10);
        write_text("); with SIM_MEMORY=discrete only the driver's copies and kernels reach device memory: "
                   "copy the data to host memory with simMemcpy first\n");
        std::abort();
      }
    }
  }
  const struct sigaction& previous = g_previous_segv_action;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(signal_number, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    previous.sa_handler(signal_number);
  } else {
    // Returning re-runs the faulting instruction, which now meets the default action.
    signal(SIGSEGV, SIG_DFL);
  }
}

simContext_st* device_holding(const void* pointer) {
  auto address = reinterpret_cast<uintptr_t>(pointer);
  for (auto& device : driver().devices) {
    auto start = reinterpret_cast<uintptr_t>(device->base);
    if (device->active && address >= start && address < start + device->reserved) return device.get();
  }
  return nullptr;
}

// The live allocation of `device` holding `pointer` within its requested bytes: its offset and
// requested size, or false.
bool allocation_holding(const simContext_st& device, const void* pointer, size_t* offset, size_t* size) {
  size_t wanted = static_cast<size_t>(static_cast<const char*>(pointer) - device.base);
  auto after = device.allocations.upper_bound(wanted);
  if (after == device.allocations.begin()) return false;
  auto holding = std::prev(after);
  if (wanted >= holding->first + holding->second.requested) return false;
  *offset = holding->first;
  *size = holding->second.requested;
  return true;
}

// The pinned block holding [pointer, pointer + bytes), if one does.
bool pinned_holding(const void* pointer, size_t bytes, uintptr_t* start, size_t* size) {
  auto& pinned = driver().pinned;
  auto address = reinterpret_cast<uintptr_t>(pointer);
  auto after = pinned.upper_bound(address);
  if (after == pinned.begin()) return false;
  auto holding = std::prev(after);
  if (address + bytes > holding->first + holding->second) return false;
  *start = holding->first;
  *size = holding->second;
  return true;
}

// One end of a copy, checked: device memory inside one live allocation, or host memory.
struct CopyEnd {
  bool on_device = false;
  bool pinned = false;
  int device = -1;
};

// Which way a copy between two checked ends goes.
simMemcpyKind copy_kind(const CopyEnd& from, const CopyEnd& to) {
  if (from.on_device) return to.on_device ? simMemcpyDeviceToDevice : simMemcpyDeviceToHost;
  return to.on_device ? simMemcpyHostToDevice : simMemcpyHostToHost;
}

simStatus_t check_copy_end(const char* call, const char* role, const void* pointer, size_t bytes, int wanted,
                           CopyEnd* end) {
  // wanted: 1 device, 0 host, -1 either (simMemcpyDefault)
  if (pointer == nullptr) return fail(simErrorInvalidValue, std::string(call) + ": the " + role + " is NULL");
  simContext_st* device = device_holding(pointer);
  if (device == nullptr) {
    if (wanted == 1)
      return fail(simErrorInvalidDevicePointer, std::string(call) + ": the " + role + " " + hex(pointer) +
                                                    " is not sim device memory; allocate it with simMalloc, or "
                                                    "pass the copy kind that matches the pointers");
    uintptr_t start = 0;
    size_t size = 0;
    end->on_device = false;
    end->pinned = pinned_holding(pointer, bytes, &start, &size);
    return simSuccess;
  }
  if (wanted == 0)
    return fail(simErrorInvalidValue, std::string(call) + ": the " + role + " " + hex(pointer) + " is device memory of sim:" +
                                          std::to_string(device->device) +
                                          ", but the copy kind says host memory; pass the kind that matches the pointers");
  size_t offset = 0, size = 0;
  if (!allocation_holding(*device, pointer, &offset, &size))
    return fail(simErrorInvalidDevicePointer, std::string(call) + ": the " + role + " " + hex(pointer) +
                                                  " is in no live allocation of sim:" + std::to_string(device->device) +
                                                  " (freed, or never allocated)");
  size_t within = static_cast<size_t>(static_cast<const char*>(pointer) - device->base) - offset;
  if (bytes > size - within)
    return fail(simErrorInvalidValue, std::string(call) + ": " + std::to_string(bytes) + " bytes at the " + role + " " +
                                          hex(pointer) + " run past the end of its allocation (" +
                                          std::to_string(size - within) + " bytes left); copy fewer bytes");
  end->on_device = true;
  end->device = device->device;
  return simSuccess;
}

simStatus_t check_copy(const char* call, void* dst, const void* src, size_t bytes, simMemcpyKind kind, CopyEnd* to,
                       CopyEnd* from) {
  int dst_wanted = -1, src_wanted = -1;
  switch (kind) {
    case simMemcpyHostToHost: dst_wanted = 0; src_wanted = 0; break;
    case simMemcpyHostToDevice: dst_wanted = 1; src_wanted = 0; break;
    case simMemcpyDeviceToHost: dst_wanted = 0; src_wanted = 1; break;
    case simMemcpyDeviceToDevice: dst_wanted = 1; src_wanted = 1; break;
    case simMemcpyDefault: break;
    default:
      return fail(simErrorInvalidValue, std::string(call) + ": unknown copy kind " + std::to_string(static_cast<int>(kind)) +
                                            "; pass a simMemcpyKind");
  }
  if (simStatus_t status = check_copy_end(call, "destination", dst, bytes, dst_wanted, to); status != simSuccess)
    return status;
  return check_copy_end(call, "source", src, bytes, src_wanted, from);
}

}  // namespace

namespace simdriver {

simStatus_t reserve_device_memory(simContext_st& device) {
  size_t reserved = round_up(std::max(kMinimumReservation, device.limit), page_size());
  int protection = driver().config.discrete && g_memory_key < 0 ? PROT_NONE : PROT_READ | PROT_WRITE;
  void* base = mmap(nullptr, reserved, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base != MAP_FAILED && g_memory_key >= 0 && pkey_mprotect(base, reserved, protection, g_memory_key) != 0) {
    const int error = errno;
    munmap(base, reserved);
    base = MAP_FAILED;
    errno = error;
  }
  if (base == MAP_FAILED)
    return fail(simErrorOutOfMemory, "sim:" + std::to_string(device.device) + " could not reserve " +
                                         format_bytes(reserved) + " of addresses for its memory (" +
                                         std::strerror(errno) + "); lower SIM_MEMORY_CAPACITY or SIM_DEVICE_COUNT");
  device.base = static_cast<char*>(base);
  device.reserved = reserved;
  device.free_ranges = {{0, reserved}};
  g_range_end[device.device].store(reinterpret_cast<uintptr_t>(base) + reserved, std::memory_order_release);
  g_range_start[device.device].store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
  return simSuccess;
}

void install_memory_guard() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = on_segmentation_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv_action);
  // Denies access to every thread that does not lift it itself; threads the process already has deny keys they
  // never set up, which is Linux's default for every key but key 0.
  g_memory_key = pkey_alloc(0, PKEY_DISABLE_ACCESS);
}

ThreadMemoryAccess::ThreadMemoryAccess() {
  if (g_memory_key < 0) return;
  previous_rights_ = pkey_get(g_memory_key);
  if (previous_rights_ < 0) previous_rights_ = PKEY_DISABLE_ACCESS;
  if (previous_rights_ != 0) pkey_set(g_memory_key, 0);
}

ThreadMemoryAccess::~ThreadMemoryAccess() {
  if (previous_rights_ > 0) pkey_set(g_memory_key, static_cast<unsigned>(previous_rights_));
}

// Opens the part of `device`'s range between what is open and its extent.
static void open_to_extent(simContext_st& device) {
  if (device.opened < device.extent)
    mprotect(device.base + device.opened, device.extent - device.opened, PROT_READ | PROT_WRITE);
  device.opened = device.extent;
}

void open_device_memory() {
  if (!driver().config.discrete || g_memory_key >= 0) return;
  for (auto& device : driver().devices) {
    if (device->active && !device->open_for_executor) {
      open_to_extent(*device);
      device->open_for_executor = true;
    }
  }
}

void close_device_memory() {
  if (driver().tasks_on_callers > 0) return;
  for (auto& device : driver().devices) {
    if (device->open_for_executor) {
      if (device->opened > 0) mprotect(device->base, device->opened, PROT_NONE);
      device->opened = 0;
      device->open_for_executor = false;
    }
  }
}

// An allocation that reaches past the extent moves it, to a whole huge page; while the device's memory is open
// (a kernel may be running) the new part opens at once.
static void extend_to(simContext_st& device, size_t end) {
  if (!driver().config.discrete || g_memory_key >= 0 || end <= device.extent) return;
  const auto start = reinterpret_cast<uintptr_t>(device.base);
  const size_t extent = std::min(device.reserved, round_up(start + end, kHugePage) - start);
  // Only a hint: without transparent huge pages the range is backed by small pages and its mprotects cost more.
  madvise(device.base + device.extent, extent - device.extent, MADV_HUGEPAGE);
  device.extent = extent;
  if (device.open_for_executor) open_to_extent(device);
}

void release_allocation(simContext_st& device, size_t offset) {
  auto found = device.allocations.find(offset);
  if (found == device.allocations.end()) return;
  size_t size = found->second.size;
  device.allocations.erase(found);
  device.used -= size;
  // Give the whole pages inside the block back to the host's memory.
  auto start = reinterpret_cast<uintptr_t>(device.base) + offset;
  uintptr_t first_page = round_up(start, page_size()), last_page = (start + size) / page_size() * page_size();
  if (last_page > first_page) madvise(reinterpret_cast<void*>(first_page), last_page - first_page, MADV_DONTNEED);
  // Merge with the free neighbours.
  size_t merged_start = offset, merged_size = size;
  auto after = device.free_ranges.lower_bound(offset);
  if (after != device.free_ranges.end() && after->first == offset + size) {
    merged_size += after->second;
    after = device.free_ranges.erase(after);
  }
  if (after != device.free_ranges.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second == offset) {
      merged_start = before->first;
      merged_size += before->second;
      device.free_ranges.erase(before);
    }
  }
  device.free_ranges[merged_start] = merged_size;
}

void release_allocation_at(void* pointer) {
  simContext_st* device = device_holding(pointer);
  size_t offset = 0, size = 0;
  if (device != nullptr && allocation_holding(*device, pointer, &offset, &size) && device->base + offset == pointer)
    release_allocation(*device, offset);
}

}  // namespace simdriver

extern "C" {

simStatus_t simMalloc(void** pointer, size_t bytes) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (pointer == nullptr) return fail(simErrorInvalidValue, "simMalloc: pointer is NULL");
  *pointer = nullptr;
  if (bytes == 0) return simSuccess;
  std::lock_guard<std::mutex> lock(driver().mutex);
  simStatus_t status = simSuccess;
  simContext_st* device = simdriver::activate_device(simdriver::current_device(), &status);
  if (device == nullptr) return status;
  size_t size = round_up(bytes, simdriver::kAlignment);
  std::string where = "sim:" + std::to_string(device->device);
  if (size > device->limit || device->used > device->limit - size)
    return fail(simErrorOutOfMemory, where + " out of memory: tried to allocate " + simdriver::format_bytes(bytes) +
                                         "; the device's limit is " + simdriver::format_bytes(device->limit) + ", of which " +
                                         simdriver::format_bytes(device->used) +
                                         " is allocated; free device memory, or raise the limit (SIM_MEMORY_CAPACITY)");
  auto range = std::find_if(device->free_ranges.begin(), device->free_ranges.end(),
                            [size](const auto& free_range) { return free_range.second >= size; });
  if (range == device->free_ranges.end())
    return fail(simErrorOutOfMemory, where + " out of memory: no free range of " + simdriver::format_bytes(size) +
                                         " is left in its address range; free device memory");
  size_t offset = range->first, left = range->second - size;
  device->free_ranges.erase(range);
  if (left > 0) device->free_ranges[offset + size] = left;
  device->allocations[offset] = simContext_st::Allocation{size, bytes};
  device->used += size;
  simdriver::extend_to(*device, offset + size);
  *pointer = device->base + offset;
  return simSuccess;
}

simStatus_t simFree(void* pointer) {
  if (simStatus_t status = simdriver::enter(true); status != simSuccess) return status;
  if (pointer == nullptr) return simSuccess;
  if (simStatus_t status = simdriver::refuse_on_executor("simFree"); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  for (bool waited = false;; waited = true) {
    simContext_st* device = device_holding(pointer);
    size_t offset = 0, size = 0;
    if (device == nullptr || !allocation_holding(*device, pointer, &offset, &size) || device->base + offset != pointer)
      return fail(simErrorInvalidDevicePointer, "simFree: " + hex(pointer) +
                                                    " is not the start of a live allocation of sim device memory "
                                                    "(freed already, or not from simMalloc)");
    if (waited || driver().stopping.load()) {
      simdriver::release_allocation(*device, offset);
      return simSuccess;
    }
    // Kernels queued before the free may still use the memory.
    simdriver::wait_for_device(lock, device->device);
  }
}

simStatus_t simFreeAsync(void* pointer, simStream_t stream) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (pointer == nullptr) return simSuccess;
  std::unique_lock<std::mutex> lock(driver().mutex);
  simContext_st* device = device_holding(pointer);
  size_t offset = 0, size = 0;
  if (device == nullptr || !allocation_holding(*device, pointer, &offset, &size) || device->base + offset != pointer)
    return fail(simErrorInvalidDevicePointer, "simFreeAsync: " + hex(pointer) +
                                                  " is not the start of a live allocation of sim device memory "
                                                  "(freed already, or not from simMalloc)");
  simStatus_t status = simSuccess;
  auto target = simdriver::resolve_stream(stream, &status);
  if (target == nullptr) return status;
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Free;
  task.name = "free";
  task.dst = pointer;
  simdriver::submit(target, std::move(task));
  return simSuccess;
}

simStatus_t simMallocHost(void** pointer, size_t bytes) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (pointer == nullptr) return fail(simErrorInvalidValue, "simMallocHost: pointer is NULL");
  *pointer = nullptr;
  if (bytes == 0) return simSuccess;
  void* block = std::aligned_alloc(page_size(), round_up(bytes, page_size()));
  if (block == nullptr)
    return fail(simErrorOutOfMemory, "simMallocHost: the host could not provide " + simdriver::format_bytes(bytes) +
                                         " of pinned memory; free some host memory");
  std::lock_guard<std::mutex> lock(driver().mutex);
  driver().pinned[reinterpret_cast<uintptr_t>(block)] = bytes;
  *pointer = block;
  return simSuccess;
}

simStatus_t simFreeHost(void* pointer) {
  if (simStatus_t status = simdriver::enter(true); status != simSuccess) return status;
  if (pointer == nullptr) return simSuccess;
  if (simStatus_t status = simdriver::refuse_on_executor("simFreeHost"); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  auto is_live = [&] { return driver().pinned.count(reinterpret_cast<uintptr_t>(pointer)) != 0; };
  if (!is_live())
    return fail(simErrorInvalidValue, "simFreeHost: " + hex(pointer) +
                                          " is not the start of pinned memory from simMallocHost (freed already?)");
  // Copies queued on any device may still read or write it.
  if (!driver().stopping.load())
    for (auto& device : driver().devices)
      if (device->active) simdriver::wait_for_device(lock, device->device);
  if (!is_live())
    return fail(simErrorInvalidValue, "simFreeHost: " + hex(pointer) + " was freed by another thread meanwhile");
  driver().pinned.erase(reinterpret_cast<uintptr_t>(pointer));
  std::free(pointer);
  return simSuccess;
}

simStatus_t simPointerGetAttributes(simPointerAttributes* attributes, const void* pointer) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (attributes == nullptr) return fail(simErrorInvalidValue, "simPointerGetAttributes: attributes is NULL");
  std::lock_guard<std::mutex> lock(driver().mutex);
  *attributes = simPointerAttributes{simMemoryTypeUnregistered, -1, nullptr, 0};
  if (simContext_st* device = device_holding(pointer)) {
    size_t offset = 0, size = 0;
    if (!allocation_holding(*device, pointer, &offset, &size))
      return fail(simErrorInvalidDevicePointer, "simPointerGetAttributes: " + hex(pointer) + " lies in sim:" +
                                                    std::to_string(device->device) +
                                                    "'s addresses but in no live allocation (freed already?)");
    *attributes = simPointerAttributes{simMemoryTypeDevice, device->device, device->base + offset, size};
    return simSuccess;
  }
  uintptr_t start = 0;
  size_t size = 0;
  if (pinned_holding(pointer, 1, &start, &size))
    *attributes = simPointerAttributes{simMemoryTypeHost, -1, reinterpret_cast<void*>(start), size};
  return simSuccess;
}

simStatus_t simMemcpy(void* dst, const void* src, size_t bytes, simMemcpyKind kind) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  if (simStatus_t status = simdriver::refuse_on_executor("simMemcpy"); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  CopyEnd to, from;
  if (simStatus_t status = check_copy("simMemcpy", dst, src, bytes, kind, &to, &from); status != simSuccess)
    return status;
  if (bytes == 0) return simSuccess;
  if (!to.on_device && !from.on_device) {
    lock.unlock();
    std::memmove(dst, src, bytes);
    return simSuccess;
  }
  int device = from.on_device ? from.device : to.device;
  auto stream = driver().devices[device]->default_stream;
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Copy;
  task.name = "copy";
  task.dst = dst;
  task.src = src;
  task.bytes = bytes;
  simdriver::note_activity(task, simActivityMemcpy, copy_kind(from, to), from.pinned, to.pinned, *stream);
  if (bytes < simdriver::kParallelCopyBytes) return simdriver::run_on_caller(lock, stream, std::move(task));
  simdriver::wait_for_task(lock, stream, simdriver::submit(stream, std::move(task)));
  return simdriver::take_pending_error(device);
}

simStatus_t simMemcpyAsync(void* dst, const void* src, size_t bytes, simMemcpyKind kind, simStream_t stream) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  CopyEnd to, from;
  if (simStatus_t status = check_copy("simMemcpyAsync", dst, src, bytes, kind, &to, &from); status != simSuccess)
    return status;
  simStatus_t status = simSuccess;
  auto target = simdriver::resolve_stream(stream, &status);
  if (target == nullptr) return status;
  if (bytes == 0) return simSuccess;
  bool waits = !to.on_device && !to.pinned;
  if (waits && simdriver::on_executor_thread()) return simdriver::refuse_on_executor("simMemcpyAsync into pageable memory");
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Copy;
  task.name = "copy";
  task.dst = dst;
  task.src = src;
  task.bytes = bytes;
  simdriver::note_activity(task, simActivityMemcpy, copy_kind(from, to), from.pinned, to.pinned, *target);
  if (!from.on_device && !from.pinned) {
    // Pageable memory may change as soon as the call returns: its bytes travel in the driver's buffer.
    task.staging.reset(new unsigned char[bytes]);
    std::memcpy(task.staging.get(), src, bytes);
    task.src = task.staging.get();
  }
  if (waits && bytes < simdriver::kParallelCopyBytes) return simdriver::run_on_caller(lock, target, std::move(task));
  uint64_t sequence = simdriver::submit(target, std::move(task));
  if (waits) {
    simdriver::wait_for_task(lock, target, sequence);
    return simdriver::take_pending_error(target->device);
  }
  return simdriver::finish_submission(lock, target, sequence);
}

simStatus_t simMemsetAsync(void* pointer, int value, size_t bytes, simStream_t stream) {
  if (simStatus_t status = simdriver::enter(); status != simSuccess) return status;
  std::unique_lock<std::mutex> lock(driver().mutex);
  CopyEnd end;
  if (simStatus_t status = check_copy_end("simMemsetAsync", "pointer", pointer, bytes, 1, &end); status != simSuccess)
    return status;
  simStatus_t status = simSuccess;
  auto target = simdriver::resolve_stream(stream, &status);
  if (target == nullptr) return status;
  if (bytes == 0) return simSuccess;
  simdriver::Task task;
  task.kind = simdriver::Task::Kind::Memset;
  task.name = "memset";
  task.dst = pointer;
  task.value = value;
  task.bytes = bytes;
  simdriver::note_activity(task, simActivityMemset, simMemcpyDeviceToDevice, false, false, *target);
  return simdriver::finish_submission(lock, target, simdriver::submit(target, std::move(task)));
}

}  // extern "C"
