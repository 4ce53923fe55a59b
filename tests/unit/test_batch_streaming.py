"""mai-batch's lines as rows finish (batch/row_stream.py, batch/answerer.py's ``__call__``,
batch/delivery.py), without Ray: a batch hands on a row the moment it is answered, never waiting for a
slower row of its batch; the driver writes each row's line once, as it comes, and counts it."""

import asyncio
import concurrent.futures
import json
import threading
from types import SimpleNamespace

import pytest

from batch.actor_start import StartClock
from batch.answerer import RowAnswerer, RowJob
from batch.delivery import Delivery, quantiles
from batch.inputs import InputFormat
from batch.outputs import LineWriter
from batch.packing import packed, unpacked
from batch.row_stream import EventLoopThread, finished
from batch.tally import Tally

WAIT_S = 10.0  # far past any row here: only a row held back for a slower one ever waits this long


def test_finished_futures_come_as_they_finish_not_in_order():
    slow, fast = concurrent.futures.Future(), concurrent.futures.Future()
    groups = finished([slow, fast])
    fast.set_result("fast")
    assert next(groups) == [(1, "fast")]
    slow.set_result("slow")
    assert next(groups) == [(0, "slow")]
    with pytest.raises(StopIteration):
        next(groups)


def test_futures_done_together_come_as_one_group_in_index_order():
    futures = [concurrent.futures.Future() for _ in range(3)]
    for index, future in enumerate(futures):
        future.set_result(index)
    assert list(finished(futures)) == [[(0, 0), (1, 1), (2, 2)]]


def test_futures_done_within_the_gathering_window_join_the_first_ones_group():
    first, soon, late = (concurrent.futures.Future() for _ in range(3))
    first.set_result("first")
    threading.Timer(0.05, soon.set_result, ["soon"]).start()
    threading.Timer(2.0, late.set_result, ["late"]).start()
    groups = finished([first, soon, late], gather_s=0.5)
    assert next(groups) == [(0, "first"), (1, "soon")]  # soon came 0.05 s after: same group
    assert next(groups) == [(2, "late")]  # late came long after: a group of its own


def test_closing_the_groups_early_cancels_the_rows_still_running():
    loop = EventLoopThread()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def quick() -> str:
        return "done"

    running = loop.submit(forever())
    groups = finished([running, loop.submit(quick())])
    assert next(groups) == [(1, "done")]
    assert started.wait(WAIT_S)
    groups.close()
    with pytest.raises(concurrent.futures.CancelledError):
        running.result(WAIT_S)


class ScriptedAnswerer(RowAnswerer):
    """The actor with its rows scripted: line 1 waits until the test lets it go; the others answer at once."""

    def __init__(self, rows_per_actor: int = 4):  # no Ray: a RowAnswerer's state, set by hand
        self.job = RowJob(fmt=InputFormat.OPENAI, base=".", rows_per_actor=rows_per_actor)
        self.config = SimpleNamespace()
        self.node, self.ingress, self._slots = "node-a", None, None
        self.clock = StartClock()
        self.begin()
        self.release = threading.Event()
        self.in_flight = 0
        self.most_in_flight = 0

    def _replica(self):
        return object()

    async def answer(self, line, text):  # holds a slot while it runs, as the real one does
        async with self._slots:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                if line == 1:
                    while not self.release.is_set():
                        await asyncio.sleep(0.01)
                await asyncio.sleep(0.01)
            finally:
                self.in_flight -= 1
        outcome = {"status": 200, "route": "agree_short", "tokens": {}, "attempts": 1}
        return {"id": f"batch_req_{line}", "text": text}, outcome


def batch_of(lines: list[int]) -> dict:
    return {"line": lines, "text": [f"row {line}" for line in lines], "size": [5] * len(lines)}


def next_group(groups, timeout_s: float = WAIT_S) -> dict:
    """The generator's next group, or a failure if it does not come within ``timeout_s``."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        group = pool.submit(next, groups).result(timeout_s)
    assert all(len(values) == 1 for values in group.values())  # one packed row (batch/packing.py)
    return unpacked(group)


def test_a_batch_yields_its_fast_rows_while_a_slow_one_is_still_running():
    answerer = ScriptedAnswerer()
    groups = answerer(batch_of([1, 2, 3]))
    arrived: list[int] = []
    while len(arrived) < 2:  # lines 2 and 3, with line 1 still held
        arrived += next_group(groups)["line"]
    assert sorted(arrived) == [2, 3] and not answerer.release.is_set()
    answerer.release.set()
    last = next_group(groups)
    assert last["line"] == [1] and json.loads(last["output"][0]) == {"id": "batch_req_1", "text": "row 1"}
    assert last["status"] == [200] and last["node"] == ["node-a"] and last["answered_at"][0] > 0


def test_every_row_of_a_batch_is_in_flight_at_once_up_to_the_actors_slots():
    answerer = ScriptedAnswerer(rows_per_actor=2)
    groups = answerer(batch_of([1, 2, 3, 4]))
    seen = next_group(groups)["line"]
    answerer.release.set()
    for group in groups:
        seen += unpacked(group)["line"]
    assert sorted(seen) == [1, 2, 3, 4]
    assert answerer.most_in_flight == 2  # the actor's slots (made on its loop) bound them, not the batch


def test_batches_called_from_several_threads_share_one_loop_and_one_replica():
    answerer = ScriptedAnswerer(rows_per_actor=8)
    answerer.release.set()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda lines: list(answerer(batch_of(lines))), [[1, 2], [3], [4, 5], [6]]))
    lines = sorted(line for groups in results for group in groups for line in unpacked(group)["line"])
    assert lines == [1, 2, 3, 4, 5, 6]
    assert answerer._rows is not None and answerer.ingress is not None


# --- the driver's end -------------------------------------------------------------------------------


def block(lines: list[int], answered_at: float = 100.0, start: str = "") -> dict:
    count = len(lines)
    return {
        "actor_start": [start] + [""] * (count - 1),
        "line": lines,
        "output": [json.dumps({"id": f"batch_req_{line}"}) for line in lines],
        "status": [200] * count,
        "route": ["agree_short"] * count,
        "tokens": [json.dumps({"small": {"prompt": 3}})] * count,
        "attempts": [1] * count,
        "answered_at": [answered_at] * count,
        "node": ["node-a"] * count,
        "peak_rss_mb": [50.0] * count,
    }


def test_each_block_is_written_and_flushed_as_it_comes(tmp_path):
    path = tmp_path / "out.jsonl"
    progress: list[int] = []
    delivery = Delivery(LineWriter(path, InputFormat.OPENAI), Tally(), lambda rows, _: progress.append(rows))
    delivery.take(block([3]))
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["batch_req_3"]
    delivery.take(block([1, 2]))
    assert len(path.read_text().splitlines()) == 3 and progress == [1, 2]
    assert delivery.tally.rows == 3 and delivery.tally.tokens["small"]["prompt"] == 9


def test_a_row_that_comes_twice_is_written_and_counted_once(tmp_path):
    path = tmp_path / "out.jsonl"
    delivery = Delivery(LineWriter(path, InputFormat.OPENAI), Tally())
    delivery.take(block([1, 2]))
    assert delivery.take(block([2, 3])) == 1  # a retried task answered line 2 again
    assert delivery.take(block([1])) == 0
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert ids == ["batch_req_1", "batch_req_2", "batch_req_3"]
    assert delivery.written == {1, 2, 3} and delivery.tally.rows == 3 and delivery.repeated == 2


def test_the_stream_figures_are_the_lines_times_and_their_delay_after_the_answer(tmp_path):
    times = iter([0.0, 1.5, 4.0])  # the start, then each block's write
    delivery = Delivery(
        LineWriter(tmp_path / "out.jsonl", InputFormat.OPENAI),
        Tally(),
        clock=lambda: next(times),
        wall_clock=lambda: 100.25,
    )
    delivery.take(block([1], answered_at=100.0))
    delivery.take(block([2, 3], answered_at=100.25))
    figures = delivery.figures()
    assert figures["first_line_s"] == 1.5
    assert delivery.line_times_s == [1.5, 4.0, 4.0]
    assert figures["line_delay_s"] == {"min": 0.0, "median": 0.0, "p90": 0.25, "max": 0.25}


def test_quantiles_of_nothing_are_none():
    assert quantiles([]) is None


def test_an_actor_reports_its_start_once_with_its_first_rows():
    clock = StartClock()
    for name in ("initialised", "first_batch", "replica_started", "replica"):
        clock.mark(name)
    assert clock.report() == ""  # no row answered yet
    clock.mark("first_row")
    phases = json.loads(clock.report())
    assert set(phases) == {"process_s", "init_s", "to_first_batch_s", "replica_s", "first_row_s", "total_s"}
    assert all(seconds >= 0 for seconds in phases.values())
    assert phases["total_s"] >= phases["replica_s"] + phases["first_row_s"]
    assert clock.report() == ""  # once


def test_the_summary_lists_each_actors_start(tmp_path):
    delivery = Delivery(LineWriter(tmp_path / "out.jsonl", InputFormat.OPENAI), Tally())
    delivery.take(block([1, 2], start=json.dumps({"total_s": 9.5})))
    delivery.take(block([3]))
    assert delivery.figures()["actor_starts"] == [{"total_s": 9.5}]


def test_a_packed_block_of_several_groups_is_written_row_by_row(tmp_path):
    """What the driver gets from Ray Data: blocks whose rows are packed groups (batch/packing.py)."""
    delivery, path = (
        Delivery(LineWriter(tmp_path / "out.jsonl", InputFormat.OPENAI), Tally()),
        tmp_path / "out.jsonl",
    )
    first, second = packed(block([4, 2])), packed(block([7]))
    assert delivery.take({name: first[name] + second[name] for name in first}) == 3
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == [
        "batch_req_4",
        "batch_req_2",
        "batch_req_7",
    ]
    assert delivery.tally.rows == 3


def test_the_read_packs_each_block_of_lines_into_one_row(tmp_path):
    import pyarrow as pa

    from batch.shards import shards_of
    from batch.source import NumberedLines

    path = tmp_path / "in.jsonl"
    path.write_text("a\n\nb\nc\nd\n")
    source = NumberedLines(shards_of(str(path)), skip=frozenset({4}), rows_per_block=2)
    tables = list(source._read_stream(pa.BufferReader(path.read_bytes()), str(path)))
    assert [table.num_rows for table in tables] == [1, 1]  # two blocks of lines, a packed row each
    rows = [unpacked(table.to_pydict()) for table in tables]
    assert [row["line"] for row in rows] == [[1, 3], [5]]  # blank line 2 and skipped line 4 left out
    assert [row["text"] for row in rows] == [["a", "b"], ["d"]]
