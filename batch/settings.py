"""How a batch job runs: its settings, the rows it keeps in flight, and the config its rows run under
(pure: no Ray).

The config is the server's, with three changes that suit a batch and nothing else:
- **no overload bending** (``cascade.overload`` off): online, a full large-model queue relaxes the
  thresholds so requests keep their latency; a batch row waits for a slot instead, and gets the answer
  the config gives with the engines idle;
- **no stage timeouts**: a stage waits as long as its model does; the row as a whole has
  ``row_timeout_s`` (the request timeout), past which it is asked again (batch/answerer.py);
- **readiness**: a row waits up to ``row_timeout_s`` for the engines to answer their checks (they may be
  starting), where a request waits ``readiness.wait_s``.
Plans, audits and stage affinity run as configured.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from serve_app.config import AppConfig, Limits
from serve_app.core.contracts import StageTimeouts

MAX_LINE_BYTES = Limits().max_body_bytes  # the server's default body limit: a line is a request's body


class BatchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    actors: int = Field(1, ge=1, description="Ray Data actors answering rows")
    rows_in_flight: int | None = Field(
        None, ge=1, description="rows answered at once (default: the deployments' capacity, capacity())"
    )
    row_timeout_s: float = Field(900.0, gt=0, le=3600, description="seconds one attempt at a row may take")
    attempts: int = Field(6, ge=1, description="tries of a row whose model failed (503, 504, degraded)")
    key_name: str | None = Field(
        None, description="the configured API key the rows count against (its models, quotas, usage)"
    )
    max_line_bytes: int = Field(
        MAX_LINE_BYTES,
        ge=1024,
        le=1 << 30,
        description="longest input line; a longer one is an error line naming the limit, never read whole",
    )


def capacity(config: AppConfig) -> int:
    """The rows the model deployments take at once: the smaller of the two models' requests in flight
    (``max_ongoing_requests`` per replica, times its most replicas). A cascade row holds at most one
    call on each model, so this many rows keep both engines' batches as full as Serve lets them be
    without a queue."""
    return config.model_capacity()


def rows_per_actor(settings: BatchSettings, config: AppConfig) -> int:
    """Each actor's share of the rows in flight."""
    total = settings.rows_in_flight or capacity(config)
    return max(1, math.ceil(total / settings.actors))


def batch_config(config: AppConfig, settings: BatchSettings) -> AppConfig:
    """``config`` as a batch row runs under it (the module's docstring says what changes, and why)."""
    cascade = config.cascade.model_copy(
        update={
            "overload": config.cascade.overload.model_copy(update={"max_large_queue": None}),
            "timeouts": StageTimeouts(),
        }
    )
    return config.model_copy(
        update={
            "cascade": cascade,
            "request_timeout_s": settings.row_timeout_s,
            "readiness": config.readiness.model_copy(update={"wait_s": settings.row_timeout_s}),
        }
    )
