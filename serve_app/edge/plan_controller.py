"""The plan controller in the ingress: it picks each cascade request's plan (serve_app/core/plan_choice.py)
from the class's estimates (serve_app/core/plan_stats.py), and learns from every answered request.

With a stats holder (serve_app/fleet/stats_holder.py), a class's estimates are the holder's, read over
every replica's reported observations and returned each time this replica reports, and so are the
audit's bounds that let a plan change answers: for the same reported observations, the estimates,
allowed and chosen plans of the exact merge of all replicas' books. This replica's own observations
since its last report are not in them until its next report (within ``audit.report_interval_s``); a
class the holder has no estimates for yet is read from this replica's own book. Without a holder (one
replica, tests) it reads its own book and the auditor's. When the holder is down (the last report
failed), every request runs the default plan and its trace says why: no request waits for, or fails
with, the statistics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..core.audit import AuditBook, AuditSettings
from ..core.decision import Decision
from ..core.draws import DrawIds
from ..core.plan_choice import (
    AdaptiveSettings,
    PlanChoice,
    allowed_plans,
    choose_plan,
    explore_draw,
    reference_plan,
)
from ..core.plan_stats import PlanBook, estimates_of, observe
from ..core.plans import Plan, PlanEstimates
from ..core.trace import CascadeResult


class PlanController:
    def __init__(
        self,
        settings: AdaptiveSettings,
        audit: AuditSettings,
        audit_book: AuditBook,
        *,
        shared: bool = False,
        clock: Callable[[], float] = time.time,
        secret: bytes | None = None,
    ):
        self.settings, self.audit, self.audit_book, self.clock = settings, audit, audit_book, clock
        # What each request's explore draw hashes: no client chooses or predicts it unless a seed is
        # configured (serve_app/core/draws.py); ``secret``: the replica's, made here by default.
        self.draws = DrawIds(settings.seed, secret)
        self.book = PlanBook(settings.window)
        # The estimates and the audit's bounds over all replicas: from the holder.
        self.shared_estimates: dict[str, PlanEstimates] = {}
        self.shared_bounds: dict[str, dict[str, float]] = {}
        self.shared = shared
        self.holder_down: str | None = None  # why the last report failed; None: it did not
        self.reference = reference_plan(audit.reference)

    def choose(self, cls: str, request_id: str) -> PlanChoice:
        """The plan of a cascade request of class ``cls`` that does not force one (``decision.decide``
        asks)."""
        settings = self.settings
        if settings.mode == "learn" and self.holder_down is not None:
            return PlanChoice(
                settings.default,
                f"the statistics holder is unavailable ({self.holder_down}); the default plan",
            )
        return choose_plan(
            settings,
            cls,
            self.estimates(cls),
            list(self.allowed(cls)),
            draw=explore_draw(self.draws.draw_id(request_id), settings.seed, self.draws.secret),
        )

    def allowed(self, cls: str) -> dict[Plan, str]:
        bounds = self.shared_bounds.get(cls, {}) if self.shared else self.audit_book.exit_bounds(cls)
        return allowed_plans(
            self.settings,
            cls,
            reference=self.reference,
            exit_bounds=bounds,
            max_disagreement=self.audit.max_disagreement,
        )

    def estimates(self, cls: str) -> PlanEstimates:
        shared = self.shared_estimates.get(cls) if self.shared else None
        return shared if shared is not None else estimates_of(self.book.classes.get(cls, ()))

    def answered(self, decision: Decision, result: CascadeResult) -> None:
        """Learn from a run that measures the class's plan (``decision.decide``: a plan the server chose,
        run with the server's options, none relaxed): a forced plan or a request's own options would
        let a client train what every other request of the class runs."""
        if decision.measures_plan:
            self.observed(decision.cls, result)

    def observed(self, cls: str, result: CascadeResult) -> None:
        observation = observe(result.trace, self.clock())
        if observation is not None:
            self.book.record(cls, observation)

    def update(self, view: Mapping[str, Any]) -> None:
        """The holder's reply to this replica's report: per class, the estimates and the audit's bounds
        over all replicas."""
        self.shared_estimates = {cls: PlanEstimates(**fields) for cls, fields in view["estimates"].items()}
        self.shared_bounds = dict(view["exit_bounds"])
        self.holder_down = None

    def holder_failed(self, why: str) -> None:
        self.holder_down = why
