"""The request_path scenario, in process and without Ray: the project modules one cascade request runs
through, counted by a profiler hook around that request only, and how the count follows the path."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

import harness.local_server
from harness.paths import ROOT
from loadtest.bench.code_path import calls_counted, code_size, module_lines, modules_run, project_module
from loadtest.bench.runner import run_scenarios
from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.scenarios.request_path import disagreeing_replica, request_body
from loadtest.bench.side_by_side import block_order, timing_summary


def touch() -> int:
    return 1


def no_ray(**options):
    raise AssertionError("a local Ray was started")


def test_the_scenario_runs_through_the_runner_and_counts_the_cascades_modules(tmp_path, monkeypatch):
    monkeypatch.setattr(harness.local_server, "local_ray", no_ray)
    scenario = SCENARIOS["request_path"]
    [path] = run_scenarios([scenario], {}, tmp_path)
    result = json.loads(path.read_text())
    assert result["meta"]["command"] == "python -m loadtest.bench --only request_path"
    assert result["request"]["route"] == "agree_reasoned"
    assert "before_after" not in result  # no earlier checkout unless one is named
    modules = result["modules"]
    assert {"serve_app/core/cascade.py", "serve_app/edge/ingress.py"} <= set(modules)
    assert all(
        path.split("/")[0] in ("serve_app", "deployments", "harness", "evaluation") for path in modules
    )
    assert not any("site-packages" in path or path.startswith("loadtest/") for path in modules)
    assert list(modules) == sorted(modules) and all(calls > 0 for calls in modules.values())
    assert result["count"] == len(modules) and result["calls"] == sum(modules.values())
    assert f"| **{result['count']}** |" in "\n".join(scenario.table(result))


def test_a_request_that_skips_the_agreement_check_makes_fewer_calls():
    cascade = modules_run(disagreeing_replica, request_body("sequential"))
    large_alone = modules_run(disagreeing_replica, request_body("large-only"))
    assert (cascade["route"], large_alone["route"]) == ("agree_reasoned", "single")
    assert set(large_alone["modules"]) <= set(cascade["modules"])
    assert large_alone["count"] <= cascade["count"] and large_alone["calls"] < cascade["calls"]
    # Only the cascade compares two answers; one model's answer has its confidence read there too.
    verification = "serve_app/core/verification.py"
    assert large_alone["modules"].get(verification, 0) < cascade["modules"][verification]
    # The values it took: the request validated, its job and decision, the cascade's outcome; only the
    # cascade compares two answers (a verification value).
    for shape in (
        "edge.protocol.ChatRequest",
        "edge.jobs.Job",
        "core.decision.Decision",
        "edge.responses.Answered",
    ):
        assert cascade["shapes"].get(f"serve_app.{shape}", 0) >= 1, (shape, cascade["shapes"])
    assert set(large_alone["shapes"]) <= set(cascade["shapes"]) and large_alone["shapes"] != cascade["shapes"]


def test_calls_are_counted_inside_the_block_only_and_in_threads_it_starts():
    calls: Counter[str] = Counter()
    with calls_counted(calls):
        touch()
        thread = threading.Thread(target=touch)
        thread.start()
        thread.join()
    inside = calls[__file__]
    assert inside >= 2
    touch()
    assert calls[__file__] == inside


def test_only_the_projects_own_modules_are_counted(tmp_path):
    assert project_module(str(ROOT / "serve_app" / "core" / "cascade.py")) == "serve_app/core/cascade.py"
    assert project_module(str(ROOT / "evaluation" / "run.py")) == "evaluation/run.py"
    venv = ROOT / ".venv" / "lib" / "python3.11" / "site-packages" / "serve_app" / "x.py"
    for outside in (
        venv,
        ROOT / "loadtest" / "bench" / "in_process.py",
        ROOT / "tests" / "unit" / "fakes.py",
        tmp_path / "serve_app" / "core" / "cascade.py",
    ):
        assert project_module(str(outside)) is None, outside
    assert project_module("<frozen importlib._bootstrap>") is None
    # Another checkout's modules, when it is the root.
    assert project_module(str(tmp_path / "serve_app" / "a.py"), tmp_path) == "serve_app/a.py"


def test_code_size_reads_serve_app_and_the_largest_module(tmp_path):
    (tmp_path / "serve_app" / "core").mkdir(parents=True)
    (tmp_path / "deployments").mkdir()
    (tmp_path / "serve_app" / "core" / "a.py").write_text("x = 1\n" * 3)
    (tmp_path / "serve_app" / "b.py").write_text("y = 2\n")
    (tmp_path / "deployments" / "c.py").write_text("z = 3\n" * 5)
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "d.py").write_text("w = 4\n" * 9)
    lines = module_lines(tmp_path)
    assert lines == {"serve_app/b.py": 1, "serve_app/core/a.py": 3, "deployments/c.py": 5}
    assert code_size(lines) == {
        "lines_in_serve_app": 4,
        "largest_module": {"path": "deployments/c.py", "lines": 5},
    }


def test_timed_blocks_alternate_in_swapped_pairs_and_are_summarised_per_checkout():
    order = block_order(3)
    assert order == ["before", "after", "after", "before", "before", "after"]
    # Each block: nine requests at its median and one ten times slower (p90 = 1.9 x the median).
    medians_us = {"before": iter([100, 120, 110]), "after": iter([50, 70, 60])}
    blocks = []
    for tree in order:
        median_us = next(medians_us[tree])
        blocks.append((tree, [median_us * 1e-6] * 9 + [median_us * 10e-6]))
    summary = timing_summary(blocks)
    assert [(block["tree"], block["median_us"]) for block in summary["blocks"]] == [
        ("before", 100),
        ("after", 50),
        ("after", 70),
        ("before", 120),
        ("before", 110),
        ("after", 60),
    ]
    assert summary["before"]["median_us"] == {"median": 110, "min": 100, "max": 120, "n": 3}
    assert summary["after"]["p90_us"] == {"median": 114, "min": 95, "max": 133, "n": 3}
    assert summary["after_over_before"] == {"median_us": round(60 / 110, 3), "p90_us": round(114 / 209, 3)}
    # Within each round: 50/100, 70/120, 60/110.
    assert summary["after_over_before_by_round"]["median_us"] == {
        "median": round(60 / 110, 3),
        "min": 0.5,
        "max": round(70 / 120, 3),
        "n": 3,
    }
    assert summary["after_over_before_by_round"]["p90_us"]["median"] == pytest.approx(60 / 110, abs=1e-3)
