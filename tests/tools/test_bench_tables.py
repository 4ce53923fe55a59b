"""The tables of bench/RESULTS.md for the adaptive, audit and autoscaling results: each fed a small
hand-made result, and its key figures found in the cells they belong to."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.bench.external import audit_truth_table
from loadtest.bench.scenarios import audit, replica_starts
from loadtest.bench.scenarios.adaptive import capacity, real, shift
from loadtest.bench.scenarios.autoscaling import overload, shipped
from loadtest.bench.scenarios.autoscaling import real as autoscaling_real


def spread(median: float, low: float, high: float) -> dict[str, float]:
    return {"median": median, "min": low, "max": high, "n": 3}


def row_of(lines: list[str], first_cell: str) -> list[str]:
    """The cells of the table row whose first cell is ``first_cell``."""
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n" + "\n".join(lines))


def column(lines: list[str], header_first: str, row_first: str, name: str) -> str:
    header = row_of(lines, header_first)
    row = row_of(lines, row_first)
    assert len(row) == len(header), (header, row)
    return row[header.index(name)]


def test_adaptive_real_shows_accuracy_wall_time_the_verdict_and_plan_shares():
    def policy(accuracy: float, wall: float) -> dict[str, Any]:
        at = {
            "requests": 300,
            "errors": 1,
            "requests_per_s": spread(26.3, 21.0, 27.6),
            "p50_s": spread(0.353, 0.337, 0.433),
            "p99_s": spread(0.6, 0.57, 0.73),
        }
        return {
            "accuracy_pct": accuracy,
            "accuracy_interval_pct": [accuracy - 1, accuracy + 1],
            "by_concurrency": {"8": at},
            "wall_s": spread(wall, wall - 2, wall + 9),
            "plan_shares": [],
        }

    policies = {name: policy(90.4, 54.9) for name in real.RUNS}
    policies["mai"] = policy(98.2, 38.0) | {
        "plan_shares": [
            {"yes_no": {"small-reason": 0.95, "sequential": 0.05}},
            {"yes_no": {"small-reason": 0.9, "sequential": 0.1}},
            {"yes_no": {"small-reason": 1.0}},
        ]
    }
    result = {
        "questions": 100,
        "warm_up_questions": 30,
        "concurrency": 8,
        "repetitions": 3,
        "policies": policies,
        "verdict": {
            "wall_vs_full_rt": 0.692,
            "wall_vs_sequential": 0.691,
            "accuracy_below_full_rt_points": -7.8,
            "accuracy_difference_vs_full_rt_95ci": [6.0, 9.6],
            "met": {"wall_vs_full_rt": True, "accuracy": True},
            "goal": {"wall_vs_full_rt": 0.75, "accuracy_below_full_rt_points": 0.0},
        },
        "controller_after_warm_up": {"yes_no": {"plan": "sequential"}},
        "controller_after_each_run": [
            {"after": "rep 1 mai", "classes": {"yes_no": {"plan": "small-reason"}}}
        ],
    }
    lines = real.table(result)
    assert column(lines, "policy", "`mai`", "accuracy %") == "98.2 [97.2–99.2]"
    assert column(lines, "policy", "`mai`", "wall s") == "38.0 [36.0–47.0]"
    assert column(lines, "policy", "`mai`", "errors") == "1 of 300"
    text = "\n".join(lines)
    assert "**0.69×** Full RT's (met" in text and "**+7.8 points**" in text and "+6.0 to +9.6" in text
    plans = row_of(lines, "yes_no")
    assert plans[1:3] == ["sequential", "small-reason"]
    assert plans[3] == "sequential 5.0%, small-reason 95.0%"  # medians over the three repetitions


def test_adaptive_capacity_shows_both_modes_walls_and_the_shift_phases():
    runs = {
        "adaptive": [{"plans": {"sequential": 180, "eager": 12}}, {"plans": {"sequential": 190, "eager": 2}}],
        "sequential": [{"plans": {"sequential": 192}}] * 2,
    }
    result = {
        "concurrency": 32,
        "requests_per_run": 192,
        "warm_up_requests": 256,
        "repetitions": 2,
        "adaptive": {"mode": "learn", "window": 500, "explore": 0.05},
        "datasets": {
            "mmmu": {
                "time_scale": 0.25,
                "runs": runs,
                "wall_s": {
                    "adaptive": spread(39.804, 36.722, 40.196),
                    "sequential": spread(39.7, 36.7, 40.2),
                },
                "p99_s": {"adaptive": spread(14.06, 13.95, 14.17), "sequential": spread(13.97, 13.94, 14.11)},
                "adaptive_not_slower": True,
                "controller": {"text": {"plan": "sequential"}, "yes_no": {"plan": "eager"}},
            }
        },
        "shift": {
            "phases": [
                {
                    "dataset": "pope",
                    "plan": "sequential",
                    "requests_until_settled": 507,
                    "requests": 6,
                    "wall_s": 7.98,
                    "plans_in_order": "sesstt",
                }
            ],
            "adaptive": {"min_saving": 0.02},
            "time_scale": 0.25,
            "requests_per_phase": 6,
        },
    }
    lines = capacity.table(result)
    assert column(lines, "dataset", "mmmu", "wall s adaptive") == "39.8 [36.7–40.2]"
    assert column(lines, "dataset", "mmmu", "adaptive's plans") == "sequential 370, eager 14"
    assert column(lines, "dataset", "mmmu", "controller's plan per class") == "text sequential, yes_no eager"
    assert column(lines, "phase", "1", "plans (by completion)") == "sequential 3, full-transfer 2, eager 1"
    assert column(lines, "phase", "1", "requests until settled") == "507 of 6"


def test_adaptive_shift_shows_when_each_phase_settled_and_the_quoted_accepts():
    result = {
        "phases": [
            {
                "dataset": "yes/no as text",
                "plan": "transfer",
                "requests_until_settled": 446,
                "requests": 600,
                "stage1_accept_quoted": {"first": 0.99, "last": 0.13},
                "wall_s": 85.79,
                "plans_in_order": "s" * 454 + "t" * 146,
            }
        ],
        "requests_per_phase": 600,
        "concurrency": 8,
        "class": "text",
    }
    lines = shift.table(result)
    assert column(lines, "phase", "1", "settled on") == "full-transfer"
    assert column(lines, "phase", "1", "requests until settled") == "446 of 600"
    assert column(lines, "phase", "1", "stage-1 accept quoted, first → last") == "0.99 → 0.13"
    assert column(lines, "phase", "1", "plans (by completion)") == "sequential 454, full-transfer 146"


def audit_result(on: str, not_run: dict[str, int]) -> dict[str, Any]:
    def run(audited: int, **counts: int) -> dict[str, Any]:
        return {"requests": 150, "errors": 0, "audited": audited} | counts

    summary = {
        "0": {
            "p50_s": spread(1.1655, 1.1436, 1.2942),
            "p99_s": spread(3.6275, 2.5895, 3.8856),
            "requests_per_s": spread(7.18, 6.86, 8.01),
        },
        on: {
            "p50_s": spread(1.1947, 1.1839, 1.2537),
            "p99_s": spread(3.512, 2.7457, 3.8347),
            "requests_per_s": spread(7.11, 6.91, 7.6),
        },
        "ratios": {"p50_s": 1.025, "p99_s": 0.968, "requests_per_s": 0.99},
    }
    return {
        "concurrency": 8,
        "requests_per_run": 150,
        "runs": {"0": [run(0), run(0)], on: [run(14, **not_run), run(8)]},
        "summary": summary,
    }


def test_audit_cost_shows_latency_off_and_on_with_the_ratios_and_the_audits_run():
    lines = audit.cost_table(audit_result("0.1", {}))
    assert column(lines, "audits", "off (rate 0)", "p50 s") == "1.17 [1.14–1.29]"
    assert column(lines, "audits", "rate 0.1", "p99 s") == "3.51 [2.75–3.83]"
    assert column(lines, "audits", "rate 0.1", "audits run, per run") == "14, 8"
    text = "\n".join(lines)
    assert "p50 **1.025×**" in text and "p99 **0.968×**" in text
    assert "Of the 22 audits sampled at rate 0.1, 22 ran and 0 did not." in text


def test_audit_shed_counts_the_audits_not_run_by_reason():
    lines = audit.shed_table(audit_result("0.5", {"not_run_shed": 596}))
    assert column(lines, "audits", "rate 0.5", "audits not run, per run") == "shed 596, 0"
    assert column(lines, "audits", "off (rate 0)", "errors") == "0 of 300"
    assert "Of the 618 audits sampled at rate 0.5, 22 ran and 596 did not." in "\n".join(lines)


def test_overload_shows_p99_goodput_and_relaxed_share_off_and_on():
    def arm(p99: float, goodput: float, relaxed: float) -> dict[str, Any]:
        return {
            "p99_s": spread(p99, p99 - 1, p99 + 1),
            "p50_s": spread(1.5, 1.0, 2.0),
            "goodput_per_s": spread(goodput, goodput - 2, goodput + 2),
            "requests_per_s": spread(20.0, 18.0, 22.0),
            "relaxed_share": spread(relaxed, relaxed / 2, relaxed),
        }

    run = {"repetition": 0, "requests": 2593, "p99_s": 11.807, "goodput_per_s": 48.77, "objective_s": 3.91}
    result = {
        "users": 96,
        "replicas": {"min_replicas": 1, "max_replicas": 1},
        "large_max_num_seqs": 8,
        "thresholds": {"min_confidence": 0.8},
        "overload": {
            "max_large_queue": 16,
            "restore_below": 8,
            "relax_after_s": 2,
            "restore_after_s": 5,
            "relax_to": {"min_confidence": 0.5},
        },
        "seconds": 40.0,
        "runs": [
            run | {"relax": True, "relaxed_share": 0.9275, "levels": {"normal": 90, "relax": 2405}},
            run | {"relax": False, "relaxed_share": 0.0, "levels": {"normal": 834}},
        ],
        "summary": {"off": arm(18.002, 9.47, 0.0), "on": arm(15.309, 30.115, 0.5239)},
    }
    lines = overload.table(result)
    assert column(lines, "relaxation", "off", "p99 s") == "18.00 [17.00–19.00]"
    assert column(lines, "relaxation", "on", "goodput /s") == "30.11 [28.11–32.11]"
    assert column(lines, "relaxation", "on", "answers relaxed") == "52.4% [26.2–52.4]"
    assert column(lines, "run", "1", "answers relaxed") == "92.8%"
    assert column(lines, "run", "1", "answers per level") == "normal 90, relax 2405"
    assert "1 replica per model" in lines[0] and "(3.91 s)" in lines[0]


def test_shipped_shows_when_each_repetition_reached_the_expected_replicas():
    def run(repetition: int, large: float | None, timeline: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "repetition": repetition,
            "large_reached_s": large,
            "small_reached_s": None,
            "burst": {
                "users": 64,
                "requests": 953,
                "p50_s": 1.283,
                "p99_s": 13.497,
                "past_objective": 258,
                "goodput_per_s": 12.98,
            },
            "replica_seconds": {"small": 53.2, "large": 206.0},
            "timeline": timeline,
        }

    timeline = [
        {"t_s": 0.1, "phase": "cool down", "small": 4, "large": 4},
        {"t_s": 1.2, "phase": "burst 0: 64", "small": 3, "large": 1},
        {"t_s": 2.3, "phase": "burst 0: 64", "small": 2, "large": 2},
    ]
    result = {
        "config": "configs/mai-emulated.yaml",
        "overrides": {"autoscaling": {"target_ongoing_requests": 4, "upscale_delay_s": 2}},
        "expected_at_64": {"small": 4, "large": 2},
        "runs": [run(0, None, timeline), run(1, 1.4, [])],
    }
    lines = shipped.table(result)
    assert column(lines, "repetition", "1", "large reached 2, s") == "–"
    assert column(lines, "repetition", "2", "large reached 2, s") == "1.4"
    # the cool-down's replicas are not the burst's
    assert column(lines, "repetition", "1", "most replicas in the burst, small / large") == "3 / 2"
    assert column(lines, "repetition", "1", "replica-s small / large") == "53.2 / 206"


def test_autoscaling_real_shows_accuracy_overall_and_on_relaxed_questions():
    def accuracy(correct: int, n: int) -> dict[str, Any]:
        return {"n": n, "correct": correct, "accuracy": round(correct / n, 4), "ci95": [0.876, 0.9402]}

    def arm(not_run: dict[str, int], by_route: dict[str, Any]) -> dict[str, Any]:
        return {
            "wall_s": 40.3,
            "errors": 0,
            "replicas_after": {"small": 1, "large": 2},
            "stats": {
                "audit": {"not_run": not_run},
                "classes": {"yes_no": {"audit": {"by_route": by_route}}},
            },
        }

    rows = [
        {"off": {"correct": True}, "on": {"correct": False}},
        {"off": {"correct": True}, "on": {"correct": False}},
        {"off": {"correct": False}, "on": {"correct": True}},
    ]
    result = {
        "questions": 300,
        "concurrency": 24,
        "overload": {
            "max_large_queue": 2,
            "restore_below": 0,
            "relax_after_s": 0.5,
            "restore_after_s": 5,
            "relax_to": {"confident_large": 0.5, "eager_reasoning": False},
        },
        "relaxed_share": 1.0,
        "levels_on": {"relax": 1.0},
        "accuracy": {"off": accuracy(274, 300), "on": accuracy(271, 300)},
        "relaxed_questions_accuracy": {"off": accuracy(27, 30), "on": accuracy(24, 30)},
        "relaxed_routes": {"agree_short": 0.29, "transfer": 0.71},
        "same_questions_in_off": {"transfer": 1.0},
        "arms": {
            "off": arm({}, {"agree_short": {"audited": 5, "disagreed": 3}}),
            "on": arm({"overload": 9}, {"relaxed:confident_large": {"audited": 7, "disagreed": 5}}),
        },
        "rows": rows,
    }
    lines = autoscaling_real.table(result)
    assert column(lines, "overload", "off", "accuracy %") == "91.3 [87.6–94.0] (274 of 300)"
    assert column(lines, "overload", "on", "on the relaxed questions %") == "80.0 [87.6–94.0] (24 of 30)"
    assert column(lines, "overload", "on", "audits not run") == "overload 9"
    assert column(lines, "overload", "on", "replicas after, small / large") == "1 / 2"
    text = "\n".join(lines)
    assert "Answered relaxed: **100.0%**" in text and "`eager_reasoning` false" in text
    assert "2 right only off, 1 right only on" in text
    assert row_of(lines, "yes_no") == ["yes_no", "confident_large", "7", "5"]  # relaxed audits only


def test_audit_truth_shows_errors_disagreement_and_wrong_flagged_per_rule_and_route():
    result = {
        "rules": {
            "paper": {
                "yes_no/agree_short": {
                    "questions": 264,
                    "served_error": 0.5227,
                    "reference_error": 0.1023,
                    "audited": 264,
                    "disagreed": 115,
                    "disagreement": 0.4356,
                    "disagreement_ci95": [0.3771, 0.4959],
                    "wrong": 138,
                    "wrong_flagged": 113,
                },
                "yes_no/transfer": {"questions": 58, "served_error": 0.1379, "reference_error": 0.1379},
            }
        },
        "meta": {"commit": None},  # flattened or not, the table does not read it
    }
    lines = audit_truth_table(result)
    assert column(lines, "rule", "paper", "served error") == "52.3%"
    assert column(lines, "rule", "paper", "Full RT's error") == "10.2%"
    assert column(lines, "rule", "paper", "disagreement [95 % CI]") == "43.6% [37.7–49.6]"
    assert column(lines, "rule", "paper", "wrong early exits, flagged") == "138, 113"
    transfer = [line for line in lines if "yes_no/transfer" in line]
    assert transfer == ["| paper | yes_no/transfer | 58 | 13.8% | 13.8% | – | – | – |"]
    assert lines[0].startswith("322 seeded easy-vqa test questions")


def test_replica_starts_shows_seconds_per_deployment_and_the_upscale_decisions():
    result = {
        "session": "session_x",
        "seconds": {"large:emulated": {"median": 18.2, "min": 9.2, "max": 37.0, "n": 27, "starts": 27}},
        "upscales": [
            {
                "at": "2026-11-25 04:33:25,745",
                "deployment": "large:emulated",
                "from": 1,
                "to": 4,
                "first_running": "2026-11-25 04:34:17,645",
            },
            {
                "at": "2026-11-25 04:35:00,000",
                "deployment": "large:emulated",
                "from": 4,
                "to": 2,
                "first_running": None,
            },
        ],
    }
    lines = replica_starts.table(result)
    assert row_of(lines, "large:emulated")[1:] == ["27", "18.2 [9.2–37.0]"]
    decisions = [line for line in lines if line.startswith("| large:emulated | 2 |")]
    assert decisions == ["| large:emulated | 2 | 1 → 4, 4 → 2 | 51.9 (1 with none running after it) |"]
    assert "2 scale-ups decided" in "\n".join(lines)
    older = replica_starts.table({key: value for key, value in result.items() if key != "upscales"})
    assert older[-1] == "Scale-up decisions: not in this file."


def test_audit_load_reports_the_share_audited_and_the_p50_ratio_against_its_goals():

    run_off = {"requests": 300, "errors": 0, "audited": 0}
    run_on = {"requests": 300, "errors": 1, "audited": 90, "not_run_shed": 10}
    assert audit.audited_share(run_on) == 0.9 and audit.audited_share(run_off) is None
    metrics = ("p50_s", "p99_s", "requests_per_s")
    result = {
        "concurrency": 4,
        "requests_per_run": 300,
        "runs": {"0": [run_off], "1": [run_on]},
        "summary": {
            "0": {key: spread(1.0, 0.9, 1.1) for key in metrics},
            "1": {key: spread(1.1, 1.0, 1.2) for key in metrics},
            "ratios": {"p50_s": 1.1, "p99_s": 1.2, "requests_per_s": 0.95},
        },
        "audited_share": 0.9,
        "goals": audit.GOALS,
        "met": {"audited_share": True, "p50_ratio": True},
    }
    lines = audit.load_table(result)
    assert column(lines, "audits", "rate 1", "early exits audited, per run") == "90 of 100"
    assert column(lines, "audits", "off", "p50 s") == "1.00 [0.90–1.10]"
    text = "\n".join(lines)
    assert "**90.0%** (goal ≥ 80%: met)" in text and "p50 **1.1×** (goal ≤ 1.15×: met)" in text


def test_affinity_counts_follow_up_calls_on_the_replica_of_their_requests_first_call():
    from loadtest.bench.scenarios.affinity import follow_up_share

    calls = {
        "r1": [(1.0, "a"), (2.0, "a"), (1.5, "b")],
        "r2": [(3.0, "a"), (0.5, "b"), (2.5, "c")],
    }
    # a: first on r1, follow-ups r1 and r2; b: first on r2, follow-up r1; c: no follow-up
    assert follow_up_share(calls) == (1, 3)


def test_affinity_cache_reads_the_later_stages_cached_tokens_per_call():
    from loadtest.bench.scenarios.affinity import cached_shares

    def stage(name, cached, prompt=100, status="ok"):
        return {"name": name, "status": status, "cached_tokens": cached, "prompt_tokens": prompt}

    replies = [
        {
            "trace": {
                "stages": [stage("short_small", 0), stage("reason_small", 64), stage("transfer_large", 32)]
            }
        },
        {"trace": {"stages": [stage("reason_small", 96), stage("transfer_large", 0, status="timeout")]}},
        {"error": 503},
    ]
    shares = cached_shares(replies)
    assert shares["reason_small"] == {
        "calls": 2,
        "cached_tokens_per_call": 80.0,
        "prompt_tokens_per_call": 100.0,
        "cached_share_of_prompt": 0.8,
    }
    assert (
        shares["transfer_large"]["calls"] == 1 and shares["transfer_large"]["cached_tokens_per_call"] == 32.0
    )


def test_replica_starts_reads_a_ray_sessions_controller_log_under_its_real_name(tmp_path):
    session = tmp_path / "session_2026-11-25_04-27-16_1"
    logs = session / "logs" / "serve"
    logs.mkdir(parents=True)
    prefix = "INFO 2026-11-25 04:33:{} controller 42 -- "
    (logs / "controller_42.log").write_text(
        "\n".join(
            [
                prefix.format("25,000")
                + "Upscaling Deployment(name='large', app='mai') from 1 to 2 replicas.",
                prefix.format("26,000") + "Starting Replica(id='r1', deployment='large', app='mai').",
                prefix.format("30,500")
                + "Replica(id='r1', deployment='large', app='mai') started successfully",
                prefix.format("31,000") + "Starting Replica(id='r2', deployment='small', app='mai').",
            ]
        )
    )
    (tmp_path / "session_latest").symlink_to(session)
    result = replica_starts.run(None, replica_starts.Parameters(str(tmp_path / "session_latest")))
    assert result["session"] == session.name
    assert result["seconds"] == {"large": {"median": 4.5, "min": 4.5, "max": 4.5, "n": 1, "starts": 1}}
    assert result["upscales"] == [
        {
            "at": "2026-11-25 04:33:25,000",
            "deployment": "large",
            "from": 1,
            "to": 2,
            "first_running": "2026-11-25 04:33:30,500",
        }
    ]
    with pytest.raises(ValueError, match="not a Ray session folder"):
        replica_starts.run(None, replica_starts.Parameters(str(tmp_path)))
