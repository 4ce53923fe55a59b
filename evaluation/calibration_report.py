"""The files ``mai-eval calibrate`` writes: calibration.json (every rule, the front, the baselines, the
choice; ``meta``: the command's provenance record), calibration.md, cascade.yaml (the ``cascade:``
section to paste into a config) and calibration.png (accuracy against expected latency)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.results import write_result
from serve_app.core.routes import ANSWERED, Route

from .rules import Rule

# The routes a replayed cascade run can end at, in the table's column order; a single-model baseline
# or plan answers at ``single`` alone, written ``single 100``.
CASCADE_ROUTES = tuple(route for route in ANSWERED if route is not Route.SINGLE)


def _row(result: dict[str, Any]) -> str:
    low, high = result["accuracy_95ci"]
    routes = (
        f"{Route.SINGLE} 100"
        if Route.SINGLE in result["routes"]
        else " / ".join(f"{100 * result['routes'].get(route, 0):.0f}" for route in CASCADE_ROUTES)
    )
    return (
        f"| {result['name']} | {result['accuracy']:.1f} [{low:.1f}, {high:.1f}] | "
        f"{100 * result['escalated']:.0f} | {routes} | {result['small_completion_tokens']:.1f} | "
        f"{result['large_completion_tokens']:.1f} | {result['latency_s']:.3f} |"
    )


def render(summary: dict[str, Any]) -> str:
    header = [
        "| rule or baseline | accuracy % [95 % CI] | escalated % | routes % "
        f"({' / '.join(route.replace('_', ' ') for route in CASCADE_ROUTES)}) | small tokens/q | "
        "large tokens/q | expected latency s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines = [
        f"# Calibration: {summary['dataset']} ({summary['questions']} questions)",
        "",
        f"Goal: {summary['goal']}. Every rule is replayed by running the real cascade over the stages one "
        f"pass recorded ({', '.join(summary['runs'])}), on a virtual clock: expected latency = stage 1 "
        "(two calls in parallel) + the stages the route adds, from the recorded per-stage times.",
        "",
    ]
    if summary.get("chosen"):
        chosen, full_rt = summary["chosen"], summary["baselines"]["mai-transfer"]
        low, high = chosen["difference_vs_full_rt_95ci"]
        latency = chosen["latency_s"] / full_rt["latency_s"]
        small_tokens = chosen["small_completion_tokens"] / max(full_rt["small_completion_tokens"], 1e-9)
        lines += [
            f"**Chosen: {chosen['name']}**: accuracy {chosen['accuracy']:.1f} % (Full RT "
            f"{full_rt['accuracy']:.1f} %; difference 95 % CI [{low:+.1f}, {high:+.1f}] points), "
            f"{latency:.2f}x Full RT's expected latency, {small_tokens:.2f}x its small-model "
            "completion tokens.",
            "",
        ]
    else:
        lines += ["**No rule meets the goal**; the front below shows what the models allow.", ""]
    if summary.get("precision_note"):
        lines += [f"Note: {summary['precision_note']}", ""]
    lines += ["## Baselines and the paper's rule", "", *header]
    lines += [_row(result) for result in summary["baselines"].values()]
    lines += [
        _row(summary["paper_rule"]),
        "",
        "## Front (no rule is both more accurate and faster)",
        "",
        *header,
    ]
    lines += [_row(result) for result in summary["front"]]
    if summary.get("plans"):
        lines += [
            "",
            "## Plans per answer kind, under the chosen rule",
            "",
            "The table names, per kind, the cheapest plan under the objective "
            f"({summary.get('objective', 'latency')}) within the goal's accuracy of Full RT on that kind "
            "(replayed latencies add the recorded stage times as the plan orders them: they leave out what "
            "running stages together costs on shared hardware).",
            "",
            *header,
        ]
        for kind, entry in summary["plans"].items():
            for plan, result in entry["plans"].items():
                chosen = " (table)" if plan == entry["plan"] else ""
                lines.append(_row(result | {"name": f"{kind} ({entry['questions']} q): {plan}{chosen}"}))
    return "\n".join(lines) + "\n"


def plot(path: Path, summary: dict[str, Any], rules: Sequence[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.scatter(
        [r["latency_s"] for r in rules],
        [r["accuracy"] for r in rules],
        s=6,
        color="#bbbbbb",
        label="every rule",
    )
    front = summary["front"]
    axes.plot(
        [r["latency_s"] for r in front],
        [r["accuracy"] for r in front],
        "-o",
        ms=3,
        color="#1f77b4",
        label="calibrated front",
    )
    for name, result in [*summary["baselines"].items(), ("mai (paper rule)", summary["paper_rule"])]:
        axes.scatter([result["latency_s"]], [result["accuracy"]], s=40, marker="s", zorder=3)
        axes.annotate(
            name, (result["latency_s"], result["accuracy"]), textcoords="offset points", xytext=(4, 4)
        )
    if summary.get("chosen"):
        chosen = summary["chosen"]
        axes.scatter(
            [chosen["latency_s"]],
            [chosen["accuracy"]],
            s=90,
            marker="*",
            color="#d62728",
            zorder=4,
            label="chosen",
        )
    axes.set_xlabel("expected latency per question (s, from measured stage times)")
    axes.set_ylabel("accuracy (%)")
    axes.set_title(f"Calibration on {summary['questions']} questions")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write(
    out: Path,
    summary: dict[str, Any],
    rules: Sequence[dict[str, Any]],
    yaml_text: str | None,
    meta: dict[str, Any],
) -> list[Path]:
    paths = [out / "calibration.json", out / "calibration.md", out / "calibration.png"]
    write_result(paths[0], summary | {"rules": list(rules)}, meta)
    paths[1].write_text(render(summary))
    plot(paths[2], summary, rules)
    if yaml_text is not None:
        paths.append(out / "cascade.yaml")
        paths[-1].write_text(yaml_text)
    return paths


def cascade_yaml(
    rule: Rule,
    comment: str,
    plans: Mapping[str, str] | None = None,
    calibrated: Mapping[str, Mapping[str, float | None]] | None = None,
) -> str:
    """The ``cascade:`` section of the chosen rule and, when given, the plan table per answer kind
    (``cascade.adaptive.table``: applied as it is with ``mode: table``, allowed to the controller with
    ``mode: learn``) and what the replays measured of each kind's plans (``cascade.adaptive.calibrated``:
    the estimates a ``mode: learn`` server starts from)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += ["cascade:", f"  min_confidence: {rule.min_confidence:g}"]
    if rule.confident_large is not None:
        lines.append(f"  confident_large: {rule.confident_large:g}")
    if plans:
        table = ", ".join(f"{kind}: {plan}" for kind, plan in sorted(plans.items()))
        lines += [
            "  adaptive:",
            "    mode: table",
            "    # per answer kind: the cheapest plan under the objective within the goal's accuracy",
            f"    table: {{{table}}}",
        ]
        if calibrated:
            lines.append(
                "    # per answer kind: what the replays measured (a learn-mode server starts from it)"
            )
            lines.append("    calibrated:")
            for kind, estimates in sorted(calibrated.items()):
                fields = ", ".join(
                    f"{name}: {value:.6g}" for name, value in estimates.items() if value is not None
                )
                lines.append(f"      {kind}: {{{fields}}}")
    return "\n".join(lines) + "\n"
