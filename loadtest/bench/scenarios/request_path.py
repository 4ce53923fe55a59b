"""request_path: how plain one request's path is. The project modules whose code runs while an ingress
replica answers one ``mai`` chat request down the paper's cascade (plan ``sequential`` forced): the two
short answers disagree (small "yes", large "no"), the small model's reasoning agrees with the large one
(route ``agree_reasoned``). The replica is built in this process by the product's own factory over
scripted models, so no Ray, proxy or engine code is counted; beside the count, the size of the code.

With ``--param before=<an earlier checkout>`` the same run measures that checkout beside this one, each
in its own process (``side_by_side.py``): both counts and sizes, and the time per request the product's
own code takes, in interleaved blocks (``requests`` requests each, ``blocks`` per checkout; each request
about an image of its own, a new question to the answer cache, which runs the cascade)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.paths import ROOT

from ..cascade_request import EXPECTED_ROUTE, QUESTION, disagreeing_replica, request_body
from ..cells import cell
from ..scenario import Bench, Scenario

# Requests each checkout answers before its first timed block.
WARM_UP_REQUESTS = 200


@dataclass(frozen=True)
class Parameters:
    # An earlier checkout to measure beside this one (a git worktree of it); empty: this one only.
    before: str = ""
    requests: int = 2000  # timed requests per block
    blocks: int = 6  # timed blocks per checkout, interleaved


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    from ..code_path import code_size, module_lines, modules_run

    measured = modules_run(disagreeing_replica, request_body())
    if measured["route"] != EXPECTED_ROUTE:
        raise RuntimeError(
            f"the request took route {measured['route']} (status {measured['status']}), not "
            f"{EXPECTED_ROUTE}: the path measured is not the cascade's"
        )
    lines = module_lines(ROOT)
    result = {
        "request": {"model": "mai", "question": QUESTION, "plan": "sequential", "route": measured["route"]},
        "count": measured["count"],
        "calls": measured["calls"],
        "modules": measured["modules"],
        "shapes": measured["shapes"],
        "lines_in_modules_run": sum(lines.get(path, 0) for path in measured["modules"]),
        **code_size(lines),
    }
    if parameters.before:
        from ..side_by_side import side_by_side

        roots = {"before": Path(parameters.before).resolve(), "after": ROOT}
        result["before_after"] = side_by_side(
            roots, parameters.requests, parameters.blocks, WARM_UP_REQUESTS, EXPECTED_ROUTE
        )
    return result


def by_folder(modules: dict[str, int]) -> dict[str, list[str]]:
    """``name (calls)`` of each module, by its folder."""
    folders: dict[str, list[str]] = defaultdict(list)
    for path, calls in modules.items():
        folder, _, name = path.rpartition("/")
        folders[folder].append(f"{name} ({calls})")
    return dict(folders)


def table(result: dict[str, Any]) -> list[str]:
    largest = result["largest_module"]
    lines = [
        f"One `mai` chat request (a yes/no question, plan `{result['request']['plan']}` forced) whose short "
        f"answers disagree and whose reasoning agrees with the large model (route "
        f"`{result['request']['route']}`), answered by an ingress replica built in process by "
        "`edge.parts.build_parts` over scripted models: the project modules (serve_app, deployments, "
        "harness, evaluation) whose functions ran, after a warm-up request, with the calls into each "
        "(a coroutine's every resumption counts).",
        "",
        "| project modules run | calls | their lines | lines in serve_app | largest module |",
        "|---|---|---|---|---|",
        f"| **{result['count']}** | {result['calls']} | {result['lines_in_modules_run']} | "
        f"{result['lines_in_serve_app']} | `{largest['path']}` ({largest['lines']}) |",
        "",
        "| folder | modules run (calls) |",
        "|---|---|",
    ]
    lines += [
        f"| `{folder}` | {', '.join(names)} |" for folder, names in by_folder(result["modules"]).items()
    ]
    if result.get("shapes"):
        lines += [
            "",
            f"The project types its values took ({len(result['shapes'])}; values returned of each): "
            + shapes_text(result["shapes"])
            + ".",
        ]
    if "before_after" in result:
        lines += before_after_lines(result["before_after"], result["request"]["route"])
    return lines


def shapes_text(shapes: dict[str, int]) -> str:
    return ", ".join(f"`{name.removeprefix('serve_app.')}` ({count})" for name, count in shapes.items())


def commit_text(side: dict[str, Any]) -> str:
    if not side.get("commit"):
        return "–"
    changes = " with uncommitted changes" if side.get("uncommitted_changes") else ""
    return f"`{side['commit'][:10]}`{changes}"


def listed(paths: list[str]) -> str:
    return ", ".join(f"`{path}`" for path in paths) or "none"


def before_after_lines(comparison: dict[str, Any], route: str) -> list[str]:
    """The side-by-side run (``side_by_side.py``): both checkouts' paths and sizes, and their time per
    request, block by block and summarised."""
    trees, modules, timing = comparison["trees"], comparison["modules"], comparison["time_per_request"]
    lines = [
        "",
        "The same request against an earlier checkout (before) and this one (after), each in its own "
        "process importing its own `serve_app`:",
        "",
        "| checkout | commit | project modules run | calls | their lines | lines in serve_app "
        "| largest module |",
        "|---|---|---|---|---|---|---|",
    ]
    for tree in ("before", "after"):
        side = trees[tree]
        largest = side["largest_module"]
        lines.append(
            f"| {tree} | {commit_text(side)} | **{side['count']}** | {side['calls']} | "
            f"{side['lines_in_modules_run']} | {side['lines_in_serve_app']} | "
            f"`{largest['path']}` ({largest['lines']}) |"
        )
    lines += [
        "",
        f"Modules run only before: {listed(modules['only_before'])}. "
        f"Only after: {listed(modules['only_after'])}.",
    ]
    for tree in ("before", "after"):
        shapes = trees[tree].get("shapes")
        if shapes:
            lines += ["", f"Types its values took {tree} ({len(shapes)}): {shapes_text(shapes)}."]
    lines += [
        "",
        f"Time per request in the product's own code: {timing['requests_per_block']} requests, one at a "
        "time, per block through each checkout's in-process ingress over scripted models that answer at "
        f"once, after {timing['warm_up_requests']} warm-up requests; {timing['blocks_per_tree']} blocks per "
        "checkout, interleaved (before, after, after, before, …). Each block's per-request median and p90, "
        "then the median [min–max] over the blocks, in µs; the ratio's spread is over rounds (a block of "
        "each, run next to each other). This stands in for the orchestration overhead section's p50 "
        "added by the cascade, which needs a Ray stack: no proxy, Ray or engine runs here, and the path is "
        f"`{route}`, not the agree path, so the figures compare the two checkouts' code "
        "and not what a served request pays.",
        "",
        "| checkout | per-request median µs | per-request p90 µs | blocks, in run order (median / p90 µs) |",
        "|---|---|---|---|",
    ]
    for tree in ("before", "after"):
        blocks = ", ".join(
            f"{block['median_us']:g} / {block['p90_us']:g}"
            for block in timing["blocks"]
            if block["tree"] == tree
        )
        lines.append(
            f"| {tree} | {cell(timing[tree]['median_us'])} | {cell(timing[tree]['p90_us'])} | {blocks} |"
        )
    ratio, by_round = timing["after_over_before"], timing["after_over_before_by_round"]
    lines.append(
        f"| **after / before** | **{ratio['median_us']}×** (by round {cell(by_round['median_us'])}) | "
        f"{ratio['p90_us']}× (by round {cell(by_round['p90_us'])}) | |"
    )
    return lines


SCENARIO = Scenario(
    name="request_path",
    title="One request's path through the code",
    result="request_path.json",
    run=run,
    table=table,
    parameters=Parameters(),
    needs_ray=False,  # the replica runs in this process; a Ray would only share its CPU
)
