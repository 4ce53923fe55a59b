"""The answer_cache scenario's arithmetic and table: the replay's order, the questions it keeps apart,
the answers compared request by request, and the table fed a small hand-made result."""

from __future__ import annotations

from typing import Any

from loadtest.bench.cache_stack import (
    answer_identity,
    arms_summary,
    distinct_records,
    repeats_of,
    replay_order,
    run_summary,
)
from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.scenarios.answer_cache import table


def test_each_repeat_comes_after_its_first_asking_in_a_seeded_order():
    assert repeats_of(70, 0.3) == 30 and repeats_of(10, 0.0) == 0
    order = replay_order(70, 30, seed=0)
    assert len(order) == 100 and sorted(set(order)) == list(range(70))
    assert replay_order(70, 30, seed=0) == order != replay_order(70, 30, seed=1)
    for position, question in enumerate(order):
        if question in order[:position]:
            assert order.index(question) < position
    assert len(replay_order(3, 7, seed=2)) == 10  # more repeats than questions: some asked thrice


def test_two_records_the_cache_takes_for_one_question_are_kept_once():
    records = [
        {"id": "a", "image": "i1", "question": "Is the shape red?"},
        {"id": "b", "image": "i1", "question": "is the shape  red"},
        {"id": "c", "image": "i2", "question": "Is the shape red?"},
    ]
    assert [record["id"] for record in distinct_records(records, 2)] == ["a", "c"]


def reply(cache: str, answer: str, tokens: int = 10, latency_s: float = 0.5) -> dict[str, Any]:
    spent = tokens if cache in ("miss", "bypass") else 0
    return {"status": 200, "latency_s": latency_s, "cache": cache, "header": cache, "answer": answer,
            "tokens": spent}  # fmt: skip


def a_run(arm: str, answers: list[str], statuses: list[str]) -> dict[str, Any]:
    replies = [reply(status, answer) for answer, status in zip(answers, statuses, strict=True)]
    summary = run_summary(replies, wall_s=2.0)
    return {"arm": arm, "answers": answers, "statuses": statuses} | summary


def test_answers_are_compared_request_by_request_and_the_differing_ones_listed():
    questions = [{"id": f"q{n}", "question": f"Question {n}?"} for n in range(3)]
    runs = [
        a_run("off", ["yes", "red", "no"], ["bypass"] * 3),
        a_run("on", ["yes", "blue", "no"], ["miss", "miss", "hit"]),
        a_run("off", ["yes", "red", "no"], ["bypass"] * 3),
    ]
    identity = answer_identity(runs, questions)
    assert identity["identical_share"] == round(4 / 6, 4)
    assert identity["off_vs_off_identical_share"] == 1.0
    assert identity["by_status"]["hit"] == {"compared": 2, "identical_share": 1.0}
    [differing] = identity["differing"]
    assert (differing["record"], differing["on"], differing["off"]) == ("q1", "blue", ["red", "red"])
    summary = arms_summary(runs, ("requests_per_s", "engine_tokens"), ("off", "on"))
    assert summary["on_over_off"] == {"requests_per_s": 1.0, "engine_tokens": round(20 / 30, 3)}


def test_the_table_shows_each_part_and_the_scenario_is_listed():
    spread = {"median": 1.0, "min": 1.0, "max": 1.0, "n": 3}
    arm = {"median_us": spread, "p90_us": spread, "over_off": {"median_us": 1.0, "p90_us": 1.0}}
    timings = {"calls": 10, "errors": 0, "p50_us": 1.0, "p99_us": 2.0}
    lookups = {"get_hit": timings, "get_miss": timings, "lookup_decoded": timings}
    memory = {"max_bytes": 2**26, "entry_value_bytes": 1900, "entry_bytes": 2270.0, "entries": 29000,
              "heap_bytes": 2**26, "heap_over_max_bytes": 1.0, "heap_per_entry_bytes": 2300.0,
              "rss_delta_bytes": None, "rss_over_max_bytes": None}  # fmt: skip
    result: dict[str, Any] = {
        "in_process": {
            "latency": {"requests_per_block": 10, "rounds": 2, "hit": arm, "refresh": arm, "off": arm},
            "memory": memory,
            "lookups": {"entry_value_bytes": 1900, "memory": lookups, "redis": {"skipped": "none"}},
        }
    }
    lines = "\n".join(table(result))
    assert "| a hit | 1.0 [1.0–1.0] |" in lines and "| memory | 1.0 / 2.0 |" in lines
    assert "29000 entries held" in lines and "On the real stack" not in lines
    assert SCENARIOS["answer_cache"].parameters.stack is True
