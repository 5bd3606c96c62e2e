"""The capability probes: each checks one capability of a PrivateUse1 device by its name, as a fresh process would.

A probe is a function `probe(device, imports)` run in its own process after torch and the backend's `imports`
(`probe_child`): it returns when the capability works, calls `report` for its one-line finding, `skip` when it
does not apply, and raises (an AssertionError with what differs, or any error met) when the capability fails.
Each carries a `hint` (the `harness.hint` decorator): in one line, what usually causes its failure, in PyTorch's
terms; the scorecard shows it beside a probe that did not pass.
`compare` checks a device result against the CPU's. They run in-process too, as the tests do.
"""
from __future__ import annotations

import copy
import importlib.metadata
import io
import os
from typing import Sequence

import torch

from pu1_explorer.conformance.harness import compare, hint, report, skip


def _device_module(device: str):
    return getattr(torch, device, None)


@hint('torch.<device> is missing or incomplete: name PrivateUse1 (torch.utils.rename_privateuse1_backend) and '
      'register a module (torch._register_device_module) whose device_count, current_device and set_device ask the '
      'device runtime')
def device_module(device: str, imports: Sequence[str] = ()) -> None:
    """torch.<device>: is_available, device_count, current_device and set_device agree with new tensors."""
    module = _device_module(device)
    assert module is not None, f"torch.{device} is not registered (torch._register_device_module)"
    wanted = ("is_available", "device_count", "current_device", "set_device")
    missing = [name for name in wanted if not hasattr(module, name)]
    assert not missing, f"torch.{device} lacks {', '.join(missing)}"
    assert module.is_available() is True, f"torch.{device}.is_available() is {module.is_available()!r}"
    count = module.device_count()
    assert isinstance(count, int) and count >= 1, f"torch.{device}.device_count() is {count!r}"
    assert module.current_device() == 0, f"current_device() is {module.current_device()!r} at start"
    assert torch.empty(1, device=device).device == torch.device(device, 0)
    if count >= 2:
        module.set_device(1)
        assert module.current_device() == 1, "set_device(1) did not change current_device()"
        assert torch.empty(1, device=device).device == torch.device(device, 1), "a new tensor is not on :1"
        module.set_device(0)
    report(f"{count} device(s): is_available, device_count, current_device and set_device agree")


@hint('torch.accelerator asks PrivateUse1HooksInterface (isAvailable, deviceCount) and the device guard (getDevice, '
      'deviceCount); "device index is out of range ... got -1" means no hooks or no DeviceGuardImplInterface is '
      'registered for PrivateUse1')
def accelerator(device: str, imports: Sequence[str] = ()) -> None:
    """torch.accelerator finds the device, counts it as torch.<device> does, and synchronizes."""
    module = _device_module(device)
    acc = torch.accelerator
    assert acc.is_available(), "torch.accelerator.is_available() is False"
    current = acc.current_accelerator()
    assert current is not None and current.type == device, f"current_accelerator() is {current!r}"
    count = acc.device_count()
    assert module is None or count == module.device_count(), f"device_count() {count} != torch.{device}'s"
    acc.synchronize()
    acc.synchronize(0)
    assert acc.current_device_index() == 0, f"current_device_index() is {acc.current_device_index()}"
    if count >= 2:
        acc.set_device_index(1)
        assert acc.current_device_index() == 1, "set_device_index(1) did not change current_device_index()"
        acc.set_device_index(0)
    report(f"current_accelerator() is {current}, {count} device(s), synchronize works")


@hint('the DeviceGuardImplInterface registered for PrivateUse1 (C10_REGISTER_GUARD_IMPL) must switch devices in '
      "setDevice/exchangeDevice and report them in getDevice, and the allocator must allocate on the guard's current "
      'device')
def devices_and_guard(device: str, imports: Sequence[str] = ()) -> None:
    """Tensors on a second device, the device contexts, copies across devices, and mixing devices refused."""
    count = torch.accelerator.device_count()
    if count < 2:
        skip(f"{count} device: needs two")
    a = torch.arange(6.0, device=f"{device}:1")
    assert a.device == torch.device(device, 1), f"a tensor made on :1 is on {a.device}"
    with torch.device(f"{device}:1"):
        b = torch.ones(3)
    assert b.device == torch.device(device, 1), f"with torch.device(':1') made a tensor on {b.device}"
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1, "device_index(1) did not switch"
        c = torch.empty(2, device=device)
    assert c.device == torch.device(device, 1), f"inside device_index(1) a new tensor is on {c.device}"
    assert torch.accelerator.current_device_index() == 0, "device_index(1) did not restore the device"
    assert (a + a).device == torch.device(device, 1), "an op on :1 tensors ran elsewhere"
    d = a.to(f"{device}:0")
    assert d.device == torch.device(device, 0)
    compare(d, torch.arange(6.0), "copy :1 -> :0")
    compare(d.to(f"{device}:1") * 2, torch.arange(6.0) * 2, "copy :0 -> :1")
    try:
        a + d
    except RuntimeError:
        pass
    else:
        raise AssertionError("adding a tensor on :1 to one on :0 did not raise")
    report("tensors on :1, torch.device and device_index contexts, copies across devices, mixing refused")


@hint("torch.accelerator's memory statistics come from the PrivateUse1 allocator: it must be a c10::DeviceAllocator "
      '(registered with c10::SetAllocator) that counts allocated bytes and the peak per device and resets the peak')
def allocator_statistics(device: str, imports: Sequence[str] = ()) -> None:
    """memory_allocated and its peak follow a tensor's life; reset_peak_memory_stats resets the peak."""
    acc = torch.accelerator
    mib = 1 << 20
    acc.synchronize()
    base = acc.memory_allocated(0)
    x = torch.empty(mib, dtype=torch.uint8, device=f"{device}:0")
    grown = acc.memory_allocated(0) - base
    assert grown >= mib, f"memory_allocated grew by {grown} bytes for a 1 MiB tensor"
    y = torch.empty(2 * mib, dtype=torch.uint8, device=f"{device}:0")
    peak = acc.max_memory_allocated(0)
    assert peak >= base + 3 * mib, f"max_memory_allocated {peak} < {base + 3 * mib} with 3 MiB live"
    del x, y
    after = acc.memory_allocated(0)
    assert after < base + mib, f"memory_allocated still {after - base} bytes above the start after del"
    assert acc.max_memory_allocated(0) >= peak, "the peak dropped without a reset"
    acc.reset_peak_memory_stats(0)
    assert acc.max_memory_allocated(0) < base + mib, "reset_peak_memory_stats did not reset the peak"
    report(f"memory_allocated +{grown} bytes for 1 MiB, peak {peak - base} bytes above the start, freed on del")


@hint('a basic operator that fails usually lacks one of the minimal kernels (empty.memory_format, empty_strided, '
      'as_strided, view, resize_, _copy_from, _copy_from_and_resize, _local_scalar_dense) or a boxed fallback on '
      'PrivateUse1 for the rest')
def operators(device: str, imports: Sequence[str] = ()) -> None:
    """Copies, element-wise ops, reductions, matmul, views, cat, in-place ops and .item() match the CPU."""
    x = torch.randn(4, 5)
    d = x.to(device)
    assert d.device.type == device, f"x.to({device!r}) is on {d.device}"
    compare(d, x, "copy to the device")
    compare(d + 1, x + 1, "add")
    compare((d * d).sum(), (x * x).sum(), "mul and sum")
    compare(d.t() @ d, x.t() @ x, "matmul")
    compare(d[1:3, ::2].contiguous(), x[1:3, ::2].contiguous(), "strided view")
    compare(torch.cat([d, d.relu()]), torch.cat([x, x.relu()]), "cat")
    e = d.clone()
    e.add_(2)
    compare(e, x + 2, "in-place add")
    assert abs(d.sum().item() - x.sum().item()) < 1e-4, ".item() differs from the CPU"
    assert device in repr(d), "repr() of a device tensor does not name the device"
    report("copies, element-wise ops, reductions, matmul, views, cat, in-place ops and .item() match the CPU")


def _read_on_another_stream(device: str, side: torch.Stream, ordered: bool) -> float:
    """x is written on the current stream and read on `side`, after `side` waits for it when `ordered`."""
    x = torch.ones(1 << 12, device=device)
    current = torch.accelerator.current_stream()
    if ordered:
        side.wait_stream(current)
    with side:
        doubled = x * 2
    torch.accelerator.synchronize()
    return doubled.sum().item()


@hint("the guard's record, block and synchronize functions and the allocator fire c10::impl::GPUTrace's hooks "
      "(trace_gpu_event_record, ..._event_wait, ..._memory_allocation, ...), which PyTorch's interpreter passes to "
      "torch.<device>._gpu_trace's registries, where the stream sanitizer listens")
def stream_ordering_traces(device: str, imports: Sequence[str] = ()) -> None:
    """The backend fires the device-trace hooks: the stream sanitizer reports a read on one stream of what another
    wrote with no wait between, and nothing once the reading stream waits."""
    from pu1_explorer.sanitizer import UNSYNCHRONIZED, SanitizerUnavailable, stream_sanitizer

    try:
        with stream_sanitizer(device) as raced:
            side = torch.Stream(device=device)
            _read_on_another_stream(device, side, ordered=False)
        with stream_sanitizer(device) as ordered:
            _read_on_another_stream(device, side, ordered=True)
    except SanitizerUnavailable as unavailable:
        raise AssertionError(str(unavailable)) from None
    kinds = [race.kind for race in raced.races]
    assert kinds == [UNSYNCHRONIZED], (f"a read on stream {side.stream_id} of what the current stream wrote, with no "
                                       f"wait between, was reported as {kinds or 'no race'}")
    assert ordered.clean, f"the same read after wait_stream was reported: {ordered.races[0].to_text()}"
    heard = sorted(set(raced.trace_events) | set(ordered.trace_events))
    report(f"an unordered read on another stream is reported, the same read after wait_stream is clean; hooks "
           f"heard: {', '.join(heard)}")


@hint("torch.Stream and torch.Event reach the device guard's stream and event functions (getStream, exchangeStream, "
      "record, block, queryEvent, synchronizeEvent, elapsedTime): the interface's defaults raise or do nothing")
def streams_and_events(device: str, imports: Sequence[str] = ()) -> None:
    """A side stream runs work; events record, wait, synchronize, query and time it."""
    s = torch.Stream(device=device)
    assert s.device.type == device, f"torch.Stream(device={device!r}) is on {s.device}"
    start = torch.Event(device=device, enable_timing=True)
    end = torch.Event(device=device, enable_timing=True)
    x = torch.randn(128, 128, device=device)
    previous = torch.accelerator.current_stream()
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream() == s, "set_stream did not make the stream current"
    start.record(s)
    y = x @ x
    end.record(s)
    torch.accelerator.set_stream(previous)
    end.synchronize()
    assert end.query(), "an event reports unfinished work after synchronize()"
    previous.wait_event(end)
    previous.wait_stream(s)
    s.synchronize()
    assert s.query(), "a stream reports unfinished work after synchronize()"
    recorded = s.record_event()
    recorded.synchronize()
    assert recorded.query()
    elapsed = start.elapsed_time(end)
    assert elapsed >= 0, f"elapsed_time is {elapsed}"
    compare(y, x.cpu() @ x.cpu(), "matmul on a side stream")
    report(f"stream {s.stream_id}: record, wait, synchronize, query; {elapsed:.3f} ms between events")


@hint('torch.Generator(device) and manual_seed need PrivateUse1HooksInterface::getDefaultGenerator/getNewGenerator '
      'returning a c10::GeneratorImpl subclass whose get_state/set_state round-trip')
def generator(device: str, imports: Sequence[str] = ()) -> None:
    """Seeds and generator states reproduce the device's random draws."""
    module = _device_module(device)
    g = torch.Generator(device=device)
    assert g.device.type == device, f"torch.Generator(device={device!r}).device is {g.device}"
    g.manual_seed(1234)
    a = torch.randn(1000, device=device, generator=g)
    g.manual_seed(1234)
    b = torch.randn(1000, device=device, generator=g)
    assert torch.equal(a.cpu(), b.cpu()), "the same seed gave different draws"
    c = torch.randn(1000, device=device, generator=g)
    assert not torch.equal(b.cpu(), c.cpu()), "two draws in a row are equal"
    assert abs(a.mean().item()) < 0.2 and 0.8 < a.std().item() < 1.2, "randn does not look standard normal"
    state = g.get_state()
    d = torch.rand(10, device=device, generator=g)
    g.set_state(state)
    compare(torch.rand(10, device=device, generator=g), d.cpu(), "draw after set_state")
    torch.manual_seed(7)
    e = torch.randn(10, device=device)
    torch.manual_seed(7)
    compare(torch.randn(10, device=device), e.cpu(), "draw after torch.manual_seed")
    checked = "Generator seeds and get_state/set_state, torch.manual_seed"
    if module is not None and hasattr(module, "get_rng_state"):
        state = module.get_rng_state()
        f = torch.randn(10, device=device)
        module.set_rng_state(state)
        compare(torch.randn(10, device=device), f.cpu(), f"draw after torch.{device}.set_rng_state")
        checked += f", torch.{device}.get_rng_state/set_rng_state"
    report(checked + " reproduce draws")


@hint('pin_memory() and is_pinned() ask PrivateUse1HooksInterface::getPinnedMemoryAllocator and isPinnedPtr; non-'
      'blocking copies also need _copy_from to honour non_blocking and the stream')
def pinned_memory(device: str, imports: Sequence[str] = ()) -> None:
    """pin_memory() and is_pinned() work, and non-blocking copies to and from pinned memory arrive whole."""
    t = torch.randn(1000)
    assert not t.is_pinned(), "a plain CPU tensor reports pinned"
    p = t.pin_memory()
    assert p.is_pinned(), "pin_memory() returned a tensor that is not pinned"
    assert torch.equal(p, t)
    d = p.to(device, non_blocking=True)
    torch.accelerator.synchronize()
    compare(d, t, "non-blocking copy from pinned memory")
    q = torch.empty(1000, pin_memory=True)
    assert q.is_pinned(), "torch.empty(pin_memory=True) is not pinned"
    q.copy_(d, non_blocking=True)
    torch.accelerator.synchronize()
    assert torch.equal(q, t), "non-blocking copy back into pinned memory differs"
    report("pin_memory(), is_pinned() and non-blocking copies both ways")


@hint("a layer's gradient that raises or differs usually lacks a backward kernel the fallback cannot serve "
      '(convolution_backward_overrideable beside convolution_overrideable, native_layer_norm_backward) or has an '
      'AutogradPrivateUse1 kernel that disagrees with the CPU')
def autograd_on_layers(device: str, imports: Sequence[str] = ()) -> None:
    """Linear, Conv2d, LayerNorm and Embedding: outputs and gradients on the device match the CPU's."""
    torch.manual_seed(0)
    checked = 0

    def check(name: str, layer: torch.nn.Module, inputs: list[torch.Tensor]) -> None:
        nonlocal checked
        on_device = copy.deepcopy(layer).to(device)
        device_inputs = [i.detach().to(device).requires_grad_(i.requires_grad) for i in inputs]
        expected, actual = layer(*inputs), on_device(*device_inputs)
        compare(actual, expected, f"{name} forward")
        grad = torch.randn_like(expected)
        expected.backward(grad)
        actual.backward(grad.to(device))
        for (parameter, p), (_, q) in zip(layer.named_parameters(), on_device.named_parameters()):
            compare(q.grad, p.grad, f"{name} gradient of {parameter}")
            checked += 1
        for index, (cpu_input, device_input) in enumerate(zip(inputs, device_inputs)):
            if cpu_input.requires_grad:
                compare(device_input.grad, cpu_input.grad, f"{name} gradient of input {index}")
                checked += 1

    check("Linear", torch.nn.Linear(16, 8), [torch.randn(4, 16, requires_grad=True)])
    check("Conv2d", torch.nn.Conv2d(3, 4, 3, padding=1), [torch.randn(2, 3, 8, 8, requires_grad=True)])
    check("LayerNorm", torch.nn.LayerNorm(16), [torch.randn(4, 16, requires_grad=True)])
    check("Embedding", torch.nn.Embedding(10, 6), [torch.tensor([[1, 2, 3], [3, 9, 0]])])
    report(f"Linear, Conv2d, LayerNorm, Embedding: outputs and {checked} gradients match the CPU",
           gradients=checked)


@hint('torch.autocast(device) needs kernels or a fallthrough on the AutocastPrivateUse1 key and, on torch.<device>, '
      'get_amp_supported_dtype, is_autocast_enabled, set_autocast_enabled, get_autocast_dtype and set_autocast_dtype')
def autocast(device: str, imports: Sequence[str] = ()) -> None:
    """torch.autocast on the device: supported lower precisions, matmul and linear follow its dtype."""
    module = _device_module(device)
    assert torch.amp.is_autocast_available(device), f"torch.amp.is_autocast_available({device!r}) is False"
    assert module is not None and hasattr(module, "get_amp_supported_dtype"), \
        f"torch.{device}.get_amp_supported_dtype is missing"
    supported = module.get_amp_supported_dtype()
    lower = [dt for dt in supported if dt in (torch.float16, torch.bfloat16)]
    assert lower, f"get_amp_supported_dtype() lists no lower precision: {supported}"
    a, b = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    assert (a @ b).dtype == torch.float32
    for dt in lower:
        with torch.autocast(device, dtype=dt):
            assert torch.is_autocast_enabled(device), "is_autocast_enabled is False inside autocast"
            assert torch.get_autocast_dtype(device) == dt
            y = a @ b
            z = torch.nn.functional.linear(a, b)
        assert y.dtype == dt, f"a matmul under autocast({device}, {dt}) gives {y.dtype}"
        assert z.dtype == dt, f"linear under autocast({device}, {dt}) gives {z.dtype}"
        compare(y.float(), a.cpu() @ b.cpu(), f"matmul in {dt}", rtol=2e-2, atol=1e-1)
    with torch.autocast(device):
        default = torch.get_autocast_dtype(device)
        assert (a @ b).dtype == default, f"matmul under autocast({device}) is not in the default {default}"
    assert (a @ b).dtype == torch.float32, "autocast stayed on after the block"
    report(f"supported {[str(dt) for dt in supported]}; matmul and linear follow autocast's dtype "
           f"(default {default})")


@hint('torch.save copies each storage to the CPU and torch.load copies it back by the location tag (the PrivateUse1 '
      'name): storages need real data pointers and _copy_from both ways, on the device index saved')
def serialization(device: str, imports: Sequence[str] = ()) -> None:
    """torch.save/torch.load keep device, values and shared storage; map_location and state_dicts work."""
    x = torch.randn(5, 3, device=f"{device}:0")
    saved = {"x": x, "view": x[1:3]}
    if torch.accelerator.device_count() >= 2:
        saved["y"] = torch.arange(4.0, device=f"{device}:1")
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["x"].device == x.device, f"a tensor saved on {x.device} loads on {loaded['x'].device}"
    compare(loaded["x"], x.cpu(), "loaded values")
    compare(loaded["view"], x[1:3].cpu(), "loaded view")
    shared = loaded["view"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    assert shared, "a view and its base no longer share storage after loading"
    if "y" in saved:
        assert loaded["y"].device == torch.device(device, 1), f"a tensor saved on :1 loads on {loaded['y'].device}"
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["x"].device.type == "cpu", "map_location='cpu' did not load on the CPU"
    assert torch.equal(on_cpu["x"], x.cpu())
    layer = torch.nn.Linear(4, 2).to(device)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)
    assert all(t.device.type == device for t in state.values()), "a state_dict did not load on the device"
    other = torch.nn.Linear(4, 2).to(device)
    other.load_state_dict(state)
    inputs = torch.randn(3, 4, device=device)
    compare(other(inputs), layer(inputs).cpu(), "a layer loaded from a state_dict")
    report("torch.save/torch.load keep device, values and shared storage; map_location='cpu'; state_dict")


@hint('`import torch` loads only the backends declared in the entry point group torch.backends (a function that '
      'registers the device), and none when TORCH_DEVICE_BACKEND_AUTOLOAD=0')
def autoload(device: str, imports: Sequence[str] = ()) -> None:
    """A fresh `import torch` alone registers the device (run without the backend's `imports`)."""
    name = torch.device("privateuseone").type
    if name != device:
        reason = f"a fresh `import torch` alone does not register {device!r} (PrivateUse1 is still {name!r})"
        if os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
            reason += "; TORCH_DEVICE_BACKEND_AUTOLOAD=0 is set"
        if imports:
            reason += f"; the backend needs `import {', '.join(imports)}`"
        raise AssertionError(reason)
    assert hasattr(torch, device), f"PrivateUse1 is named {device!r} but torch.{device} is missing"
    assert torch.ones(2, device=device).device.type == device
    entry_points = [ep.value for ep in importlib.metadata.entry_points(group="torch.backends")]
    names = ", ".join(entry_points) or "none"
    report(f"`import torch` registers {device!r} (entry points in torch.backends: {names})")


@hint('scaled_dot_product_attention asks _fused_sdp_choice for a kernel on PrivateUse1: register it (choosing the '
      'math path) or _scaled_dot_product_fused_attention_overrideable with its backward; the fallback cannot make '
      'that choice')
def attention(device: str, imports: Sequence[str] = ()) -> None:
    """scaled_dot_product_attention forward and backward match the CPU, causal or not."""
    functional = torch.nn.functional
    torch.manual_seed(0)
    for causal in (False, True):
        q, k, v = (torch.randn(2, 3, 8, 16, requires_grad=True) for _ in range(3))
        qd, kd, vd = (t.detach().to(device).requires_grad_() for t in (q, k, v))
        expected = functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        actual = functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
        compare(actual, expected, f"forward (is_causal={causal})")
        grad = torch.randn_like(expected)
        expected.backward(grad)
        actual.backward(grad.to(device))
        for name, cpu_t, device_t in (("q", q, qd), ("k", k, kd), ("v", v, vd)):
            compare(device_t.grad, cpu_t.grad, f"gradient of {name} (is_causal={causal})")
    report("scaled_dot_product_attention forward and backward match the CPU, causal or not")


@hint('nn.LSTM and nn.GRU call fused cell kernels (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backward) on'
      ' a device that is not the CPU: register them, the fallback does not reach them')
def rnns(device: str, imports: Sequence[str] = ()) -> None:
    """nn.LSTM and nn.GRU (2 layers) forward and backward match the CPU."""
    torch.manual_seed(0)
    for kind in (torch.nn.LSTM, torch.nn.GRU):
        layer = kind(8, 16, num_layers=2, batch_first=True)
        on_device = copy.deepcopy(layer).to(device)
        x = torch.randn(3, 5, 8, requires_grad=True)
        xd = x.detach().to(device).requires_grad_()
        out, _ = layer(x)
        out_d, _ = on_device(xd)
        compare(out_d, out, f"{kind.__name__} forward")
        out.pow(2).sum().backward()
        out_d.pow(2).sum().backward()
        compare(xd.grad, x.grad, f"{kind.__name__} gradient of the input")
        for (name, p), (_, q) in zip(layer.named_parameters(), on_device.named_parameters()):
            compare(q.grad, p.grad, f"{kind.__name__} gradient of {name}")
    report("nn.LSTM and nn.GRU (2 layers) forward and backward match the CPU")


@hint('profile(activities=[..., ProfilerActivity.PrivateUse1]) reads device events from an activity profiler '
      'registered for PrivateUse1 with kineto (PrivateUse1ProfilerRegistry); the legacy profiler needs stubs '
      '(torch::profiler::impl::registerPrivateUse1Methods) that time operators with device events')
def profiler(device: str, imports: Sequence[str] = ()) -> None:
    """The profiler records device events (DeviceType.PrivateUse1) with non-negative device times."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64, device=device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(3):
            x = (x @ x).tanh()
        torch.accelerator.synchronize()
    events = prof.events()
    on_device = [e for e in events if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert on_device, f"none of the {len(events)} profiler events is on the device (DeviceType.PrivateUse1)"
    negative = [e.name for e in on_device if e.device_time_total < 0]
    assert not negative, f"negative device times: {negative[:3]}"
    names = sorted({e.name for e in on_device})
    report(f"{len(on_device)} device events ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})",
           device_events=len(on_device))


def _compiled_example(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * y + y.relu().sum(dim=0)


@hint('Inductor needs the device registered: a device interface (register_interface_for_device), device op overrides '
      '(register_device_op_overrides) and a scheduling/wrapper codegen (register_backend_for_device)')
def torch_compile(device: str, imports: Sequence[str] = ()) -> None:
    """torch.compile (the default backend) gives eager's result on the device."""
    compiled = torch.compile(_compiled_example)
    for n in (8, 8):
        x, y = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        out = compiled(x, y)
        assert out.device.type == device, f"the compiled function returned a tensor on {out.device}"
        compare(out, _compiled_example(x, y).cpu(), "compiled against eager")
    report("torch.compile (default backend) gives eager's result on the device")


@hint('init_process_group finds a c10d backend per device: register one for the device '
      '(torch.distributed.Backend.register_backend(..., devices=[name])) that runs all_reduce and all_gather on its '
      'tensors')
def distributed(device: str, imports: Sequence[str] = ()) -> None:
    """A one-rank process group with the device's default backend all_reduces and all_gathers."""
    import torch.distributed as dist

    if not dist.is_available():
        skip("torch.distributed is not available in this build")
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    try:
        config = dist.get_backend_config()
        backend = next((part.split(":", 1)[1] for part in config.split(",") if part.startswith(device + ":")),
                       config)
        t = torch.arange(4.0, device=device)
        dist.all_reduce(t)
        assert t.device.type == device
        compare(t, torch.arange(4.0), "all_reduce on one rank")
        gathered = [torch.empty(4, device=device)]
        dist.all_gather(gathered, t)
        compare(gathered[0], torch.arange(4.0), "all_gather on one rank")
    finally:
        dist.destroy_process_group()
    report(f"a 1-rank group with the default backend ({backend} for {device}) all_reduces and all_gathers")


@hint('torch.accelerator.Graph needs an at::GraphImplInterface registered (REGISTER_GRAPH_IMPL) under the renamed '
      'backend\'s name in capitals, as c10::DeviceTypeName(PrivateUse1, false) spells it; capture records the '
      'capturing stream\'s kernels, replay reruns them in place')
def graph_capture(device: str, imports: Sequence[str] = ()) -> None:
    """A few ops captured on a side stream with torch.accelerator.Graph replay on new input in the same memory."""
    torch.manual_seed(0)
    static_input = torch.randn(16, 16, device=device)
    weight = torch.randn(16, 16, device=device)
    total = torch.zeros(16, 16, device=device)
    side = torch.Stream(device=device)
    graph = torch.accelerator.Graph()  # a backend without graphs fails here, with PyTorch's own sentence
    with side:
        for _ in range(2):  # warm-up on the side stream, as a capture needs
            static_output = (static_input @ weight).relu() * 2 + 1
        with graph:
            static_output = (static_input @ weight).relu() * 2 + 1
            total.add_(static_output)
    side.synchronize()
    address = static_output.data_ptr()
    before = total.cpu()  # whatever capture left there: CUDA runs nothing until the replay
    replays = 3
    for replay in range(replays):
        fresh = torch.randn(16, 16)
        static_input.copy_(fresh)
        graph.replay()
        torch.accelerator.synchronize()
        assert static_output.data_ptr() == address, "the graph's output moved to other memory at replay"
        compare(static_output, (fresh @ weight.cpu()).relu() * 2 + 1, f"output of replay {replay + 1}")
        before = before + static_output.cpu()
    compare(total, before, f"an in-place sum over {replays} replays")
    pool = graph.pool()
    report(f"captured 5 ops on stream {side.stream_id}; {replays} replays on new input match the CPU in the same "
           f"memory; pool {tuple(pool)}")
