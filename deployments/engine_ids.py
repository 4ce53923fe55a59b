"""The engine request id of a MAI model call, and its parser: one format for the ingress that makes
it and every engine that reads it (vLLM logs it; the emulated engine keys its script on it).

    mai-<request id>-<stage>-<prompt kind>-<answer kind>-<n>
    e.g. mai-3f2a…-transfer_large-transfer-yes_no-17

``n`` numbers the calls of one ingress replica, so every id is unique. Stage names, prompt kinds and
answer kinds hold no ``-``; the request id may (clients choose it, within ``[A-Za-z0-9._:-]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An audit's calls name the request ``audit-<audited request id>``: the engines (the emulated one's
# script, the stage-affinity router) read them as the audited request's.
AUDIT_PREFIX = "audit-"

_ENGINE_REQUEST_ID = re.compile(
    r"^mai-(?P<request>.+)-(?P<stage>[a-z0-9_]+)-(?P<kind>[a-z0-9]+)-(?P<answer>[a-z_]+)-(?P<n>\d+)$"
)


@dataclass(frozen=True)
class EngineRequestId:
    request_id: str  # the MAI request the call serves
    stage: str  # e.g. short_small, reason_small, transfer_large
    prompt_kind: str  # simple, explain, reasoning, stage2, transfer
    answer_kind: str  # the kind of answer the question wants: choice, yes_no, number, text
    number: int

    def __str__(self) -> str:
        return f"mai-{self.request_id}-{self.stage}-{self.prompt_kind}-{self.answer_kind}-{self.number}"


def parse_engine_request_id(text: str | None) -> EngineRequestId | None:
    """The parts of a MAI engine request id, or None for any other id."""
    match = _ENGINE_REQUEST_ID.match(text or "")
    if match is None:
        return None
    return EngineRequestId(match["request"], match["stage"], match["kind"], match["answer"], int(match["n"]))
