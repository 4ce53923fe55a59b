"""Which plan a request runs: ``cascade.adaptive`` and the choice it makes per question class.

- ``off``: every request runs ``default`` (or the plan it forces with ``mai.options.plan``).
- ``table``: the plan a calibration wrote for the class (``mai-eval calibrate``; a ``<kind>/<task>``
  class falls back to its kind's entry), else ``default``: reproducible, nothing learnt.
- ``learn``: the allowed plan of least expected cost (``plans.expected_cost``) under ``objective``,
  from the class's estimates (``plan_stats``), seeded by what a calibration measured of the class
  (``calibrated``, written by ``mai-eval calibrate``: it counts as ``calibration_weight``
  observations, which the class's own then outweigh). A class with fewer than ``min_samples``
  observations (the calibration's counted in) runs the calibrated table's plan if it names one, else
  ``default``; a drawn share ``explore`` of each class runs ``sequential`` or ``eager`` (the
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .contracts import Policy
from .draws import uniform
from .plans import (
    ANSWER_IDENTICAL,
    EARLY_EXITS_OF,
    SINGLE_MODEL,
    Objective,
    Plan,
    PlanEstimates,
    PlanName,
    expected_cost,
)

UNITS = {"latency": "s", "engine_time": " engine-s", "large_tokens": " large-model tokens"}


class PlanBasis(StrEnum):
    """What a request's plan rests on (the trace's ``plan_basis``, the stats' ``basis``)."""

    CONFIGURED = "configured"  # the config or the request names it: nothing measured
    CALIBRATION = "calibration"  # what a calibration on labelled data measured, no observation yet
    CALIBRATION_AND_OBSERVATIONS = "calibration+observations"  # the calibration, refined by traffic
    OBSERVATIONS = "observations"  # the class's own traffic alone


_RATE = Field(None, ge=0, le=1, allow_inf_nan=False)
_MEAN = Field(None, ge=0, allow_inf_nan=False)


class CalibratedEstimates(BaseModel):
    """What ``mai-eval calibrate`` measured of one class's plans (``plans.PlanEstimates``' rates and
    means, replayed on its labelled set): the estimates a fresh server starts from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    p1: float | None = _RATE
    p2: float | None = _RATE
    q: float | None = _RATE
    stage1_s: float | None = _MEAN
    small_short_s: float | None = _MEAN
    large_short_s: float | None = _MEAN
    reasoning_s: float | None = _MEAN
    transfer_s: float | None = _MEAN
    large_short_tokens: float | None = _MEAN
    transfer_tokens: float | None = _MEAN

    @classmethod
    def of(cls, estimates: PlanEstimates) -> CalibratedEstimates:
        return cls(**{name: getattr(estimates, name) for name in cls.model_fields})


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
    plans: tuple[PlanName, ...] = Field(
        tuple(Plan), min_length=1, description="the plans the controller may run"
    )
    default: PlanName = Plan.SEQUENTIAL
    table: dict[str, PlanName] = Field(
        default_factory=dict, description="class -> plan, from mai-eval calibrate"
    )
    calibrated: dict[str, CalibratedEstimates] = Field(
        default_factory=dict, description="class -> what mai-eval calibrate measured of its plans"
    )
    calibration_weight: int | None = Field(
        None, ge=1, description="observations a class's calibrated estimates count as (default min_samples)"
    )
    seed: int | None = Field(
        None,
        description="None: which requests explore is drawn under a secret each replica makes at start, so "
        "no client can choose or predict it; an integer: a seeded hash of the request id, reproducible "
        "(tests, benchmarks), and chosen by a client that picks its ids",
    )

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
    basis: PlanBasis = PlanBasis.CONFIGURED


def seeded_estimates(
    settings: AdaptiveSettings, cls: str, observed: PlanEstimates
) -> tuple[PlanEstimates, PlanBasis]:
    """``observed`` with the class's calibrated estimates counted in as ``calibration_weight``
    observations (a ``<kind>/<task>`` class falls back to its kind's), and what the result rests on.
    Each rate and mean is the weighted mean of the two, over the observations that measure it."""
    calibrated = settings.calibrated.get(cls) or settings.calibrated.get(cls.split("/", 1)[0])
    if calibrated is None:
        return observed, PlanBasis.OBSERVATIONS if observed.requests else PlanBasis.CONFIGURED
    weight = settings.calibration_weight or settings.min_samples
    counts = {
        "p1": observed.stage1_runs,
        "p2": observed.stage1_runs,
        "q": observed.reason_first_runs,
    }
    merged: dict[str, float | None] = {}
    for name in CalibratedEstimates.model_fields:
        prior, seen = getattr(calibrated, name), getattr(observed, name)
        n = counts.get(name, observed.requests)
        if prior is None or seen is None or n == 0:
            merged[name] = seen if prior is None else prior
        else:
            merged[name] = (weight * prior + n * seen) / (weight + n)
    estimates = dataclasses.replace(
        observed,
        requests=observed.requests + weight,
        stage1_runs=observed.stage1_runs + (weight if calibrated.p1 is not None else 0),
        reason_first_runs=observed.reason_first_runs + (weight if calibrated.q is not None else 0),
        **merged,
    )
    basis = PlanBasis.CALIBRATION_AND_OBSERVATIONS if observed.requests else PlanBasis.CALIBRATION
    return estimates, basis


def reference_plan(reference: Policy) -> Plan | None:
    """The plan that answers as the audit's reference policy does, if one does."""
    return {Policy.TRANSFER: Plan.FULL_TRANSFER}.get(reference)


def explore_draw(draw_id: str, seed: int | None, secret: bytes = b"") -> float:
    """A uniform draw in [0, 1) for a request, whether it explores (serve_app/core/draws.py): with
    ``seed``, a seeded hash of its request id ``draw_id``; without, a keyed hash under the replica's
    ``secret`` of a number the replica chose (``draws.DrawIds``)."""
    return uniform("plan:", seed, secret, draw_id)


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
    table_plan = _table_plan(settings.table, cls)
    if settings.mode == "table":
        if table_plan is None:
            return PlanChoice(settings.default, f"{cls}: not in the plan table; the default plan")
        return PlanChoice(table_plan, f"{cls}: the calibrated plan table", basis=PlanBasis.CALIBRATION)
    observed = estimates.requests
    estimates, basis = seeded_estimates(settings, cls, estimates)
    if estimates.requests < settings.min_samples:
        count = f"{observed} of {settings.min_samples} observations"
        if table_plan is not None and table_plan in allowed:
            return PlanChoice(
                table_plan, f"{cls}: {count}; the calibrated plan table", basis=PlanBasis.CALIBRATION
            )
        return PlanChoice(settings.default, f"{cls}: {count}; the default plan")
    objective = settings.objective
    expected = {plan: expected_cost(plan, estimates, objective) for plan in allowed}
    staged = [plan for plan in ANSWER_IDENTICAL if plan in allowed]
    if staged and draw < settings.explore:
        plan = min(staged, key=lambda p: _order(expected[p]))
        return PlanChoice(
            plan,
            f"{cls}: explore ({settings.explore:g} of requests keep stage 1 measured)",
            expected,
            basis=basis,
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
    why = _why(cls, plan, estimates, expected, objective) + BASIS_NOTES[basis]
    return PlanChoice(plan, why, expected, basis=basis)


BASIS_NOTES = {
    PlanBasis.CONFIGURED: "",
    PlanBasis.OBSERVATIONS: "",
    PlanBasis.CALIBRATION: " (the calibration's estimates; no observation yet)",
    PlanBasis.CALIBRATION_AND_OBSERVATIONS: " (the calibration's estimates refined by observations)",
}


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
        "basis": choice.basis.value,
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
