"""Which plan a request runs: ``cascade.adaptive`` and the choice it makes per question class.

- ``off``: every request runs ``default`` (or the plan it forces with ``mai.options.plan``).
- ``table``: the plan a calibration wrote for the class (``mai-eval calibrate``; a ``<kind>/<task>``
  class falls back to its kind's entry), else ``default``: reproducible, nothing learnt.
- ``learn``: the allowed plan of least expected cost (``plans.expected_cost``) under ``objective``,
  from the class's estimates (``plan_stats``). A class with fewer than ``min_samples`` observations
  runs ``default``; a seeded share ``explore`` of each class runs ``sequential`` or ``eager`` (the
  cheaper) so that stage 1's agreement stays measured while another plan serves the class. Another
  plan replaces the default only when it is expected to save at least ``min_saving`` of the default's
  cost: the per-request cost leaves out the work a plan adds beside the request (eager's cancelled
  reasoning), and estimates this close are within their own noise.

Allowed, among ``plans``: the answer-identical plans (``sequential``, ``eager``) always; the audit's
reference plan (``transfer`` unless ``cascade.audit.reference`` says otherwise) always, since the audit
compares against it; a plan that changes answers otherwise only where the audit bounds the
disagreement of every early exit it stops at (the 95 % upper bound over the class's window of audits
of that route is at most ``audit.max_disagreement``), or where the calibrated table names it. Pure.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .options import CascadeOptions, Policy
from .plans import (
    ANSWER_IDENTICAL,
    EARLY_EXITS_OF,
    SINGLE_MODEL,
    Objective,
    Plan,
    PlanEstimates,
    expected_cost,
)

UNITS = {"latency": "s", "engine_time": " engine-s", "large_tokens": " large-model tokens"}


class AdaptiveSettings(BaseModel):
    """``cascade.adaptive`` in the server config."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["off", "learn", "table"] = "off"
    objective: Objective = "latency"
    explore: float = Field(0.05, ge=0, le=1, allow_inf_nan=False, description="share kept on stage-1 plans")
    min_samples: int = Field(50, ge=1, description="observations a class needs before it leaves the default")
    window: int = Field(500, ge=1, description="the last requests per class the estimates are read over")
    min_saving: float = Field(
        0.05,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="the share of the default plan's expected cost another plan must save to replace it",
    )
    plans: tuple[Plan, ...] = Field(tuple(Plan), min_length=1, description="the plans the controller may run")
    default: Plan = Plan.SEQUENTIAL
    table: dict[str, Plan] = Field(default_factory=dict, description="class -> plan, from mai-eval calibrate")
    seed: int = 0

    @model_validator(mode="after")
    def _plans_cover_the_rest(self) -> AdaptiveSettings:
        if self.default not in self.plans:
            raise ValueError(
                f"default {self.default.value!r} is not among plans {[p.value for p in self.plans]}"
            )
        outside = {cls: plan.value for cls, plan in self.table.items() if plan not in self.plans}
        if outside:
            raise ValueError(f"table names plans not among plans: {outside}")
        if self.mode == "table" and not self.table:
            raise ValueError("mode 'table' needs a table (class -> plan), as mai-eval calibrate writes it")
        return self


@dataclass(frozen=True)
class PlanChoice:
    plan: Plan
    reason: str
    expected: Mapping[Plan, float | None] = field(default_factory=dict)
    relaxed_from: Plan | None = None  # the plan chosen before the overload guard relaxed it


FORCED = "forced by the request (mai.options.plan or eager_reasoning)"
RELAXED_EAGER = "; overloaded (relax_to.eager_reasoning: false): eager runs sequential"


def decide_plan(
    options: CascadeOptions, choose: Callable[[], PlanChoice], *, forced: bool, relax_eager: bool = False
) -> PlanChoice:
    """The plan one cascade request runs, and why: the one place a request's plan is decided. A plan
    the request forced (``options.resolved_plan``, where ``eager_reasoning`` maps to a plan) runs as
    it is; otherwise ``choose`` picks (the controller: ``choose_plan``). Overloaded with
    ``relax_eager``, an eager plan runs sequential (the same answers, less small-model work)."""
    choice = PlanChoice(options.resolved_plan(), FORCED) if forced else choose()
    if relax_eager and choice.plan is Plan.EAGER:
        return PlanChoice(Plan.SEQUENTIAL, choice.reason + RELAXED_EAGER, choice.expected, Plan.EAGER)
    return choice


def reference_plan(reference: Policy) -> Plan | None:
    """The plan that answers as the audit's reference policy does, if one does."""
    return {Policy.TRANSFER: Plan.TRANSFER}.get(reference)


def explore_draw(request_id: str, seed: int = 0) -> float:
    """A seeded uniform draw in [0, 1) for ``request_id``: whether the request explores."""
    digest = hashlib.sha256(f"plan:{seed}:{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def allowed_plans(
    settings: AdaptiveSettings,
    cls: str,
    *,
    reference: Plan | None,
    exit_bounds: Mapping[str, float],
    max_disagreement: float,
) -> dict[Plan, str]:
    """The plans ``cls`` may run, each with why. ``exit_bounds``: route -> the 95 % upper bound of
    its audits' disagreement over the class's window (a route never audited is absent)."""
    allowed: dict[Plan, str] = {}
    for plan in settings.plans:
        exits = EARLY_EXITS_OF[plan]
        if plan in ANSWER_IDENTICAL:
            allowed[plan] = "the paper's answers"
        elif plan is reference:
            allowed[plan] = "the audit's reference"
        elif plan in SINGLE_MODEL:  # audits measure agreement, not correctness: labels only
            if _table_plan(settings.table, cls) is plan:
                allowed[plan] = "the calibrated table (labels)"
        elif exits and all(exit_bounds.get(route, 1.0) <= max_disagreement for route in exits):
            bounds = ", ".join(f"{route} {exit_bounds[route]:.3f}" for route in exits)
            allowed[plan] = f"audited: upper 95 % disagreement {bounds} <= {max_disagreement}"
        elif _table_plan(settings.table, cls) is plan:
            allowed[plan] = "the calibrated table"
    return allowed


def _table_plan(table: Mapping[str, Plan], cls: str) -> Plan | None:
    return table.get(cls) or table.get(cls.split("/", 1)[0])


def choose_plan(
    settings: AdaptiveSettings,
    cls: str,
    estimates: PlanEstimates,
    allowed: Sequence[Plan],
    *,
    draw: float,
) -> PlanChoice:
    """The plan of one request of class ``cls`` (``draw``: its ``explore_draw``)."""
    if settings.mode == "off":
        return PlanChoice(settings.default, "cascade.adaptive is off: the default plan")
    if settings.mode == "table":
        plan = _table_plan(settings.table, cls)
        if plan is None:
            return PlanChoice(settings.default, f"{cls}: not in the plan table; the default plan")
        return PlanChoice(plan, f"{cls}: the calibrated plan table")
    if estimates.requests < settings.min_samples:
        return PlanChoice(
            settings.default,
            f"{cls}: {estimates.requests} of {settings.min_samples} observations; the default plan",
        )
    objective = settings.objective
    expected = {plan: expected_cost(plan, estimates, objective) for plan in allowed}
    staged = [plan for plan in ANSWER_IDENTICAL if plan in allowed]
    if staged and draw < settings.explore:
        plan = min(staged, key=lambda p: _order(expected[p]))
        return PlanChoice(
            plan, f"{cls}: explore ({settings.explore:g} of requests keep stage 1 measured)", expected
        )
    known = [plan for plan in allowed if expected[plan] is not None]
    if not known:
        return PlanChoice(
            settings.default, f"{cls}: no plan's cost is measured yet; the default plan", expected
        )
    default_cost = expected.get(settings.default)
    if default_cost is not None:
        bar = default_cost * (1 - settings.min_saving)
        known = [plan for plan in known if plan is settings.default or _order(expected[plan]) <= bar]
    plan = min(known, key=lambda p: _order(expected[p]))  # ties: the order of ``plans``
    return PlanChoice(plan, _why(cls, plan, estimates, expected, objective), expected)


def _order(cost: float | None) -> float:
    return float("inf") if cost is None else cost


def _why(
    cls: str, plan: Plan, e: PlanEstimates, expected: Mapping[Plan, float | None], objective: Objective
) -> str:
    unit = UNITS[objective]
    accept = "unmeasured" if e.p1 is None else f"{e.p1:.2f}"
    reason = f"{cls}: stage-1 accept {accept} over {e.stage1_runs} requests; "
    reason += f"{plan.value} {expected[plan]:.3g}{unit} expected"
    baseline = expected.get(Plan.SEQUENTIAL)
    if plan is not Plan.SEQUENTIAL and baseline is not None:
        reason += f", saves {baseline - expected[plan]:.3g}{unit} over sequential"  # type: ignore[operator]
    return reason


def plan_summary(
    settings: AdaptiveSettings, cls: str, estimates: PlanEstimates, allowed: Mapping[Plan, str]
) -> dict[str, object]:
    """What ``GET /v1/mai/stats`` shows of a class's plans: the estimates, each allowed plan's
    expected cost and why it is allowed, and the plan a request that does not explore runs now."""
    choice = choose_plan(settings, cls, estimates, list(allowed), draw=1.0)
    return {
        "plan": choice.plan.value,
        "reason": choice.reason,
        "objective": settings.objective,
        "estimates": {
            name: round(value, 4) if isinstance(value, float) else value
            for name, value in dataclasses.asdict(estimates).items()
        },
        "allowed": {
            plan.value: {
                "why": why,
                "expected": None
                if (cost := expected_cost(plan, estimates, settings.objective)) is None
                else round(cost, 4),
            }
            for plan, why in allowed.items()
        },
    }
