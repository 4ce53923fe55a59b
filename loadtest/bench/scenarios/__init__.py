"""Every scenario of `python -m loadtest.bench`, in the order bench/RESULTS.md shows them. Adding one: a
module here with its ``Parameters``, ``run``, ``table`` and ``SCENARIO``, listed below."""

from __future__ import annotations

from . import (
    adaptive_capacity,
    adaptive_real,
    adaptive_shift,
    affinity,
    affinity_cache,
    audit_cost,
    audit_load,
    audit_shed,
    autoscaling,
    autoscaling_real,
    batch,
    config_check,
    eager,
    first_run,
    logprobs,
    mixed_pair,
    overhead,
    overload,
    paper,
    passthrough,
    prefix_cache,
    real,
    replica_starts,
    replica_starts_shipped,
    request_path,
    selector,
    shipped,
    stats_scale,
)

SCENARIOS = {
    module.SCENARIO.name: module.SCENARIO
    for module in (
        first_run,
        real,
        paper,
        overhead,
        request_path,
        eager,
        autoscaling,
        selector,
        logprobs,
        passthrough,
        prefix_cache,
        mixed_pair,
        affinity,
        affinity_cache,
        adaptive_real,
        adaptive_shift,
        adaptive_capacity,
        audit_cost,
        audit_shed,
        audit_load,
        stats_scale,
        overload,
        shipped,
        autoscaling_real,
        batch,
        config_check,
        replica_starts,
        replica_starts_shipped,
    )
}
