"""The batch scenario's schedule, arithmetic, verdicts and table (loadtest/bench/batch_arms.py,
loadtest/bench/scenarios/batch.py), on made-up rows and summaries: no Ray, no subprocess."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from loadtest.bench.batch_arms import (
    ARMS,
    BATCH_FULL_RT,
    BATCH_MAI,
    SERVER_MAI,
    arm_figures,
    best_concurrency,
    block_order,
    block_ratios,
    busy_shares,
    compare_arms,
    memory_verdict,
    paired_difference,
    repeated_records,
    split_blocks,
    tokens_of,
    verdict,
)
from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.scenarios import batch as scenario


def test_blocks_cover_every_question_once_in_order_with_sizes_differing_by_at_most_one():
    blocks = split_blocks(list(range(10)), 4)
    assert [len(block) for block in blocks] == [3, 3, 2, 2]
    assert [item for block in blocks for item in block] == list(range(10))
    assert split_blocks(list(range(1000)), 4)[3] == list(range(750, 1000))
    with pytest.raises(ValueError):
        split_blocks([1, 2], 3)
    with pytest.raises(ValueError):
        split_blocks([1, 2], 0)


def test_every_arm_runs_every_block_once_in_an_order_rotated_from_block_to_block():
    order = block_order(("a", "b", "c"), 4)
    assert Counter(order) == {(block, arm): 1 for block in range(4) for arm in "abc"}
    per_block = [[arm for block, arm in order if block == b] for b in range(4)]
    assert per_block == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert [block for block, _ in order] == sorted(block for block, _ in order)  # block after block


def test_repeated_records_cycle_the_questions_under_fresh_ids():
    records = [{"id": "q1", "question": "a?"}, {"id": "q2", "question": "b?"}, {"id": "q3", "question": "c?"}]
    rows = repeated_records(records, 7)
    assert len(rows) == 7 and len({row["id"] for row in rows}) == 7
    assert [row["question"] for row in rows] == ["a?", "b?", "c?"] * 2 + ["a?"]
    assert rows[4]["id"] == "q2#1" and records[1]["id"] == "q2"  # the originals untouched


def _stage(model: str, latency: float | None, prompt: int = 10, cached: int | None = 0, completion: int = 2):
    return {
        "model": model,
        "latency_s": latency,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": completion,
    }


def _row(question: str, score: float | None, stages=(), status: int = 200, route: str = "agree_short"):
    row: dict[str, Any] = {"id": question, "status": status, "latency_s": 1.0}
    if status == 200:
        row |= {"score": score, "route": route, "stages": list(stages)}
    return row


def test_busy_share_is_each_models_stage_seconds_over_the_wall_and_skips_failed_rows():
    rows = [
        _row("q1", 1.0, [_stage("small", 2.0), _stage("large", 1.0), _stage("small", 3.0)]),
        _row("q2", 0.0, [_stage("small", None), _stage("large", 5.0, cached=None)]),
        {"id": "q3", "status": 503, "latency_s": 9.0, "stages": [_stage("large", 100.0)]},
    ]
    assert busy_shares(rows, 4.0) == {"small": 1.25, "large": 1.5}
    assert busy_shares(rows, 0.0) == {"small": None, "large": None}
    tokens = tokens_of(rows)
    assert tokens["small"] == {"prompt_tokens": 30, "cached_tokens": 0, "completion_tokens": 6}
    assert tokens["large"]["prompt_tokens"] == 20  # the failed row's stage is not counted


def _summary(retried=0, driver=None, actor=None, stats=None) -> dict[str, Any]:
    return {
        "retried": retried,
        "driver_peak_rss_mb": driver,
        "actor_peak_rss_mb": actor,
        "ray_data_stats": stats,
    }


def _block(block: int, wall: float, rows, summary=None, command=None) -> dict[str, Any]:
    return {"block": block, "wall_s": wall, "rows": rows, "summary": summary, "command_s": command}


def test_a_batch_arm_totals_its_blocks_and_keeps_the_peaks_and_the_last_stats_text():
    blocks = [
        _block(0, 4.0, [_row("q1", 1.0), _row("q2", 0.0)], _summary(1, 300.0, 200.0, "stats 0"), 9.0),
        _block(1, 6.0, [_row("q3", 1.0), _row("q4", None, status=504)], _summary(2, 280.0, None), 11.5),
    ]
    figures = arm_figures(BATCH_MAI, blocks)
    assert (figures["rows"], figures["answered"], figures["errors"]) == (4, 3, 1)
    assert figures["wall_s"] == 10.0 and figures["rows_per_s"] == 0.3  # answered rows over the total wall
    assert figures["block_wall_s"] == [4.0, 6.0]
    assert figures["accuracy_pct"] == pytest.approx(66.67) and figures["questions"] == 3
    low, high = figures["accuracy_interval_pct"]
    assert 0.0 <= low <= 66.67 <= high <= 100.0
    assert figures["retried"] == 3 and figures["command_s"] == 20.5
    assert figures["driver_peak_rss_mb"] == 300.0 and figures["actor_peak_rss_mb"] == 200.0
    assert figures["ray_data_stats"] == {"block": 0, "text": "stats 0"}  # block 1 had none
    assert figures["routes"] == {"agree_short": 3}
    server = arm_figures(SERVER_MAI, [_block(0, 2.0, [_row("q1", 1.0)])])
    assert "retried" not in server and "driver_peak_rss_mb" not in server


def test_the_paired_difference_takes_only_the_questions_both_answered():
    paired = paired_difference({"q1": 1.0, "q2": 1.0, "q3": 0.0}, {"q1": 0.0, "q2": 1.0, "q4": 1.0})
    assert paired["questions"] == 2 and paired["points"] == 50.0
    low, high = paired["interval_95"]
    assert 0.0 <= low <= 50.0 <= high <= 100.0
    assert paired_difference({"q1": 1.0}, {"q2": 1.0}) == {
        "points": None,
        "interval_95": None,
        "questions": 0,
    }


def _figures(wall: float, rows_per_s: float, accuracy: float | None) -> dict[str, Any]:
    return {"wall_s": wall, "rows_per_s": rows_per_s, "accuracy_pct": accuracy}


@pytest.mark.parametrize(
    ("mai", "full", "server", "met"),
    [
        ((70.0, 14.0, 96.0), (100.0, 10.0, 96.0), (80.0, 12.0, 96.0), (True, True, True)),
        ((71.0, 14.0, 96.0), (100.0, 10.0, 96.0), (80.0, 14.5, 96.0), (False, True, False)),
        ((50.0, 20.0, 95.9), (100.0, 10.0, 96.0), (80.0, 20.0, 96.0), (True, False, True)),
        ((50.0, 20.0, None), (100.0, 10.0, 96.0), (80.0, 20.0, 96.0), (True, False, True)),
    ],
)
def test_the_verdict_holds_batch_mai_to_its_wall_accuracy_and_throughput_goals(mai, full, server, met):
    arms = {
        BATCH_MAI.name: _figures(*mai),
        BATCH_FULL_RT.name: _figures(*full),
        SERVER_MAI.name: _figures(*server),
    }
    outcome = verdict(arms, {"interval_95": [-1.0, 2.0]})
    assert tuple(outcome["met"].values()) == met
    assert outcome["wall_vs_full_rt"] == round(mai[0] / full[0], 3)
    assert outcome["rows_per_s_vs_server"] == round(mai[1] / server[1], 3)
    assert outcome["accuracy_difference_vs_full_rt_95ci"] == [-1.0, 2.0]


def test_memory_is_streamed_when_every_peak_at_most_rows_is_within_the_goal_of_the_fewest():
    def run(rows, driver, actor):
        return {"rows": rows, "driver_peak_rss_mb": driver, "actor_peak_rss_mb": actor}

    within = memory_verdict([run(10000, 500.0, 620.0), run(1000, 450.0, 500.0)])
    assert within["rows"] == [1000, 10000] and within["ratios"] == {
        "driver_peak_rss_mb": 1.111,
        "actor_peak_rss_mb": 1.24,
    }
    assert within["met"] is True
    assert memory_verdict([run(1000, 450.0, 500.0), run(10000, 450.0, 640.0)])["met"] is False
    assert memory_verdict([run(1000, 450.0, None), run(10000, 450.0, 640.0)])["met"] is None


def test_the_servers_concurrency_is_the_probes_best_rows_per_second():
    probe = [{"concurrency": 8, "rows_per_s": 12.0}, {"concurrency": 16, "rows_per_s": 14.5}]
    assert best_concurrency([*probe, {"concurrency": 32, "rows_per_s": 13.0}]) == 16
    assert best_concurrency([*probe, {"concurrency": 32, "rows_per_s": 14.5}]) == 16  # a tie: the lower
    assert (
        best_concurrency([{"concurrency": 8, "rows_per_s": None}, {"concurrency": 16, "rows_per_s": 1.0}])
        == 16
    )


STAGES = [_stage("small", 0.5), _stage("large", 0.25)]


def _runs(walls: dict[str, list[float]], scores: dict[str, list[float]]) -> dict[str, list[dict[str, Any]]]:
    """Per arm, one run per block, each answering one question per score."""
    runs = {}
    for arm in ARMS:
        runs[arm.name] = [
            _block(
                block,
                wall,
                [_row(f"q{block}-{i}", score, STAGES) for i, score in enumerate(scores[arm.name])],
                _summary(0, 300.0, 250.0, "stats") if arm.via == "batch" else None,
                wall + 5 if arm.via == "batch" else None,
            )
            for block, wall in enumerate(walls[arm.name])
        ]
    return runs


def test_per_block_ratios_pair_each_block_of_one_arm_with_the_same_block_of_the_other():
    runs = _runs(
        {"batch-mai": [2.0, 3.0, 8.0], "batch-full-rt": [4.0, 4.0, 4.0], "server-mai": [1.0, 6.0, 8.0]},
        {"batch-mai": [1.0, 1.0], "batch-full-rt": [1.0, 0.0], "server-mai": [1.0, 1.0]},
    )
    walls = block_ratios(runs, BATCH_MAI.name, BATCH_FULL_RT.name, "wall_s")
    assert walls == {"median": 0.75, "min": 0.5, "max": 2.0, "n": 3}
    rates = block_ratios(runs, BATCH_MAI.name, SERVER_MAI.name, "rows_per_s")
    assert rates == {"median": 1.0, "min": 0.5, "max": 2.0, "n": 3}


def _result() -> dict[str, Any]:
    runs = _runs(
        {"batch-mai": [30.0, 32.0], "batch-full-rt": [50.0, 48.0], "server-mai": [40.0, 41.0]},
        {"batch-mai": [1.0, 1.0, 0.0, 1.0], "batch-full-rt": [1.0, 0.0, 0.0, 1.0], "server-mai": [1.0] * 4},
    )
    compared = compare_arms(runs)
    return {
        "questions": 8,
        "config": "configs/mai-cpu.yaml",
        "blocks": 2,
        "server_concurrency": 16,
        "probe": {
            "questions_per_concurrency": 96,
            "best_concurrency": 16,
            "runs": [{"concurrency": c, "rows_per_s": r} for c, r in ((8, 11.0), (16, 13.25), (32, 12.5))],
        },
        **compared,
        "memory": {
            "config": "configs/mai-emulated.yaml",
            "runs": [
                {"rows": 8, "wall_s": 2.0, "rows_per_s": 4.0, "errors": 0, "retried": 0}
                | {"driver_peak_rss_mb": 400.0, "actor_peak_rss_mb": 500.0},
                {"rows": 80, "wall_s": 20.0, "rows_per_s": 4.0, "errors": 0, "retried": 1}
                | {"driver_peak_rss_mb": 410.0, "actor_peak_rss_mb": 700.0},
            ],
            "verdict": memory_verdict(
                [
                    {"rows": 8, "driver_peak_rss_mb": 400.0, "actor_peak_rss_mb": 500.0},
                    {"rows": 80, "driver_peak_rss_mb": 410.0, "actor_peak_rss_mb": 700.0},
                ]
            ),
        },
    }


def row_of(lines: list[str], first_cell: str) -> list[str]:
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n" + "\n".join(lines))


def column(lines: list[str], header_first: str, row_first: str, name: str, nth: int = 0) -> str:
    headers = [line for line in lines if line.startswith(f"| {header_first} |")]
    header = [cell.strip() for cell in headers[nth].strip().strip("|").split("|")]
    row = row_of(lines[lines.index(headers[nth]) :], row_first)
    return row[header.index(name)]


def test_the_table_shows_each_arm_the_goals_where_the_time_goes_and_the_memory_phase():
    result = _result()
    lines = scenario.table(result)
    text = "\n".join(lines)
    # batch mai: 6 of 8 right; 8 answered in 62 s; Full RT 4 of 8 in 98 s.
    assert column(lines, "arm", "batch `mai`", "accuracy %").startswith("75.0 [")
    assert column(lines, "arm", "batch `mai`", "wall s") == "62.0"
    assert column(lines, "arm", "batch `mai`", "rows/s") == "0.13"
    assert column(lines, "arm", "batch `mai`", "command s") == "72.0"
    assert column(lines, "arm", "batch Full RT", "driver peak MB") == "300"
    assert column(lines, "arm", "server `mai`", "retried") == "–"
    assert "concurrency 16" in text and "13.25 at 16" in text
    assert "**0.63×** batch Full RT's (met" in text and "**+25.0 points**" in text
    assert "rows/s **1.30×** the server's (met" in text
    assert column(lines, "arm", "batch `mai`", "routes", nth=1) == "agree_short 100%"
    assert column(lines, "arm", "server `mai`", "small tokens", nth=1) == "80 / 0 / 16"
    assert column(lines, "arm", "batch `mai`", "large busy", nth=1) == "0.03"  # 8 x 0.25 s over 62 s
    assert "Ray Data's own overhead is not shown" in text
    assert column(lines, "rows", "80", "actor peak MB") == "700"
    assert "actor 1.40×" in text and "(not met)" in text and "never accuracy" in text
    assert "```text" in text and "stats" in text
    result["memory"] = None
    assert "Memory at more rows: not run" in "\n".join(scenario.table(result))


def test_the_scenario_is_registered_with_its_parameters_and_result_file():
    batch = SCENARIOS["batch"]
    assert batch is scenario.SCENARIO and batch.result == "batch.json" and batch.config == "mai-cpu.yaml"
    assert batch.configured({"blocks": "3", "memory": "false"}) == scenario.Parameters(blocks=3, memory=False)
    assert scenario.app_of("mai-cpu.yaml") == "mai" and scenario.app_of("mai-emulated.yaml") == "mai"
