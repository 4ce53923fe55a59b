"""bench/RESULTS.md marks a result run on something main no longer is: uncommitted changes, a commit
whose product code (serve_app/, deployments/) differs from HEAD's, a changed config or demo checkpoint;
"unknown" when this clone cannot tell."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from harness.paths import ROOT
from loadtest.bench import render
from loadtest.bench.scenario import Scenario

pytestmark = pytest.mark.unit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CLEAN = {"commit": COMMIT, "uncommitted_changes": False}
DIGESTS = {"configs/mai-cpu.yaml": "c0ffee", "models/demo-small/model.safetensors": "5ma11"}


def digest(path: str, length: int) -> str | None:
    return DIGESTS.get(path)


def reasons(meta, differs=False):
    return render.stale_reasons(meta, differs=lambda commit: differs, digest=digest)


def test_a_result_of_main_as_it_is_is_not_marked():
    served = {"config": "configs/mai-cpu.yaml", "config_sha256": "c0ffee"}
    checkpoints = {"small": "./models/demo-small@5ma11", "large": "emulated: no weights (named x)"}
    assert reasons(CLEAN | served | {"checkpoints": checkpoints | {"hub": "Qwen/Qwen3-VL-2B"}}) == []


def test_each_difference_is_named():
    assert reasons(CLEAN | {"uncommitted_changes": True}) == ["run with uncommitted changes"]
    assert reasons(CLEAN, differs=True) == [
        "the product code (serve_app/, deployments/) at 0123456789 differs from HEAD's"
    ]
    assert reasons(CLEAN | {"config": "configs/mai-cpu.yaml", "config_sha256": "0ld"}) == [
        "`configs/mai-cpu.yaml` differs from the one it ran (0ld)"
    ]
    # A checkpoint HEAD does not commit (made locally) has nothing to be compared with.
    retrained = {"checkpoints": {"small": "./models/demo-small@0ld", "large": "./models/local@1"}}
    assert reasons(CLEAN | retrained) == [
        "small checkpoint ./models/demo-small@0ld differs from the committed @5ma11",
    ]


def test_a_commit_this_clone_lacks_is_unknown_not_current():
    assert reasons(CLEAN, differs=None) == [
        "unknown whether the product code (serve_app/, deployments/) differs: "
        "0123456789 is not in this clone's history"
    ]
    assert "names no commit" in reasons({"uncommitted_changes": False})[0]


def test_git_tells_whether_a_commit_s_product_differs_from_head_and_what_head_commits():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    differs = render.product_differs([head.stdout.strip(), COMMIT])
    assert differs(head.stdout.strip()) is False
    assert differs(COMMIT) is None  # no such commit: unknown
    assert differs("never-asked") is None
    committed = subprocess.run(["git", "show", "HEAD:pyproject.toml"], cwd=ROOT, capture_output=True).stdout
    assert render.committed_digest("pyproject.toml", 16) == hashlib.sha256(committed).hexdigest()[:16]
    assert render.committed_digest("models/never-committed/model.safetensors", 16) is None


def test_the_section_shows_a_stale_line(tmp_path, monkeypatch):
    monkeypatch.setattr("loadtest.bench.scenario.RESULTS", tmp_path)
    (tmp_path / "demo.json").write_text(
        '{"value": 1, "meta": {"command": "python -m loadtest.bench --only demo", '
        f'"commit": "{COMMIT}", "uncommitted_changes": true}}}}'
    )
    demo = Scenario(
        name="demo", title="Demo", result="demo.json", table=lambda result: [str(result["value"])]
    )
    lines = render.section(demo, differs=lambda commit: True)
    assert lines[-2] == (
        "Stale: run with uncommitted changes; "
        "the product code (serve_app/, deployments/) at 0123456789 differs from HEAD's."
    )
    (tmp_path / "demo.json").write_text(
        '{"value": 1, "meta": {"command": "python -m loadtest.bench --only demo", '
        f'"commit": "{COMMIT}", "uncommitted_changes": false}}}}'
    )
    current = render.section(demo, differs=lambda commit: False)
    assert current[-2].startswith("Source:") and not any(line.startswith("Stale:") for line in current)
