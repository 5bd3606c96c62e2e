"""The stream sanitizer's analysis on recordings written by hand: the cases PyTorch's CUDA sanitizer's own tests
check of its event handler (test/test_cuda_sanitizer.py, TestEventHandler), one by one, and what ours adds
(memory reused without record_stream, operators captured into a graph, one memory for all views)."""
from __future__ import annotations

from pu1_explorer.sanitizer import REUSED, UNSYNCHRONIZED, analyze


class Recording:
    """Builds the recorder's tuples: kernels on streams 1, 2, 3 (stream id = handle) reading and writing memory."""

    def __init__(self) -> None:
        self.records: list[tuple] = []

    def add(self, kind: str, stream: int = 0, first: int = 0, second: int = 0, operator: str = "",
            accesses: list[tuple] = ()) -> "Recording":
        self.records.append((len(self.records), kind, operator, stream, stream, first, second, list(accesses),
                             [("user.py", len(self.records) + 1, "main")], 0, False))
        return self

    def kernel(self, stream: int, read: tuple[int, ...] = (), write: tuple[int, ...] = (),
               operator: str = "aten::op") -> "Recording":
        accesses = [(memory, False, "self", (4,), "Float", 0) for memory in read]
        accesses += [(memory, True, "out", (4,), "Float", 0) for memory in write]
        return self.add("kernel", stream, operator=operator, accesses=accesses)

    def record(self, event: int, stream: int) -> "Recording":
        return self.add("event_record", stream, event, stream)

    def wait(self, event: int, stream: int) -> "Recording":
        return self.add("event_wait", stream, event, stream)

    def report(self):
        return analyze(self.records, "sim")

    def races(self) -> list:
        return self.report().races


def test_accesses_on_one_stream_never_race():
    assert Recording().kernel(1, write=(10,)).kernel(1, read=(10,)).kernel(1, write=(10,)).races() == []


def test_a_read_after_a_write_on_another_stream_races():
    races = Recording().kernel(1, write=(10,)).kernel(2, read=(10,)).races()
    assert len(races) == 1 and races[0].kind == UNSYNCHRONIZED
    assert (races[0].access.kind, races[0].access.stream, races[0].previous.kind, races[0].previous.stream) == \
        ("read", 2, "write", 1)


def test_a_write_after_a_read_and_a_write_after_a_write_race():
    assert len(Recording().kernel(1, read=(10,)).kernel(2, write=(10,)).races()) == 1
    assert len(Recording().kernel(1, write=(10,)).kernel(2, write=(10,)).races()) == 1


def test_reads_on_two_streams_do_not_race():
    assert Recording().kernel(1, read=(10,)).kernel(2, read=(10,)).races() == []


def test_an_event_recorded_after_the_write_and_waited_for_orders_the_read():
    assert Recording().kernel(1, write=(10,)).record(7, 1).wait(7, 2).kernel(2, read=(10,)).races() == []


def test_an_event_recorded_before_the_write_does_not_order_it():
    assert len(Recording().record(7, 1).kernel(1, write=(10,)).wait(7, 2).kernel(2, read=(10,)).races()) == 1


def test_a_wait_orders_only_the_stream_that_waits():
    recording = Recording().kernel(1, write=(10,)).record(7, 1).wait(7, 2).kernel(3, read=(10,))
    assert [race.access.stream for race in recording.races()] == [3]


def test_the_last_record_of_an_event_is_what_a_wait_sees():
    recording = Recording().record(7, 1).kernel(1, write=(10,)).record(7, 1).wait(7, 2).kernel(2, read=(10,))
    assert recording.races() == []


def test_ordering_is_transitive_across_a_chain_of_streams():
    recording = (Recording().kernel(1, write=(10,)).record(7, 1).wait(7, 2).kernel(2, read=(11,)).record(8, 2)
                 .wait(8, 3).kernel(3, read=(10,)))
    assert recording.races() == []


def test_a_write_checks_every_read_since_the_last_write():
    failing = Recording().kernel(1, read=(10,)).kernel(2, read=(10,)).record(7, 1).wait(7, 3).kernel(3, write=(10,))
    assert [race.previous.stream for race in failing.races()] == [2]
    passing = (Recording().kernel(1, read=(10,)).kernel(2, read=(10,)).record(7, 1).record(8, 2).wait(7, 3)
               .wait(8, 3).kernel(3, write=(10,)))
    assert passing.races() == []


def test_each_unordered_access_is_one_race():
    recording = Recording().kernel(1, write=(10, 11)).kernel(2, read=(10, 11))
    assert sorted(race.memory for race in recording.races()) == [10, 11]


def test_stream_event_and_device_synchronisations_order_every_stream_after_them():
    stream = Recording().kernel(1, write=(10,)).add("stream_synchronization", first=1).kernel(2, read=(10,))
    assert stream.races() == []
    event = Recording().kernel(1, write=(10,)).record(7, 1).add("event_synchronization", first=7).kernel(2, read=(10,))
    assert event.races() == []
    device = Recording().kernel(1, write=(10,)).kernel(2, write=(11,)).add("device_synchronization")
    assert device.kernel(3, read=(10, 11)).races() == []


def test_synchronising_another_stream_orders_nothing():
    recording = Recording().kernel(1, write=(10,)).kernel(3, write=(12,)).add("stream_synchronization", first=3)
    assert len(recording.kernel(2, read=(10,)).races()) == 1


def test_a_stream_first_seen_after_a_host_synchronisation_is_ordered_after_it():
    recording = Recording().kernel(1, write=(10,)).add("device_synchronization").kernel(5, read=(10,))
    assert recording.races() == []


def test_new_memory_forgets_the_accesses_to_freed_memory_on_its_owner():
    recording = (Recording().add("memory_allocation", 1, first=10).kernel(1, write=(10,))
                 .add("memory_deallocation", 1, first=10).add("memory_allocation", 2, first=10).kernel(2, write=(10,)))
    assert recording.races() == []


def test_memory_reused_while_another_stream_may_still_use_it_races_unless_record_stream_named_it():
    def recording(record_stream: bool) -> Recording:
        made = Recording().add("memory_allocation", 1, first=10).kernel(1, write=(10,))
        made.record(7, 1).wait(7, 2).kernel(2, read=(10,))
        if record_stream:
            made.add("record_stream", 0, first=10, second=2)
        return made.add("memory_deallocation", 1, first=10).add("memory_allocation", 1, first=10).kernel(1, write=(10,))

    races = recording(record_stream=False).races()
    assert len(races) == 1 and races[0].kind == REUSED and races[0].previous.stream == 2
    assert recording(record_stream=True).races() == []


def test_reuse_after_the_owner_waited_for_the_other_stream_is_safe():
    recording = (Recording().add("memory_allocation", 1, first=10).kernel(1, write=(10,)).record(7, 1).wait(7, 2)
                 .kernel(2, read=(10,)).record(8, 2).wait(8, 1).add("memory_deallocation", 1, first=10)
                 .add("memory_allocation", 1, first=10).kernel(1, write=(10,)))
    assert recording.races() == []


def test_operators_captured_into_a_graph_are_not_accesses_and_are_counted_apart():
    recording = Recording().kernel(1, write=(10,)).add("captured", 2, accesses=[(10, False, "self", (4,), "Float", 0)])
    assert recording.races() == []
    report = recording.report()
    assert (report.captured, report.operators, report.trace_events) == (1, 1, {})
    assert "1 operator call(s) captured into a graph" in report.to_text()


def test_the_race_names_the_user_lines_of_both_accesses():
    race = Recording().kernel(1, write=(10,), operator="aten::mul").kernel(2, read=(10,), operator="aten::add").races()[0]
    assert (race.previous.operator, race.previous.user_line.line) == ("aten::mul", 1)
    assert (race.access.operator, race.access.user_line.line) == ("aten::add", 2)
    assert 'File "user.py", line 2, in main' in race.to_text() and "stream 2 reads" in race.to_text()


def recorded_accesses(work) -> list[tuple[str, list[tuple[str, bool]]]]:
    """(operator, [(argument, written), ...]) of each kernel record the native recorder makes while `work` runs."""
    import torch  # noqa: F401  (the backend autoloads with torch)

    from pu1_explorer.boxed import native_helper

    recorder = native_helper().AccessRecorder()
    recorder.start()
    try:
        work()
    finally:
        recorder.stop()
    return [(record[2], [(access[2], access[1]) for access in record[7]])
            for record in recorder.take() if record[1] == "kernel"]


def test_the_recorder_reads_inputs_and_writes_outputs_as_the_schema_says():
    """PyTorch's CUDA sanitizer's argument cases (TestArgumentHandler: add, in place, out=, a view, factories)."""
    import torch

    a, b, c = (torch.ones(4, device="sim") for _ in range(3))
    assert recorded_accesses(lambda: torch.add(a, b)) == [("aten::add.Tensor", [("self", False), ("other", False)]),
                                                         ("aten::add.Tensor", [("result", True)])]
    assert recorded_accesses(lambda: a.add_(b)) == [("aten::add_.Tensor", [("self", True), ("other", False)])]
    assert recorded_accesses(lambda: torch.add(a, b, out=c)) == [
        ("aten::add.out", [("self", False), ("other", False), ("out", True)])]
    assert recorded_accesses(lambda: a.view(2, 2)) == []
    assert recorded_accesses(lambda: torch.empty_like(a)) == []
    assert recorded_accesses(lambda: torch.zeros_like(a))[-1] == ("aten::zeros_like", [("result", True)])
    assert recorded_accesses(lambda: torch.ones(3).add(1)) == []  # the CPU's memory is not the backend's
