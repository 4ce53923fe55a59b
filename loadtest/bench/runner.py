"""The one runner: the scenarios that need no Ray first, then the environment and a local Ray once and
the others; each scenario's result written through the one writer with the flat provenance record, and
bench/RESULTS.md rendered after each."""

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
    taken = [
        f" --param {key}={value}"
        for key, value in overrides.items()
        if scenario.accepts(key) and key != "variant"
    ]
    return scenario.rerun() + served + "".join(taken)


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
    """Run ``scenarios`` and write each result under ``results``; bench/RESULTS.md is re-rendered after
    each when they are the committed results' folder. Returns the files written.

    The scenarios that need no Ray run first, in a process Ray has not started in (their figures are
    this process's CPU, or a past Ray session's logs); the others in order on one local Ray (Serve's
    throughput mode, metrics pushed every second), started only when one is chosen.

    ``config`` (a file under configs/) replaces the config of the scenarios that take one; the local
    Ray then has the machine's CPUs (and GPUs), not the two the shipped benchmarks are sized for.
    ``url``: a server already serving that config, measured as it is; no local Ray is started."""
    configured = [
        (one, one.configured(overrides)) for scenario in scenarios for one in scenario.each(overrides)
    ]
    apart = [pair for pair in configured if not pair[0].needs_ray]
    on_ray = [pair for pair in configured if pair[0].needs_ray]
    run = Run(overrides, results, len(configured), config, url)
    written = [run.one(Bench(""), scenario, parameters) for scenario, parameters in apart]
    if not on_ray:
        return written
    from harness.local_server import local_ray

    # Ray Serve's throughput mode (gRPC between replicas, no extra thread hops), before Ray starts.
    os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    cpus = (os.cpu_count() or 2) if config else 2
    server = nullcontext(url) if url else local_ray(num_cpus=cpus, metrics_push_interval_s=1.0)
    with server as base_url:
        # Ray's logging setup in this process would print every request httpx makes.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        bench = Bench(base_url, served=url is not None)
        written += [run.one(bench, scenario, parameters) for scenario, parameters in on_ray]
    return written


@dataclasses.dataclass
class Run:
    """One invocation's settings, and how many of its scenarios have run: what each scenario's run
    needs besides the scenario."""

    overrides: Mapping[str, str]
    results: Path
    total: int
    config: str | None
    url: str | None
    done: int = 0

    def one(self, bench: Bench, scenario: Scenario, parameters: Any) -> Path:
        """Run ``scenario`` on ``bench``, write its result with its provenance, re-render the report."""
        assert scenario.run is not None
        self.done += 1
        print(f"[{self.done}/{self.total}] {scenario.name} ...", file=sys.stderr, flush=True)
        bench.config = self.config or scenario.config
        started = time.time()
        result = scenario.run(bench, parameters)
        meta = provenance(
            command_of(scenario, self.overrides, self.config, self.url),
            config=bench.config,
            started=started,
            parameters=parameters_record(parameters),
        )
        path = write_result(self.results / scenario.result, result, meta)
        if self.results == RESULTS:
            write_report()
        print(f"  wrote {shown(path)} in {meta['duration_s']} s", file=sys.stderr, flush=True)
        return path
