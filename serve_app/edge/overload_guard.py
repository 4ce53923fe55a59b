"""``cascade.overload`` in the ingress: each cascade request reads the large model's queue as this
replica sees it (its calls in flight), moves the level (serve_app/core/overload.py), and at ``relax``
runs with the relaxed thresholds; the trace and the metrics say so for every request answered while
the model was overloaded."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ..core.options import Policy
from ..core.overload import Level, OverloadSettings, OverloadState, relaxed_options
from ..core.trace import CascadeResult
from .decision import Decision
from .jobs import Job


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

    def apply(self, job: Job) -> tuple[Job, dict[str, Any] | None]:
        """The cascade job to run and its trace's ``overload`` entry (None when not overloaded)."""
        if not self.settings.enabled or job.options.policy is not Policy.CASCADE:
            return job, None
        queue = self.large_queue()
        level = self._level(queue)
        if level is Level.NORMAL:
            return job, None
        entry: dict[str, Any] = {"level": level.name.lower(), "large_queue": queue, "relaxed": {}}
        if level is Level.RELAX:
            options, changed = relaxed_options(job.options, self.settings.relax_to)
            entry["relaxed"] = changed
            job = dataclasses.replace(job, options=options) if changed else job
        return job, entry

    def relaxes_eager(self, entry: dict[str, Any] | None) -> bool:
        """Whether a request answered under ``entry`` runs an eager plan sequential."""
        relaxed = entry is not None and entry["level"] == Level.RELAX.name.lower()
        return relaxed and self.settings.relax_to.eager_reasoning is False

    def answered(self, decision: Decision, result: CascadeResult) -> None:
        overload = decision.overload
        if overload is not None and self.metrics is not None:
            self.metrics.record_overload(overload["level"], result.route)

    def level_label(self) -> str:
        """This replica's level, as its reports to the stats holder carry it."""
        return self.state.level.label

    def sheds_audits(self) -> bool:
        return self.settings.enabled and self.state.level >= Level.SHED
