"""Plans per question class as a bench sees them, the library of the ``adaptive_*`` scenarios: what the
controller holds per class (from ``/v1/mai/stats``), the plan shares of a run, and how many requests a
shift of traffic took until every request that did not explore ran the plan the phase settles on."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from serve_app.core.plans import Plan

from .summary import quantiles

# What results written before plans were named apart from the policies call a plan.
OLD_PLAN_NAMES = {"transfer": Plan.FULL_TRANSFER.value}
# How the controller learns in the capacity and shift runs.
ADAPTIVE_LEARN = {"mode": "learn", "min_samples": 50, "window": 500, "explore": 0.05}
# The plans these runs learn among, each as one letter of ``plans_in_order``.
PLAN_LETTERS = {Plan.SEQUENTIAL: "s", Plan.EAGER: "e", Plan.REASON_FIRST: "r", Plan.FULL_TRANSFER: "t"}
# What the letters stand for, as the results' notes say it: "s sequential, e eager, ...".
PLAN_LEGEND = ", ".join(f"{letter} {plan}" for plan, letter in PLAN_LETTERS.items())


def named_now(plan: str | None) -> str | None:
    """A plan as it is named now: results written before plans were named apart from the policies
    say ``transfer`` for ``full-transfer`` (their letters, ``PLAN_LETTERS``, are the same)."""
    return OLD_PLAN_NAMES.get(plan, plan) if plan is not None else None


def plans_of(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Per class, what the controller holds: its estimates, each allowed plan's expected cost, the plan
    a request that does not explore runs now, and the plans served so far."""
    return {
        cls: {"served": entry.get("plans", {}), **(entry.get("plan") or {})}
        for cls, entry in stats["classes"].items()
    }


def plan_shares(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per answer kind, the share of answered requests each plan ran."""
    by_kind: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        if row["status"] == 200 and row.get("plan"):
            by_kind[row.get("kind") or "text"][row["plan"]] += 1
    return {
        kind: {plan: round(count / sum(counts.values()), 4) for plan, count in sorted(counts.items())}
        for kind, counts in sorted(by_kind.items())
    }


def settled_after(plans: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    """The plan a phase settles on (the most common over its last 100 requests that did not explore),
    and how many requests of the phase ran before every later one that did not explore runs it."""
    chosen = [plan for plan, explored in plans if not explored]
    final = Counter(chosen[-100:]).most_common(1)[0][0] if chosen else None
    last_other = max(
        (i for i, (plan, explored) in enumerate(plans) if not explored and plan != final), default=-1
    )
    return {"plan": final, "requests_until_settled": last_other + 1, "requests": len(plans)}


def plans_in_order(plans: Sequence[tuple[str, bool]]) -> str:
    """The plans as letters (``PLAN_LEGEND``), in order."""
    return "".join(PLAN_LETTERS[plan] for plan, _ in plans)


def completed_plans(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, bool]]:
    """(plan, explored) of the answered rows, in the order they finished."""
    ordered = sorted((row for row in rows if row["status"] == 200), key=lambda row: row["done_at"])
    return [(row["plan"], row["explored"]) for row in ordered]


def run_summary(rows: Sequence[Mapping[str, Any]], wall_s: float) -> dict[str, Any]:
    ok = [row for row in rows if row["status"] == 200]
    latencies = [row["latency_s"] for row in ok]
    return {
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "wall_s": round(wall_s, 3),
        **quantiles(latencies),
        "plans": dict(Counter(row["plan"] for row in ok)),
    }
