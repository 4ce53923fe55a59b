"""Every measured figure in the docs names where it comes from, and says what that file says.

A figure is a decimal number with a unit (ms, s, ×, %, requests/s, req/s, points) in the prose of
README.md, CONTRIBUTING.md or docs/**/*.md (fenced code left out). It must be followed at once by an
HTML comment naming a committed JSON file and a dotted field in it (list indices as integers):

    88.7 %<!-- bench/results/demo-eval/demo.json: policies.mai.accuracy.all -->

and equal that field rounded as written (a share may be written as a percentage or in points,
seconds as milliseconds). A figure with no source, a source that is not there, or a figure that is
not what the source says fails here. The result files themselves must name the command that wrote
them, and bench/RESULTS.md must be what `make bench` renders from them.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.doc_examples import DOC_FILES, ROOT

pytestmark = pytest.mark.unit

RESULTS = ROOT / "bench" / "results"
FIGURE = re.compile(r"(?<![\w.\-])(\d+\.\d+)\s?(ms\b|s\b|×|%|requests/s|req/s|points?\b)")
SOURCE = re.compile(r"<!--\s*(?P<file>[^\s:]+\.json)\s*:\s*(?P<field>.+?)\s*-->")
FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.S | re.M)
SCALES = {"%": (1, 100), "points": (1, 100), "point": (1, 100), "ms": (1, 1000)}


@dataclass(frozen=True)
class Figure:
    written: str
    unit: str
    line: int
    file: str | None  # the source's JSON file, None when no source follows the figure
    field: str | None


def figures(text: str) -> list[Figure]:
    """Every figure in the prose of ``text``, with the source comment right after it, if any."""
    prose = FENCED.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    found = []
    for match in FIGURE.finditer(prose):
        source = SOURCE.match(prose, match.end())
        found.append(
            Figure(
                written=match.group(1),
                unit=match.group(2),
                line=prose.count("\n", 0, match.start()) + 1,
                file=source["file"] if source else None,
                field=source["field"] if source else None,
            )
        )
    return found


def field_value(data: Any, path: str) -> Any:
    """``data`` at the dotted ``path``; a key that holds dots itself is matched whole."""
    if not path:
        return data
    parts = path.split(".")
    for take in range(len(parts), 0, -1):
        key, rest = ".".join(parts[:take]), ".".join(parts[take:])
        if isinstance(data, dict) and key in data:
            try:
                return field_value(data[key], rest)
            except KeyError:
                continue
        if isinstance(data, list) and take == 1 and re.fullmatch(r"-?\d+", key):
            index = int(key)
            if -len(data) <= index < len(data):
                return field_value(data[index], rest)
    raise KeyError(path)


def matches(written: str, unit: str, value: float) -> bool:
    """Whether ``value``, rounded to the figure's decimals (and scaled as its unit allows), is it."""
    decimals = len(written.split(".")[1])
    return any(
        abs(round(value * scale, decimals) - float(written)) < 1e-9 for scale in SCALES.get(unit, (1,))
    )


def check(text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the figures of ``text``: one line per figure without a source, with a
    source that cannot be read, or that differs from its source."""
    problems = []
    for figure in figures(text):
        where = f"line {figure.line}: {figure.written} {figure.unit}"
        if figure.file is None:
            problems.append(f"{where}: no <!-- file.json: field --> source after it")
            continue
        path = root / figure.file
        if not path.is_file():
            problems.append(f"{where}: {figure.file} does not exist")
            continue
        try:
            value = field_value(json.loads(path.read_text()), figure.field)
        except KeyError:
            problems.append(f"{where}: {figure.file} has no field {figure.field!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{where}: {figure.file}: {figure.field} is {value!r}, not a number")
        elif not matches(figure.written, figure.unit, value):
            problems.append(f"{where}: {figure.file}: {figure.field} is {value}")
    return problems


def test_the_checker_finds_sources_and_rounds_as_written(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"a": {"share": 0.8441, "p50_s": 0.00366, "x.y": [9.2, 2]}}))
    text = (
        "right: 84.4 %<!-- r.json: a.share -->, 3.7 ms<!-- r.json: a.p50_s -->, "
        "9.20×<!-- r.json: a.x.y.0 -->\n"
        "wrong: 84.5 %<!-- r.json: a.share -->\n"
        "unsourced: 1.5 s and in code:\n```bash\nsleep 1.5 s\n```\n"
        "missing: 2.0 s<!-- r.json: a.nothing --> and 2.0 s<!-- gone.json: a -->"
    )
    assert [(f.written, f.unit, f.line) for f in figures(text)] == [
        ("84.4", "%", 1),
        ("3.7", "ms", 1),
        ("9.20", "×", 1),
        ("84.5", "%", 2),
        ("1.5", "s", 3),
        ("2.0", "s", 7),
        ("2.0", "s", 7),
    ]
    problems = check(text, tmp_path)
    assert len(problems) == 4, problems
    assert "line 2: 84.5 %" in problems[0] and "is 0.8441" in problems[0]
    assert "line 3: 1.5 s: no" in problems[1]
    assert "no field 'a.nothing'" in problems[2]
    assert "gone.json does not exist" in problems[3]
    assert matches("84.4", "points", 0.844) and matches("3.7", "ms", 0.0037)
    assert not matches("9.28", "×", 9.2) and not matches("3.7", "ms", 0.0038)


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_figure_in_the_docs_says_what_its_source_says(path):
    problems = check(path.read_text(encoding="utf-8"))
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)


# A run's inputs beside its results (mai-eval's dataset manifest and run record), not results.
INPUTS = {"manifest.json", "run.json"}
RESULT_FILES = sorted(path for path in RESULTS.rglob("*.json") if path.name not in INPUTS)


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_every_result_file_names_the_command_and_commit_that_wrote_it(path):
    meta = json.loads(path.read_text()).get("meta", {})
    command = meta.get("command")
    name = path.relative_to(RESULTS).as_posix()
    assert command and command.startswith(("python -m ", "mai-eval ")), f"{name} names no command"
    assert isinstance(meta.get("commit"), str) and len(meta["commit"]) == 40, f"{name}: meta.commit"
    assert isinstance(meta.get("uncommitted_changes"), bool), f"{name}: clean tree or not"


def test_every_scenario_result_names_the_config_and_checkpoints_it_ran():
    from loadtest.bench.scenarios import SCENARIOS

    for scenario in SCENARIOS.values():
        if not scenario.path.exists():
            continue
        meta = json.loads(scenario.path.read_text())["meta"]
        if scenario.config is None:  # deploys nothing: no config, no checkpoints to name
            assert "config" not in meta, f"{scenario.result}: meta.config"
            continue
        assert meta.get("config") == f"configs/{scenario.config}", f"{scenario.result}: meta.config"
        assert meta.get("checkpoints"), f"{scenario.result}: meta.checkpoints"


def test_results_md_is_what_make_bench_renders_from_the_committed_results():
    from loadtest.bench.render import render_report

    committed = (ROOT / "bench" / "RESULTS.md").read_text()
    assert render_report() == committed, "bench/RESULTS.md differs from bench/results: run `make bench`"
