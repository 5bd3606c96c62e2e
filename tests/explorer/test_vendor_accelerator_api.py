"""The generated backend (`pu1-explorer new mydev`) through every public function of torch.accelerator: the
scenarios that tests/backend/test_accelerator_api.py runs on sim, each in a fresh process importing torch_mydev."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch

from tests.backend.accelerator_calls import SCENARIOS
from tests.backend.test_accelerator_api import (assert_passed, pytorchs_binary_cross_entropy_refusal,
                                                pytorchs_out_of_range_sentence, run_scenario)
from tests.backend.test_streams_events import pytorchs_sentence
from tests.conftest import run_forked
from tests.explorer.test_new_backend import vendor_backend  # noqa: F401  (the run's one build of mydev)
from tests.vendor_backend import DEVICE


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_generated_backend_answers_or_raises_pytorchs_error(vendor_backend, name):  # noqa: F811
    assert_passed(run_scenario(name, f"torch_{DEVICE}", environment=vendor_backend))


def run_on_the_generated_backend(code: str, environment: dict[str, str]) -> dict:
    """Run `code` (which prints one JSON line last) in a fresh process that imports torch_mydev."""
    program = f"import json, warnings, torch, torch_{DEVICE}\n" + textwrap.dedent(code)
    result = run_forked(["-c", program], **environment)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_generated_backend_reports_the_dtypes_its_device_holds(vendor_backend):  # noqa: F811
    """Its guard answers get_device_capability: every dtype its host-computed operators take, no quantized one."""
    out = run_on_the_generated_backend(f"""
        forms = [None, 1, "{DEVICE}:1", torch.device("{DEVICE}", 1)]
        answers = [sorted(map(str, torch.accelerator.get_device_capability(form)["supported_dtypes"]))
                   for form in forms]
        try:
            torch.accelerator.get_device_capability(9)
            refusal = ""
        except RuntimeError as error:
            refusal = str(error)
        print(json.dumps({{"same": all(answer == answers[0] for answer in answers), "dtypes": answers[0],
                          "refusal": refusal}}))
    """, vendor_backend)
    assert out["same"], out
    assert {"torch.float32", "torch.float64", "torch.float16", "torch.bfloat16", "torch.int64", "torch.bool",
            "torch.complex64"} <= set(out["dtypes"]), out
    assert not {"torch.qint8", "torch.quint8", "torch.qint32"} & set(out["dtypes"]), out
    assert out["refusal"].startswith(pytorchs_out_of_range_sentence() + "2), but got 9."), out


def test_the_generated_backend_refuses_binary_cross_entropy_under_autocast(vendor_backend):  # noqa: F811
    """In PyTorch's words first, as CUDA and sim do."""
    probabilities, targets = torch.rand(8), torch.rand(8)
    expected = pytorchs_binary_cross_entropy_refusal(probabilities, targets)
    out = run_on_the_generated_backend(f"""
        with torch.autocast("{DEVICE}", dtype=torch.float16):
            try:
                probabilities, targets = torch.rand(8, device="{DEVICE}"), torch.rand(8, device="{DEVICE}")
                torch.nn.functional.binary_cross_entropy(probabilities, targets)
                refusal = ""
            except RuntimeError as error:
                refusal = str(error)
        print(json.dumps({{"refusal": refusal}}))
    """, vendor_backend)
    assert "unsafe to autocast" in expected and out["refusal"].startswith(expected), out
    assert f"{DEVICE} refuses it under autocast as CUDA does" in out["refusal"][len(expected):], out


def test_the_generated_backend_warns_and_disables_autocast_for_an_unsupported_dtype(vendor_backend):  # noqa: F811
    out = run_on_the_generated_backend(f"""
        x = torch.randn(4, 4, device="{DEVICE}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast("{DEVICE}", dtype=torch.float32):
                enabled, dtype = torch.is_autocast_enabled("{DEVICE}"), str((x @ x).dtype)
        print(json.dumps({{"enabled": enabled, "dtype": dtype, "warnings": [str(w.message) for w in caught]}}))
    """, vendor_backend)
    assert not out["enabled"] and out["dtype"] == "torch.float32", out
    assert any("the target dtype is not supported. Disabling autocast." in w for w in out["warnings"]), out


def test_the_generated_backend_times_only_events_created_with_timing(vendor_backend):  # noqa: F811
    """As on CUDA: elapsed_time() refuses events created without enable_timing=True, and unrecorded ones."""
    out = run_on_the_generated_backend(f"""
        def refusal(timing, record_both):
            start, end = (torch.Event(device="{DEVICE}", enable_timing=timing) for _ in range(2))
            start.record()
            if record_both:
                end.record()
                end.synchronize()  # the device is asynchronous: only completed events can be timed
            try:
                return start.elapsed_time(end)
            except ValueError as error:
                return str(error)
        print(json.dumps({{"untimed": refusal(False, True), "unrecorded": refusal(True, False),
                          "timed": refusal(True, True)}}))
    """, vendor_backend)
    assert out["untimed"].startswith(pytorchs_sentence("c10/cuda/CUDAEvent.h", "Both events must be created")), out
    assert out["unrecorded"].startswith(pytorchs_sentence("c10/cuda/CUDAEvent.h", "Both events must be recorded")), out
    assert isinstance(out["timed"], float) and out["timed"] >= 0, out
