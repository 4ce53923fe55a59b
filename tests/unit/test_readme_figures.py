"""Every measured figure in the README (a decimal number with a unit: ms, s, ×, %, requests/s, points)
is in a committed result file under bench/results, rounded as the README writes it: a README that
quotes a number no run produced fails here."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# Summaries only: per-request rows (predictions, runs) hold so many latencies that any figure would
# match one of them by chance.
SUMMARY_SUFFIXES = (".json", ".md", ".csv")
FIGURE = re.compile(r"(?<![\w.\-])(\d+\.\d+)\s?(ms\b|s\b|×|%|requests/s|req/s|points?\b)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def readme_figures(text: str) -> list[tuple[str, str]]:
    """(number as written, unit) for every decimal figure with a unit, code blocks left out."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return FIGURE.findall(prose)


def result_numbers() -> set[float]:
    numbers: set[float] = set()
    for path in RESULTS.rglob("*"):
        if path.is_file() and path.suffix in SUMMARY_SUFFIXES:
            numbers.update(float(n) for n in NUMBER.findall(path.read_text(errors="replace")))
    return numbers


def in_results(written: str, unit: str, numbers: set[float]) -> bool:
    """Whether some result number, rounded to the README's decimals, is the README's figure (a share
    written as a percentage, seconds written as milliseconds)."""
    decimals = len(written.split(".")[1])
    value = float(written)
    scales = {"%": (1, 100), "ms": (1, 1000), "points": (1, 100), "point": (1, 100)}.get(unit, (1,))
    return any(round(number * scale, decimals) == value for number in numbers for scale in scales)


def test_the_matcher_finds_figures_and_rounds_as_written():
    figures = readme_figures("p50 **3.66 ms**, 81.61 requests/s, 9.28× and 84.4 %; ```x 1.5 s```")
    assert figures == [("3.66", "ms"), ("81.61", "requests/s"), ("9.28", "×"), ("84.4", "%")]
    assert in_results("84.4", "%", {0.8441})
    assert in_results("3.7", "ms", {0.00366})
    assert not in_results("3.7", "ms", {0.0038})
    assert not in_results("9.28", "×", {9.2})


def test_every_figure_in_the_readme_is_in_a_result_file():
    numbers = result_numbers()
    assert numbers, "no result files under bench/results"
    text = (ROOT / "README.md").read_text()
    missing = [f"{n} {u}" for n, u in readme_figures(text) if not in_results(n, u, numbers)]
    assert not missing, f"README figures found in no file under bench/results: {missing}"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_result_file_names_the_command_that_wrote_it(path):
    result = json.loads(path.read_text())
    # Fuzz reports written before they had a meta keep the command at the top.
    command = result.get("meta", {}).get("command") or result.get("command")
    assert command and command.startswith("python -m loadtest."), f"{path.name} names no command"


def test_benchmark_results_name_the_commit_config_and_checkpoints_they_ran():
    from loadtest.bench import RESULT_FILES

    for name in RESULT_FILES.values():
        path = RESULTS / f"{name}.json"
        if not path.exists():
            continue
        meta = json.loads(path.read_text())["meta"]
        assert meta.get("commit") and meta.get("config") and meta.get("checkpoints"), f"{name}.json meta"
        assert isinstance(meta.get("uncommitted_changes"), bool), f"{name}.json: clean tree or not"


def test_the_readme_tables_make_bench_writes_match_the_committed_results():
    from loadtest.bench_report import readme_blocks, replace_blocks

    text = (ROOT / "README.md").read_text()
    blocks = readme_blocks()
    assert blocks, "no result file for any README table"
    for name in blocks:
        assert f"<!-- figures:{name} -->" in text, f"README has no block for bench/results/{name}.json"
    assert replace_blocks(text, blocks) == text, "README tables differ from bench/results: run `make bench`"


def test_a_block_is_replaced_between_its_markers_only():
    from loadtest.bench_report import replace_blocks

    text = "a\n<!-- figures:x -->\nold\n<!-- /figures:x -->\nb <!-- figures:y -->"
    assert replace_blocks(text, {"x": "new", "z": "other"}) == (
        "a\n<!-- figures:x -->\nnew\n<!-- /figures:x -->\nb <!-- figures:y -->"
    )
