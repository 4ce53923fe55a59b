"""What the ingress learns from the requests it answers: the plan each cascade request runs
(``PlanController``), and the audits that check the cascade's early exits (``Auditor``).

**Plans.** The plan controller in the ingress: it picks each cascade request's plan
(serve_app/core/plan_choice.py) from the class's estimates (serve_app/core/plan_stats.py), and learns
from every answered request.

With a stats holder (serve_app/fleet/stats_holder.py), a class's estimates are the holder's, read over
every replica's reported observations and returned each time this replica reports, and so are the
audit's bounds that let a plan change answers: for the same reported observations, the estimates,
allowed and chosen plans of the exact merge of all replicas' books. This replica's own observations
since its last report are not in them until its next report (within ``audit.report_interval_s``); a
class the holder has no estimates for yet is read from this replica's own book. Without a holder (one
replica, tests) it reads its own book and the auditor's. When the holder is down (the last report
failed), every request runs the default plan and its trace says why: no request waits for, or fails
with, the statistics.

**Audits.** A sampled answer given at an early exit is answered again by the reference
policy, in the background, after its reply has been built; the two answers are compared with the
answer kind's matcher and counted (serve_app/core/audit.py).

An audit never delays, changes or fails the reply it audits: it starts once the reply exists, its
failures are counted, never raised. Its model calls run at the engine priority ``priority`` (with
vLLM's ``scheduling_policy: priority``, so a served call never waits behind an audit's in the
engine's queue). Audits are the first load shed: none starts while the large or the small model has
more than ``max_large_queue`` / ``max_small_queue`` *served* calls of this replica in flight (the
audits' own calls do not count), nor while ``max_in_flight`` audits of this replica run; an audit that
started runs to its end. Which answers are sampled is drawn under the replica's secret unless a seed is
configured (serve_app/core/draws.py): a client neither chooses nor predicts it. Their model calls carry
the request id ``audit-<id>`` (so the engines' ids read ``mai-audit-<id>-...``) and their tokens are
counted apart from served work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from deployments.affinity import AUDIT_PREFIX

from ..core.audit import AuditBook, AuditSettings, is_sampled
from ..core.cascade import Cascade, ModelUnavailableError
from ..core.contracts import CascadeOptions, EngineError
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
from ..core.routes import AUDITED
from ..core.trace import CascadeResult
from ..core.verification import agree
from ..telemetry import spans
from ..telemetry.settings import TelemetrySettings
from .jobs import Job

logger = logging.getLogger("ray.serve")

RELAXED_PREFIX = "relaxed:"
OWN_PREFIX = "own:"

# Why a sampled audit was not run to its end (``not_run`` in the stats, ``ray_mai_audits_not_run_total``):
# not started while the large model is overloaded, past a model's queue bound, or with max_in_flight
# audits running; stopped when its replica shut down; its reference failed; a bug.
NOT_RUN_REASONS = ("overload", "shed", "full", "cancelled", "failed", "error")


def audited_route(decision: Decision, result: CascadeResult) -> str:
    """The route an audit is counted under: an answer given with thresholds relaxed under overload
    (serve_app/core/decision.py) counts apart, ``relaxed:<route>``, so the quality it cost is seen
    apart from the configured exits' (whose bounds the plan controller reads); so does one given under
    the request's own options, ``own:<route>``, so that no client's thresholds move those bounds."""
    if decision.relaxed:
        return RELAXED_PREFIX + result.route
    return OWN_PREFIX + result.route if decision.own_options else result.route


def tokens_of(result: CascadeResult) -> int:
    return result.trace.tokens().total_tokens


class Auditor:
    """Counts every cascade request per class and route, and audits the sampled early exits and
    single-model plan answers (``routes.AUDITED``)."""

    def __init__(
        self,
        cascade: Cascade,
        settings: AuditSettings,
        in_flight: Callable[[], tuple[int, int]],
        metrics: Any = None,
        *,
        timeout_s: float | None = None,
        clock: Callable[[], float] = time.time,
        secret: bytes | None = None,
        telemetry: TelemetrySettings | None = None,
    ):
        self.cascade, self.settings, self.in_flight = cascade, settings, in_flight
        self.telemetry = telemetry or TelemetrySettings()  # what an audit's span may carry
        self.metrics, self.timeout_s, self.clock = metrics, timeout_s, clock
        self.book = AuditBook(settings.window)
        self.running: set[asyncio.Task] = set()
        # What each answer's sampling draw hashes (``secret``: the replica's, made here by default).
        self.draws = DrawIds(settings.seed, secret)

    def busy(self) -> bool:
        """Whether a model has more than its bound of this replica's served calls in flight."""
        small, large = self.in_flight()
        settings = self.settings
        return small > settings.max_small_queue or large > settings.max_large_queue

    def sampled(self, request_id: str) -> bool:
        """Whether this answer is audited: a fresh draw per answer under the replica's secret, or, with
        a configured seed, the seeded draw of ``request_id``."""
        return is_sampled(self.draws.draw_id(request_id), self.settings, self.draws.secret)

    def routed(self, destination: str, reasons: tuple[str, ...]) -> None:
        """A request went to ``destination`` for ``reasons``: counted in the stats and in Prometheus."""
        self.book.record_destination(destination, reasons)
        if self.metrics is not None:
            self.metrics.record_destination(destination, reasons)

    def served(
        self,
        job: Job,
        decision: Decision,
        result: CascadeResult,
        *,
        overloaded: bool = False,
        contended: bool = False,
    ) -> None:
        """A cascade request was answered: count it, and start its audit when it is sampled. While the
        large model is ``overloaded`` only relaxed answers are audited (the others' audits are shed);
        while API keys contend for the replica (serve_app/core/admission.py) none is."""
        if not decision.cascade:
            return
        cls = decision.cls
        tokens = result.trace.tokens()
        # answered in kind, or answered out of it (served unrepaired); one the engine failed is a 503
        repair = (
            None if result.trace.repair is None else "answered" if result.trace.repair.answered else "failed"
        )
        self.book.record_request(
            cls, result.route, tokens.total_tokens, result.trace.plan, tokens_by_model=tokens, repair=repair
        )
        if result.route not in AUDITED or not self.sampled(job.request_id):
            return
        route = audited_route(decision, result)
        if overloaded and not route.startswith(RELAXED_PREFIX):
            self._not_run("overload")
            return
        if contended or self.busy():
            self._not_run("shed")
            return
        if len(self.running) >= self.settings.max_in_flight:
            self._not_run("full")
            return
        task = asyncio.get_running_loop().create_task(self._audit(job, decision.options, result, cls, route))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _audit(
        self, job: Job, ran: CascadeOptions, served: CascadeResult, cls: str, route: str
    ) -> None:
        """The audit, in a trace of its own linked to its request's (started where that was current)."""
        traced = {"mai.audit.of": job.request_id, "mai.class": cls, "mai.route": route}
        with spans.span("mai.audit", traced, settings=self.telemetry, linked=True) as opened:
            disagreed = await self._reference(job, ran, served, cls, route)
            spans.annotate(opened, {"mai.audit.disagreed": disagreed}, self.telemetry)

    async def _reference(
        self, job: Job, ran: CascadeOptions, served: CascadeResult, cls: str, route: str
    ) -> bool | None:
        """Run the reference policy on ``job`` and record whether it disagreed (None: not run)."""
        options = ran.model_copy(update={"policy": self.settings.reference})
        run = self.cascade.run(
            job.question,
            options,
            request_id=AUDIT_PREFIX + job.request_id,
            priority=self.settings.priority,
            audit=True,
        )
        try:
            reference = await asyncio.wait_for(run, self.timeout_s)
        except asyncio.CancelledError:
            self._not_run("cancelled")
            return None
        except (EngineError, ModelUnavailableError, TimeoutError) as exc:
            logger.info("audit of request %s not run to the end: %s", job.request_id, exc)
            self._not_run("failed")
            return None
        except Exception:  # a bug; the reply it audits is long gone, so it is logged and counted
            logger.exception("audit of request %s failed", job.request_id)
            self._not_run("error")
            return None
        question = job.question
        disagreed = not agree(
            served.answer,
            reference.answer,
            served.trace.kind,
            choices=question.choices,
            decimal_tolerance=ran.decimal_tolerance,
        )
        self.book.record_audit(cls, route, disagreed, tokens_of(reference), at=self.clock())
        if self.metrics is not None:
            self.metrics.record_audit(cls, route, disagreed)
        return disagreed

    def _not_run(self, reason: str) -> None:
        assert reason in NOT_RUN_REASONS, reason
        self.book.record_not_run(reason)
        if self.metrics is not None:
            self.metrics.record_audit_not_run(reason)

    async def close(self) -> None:
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)


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
