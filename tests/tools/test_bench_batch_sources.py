"""The batch_sources scenario's pure parts (loadtest/bench/scenarios/batch_sources.py): the shards it
writes, read back through mai-batch's own reader as a folder, a glob and a ``file://`` URI; the check of
an output written by mai-batch's own line makers (duplicates, gaps, error lines, degraded answers, what
``--retry-errors`` leaves); the answers compared across runs; the kill's trigger, also under a real
followed writer; and the table."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Any

import pytest

from batch.inputs import InputFormat, LineError
from batch.outputs import drop_errors, record_error_line
from batch.source import numbered_lines
from evaluation.predictions import prediction_of
from evaluation.records import EvalRecord
from loadtest.bench.runner import parameters_record
from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.scenarios import batch_sources as scenario
from loadtest.bench.scenarios.batch_sources import (
    KillAt,
    differing_answers,
    kill_line,
    local_path,
    named,
    output_check,
    read_output,
    write_shards,
)
from loadtest.bench.stream_runs import follow

PNG = "data:image/png;base64,iVBORw0KGgo="


def records(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"q{i}",
            "image": PNG,
            "question": "What colour is the shape?",
            "answer": "red",
            "metric": "exact",
        }
        for i in range(1, n + 1)
    ]


def answer_line(
    record: dict[str, Any], line: int, status: int = 200, route: str = "agree_short", text: str = "red"
) -> dict[str, Any]:
    """An output line as mai-batch writes a records row (batch/outputs.record_reply_line's fields)."""
    body: Any = {"choices": [{"message": {"content": text}}], "mai": {"route": route, "trace": {}}}
    if status != 200:
        body = {"error": {"message": "the small model is unavailable", "code": "model_unavailable"}}
    return prediction_of(EvalRecord.model_validate(record), "mai", status, 0.5, body) | {"line": line}


def test_shards_hold_the_records_in_order_and_mai_batch_numbers_them_across_the_shards(tmp_path):
    asked = records(10)
    paths = write_shards(asked, tmp_path / "shards", 4)
    assert [path.name for path in paths] == [f"part-0{n}.jsonl" for n in range(4)]
    assert [len(path.read_text().splitlines()) for path in paths] == [3, 3, 2, 2]
    (tmp_path / "shards" / "notes.txt").write_text("not a shard\n")  # a folder's other files are no input
    for source in scenario.SOURCES:
        data, _ = named(source, tmp_path / "shards", tmp_path / "out")
        read = [(number, json.loads(text)["id"]) for number, text in numbered_lines(data)]
        assert read == [(n, f"q{n}") for n in range(1, 11)], source


def test_more_shards_than_records_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot make 4 blocks"):
        write_shards(records(3), tmp_path, 4)


def test_each_source_names_the_shards_and_its_output_as_a_user_types_them(tmp_path):
    shards, out = tmp_path / "shards", tmp_path / "out dir"
    assert named("folder", shards, out) == (str(shards), str(out))
    assert named("glob", shards, out) == (f"{shards}/*.jsonl", str(out))
    data, uri = named("uri", shards, out)
    assert data == f"file://{shards}" and uri.startswith("file://") and "%20" in uri
    assert local_path(uri) == out and local_path(str(out)) == out  # a URI's output read where it lands
    assert read_output(out / "predictions" / "mai.jsonl") == []  # an upload that never came: no lines


def test_a_whole_output_has_no_duplicate_gap_or_error(tmp_path):
    asked = records(4)
    rows = [answer_line(record, n) for n, record in reversed(list(enumerate(asked, 1)))]
    figures = output_check(rows, [record["id"] for record in asked])
    assert figures["lines"] == figures["answered"] == 4 and figures["error_lines"] == 0
    assert figures["duplicates"] == figures["gaps"] == figures["misnumbered"] == 0
    assert figures["ids_match"] and figures["error_statuses"] == {} and figures["degraded"] == 0


def test_the_check_counts_duplicates_gaps_misnumbered_lines_errors_and_degraded_answers():
    asked = records(6)
    ids = [record["id"] for record in asked]
    rows = [
        answer_line(asked[0], 1),
        answer_line(asked[0], 1),  # the same row twice
        answer_line(asked[1], 3),  # q2's answer under line 3: misnumbered (and line 2 a gap)
        answer_line(asked[3], 4, status=503),
        answer_line(asked[4], 5, route="degraded_large_only"),
        record_error_line(6, "q6", "mai", LineError("invalid record")),  # a 400 line: never retried
    ]
    figures = output_check(rows, ids)
    assert figures["lines"] == 6 and figures["answered"] == 4 and figures["error_lines"] == 2
    assert figures["error_statuses"] == {"400": 1, "503": 1}
    assert figures["retryable"] == 1 and figures["degraded"] == 1
    assert figures["duplicates"] == 1 and figures["gaps"] == 1 and figures["misnumbered"] == 1
    assert not figures["ids_match"]  # q3 has no line
    assert figures["error_messages"] == {"the small model is unavailable": 1, "invalid record": 1}


def test_what_retry_errors_leaves_is_checked_as_whole(tmp_path):
    asked = records(3)
    path = tmp_path / "predictions" / "mai.jsonl"
    path.parent.mkdir()
    first = [answer_line(asked[0], 1), answer_line(asked[1], 2, status=503), answer_line(asked[2], 3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in first))
    ids = [record["id"] for record in asked]
    assert output_check(read_output(path), ids)["retryable"] == 1
    assert drop_errors(path, InputFormat.RECORDS) == {2}  # the rerun's first step ...
    with path.open("a") as out:  # ... then the row's new answer appended
        out.write(json.dumps(answer_line(asked[1], 2)) + "\n")
    final = output_check(read_output(path), ids)
    assert final["error_lines"] == final["duplicates"] == final["gaps"] == 0 and final["ids_match"]


def test_answers_differ_only_where_every_run_answered_and_the_answers_are_not_all_the_same():
    asked = records(3)
    one = [answer_line(asked[0], 1), answer_line(asked[1], 2), answer_line(asked[2], 3)]
    two = [
        answer_line(asked[0], 1),
        answer_line(asked[1], 2, text="blue"),
        answer_line(asked[2], 3, status=503),
    ]
    assert differing_answers([one, two]) == {"answered_in_every_run": 2, "differing": 1}
    assert differing_answers([one, one]) == {"answered_in_every_run": 3, "differing": 0}


def test_the_kill_comes_once_a_share_of_the_lines_is_out():
    assert kill_line(240, 0.25) == 60 and kill_line(241, 0.25) == 61
    assert kill_line(3, 0.25) == 1 and kill_line(0, 0.25) == 1


def test_a_kill_happens_once_and_a_failed_kill_is_noted_not_raised(monkeypatch):
    killed: list[str] = []
    monkeypatch.setattr("loadtest.faults.kill_one", lambda deployment: killed.append(deployment) or "r1")
    kill = KillAt("small:demo-small", lines=3)
    kill(2, 1.0)
    assert killed == [] and kill.at_s is None
    kill(3, 1.5)
    kill(9, 4.0)
    assert killed == ["small:demo-small"] and (kill.killed, kill.at_lines, kill.at_s) == ("r1", 3, 1.5)

    def fails(deployment: str) -> str:
        raise IndexError("no replica")

    monkeypatch.setattr("loadtest.faults.kill_one", fails)
    failed = KillAt("small:demo-small", lines=1)
    failed(1, 0.2)
    assert failed.killed is None and failed.failure == "IndexError: no replica" and failed.at_lines == 1


def test_a_followed_job_is_killed_into_while_it_runs(tmp_path, monkeypatch):
    output, script = tmp_path / "out.jsonl", tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            with open({str(output)!r}, "a") as out:
                for n in range(20):
                    out.write('{{"line": %d}}\\n' % n); out.flush(); time.sleep(0.1)
            """
        )
    )
    monkeypatch.setattr("loadtest.faults.kill_one", lambda deployment: "replica-1")
    kill = KillAt("small:demo-small", lines=kill_line(20, 0.25))
    followed = follow(
        [sys.executable, str(script)], cwd=tmp_path, env=os.environ, output=output, on_lines=kill
    )
    assert followed.returncode == 0 and len(followed.line_times_s) == 20
    assert kill.killed == "replica-1" and kill.at_lines is not None and 5 <= kill.at_lines < 20
    assert kill.at_s is not None and kill.at_s < followed.line_times_s[-1]


def test_the_table_renders_a_result():
    check = output_check([], [])
    source = check | {
        "input": "uri",
        "input_given": "file://<tmp>/shards",
        "output_given": "file://<tmp>/out-uri",
    }
    source |= {"rows": 240, "exit_code": 0, "command_s": 24.5, "lines": 240, "error_statuses": {}}
    first = check | {"exit_code": 0, "command_s": 30.0, "lines": 240, "error_lines": 12, "degraded": 3}
    first |= {"error_statuses": {"503": 12}}
    rerun = check | {"exit_code": 0, "command_s": 11.0, "lines": 240, "rows_retried": 12}
    retry = {
        "rows": 240,
        "attempts": 1,
        "killed": "SERVE_REPLICA::mai#small:demo-small#x",
        "kill_failure": None,
    }
    retry |= {
        "killed_at_lines": 60,
        "killed_at_s": 18.2,
        "recovered_by_s": 41.0,
        "first": first,
        "rerun": rerun,
    }
    result = {
        "config": "configs/mai-cpu.yaml",
        "sources": [source],
        "answers": {"answered_in_every_run": 240, "differing": 2},
        "retry": retry,
    }
    text = "\n".join(scenario.table(result))
    assert "| `file://` URI (`file://<tmp>/shards`) | `file://<tmp>/out-uri` | 240 | 0 | 240 | 0 |" in text
    assert "| killed | 0 | 240 | 12 (503: 12) | 3 | – | 0 | 0 | 30.0 |" in text
    assert "| `--retry-errors` | 0 | 240 | 0 | 0 | 12 | 0 | 0 | 11.0 |" in text
    assert "killed at 60 lines (18.2 s)" in text and "ready by 41.0 s" in text
    assert "answered differently from one run to another: 2" in text


def test_the_scenario_is_registered_with_its_result_file_and_parameters():
    registered = SCENARIOS["batch_sources"]
    assert registered.result == "batch-sources.json" and registered.config == "mai-cpu.yaml"
    assert parameters_record(registered.parameters) == {
        "rows": 240,
        "shards": 4,
        "retry_rows": 240,
        "kill_at": 0.25,
        "attempts": 1,
        "kill": "large",
    }
    assert registered.configured({"attempts": "6", "kill_at": "0.5"}).attempts == 6
