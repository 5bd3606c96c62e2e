"""The integration guide as data: one step per bring-up step of the sim backend, each checked live.

For every step: what it is for, the backend module that implements it (its real
source), the C++ a vendor writes for the same step, and a check run in fresh
processes that shows the real error before the step and what works after it,
plus the coverage change the step causes.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from torch_sim import STEPS, bringup_checks
from pu1_explorer import forkserver
from pu1_explorer.coverage import CoverageChange

TITLES = {
    "device_module": "Name the device and register its Python module",
    "hooks": "Register the PrivateUse1 hooks",
    "guard": "Implement the device guard",
    "allocator": "Provide a device allocator",
    "operators": "Register operators and a fallback",
    "streams_events": "Support streams and events",
    "generator": "Provide random number generators",
    "autograd": "Customise autograd where the device needs it",
    "amp": "Enable automatic mixed precision",
    "serialization": "Make tensors save and load",
    "autoload": "Load the backend with `import torch`",
    "profiler": "Report device time to the profiler",
    "compile": "Compile for the device with torch.compile",
    "distributed": "Run torch.distributed on the device",
}

VENDOR_CPP = {
    "device_module": """// Python side of a vendor package (C++ needs nothing for this step):
//   torch.utils.rename_privateuse1_backend("mydev")
//   torch._register_device_module("mydev", mydev_module)
//   torch.utils.generate_methods_for_privateuse1_backend()""",
    "hooks": """struct MyHooks final : at::PrivateUse1HooksInterface {
  bool isAvailable() const override { return my_runtime_device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device) const override { return my_context_exists(device); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override;
  at::Allocator* getPinnedMemoryAllocator() const override { return &my_pinned_allocator; }
};
// once, at start-up:
at::RegisterPrivateUse1HooksInterface(new MyHooks());""",
    "guard": """struct MyGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device getDevice() const override { return {type(), my_get_current_device()}; }
  void setDevice(c10::Device d) const override { my_set_current_device(d.index()); }
  c10::Device exchangeDevice(c10::Device d) const override;
  c10::Stream getStream(c10::Device d) const override;
  c10::DeviceIndex deviceCount() const noexcept override { return my_runtime_device_count(); }
  // ... uncheckedSetDevice, exchangeStream
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, MyGuardImpl);""",
    "allocator": """struct MyAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t bytes) override {
    void* ptr = my_device_malloc(bytes);  // throws c10::OutOfMemoryError when full
    return {ptr, ptr, &my_device_free, c10::Device(c10::DeviceType::PrivateUse1, current_device())};
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  // ... emptyCache, resetPeakStats, recordStream, raw_deleter, copy_data
};
static MyAllocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);""",
    "operators": """at::Tensor my_empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, ...) {
  return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype.value_or(at::kFloat), memory_format);
}
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", my_empty);
  m.impl("_copy_from", my_copy_from);        // and the rest of the minimal set
  m.impl("add.Tensor", my_add);              // native kernels
}
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {      // everything else
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&my_cpu_fallback>());
}""",
    "streams_events": """// in MyGuardImpl:
c10::Stream getNewStream(c10::Device d, int priority) const override;
void record(void** event, const c10::Stream& s, c10::DeviceIndex, c10::EventFlag) const override;
void block(void* event, const c10::Stream& s) const override;
bool queryEvent(void* event) const override;
double elapsedTime(void* start, void* end, c10::DeviceIndex) const override;
void synchronizeStream(const c10::Stream& s) const override;""",
    "generator": """struct MyGenerator final : c10::GeneratorImpl {
  MyGenerator(c10::DeviceIndex d)
      : c10::GeneratorImpl({c10::DeviceType::PrivateUse1, d}, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  void set_current_seed(uint64_t seed) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void set_state(const c10::TensorImpl& state) override;
  // ... seed, current_seed, set_offset, get_offset, clone_impl
};
// MyHooks::getDefaultGenerator returns one per device; getNewGenerator makes fresh ones.""",
    "autograd": """// Derivative formulas come with PyTorch; override one only where the device differs:
class MyFusedGelu : public torch::autograd::Function<MyFusedGelu> { /* forward, backward */ };
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("gelu", [](const at::Tensor& x, c10::string_view approximate) {
    return MyFusedGelu::apply(x, approximate);
  });
}""",
    "amp": """TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(exp, fp32)
}
// plus, in the Python device module: get_amp_supported_dtype, is_autocast_enabled, ...""",
    "serialization": """// torch.save copies each storage to the host, torch.load rebuilds it on the device
// (allocator and _copy_from do it). What the device keeps beside a tensor travels too:
struct MyTensorMeta : c10::BackendMeta { /* e.g. a memory format */ };
void save_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& m);
void load_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& m);
TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &save_meta, &load_meta);
// Python: torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)""",
    "autoload": """# pyproject.toml of the vendor package
[project.entry-points."torch.backends"]
mydev = "my_package:_autoload"   # called at the end of `import torch`""",
    "profiler": """// torch.profiler(activities=[..., PrivateUse1]): an activity profiler for kineto
class MyActivityProfiler : public libkineto::IActivityProfiler {
  // configure() returns a session: start()/stop() arm the device's tracing,
  // pushCorrelationId() tags the kernels each operator launches, processTrace()
  // logs them as CONCURRENT_KERNEL activities linked to their operator.
};
torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
    [] { return std::make_unique<MyActivityProfiler>(); });
// the legacy profiler (use_kineto=False) times operators with device events instead:
torch::profiler::impl::registerPrivateUse1Methods(&my_profiler_stubs);""",
    "compile": """# Python: inductor asks the device module for its code generators the first time it
# compiles (all four, or it ignores them); a GPU-like device brings a Triton scheduling.
torch.mydev.Scheduling = MyScheduling              # which kernels to write, in which language
torch.mydev.PythonWrapperCodegen = MyWrapper       # allocates buffers and calls the kernels
torch.mydev.CppWrapperCodegen = MyCppWrapper
torch.mydev.WrapperFxCodegen = WrapperFxCodegen
# how the generated wrapper sets the device and synchronizes:
register_device_op_overrides("mydev", MyDeviceOpOverrides())
# what dynamo asks the device (count, current device, synchronize):
register_interface_for_device("mydev", MyDeviceInterface)""",
    "distributed": """// a c10d backend: one collective library call per collective, for device tensors
class ProcessGroupMyccl : public c10d::Backend {
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // ... broadcast, allgather, _allgather_base, reduce_scatter, _reduce_scatter_base,
  //     alltoall_base, send, recv, barrier: each returns a Work whose wait() and
  //     getFuture() finish when the device is done
};
// DDP's per-iteration statistics need a timer for the device:
c10d::TimerRegistry()->Register(c10::DeviceType::PrivateUse1, make_my_timer);
# Python: the factory, registered for the device name
torch.distributed.Backend.register_backend("myccl", create_myccl, devices=["mydev"])""",
}


@dataclass
class GuideStep:
    number: int
    name: str
    title: str
    explanation: str
    module_path: str
    source: str
    vendor_cpp: str
    check_code: str
    cpp_file: str | None = None  # the step's C++ file in sim, if the step has C++
    cpp_source: str | None = None


@dataclass
class StepCheck:
    """What a step's check did before and after the step, and how coverage moved."""

    step: str
    before_succeeded: bool
    before: str
    after_succeeded: bool
    after: str
    coverage_before: float | None = None
    coverage_after: float | None = None
    coverage_changes: list[CoverageChange] = field(default_factory=list)

    @property
    def demonstrates_the_step(self) -> bool:
        return not self.before_succeeded and self.after_succeeded


def _join_paragraph(text: str) -> str:
    """Unwrap a docstring paragraph, keeping list items ('- ...') on lines of their own."""
    items: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("- ") or not items:
            items.append(stripped)
        else:
            items[-1] += " " + stripped
    return "\n".join(items)


def _explanation(module) -> str:
    """The module docstring without its 'Step N, name:' headline, one paragraph per line."""
    text = inspect.getdoc(module) or ""
    headline, _, rest = text.partition("\n")
    body = rest if ":" in headline else text
    summary = headline.split(":", 1)[1].strip() if ":" in headline else ""
    summary = summary[:1].upper() + summary[1:]
    paragraphs = [_join_paragraph(part) for part in body.strip().split("\n\n") if part.strip()]
    return "\n\n".join(([summary] if summary else []) + paragraphs)


def steps() -> list[GuideStep]:
    """The guide's steps, in the backend's bring-up order."""
    result = []
    for number, name in enumerate(STEPS, start=1):
        module = importlib.import_module(f"torch_sim.{name}")
        path = Path(inspect.getsourcefile(module))
        cpp = path.parent / "csrc" / f"{name}.cpp"
        result.append(GuideStep(number, name, TITLES[name], _explanation(module),
                                f"backend/{path.name}", path.read_text(),
                                VENDOR_CPP[name], textwrap.dedent(bringup_checks.CHECKS[name]).strip(),
                                f"backend/csrc/{cpp.name}" if cpp.is_file() else None,
                                cpp.read_text() if cpp.is_file() else None))
    return result


_COVERAGE_PROGRAM = """
import json, torch, torch_sim
from pu1_explorer.coverage import coverage
for step in {steps!r}:
    if step is not None:
        torch_sim.bring_up(step)
    snapshot = coverage("PrivateUse1", label="sim")
    print(json.dumps({{"percent": snapshot.summary()["without_fallback_percent"],
                      "rows": {{row.operator: row.backend + "|" + row.autograd + "|" + row.autocast
                               for row in snapshot.rows}}}}))
"""


def _fresh_process(program: str, timeout: float) -> subprocess.CompletedProcess:
    """Run `program` in a fresh process (forked from a template that imported torch) with sim not loaded."""
    return forkserver.run(["-c", program], bringup_checks.check_environment(), timeout)


def _coverage_at(*steps: str | None) -> list[tuple[float, dict[str, str]]]:
    """The coverage with the backend brought up to each of `steps` in turn (None: nothing), in one fresh process."""
    completed = _fresh_process(_COVERAGE_PROGRAM.format(steps=list(steps)), timeout=300)
    if completed.returncode != 0:
        raise RuntimeError(bringup_checks.error_summary(completed.stderr, completed.returncode))
    found = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return [(data["percent"], data["rows"]) for data in found]


def _run_check(step: str, installed_until: str | None, timeout: float = 120.0) -> bringup_checks.CheckResult:
    """`bringup_checks.run_check`, in a forked fresh process; the autoload step's check is about `import torch`
    itself, so it keeps a process of its own."""
    return bringup_checks.run_check(step, installed_until, timeout,
                                    run_python=None if step == "autoload" else forkserver.run)


@functools.lru_cache(maxsize=None)
def check_step(name: str, with_coverage: bool = True) -> StepCheck:
    """Run the step's check in two fresh processes (before and after the step) and compare coverage."""
    if name not in STEPS:
        raise ValueError(f"unknown step {name!r}; the steps are: {', '.join(STEPS)}")
    previous = bringup_checks.step_before(name)
    before = _run_check(name, previous)
    after = _run_check(name, name)
    result = StepCheck(name, before.succeeded, before.summary, after.succeeded, after.summary)
    if with_coverage and name != "autoload":
        (percent_before, rows_before), (percent_after, rows_after) = _coverage_at(previous, name)
        result.coverage_before, result.coverage_after = percent_before, percent_after
        result.coverage_changes = [CoverageChange(operator, rows_before.get(operator, "missing"), status)
                                   for operator, status in sorted(rows_after.items())
                                   if rows_before.get(operator) != status]
    return result


@dataclass
class StepCoverage:
    """How the backend's ATen overloads resolve once the bring-up has reached `step` (transitive statuses)."""

    number: int
    step: str
    counts: dict[str, int]
    without_fallback_percent: float
    autograd_kernels: int  # overloads with a kernel of the backend's own on its Autograd key
    autocast_kernels: int  # overloads with a kernel on its Autocast key (a cast policy)


_COVERAGE_BY_STEP_PROGRAM = """
import json, torch, torch_sim
from pu1_explorer.coverage import coverage
for step in torch_sim.STEPS:
    torch_sim.bring_up(step)
    snapshot = coverage("PrivateUse1", label="sim")
    summary = snapshot.summary()
    counts = {status: value["count"] for status, value in summary["transitive"].items()}
    print(json.dumps({"step": step, "counts": counts,
                      "percent": summary["without_fallback_percent"],
                      "autograd": sum(row.autograd == "kernel" for row in snapshot.rows),
                      "autocast": sum(row.autocast == "kernel" for row in snapshot.rows)}), flush=True)
"""


@functools.lru_cache(maxsize=None)
def coverage_by_step() -> list[StepCoverage]:
    """The coverage after each bring-up step, measured in one fresh process that brings sim up step by step."""
    completed = _fresh_process(_COVERAGE_BY_STEP_PROGRAM, timeout=600)
    if completed.returncode != 0:
        raise RuntimeError(bringup_checks.error_summary(completed.stderr, completed.returncode))
    rows = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return [StepCoverage(number, row["step"], row["counts"], row["percent"], row["autograd"], row["autocast"])
            for number, row in enumerate(rows, start=1)]
