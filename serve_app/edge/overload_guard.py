"""``cascade.overload`` in the ingress: each cascade request reads the large model's queue as this
replica sees it (its calls in flight) and moves the level (serve_app/core/overload.py); the request's
decision (serve_app/core/decision.py) relaxes its thresholds at ``relax``, and the metrics count every
request answered while the model was overloaded."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core.decision import Decision, OverloadReading
from ..core.options import Policy
from ..core.overload import Level, OverloadSettings, OverloadState
from ..core.trace import CascadeResult


class OverloadGuard:
    def __init__(
        self,
        settings: OverloadSettings,
        large_queue: Callable[[], int],
        metrics: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.large_queue, self.metrics, self.clock = settings, large_queue, metrics, clock
        self.state = OverloadState(settings)

    def _level(self, queue: int) -> Level:
        """The level after this reading of the queue (a reading moves it)."""
        level = self.state.update(queue, self.clock())
        if self.metrics is not None and self.settings.enabled:
            self.metrics.set_overload_level(int(level))
        return level

    def read(self, policy: Policy) -> OverloadReading | None:
        """A cascade request's reading of the large model's queue, which moves the level; None when
        ``cascade.overload`` is off or the policy is not the cascade."""
        if not self.settings.enabled or policy is not Policy.CASCADE:
            return None
        queue = self.large_queue()
        return OverloadReading(self._level(queue), queue)

    def answered(self, decision: Decision, result: CascadeResult) -> None:
        overload = decision.overload
        if overload is not None and self.metrics is not None:
            self.metrics.record_overload(overload.level, result.route)

    def level_label(self) -> str:
        """This replica's level, as its reports to the stats holder carry it."""
        return self.state.level.label

    def sheds_audits(self) -> bool:
        return self.settings.enabled and self.state.level >= Level.SHED
