"""The cascade's stage calls: one model call per stage, recorded in the trace, and the calls a request
has in flight. ``cascade._Run`` holds one ``StageCalls`` and composes its calls into the algorithm;
here is only how a stage is asked (its prompt, budget, timeout) and what is recorded of it. No Ray,
vLLM or FastAPI.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from .answer_forms import FREE_TEXT_FIRST, AnswerForm, AnswerFormError, answer_form, repair_form
from .answers import extract_answer, is_valid
from .contracts import (
    CascadeOptions,
    Completion,
    ConstraintRejectedError,
    EngineCall,
    EngineError,
    InputRejectedError,
    Question,
    Selection,
    TokenLogprob,
    TransferSelector,
    VLMClient,
    count_words,
)
from .prompts import PromptKind, PromptLayout, build_messages
from .roles import LARGE
from .trace import RepairRecord, StageRecord, Trace, TransferRecord
from .verification import answer_confidence, confidence_read

# What a stage call runs inside, given its record (filled in as the call ends): the ingress's span of
# it in the operator's traces (serve_app/telemetry/spans.py: ``StageSpans``); by default nothing.
StageSpans = Callable[[StageRecord], AbstractContextManager[Any]]


def no_spans(record: StageRecord) -> AbstractContextManager[Any]:
    return nullcontext()


@dataclass
class Reasoned:
    reasoning: StageRecord  # the reasoning call
    answer_stage: StageRecord  # where the answer was read: the reasoning itself or its S2 call

    @property
    def answer(self) -> str | None:
        return self.answer_stage.answer


class StageCalls:
    """One request's model calls: each stage asked and recorded, and those still in flight."""

    def __init__(
        self,
        clients: Mapping[str, VLMClient],
        selectors: Mapping[str, TransferSelector],
        question: Question,
        options: CascadeOptions,
        request_id: str,
        trace: Trace,
        priority: int = 0,
        audit: bool = False,
        *,
        layouts: Mapping[str, PromptLayout] | None = None,
        spans: StageSpans = no_spans,
    ):
        self.clients, self.selectors, self.spans = clients, selectors, spans
        self.layouts = layouts or {}
        self.question, self.options, self.request_id, self.trace = question, options, request_id, trace
        self.priority, self.audit = priority, audit  # the engine priority of its calls; an audit's?
        self.kind: str = question.kind
        # The answer's closed form every stage asks for, when the options ask for one (None: free).
        self.form = (
            answer_form(self.kind, question.choices, options_named=question.options_named)
            if options.structured_answers
            else None
        )
        # When the run started, on the cascade's clock: the request's latency and each stage's start
        # are read from it.
        self.run_started = self.now()
        self._tasks: list[asyncio.Task] = []
        # Each stage's generated tokens with their logprobs, by stage name (the reply's logprobs).
        self.token_logprobs: dict[str, tuple[TokenLogprob, ...] | None] = {}
        # The reasoning each stage's prompt carried, by stage name: a repair asks with the same prompt.
        self._reasoning_in: dict[str, str | None] = {}

    # -- stages -----------------------------------------------------------------------------

    async def short(self, model: str) -> StageRecord:
        return await self._call(
            f"short_{model}",
            model,
            PromptKind.SIMPLE,
            self.options.max_tokens.simple,
            self.options.timeouts.short_s,
        )

    async def explain(self, model: str) -> StageRecord:
        return await self._call(
            f"explain_{model}",
            model,
            PromptKind.EXPLAIN,
            self.options.max_tokens.explain,
            self.options.timeouts.explain_s,
        )

    async def reason(self, model: str) -> Reasoned | None:
        """The model reasons, then yields its answer inline or through an S2 call. None when the
        reasoning call itself failed."""
        reasoning = await self._call(
            f"reason_{model}",
            model,
            PromptKind.REASONING,
            self.options.max_tokens.reasoning,
            self.options.timeouts.reasoning_s,
        )
        if not reasoning.ok:
            return None
        if self.options.resolved_stage2_answer() == "inline":
            return Reasoned(reasoning, reasoning)
        stage2 = await self._call(
            f"stage2_{model}",
            model,
            PromptKind.STAGE2,
            self.options.max_tokens.stage2,
            self.options.timeouts.stage2_s,
            reasoning=reasoning.output.strip(),
        )
        # A failed S2 call leaves the answer the reasoning wrote inline, if any.
        return Reasoned(reasoning, stage2 if stage2.ok else reasoning)

    async def transfer(self, reasoning: str) -> StageRecord:
        return await self._call(
            "transfer_large",
            LARGE,
            PromptKind.TRANSFER,
            self.options.max_tokens.transfer,
            self.options.timeouts.transfer_s,
            reasoning=await self._select(reasoning.strip()),
        )

    def answered(self, stage: StageRecord) -> bool:
        """An answer of the question's kind: valid for a closed kind, read at all for open text (where
        "none" or "N/A" can be the answer), but never a bracket cut off ("[[Speed limit")."""
        if stage.answer is None:
            return False
        if self.kind == "text":
            return "[[" not in stage.answer and "]]" not in stage.answer
        return is_valid(stage.answer, self.kind, choices=self.question.choices)

    def repairable(self, stage: StageRecord) -> AnswerForm | None:
        """The form ``stage``'s answer is asked for again in; None when no repair can be asked: an
        engine that refused a grammar already, or options no grammar can tell apart (the answer is
        then served as it was)."""
        if stage.constraint_refused is not None:
            return None
        try:
            return repair_form(self.kind, self.question.choices, options_named=self.question.options_named)
        except AnswerFormError:
            return None

    async def repair(self, stage: StageRecord, form: AnswerForm) -> StageRecord:
        """The model that gave ``stage`` asked once more for the answer alone, in the question's form,
        constrained by the engine's structured outputs (``repair_form``), with the stage's own prompt
        so that the prefix cache serves it: a reasoning or an explanation is asked its Stage 2
        question after its own text. An engine that refuses the form fails the repair (it is never
        asked again without it). The trace's ``repair`` says whether it answered in kind."""
        kind = PromptKind(stage.prompt_kind)
        reasoning: str | None
        if kind in FREE_TEXT_FIRST:
            prompt, reasoning = PromptKind.STAGE2, stage.output.strip()
        else:
            prompt, reasoning = kind, self._reasoning_in.get(stage.name)
        budgets = self.options.max_tokens
        budget = {PromptKind.SIMPLE: budgets.simple, PromptKind.TRANSFER: budgets.transfer}.get(
            prompt, budgets.stage2
        )
        repair = await self._call(
            f"repair_{stage.model}",
            stage.model,
            prompt,
            budget,
            self._timeout(prompt),
            reasoning=reasoning,
            form=form,
        )
        answered = repair.ok and self.answered(repair)
        self.trace.repair = RepairRecord(stage.name, stage.answer, repair.name, answered)
        if repair.ok and not answered:
            repair.error = f"its answer {repair.answer!r} is not one of a {self.kind} question"
        return repair

    async def _select(self, reasoning: str) -> str:
        """The part of the reasoning the large model reads, per the transfer selector; a failing
        selector sends the whole reasoning (and says so in the trace) rather than fail the request."""
        name = self.options.transfer_selector
        record = self.trace.transfer = TransferRecord(selector=name)
        started = self.now()
        try:
            selected = await self.selectors[name](reasoning, self.question)
        except EngineError as exc:  # the scorer's model failed; a bug in a selector fails the request
            record.error = f"{type(exc).__name__}: {exc}; the full reasoning was sent"
            selected = reasoning
        if not isinstance(selected, Selection):
            selected = Selection(selected, count_words(reasoning), count_words(selected))
        record.tokens_before, record.tokens_after, record.unit = (
            selected.tokens_before,
            selected.tokens_after,
            selected.unit,
        )
        record.latency_s = self.now() - started
        return selected.text

    async def _call(
        self,
        name: str,
        model: str,
        prompt_kind: PromptKind,
        max_tokens: int,
        timeout_s: float | None,
        *,
        reasoning: str | None = None,
        form: AnswerForm | None = None,
    ) -> StageRecord:
        """One model call, recorded in the trace; failures and timeouts are recorded, not raised.
        Cancellation is recorded and re-raised, which cancels the client's call. ``form``: a repair's
        form, its whole completion ``[[<answer>]]`` (else the request's, ``self.form``)."""
        named = self.question.options_named  # the question names its options: asked as it is
        messages = build_messages(
            self.question.images,
            self.question.question,
            () if named else self.question.choices,
            "text" if named else self.kind,
            prompt_kind,
            reasoning=reasoning,
            transfer_form=self.options.transfer_form,
            system=self.question.system,
            layout=self.layouts.get(model, PromptLayout.SEPARATE_LINE),
            context=self.question.context,
        )
        stage = StageRecord(name=name, model=model, prompt_kind=prompt_kind.value)
        constrained = form or self.form
        stage.constraint = constrained.pattern if constrained is not None else None
        self._reasoning_in[name] = reasoning
        self.trace.stages.append(stage)
        started = self.now()
        stage.start_s = started - self.run_started
        call = EngineCall(
            self.request_id,
            name,
            prompt_kind,
            self.kind,
            self.priority,
            form.regex(PromptKind.STAGE2) if form is not None else self._regex(prompt_kind),
            self.audit,
            confidence_read(prompt_kind, self.options),
        )
        with self.spans(stage):  # open while the call runs: the model replica's span is its child
            await self._ask(stage, call, messages, max_tokens, timeout_s, strict=form is not None)
        return stage

    async def _ask(
        self,
        stage: StageRecord,
        call: EngineCall,
        messages: list[dict],
        max_tokens: int,
        timeout_s: float | None,
        *,
        strict: bool,
    ) -> None:
        """``stage``'s call, its outcome in its record (``_call`` says which are raised)."""
        started = self.now()
        try:
            completion = await asyncio.wait_for(
                self._complete(stage.model, messages, max_tokens, call, stage, strict=strict), timeout_s
            )
        except asyncio.CancelledError:
            stage.status, stage.latency_s = "cancelled", self.now() - started
            raise
        except TimeoutError:
            stage.status, stage.error = "timeout", f"no answer within {timeout_s} s"
            stage.latency_s = self.now() - started
        except InputRejectedError as exc:  # the input, not the model: the request fails as a 4xx
            stage.status, stage.error = "rejected", str(exc)
            stage.latency_s = self.now() - started
            exc.model, exc.stage = stage.model, stage.name
            raise
        except EngineError as exc:  # a failed model degrades the route; it never crashes it
            stage.status, stage.error = "error", f"{type(exc).__name__}: {exc}"
            stage.latency_s = self.now() - started
        else:
            self._record(stage, completion)

    def _record(self, stage: StageRecord, completion: Completion) -> None:
        """What ``stage``'s call answered, in its record."""
        stage.status, stage.output = "ok", completion.text
        stage.prompt_tokens, stage.completion_tokens = completion.prompt_tokens, completion.completion_tokens
        stage.cached_tokens, stage.replica = completion.cached_tokens, completion.replica
        stage.latency_s, stage.finish_reason = completion.latency_s, completion.finish_reason
        self.token_logprobs[stage.name] = completion.token_logprobs
        stage.answer = extract_answer(completion.text)
        if stage.answer is not None:
            stage.confidence = answer_confidence(completion.text, completion.token_logprobs)

    def _timeout(self, prompt: PromptKind) -> float | None:
        timeouts = self.options.timeouts
        return {PromptKind.SIMPLE: timeouts.short_s, PromptKind.TRANSFER: timeouts.transfer_s}.get(
            prompt, timeouts.stage2_s
        )

    def _regex(self, prompt_kind: PromptKind) -> str | None:
        return self.form.regex(prompt_kind) if self.form is not None else None

    async def _complete(
        self,
        model: str,
        messages: list[dict],
        max_tokens: int,
        call: EngineCall,
        stage: StageRecord,
        *,
        strict: bool = False,
    ) -> Completion:
        """The model's completion of ``call``; an engine that refuses the answer's grammar is asked
        again without it (unless ``strict``: the refusal is the stage's failure), and the stage says
        so."""
        client, decoding = self.clients[model], self.options.decoding
        try:
            return await client.complete(messages, max_tokens=max_tokens, call=call, decoding=decoding)
        except ConstraintRejectedError as exc:
            stage.constraint_refused = str(exc)
            if strict:
                raise
            free = dataclasses.replace(call, constraint=None)
            return await client.complete(messages, max_tokens=max_tokens, call=free, decoding=decoding)

    @staticmethod
    def now() -> float:
        """The event loop's clock: the wall clock when served, a virtual one when replayed."""
        return asyncio.get_running_loop().time()

    # -- in-flight calls --------------------------------------------------------------------

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._tasks.append(task)
        return task

    async def cancel_outstanding(self) -> None:
        """Cancel the calls the answer no longer needs and wait until they have stopped."""
        pending = [task for task in self._tasks if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
