"""Two checkouts measured side by side: the one being changed (after) and an earlier one (before), each
in its own process with its own ``serve_app`` (``tree_worker.py``), so that one run of the request_path
scenario says what a change did to one request's path: the project modules it runs through, the size
of the code, and the time per request the product's own code takes.

The timed blocks interleave (before, after, after, before, ...) so that drift on a shared machine
falls on both checkouts alike; each block's per-request median and p90 are summarised as the median
over blocks with its min and max, and the ratio of after's to before's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

from harness.driver import percentile
from harness.provenance import git_commit

from .code_path import code_size, module_lines
from .schedule import rotated
from .summary import spread

TREES = ("before", "after")
# The package name this folder's measuring modules take in a worker (an earlier checkout has none).
PACKAGE = "tree_bench"
BENCH_DIR = Path(__file__).resolve().parent


def bootstrap(bench_dir: Path = BENCH_DIR) -> str:
    """The ``python -c`` program of a worker: ``bench_dir`` as the package ``tree_bench``, then its
    ``tree_worker.serve``."""
    return (
        "import sys, types\n"
        f"package = types.ModuleType({PACKAGE!r})\n"
        f"package.__path__ = [{str(bench_dir)!r}]\n"
        f"sys.modules[{PACKAGE!r}] = package\n"
        f"from {PACKAGE}.tree_worker import serve\n"
        "serve()\n"
    )


class TreeWorker:
    """A worker process whose ``serve_app`` is ``root``'s: started with ``root`` as its directory and
    its only PYTHONPATH entry, which come before the editable install's finder."""

    def __init__(self, root: Path, errors: IO[str]) -> None:
        self.root, self.errors = root, errors
        environment = {**os.environ, "PYTHONPATH": str(root)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", bootstrap()],
            cwd=root,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )

    def ask(self, command: Mapping[str, Any]) -> Any:
        """The worker's answer to ``command``; its stderr's end when it died instead."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            self.errors.seek(0)
            tail = self.errors.read()[-3000:]
            raise RuntimeError(f"the worker in {self.root} stopped ({self.process.returncode}):\n{tail}")
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()  # the worker's end of input: it exits
        self.process.wait(timeout=60)
        self.process.stdout.close()


@contextmanager
def tree_workers(roots: Mapping[str, Path]) -> Iterator[dict[str, TreeWorker]]:
    """A worker per named checkout, ended when the block ends."""
    with ExitStack() as stack:
        workers = {}
        for name, root in roots.items():
            errors = stack.enter_context(tempfile.TemporaryFile("w+"))
            workers[name] = TreeWorker(root, errors)
            stack.callback(workers[name].close)
        yield workers


def block_order(blocks: int) -> list[str]:
    """The checkouts in the order their timed blocks run, ``blocks`` each: a pair a round, the pair's
    order swapped from one round to the next (before, after, after, before, ...)."""
    return [tree for round_ in range(blocks) for tree in rotated(TREES, round_)]


def block_quantiles(seconds: Sequence[float]) -> dict[str, float]:
    """One block's per-request median and p90, in microseconds."""
    return {
        "median_us": round(percentile(seconds, 0.5) * 1e6, 1),
        "p90_us": round(percentile(seconds, 0.9) * 1e6, 1),
    }


QUANTILES = ("median_us", "p90_us")


def timing_summary(blocks: Sequence[tuple[str, Sequence[float]]]) -> dict[str, Any]:
    """From the timed blocks in the order they ran (checkout, seconds per request): each block's
    quantiles; per checkout, each quantile's median over its blocks with the min and max; after's
    median over before's; and that ratio within each round (the two blocks run next to each other),
    as a median with its min and max."""
    per_block = [{"tree": tree, **block_quantiles(seconds)} for tree, seconds in blocks]
    summary: dict[str, Any] = {"blocks": per_block}
    for tree in TREES:
        mine = [block for block in per_block if block["tree"] == tree]
        summary[tree] = {quantile: spread([block[quantile] for block in mine], 1) for quantile in QUANTILES}
    summary["after_over_before"] = {
        quantile: round(summary["after"][quantile]["median"] / summary["before"][quantile]["median"], 3)
        for quantile in QUANTILES
    }
    rounds = [per_block[start : start + 2] for start in range(0, len(per_block) - 1, 2)]
    summary["after_over_before_by_round"] = {
        quantile: spread([ratio_in_round(pair, quantile) for pair in rounds], 3) for quantile in QUANTILES
    }
    return summary


def ratio_in_round(pair: Sequence[Mapping[str, Any]], quantile: str) -> float:
    """After's ``quantile`` over before's, in a round of one block each."""
    values = {block["tree"]: block[quantile] for block in pair}
    return values["after"] / values["before"]


def module_difference(before: Iterable[str], after: Iterable[str]) -> dict[str, list[str]]:
    """The modules run only before, and only after (a moved module is in both lists)."""
    before, after = set(before), set(after)
    return {"only_before": sorted(before - after), "only_after": sorted(after - before)}


def tree_record(measured: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """One checkout's side: its commit, the modules its request ran through, the size of its code."""
    lines = module_lines(root)
    return {
        "root": str(root),
        **git_commit(root),
        "count": measured["count"],
        "calls": measured["calls"],
        "modules": measured["modules"],
        "shapes": measured.get("shapes", {}),
        "lines_in_modules_run": sum(lines.get(path, 0) for path in measured["modules"]),
        **code_size(lines),
    }


def side_by_side(
    roots: Mapping[str, Path], requests: int, blocks: int, warm_up: int, expected_route: str
) -> dict[str, Any]:
    """Both checkouts (``roots``: before and after) measured in one run: each one's modules run and
    code size, then ``warm_up`` requests each, then ``blocks`` timed blocks of ``requests`` requests
    each, interleaved (``block_order``)."""
    if requests < 1 or blocks < 1:
        raise ValueError(f"requests ({requests}) and blocks ({blocks}) must be at least 1")
    with tree_workers(roots) as workers:
        counts = {tree: workers[tree].ask({"count": True}) for tree in TREES}
        for tree, measured in counts.items():
            check_measured(tree, measured, roots[tree], expected_route)
        for tree in TREES:
            workers[tree].ask({"time": warm_up})
        timed = [(tree, workers[tree].ask({"time": requests})) for tree in block_order(blocks)]
    return {
        "trees": {tree: tree_record(counts[tree], roots[tree]) for tree in TREES},
        "modules": module_difference(counts["before"]["modules"], counts["after"]["modules"]),
        "time_per_request": {
            "requests_per_block": requests,
            "blocks_per_tree": blocks,
            "warm_up_requests": warm_up,
            **timing_summary(timed),
        },
    }


def check_measured(tree: str, measured: Mapping[str, Any], root: Path, expected_route: str) -> None:
    """Fail unless the worker imported ``root``'s ``serve_app`` and its request took the cascade's
    path: a figure of another checkout, or of another path, would say nothing about the change."""
    if not Path(measured["serve_app"]).resolve().is_relative_to(root.resolve()):
        raise RuntimeError(f"the {tree} worker imported serve_app from {measured['serve_app']}, not {root}")
    if measured["route"] != expected_route:
        raise RuntimeError(
            f"the {tree} request took route {measured['route']} (status {measured['status']}), "
            f"not {expected_route}"
        )
