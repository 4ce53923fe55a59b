"""The tokens served requests used, per model: counted flat (``"small.prompt_tokens"``), so that they sum,
merge and move like a class's other counts (serve_app/core/audit.py), and shown nested in
``GET /v1/mai/stats`` (``classes.<cls>.tokens``). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from .trace import LARGE, SMALL

MODELS = (SMALL, LARGE)
KINDS = ("prompt_tokens", "completion_tokens")


def flat_tokens(by_model: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """Each model's prompt and completion tokens (as ``Trace.tokens()`` gives them) as counts keyed
    ``"<model>.<kind>"``; a zero is left out, as a count that falls to 0 leaves a counter."""
    counts = {f"{model}.{kind}": by_model.get(model, {}).get(kind, 0) for model in MODELS for kind in KINDS}
    return {key: count for key, count in counts.items() if count}


def nested_tokens(counts: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Counts keyed ``"<model>.<kind>"`` as ``{model: {kind: count}}``, every model and kind there (0 when
    none was counted)."""
    return {model: {kind: counts.get(f"{model}.{kind}", 0) for kind in KINDS} for model in MODELS}
