"""The real cascade replayed over a recorded pass: no re-implementation of its routes.

A calibration pass records, per question, what every stage answered (its parsed answer, confidence,
tokens and time). Decoding is greedy, so a stage asked again answers the same: ``ReplayClient``
answers each stage from the recording, and ``replay`` runs ``serve_app.core.cascade`` itself over
those clients under any options (thresholds, plans, policies). The clock is virtual
(``harness.virtual_clock.VirtualClockLoop``): a stage takes its recorded time, stages that run
together overlap as the plan orders them, and thousands of questions replay in seconds. The trace's
times are the cascade's own (its latency, each stage's, a cancelled eager reasoning's until it was
cancelled).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.virtual_clock import VirtualClockLoop
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import (
    GREEDY,
    CascadeOptions,
    Completion,
    Decoding,
    EngineCall,
    Question,
    TokenLogprob,
)
from serve_app.core.trace import CascadeResult


@dataclass(frozen=True)
class RecordedStage:
    """What one stage answered in the recorded pass."""

    answer: str | None
    confidence: float | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


# question id -> stage name ("short_small", "reason_small", ...) -> what it answered
Recording = Mapping[str, Mapping[str, RecordedStage]]


class ReplayGapError(LookupError):
    """The cascade asked for a stage the recorded pass does not hold (a bug in the caller's options,
    e.g. a Stage 2 call when only inline answers were recorded): never taken for a failed model."""


class ReplayClient:
    """A ``VLMClient`` that answers each stage of question ``call.request_id`` from the recording,
    after the stage's recorded time on the loop's clock, with logprobs that give its answer the
    recorded confidence."""

    def __init__(self, recording: Recording):
        self.recording = recording

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        stage = self.recording.get(call.request_id, {}).get(call.stage)
        if stage is None:
            raise ReplayGapError(f"question {call.request_id!r} has no recorded {call.stage!r} stage")
        await asyncio.sleep(stage.latency_s)
        text = "" if stage.answer is None else f"[[{stage.answer}]]"
        return Completion(
            text,
            prompt_tokens=stage.prompt_tokens,
            completion_tokens=stage.completion_tokens,
            latency_s=stage.latency_s,
            token_logprobs=_logprobs(stage.answer, stage.confidence),
        )


def _logprobs(answer: str | None, confidence: float | None) -> tuple[TokenLogprob, ...] | None:
    if answer is None or confidence is None:
        return None
    logprob = math.log(confidence) if confidence > 0 else -1e4
    return (TokenLogprob("[[", 0.0), TokenLogprob(answer, logprob), TokenLogprob("]]", 0.0))


def replay(
    questions: Mapping[str, Question], options: CascadeOptions, recording: Recording
) -> dict[str, CascadeResult | BaseException]:
    """Every question (id -> question) run through the real cascade under ``options``, its stages
    answered from ``recording``, all on one virtual clock; a run that raised keeps its exception.
    Without repairs: the figures of a question the server would repair count its unrepaired answer."""
    client = ReplayClient(recording)
    # A recording has no repair (its answer would be the engine's under a grammar, never recorded):
    # a question no stage answered in kind is replayed with that answer, as it was scored before.
    cascade = Cascade(client, client, repairs=False)

    async def run_all() -> list[CascadeResult | BaseException]:
        runs = [cascade.run(question, options, request_id=qid) for qid, question in questions.items()]
        return await asyncio.gather(*runs, return_exceptions=True)

    loop = VirtualClockLoop()
    try:
        results = loop.run_until_complete(run_all())
    finally:
        loop.close()
    return dict(zip(questions, results, strict=True))


def engine_seconds(result: CascadeResult) -> float:
    """The seconds of model calls the request made, whether they ran side by side or not."""
    return sum(stage.latency_s for stage in result.trace.stages)


def recorded_stages(stages: Sequence[Mapping[str, object]]) -> dict[str, RecordedStage]:
    """A prediction row's ``stages`` (``evaluation.predictions.prediction_of``), the answered ones by name."""
    recorded = {}
    for stage in stages:
        if stage.get("status") == "ok":
            recorded[str(stage["name"])] = RecordedStage(
                stage.get("answer"),  # type: ignore[arg-type]
                stage.get("confidence"),  # type: ignore[arg-type]
                int(stage.get("prompt_tokens") or 0),  # type: ignore[call-overload]
                int(stage.get("completion_tokens") or 0),  # type: ignore[call-overload]
                float(stage.get("latency_s") or 0.0),  # type: ignore[arg-type]
            )
    return recorded
