"""What a request did: its route, and a record of every stage (model, prompt kind, tokens, latency,
parsed answer) and of the reasoning transfer. Every response carries it.

The tokens a request used, per model role, in one shape (``Tokens``): counted once from its stages
(``Trace.tokens``), read by the reply's ``usage``, the trace's ``tokens``, the audits' cost and the
statistics. The statistics count them flat (``"small.prompt_tokens"``), so that they sum, merge and
move like a class's other counts (serve_app/core/audit.py), and show them nested in
``GET /v1/mai/stats`` (``classes.<cls>.tokens``, ``nested_tokens``). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .contracts import TokenLogprob
from .instructions import Instruction
from .roles import LARGE, ROLES, SMALL
from .routes import Route

__all__ = [
    "LARGE",
    "SMALL",
    "STATS_TOKEN_FIELDS",
    "TOKEN_FIELDS",
    "AgreementCheck",
    "CascadeResult",
    "FallbackRecord",
    "OverloadRecord",
    "Route",
    "StageRecord",
    "Tokens",
    "Trace",
    "TransferRecord",
    "nested_tokens",
]

STATS_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens")  # what the statistics count per model
TOKEN_FIELDS = ("prompt_tokens", "cached_tokens", "completion_tokens")  # what a request's record holds


@dataclass
class StageRecord:
    name: str
    model: str
    prompt_kind: str
    status: str = "running"  # ok | error | timeout | rejected (the input) | cancelled
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # of prompt_tokens, served from the prefix cache; None: not reported
    completion_tokens: int = 0
    start_s: float = 0.0  # seconds from the request's start to this call's (the cascade's clock)
    latency_s: float = 0.0
    answer: str | None = None  # parsed answer, None when nothing could be parsed
    confidence: float | None = None  # probability of the parsed answer's tokens; None without logprobs
    output: str = ""
    error: str | None = None
    replica: str | None = None  # the model replica the call ran on, as its reply names it
    finish_reason: str | None = None  # why the engine stopped: stop, length, ...; None: not reported
    # The answer's closed form the engine was asked to follow (answer_forms.py: the regex of what
    # stands in [[ ]]); None: free text. ``constraint_refused``: why the engine refused it (the stage
    # was asked again without it).
    constraint: str | None = None
    constraint_refused: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Tokens:
    """Per model role: prompt tokens, of them cached (as far as the engine reported), completion
    tokens."""

    by_role: Mapping[str, Mapping[str, int]]

    @classmethod
    def of(cls, stages: Iterable[StageRecord]) -> Tokens:
        totals = {role: dict.fromkeys(TOKEN_FIELDS, 0) for role in ROLES}
        for stage in stages:
            totals[stage.model]["prompt_tokens"] += stage.prompt_tokens
            totals[stage.model]["cached_tokens"] += stage.cached_tokens or 0
            totals[stage.model]["completion_tokens"] += stage.completion_tokens
        return cls(totals)

    def __getitem__(self, role: str) -> Mapping[str, int]:
        return self.by_role.get(role, dict.fromkeys(TOKEN_FIELDS, 0))

    def total(self, field: str) -> int:
        return sum(counts.get(field, 0) for counts in self.by_role.values())

    @property
    def total_tokens(self) -> int:
        return self.total("prompt_tokens") + self.total("completion_tokens")

    def usage(self) -> dict[str, Any]:
        """OpenAI's ``usage`` of the reply: every model's tokens together."""
        return {
            "prompt_tokens": self.total("prompt_tokens"),
            "completion_tokens": self.total("completion_tokens"),
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": {"cached_tokens": self.total("cached_tokens")},
        }

    def as_dict(self) -> dict[str, dict[str, int]]:
        """The trace's ``tokens``: ``{role: {field: count}}``."""
        return {role: dict(counts) for role, counts in self.by_role.items()}

    def counts(self) -> dict[str, int]:
        """Each model's prompt and completion tokens as counts keyed ``"<role>.<field>"``; a zero is
        left out, as a count that falls to 0 leaves a counter."""
        counts = {f"{role}.{name}": self[role].get(name, 0) for role in ROLES for name in STATS_TOKEN_FIELDS}
        return {key: count for key, count in counts.items() if count}


def nested_tokens(counts: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Counts keyed ``"<role>.<field>"`` as ``{role: {field: count}}``, every role and field there (0
    when none was counted)."""
    return {role: {name: counts.get(f"{role}.{name}", 0) for name in STATS_TOKEN_FIELDS} for role in ROLES}


@dataclass
class TransferRecord:
    """The reasoning transfer: which selector, tokens before and after it, what it cost."""

    selector: str
    tokens_before: int = 0
    tokens_after: int = 0
    unit: str = "words"
    latency_s: float = 0.0
    error: str | None = None  # the selector failed; the full reasoning was sent


@dataclass
class FallbackRecord:
    """The route's own answer was not valid for the question's kind; another stage's was served."""

    route: str  # the route the cascade reached
    stage: str  # the stage whose answer that route serves
    answer: str | None  # that answer (None: nothing was read)
    served: str  # the stage whose valid answer was served instead


@dataclass(frozen=True)
class RepairRecord:
    """No stage's answer was of the question's kind: the stage that would have answered was asked once
    more for the answer alone, in its form (stages.StageCalls.repair)."""

    stage: str  # the stage whose answer was not of the kind
    answer: str | None  # what it answered (None: nothing was read)
    repair: str  # the repair's stage (repair_small, repair_large)
    answered: bool  # the repair gave an answer of the kind (else the request failed)


@dataclass
class AgreementCheck:
    """One verification: two answers, their confidences, the rule's thresholds and the verdict."""

    check: str  # short: both short answers; reasoned: the small model's reasoned answer vs the large
    #             short one; confident_large: the large short answer against confident_large, and the
    #             small short answer it would overrule (a more confident valid one is never overruled)
    answers: tuple[str | None, ...]
    valid: tuple[
        bool, ...
    ]  # each answer is one of its kind (answers.is_valid); an invalid one settles nothing
    confidences: tuple[float | None, ...]
    matched: bool  # the answers agree (verification.agree; false for confident_large: they disagreed)
    min_confidence: float
    accepted: bool  # the cascade stops here


@dataclass(frozen=True)
class OverloadRecord:
    """What a request answered while the large model was overloaded ran under (the trace's
    ``overload``): the level, the queue, and each setting relaxed, ``name -> (configured, as run)``;
    ``plan`` when an eager plan ran sequential."""

    level: str  # shed | relax
    large_queue: int
    relaxed: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class CacheRecord:
    """What the answer cache did for the request (serve_app/cache/reuse.py): ``miss`` (it ran, and its
    answer was kept when ``stored``), ``hit`` (a kept answer, ``age_s`` old), ``coalesced`` (it shared
    the run of an identical request in flight, ``coalesced_with``), or ``bypass`` (``reason``: the
    request's mode, a sampled answer, a store that is down)."""

    status: str
    age_s: float | None = None
    coalesced_with: str | None = None
    stored: bool = False
    reason: str | None = None


@dataclass
class Trace:
    policy: str
    kind: str
    kind_basis: str = "request"  # what decided the kind (contracts.Question.kind_basis)
    # The conversation's turns before the question (every stage read them) and the images of the
    # request, the conversation's included.
    context_turns: int = 0
    images: int = 0
    # What was read from the client's text: its answer-format instruction (None: none recognised, the
    # question went to the models as sent) and the options written in it ([] when none).
    format_instruction: Instruction | None = None
    choices_from_text: list[str] = field(default_factory=list)
    # The cascade's plan (serve_app/core/plans.py) and why it ran (the adaptive controller's reason);
    # None for a policy that is not the cascade.
    plan: str | None = None
    plan_reason: str | None = None
    plan_basis: str | None = None  # what the plan rests on: configured, calibration, observations, ...
    route: str | None = None
    answer_parsed: bool = False
    answer_valid: bool = False  # the served answer is one of its kind (answers.is_valid)
    fallback: FallbackRecord | None = None  # route fallback: what the route's own answer was
    repair: RepairRecord | None = None  # the answer was asked for once more, in its form
    # The options an either/or question names ("Is it red or blue?"), read as its choices; and when
    # the request's own choices differ from them, what was done (the request's win).
    options_named: list[str] = field(default_factory=list)
    choices_note: str | None = None
    latency_s: float = 0.0
    stages: list[StageRecord] = field(default_factory=list)
    checks: list[AgreementCheck] = field(default_factory=list)
    transfer: TransferRecord | None = None
    # When the large model was overloaded (serve_app/core/decision.py): the level, its queue and the
    # thresholds this request ran with instead of the configured ones. None: not overloaded.
    overload: OverloadRecord | None = None
    # The request's trace in the operator's tracing system (32 hex digits), when it was sampled.
    trace_id: str | None = None
    # What the answer cache did (None: the cache is off). A hit's or a coalesced request's trace is the
    # run's that made the answer, with this record its own.
    cache: CacheRecord | None = None

    def tokens(self) -> Tokens:
        """Per model: prompt tokens, of them cached (as far as the engine reported), completion tokens.
        Counted once for the stages the trace holds (again only if a stage is added); its readers (the
        bill, the reply's usage, the observers) share it. Kept beside the fields, out of ``to_dict``."""
        memo: tuple[int, Tokens] | None = self.__dict__.get("_tokens_memo")
        if memo is None or memo[0] != len(self.stages):
            memo = self.__dict__["_tokens_memo"] = (len(self.stages), Tokens.of(self.stages))
        return memo[1]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tokens"] = self.tokens().as_dict()
        # Each check under its old key too, ``stage``, until the next release (CHANGELOG.md).
        data["checks"] = [check | {"stage": check["check"]} for check in data["checks"]]
        return data


@dataclass(frozen=True)
class CascadeResult:
    answer: str
    trace: Trace
    # When the request asked for logprobs: the generated tokens of the completion the answer was read
    # from (the whole completion, e.g. a reasoning with its [[answer]]), with their logprobs.
    logprobs: tuple[TokenLogprob, ...] | None = None

    @property
    def route(self) -> str:
        """The route the request was served by: the trace's, its one record."""
        assert self.trace.route is not None, "a result's trace names its route"
        return self.trace.route
