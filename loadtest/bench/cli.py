"""The command line of the bench: list the scenarios, run some or all of them, or only re-render
bench/RESULTS.md from the results on disk."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.paths import RESULTS

from . import __doc__ as PACKAGE_DOC
from .scenario import Scenario
from .scenarios import SCENARIOS


def listing() -> str:
    """One line per scenario: its name, the config it deploys, the file it writes, its parameters."""
    rows = []
    for scenario in SCENARIOS.values():
        parameters = ", ".join(f"{key}={value}" for key, value in vars(scenario.parameters).items())
        rows.append(
            f"{scenario.name:18} {scenario.config or '':18} bench/results/{scenario.result}\n"
            f"{'':18} {scenario.title}; parameters: {parameters or 'none'}"
        )
    return "\n".join(rows)


def parse_overrides(pairs: list[str], chosen: list[Scenario]) -> dict[str, str]:
    """``KEY=VALUE`` pairs, each a parameter of at least one chosen scenario and valid for each."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"--param {pair}: expected KEY=VALUE")
        if not any(scenario.accepts(key) for scenario in chosen):
            names = ", ".join(scenario.name for scenario in chosen)
            raise ValueError(f"--param {key}: no parameter of that name in {names} (see --list)")
        overrides[key] = value
    for scenario in chosen:
        scenario.configured(overrides)  # raises on a value of the wrong type
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description=PACKAGE_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and their parameters")
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help="comma-separated scenarios to run (default: all)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a parameter of every chosen scenario that has it (repeatable)",
    )
    parser.add_argument(
        "--render", action="store_true", help="only re-render bench/RESULTS.md from bench/results"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="the folder to write results to (default bench/results, which also re-renders "
        "bench/RESULTS.md); another folder keeps the committed results as they are",
    )
    args = parser.parse_args(argv)
    if args.list:
        print(listing())
        return 0
    from .render import write_report

    if args.render:
        print(write_report())
        return 0
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := [name for name in names if name not in SCENARIOS]:
        parser.error(f"unknown scenario(s): {', '.join(unknown)} (see --list)")
    chosen = [SCENARIOS[name] for name in names]
    try:
        overrides = parse_overrides(args.param, chosen)
    except ValueError as error:
        parser.error(str(error))
    from .runner import run_scenarios

    run_scenarios(chosen, overrides, args.out.resolve())
    if args.out.resolve() == RESULTS:
        print(write_report(), file=sys.stderr)
    return 0
