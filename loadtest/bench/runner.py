"""The one runner: the environment and a local Ray once, then each scenario's run, its result written
through the one writer with the flat provenance record, and bench/RESULTS.md rendered after each."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from harness.paths import RESULTS
from harness.provenance import provenance
from harness.results import shown, write_result

from .render import write_report
from .scenario import Bench, Scenario


def command_of(
    scenario: Scenario, overrides: Mapping[str, str], config: str | None = None, url: str | None = None
) -> str:
    """The command that reruns ``scenario`` as it ran: its name, the config and server it was given
    and the overrides it took."""
    served = (f" --config configs/{config}" if config else "") + (f" --url {url}" if url else "")
    taken = [f" --param {key}={value}" for key, value in overrides.items() if scenario.accepts(key)]
    return f"python -m loadtest.bench --only {scenario.name}" + served + "".join(taken)


def parameters_record(parameters: Any) -> dict[str, Any]:
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in dataclasses.asdict(parameters).items()
    }


def run_scenarios(
    scenarios: Sequence[Scenario],
    overrides: Mapping[str, str],
    results: Path = RESULTS,
    *,
    config: str | None = None,
    url: str | None = None,
) -> list[Path]:
    """Run ``scenarios`` in order on one local Ray (Serve's throughput mode, metrics pushed every
    second) and write each result under ``results``; bench/RESULTS.md is re-rendered after each when
    they are the committed results' folder. Returns the files written.

    ``config`` (a file under configs/) replaces the config of the scenarios that take one; the local
    Ray then has the machine's CPUs (and GPUs), not the two the shipped benchmarks are sized for.
    ``url``: a server already serving that config, measured as it is; no local Ray is started."""
    from harness.local_server import local_ray

    # Ray Serve's throughput mode (gRPC between replicas, no extra thread hops), before Ray starts.
    os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    configured = [(scenario, scenario.configured(overrides)) for scenario in scenarios]
    written = []
    cpus = (os.cpu_count() or 2) if config else 2
    server = nullcontext(url) if url else local_ray(num_cpus=cpus, metrics_push_interval_s=1.0)
    with server as base_url:
        # Ray's logging setup in this process would print every request httpx makes.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        bench = Bench(base_url, served=url is not None)
        for number, (scenario, parameters) in enumerate(configured, start=1):
            assert scenario.run is not None
            print(f"[{number}/{len(configured)}] {scenario.name} ...", file=sys.stderr, flush=True)
            bench.config = config or scenario.config
            started = time.time()
            result = scenario.run(bench, parameters)
            meta = provenance(
                command_of(scenario, overrides, config, url),
                config=bench.config,
                started=started,
                parameters=parameters_record(parameters),
            )
            path = write_result(results / scenario.result, result, meta)
            written.append(path)
            if results == RESULTS:
                write_report()
            print(f"  wrote {shown(path)} in {meta['duration_s']} s", file=sys.stderr, flush=True)
    return written
