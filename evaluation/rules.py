"""A verification rule the calibration sweeps: the thresholds a cascade runs with (``min_confidence``,
``confident_large``). Its own module, so that the calibration and its report both import it and
neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serve_app.core.options import CascadeOptions


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
