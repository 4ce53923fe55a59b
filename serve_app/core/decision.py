"""A request's decision, made once before it runs (``decide``): its question class, the plan and why,
the options as they will run, and what overload relaxed.

Nothing rewrites a decision afterwards: the cascade runs its options and writes it into the trace as
the trace is built; the ingress's observers (the plan controller, the overload guard, the metrics, the
demand meter, the auditor) read it. Pure: the plan controller's choice comes in as a function, the
overload level as the reading the guard made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .options import CascadeOptions, Policy
from .overload import Level, RelaxTo, relaxed_options
from .plan_choice import PlanChoice
from .plans import Plan
from .trace import CascadeResult, OverloadRecord

FORCED = "forced by the request (mai.options.plan or eager_reasoning)"
RELAXED_EAGER = "; overloaded (relax_to.eager_reasoning: false): eager runs sequential"


@dataclass(frozen=True)
class OverloadReading:
    """The overload guard's reading for one request: the level it moved to, and the large model's
    queue it read."""

    level: Level
    large_queue: int


@dataclass(frozen=True)
class Decision:
    cls: str  # the question class the statistics count it under (``class_of``)
    options: CascadeOptions  # as the request runs: the cascade's plan set, thresholds as relaxed
    plan: PlanChoice | None  # the plan and why; None for a policy that is not the cascade
    overload: OverloadRecord | None  # None: not overloaded
    measures_plan: bool  # the run measures the class's plan: the server's thresholds, none relaxed

    @property
    def relaxed(self) -> bool:
        return self.overload is not None and bool(self.overload.relaxed)


class Observer(Protocol):
    """What the ingress tells once a request has answered: its decision and its result."""

    def answered(self, decision: Decision, result: CascadeResult) -> None: ...


def class_of(kind: str, task: str | None = None) -> str:
    """A question's class: its answer kind, refined by the client's task tag. What the statistics count
    under (routes, plans, audits, metrics) and what the plan controller chooses a plan for."""
    return kind if not task else f"{kind}/{task}"


def decide(
    options: CascadeOptions,
    cls: str,
    *,
    server: CascadeOptions,
    choose: Callable[[], PlanChoice],
    overload: OverloadReading | None = None,
    relax_to: RelaxTo | None = None,
) -> Decision:
    """The decision for a request of class ``cls`` with its own ``options`` (the server's defaults and
    the request's overrides). For the cascade: at ``relax``, ``relax_to``'s floors replace the request's
    thresholds; a plan the request forced (``options.plan``) runs as it is, else ``choose`` picks one
    (the plan controller: ``plan_choice.choose_plan``); at ``relax`` with ``relax_to.eager_reasoning:
    false``, an eager plan runs sequential (the same answers, less small-model work). A run measures
    the class's plan when its thresholds are ``server``'s and nothing was relaxed."""
    if options.policy is not Policy.CASCADE:
        return Decision(cls, options, None, None, measures_plan=False)
    relax_to = relax_to or RelaxTo()
    relaxing = overload is not None and overload.level is Level.RELAX
    relaxed: dict[str, tuple[Any, Any]] = {}
    if relaxing:
        options, changed = relaxed_options(options, relax_to)
        relaxed.update(changed)
    choice = PlanChoice(options.plan, FORCED) if options.plan is not None else choose()
    if relaxing and relax_to.eager_reasoning is False and choice.plan is Plan.EAGER:
        choice = dataclasses.replace(choice, plan=Plan.SEQUENTIAL, reason=choice.reason + RELAXED_EAGER)
        relaxed["plan"] = (Plan.EAGER.value, Plan.SEQUENTIAL.value)
    options = options.model_copy(update={"plan": choice.plan})
    record = None
    if overload is not None and overload.level is not Level.NORMAL:
        record = OverloadRecord(overload.level.label, overload.large_queue, relaxed)
    thresholds = (options.min_confidence, options.confident_large) == (
        server.min_confidence,
        server.confident_large,
    )
    return Decision(cls, options, choice, record, measures_plan=thresholds and not relaxed)
