"""A verification rule the calibration sweeps: the thresholds a cascade runs with (``min_confidence``,
``confident_large``), and the paper's rule and plan (``PAPER_RULE``, ``PAPER_RULE_AND_PLAN``: every
agreement counts, no confident large answer settles a disagreement, the stages in the paper's order),
which every tool that compares with the paper sends as a request's options. Its own module, so that
the calibration and its report both import it and neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serve_app.core.contracts import CascadeOptions
from serve_app.core.plans import Plan


@dataclass(frozen=True)
class Rule:
    min_confidence: float = 0.0
    confident_large: float | None = None

    @property
    def label(self) -> str:
        large = "off" if self.confident_large is None else f"{self.confident_large:.3g}"
        return f"min_confidence {self.min_confidence:.3g}, confident_large {large}"

    def options(self, **more: Any) -> CascadeOptions:
        return CascadeOptions(
            min_confidence=self.min_confidence, confident_large=self.confident_large, **more
        )


PAPER_RULE: dict[str, Any] = {"min_confidence": 0.0, "confident_large": None}
PAPER_PLAN = Plan.SEQUENTIAL
PAPER_RULE_AND_PLAN: dict[str, Any] = {**PAPER_RULE, "plan": PAPER_PLAN.value}
