"""From predictions to the paper's tables: per policy the dataset's metric, the route shares
(Table 10), completion tokens per model and prompt kind (Table 5), wall time, requests/s, p50/p99
and the speedup against a baseline (Tables 11 and 12). Written as Markdown, CSV, JSON and a plot."""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.driver import percentile
from harness.results import write_result
from serve_app.core.prompts import PromptKind
from serve_app.core.roles import ROLES
from serve_app.core.routes import ANSWERED

from .records import EvalRecord
from .scoring import dataset_metrics


def summarize_policy(
    policy: str,
    records: Sequence[EvalRecord],
    rows: Mapping[str, dict[str, Any]],
    segments: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """One policy's figures. Records without an answer (never asked, or failed) score 0 in the
    metric, as an evaluator would count them, and are reported as ``missing``/``errors``."""
    answered = [rows[r.id] for r in records if r.id in rows and rows[r.id]["status"] == 200]
    errors = sum(1 for r in records if r.id in rows and rows[r.id]["status"] != 200)
    predictions = [
        rows[r.id]["answer"] if r.id in rows and rows[r.id]["status"] == 200 else None for r in records
    ]
    metrics = dataset_metrics(predictions, [r.model_dump() for r in records])

    routes = Counter(row.get("route") for row in answered)
    calls: dict[str, dict[str, list[int]]] = {role: defaultdict(list) for role in ROLES}
    per_request = dict.fromkeys(ROLES, 0)
    # Prompt tokens and, of them, served from the prefix cache, over the calls whose engine reported it.
    cache: dict[str, dict[str, list[int]]] = {role: defaultdict(lambda: [0, 0]) for role in ROLES}
    for row in answered:
        for stage in row.get("stages", []):
            if stage.get("model") in calls:
                per_request[stage["model"]] += stage.get("completion_tokens") or 0
                if stage.get("status") == "ok":
                    calls[stage["model"]][stage["prompt_kind"]].append(stage.get("completion_tokens") or 0)
                    if stage.get("cached_tokens") is not None and stage.get("prompt_tokens"):
                        counts = cache[stage["model"]][stage["prompt_kind"]]
                        counts[0] += stage["cached_tokens"]
                        counts[1] += stage["prompt_tokens"]
    transfers = [
        row["transfer"] for row in answered if row.get("transfer") and not row["transfer"].get("error")
    ]
    latencies = [row["latency_s"] for row in answered]
    wall = sum(segment["wall_s"] for segment in segments)
    timed_requests = sum(segment["requests"] for segment in segments)
    n = len(answered)
    return {
        "policy": policy,
        "records": len(records),
        "answered": n,
        "errors": errors,
        "missing": len(records) - n - errors,
        "metrics": metrics,
        "routes": {route: routes[route] for route in sorted(routes, key=str)},
        "route_shares": {route: routes[route] / n for route in sorted(routes, key=str)} if n else {},
        "tokens_per_call": {
            model: {kind: sum(values) / len(values) for kind, values in sorted(kinds.items())}
            for model, kinds in calls.items()
        },
        # Share of the prompt tokens the engines served from their prefix cache, by model and prompt kind.
        "cached_share_per_call": {
            model: {kind: cached / prompt for kind, (cached, prompt) in sorted(kinds.items())}
            for model, kinds in cache.items()
        },
        "calls_per_request": {
            model: {kind: len(values) / n for kind, values in sorted(kinds.items())}
            for model, kinds in calls.items()
        }
        if n
        else {},
        "completion_tokens_per_request": {model: total / n for model, total in per_request.items()}
        if n
        else {},
        # Table 9's Avg. #T: reasoning tokens the large model read per transfer, before and after selection
        "transfers": len(transfers),
        "transferred_tokens_mean": sum(t["tokens_after"] for t in transfers) / len(transfers)
        if transfers
        else None,
        "reasoning_tokens_mean": sum(t["tokens_before"] for t in transfers) / len(transfers)
        if transfers
        else None,
        "transfer_selectors": sorted({t["selector"] for t in transfers}),
        # Answers no stage gave in kind, asked once more in their form (the trace's repair)
        "repairs": sum(1 for row in answered if row.get("repair")),
        "wall_s": wall,
        "segments": len(segments),
        "requests_per_s": timed_requests / wall if wall > 0 else None,
        "latency_mean_s": sum(latencies) / n if n else None,
        "latency_p50_s": percentile(latencies, 0.5) if n else None,
        "latency_p99_s": percentile(latencies, 0.99) if n else None,
        "latency_sum_s": sum(latencies),
    }


def add_speedups(summaries: dict[str, dict[str, Any]], baseline: str | None) -> None:
    """``speedup``: the baseline's wall time over the policy's (Table 11's total time, measured);
    ``latency_speedup``: the same over the summed request latencies (Table 11's sequential bound)."""
    base = summaries.get(baseline) if baseline else None
    for summary in summaries.values():
        summary["baseline"] = baseline if base else None
        summary["speedup"] = _ratio(base["wall_s"], summary["wall_s"]) if base else None
        summary["latency_speedup"] = _ratio(base["latency_sum_s"], summary["latency_sum_s"]) if base else None


def _share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _ratio(a: float, b: float) -> float | None:
    return a / b if a and b else None


def _interval(bounds: Sequence[float] | None) -> str:
    return f"{_fmt(bounds[0], 1)}–{_fmt(bounds[1], 1)}" if bounds else "–"


def _fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}{suffix}"


def markdown(summaries: Mapping[str, dict[str, Any]], meta: Mapping[str, Any]) -> str:
    first = next(iter(summaries.values()))
    extra = [
        name for name in ("accuracy", "precision", "recall", "f1", "yes_ratio") if name in first["metrics"]
    ]
    lines = [
        f"# Evaluation: {meta['dataset']}",
        "",
        f"{first['records']} records; server {meta['url']}; concurrency {meta['concurrency']}. "
        f"Speedup = wall time of `{meta['baseline']}` / wall time of the policy, policies run one after "
        "another.",
        "",
        "## Accuracy and speed (Tables 10–12)",
        "",
        "| policy | score % | 95 % CI | "
        + "".join(f"{name} % | " for name in extra)
        + "answered | errors | wall s | requests/s | p50 s | p99 s | speedup | latency-sum speedup |",
        "|---|---|---|" + "---|" * len(extra) + "---|---|---|---|---|---|---|---|",
    ]
    for s in summaries.values():
        lines.append(
            f"| {s['policy']} | {_fmt(s['metrics']['score'], 1)} | "
            f"{_interval(s['metrics'].get('score_95ci'))} | "
            + "".join(f"{_fmt(s['metrics'][name], 1)} | " for name in extra)
            + f"{s['answered']} | {s['errors']} | {_fmt(s['wall_s'], 1)} | {_fmt(s['requests_per_s'])} | "
            f"{_fmt(s['latency_p50_s'], 3)} | {_fmt(s['latency_p99_s'], 3)} | {_fmt(s['speedup'], 2, '×')} | "
            f"{_fmt(s['latency_speedup'], 2, '×')} |"
        )
    lines += [
        "",
        "## Routes (Table 10: MV S/S, MV R/S, RT)",
        "",
        "| policy | " + " | ".join(ANSWERED) + " | other |",
        "|---|" + "---|" * (len(ANSWERED) + 1),
    ]
    for s in summaries.values():
        other = sum(count for route, count in s["routes"].items() if route not in ANSWERED)
        cells = [
            f"{s['routes'].get(route, 0)} ({100 * s['route_shares'].get(route, 0):.1f}%)"
            for route in ANSWERED
        ]
        lines.append(f"| {s['policy']} | " + " | ".join(cells) + f" | {other} |")
    columns = [
        (model, kind)
        for model in ROLES
        for kind in PromptKind
        if any(kind in s["tokens_per_call"][model] for s in summaries.values())
    ]
    lines += [
        "",
        "## Completion tokens (Table 5: mean per call, by model and prompt kind)",
        "",
        "| policy | "
        + "".join(f"{model} {kind} | " for model, kind in columns)
        + "".join(f"{model} per request | " for model in ROLES)
        + "avg #T transferred (of reasoning) |",
        "|---|" + "---|" * (len(columns) + len(ROLES) + 1),
    ]
    for s in summaries.values():
        cells = "".join(f"{_fmt(s['tokens_per_call'][model].get(kind), 1)} | " for model, kind in columns)
        per = s["completion_tokens_per_request"]
        transferred = (
            f"{_fmt(s['transferred_tokens_mean'], 1)} ({_fmt(s['reasoning_tokens_mean'], 1)}, "
            f"{'/'.join(s['transfer_selectors'])})"
            if s["transfers"]
            else "–"
        )
        per_model = "".join(f"{_fmt(per.get(model), 1)} | " for model in ROLES)
        lines.append(f"| {s['policy']} | {cells}{per_model}{transferred} |")
    cached_columns = [
        (model, kind)
        for model in ROLES
        for kind in PromptKind
        if any(kind in s.get("cached_share_per_call", {}).get(model, {}) for s in summaries.values())
    ]
    if cached_columns:
        lines += [
            "",
            "## Prefix cache (share of prompt tokens served from the engine's prefix cache, per call)",
            "",
            "| policy | " + "".join(f"{model} {kind} | " for model, kind in cached_columns),
            "|---|" + "---|" * len(cached_columns),
        ]
        for s in summaries.values():
            shares = s.get("cached_share_per_call", {})
            cells = "".join(f"{_share(shares.get(model, {}).get(kind))} | " for model, kind in cached_columns)
            lines.append(f"| {s['policy']} | {cells}")
    if any(s["segments"] > 1 for s in summaries.values()):
        lines += [
            "",
            "Some policies ran in several segments (resumed runs): their wall time is the sum of the "
            "segments.",
        ]
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "policy",
    "records",
    "answered",
    "errors",
    "score",
    "score_95ci_low",
    "score_95ci_high",
    "accuracy",
    "precision",
    "recall",
    "f1",
    *(f"route_{route}" for route in ANSWERED),
    *(f"{model}_completion_tokens_per_request" for model in ROLES),
    "transferred_tokens_mean",
    "wall_s",
    "requests_per_s",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p99_s",
    "speedup",
    "latency_speedup",
)


def csv_rows(summaries: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in summaries.values():
        row = {key: s.get(key) for key in CSV_FIELDS if key in s}
        row |= {name: s["metrics"].get(name) for name in ("score", "accuracy", "precision", "recall", "f1")}
        row["score_95ci_low"], row["score_95ci_high"] = s["metrics"].get("score_95ci") or (None, None)
        row |= {f"route_{route}": s["route_shares"].get(route, 0.0) for route in ANSWERED}
        row |= {
            f"{model}_completion_tokens_per_request": s["completion_tokens_per_request"].get(model)
            for model in ROLES
        }
        rows.append(row)
    return rows


def plot(summaries: Mapping[str, dict[str, Any]], path: Path, title: str) -> bool:
    """Accuracy against mean latency, one labelled point per policy. False when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    points = [
        (s["latency_mean_s"], s["metrics"]["score"], s["policy"])
        for s in summaries.values()
        if s["latency_mean_s"] is not None
    ]
    figure, axes = plt.subplots(figsize=(6, 4), dpi=120)
    for x, y, label in points:
        axes.scatter([x], [y], s=36)
        axes.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    axes.set_xlabel("mean latency per request (s)")
    axes.set_ylabel("score (%)")
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def write_report(out: Path, summaries: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Path]:
    """results.md, results.csv, results.json (``meta`` under the summaries: the run's provenance
    record, naming its command and commit) and accuracy_latency.png in ``out``."""
    paths = {
        "markdown": out / "results.md",
        "csv": out / "results.csv",
        "json": out / "results.json",
        "plot": out / "accuracy_latency.png",
    }
    paths["markdown"].write_text(markdown(summaries, meta))
    with paths["csv"].open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(csv_rows(summaries))
    write_result(paths["json"], {"policies": summaries}, meta)
    if not plot(summaries, paths["plot"], f"{Path(meta['dataset']).name}: score vs latency"):
        del paths["plot"]
    return paths
