"""A request's decision, made once before it runs, and the observers told once after it answered.

``Decision``: the question class, the job as it runs (its plan set, its thresholds relaxed under
overload), the plan's choice and why, the overload entry, and whether its run measures the class's
own plan (the server's thresholds, not relaxed). Every observer (the demand meter, the plan
controller, the overload guard, the metrics) gets ``answered(decision, result)``; the auditor is told
apart, once the reply exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..core.plan_choice import PlanChoice
from ..core.trace import CascadeResult
from .jobs import Job


@dataclass(frozen=True)
class Decision:
    job: Job
    cls: str
    plan: PlanChoice | None  # None: a policy that is not the cascade
    overload: dict[str, Any] | None  # the trace's overload entry; None: not overloaded
    measures_plan: bool  # the run measures the class's plan: the server's thresholds, none relaxed

    def stamp(self, result: CascadeResult) -> None:
        """Record in the trace why the plan ran and the overload it ran under."""
        result.trace.plan_reason = self.plan.reason if self.plan is not None else None
        result.trace.plan_basis = self.plan.basis.value if self.plan is not None else None
        result.trace.overload = self.overload


class Observer(Protocol):
    def answered(self, decision: Decision, result: CascadeResult) -> None: ...
