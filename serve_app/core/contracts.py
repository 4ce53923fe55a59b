"""What crosses the cascade's boundary, as typed objects: the options a request runs under (its
policy, token budgets, stage timeouts, decoding, the verification and transfer settings: server
defaults from the config's ``cascade:`` section, some of which a request may override), the question,
the identity of a model call, the client a model is reached through and what it returns, and what a
transfer selector keeps (the selectors: ``budget_selector``, ``attention_selector``).

No Ray, vLLM or FastAPI here: a client is anything with ``complete(messages, *, max_tokens, call,
decoding)``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .answers import ANSWER_KINDS
from .instructions import Instruction
from .plans import PlanName
from .prompts import PromptKind, TransferForm, Turn


class Policy(StrEnum):
    CASCADE = "cascade"  # MAI
    SMALL = "small"  # small model, Simple prompt
    LARGE = "large"  # large model, Simple prompt
    SMALL_EXPLAIN = "small-explain"  # small model, Explain prompt (a short explanation, then the answer)
    LARGE_EXPLAIN = "large-explain"  # large model, Explain prompt: the paper's E rows
    SMALL_REASON = "small-reason"  # small model, Reasoning (+ S2), the paper's 2B(R)
    LARGE_REASON = "large-reason"  # large model, Reasoning (+ S2), the paper's 8B(R)
    TRANSFER = "transfer"  # the paper's "Full RT": small reasons, large always answers with it


# The paper's 2B(R)/8B(R): one model reasons, then answers with the Stage 2 prompt unless told otherwise.
REASON_BASELINES = frozenset({Policy.SMALL_REASON, Policy.LARGE_REASON})

# Two decimal answers to a number question agree within this share of the larger, by default.
DECIMAL_TOLERANCE = 0.01


class TokenBudgets(BaseModel):
    """``max_tokens`` per prompt kind."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    simple: int = Field(32, ge=1)
    explain: int = Field(512, ge=1)
    reasoning: int = Field(2048, ge=1)
    stage2: int = Field(32, ge=1)
    transfer: int = Field(32, ge=1)


class StageTimeouts(BaseModel):
    """Seconds each stage may take; ``None`` waits as long as the model does."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    short_s: float | None = Field(None, gt=0)
    explain_s: float | None = Field(None, gt=0)
    reasoning_s: float | None = Field(None, gt=0)
    stage2_s: float | None = Field(None, gt=0)
    transfer_s: float | None = Field(None, gt=0)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The sampling fields' bounds, defined once: the server's ``Decoding`` and a request's fields
# (edge/protocol.py) read them from here.
Temperature = Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]  # what vLLM's request takes
TopLogprobs = Annotated[int, Field(ge=0, le=20)]


class Decoding(BaseModel):
    """How every stage decodes: the client's sampling parameters (greedy by default), and whether the
    reply carries the logprobs of the completion its answer was read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    temperature: Temperature = 0.0
    top_p: TopP = 1.0
    seed: Seed | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs = 0

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs_need_logprobs(cls, value: int, info: ValidationInfo) -> int:
        """The one check, for the server's decoding and a request's (merged over it)."""
        if value and not info.data.get("logprobs"):
            raise ValueError(f"top_logprobs ({value}) needs logprobs: true")
        return value


GREEDY = Decoding()


class CascadeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Policy = Policy.CASCADE
    # How a reasoning stage yields its answer: "inline" parses [[answer]] from the reasoning (the
    # paper's final cascade), "two_stage" asks again with the Stage 2 prompt (B.3). None: the
    # paper's choice per policy (inline for cascade and transfer, two_stage for the baselines).
    stage2_answer: Literal["inline", "two_stage"] | None = None
    # The order of the cascade's stages (serve_app/core/plans.py); ``eager`` starts the small model's
    # reasoning together with stage 1 and cancels it when stage 1 agrees. None: the paper's
    # ``sequential``. A request's decision sets it (serve_app/core/decision.py): the request's own, or
    # the plan controller's under ``cascade.adaptive``.
    plan: PlanName | None = None
    # Reasoning-transfer prompt; None: the paper's choice per answer kind.
    transfer_form: TransferForm | None = None
    transfer_selector: str = "full"
    on_large_failure: Literal["error", "small"] = "error"
    max_tokens: TokenBudgets = TokenBudgets()
    decoding: Decoding = GREEDY
    timeouts: StageTimeouts = StageTimeouts()
    # Verification (serve_app/core/verification.py): two decimal answers to a number question agree
    # within this share of the larger (integers agree only when equal). Open text agrees on its words;
    # ANLS and ChartQA's 5 % are what the evaluation scores with, never what verification accepts.
    decimal_tolerance: float = Field(DECIMAL_TOLERANCE, ge=0, le=0.05, allow_inf_nan=False)
    # Verification: an agreement counts only when both answers are at least this confident (the
    # probability of the answer's tokens; an answer without one counts as not confident). 0 is the
    # paper's rule: every agreement counts.
    min_confidence: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)
    # A stage-1 disagreement is settled by the large model's short answer, without reasoning, when
    # that answer is at least this confident (route confident_large). None: off, the paper's rule.
    confident_large: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    # Answers valid by construction (answer_forms.py): where the answer kind is closed (yes/no, a
    # choice, a number), every stage asks its engine for that form with structured outputs.
    structured_answers: bool = False

    def resolved_stage2_answer(self) -> str:
        if self.stage2_answer is not None:
            return self.stage2_answer
        return "two_stage" if self.policy in REASON_BASELINES else "inline"


@dataclass(frozen=True)
class Question:
    """A question as the cascade asks it. Read from a client's text by
    ``question_parsing.read_question``, the one place its answer kind is decided."""

    question: str
    images: tuple[str, ...] = ()  # the question's own images (data URLs), in the order sent
    choices: tuple[str, ...] = ()
    kind: str = field(kw_only=True)  # one of answers.ANSWER_KINDS
    # What decided the kind (question_parsing.answer_kind): request, options, instruction, either_or,
    # number_cue, imperative:<verb>, auxiliary_verb or default.
    kind_basis: str = field(default="request", kw_only=True)
    system: tuple[str, ...] = ()  # the client's system messages: every stage's prompt starts with them
    # The client's answer-format instruction, taken out of the question text: the reply follows it
    # (question_parsing.parse_question). None: none was recognised, the text is as sent.
    instruction: Instruction | None = None
    choices_from_text: tuple[str, ...] = ()  # the options read from the client's text, () if none
    # The choices are the options an either/or question names ("Is it red or blue?", question_parsing.py):
    # the stages get the question as asked with the short-answer prompt, the reply is the option's text.
    options_named: bool = False
    context: tuple[Turn, ...] = ()  # the conversation before the question, oldest first

    def __post_init__(self) -> None:
        object.__setattr__(self, "images", tuple(self.images))
        object.__setattr__(self, "context", tuple(self.context))
        object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "system", tuple(self.system))
        object.__setattr__(self, "choices_from_text", tuple(self.choices_from_text))
        if self.kind not in ANSWER_KINDS:
            raise ValueError(f"answer kind must be one of {', '.join(ANSWER_KINDS)}, got {self.kind!r}")

    @property
    def image_url(self) -> str | None:
        """The first image of the request, the conversation's included (the one a scorer reads)."""
        earlier = [image for turn in self.context for image in turn.images]
        return next(iter((*earlier, *self.images)), None)

    @property
    def image_count(self) -> int:
        """The images the request carries, the conversation's included."""
        return len(self.images) + sum(len(turn.images) for turn in self.context)


@dataclass(frozen=True)
class EngineCall:
    """Who is calling a model: the MAI request, the cascade stage, the prompt kind it sends and the
    kind of answer the question wants."""

    request_id: str
    stage: str
    prompt_kind: PromptKind
    answer_kind: str = "text"
    # The engine priority the call is sent at (vLLM runs lower values first): a served call's is its
    # API key's class and share (serve_app/edge/access.py), 0 by default; an audit's is the audit
    # priority, so audits wait behind served calls.
    priority: int = 0
    # The regex the completion must match (the engine's structured outputs: answer_forms.py); None:
    # free text.
    constraint: str | None = None
    audit: bool = False  # an audit's call (serve_app/edge/learning.py), not a served one
    # Its answer's confidence is read (``verification.confidence_read``): the client asks the engine
    # for the generated tokens' logprobs when the server keeps answer confidences.
    confidence: bool = False

    @property
    def is_audit(self) -> bool:
        return self.audit


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token as the engine returned it, with its log-probability and, when asked for,
    the most likely tokens at its position."""

    token: str
    logprob: float
    top: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    # The generated tokens with their logprobs, when the engine returned them.
    token_logprobs: tuple[TokenLogprob, ...] | None = None
    # Prompt tokens the engine served from its prefix cache (usage.prompt_tokens_details.cached_tokens);
    # None when the engine did not say.
    cached_tokens: int | None = None
    # The replica the call ran on, as its reply names it; None when the reply does not say.
    replica: str | None = None
    finish_reason: str | None = None  # the engine's: stop, length, ...; None when the reply does not say


class EngineError(Exception):
    """A model call failed for a reason outside MAI Serve's code: the one family a ``VLMClient``
    raises. The cascade degrades a route only on these (or a stage's timeout); anything else a client
    raises is a bug, and fails the request."""


class EngineUnavailableError(EngineError):
    """The engine or the way to it failed: a replica that died, refused the call under load, or
    answered with a server error or with nothing usable."""


class EngineTimeoutError(EngineError, TimeoutError):
    """The engine did not answer within the client's own deadline."""


class ConstraintRejectedError(EngineError):
    """The engine refused the grammar a call asked its completion to follow (structured outputs it
    does not support, or cannot compile): the stage is asked again without it."""


class InputRejectedError(EngineError):
    """A model refused the request's content (an image its processor cannot take, a prompt over its
    context length): the client's input, not the model's health. ``code`` names the kind. The cascade
    fails the whole request with it (a 4xx) and names the model and stage that refused."""

    def __init__(self, message: str, code: str = "invalid_request", status: int = 400):
        super().__init__(message)
        self.code, self.status = code, status
        self.model: str | None = None
        self.stage: str | None = None


class VLMClient(Protocol):
    """How the cascade reaches a model. ``complete`` raises only the ``EngineError`` family for a call
    that failed outside our code; anything else it raises fails the request as a bug."""

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion: ...


@dataclass(frozen=True)
class Selection:
    """What a transfer selector kept of the reasoning, and how much that was (in its ``unit``)."""

    text: str
    tokens_before: int
    tokens_after: int
    unit: str = "words"


# A transfer selector picks what of the small model's reasoning the large model reads: the text, or a
# Selection that also says how many tokens it kept.
TransferSelector = Callable[[str, Question], Awaitable["str | Selection"]]


GAP = " … "


class UnknownSelectorError(ValueError):
    """A transfer selector that is not available here."""


def check_transfer_selector(name: str, available: Mapping[str, Any] | tuple[str, ...]) -> None:
    """The one check of a selector name, against the selectors available (a mapping or names)."""
    if name not in available:
        raise UnknownSelectorError(
            f"unknown transfer_selector {name!r}; available here: {', '.join(sorted(available))}"
        )


def count_words(text: str) -> int:
    return len(text.split())


async def keep_full_reasoning(reasoning: str, question: Question) -> str:
    return reasoning


DEFAULT_SELECTORS: Mapping[str, TransferSelector] = {"full": keep_full_reasoning}
_KEY_WORD = re.compile(r"\d|^\(?[A-Z][.):]?$|^\[\[.*\]\]$")


def budget_select(reasoning: str, head_words: int, tail_words: int) -> Selection:
    """Keep the first ``head_words`` and last ``tail_words`` words and every number or option letter."""
    words = reasoning.split()
    keep = [
        i < head_words or i >= len(words) - tail_words or bool(_KEY_WORD.search(word.strip(",;")))
        for i, word in enumerate(words)
    ]
    pieces: list[str] = []
    run: list[str] = []
    for word, kept in zip(words, keep, strict=True):
        if kept:
            run.append(word)
        elif run:
            pieces.append(" ".join(run))
            run = []
    if run:
        pieces.append(" ".join(run))
    text = GAP.join(pieces)
    if keep and not keep[0]:
        text = GAP.strip() + " " + text
    return Selection(text, len(words), sum(keep))


def budget_selector(head_words: int, tail_words: int) -> TransferSelector:
    async def select(reasoning: str, question: Question) -> Selection:
        return budget_select(reasoning, head_words, tail_words)

    return select


def attention_selector(
    score: Callable[..., Awaitable[dict[str, Any]]], delta: float, layer: int
) -> TransferSelector:
    """``score(image_url, question, reasoning, delta, layer)`` is the scorer deployment's ``select``."""

    async def select(reasoning: str, question: Question) -> Selection:
        result = await score(question.image_url, question.question, reasoning, delta, layer)
        return Selection(result["text"], result["tokens_before"], result["tokens_after"], unit="tokens")

    return select
