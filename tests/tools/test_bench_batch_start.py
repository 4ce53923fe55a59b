"""The batch_start scenario's figures and table (loadtest/bench/scenarios/batch_start.py), on made-up
summaries."""

from __future__ import annotations

from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.scenarios import batch_start as scenario


def start(total: float, replica: float) -> dict[str, float]:
    return {
        "process_s": 1.0,
        "init_s": 0.1,
        "to_first_batch_s": 0.5,
        "replica_s": replica,
        "first_row_s": 0.4,
        "total_s": total,
    }


def job(code: str, repeat: int, first_line: float | None, *starts: dict[str, float]) -> dict:
    return {"code": code, "repeat": repeat, "first_line_s": first_line, "summary_actor_starts": list(starts)}


JOBS = [
    job("before", 0, 9.0, start(8.0, 6.0), start(7.5, 5.5)),
    job("after", 0, 4.0, start(2.5, 0.4), start(3.5, 0.6)),
    job("after", 1, 5.0, start(2.0, 0.2)),
    job("before", 1, None),  # a job whose summary had no starts
]


def test_each_codes_phases_are_the_median_and_range_over_every_actor_of_every_job():
    after = scenario.phase_figures(JOBS, "after")
    assert after["actors"] == 3
    assert after["total_s"] == {"median": 2.5, "min": 2.0, "max": 3.5, "n": 3}
    assert after["replica_s"] == {"median": 0.4, "min": 0.2, "max": 0.6, "n": 3}
    assert after["first_line_s"] == {"median": 4.5, "min": 4.0, "max": 5.0, "n": 2}
    before = scenario.phase_figures(JOBS, "before")
    assert before["actors"] == 2 and before["total_s"]["median"] == 7.75
    assert before["first_line_s"] == {"median": 9.0, "min": 9.0, "max": 9.0, "n": 1}
    assert scenario.phase_figures(JOBS, "nobody") == {
        "actors": 0,
        **dict.fromkeys(scenario.PHASES),
        "first_line_s": None,
    }


def test_the_table_shows_each_code_once_with_its_phases():
    result = {
        "config": "configs/mai-cpu.yaml",
        "before_commit": "c0f9aa0aca4dcb43ba62411f2ba689d494a09456",
        "rows": 48,
        "jobs": JOBS,
        "phases": {code: scenario.phase_figures(JOBS, code) for code in ("before", "after")},
    }
    lines = scenario.table(result)
    [before] = [line for line in lines if line.startswith("| before |")]
    [after] = [line for line in lines if line.startswith("| after |")]
    assert "| 2 | 1.00 [1.00–1.00]" in before and "7.75 [7.50–8.00]" in before
    assert after.endswith("| 4.50 [4.00–5.00] |") and "| 3 |" in after
    assert SCENARIOS["batch_start"] is scenario.SCENARIO and scenario.SCENARIO.result == "batch-start.json"
