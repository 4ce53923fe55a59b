"""Every scenario of `python -m loadtest.bench`, in the order bench/RESULTS.md shows them (but for the
sections render.PLACED moves). Adding one: a module here with its ``Parameters``, ``run``, ``table`` and
``SCENARIO``, listed below; a family (one scenario, a ``variant`` parameter) is its variants' scenarios
under ``scenario.family``."""

from __future__ import annotations

from . import (
    adaptive,
    affinity,
    answer_cache,
    audit,
    autoscaling,
    batch,
    batch_sources,
    config_check,
    conversations,
    first_run,
    mixed_pair,
    prefix_cache,
    real,
    replica_starts,
    request_path,
    stats_scale,
    tracing,
)

SCENARIOS = {
    module.SCENARIO.name: module.SCENARIO
    for module in (
        first_run,
        real,
        request_path,
        tracing,
        prefix_cache,
        answer_cache,
        conversations,
        mixed_pair,
        affinity,
        adaptive,
        audit,
        stats_scale,
        autoscaling,
        batch,
        batch_sources,
        config_check,
        replica_starts,
    )
}
