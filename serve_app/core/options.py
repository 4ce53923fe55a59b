"""The cascade's options: the policy a request runs under, token budgets, stage timeouts, the
verification and transfer settings. Server defaults come from the config's ``cascade:`` section; a
request may override some of them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .plans import PlanName
from .prompts import TransferForm


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

# Settings that verification no longer reads, and what replaced each (docs/api.md, "Verification").
RETIRED = {
    "anls_threshold": "open-text answers agree only on the same words (ANLS scores the evaluation, never "
    "verification); remove it",
    "rel_tol": "verification of number answers is exact for integers and within decimal_tolerance "
    f"(default {DECIMAL_TOLERANCE}) for decimals; use decimal_tolerance",
}


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


class Decoding(BaseModel):
    """How every stage decodes: the client's sampling parameters (greedy by default), and whether the
    reply carries the logprobs of the completion its answer was read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    temperature: float = Field(0.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)  # what vLLM's request takes
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> Decoding:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self


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

    @model_validator(mode="before")
    @classmethod
    def _retired_names(cls, data: Any) -> Any:
        """The matcher's old tolerances are refused, each naming what took its place."""
        if isinstance(data, dict):
            for name, replacement in RETIRED.items():
                if name in data:
                    raise ValueError(f"{name} is no longer a setting: {replacement}")
        return data

    def resolved_stage2_answer(self) -> str:
        if self.stage2_answer is not None:
            return self.stage2_answer
        return "two_stage" if self.policy in REASON_BASELINES else "inline"
