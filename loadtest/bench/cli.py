"""The command line of the bench: list the scenarios, run some or all of them, or only re-render
bench/RESULTS.md from the results on disk."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.paths import CONFIGS, RESULTS

from . import __doc__ as PACKAGE_DOC
from .scenario import Scenario
from .scenarios import SCENARIOS


def listing() -> str:
    """One line per scenario (per variant of a family): its name, the config it deploys, the file it
    writes, its parameters."""
    rows = []
    for scenario in (one for family in SCENARIOS.values() for one in family.each()):
        parameters = ", ".join(f"{key}={value}" for key, value in vars(scenario.parameters).items())
        served = "; takes --config and --url" if scenario.takes_config else ""
        served += "" if scenario.in_full_run else "; runs only when named in --only"
        picked = f" (--param variant={scenario.variant})" if scenario.variant else ""
        rows.append(
            f"{scenario.name:18} {scenario.config or '':18} bench/results/{scenario.result}{picked}\n"
            f"{'':18} {scenario.title}; parameters: {parameters or 'none'}{served}"
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


def config_name(text: str) -> str:
    """The config a ``--config`` names (``configs/mai.yaml``, ``mai.yaml`` or a path to it), as its name
    under configs/; a file elsewhere is refused: a result's provenance names its config there."""
    given = Path(text).expanduser()
    for path in (given, CONFIGS / given):
        if path.is_file():
            resolved = path.resolve()
            if not resolved.is_relative_to(CONFIGS.resolve()):
                raise ValueError(
                    f"--config {text}: not under {CONFIGS} (results name their config there: copy it in)"
                )
            return resolved.relative_to(CONFIGS.resolve()).as_posix()
    raise ValueError(f"--config {text}: no such file (looked in . and {CONFIGS})")


def check_served(config: str | None, url: str | None, chosen: list[Scenario]) -> None:
    """``--config`` and ``--url`` only for scenarios that take them; the config valid for the app."""
    if config is None and url is None:
        return
    if fixed := [scenario.name for scenario in chosen if not scenario.takes_config]:
        takers = ", ".join(name for name, scenario in SCENARIOS.items() if scenario.takes_config)
        raise ValueError(
            f"--config/--url: {', '.join(fixed)} deploy their own config; only {takers} take one"
        )
    if url is not None and not url.startswith(("http://", "https://")):
        raise ValueError(f"--url {url}: expected http://HOST:PORT or https://...")
    if config is not None:
        from harness.local_server import config_args
        from serve_app.config import load_app_config

        load_app_config(config_args(config))  # names the offending keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description=PACKAGE_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and their parameters")
    parser.add_argument(
        "--only",
        default=",".join(name for name, scenario in SCENARIOS.items() if scenario.in_full_run),
        help="comma-separated scenarios to run (default: all but those that run only when named)",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a parameter of every chosen scenario that has it (repeatable)",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="serve this config (a file under configs/) instead of the scenario's own, on a local Ray "
        "with the machine's CPUs and GPUs; only for the scenarios that take one (see --list)",
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="measure a server already serving --config (e.g. `serve run`'s http://127.0.0.1:8000): "
        "no local Ray, nothing deployed; API key from $MAI_API_KEY when it needs one",
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
        config = None if args.config is None else config_name(args.config)
        check_served(config, args.url, chosen)
    except ValueError as error:
        parser.error(str(error))
    from .runner import run_scenarios

    run_scenarios(chosen, overrides, args.out.resolve(), config=config, url=args.url)
    if args.out.resolve() == RESULTS:
        print(write_report(), file=sys.stderr)
    return 0
