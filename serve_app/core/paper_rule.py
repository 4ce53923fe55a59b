"""The paper's rule as request options, defined once for every tool that compares with the paper.

Verification under the paper's rule: every agreement counts (``min_confidence`` 0) and a stage-1
disagreement is never settled by the large model's confidence alone (no ``confident_large``). With the
paper's plan, ``sequential``, a request runs the cascade as the paper describes it, whatever
thresholds a server is calibrated with and whatever plan its controller would choose. Sent as a
request's ``options`` (``/v1/mai/answer``, a chat request's ``mai.options``); read-only.
"""

from __future__ import annotations

from typing import Any

from .plans import Plan

PAPER_RULE: dict[str, Any] = {"min_confidence": 0.0, "confident_large": None}
PAPER_PLAN = Plan.SEQUENTIAL
PAPER_RULE_AND_PLAN: dict[str, Any] = {**PAPER_RULE, "plan": PAPER_PLAN.value}
