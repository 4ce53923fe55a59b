"""Every result file under bench/results is rendered into bench/RESULTS.md or reached from it by links.

A JSON file is reached when RESULTS.md renders it (a section's ``Source: `bench/results/...``` line),
or when RESULTS.md, or a markdown page RESULTS.md links to (and so on, through pages), links to the
file itself or to the page of the same name beside it (``results.md`` beside ``results.json``: what
mai-eval, demo_eval, the calibration and the matcher report write together). A JSON file without a
``meta`` (a run's dataset manifest or run record) belongs to the result beside it: reached with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.doc_examples import ROOT

RESULTS = ROOT / "bench" / "results"
REPORT = ROOT / "bench" / "RESULTS.md"
SOURCE = re.compile(r"^Source: `bench/results/([^`]+)`", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def rendered(report: Path, results: Path) -> set[Path]:
    """The result files ``report`` renders: the files its sections' Source lines name."""
    return {(results / name).resolve() for name in SOURCE.findall(report.read_text(encoding="utf-8"))}


def linked(report: Path, root: Path) -> set[Path]:
    """Every file under ``root`` a link reaches from ``report``, following the markdown pages linked."""
    reached: set[Path] = set()
    pages, seen = [report.resolve()], set()
    while pages:
        page = pages.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            target = target.split("#", 1)[0]
            if not target or ":" in target:  # an anchor on the page, or a URL
                continue
            path = (page.parent / target).resolve()
            if not path.is_relative_to(root.resolve()):
                continue
            reached.add(path)
            if path.suffix == ".md" and path.is_file():
                pages.append(path)
    return reached


def unreached(report: Path, results: Path, root: Path) -> list[str]:
    """The JSON files under ``results`` neither rendered into ``report`` nor reached by its links."""
    by_link = linked(report, root)
    reached = (
        rendered(report, results)
        | {path.with_suffix(".json") for path in by_link if path.suffix == ".md"}
        | by_link
    )
    files = sorted(path.resolve() for path in results.rglob("*.json"))
    results_with_meta = {path for path in files if "meta" in json.loads(path.read_text())}
    reached_folders = {path.parent for path in results_with_meta & reached}
    return [
        path.relative_to(results.resolve()).as_posix()
        for path in files
        if path not in reached and not (path not in results_with_meta and path.parent in reached_folders)
    ]


def result(path: Path, meta: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"value": 1} | ({"meta": {"command": "x"}} if meta else {})))


def test_the_check_finds_a_result_neither_rendered_nor_linked(tmp_path):
    results = tmp_path / "bench" / "results"
    report = tmp_path / "bench" / "RESULTS.md"
    for name in ("shown.json", "eval/results.json", "deep/detail.json", "orphan.json", "lost/results.json"):
        result(results / name)
    result(results / "eval" / "manifest.json", meta=False)  # a run record beside its result
    result(results / "lost" / "run.json", meta=False)
    (results / "eval" / "results.md").write_text("mai-eval's tables\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("See [it](../bench/results/deep/detail.json).\n")
    (tmp_path / "elsewhere.md").write_text("[outside](../../x.md) [web](https://example.com/a.md)\n")
    report.write_text(
        "## Shown\n\nSource: `bench/results/shown.json`. Command: `x`.\n\n"
        "The report: [eval/results.md](results/eval/results.md); more in [page](../docs/page.md#part), "
        "[elsewhere](../elsewhere.md), [here](#shown).\n"
    )
    assert unreached(report, results, tmp_path) == ["lost/results.json", "lost/run.json", "orphan.json"]
    report.write_text(report.read_text() + "\nSource: `bench/results/orphan.json`.\n")
    assert unreached(report, results, tmp_path) == ["lost/results.json", "lost/run.json"]


def test_every_result_file_is_rendered_into_or_linked_from_results_md():
    missing = unreached(REPORT, RESULTS, ROOT)
    assert not missing, (
        f"bench/RESULTS.md neither renders nor links (directly or through a linked page): {missing}; "
        "give each a section (loadtest/bench/scenarios, external.py or evaluations.py) or a link to the "
        "page that renders it"
    )
