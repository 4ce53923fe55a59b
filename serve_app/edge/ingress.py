"""MAIIngress: the ingress deployment that runs the cascade over the two model deployments.

The replica holds the request path: a request's key and admission (``access``), its destination
(``routing``), its job (``jobs``), its decision and the cascade, or its forwarding to a model
(``passthrough``). The path returns values (answered, forwarded, refused); the HTTP API (``api``, built
when a replica starts) renders them, and ``mai-batch`` reads them as they are.
"""

# No ``from __future__ import annotations`` here: the replica gets this class by value (cloudpickle),
# and FastAPI must see the handlers' parameter types (``Request``) as objects, not as names to look up.
import asyncio
import contextvars
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

from fastapi import Request

from ..cache.keys import CacheMode, requested_mode
from ..clients.llm_server import LLMServerClient
from ..clients.scorer import attention_scorer
from ..config import AppConfig
from ..core.admission import Bill, Capacity
from ..core.contracts import attention_selector, budget_selector
from ..core.decision import Decision, Observer, decide
from ..core.lifecycle import STREAM_BACKSTOP_S
from ..core.roles import LARGE, SMALL
from ..core.trace import CascadeResult
from ..telemetry import spans
from .access import Access, Grant, cascade_bill, passthrough_bill, reused_bill
from .body import BodyReads, parse_json, read_body
from .errors import RequestError, noted, warned
from .held_stream import HeldStream
from .images import check_image_bytes_under
from .jobs import (
    Job,
    answer_request,
    job_from_answer,
    job_from_chat,
    passthrough_cache_mode,
    remote_image_policy,
    request_id_of,
)
from .keys import ANONYMOUS_CALLER, Caller, KeyRing
from .observers import IngressMetrics, RequestMetrics
from .parts import IngressParts, build_parts
from .passthrough import chat_request, forward, load_types_in_background, types_ready, usage_asked
from .passthrough_body import checked_body
from .readiness import ReadinessGate, handle_probe, keys_probe
from .remote_images import fetch_image
from .responses import Answered, Forwarded, Refused, RequestOutcome, settled
from .routing import Passthrough, destination, destination_reasons
from .snapshot import Snapshot
from .stats_api import ReplicaStats
from .stats_reporter import StatsReporter

logger = logging.getLogger("ray.serve")


def request_id_header(request: Request) -> str | None:
    """The id the request came with: the client's ``x-request-id``, else the one Serve's proxy made
    (which it returns in the ``x-request-id`` response header); ``jobs.request_id_of`` checks it."""
    from ray.serve.context import _get_serve_request_context

    return request.headers.get("x-request-id") or _get_serve_request_context().request_id or None


class IngressReplica(ReplicaStats):
    """One ingress replica: its parts over the model deployments' handles, and the request path. Serve
    deploys it as ``MAIIngress`` (below), with its FastAPI app; a batch actor holds one as it is
    (batch/answerer.py) and calls ``chat``."""

    def __init__(
        self,
        small: Any,
        large: Any,
        config: AppConfig,
        scorer: Any = None,
        stats: Any = None,
        ledger: Any = None,
        access: str = "keys",
        *,
        preload_passthrough: bool = True,
    ):
        """``access``: how the application is reached (``app.exposure``): ``keys`` requires this
        replica to have keys of its own, ``anonymous`` serves without them when it has none.
        ``preload_passthrough``: load what a passthrough needs in a thread as the replica starts
        (``passthrough.load_types``), not with the first one; a batch actor whose rows may never pass
        through leaves it."""
        if preload_passthrough:
            load_types_in_background()
        selection = config.transfer_selection
        selectors = {"budget": budget_selector(selection.budget_head_words, selection.budget_tail_words)}
        if scorer is not None:
            selectors["attention"] = attention_selector(
                attention_scorer(scorer, config.telemetry), selection.delta, selection.layer
            )
        logprobs = config.answer_logprobs
        parts = build_parts(
            config,
            LLMServerClient(small, config.small.model_id, logprobs=logprobs),
            LLMServerClient(large, config.large.model_id, logprobs=logprobs),
            IngressMetrics(),
            selectors=selectors,
            shared_stats=stats is not None,
        )
        # Requests for a model id go to that model's LLMServer unchanged (serve_app/edge/passthrough.py).
        handles = {config.small.model_id: small, config.large.model_id: large}
        # Every deployment the app needs answers before requests run (serve_app/edge/readiness.py).
        # Named by role: /readyz answers without a key, so it names no model.
        probes = {"small model": handle_probe(small), "large model": handle_probe(large)}
        if scorer is not None:
            probes["attention scorer"] = handle_probe(scorer)
        # The application's exposure (``app.exposure``) requires keys: this replica reads its own,
        # and serves no one without them (a replica whose node lacks the variable never fails open).
        ring = KeyRing(config.security, required=access == "keys")
        self.assemble(config, parts, handles, stats, ring, readiness=ReadinessGate(probes), ledger=ledger)
        ring.say(access)

    def assemble(
        self,
        config: AppConfig,
        parts: IngressParts,
        model_handles: dict[str, Any],
        stats: Any,
        keys: KeyRing,
        name: str | None = None,
        *,
        readiness: ReadinessGate | None = None,
        ledger: Any = None,
    ) -> None:
        """The replica over its parts (``parts.build_parts``): what ``__init__`` does once it has built
        them from its handles, and what the tests do over scripted ones. ``readiness``: the check of
        the model deployments (none: nothing to wait for); ``ledger``: the key ledger's handle (none:
        this replica keeps its own)."""
        self.config, self.model_handles = config, model_handles
        # What keys share when several send at once (core/admission.py): the capacity configured,
        # else learned (``Capacity``) up to this replica's share of what the models take at once.
        most = max(1, config.model_capacity() // max(1, config.ingress.autoscaling.min_replicas))
        capacity = Capacity(most, fixed=config.ingress.capacity)
        self.access = Access(
            keys, ledger, capacity=capacity, metrics=parts.metrics, wait_s=config.ingress.share_wait_s
        )
        self.exposure = "keys" if not keys.open else "anonymous"
        self.readiness = readiness or ReadinessGate({})
        if keys.required:
            self.readiness.require("API keys", keys_probe(keys))
        self.body_reads = BodyReads(config.limits.max_body_reads_per_client)
        self.model_roles = {config.small.model_id: SMALL, config.large.model_id: LARGE}
        self.model_ids = {SMALL: config.small.model_id, LARGE: config.large.model_id}
        self.cascade, self.small_calls, self.large_calls = parts.cascade, parts.small_calls, parts.large_calls
        self.metrics, self.auditor, self.plans = parts.metrics, parts.auditor, parts.plans
        self.overload, self.demand, self.classes = parts.overload, parts.demand, parts.classes
        self.answers = parts.answers
        # Told once when a request has answered (serve_app/core/decision.py).
        self.observers: tuple[Observer, ...] = (
            self.demand,
            self.plans,
            self.overload,
            RequestMetrics(self.metrics),
        )
        # The statistics' one view across replicas (serve_app/fleet/stats_holder.py), and this replica's
        # name there.
        self.stats_holder, self.replica = stats, name or uuid.uuid4().hex
        # What it reports there.
        cache_events = None if self.answers is None else self.answers.events
        self.stats_reporter = StatsReporter(
            self.auditor.book, self.plans.book, self.overload.level_label, cache_events
        )
        self._reporter: asyncio.Task | None = None
        # What GET /v1/mai/stats reads of the holder and the ledger: at most once a second.
        self.fleet_stats = Snapshot(self._holder_stats)
        self.key_usage = Snapshot(self.access.usage)

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Ray Serve's custom autoscaling metrics of this replica: the demand it measured, which the
        application's coupled policy reads (serve_app/fleet/autoscaling_policy.py)."""
        return self.demand.report()

    async def chat(
        self, payload: Any, request_id: str | None, caller: Caller = ANONYMOUS_CALLER
    ) -> RequestOutcome:
        """One chat completion request, parsed, from its JSON on, for ``caller``'s key: what ``POST
        /v1/chat/completions`` runs once its body is read, and what a batch row runs
        (batch/answerer.py). Its outcome, as a value; a bug rises as an exception."""
        return await self._settled(self._admitted_chat(payload, request_id, caller))

    # -- the request path: values ----------------------------------------------------------------

    async def _settled(self, path: Awaitable[Answered | Forwarded]) -> RequestOutcome:
        outcome = await settled(path)
        if isinstance(outcome, Refused):
            noted(outcome.error, self.metrics.record_error)
        return outcome

    async def chat_over_http(self, request: Request) -> RequestOutcome:
        """``POST /v1/chat/completions``: the key, the request's id, its admission, then its body."""
        return await self._settled(self._chat_over_http(request))

    async def answer_over_http(self, request: Request) -> RequestOutcome:
        """``POST /v1/mai/answer``, as ``chat_over_http``."""
        return await self._settled(self._answer_over_http(request))

    async def _chat_over_http(self, request: Request) -> Answered | Forwarded:
        caller = self.access.identify(request.headers)
        request_id = request_id_of(request_id_header(request))

        async def chat(grant: Grant) -> Answered | Forwarded:
            payload = await self._payload(request, caller)
            return await self._chat(payload, request_id, grant, request.headers.get("cache-control"))

        return await self._admitted(caller, chat)

    async def _admitted_chat(
        self, payload: Any, request_id: str | None, caller: Caller
    ) -> Answered | Forwarded:
        request_id = request_id_of(request_id)
        return await self._admitted(caller, lambda grant: self._chat(payload, request_id, grant))

    async def _admitted(
        self, caller: Caller, path: Callable[[Grant], Awaitable[Answered | Forwarded]]
    ) -> Answered | Forwarded:
        """``path`` inside ``caller``'s admission, which a streamed reply keeps until its last event
        (``HeldStream``; at the latest a little past the request's deadline)."""
        async with AsyncExitStack() as admission:
            grant = await admission.enter_async_context(self.access.admitted(caller))
            outcome = await path(grant)
            if isinstance(outcome, Forwarded) and outcome.events is not None:
                backstop_s = self.config.request_timeout_s + STREAM_BACKSTOP_S
                held = HeldStream(outcome.events, admission.pop_all().aclose, backstop_s)
                return dataclasses.replace(outcome, events=held)
            return outcome

    async def _answer_over_http(self, request: Request) -> Answered:
        caller = self.access.identify(request.headers)
        request_id = request_id_of(request_id_header(request))
        async with self.access.admitted(caller) as grant:
            payload = await self._payload(request, caller)
            answer = answer_request(payload)
            with warned(answer.warnings):
                grant.use(answer.model)  # before any image is fetched or checked
                job = await job_from_answer(self.config, answer, request_id, self._fetch_image)
                return await self._answer(job, grant, request.headers.get("cache-control"))

    async def _chat(
        self, payload: Any, request_id: str, grant: Grant, cache_control: str | None = None
    ) -> Answered | Forwarded:
        routed = destination(payload, self.config)
        with warned(routed.warnings):  # the request's warnings reach its error reply too
            if isinstance(routed, Passthrough):
                # The model the client named: ``mai`` when it sent there what MAI does not fit.
                grant.use(routed.model_id if routed.reason is None else "mai")
                return await self._passthrough(routed, grant, passthrough_cache_mode(payload))
            grant.use(routed.request.model)  # before any image is fetched or checked
            job = await job_from_chat(self.config, routed, request_id, self._fetch_image)
            self.auditor.routed(*destination_reasons(routed))  # counted once its job is built
            return await self._answer(job, grant, cache_control)

    async def _payload(self, request: Request, caller: Caller) -> Any:
        """The request's JSON, once its size passes. Bodies being read at once are bounded per key,
        and for anonymous callers per client address (serve_app/edge/body.py)."""
        limits = self.config.limits
        address = request.client.host if request.client else ""
        reader = caller.name if caller is not ANONYMOUS_CALLER else f"address {address}"
        with self.body_reads.from_client(reader):
            body = await read_body(
                request.headers, request.stream(), limits.max_body_bytes, limits.body_timeout_s
            )
        return parse_json(body, self.config.limits)

    async def _answer(self, job: Job, grant: Grant, cache_control: str | None = None) -> Answered:
        """``job``'s answer: the answer cache's (serve_app/cache/reuse.py), or its own run's. A reused
        answer bills no tokens and is nothing the server learns from (``reused_bill``)."""
        telemetry = self.config.telemetry
        started = spans.request_attributes(job.question, job.request_id, grant.caller.name, telemetry)
        with spans.span("mai.request", started, settings=telemetry) as opened:
            ran: list[Decision] = []  # this request's own run's decision; none when its answer is reused

            def run() -> Awaitable[CascadeResult]:
                return self._observed_run(job, grant, opened, ran)

            if self.answers is None:
                result = await run()
            else:
                caller = grant.caller
                key = self.answers.key(job.question, job.options, job.task, caller.name, caller.key.sha256)
                mode = requested_mode(job.cache, cache_control)
                result = await self.answers.answer(
                    key, mode, job.request_id, run, self.config.request_timeout_s
                )
            if not ran:
                grant.bill = reused_bill(result)
            spans.describe_cache(opened, result.trace, telemetry)
        return Answered(job, ran[0] if ran else None, result)

    async def _observed_run(self, job: Job, grant: Grant, opened: Any, ran: list[Decision]) -> CascadeResult:
        """The decision and the cascade, then what the server learns of them: observers and audit."""
        await self.readiness.wait(self.config.readiness.wait_s)
        self._start_reporting()
        self.demand.arrived()
        decision = self._decide(job)
        ran.append(decision)
        result = await self._run(job, decision, grant.priority)
        grant.bill, grant.latency_s = cascade_bill(result, self.model_ids), result.trace.latency_s
        spans.describe_request(opened, decision, result, grant.bill, self.config.telemetry)
        for observer in self.observers:
            observer.answered(decision, result)
        # The answer is final: its audit, after it (a trace of its own), can neither delay nor change it.
        shed, contended = self.overload.sheds_audits(), self.access.fair.contended()
        self.auditor.served(job, decision, result, overloaded=shed, contended=contended)
        return result

    def _decide(self, job: Job) -> Decision:
        """Everything decided for ``job`` before it runs, once (serve_app/core/decision.py): its class,
        the overload level's relaxed thresholds, its plan."""
        cls = self.classes.of(job.question.kind, job.task)
        cascade = self.config.cascade
        return decide(
            job.options,
            cls,
            server=cascade,
            choose=lambda: self.plans.choose(cls, job.request_id),
            read_overload=self.overload.read,
            relax_to=cascade.overload.relax_to,
        )

    def _start_reporting(self) -> None:
        if self._reporter is None and self.stats_holder is not None:
            loop = asyncio.get_running_loop()  # the replica's task, in no request's context (its trace)
            self._reporter = loop.create_task(self._report_every_interval(), context=contextvars.Context())

    async def _passthrough(
        self, decision: Passthrough, grant: Grant, mode: CacheMode | None = None
    ) -> Forwarded:
        """The request to the model it names, unchanged, after the cascade's image checks; ``decision.
        reason``: why ``mai`` sent it there (in the reply's ``mai`` object and ``x-mai-route-reason``).
        The answer cache's, when the request asks (``mode``): a kept JSON reply bills no tokens."""
        started = time.monotonic()
        model_id, reason = decision.model_id, decision.reason
        payload = await checked_body(decision.payload, self.config.limits, self._fetch_image)
        self.auditor.routed(*destination_reasons(decision))
        await self.readiness.wait(self.config.readiness.wait_s)
        await types_ready()

        def used(usage: Mapping[str, Any] | None) -> None:
            grant.bill = passthrough_bill(model_id, usage)

        def forwarded() -> Awaitable[Forwarded]:
            self.demand.arrived()  # what the model is asked for: a kept reply asks nothing
            return forward(
                self.model_handles[model_id],
                chat_request(payload, model_id, grant.priority),
                model_id,
                reason=reason,
                timeout_s=self.config.request_timeout_s,
                used=used,
                asked=usage_asked(payload),
            )

        with spans.passthrough_span(model_id, reason, grant.caller.name, payload, self.config.telemetry):
            if self.answers is None or mode is None:
                reply, cache = await forwarded(), None
            else:
                caller = (grant.caller.name, grant.caller.key.sha256)
                reply, cache = await self.answers.forwarded(
                    payload, model_id, caller, mode, forwarded, lambda f: f.body
                )
                if isinstance(reply, dict):  # a kept reply
                    grant.bill = Bill(passthrough=True, reused=True)
                    return Forwarded(model_id, reason, body=reply, warnings=decision.warnings, cache=cache)
        seconds = time.monotonic() - started
        self.metrics.record_passthrough("mai" if reason is not None else model_id, seconds)
        self.demand.passed_through(self.model_roles[model_id], seconds)
        return dataclasses.replace(reply, warnings=decision.warnings, cache=cache)

    async def _fetch_image(self, url: str, param: str) -> str:
        """An allowed remote image, downloaded and checked like an inline one, as a data URL."""
        data = await fetch_image(url, remote_image_policy(self.config), param=param)
        return check_image_bytes_under(self.config.limits, data, param=param)

    async def _run(self, job: Job, decision: Decision, priority: int = 0) -> CascadeResult:
        timeout_s = self.config.request_timeout_s
        try:
            return await asyncio.wait_for(
                self.cascade.run(
                    job.question, request_id=job.request_id, decision=decision, priority=priority
                ),
                timeout_s,
            )
        except TimeoutError:
            raise RequestError(
                f"no answer within the request timeout of {timeout_s:g} s", code="timeout", status=504
            ) from None
