"""The stream sanitizer (`pu1_explorer.sanitizer`, `pu1-explorer sanitize`) on sim.

Each race it must find is a program in stream_races.py that gives a wrong answer on sim without the
sanitizer; its fix gives the right answer and a clean report. The suite's own multi-stream tests run under
it with no report but the races they write on purpose.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pu1_explorer.boxed import native_helper
from pu1_explorer.sanitizer import REUSED, UNSYNCHRONIZED, SanitizerUnavailable, stream_sanitizer
from tests.conftest import run_explorer
from tests.explorer import stream_races

PROJECT = Path(__file__).resolve().parents[2]
RACES = Path(stream_races.__file__)
HERE = Path(__file__).parent
explorer = functools.partial(run_explorer, cwd=PROJECT)

# race: (its kind, the statement of the access that races, the statement of the earlier access)
EXPECTED = {
    "read_while_another_stream_writes": (UNSYNCHRONIZED, "doubled = x * 2", "x.copy_(ones, non_blocking=True)"),
    "reuse_without_record_stream": (REUSED, "following = torch.zeros(SIZE, device=device)",
                                    "x.copy_(ones, non_blocking=True)"),
    "read_the_result_before_its_stream_finished": (UNSYNCHRONIZED, "return result.sum().item()",
                                                   "result = x * 3"),
    # an operator of the backward pass: the report gives the line of the forward operator it differentiates
    "backward_reads_a_gradient_another_stream_writes": (UNSYNCHRONIZED, "doubled = weight * 2",
                                                        "gradient.copy_(ones, non_blocking=True)"),
}


def line_in(function, statement: str) -> int:
    lines, first = inspect.getsourcelines(function)
    found = [first + index for index, line in enumerate(lines) if line.strip() == statement]
    assert len(found) == 1, f"{statement!r} is not one line of {function.__name__}"
    return found[0]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_race_gives_a_wrong_answer_and_is_found_at_both_lines_and_its_fix_is_right_and_clean(name):
    race, right = stream_races.RACES[name], stream_races.RIGHT_ANSWERS[name]
    assert race("sim", fixed=False) != right, "without the sanitizer the race does not show on sim"
    with stream_sanitizer("sim") as report:
        answer = race("sim", fixed=False)
    assert answer != right
    assert len(report.races) == 1, report.to_text()
    found = report.races[0]
    kind, this_statement, earlier_statement = EXPECTED[name]
    assert found.kind == kind
    assert found.access.user_line.line == line_in(race, this_statement)
    assert found.previous.user_line.line == line_in(race, earlier_statement)
    assert found.access.user_line.file == str(RACES) and found.access.user_line.text == this_statement
    assert found.access.in_backward == name.startswith("backward")
    assert found.access.stream != found.previous.stream and found.access.stream_id != found.previous.stream_id
    assert (found.tensor.shape, found.tensor.dtype, found.tensor.device) == ([stream_races.SIZE], "Float", "sim:0")
    assert found.allocated_at is not None and found.allocated_at.file == str(RACES)
    text = report.to_text()
    assert f'stream_races.py", line {line_in(race, this_statement)}' in text
    assert f'stream_races.py", line {line_in(race, earlier_statement)}' in text
    for _ in range(5):
        with stream_sanitizer("sim") as report:
            answer = race("sim", fixed=True)
        assert answer == right and report.clean, report.to_text()
        assert report.trace_events.get("event_wait", 0) + report.trace_events.get("record_stream", 0) >= 1


def test_the_report_counts_what_it_saw_and_reads_as_json():
    with stream_sanitizer("sim") as report:
        stream_races.read_while_another_stream_writes("sim", fixed=True)
    assert report.clean and report.operators >= 4
    assert {"event_record", "event_wait", "memory_allocation", "device_synchronization"} <= set(report.trace_events)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["device"] == "sim" and data["races"] == []


def test_the_command_exits_1_with_the_report_on_a_race_and_0_on_its_fix(tmp_path):
    raced = explorer("sanitize", str(RACES), "--device", "sim", STREAM_RACE="reuse_without_record_stream")
    assert raced.returncode == 1, raced.stderr
    line = line_in(stream_races.reuse_without_record_stream, "following = torch.zeros(SIZE, device=device)")
    assert "1 race(s)" in raced.stdout and "race 1: memory reused while another stream may still use it" in raced.stdout
    assert f'stream_races.py", line {line}' in raced.stdout
    written = tmp_path / "report.json"
    fixed = explorer("sanitize", str(RACES), "--format", "json", "-o", str(written),
                     STREAM_RACE="reuse_without_record_stream", STREAM_RACE_FIXED="1")
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout == "reuse_without_record_stream: 0.0\n"  # the script's own output
    report = json.loads(written.read_text())
    assert report["races"] == [] and report["finished"] and report["trace_events"]["record_stream"] == 1


def test_a_script_that_raises_still_gets_its_report_and_a_nonzero_exit(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import torch\nx = torch.ones(3, device='sim')\nraise ValueError('the script failed')\n")
    run = explorer("sanitize", str(script))
    assert run.returncode == 1
    assert "0 race(s)" in run.stdout and "the script raised ValueError: the script failed" in run.stdout


@pytest.mark.parametrize("arguments, message", [
    (["sanitize", "no_such_script.py"], "FileNotFoundError: no such script: no_such_script.py"),
    (["sanitize", str(RACES), "--device", "cpu"], "the stream sanitizer is for a PrivateUse1 backend's streams"),
    (["sanitize", str(RACES), "--device", "cuda"], "unknown device 'cuda'"),
])
def test_bad_input_to_the_command_is_one_line(arguments, message):
    run = explorer(*arguments)
    assert run.returncode == 1 and run.stdout == ""
    lines = [line for line in run.stderr.splitlines() if not line.startswith("[pu1-explorer]")]
    assert len(lines) == 1 and message in lines[0], run.stderr


def test_a_backend_without_trace_registries_is_refused_in_one_line_never_reported_clean():
    run = explorer("sanitize", str(RACES), SIM_BRINGUP_STEP="operators")
    assert run.returncode == 1 and run.stdout == ""
    assert ("SanitizerUnavailable: sim does not tell PyTorch about its streams and events: torch.sim._gpu_trace is "
            "missing") in run.stderr


def test_a_backend_whose_registries_never_fire_is_refused_in_one_line():
    run = explorer("sanitize", str(RACES), "--import", str(HERE / "silent_trace_registries.py"))
    assert run.returncode == 1 and run.stdout == ""
    assert "sim has device-trace registries but fired no event-record hook" in run.stderr


def test_one_sanitizer_at_a_time_and_the_first_still_reports():
    with stream_sanitizer("sim") as outer:
        with pytest.raises(RuntimeError, match="another stream sanitizer is recording in this process"):
            with stream_sanitizer("sim"):
                pass
        stream_races.read_the_result_before_its_stream_finished("sim", fixed=False)
    assert len(outer.races) == 1


def test_an_error_a_kernel_raises_keeps_its_type_while_the_trace_hooks_fire():
    """Memory is freed, and the allocator's trace hook runs Python, while the error unwinds: sim keeps the error
    pending across the hook instead of letting PyTorch's interpreter turn it into a SystemError."""
    x = torch.zeros(3, device="sim")
    with stream_sanitizer("sim") as report:
        with pytest.raises(IndexError, match="out of bounds"):
            x[torch.tensor([5], device="sim")]
        with pytest.raises(RuntimeError, match="needs a tensor of one element, got 2 elements"):
            torch._assert_async(torch.ones(2, device="sim"))
    assert report.clean and report.trace_events["memory_deallocation"] >= 1


def test_nothing_is_recorded_or_listened_to_once_the_block_ended():
    recorder = native_helper().AccessRecorder()
    recorder.start()
    torch.ones(4, device="sim").sum().item()
    recorder.stop()
    assert any(record[1] == "kernel" for record in recorder.take())
    with stream_sanitizer("sim"):
        torch.ones(4, device="sim").sum().item()
    stream_races.read_the_result_before_its_stream_finished("sim", fixed=False)
    assert recorder.take() == []
    registries = vars(torch.sim._gpu_trace).values()
    assert [registry.name for registry in registries if registry.callback_list] == []


# Tests that assert the exact interface calls sim's guard receives: the sanitizer's own stream queries add to them.
OBSERVED_INTERFACE = ["tests/backend/test_streams_events.py::"
                      "test_record_stream_tells_the_allocator_and_refuses_a_stream_of_another_device"]
# The race this test writes on purpose, and shows gives a wrong answer on sim.
RACES_ON_PURPOSE = {"tests/backend/test_streams_events.py::"
                    "test_reading_on_another_stream_without_a_wait_races_and_with_the_wait_is_right"}
MULTI_STREAM_TESTS = ["tests/backend/test_streams_events.py", "tests/backend/test_pinned_memory.py",
                      "tests/backend/test_graphs.py", "tests/backend/test_profiler.py"]


def test_the_suites_multi_stream_graph_and_profiler_tests_run_clean_but_for_the_race_written_on_purpose(tmp_path):
    findings = tmp_path / "findings.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                          "tests.explorer.sanitizer_plugin", *MULTI_STREAM_TESTS,
                          *(f"--deselect={test}" for test in OBSERVED_INTERFACE)],
                         capture_output=True, text=True, timeout=900, cwd=PROJECT,
                         env={**os.environ, "SANITIZER_FINDINGS": str(findings)})
    assert run.returncode == 0, run.stdout[-3000:]
    found = json.loads(findings.read_text())
    assert len(found) > 60, "the plugin saw too few tests"
    raced = {test for test, races in found.items() if races}
    unexpected = {test: found[test] for test in raced - RACES_ON_PURPOSE}
    assert not unexpected, "\n\n".join(f"{test}:\n{races[0]}" for test, races in unexpected.items())
    assert raced == RACES_ON_PURPOSE


def test_a_ddp_training_run_on_simccl_is_clean_in_both_ranks():
    from tests.backend.test_distributed import results_of, run_ranks

    for rank, result in enumerate(results_of(run_ranks("sanitized_ddp"))):
        assert result["races"] == [], f"rank {rank}:\n" + "\n\n".join(result["races"])
        assert result["operators"] > 100 and result["trace_events"].get("memory_allocation", 0) > 0


def test_the_timeline_puts_each_call_on_its_stream_and_joins_the_two_accesses_of_each_race():
    from pu1_explorer.widgets import stream_races_figure

    with stream_sanitizer("sim") as report:
        stream_races.read_while_another_stream_writes("sim", fixed=False)
    calls, race = stream_races_figure(report).data
    assert len(calls.x) == report.operators == len(report.calls)
    assert list(calls.y) == [call.stream_name for call in report.calls]
    found = report.races[0]
    assert list(race.y) == [found.previous.stream_name, found.access.stream_name]
    assert race.x[0] < race.x[1] and race.line.color == "#c62828"
    assert "1 race(s)" in stream_races_figure(report).layout.title.text
