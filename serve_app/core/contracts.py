"""What crosses the cascade's boundary, as typed objects: the question, the identity of a model call,
the client a model is reached through and what it returns, and what a transfer selector keeps.

No Ray, vLLM or FastAPI here: a client is anything with ``complete(messages, *, max_tokens, call,
decoding)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from .answers import ANSWER_KINDS
from .format_instructions import Instruction
from .options import GREEDY, Decoding
from .prompts import PromptKind


@dataclass(frozen=True)
class Question:
    """A question as the cascade asks it. Read from a client's text by
    ``question_parsing.read_question``, the one place its answer kind is decided."""

    question: str
    image_url: str | None = None
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "system", tuple(self.system))
        object.__setattr__(self, "choices_from_text", tuple(self.choices_from_text))
        if self.kind not in ANSWER_KINDS:
            raise ValueError(f"answer kind must be one of {', '.join(ANSWER_KINDS)}, got {self.kind!r}")


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
    audit: bool = False  # an audit's call (serve_app/edge/auditor.py), not a served one
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
    # The replica the call ran on, when the stage-affinity router routed it; None otherwise.
    replica: str | None = None


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
