"""How a request's answer was reached: the routes, and the sets of them every counter reads.

Each set is a tuple in the cascade's order (stage 1 first). Defined once here; the cascade, the plans'
cost model, the audits, the plan statistics and the evaluation's reports import them.
"""

from __future__ import annotations

from enum import StrEnum


class Route(StrEnum):
    AGREE_SHORT = "agree_short"
    AGREE_REASONED = "agree_reasoned"
    TRANSFER = "transfer"
    SINGLE = "single"
    CONFIDENT_LARGE = "confident_large"  # stage 1 disagreed; the large answer was confident enough
    # The route's own answer was not valid for the question's kind (no yes or no, no option, no
    # number, a hedge); another stage's valid answer was served (``trace.fallback`` says which).
    FALLBACK = "fallback"
    DEGRADED_LARGE_ONLY = "degraded_large_only"  # small failed in stage 1
    DEGRADED_NO_REASONING = "degraded_no_reasoning"  # small failed while reasoning
    DEGRADED_NO_TRANSFER = "degraded_no_transfer"  # large failed in the transfer stage
    DEGRADED_SMALL_ONLY = "degraded_small_only"  # large failed, on_large_failure: small
    # No cascade ran: the request went to a model unchanged (serve_app/edge/routing.py decides where
    # a request goes; this is how its answer was reached).
    PASSTHROUGH = "passthrough"


# Stage 1 settled the question: both short answers agreed, or the large one was confident enough.
STAGE1_EXITS = (Route.AGREE_SHORT, Route.CONFIDENT_LARGE)
# The routes that stop before the large model reads the reasoning: the answers an audit checks.
EARLY_EXITS = (*STAGE1_EXITS, Route.AGREE_REASONED)
# The routes of a cascade run whose models all answered: what a plan's statistics count (``single``:
# a single-model plan's answer).
COMPLETED = (*EARLY_EXITS, Route.TRANSFER, Route.SINGLE)
# The answers an audit may check: the early exits, and a single-model plan's answer.
AUDITED = (*EARLY_EXITS, Route.SINGLE)
# The routes of a run whose models all answered: a completed route, or a fallback to another stage's
# valid answer. What the evaluation's reports count, in their columns' order.
ANSWERED = (*COMPLETED, Route.FALLBACK)
# A model failed (or timed out) and the answer came from what was left: what a batch row retries.
DEGRADED = (
    Route.DEGRADED_LARGE_ONLY,
    Route.DEGRADED_NO_REASONING,
    Route.DEGRADED_NO_TRANSFER,
    Route.DEGRADED_SMALL_ONLY,
)
