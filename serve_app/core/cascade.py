"""The multi-agent inference (MAI) cascade over two abstract VLM clients.

Read ``_Run._cascade`` top to bottom: it is the paper's algorithm (§4, Figure 2c).

1. The small and the large model answer with the Simple prompt, in parallel.
2. Their answers agree -> done (``agree_short``). Agreement is verification's rule
   (``verification.agree``: the same option, verdict, number or words; stricter than the scoring
   rules) and, with ``min_confidence``, both answers at least that confident; with
   ``confident_large``, a confident large answer settles a disagreement (``confident_large``) unless
   the small answer is valid and more confident still. An answer that is not valid for the kind (not
   yes/no, not an option, no number, a hedge) settles nothing: the cascade goes on.
3. Otherwise the small model reasons; its reasoned answer agrees with the large short answer ->
   done (``agree_reasoned``).
4. Otherwise the large model answers once more with the small model's reasoning in its prompt
   (``transfer``): prefill instead of decode.

Whatever the route, the answer served is valid for its kind when any stage gave a valid one
(``_terminal``, the paper's rule completed): when the route's own is not, the first valid answer in
``FALLBACK_ORDER`` is served (route ``fallback``). When none is, the stage that would have answered
is asked once more for the answer alone, in its form (``StageCalls.repair``: structured outputs make it
valid by construction); so a reply is always of its kind, and a reasoning's raw text is never served.

That order is the ``sequential`` plan. A request may run another plan (``plans.py``, ``options.plan``):
``eager`` starts step 3 with step 1 and cancels it when step 1 settles the question (the same
answers); ``reason-first`` skips the small short answer, running the large short answer and the small
model's reasoning together, then steps 3-4 (``_reason_first``); ``full-transfer`` is the paper's Full
RT (``_full_transfer``); ``small-only``, ``large-only`` and ``small-reason-only`` let one model answer
alone, where a calibrated table found that pays (``_one_model_plan``).

A model that fails or times out (``EngineError``, or a stage's timeout) degrades the route, or fails
the request with ``ModelUnavailableError`` when the answer depends on it; a model that refuses the
request's content (``InputRejectedError``: its processor, its context length) fails the whole request
as the client's error, whichever stage met it. Any other exception is a bug: it is never taken for a
failed model, and fails the request.

The question arrives bare (``question_parsing``): a client's answer-format instruction was taken out of
its text, each stage adds the paper's own (Appendix C), and the reply follows the client's
(``instructions.reply_in_format``). Every stage reads a follow-up's conversation (``Question.context``).

Only text crosses between the models. No Ray, vLLM or FastAPI here: the clients are anything with an
async ``complete(messages, *, max_tokens, call, decoding) -> Completion`` (``contracts.VLMClient``);
every stage decodes as ``options.decoding`` says. Times are read from the event loop's clock, so the
calibration replays the cascade itself on a virtual one (``evaluation/replay.py``). The options are in
``contracts.py``, the stage calls in ``stages.py``, the trace records in ``trace.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Mapping

from .answers import is_valid, option_letter
from .contracts import (
    DEFAULT_SELECTORS,
    CascadeOptions,
    Policy,
    Question,
    TransferSelector,
    VLMClient,
    check_transfer_selector,
)
from .decision import Decision, plan_to_run
from .instructions import reply_in_format
from .plans import Plan
from .prompts import PromptLayout
from .question_parsing import choices_note
from .roles import LARGE, SMALL
from .stages import Reasoned, StageCalls, StageSpans, no_spans
from .trace import AgreementCheck, CascadeResult, FallbackRecord, Route, StageRecord, Trace
from .verification import agree

# Where the terminal rule looks for a valid answer when the route's own is not one, most trustworthy
# first: the small model's reasoned answer (its Stage 2 answer, else the one its reasoning wrote), then
# the large model's short answer, then the small model's.
FALLBACK_ORDER = ("stage2_small", "reason_small", "short_large", "short_small")


class ModelUnavailableError(RuntimeError):
    """A model the answer depends on failed or timed out; the server answers 503."""

    def __init__(self, model: str, stage: StageRecord, trace: Trace):
        super().__init__(f"the {model} model failed in stage {stage.name!r}: {stage.error or stage.status}")
        self.model, self.stage, self.trace = model, stage, trace


class Cascade:
    """Runs requests under a policy with a small and a large VLM client."""

    def __init__(
        self,
        small: VLMClient,
        large: VLMClient,
        *,
        selectors: Mapping[str, TransferSelector] | None = None,
        layouts: Mapping[str, PromptLayout] | None = None,
        repairs: bool = True,
        stage_spans: StageSpans = no_spans,
    ):
        self.clients: dict[str, VLMClient] = {SMALL: small, LARGE: large}
        self.stage_spans = stage_spans  # each stage call's span in the operator's traces
        self.repairs = repairs  # an answer out of kind is asked for again (off: a recording's replay)
        # How each model reads a prompt's question and instruction (prompts.PromptLayout): the paper's
        # layout unless a model was trained on another.
        self.layouts: dict[str, PromptLayout] = {
            SMALL: PromptLayout.SEPARATE_LINE,
            LARGE: PromptLayout.SEPARATE_LINE,
            **(layouts or {}),
        }
        self.selectors: dict[str, TransferSelector] = {**DEFAULT_SELECTORS, **(selectors or {})}

    async def run(
        self,
        question: Question,
        options: CascadeOptions | None = None,
        *,
        request_id: str | None = None,
        priority: int = 0,
        audit: bool = False,
        decision: Decision | None = None,
    ) -> CascadeResult:
        """Answer ``question`` under ``options``; every model call names ``request_id`` (a new id when
        None) and runs at the engine ``priority`` (an ``audit``'s calls at the audit priority). With the
        server's ``decision`` for the request (``decision.decide``), the request runs its options, and
        the trace records it.
        An unknown transfer selector is refused before any model is called."""
        options = decision.options if decision is not None else options or CascadeOptions()
        check_transfer_selector(options.transfer_selector, self.selectors)
        run = _Run(self, question, options, request_id or uuid.uuid4().hex, priority, audit, decision)
        return await run.execute()


class _Run:
    """One request under its policy or plan: the algorithm, over its stage calls (``StageCalls``)."""

    def __init__(
        self,
        cascade: Cascade,
        question: Question,
        options: CascadeOptions,
        request_id: str,
        priority: int = 0,
        audit: bool = False,
        decision: Decision | None = None,
    ):
        choice = decision.plan if decision is not None else None
        plan = plan_to_run(options, decision)  # None: a single policy
        trace = Trace(
            policy=options.policy.value,
            plan=plan.value if plan is not None else None,
            plan_reason=choice.reason if choice is not None else None,
            plan_basis=choice.basis.value if choice is not None else None,
            overload=decision.overload if decision is not None else None,
            kind=question.kind,
            kind_basis=question.kind_basis,
            context_turns=len(question.context),
            images=question.image_count,
            format_instruction=question.instruction,
            choices_from_text=list(question.choices_from_text),
            options_named=list(question.choices) if question.options_named else [],
            choices_note=None
            if question.options_named
            else choices_note(question.question, question.choices),
        )
        self.question, self.options, self.trace, self.kind = question, options, trace, question.kind
        self.calls = StageCalls(
            cascade.clients,
            cascade.selectors,
            question,
            options,
            request_id,
            trace,
            priority,
            audit,
            layouts=cascade.layouts,
            spans=cascade.stage_spans,
        )
        self.plan = plan
        self.repairs = cascade.repairs

    async def execute(self) -> CascadeResult:
        plans = {
            Plan.SEQUENTIAL: self._cascade,
            Plan.EAGER: self._cascade,
            Plan.REASON_FIRST: self._reason_first,
            Plan.FULL_TRANSFER: self._full_transfer,
            Plan.SMALL_ONLY: lambda: self._one_model_plan(SMALL, self.calls.short(SMALL)),
            Plan.LARGE_ONLY: lambda: self._one_model_plan(LARGE, self.calls.short(LARGE)),
            Plan.SMALL_REASON_ONLY: self._small_reasoning_plan,
        }
        policies = {
            Policy.CASCADE: plans[self.plan or Plan.SEQUENTIAL],
            Policy.SMALL: lambda: self._single(SMALL, self.calls.short(SMALL)),
            Policy.LARGE: lambda: self._single(LARGE, self.calls.short(LARGE)),
            Policy.SMALL_EXPLAIN: lambda: self._single(SMALL, self.calls.explain(SMALL)),
            Policy.LARGE_EXPLAIN: lambda: self._single(LARGE, self.calls.explain(LARGE)),
            Policy.SMALL_REASON: lambda: self._single_reasoned(SMALL),
            Policy.LARGE_REASON: lambda: self._single_reasoned(LARGE),
            Policy.TRANSFER: self._full_transfer,
        }
        try:
            return await policies[self.options.policy]()
        finally:
            await self.calls.cancel_outstanding()
            self.trace.latency_s = self.calls.now() - self.calls.run_started

    # -- policies ---------------------------------------------------------------------------

    async def _cascade(self) -> CascadeResult:
        eager = self.calls.spawn(self.calls.reason(SMALL)) if self.plan is Plan.EAGER else None
        # Spawned, so that when one stage finds the input refused the other is cancelled with it.
        small_short, large_short = await asyncio.gather(
            self.calls.spawn(self.calls.short(SMALL)), self.calls.spawn(self.calls.short(LARGE))
        )
        if not large_short.ok:
            return await self._large_failed(large_short, fallback=small_short)
        if not small_short.ok:
            return await self._finish(Route.DEGRADED_LARGE_ONLY, large_short)
        if self._verified("short", small_short, large_short):
            return await self._finish(Route.AGREE_SHORT, large_short)
        if self._confident_large(large_short, over=small_short):
            return await self._finish(Route.CONFIDENT_LARGE, large_short)

        reasoned = await (eager if eager is not None else self.calls.reason(SMALL))
        return await self._reasoned_or_transfer(reasoned, large_short)

    async def _reason_first(self) -> CascadeResult:
        large_short, reasoned = await asyncio.gather(
            self.calls.spawn(self.calls.short(LARGE)), self.calls.spawn(self.calls.reason(SMALL))
        )
        if not large_short.ok:
            return await self._large_failed(
                large_short, fallback=reasoned.answer_stage if reasoned else large_short
            )
        return await self._reasoned_or_transfer(reasoned, large_short)

    async def _reasoned_or_transfer(
        self, reasoned: Reasoned | None, large_short: StageRecord
    ) -> CascadeResult:
        """Steps 3 and 4: the reasoned answer agrees with the large short one -> done; else the large
        model answers with the reasoning."""
        if reasoned is None:
            return await self._finish(Route.DEGRADED_NO_REASONING, large_short)
        if self._verified("reasoned", reasoned.answer_stage, large_short):
            return await self._finish(Route.AGREE_REASONED, large_short)

        transfer = await self.calls.transfer(reasoned.reasoning.output)
        if not transfer.ok:
            return await self._finish(Route.DEGRADED_NO_TRANSFER, large_short)
        return await self._finish(Route.TRANSFER, transfer)

    async def _single(self, model: str, call: Awaitable[StageRecord]) -> CascadeResult:
        """One model, one call: its answer, or the request fails when the call did."""
        stage = await call
        if not stage.ok:
            raise ModelUnavailableError(model, stage, self.trace)
        return await self._finish(Route.SINGLE, stage)

    async def _single_reasoned(self, model: str) -> CascadeResult:
        reasoned = await self.calls.reason(model)
        if reasoned is None:
            raise ModelUnavailableError(model, self.trace.stages[-1], self.trace)
        return await self._finish(Route.SINGLE, reasoned.answer_stage)

    async def _full_transfer(self) -> CascadeResult:
        reasoned = await self.calls.reason(SMALL)
        if reasoned is None:
            large_short = await self.calls.short(LARGE)
            if not large_short.ok:
                raise ModelUnavailableError(LARGE, large_short, self.trace)
            return await self._finish(Route.DEGRADED_NO_REASONING, large_short)
        transfer = await self.calls.transfer(reasoned.reasoning.output)
        if not transfer.ok:
            return await self._large_failed(transfer, fallback=reasoned.answer_stage)
        return await self._finish(Route.TRANSFER, transfer)

    async def _one_model_plan(self, model: str, call: Awaitable[StageRecord]) -> CascadeResult:
        """A single-model plan (a calibrated table chose it for the class): one model's answer."""
        stage = await call
        return await self._finish(Route.SINGLE, stage) if stage.ok else await self._instead_of(model, stage)

    async def _small_reasoning_plan(self) -> CascadeResult:
        reasoned = await self.calls.reason(SMALL)
        if reasoned is None:
            return await self._instead_of(SMALL, self.trace.stages[-1])
        return await self._finish(Route.SINGLE, reasoned.answer_stage)

    async def _instead_of(self, model: str, failed: StageRecord) -> CascadeResult:
        """A single-model plan's model failed: the other model's short answer, as a degraded route;
        the large model failing under ``on_large_failure: error`` fails the request."""
        if model == LARGE:
            if self.options.on_large_failure == "error":
                raise ModelUnavailableError(LARGE, failed, self.trace)
            return await self._large_failed(failed, fallback=await self.calls.short(SMALL))
        large_short = await self.calls.short(LARGE)
        if not large_short.ok:
            raise ModelUnavailableError(LARGE, large_short, self.trace)
        return await self._finish(Route.DEGRADED_LARGE_ONLY, large_short)

    # -- outcomes ---------------------------------------------------------------------------

    def _verified(self, name: str, first: StageRecord, second: StageRecord) -> bool:
        """The verification: the two answers agree and, under ``min_confidence``, both are confident."""
        threshold = self.options.min_confidence
        answers = (first.answer, second.answer)
        matched = self._agree(*answers)  # an answer not valid for the kind never matches
        confidences = (first.confidence, second.confidence)
        confident = threshold == 0 or all(c is not None and c >= threshold for c in confidences)
        check = AgreementCheck(
            name, answers, self._valid(*answers), confidences, matched, threshold, matched and confident
        )
        self.trace.checks.append(check)
        return check.accepted

    def _confident_large(self, large: StageRecord, *, over: StageRecord) -> bool:
        """Settle a stage-1 disagreement with the large short answer when it is confident enough, and
        never against a valid small answer that is more confident still."""
        threshold = self.options.confident_large
        if threshold is None:
            return False
        answers, confidences = (large.answer, over.answer), (large.confidence, over.confidence)
        valid = self._valid(*answers)
        confident = valid[0] and large.confidence is not None and large.confidence >= threshold
        overruled = valid[1] and over.confidence is not None and over.confidence > (large.confidence or 0.0)
        check = AgreementCheck(
            "confident_large", answers, valid, confidences, False, threshold, confident and not overruled
        )
        self.trace.checks.append(check)
        return check.accepted

    def _valid(self, *answers: str | None) -> tuple[bool, ...]:
        return tuple(is_valid(answer, self.kind, choices=self.question.choices) for answer in answers)

    def _agree(self, a: str | None, b: str | None) -> bool:
        return agree(
            a,
            b,
            self.kind,
            choices=self.question.choices,
            decimal_tolerance=self.options.decimal_tolerance,
        )

    async def _large_failed(self, failed: StageRecord, *, fallback: StageRecord) -> CascadeResult:
        if self.options.on_large_failure == "small" and fallback.ok:
            return await self._finish(Route.DEGRADED_SMALL_ONLY, fallback)
        raise ModelUnavailableError(LARGE, failed, self.trace)

    async def _finish(self, route: Route, stage: StageRecord) -> CascadeResult:
        """Serve ``stage``'s answer by ``route``; for MAI, the terminal rule first (``_terminal``),
        then, when the answer is still not one of its kind, the repair (``StageCalls.repair``; one
        the engine fails fails the request as a failed model does). The other policies are
        baselines: they serve what their model said, with its validity."""
        if self.plan is not None:  # MAI's own rules; a baseline serves what its model said
            route, stage = self._terminal(route, stage)
        repairs = self.repairs and self.plan is not None
        unanswered = repairs and stage.ok and not self.calls.answered(stage)
        form = self.calls.repairable(stage) if unanswered else None
        if form is not None:
            await self.calls.cancel_outstanding()  # an eager reasoning no longer matters
            repaired = await self.calls.repair(stage, form)  # the answer asked for once more, in its form
            if not repaired.ok:  # the engine failed, timed out or refused the form: a failed model
                raise ModelUnavailableError(repaired.model, repaired, self.trace)
            if self.trace.repair is not None and self.trace.repair.answered:
                stage = repaired
            # else the engine answered, not in the form (a token budget too small for it): the
            # answer stays as it was, answer_valid false, and the trace's repair says so
        self.trace.route = route.value
        self.trace.answer_parsed = stage.answer is not None
        self.trace.answer_valid = self._valid(stage.answer)[0]
        if stage.answer is None and self.plan is not None:
            answer = ""  # a reasoning's raw text is no answer; the trace says none was read
        elif stage.answer is None:  # a single model's reply with no answer marked: as it wrote it
            answer = stage.output.strip()
        elif self.question.options_named and self.trace.answer_valid:
            answer = self._option_text(stage.answer)
        else:
            answer = reply_in_format(
                stage.answer, self.question.instruction, self.kind, self.question.choices
            )
        logprobs = self.calls.token_logprobs.get(stage.name) if self.options.decoding.logprobs else None
        return CascadeResult(answer=answer, trace=self.trace, logprobs=logprobs)

    def _terminal(self, route: Route, stage: StageRecord) -> tuple[Route, StageRecord]:
        """The served answer is valid for its kind whenever any stage gave a valid one: when the
        route's own is not, the first valid answer in ``FALLBACK_ORDER`` is served instead (route
        ``fallback``); when none is, the route's own (which ``_finish`` then has repaired)."""
        if self._valid(stage.answer)[0]:
            return route, stage
        answered = {s.name: s for s in self.trace.stages if s.ok and s.answer is not None}
        for name in FALLBACK_ORDER:
            candidate = answered.get(name)
            if candidate is not None and candidate is not stage and self._valid(candidate.answer)[0]:
                self.trace.fallback = FallbackRecord(route.value, stage.name, stage.answer, candidate.name)
                return Route.FALLBACK, candidate
        return route, stage

    def _option_text(self, answer: str) -> str:
        """The text of the option ``answer`` names (an either/or question's reply)."""
        letter = option_letter(answer, self.question.choices)
        return self.question.choices[ord(letter) - ord("A")] if letter else answer
