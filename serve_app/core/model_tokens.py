"""The tokens a request used, per model role, in one shape (``Tokens``): counted once from its stages
(``Trace.tokens``), read by the reply's ``usage``, the trace's ``tokens``, the audits' cost and the
statistics. The statistics count them flat (``"small.prompt_tokens"``), so that they sum, merge and
move like a class's other counts (serve_app/core/audit.py), and show them nested in
``GET /v1/mai/stats`` (``classes.<cls>.tokens``). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .roles import ROLES

TOKEN_KINDS = ("prompt_tokens", "completion_tokens")  # what the statistics count per model
FIELDS = ("prompt_tokens", "cached_tokens", "completion_tokens")  # what a request's record holds


class _Stage(Protocol):
    model: str
    prompt_tokens: int
    cached_tokens: int | None
    completion_tokens: int


@dataclass(frozen=True)
class Tokens:
    """Per model role: prompt tokens, of them cached (as far as the engine reported), completion
    tokens."""

    by_role: Mapping[str, Mapping[str, int]]

    @classmethod
    def of(cls, stages: Iterable[_Stage]) -> Tokens:
        totals = {role: dict.fromkeys(FIELDS, 0) for role in ROLES}
        for stage in stages:
            totals[stage.model]["prompt_tokens"] += stage.prompt_tokens
            totals[stage.model]["cached_tokens"] += stage.cached_tokens or 0
            totals[stage.model]["completion_tokens"] += stage.completion_tokens
        return cls(totals)

    def __getitem__(self, role: str) -> Mapping[str, int]:
        return self.by_role.get(role, dict.fromkeys(FIELDS, 0))

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
        """Each model's prompt and completion tokens as counts keyed ``"<role>.<kind>"``; a zero is
        left out, as a count that falls to 0 leaves a counter."""
        counts = {f"{role}.{kind}": self[role].get(kind, 0) for role in ROLES for kind in TOKEN_KINDS}
        return {key: count for key, count in counts.items() if count}


def nested_tokens(counts: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Counts keyed ``"<role>.<kind>"`` as ``{role: {kind: count}}``, every role and kind there (0 when
    none was counted)."""
    return {role: {kind: counts.get(f"{role}.{kind}", 0) for kind in TOKEN_KINDS} for role in ROLES}
