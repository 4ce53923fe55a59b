"""answer_cache: what the answer cache costs and saves (docs/cache.md), in process
(loadtest/bench/cache_cost.py) and on the CPU stack (loadtest/bench/cache_stack.py).

python -m loadtest.bench --only answer_cache                     # bench/results/answer_cache.json
python -m loadtest.bench --only answer_cache --param stack=false # the in-process part alone
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cells import cell, percent, percent_cell
from ..scenario import Bench, Scenario

LOG = Path(tempfile.gettempdir()) / "mai-bench-answer-cache.log"
WARM_UP_IN_PROCESS = 50  # requests per arm before the timed blocks
WARM_UP_STACK = 8  # questions asked nowhere else, cache off, before the stack's runs


@dataclass(frozen=True)
class Parameters:
    requests: int = 500  # in process: requests per block
    rounds: int = 6  # in process: blocks per arm, interleaved
    max_bytes: int = 64 * 1024 * 1024  # in process: the store's bound, filled until it evicts
    lookups: int = 2000  # in process: calls timed per lookup kind
    stack: bool = True  # also the real stack's part
    distinct: int = 70  # stack: distinct easy-vqa validation questions per replay run
    repeat_share: float = 0.3  # stack: the share of a replay run's requests that ask again
    concurrency: int = 4  # stack: the replay's clients
    runs: int = 3  # stack: replay runs per arm, interleaved
    burst: int = 20  # stack: identical requests sent at once
    bursts: int = 3  # stack: bursts per arm, interleaved
    sequential: int = 50  # stack: hits timed one at a time, and as many runs with the cache off
    seed: int = 0


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    from ..cache_cost import in_process

    p = parameters
    result: dict[str, Any] = {
        "in_process": in_process(p.requests, p.rounds, WARM_UP_IN_PROCESS, p.max_bytes, p.lookups)
    }
    if p.stack:
        from harness.datasets import easy_vqa_records

        from ..cache_stack import on_stack, repeats_of

        needed = WARM_UP_STACK + p.distinct + p.bursts + 1
        result["stack"] = on_stack(
            list(easy_vqa_records("validation", 2 * needed + 50)),
            distinct=p.distinct,
            repeats=repeats_of(p.distinct, p.repeat_share),
            concurrency=p.concurrency,
            runs=p.runs,
            burst=p.burst,
            bursts_per_arm=p.bursts,
            sequential=p.sequential,
            warm_up_requests=WARM_UP_STACK,
            seed=p.seed,
            log=LOG,
        )
    return result


def _spread(value: dict[str, Any] | None) -> str:
    return "–" if value is None else cell(value)


def _counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in statuses.items())


def _code(text: str | None) -> str:
    """An answer in a table cell: its spaces collapsed, its pipes escaped, as code."""
    return "`" + " ".join(str(text).split()).replace("|", "\\|") + "`"


def _times(ratios: dict[str, float], field: str) -> str:
    return f"{ratios[field]}×" if field in ratios else "–"


def in_process_table(part: dict[str, Any]) -> list[str]:
    latency, memory = part["latency"], part["memory"]
    lines = [
        f"In process: the request_path scenario's `mai` request (three stage calls, scripted models "
        f"answering at once) through one ingress keeping the cache in its memory, `ingress.chat` from the "
        f"parsed body to the answer, {latency['requests_per_block']} requests a block, {latency['rounds']} "
        "blocks per arm, the arms' order rotated each round. Per-request median and p90 in µs: the "
        "median [min–max] over blocks.",
        "",
        "| request | median µs | p90 µs | median / off | p90 / off |",
        "|---|---|---|---|---|",
    ]
    labels = {"hit": "a hit", "refresh": "a run kept (`refresh`)", "off": "a run, cache off (`off`)"}
    for arm, label in labels.items():
        row = latency[arm]
        lines.append(
            f"| {label} | {_spread(row['median_us'])} | {_spread(row['p90_us'])} | "
            f"{row['over_off']['median_us']}× | {row['over_off']['p90_us']}× |"
        )
    mib = memory["max_bytes"] / 2**20
    rss = memory["rss_delta_bytes"]
    rss_text = "–" if rss is None else f"{rss / 2**20:.1f} MiB ({memory['rss_over_max_bytes']}× the bound)"
    lines += [
        "",
        f"The in-process store at its bound of {mib:g} MiB, filled with that answer as the store keeps it "
        f"({memory['entry_value_bytes']} bytes of JSON, {memory['entry_bytes']} counted per entry with "
        f"its name and overhead) until it first evicted: {memory['entries']} entries held, a Python heap "
        f"of {memory['heap_bytes'] / 2**20:.1f} MiB ({memory['heap_over_max_bytes']}× the bound, "
        f"{memory['heap_per_entry_bytes']} bytes per entry, tracemalloc); the process's RSS grew "
        f"{rss_text}.",
    ]
    return lines + lookups_table(part["lookups"])


def lookups_table(lookups: dict[str, Any]) -> list[str]:
    redis = lookups["redis"]
    where = "skipped: " + redis["skipped"] if "skipped" in redis else redis["server"].split(" sha=")[0]
    lines = [
        "",
        f"Lookups of one entry ({lookups['entry_value_bytes']} bytes), one call at a time after a "
        f"warm-up, on the in-process store and on a redis-server on loopback ({where}); a lookup is "
        "the get and the entry's decoding into an answer. p50 and p99 in µs.",
        "",
        "| store | get, kept | get, absent | lookup, kept | calls each | errors |",
        "|---|---|---|---|---|---|",
    ]
    for store in ("memory", "redis"):
        row = lookups[store]
        if "skipped" in row:
            continue
        kinds = ("get_hit", "get_miss", "lookup_decoded")
        cells = " | ".join(f"{row[kind]['p50_us']} / {row[kind]['p99_us']}" for kind in kinds)
        errors = sum(row[kind]["errors"] for kind in kinds)
        lines.append(f"| {store} | {cells} | {row['get_hit']['calls']} | {errors} |")
    return lines


def replay_table(stack: dict[str, Any]) -> list[str]:
    replay = stack["replay"]
    runs = len([run for run in replay["runs"] if run["arm"] == "on"])
    lines = [
        "",
        f"On the real stack (`configs/mai-cpu.yaml` served by `serve run` of its own, the cache in the "
        f"ingress's memory): {stack['distinct']} easy-vqa validation questions and {stack['repeats']} "
        f"requests asking some again, each after its first asking, in a seeded order, at concurrency "
        f"{replay['concurrency']}; cache off (`mai.cache: off` on every request) against cache on, "
        f"emptied before each run; {runs} runs each, the order rotated per repetition. Engine tokens "
        "count the replies that ran (miss, bypass). Median [min–max] over runs.",
        "",
        "| cache | requests/s | p50 s | p99 s | engine tokens | hit | coalesced | miss | bypass | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in ("off", "on"):
        row = replay[arm]
        mine = [run for run in replay["runs"] if run["arm"] == arm]
        counts = " | ".join(
            "/".join(str(run["cache"][status]) for run in mine)
            for status in ("hit", "coalesced", "miss", "bypass")
        )
        lines.append(
            f"| {arm} | {_spread(row['requests_per_s'])} | {_spread(row['p50_s'])} | "
            f"{_spread(row['p99_s'])} | {_spread(row['engine_tokens'])} | {counts} | {row['errors']} |"
        )
    ratios = replay["on_over_off"]
    lines += [
        "",
        f"On over off (medians): requests/s {_times(ratios, 'requests_per_s')}, p50 "
        f"{_times(ratios, 'p50_s')}, p99 {_times(ratios, 'p99_s')}, engine tokens "
        f"{_times(ratios, 'engine_tokens')}. Replies per status are each run's, in order.",
    ]
    lines += identity_lines(replay["identity"])
    pinned = stack.get("pinned")
    if pinned:
        runs = sum(1 for run in pinned["runs"] if run["arm"] == "on")
        lines += [
            "",
            f"The same replay again with every request forcing the plan `sequential` ({runs} runs each "
            "way), so that the server explores no other plan (`adaptive.explore` draws one on a share of "
            "requests, and an explored plan may answer otherwise):",
        ]
        lines += identity_lines(pinned["identity"])
    return lines


def identity_lines(identity: dict[str, Any]) -> list[str]:
    by_status = ", ".join(
        f"{status} {percent(row['identical_share'])} of {row['compared']}"
        for status, row in identity["by_status"].items()
    )
    lines = [
        "",
        f"The answer texts, request by request, each on run against each off run: "
        f"{percent(identity['identical_share'])} byte for byte the same (by the on reply's status: "
        f"{by_status}); the off runs against one another: {percent(identity['off_vs_off_identical_share'])}.",
    ]
    differing = identity["differing"]
    if differing:
        lines += ["", "| request | on run | status | on | off runs |", "|---|---|---|---|---|"]
        for row in differing[:20]:
            off = " / ".join(_code(answer) for answer in row["off"])
            request = f"{row['record']} ({row['question']})"
            lines.append(f"| {request} | {row['on_run']} | {row['cache']} | {_code(row['on'])} | {off} |")
        if len(differing) > 20:
            lines.append(f"\n{len(differing) - 20} more in the result file.")
    return lines


def burst_table(stack: dict[str, Any]) -> list[str]:
    burst, hits = stack["burst"], stack["hit_over_http"]
    lines = [
        "",
        f"A burst of {burst['size']} identical requests sent at once (a question and image asked "
        "nowhere else each time), cache on against `mai.cache: off`, interleaved. Median [min–max] "
        "over bursts.",
        "",
        "| cache | bursts | coalesced | wall s | engine tokens | miss / coalesced / hit per burst | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ("on", "off"):
        row = burst[arm]
        mine = [run for run in burst["runs"] if run["arm"] == arm]
        statuses = ", ".join(
            "/".join(str(run["cache"][s]) for s in ("miss", "coalesced", "hit")) for run in mine
        )
        coalesced = "–" if row["coalesced_share"] is None else percent_cell(row["coalesced_share"])
        lines.append(
            f"| {arm} | {len(mine)} | {coalesced} | {_spread(row['wall_s'])} | "
            f"{_spread(row['engine_tokens'])} | {statuses} | {row['errors']} |"
        )
    hit, off = hits["hit"], hits["off"]
    lines += [
        "",
        f"A hit over HTTP: after one request kept ({hits['first']}), the same request {hit['requests']} "
        f"times one at a time, each followed by it with `mai.cache: off`, client side: hit p50 "
        f"{hit['p50_ms']} ms, p99 {hit['p99_ms']} ms ({_counts(hit['cache'])}); cache off p50 "
        f"{off['p50_ms']} ms, p99 {off['p99_ms']} ms ({_counts(off['cache'])}); a hit's p50 "
        f"{hits.get('hit_over_off_p50', '–')}× a run's.",
    ]
    return lines


def table(result: dict[str, Any]) -> list[str]:
    lines = in_process_table(result["in_process"])
    stack = result.get("stack")
    if stack:
        lines += replay_table(stack) + burst_table(stack)
    return lines


SCENARIO = Scenario(
    name="answer_cache",
    title="What the answer cache costs and saves",
    result="answer_cache.json",
    config="mai-cpu.yaml",  # what its stack part serves, with `serve run` of its own
    run=run,
    table=table,
    parameters=Parameters(),
    needs_ray=False,  # its own `serve run`; the in-process part shares no Ray
)
