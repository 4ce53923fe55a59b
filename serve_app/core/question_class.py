"""A question's class: what the statistics count under (routes, plans, audits, metrics) and what the plan
controller chooses a plan for. Pure."""

from __future__ import annotations


def class_of(kind: str, task: str | None = None) -> str:
    """A question's class: its answer kind, refined by the client's task tag."""
    return kind if not task else f"{kind}/{task}"
