"""Every C++ file of sim belongs to one step's record, or to the runtime all steps share."""
from collections import Counter
from pathlib import Path

from torch_sim import GUIDE
from torch_sim.steps import CSRC, RUNTIME_CPP, driver_functions


def owners_of_cpp_files(folder: Path = CSRC) -> dict[str, list[str]]:
    """Each .cpp and .h file in `folder` (sim's csrc) -> the records that claim it (a step's name, or "runtime")."""
    owners: dict[str, list[str]] = {path.name: [] for path in folder.iterdir() if path.suffix in (".cpp", ".h")}
    for step in GUIDE:
        for name in step.cpp:
            owners.setdefault(name, []).append(step.name)
    for name in RUNTIME_CPP:
        owners.setdefault(name, []).append("runtime")
    return owners


def test_every_cpp_file_belongs_to_exactly_one_step_or_the_runtime():
    owners = owners_of_cpp_files()
    unowned = sorted(name for name, claimed in owners.items() if not claimed)
    assert not unowned, (f"backend/torch_sim/csrc/ has C++ files no step claims: {', '.join(unowned)}. Add each to the "
                         "`cpp` of the step it implements in backend/torch_sim/steps.py (GUIDE), or to RUNTIME_CPP "
                         "there when every step builds on it")
    shared = {name: claimed for name, claimed in owners.items() if len(claimed) > 1}
    assert not shared, f"C++ files claimed more than once (keep one owner each): {shared}"


def test_every_file_a_record_lists_exists_once():
    listed = [name for step in GUIDE for name in step.cpp] + list(RUNTIME_CPP)
    assert [name for name, count in Counter(listed).items() if count > 1] == []
    missing = [name for name in listed if not (CSRC / name).is_file()]
    assert not missing, f"the records list C++ files that backend/torch_sim/csrc/ does not have: {missing}"


def test_a_step_owns_its_own_file_first_and_the_sources_show_all_of_them():
    for step in GUIDE:
        if (CSRC / f"{step.name}.cpp").is_file():
            assert step.cpp[:1] == (f"{step.name}.cpp",), f"step {step.name}: list {step.name}.cpp first"
        assert [source.path for source in step.sources if source.language == "cpp"] == [
            f"backend/torch_sim/csrc/{name}" for name in step.cpp]
    by_name = {step.name: step for step in GUIDE}
    assert {"operators_direct.cpp", "operators_rnn.cpp"} <= set(by_name["operators"].cpp)
    assert "graphs_capture.cpp" in by_name["graphs"].cpp


def test_a_file_no_record_claims_is_found(tmp_path):
    for name in ["hooks.cpp", "sim.h", "quantized.cpp", "notes.txt"]:
        (tmp_path / name).write_text("// C++\n")
    owners = owners_of_cpp_files(tmp_path)
    assert owners["quantized.cpp"] == [] and owners["hooks.cpp"] == ["hooks"] and owners["sim.h"] == ["runtime"]
    assert "notes.txt" not in owners


def test_a_steps_driver_calls_are_the_driver_functions_its_cpp_calls():
    by_name = {step.name: step for step in GUIDE}
    functions = driver_functions()
    assert {"simMalloc", "simLaunchKernel", "simStreamCreateWithPriority"} <= functions and len(functions) > 30
    assert {"simMalloc", "simFree", "simMallocHost"} <= set(by_name["allocator"].driver_calls)
    assert "simLaunchKernel" in by_name["operators"].driver_calls
    assert {"simStreamCreateWithPriority", "simEventRecord", "simStreamWaitEvent"} <= set(
        by_name["streams_events"].driver_calls)
    for step in GUIDE:
        code = "".join(path.read_text() for path in step.cpp_paths)
        assert all(name in functions and f"{name}(" in code for name in step.driver_calls), step.name
    assert by_name["compile"].driver_calls == ()  # a step in Python only


def test_without_the_drivers_header_a_steps_driver_calls_are_unknown_and_its_page_says_nothing(monkeypatch):
    """An installed generated backend has no driver header beside its package: its records claim no calls."""
    from pu1_explorer.widgets.guide import driver_calls_html
    from torch_sim import steps

    monkeypatch.setattr(steps, "DRIVER_HEADER", None)
    allocator = next(step for step in GUIDE if step.name == "allocator")
    assert allocator.driver_calls is None and driver_calls_html(allocator) == ""
