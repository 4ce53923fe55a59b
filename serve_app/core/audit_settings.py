"""``cascade.audit`` in the server config: which share of early exits is audited, against which
reference, and the bounds that keep audits behind served work (``audit.py`` runs the statistics)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .contracts import Policy


class AuditSettings(BaseModel):
    """``cascade.audit`` in the server config."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rate: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="share of early exits audited")
    reference: Policy = Field(Policy.TRANSFER, description="the policy an audited answer is compared with")
    max_disagreement: float = Field(0.05, gt=0, le=1, allow_inf_nan=False)
    window: int = Field(1000, ge=1, description="the last audits per class the rate is read over")
    max_large_queue: int = Field(
        8, ge=0, description="no audit starts while the large model has more calls in flight"
    )
    max_small_queue: int = Field(
        8, ge=0, description="no audit starts while the small model has more calls in flight"
    )
    priority: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="the engine priority of audits' model calls: served calls run at 0 and vLLM runs "
        "lower values first, so above 0 audits wait behind served calls (needs scheduling_policy: "
        "priority in both vLLM engines' engine_kwargs); 0 runs them as served calls",
    )
    alert_min_samples: int = Field(
        30,
        ge=1,
        description="audits a class's window needs before its disagreement rate alone raises an alert "
        "(with fewer, only a 95 % lower bound over max_disagreement does)",
    )
    max_in_flight: int = Field(
        16,
        ge=0,
        description="audits this replica runs at once; a sampled answer past it is not audited (full)",
    )
    seed: int | None = Field(
        None,
        description="None: which answers are audited is drawn under a secret each replica makes at start, "
        "so no client can choose or predict it; an integer: a seeded hash of the request id, "
        "reproducible (tests, benchmarks), and chosen by a client that picks its ids",
    )
    report_interval_s: float = Field(
        5.0, gt=0, description="how often each ingress replica reports its statistics to the holder"
    )
