// Step 12, profiler: sim's device side in torch.profiler.
//
// torch.profiler records the host side of every operator by itself. For a PrivateUse1 device it
// needs two things from the backend:
//
// - an activity profiler (libkineto::IActivityProfiler), registered with
//   PrivateUse1ProfilerRegistry. `profile(activities=[..., ProfilerActivity.PrivateUse1])` asks it
//   for the device's activity: sim records one kernel per operator it runs (start and end on the
//   host clock, device, stream), tagged with the correlation id of the operator that launched it,
//   and hands them to kineto linked to that operator. That gives key_averages() its sim time
//   columns and the Chrome trace a track per sim device and stream.
//   Copies and memsets are the driver's own work, which sim's code does not run: the driver reports each one it
//   ran through its activity interface (simActivityEnable), timed on the device's clock, and sim adds them to the
//   same records, as "Memcpy HtoD (Pageable -> Device)" and the like, linked to the operator that queued them.
// - profiler stubs (ProfilerStubs), for the legacy profiler
//   (`torch.autograd.profiler.profile(use_device="sim", use_kineto=False)`): two device events
//   recorded on the current stream around each operator, and the time between them.
//
// sim's kernels are launches on its driver's streams (operators_launch.cpp), run by the driver's executor: a kernel's
// device time is the time its host code took there, and it carries the id of the operator that launched it.
#define USE_KINETO 1
#include "sim.h"
#include "interface_trace.h"

#include <torch/extension.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <GenericTraceActivity.h>
#include <libkineto.h>
#include <IActivityProfiler.h>
#include <output_base.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace sim {

// ------------------------------------------------------------ kernel records
struct KernelRecord {
  libkineto::ActivityType type;  // CONCURRENT_KERNEL, GPU_MEMCPY or GPU_MEMSET
  std::string name;
  int64_t start_ns;
  int64_t end_ns;
  c10::DeviceIndex device;
  c10::StreamId stream;
  uint64_t correlation;  // of the operator that launched the kernel; 0 if none
};

static std::atomic<bool> g_recording_kernels{false};
static std::mutex g_kernels_mutex;
static std::vector<KernelRecord> g_kernels;
static thread_local std::vector<uint64_t> t_correlation;

bool recording_kernels() { return g_recording_kernels.load(std::memory_order_relaxed); }

void record_kernel(const std::string& name, int64_t start_ns, int64_t end_ns, c10::Device device) {
  c10::StreamId stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getStream(device).id();
  uint64_t correlation = t_correlation.empty() ? 0 : t_correlation.back();
  std::lock_guard<std::mutex> lock(g_kernels_mutex);
  g_kernels.push_back({libkineto::ActivityType::CONCURRENT_KERNEL, name, start_ns, end_ns, device.index(), stream,
                       correlation});
}

// ------------------------------------------------------------ copy records
// A copy sim queued while recording: the stream and operator its record names, by the correlation id it was queued
// under (the driver's records carry that id back).
struct PendingCopy {
  c10::DeviceIndex device;
  c10::StreamId stream;
  uint64_t correlation;
};
static std::unordered_map<uint64_t, PendingCopy> g_pending_copies;  // under g_kernels_mutex
static uint64_t g_last_copy_id = 0;
static std::atomic<int64_t> g_host_minus_device_ns{0};  // the host clock (c10::getTime) less the device's

static std::string activity_name(const simActivityRecord& record) {
  if (record.kind == simActivityMemset) return "Memset (Device)";
  switch (record.copy_kind) {
    case simMemcpyHostToDevice:
      return std::string("Memcpy HtoD (") + (record.source_pinned ? "Pinned" : "Pageable") + " -> Device)";
    case simMemcpyDeviceToHost:
      return std::string("Memcpy DtoH (Device -> ") + (record.destination_pinned ? "Pinned" : "Pageable") + ")";
    default:
      return "Memcpy DtoD (Device -> Device)";
  }
}

static void record_copy_activity(const simActivityRecord* record, void*) {
  const int64_t offset = g_host_minus_device_ns.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_kernels_mutex);
  auto found = g_pending_copies.find(record->correlation);
  if (found == g_pending_copies.end()) return;  // not queued by sim while recording
  const PendingCopy copy = found->second;
  g_pending_copies.erase(found);
  g_kernels.push_back({record->kind == simActivityMemset ? libkineto::ActivityType::GPU_MEMSET
                                                          : libkineto::ActivityType::GPU_MEMCPY,
                       activity_name(*record), record->start_ns + offset, record->end_ns + offset, copy.device,
                       copy.stream, copy.correlation});
}

CopyRecordScope::CopyRecordScope(const c10::Stream& stream) {
  if (!recording_kernels()) return;
  {
    std::lock_guard<std::mutex> lock(g_kernels_mutex);
    id_ = ++g_last_copy_id;
    g_pending_copies[id_] = {stream.device_index(), stream.id(), operator_correlation()};
  }
  driver_call(simActivitySetCorrelation(id_), "simActivitySetCorrelation");
}

CopyRecordScope::~CopyRecordScope() {
  if (id_ != 0) simActivitySetCorrelation(0);
}

uint64_t operator_correlation() { return t_correlation.empty() ? 0 : t_correlation.back(); }

CorrelationScope::CorrelationScope(uint64_t id) { t_correlation.push_back(id); }
CorrelationScope::~CorrelationScope() { t_correlation.pop_back(); }

// ------------------------------------------------------- the kineto session
class SimProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    SIM_TRACE("profiler", "session.start", "");
    {
      std::lock_guard<std::mutex> lock(g_kernels_mutex);
      g_kernels.clear();
      g_pending_copies.clear();
    }
    long long device_now = 0;
    driver_call(simActivityGetTimestamp(&device_now), "simActivityGetTimestamp");
    g_host_minus_device_ns = c10::getTime() - device_now;
    driver_call(simActivityEnable(&record_copy_activity, nullptr), "simActivityEnable");
    buffer_->span.startTime = c10::getTime();
    g_recording_kernels = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    SIM_TRACE("profiler", "session.stop", "");
    g_recording_kernels = false;
    driver_call(simActivityEnable(nullptr, nullptr), "simActivityEnable");
    buffer_->span.endTime = c10::getTime();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    SIM_TRACE("profiler", "session.errors", "");
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    SIM_TRACE("profiler", "session.processTrace", "");
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t, int64_t) override {
    SIM_TRACE("profiler", "session.processTrace", "linked");
    std::vector<KernelRecord> kernels;
    {
      std::lock_guard<std::mutex> lock(g_kernels_mutex);
      kernels.swap(g_kernels);
    }
    for (const KernelRecord& kernel : kernels) {
      auto activity = std::make_unique<libkineto::GenericTraceActivity>(buffer_->span, kernel.type, kernel.name);
      activity->startTime = kernel.start_ns;
      activity->endTime = kernel.end_ns;
      activity->device = kernel.device;
      activity->resource = kernel.stream;
      activity->id = static_cast<int32_t>(kernel.correlation);
      activity->linked = kernel.correlation == 0 ? nullptr : linked_activity(static_cast<int32_t>(kernel.correlation));
      streams_.insert({kernel.device, kernel.stream});
      logger.handleGenericActivity(*activity);
      buffer_->activities.push_back(std::move(activity));
    }
    buffer_->gpuOpCount = static_cast<int>(buffer_->activities.size());
  }

  // Chrome trace rows: one process per sim device ("sim 0"), one thread per stream.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    SIM_TRACE("profiler", "session.getDeviceInfo", "");
    c10::DeviceIndex device = streams_.empty() ? 0 : streams_.begin()->first;
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{device, device, "sim " + std::to_string(device), "sim"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    SIM_TRACE("profiler", "session.getResourceInfos", "");
    std::vector<libkineto::ResourceInfo> rows;
    for (const auto& [device, stream] : streams_)
      rows.push_back({stream, stream, device, "sim " + std::to_string(device) + " stream " + std::to_string(stream)});
    return rows;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    SIM_TRACE("profiler", "session.getTraceBuffer", "");
    return std::move(buffer_);
  }

  // kineto pushes the id of each operator on the thread that runs it; a kernel's launch carries the
  // innermost id of its launching thread to the executor (CorrelationScope), linking it to its operator.
  void pushCorrelationId(uint64_t id) override {
    SIM_TRACE("profiler", "session.pushCorrelationId", c10::str("id=", id));
    t_correlation.push_back(id);
  }
  void popCorrelationId() override {
    SIM_TRACE("profiler", "session.popCorrelationId", "");
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

 private:
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
  std::set<std::pair<c10::DeviceIndex, c10::StreamId>> streams_;
};

class SimActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    SIM_TRACE("profiler", "name", "");
    return name_;
  }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    SIM_TRACE("profiler", "availableActivities", "");
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types, const libkineto::Config&) override {
    SIM_TRACE("profiler", "configure", c10::str("activity_types=", activity_types.size()));
    if (activity_types.count(libkineto::ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    return std::make_unique<SimProfilerSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"sim"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                                libkineto::ActivityType::GPU_MEMCPY,
                                                libkineto::ActivityType::GPU_MEMSET};
};

using torch::profiler::impl::ProfilerStubs;
using torch::profiler::impl::ProfilerVoidEventStub;

struct SimProfilerStubs final : ProfilerStubs {
  static const c10::impl::DeviceGuardImplInterface& guard() {
    return *c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
  }

  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    SIM_TRACE("profiler", "stubs.record", "");
    const auto& impl = guard();
    c10::Device current = impl.getDevice();
    if (device != nullptr) *device = current.index();
    void* raw = nullptr;
    impl.record(&raw, impl.getStream(current), current.index(), c10::EventFlag::BACKEND_DEFAULT);
    c10::DeviceIndex index = current.index();
    *event = std::shared_ptr<void>(raw, [index](void* recorded) { guard().destroyEvent(recorded, index); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }

  // PyTorch reads the result in microseconds; a device event measures milliseconds.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    SIM_TRACE("profiler", "stubs.elapsed", "");
    return static_cast<float>(guard().elapsedTime(start->get(), end->get(), 0) * 1000.0);
  }

  // Named ranges belong to a device-side tracing tool (NVTX on CUDA); sim has none to forward to.
  void mark(const char* name) const override { SIM_TRACE("profiler", "stubs.mark", name != nullptr ? name : ""); }
  void rangePush(const char* name) const override {
    SIM_TRACE("profiler", "stubs.rangePush", name != nullptr ? name : "");
  }
  void rangePop() const override { SIM_TRACE("profiler", "stubs.rangePop", ""); }

  bool enabled() const override {
    SIM_TRACE("profiler", "stubs.enabled", "");
    return true;
  }

  void onEachDevice(std::function<void(int)> operation) const override {
    SIM_TRACE("profiler", "stubs.onEachDevice", "");
    const auto& impl = guard();
    for (c10::DeviceIndex index = 0; index < impl.deviceCount(); ++index) {
      c10::DeviceGuard on(c10::Device(c10::DeviceType::PrivateUse1, index));
      operation(index);
    }
  }

  void synchronize() const override {
    SIM_TRACE("profiler", "stubs.synchronize", "");
    const auto& impl = guard();
    for (c10::DeviceIndex index = 0; index < impl.deviceCount(); ++index) impl.synchronizeDevice(index);
  }
};

static void install_profiler() {
  static SimProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  static std::once_flag registered;
  std::call_once(registered, [] {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        [] { return std::make_unique<SimActivityProfiler>(); });
  });
}

void bind_profiler(pybind11::module& module) { module.def("install_profiler", &install_profiler); }

}  // namespace sim
