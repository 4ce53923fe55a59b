"""The bench's runner and command line without Ray: the rotated order, parameters as data and their
overrides, the command a result records, the one writer and its flat provenance, the report's
sections, and the package's imports running one way."""

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.provenance import provenance
from harness.results import write_result
from loadtest.bench import render
from loadtest.bench.cli import main, parse_overrides
from loadtest.bench.runner import command_of, parameters_record, run_scenarios
from loadtest.bench.scenario import Scenario
from loadtest.bench.scenarios import SCENARIOS
from loadtest.bench.schedule import rotated, run_order
from loadtest.bench.summary import compare, spread

PACKAGE = Path(__file__).resolve().parents[2] / "loadtest" / "bench"


@dataclass(frozen=True)
class Knobs:
    repetitions: int = 3
    rate: float = 0.5
    warm: bool = True
    label: str = "x"
    sizes: tuple[int | None, ...] = (None, 32)


def scenario(name: str = "demo", result: str = "nowhere/never.json") -> Scenario:
    return Scenario(
        name=name, title="Demo", result=result, table=lambda r: [str(r["value"])], parameters=Knobs()
    )


def test_each_repetition_runs_every_arm_once_in_an_order_rotated_by_one():
    order = run_order(("a", "b", "c"), (1, 8), 3)
    assert [arm for rep, c, arm in order if rep == 0 and c == 8] == ["a", "b", "c"]
    assert [arm for rep, c, arm in order if rep == 1 and c == 1] == ["b", "c", "a"]
    assert [arm for rep, c, arm in order if rep == 2 and c == 1] == ["c", "a", "b"]
    assert rotated((True, False), 3) == [False, True]
    assert rotated((), 2) == []


def test_overrides_are_typed_by_the_parameters_defaults():
    configured = scenario().configured(
        {"repetitions": "5", "rate": "0.25", "warm": "false", "label": "y", "sizes": "none,16"}
    )
    assert configured == Knobs(repetitions=5, rate=0.25, warm=False, label="y", sizes=(None, 16))
    with pytest.raises(ValueError, match="repetitions=x: expected an integer"):
        scenario().configured({"repetitions": "x"})
    with pytest.raises(ValueError, match="expected true or false"):
        scenario().configured({"warm": "maybe"})


def test_an_override_no_chosen_scenario_has_is_refused_and_others_are_left_alone():
    autoscaling, affinity = SCENARIOS["autoscaling"], SCENARIOS["affinity"]
    (policies,) = autoscaling.each({"variant": "policies"})
    with pytest.raises(ValueError, match="--param eager_requests: no parameter of that name in autoscaling"):
        parse_overrides(["eager_requests=3"], [autoscaling])
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_overrides(["questions"], [affinity])
    with pytest.raises(ValueError, match="variant=nope: affinity has emulated, cache"):
        parse_overrides(["variant=nope"], [affinity])
    overrides = parse_overrides(["questions=3", "repetitions=5", "variant=cache"], [affinity])
    (cache,) = affinity.each(overrides)
    assert cache.configured(overrides).questions == 3
    assert policies.configured(overrides).repetitions == 5
    # The command a result records is the one that reruns it: only the overrides it took.
    assert command_of(policies, overrides) == (
        "python -m loadtest.bench --only autoscaling --param variant=policies --param repetitions=5"
    )
    assert command_of(cache, overrides) == (
        "python -m loadtest.bench --only affinity --param variant=cache"
        " --param questions=3 --param repetitions=5"
    )
    assert [one.variant for one in affinity.each()] == ["emulated", "cache"]


def test_the_command_line_refuses_what_it_cannot_run(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--only", "autoscaling,nope"])
    assert exit.value.code == 2 and "unknown scenario(s): nope" in capsys.readouterr().err
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(f"bench/results/{one.result}" in listed for s in SCENARIOS.values() for one in s.each())


def test_every_scenario_is_data_with_its_own_result_file():
    results = [s.result for s in render.sections()]
    assert len(results) == len(set(results)), "two sections render the same file"
    for name, family in SCENARIOS.items():
        # config None: the scenario deploys nothing (config_check reads every shipped config, stats_scale
        # simulates in process, replica_starts reads a past Ray session's logs)
        for s in family.each():
            assert (
                s.name == name
                and s.runnable
                and s.config in ("mai-cpu.yaml", "mai-cpu-mixed.yaml", "mai-emulated.yaml", None)
            )
            assert (s.variant is None) == (s is family) and not s.variants
            json.dumps(parameters_record(s.parameters))  # JSON-ready
    deploying_nothing = [name for name, s in SCENARIOS.items() if s.config is None]
    expected = ["request_path", "stats_scale", "config_check", "replica_starts"]
    assert deploying_nothing == expected


def test_the_scenarios_that_need_no_ray_run_without_starting_it(tmp_path, monkeypatch):
    def no_ray(**kwargs):
        raise AssertionError("a local Ray was started")

    monkeypatch.setattr("harness.local_server.local_ray", no_ray)
    apart = Scenario(
        name="apart",
        title="Apart",
        result="apart/apart.json",
        table=lambda r: [],
        run=lambda bench, parameters: {"url": bench.url, "repetitions": parameters.repetitions},
        parameters=Knobs(),
        needs_ray=False,
    )
    written = run_scenarios([apart], {"repetitions": "5"}, tmp_path)
    result = json.loads(written[0].read_text())
    assert written == [tmp_path / "apart" / "apart.json"]
    assert result["url"] == "" and result["repetitions"] == 5
    assert result["meta"]["command"] == "python -m loadtest.bench --only apart --param repetitions=5"
    assert "config" not in result["meta"]
    on_ray = Scenario(name="on_ray", title="On Ray", result="r.json", table=lambda r: [], run=apart.run)
    with pytest.raises(AssertionError, match="a local Ray was started"):
        run_scenarios([apart, on_ray], {}, tmp_path)


def test_a_run_of_every_scenario_leaves_out_those_that_read_another_runs_logs(tmp_path, monkeypatch):
    chosen = []
    monkeypatch.setattr(
        "loadtest.bench.runner.run_scenarios", lambda scenarios, *args, **kwargs: chosen.extend(scenarios)
    )
    assert main(["--out", str(tmp_path)]) == 0
    names = [s.name for s in chosen]
    assert "replica_starts" not in names
    assert names == [name for name, s in SCENARIOS.items() if s.in_full_run] and "stats_scale" in names
    chosen.clear()
    assert main(["--only", "replica_starts", "--out", str(tmp_path)]) == 0
    assert [s.name for s in chosen] == ["replica_starts"]


def test_the_writer_puts_the_flat_provenance_last_and_refuses_a_meta_without_its_command(tmp_path):
    meta = provenance("python -m loadtest.bench --only autoscaling", config="mai-emulated.yaml", started=0.0)
    assert isinstance(meta["commit"], str) and isinstance(meta["uncommitted_changes"], bool)
    assert meta["config"] == "configs/mai-emulated.yaml" and "small" in meta["checkpoints"]
    assert meta["started"] == "1970-01-01T00:00:00Z" and meta["duration_s"] > 0
    path = write_result(tmp_path / "a" / "b.json", {"value": 1, "meta": {"stale": True}}, meta)
    written = json.loads(path.read_text())
    assert list(written) == ["value", "meta"] and written["meta"] == meta
    assert path.read_text().endswith("}\n")
    with pytest.raises(ValueError, match="command"):
        write_result(tmp_path / "c.json", {}, {"commit": "abc"})


def test_a_section_renders_its_table_and_provenance_or_says_how_to_run_it(tmp_path, monkeypatch):
    missing = scenario()
    assert render.section(missing) == [
        "## Demo",
        "",
        "Not run yet: `python -m loadtest.bench --only demo`.",
        "",
    ]
    monkeypatch.setattr("loadtest.bench.scenario.RESULTS", tmp_path)
    meta = {
        "command": "python -m loadtest.bench --only demo",
        "commit": "0123456789abcdef",
        "duration_s": 2.0,
    }
    write_result(tmp_path / "demo.json", {"value": 42}, meta)
    lines = render.section(scenario(result="demo.json"))
    assert lines[2] == "42"
    assert lines[4] == (
        "Source: `bench/results/demo.json`. Command: `python -m loadtest.bench --only demo` — 2.0 s. "
        "Commit 0123456789."
    )
    gone = {"command": "python -m loadtest.old_bench", "commit": "0123456789abcdef"}
    gone |= {"command_note": "It is gone.", "command_now": "python -m loadtest.bench --only demo"}
    assert render.provenance_line({"meta": gone}, "demo.json") == (
        "Source: `bench/results/demo.json`. Command: `python -m loadtest.old_bench`. Commit 0123456789. "
        "It is gone. Nearest now: `python -m loadtest.bench --only demo`."
    )


def test_medians_with_spread_and_on_off_ratios():
    assert spread([3, 1, 2, None]) == {"median": 2, "min": 1, "max": 3, "n": 3}
    assert spread([None]) is None
    runs = {
        "0": [{"p50_s": 1.0, "errors": 0}, {"p50_s": 3.0, "errors": 1}],
        "0.5": [{"p50_s": 4.0, "errors": 2}],
    }
    summary = compare(runs, "0", "0.5", ("p50_s", "errors"))
    assert summary["0"]["p50_s"] == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert summary["ratios"] == {"p50_s": 2.0}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_bench_package_imports_run_one_way():
    """Scenarios use the libraries; the libraries never reach back up to the scenarios, the runner,
    the report or the command line (the cycle bench.py and autoscaling_bench.py once had)."""
    top = {"cli", "runner", "render", "scenarios"}
    for path in PACKAGE.glob("*.py"):
        if path.stem in top | {"__init__", "__main__"}:
            continue
        reached = {name.lstrip(".").split(".")[0] for name in _imports(path) if name.startswith(".")}
        assert not reached & top, f"loadtest/bench/{path.name} imports {reached & top}"
    for path in (PACKAGE / "scenarios").glob("*.py"):
        reached = {name for name in _imports(path) if name.startswith("..")}
        assert not {name.strip(".").split(".")[0] for name in reached} & {"cli", "runner", "render"}
        assert not any(name.startswith("loadtest.bench") for name in _imports(path)), path.name
