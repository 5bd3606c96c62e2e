// Guide step "profiler": {{ name }}'s device work in torch.profiler.
//
// torch.profiler records the host side of every operator by itself. For the device side,
// `profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])` asks the activity
// profiler that the backend registers for PrivateUse1 (a libkineto::IActivityProfiler): this one
// turns the runtime's activity tracing on while the profiler records, forwards the profiler's
// correlation ids (the operator running on each thread) to the runtime, and hands the runtime's
// records to the profiler as device events linked to the operators that issued them. The legacy
// profiler (`torch.autograd.profiler.profile(use_device="{{ name }}")`) times each operator with two
// device events instead, through the profiler stubs. What a vendor replaces: nothing here; the
// runtime's activity tracing and events (runtime.cpp) become its driver's tracing and events.
#define USE_KINETO 1  // torch's wheels have kineto; its headers declare the profiler interface only under this
#include "backend.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

#include <set>
#include <string>
#include <vector>

namespace torch_{{ name }} {

// [guide: profiler]
namespace {

// One profiling run: the runtime traces from start() to stop(); processTrace() turns its records into events.
class ProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    buffer_->span.startTime = c10::getTime();
    check(runtime::activity_enable(), "activity_enable");
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    check(runtime::activity_disable(), "activity_disable");
    buffer_->span.endTime = c10::getTime();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback operator_of, int64_t,
                    int64_t) override {
    std::vector<runtime::Activity> records;
    check(runtime::activity_flush(&records), "activity_flush");
    for (const runtime::Activity& record : records) {
      auto event = std::make_unique<libkineto::GenericTraceActivity>(
          buffer_->span,
          record.kind == runtime::ActivityKind::copy ? libkineto::ActivityType::GPU_MEMCPY
                                                     : libkineto::ActivityType::CONCURRENT_KERNEL,
          record.name);
      event->startTime = record.start_ns;
      event->endTime = record.end_ns;
      event->device = record.device;
      event->id = static_cast<int32_t>(record.correlation);
      event->linked = record.correlation == 0 ? nullptr : operator_of(static_cast<int32_t>(record.correlation));
      devices_.insert(record.device);
      logger.handleGenericActivity(*event);
      buffer_->activities.push_back(std::move(event));
    }
  }

  // The rows of the Chrome trace: one per device.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    int device = devices_.empty() ? 0 : *devices_.begin();
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{device, device, "{{ name }} " + std::to_string(device), "{{ name }}"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> rows;
    for (int device : devices_) rows.push_back({0, device, device, "{{ name }} " + std::to_string(device)});
    return rows;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  // The profiler calls these on the thread that runs each operator, around it.
  void pushCorrelationId(uint64_t id) override { check(runtime::activity_push_correlation(id), "push_correlation"); }
  void popCorrelationId() override { check(runtime::activity_pop_correlation(), "pop_correlation"); }

  std::vector<std::string> errors() override { return errors_; }

 private:
  // The profiler reads failures from errors() rather than from exceptions thrown into it.
  void check(runtime::Status status, const char* call) {
    if (status != runtime::kSuccess) errors_.push_back(std::string("{{ name }}: runtime::") + call + " failed: " +
                                                       runtime::error_string(status));
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
  std::set<int> devices_;
  std::vector<std::string> errors_;
};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& requested,
                                                                 const libkineto::Config&) override {
    for (auto type : activities_) {
      if (requested.count(type) != 0) return std::make_unique<ProfilerSession>();
    }
    return nullptr;  // no device activity was asked for
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& requested,
                                                                 const libkineto::Config& config) override {
    return configure(requested, config);
  }

 private:
  std::string name_{"{{ name }}"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::GPU_MEMCPY,
                                                libkineto::ActivityType::CONCURRENT_KERNEL};
};

REGISTER_PRIVATEUSE1_PROFILER(ActivityProfiler);

// The legacy profiler's device timing: an event recorded on the current stream before and after each operator.
struct ProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    DeviceIndex index = current_device();
    if (device != nullptr) *device = index;
    runtime::Event recorded = nullptr;
    RUNTIME_CHECK(runtime::event_create(&recorded, /*timing=*/true));
    const auto& guard = *c10::impl::getDeviceGuardImpl(kDevice);
    RUNTIME_CHECK(runtime::event_record(recorded, runtime_stream(guard.getStream(c10::Device(kDevice, index)))));
    *event = std::shared_ptr<void>(recorded,
                                   [](void* done) { runtime::event_destroy(static_cast<runtime::Event>(done)); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }

  // In microseconds, as the profiler reads it.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    float milliseconds = 0;
    RUNTIME_CHECK(runtime::event_synchronize(static_cast<runtime::Event>(end->get())));
    RUNTIME_CHECK(runtime::event_elapsed_ms(&milliseconds, static_cast<runtime::Event>(start->get()),
                                            static_cast<runtime::Event>(end->get())));
    return milliseconds * 1000;
  }

  // Named ranges go to a device's own tracing tool (NVTX, for CUDA); the fake runtime has none.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> operation) const override {
    for (DeviceIndex index = 0; index < device_count(); ++index) {
      c10::DeviceGuard on(c10::Device(kDevice, index));
      operation(index);
    }
  }

  void synchronize() const override {
    for (DeviceIndex index = 0; index < device_count(); ++index) RUNTIME_CHECK(runtime::synchronize_device(index));
  }
};

ProfilerStubs g_stubs;
[[maybe_unused]] const bool g_stubs_registered = (torch::profiler::impl::registerPrivateUse1Methods(&g_stubs), true);

}  // namespace
// [/guide: profiler]

}  // namespace torch_{{ name }}
