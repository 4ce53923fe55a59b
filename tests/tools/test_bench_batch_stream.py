"""The batch_stream scenario's figures and table (loadtest/bench/stream_runs.py,
loadtest/bench/scenarios/batch_stream.py), on made-up line times and outputs; and a followed run of a
small script that writes lines, so that the follower's timing and its SIGINT are checked for real."""

from __future__ import annotations

import json
import os
import sys
import textwrap

from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.scenarios import batch_stream as scenario
from loadtest.bench.stream_runs import (
    Followed,
    drill_figures,
    duplicates_and_gaps,
    follow,
    fraction_time,
    line_figures,
    output_lines,
    summary_figures,
    written_by,
)


def test_a_runs_figures_are_its_first_and_last_lines_and_when_a_quarter_and_half_were_out():
    figures = line_figures(8, Followed(line_times_s=[1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 9.0], command_s=10))
    assert figures["first_line_s"] == 1.0 and figures["last_line_s"] == 9.0 and figures["spread_s"] == 8.0
    assert figures["quarter_out_s"] == 1.0 and figures["half_out_s"] == 3.0
    assert figures["lines"] == 8 and figures["line_times"]["median"] == 3.0


def test_a_run_that_wrote_nothing_has_no_times():
    figures = line_figures(4, Followed())
    assert figures["first_line_s"] is None and figures["half_out_s"] is None and figures["line_times"] is None


def test_lines_out_by_a_time_count_every_line_up_to_it():
    assert written_by([1.0, 2.0, 2.0, 5.0], 2.0) == 3
    assert written_by([1.0, 2.0], 0.5) == 0


def test_duplicates_and_gaps_of_an_output():
    assert duplicates_and_gaps([1, 2, 3], 3) == {"duplicates": 0, "gaps": 0}
    assert duplicates_and_gaps([1, 1, 3, 3, 3], 4) == {"duplicates": 3, "gaps": 2}


def test_a_drill_counts_the_rows_answered_by_the_ctrl_c_that_the_output_did_not_keep():
    interrupted = Followed(line_times_s=[1.0, 2.0], returncode=130, interrupted_at_s=3.0)
    figures = drill_figures(
        fraction=0.5,
        rows=5,
        interrupted=interrupted,
        rerun=Followed(line_times_s=[0.5, 0.6, 0.7], returncode=0),
        answered=[1, 2, 3, 4, 5],
        answered_times=[1.0, 1.5, 2.5, 4.0, 6.0],
        in_flight=16,
    )
    # the interrupted run's first line came when the full run's did: no shift
    assert figures["answered_by_then"] == 3 and figures["lost"] == 1 and figures["lines_at_ctrl_c"] == 2
    assert figures["lines_kept"] == 2 and figures["rerun_lines"] == 3
    assert figures["duplicates"] == 0 and figures["gaps"] == 0


def test_a_drill_lines_the_full_run_up_with_the_interrupted_one_by_their_first_lines():
    # Started 2 s late, the interrupted run had answered by 4.5 s what the full run had by 2.5 s.
    late = Followed(line_times_s=[3.0, 4.0, 5.0], returncode=130, interrupted_at_s=4.5)
    figures = drill_figures(
        fraction=0.5,
        rows=5,
        interrupted=late,
        rerun=Followed(line_times_s=[0.5, 0.6], returncode=0),
        answered=[1, 2, 3, 4, 5],
        answered_times=[1.0, 1.5, 2.5, 4.0, 6.0],
        in_flight=16,
    )
    assert figures["full_run_shift_s"] == 2.0 and figures["lines_at_ctrl_c"] == 2
    assert figures["answered_by_then"] == 3 and figures["lost"] == 0  # the line after the Ctrl-C kept
    unshifted = written_by([1.0, 1.5, 2.5, 4.0, 6.0], 4.5)
    assert unshifted == 4  # what the unaligned reading would have claimed answered


def test_a_share_of_the_rows_is_timed_by_the_full_runs_lines():
    assert fraction_time([3.0, 1.0, 2.0, 4.0], 4, 0.25) == 1.0
    assert fraction_time([3.0, 1.0, 2.0, 4.0], 4, 0.9) == 4.0
    assert fraction_time([1.0, 2.0], 4, 0.9) == 2.0  # fewer lines than rows: the last one


def test_output_lines_are_the_records_input_lines(tmp_path):
    path = tmp_path / "mai.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{n}", "line": n}) + "\n" for n in (2, 1)))
    assert output_lines(path) == [2, 1]


def test_the_follower_times_each_line_as_it_appears_and_interrupts_with_sigint(tmp_path):
    output = tmp_path / "out.jsonl"
    script = tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            with open({str(output)!r}, "a") as out:
                try:
                    for n in range(100):
                        out.write('{{"line": %d}}\\n' % n); out.flush(); time.sleep(0.2)
                except KeyboardInterrupt:
                    sys.exit(130)
            """
        )
    )
    followed = follow(
        [sys.executable, str(script)], cwd=tmp_path, env=os.environ, output=output, interrupt_at_s=1.0
    )
    assert followed.returncode == 130 and followed.interrupted_at_s is not None
    assert 3 <= len(followed.line_times_s) <= 8  # about one line each 0.2 s, until the SIGINT at 1 s
    assert followed.line_times_s == sorted(followed.line_times_s) and followed.line_times_s[-1] < 2.0


def test_the_table_renders_a_result():
    run = {
        "code": "after",
        "repeat": 0,
        "rows": 240,
        "first_line_s": 12.0,
        "quarter_out_s": 14.0,
        "half_out_s": 17.0,
        "last_line_s": 26.0,
        "spread_s": 14.0,
        "command_s": 30.0,
        "summary_line_delay_s": {"median": 0.1, "max": 0.3},
        "summary_actor_starts": [{"process_s": 2.0, "replica_s": 7.5, "total_s": 11.0}],
    }
    drill = {
        "code": "after",
        "fraction": 0.5,
        "interrupted_at_s": 15.0,
        "lines_at_ctrl_c": 38,
        "lines_kept": 40,
        "answered_by_then": 45,
        "lost": 5,
        "rows_in_flight": 16,
        "rerun_lines": 200,
        "duplicates": 0,
        "gaps": 0,
    }
    result = {"config": "configs/mai-cpu.yaml", "before_commit": "b" * 40, "runs": [run], "drills": [drill]}
    text = "\n".join(scenario.table(result | {"plot": "bench/results/batch-stream.png"}))
    assert "| after | 240 | 12.0 | 14.0 | 17.0 | 26.0 | 14.0 | 0.10 / 0.30 | 30.0 |" in text
    assert "| after | 50% (15.0 s) | 38 | 40 | 45 | 5 | 16 | 200 | 0 | 0 |" in text
    assert "results/batch-stream.png" in text and "| 2.00 | – | – | 7.50 | – | 11.00 |" in text
    assert SCENARIOS["batch_stream"].result == "batch-stream.json"


def test_a_runs_summary_figures_are_the_keys_it_has_and_none_without_a_summary(tmp_path):
    path = tmp_path / "summary.json"
    assert summary_figures(path, ("rows",)) == {}  # an interrupted run wrote none
    path.write_text(json.dumps({"rows": 240, "wall_s": 20.5, "errors": 0}))
    assert summary_figures(path, ("rows", "errors", "retried")) == {"summary_rows": 240, "summary_errors": 0}
