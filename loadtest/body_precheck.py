"""What a request body's JSON costs the ingress before any model runs: the pre-check of
``serve_app/edge/body.py`` (nesting depth, keys, values, numbers, read off the bytes before the
parser; ``parse_json`` with the parser left out) and the whole ``parse_json``, beside ``json.loads`` of
the same body, on the bodies that cost the check most, at 1, 4 and 16 MiB (16 MiB is
``limits.max_body_bytes``). With ``--before``, the module as it was at that commit is loaded beside
today's and measured in the same rounds, so a figure and its "before" share the machine's state.

    python -m loadtest.body_precheck --before <commit> --out bench/results/body-precheck.json

Each figure is the median of ``--repeats`` rounds with its min and max; in a round every body is
measured once by each arm, the arms' order rotated by one from round to round.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from harness.paths import ROOT
from loadtest.bench.schedule import rotated
from loadtest.bench.summary import spread
from serve_app.config import Limits
from serve_app.edge import body as json_body
from serve_app.edge.errors import RequestError

MIB = 1024 * 1024
MODULE = "serve_app/edge/body.py"
FORMER_MODULE = "serve_app/edge/json_body.py"
DEPTH = Limits().max_json_depth


def bodies(size: int) -> dict[str, tuple[str, bytes]]:
    """name -> (what it is, a body of about ``size`` bytes)."""
    pairs = b"\\ud83d\\ude00"  # an emoji as an ASCII-only encoder escapes it
    per_string = max(1, size // 100_000 - 4) // len(pairs)
    cases = {
        "nested": ("brackets nested as deep as they go", b"[" * (size // 2) + b"]" * (size // 2)),
        "at_the_depth_limit": (
            f"brackets nested {DEPTH} deep again and again (invalid JSON: no pass ends early)",
            (b"[" * DEPTH + b"]" * DEPTH) * (size // (2 * DEPTH)),
        ),
        "unclosed_spread": (
            f"{DEPTH} brackets never closed, spread over pairs",
            (b"[" + b"[]" * (size // (2 * DEPTH))) * DEPTH,
        ),
        "closers_spread": ("a closer that closes nothing every third bracket", b"][]" * (size // 3)),
        "image_string": (
            "one long string, as an image's base64 is (the parser's ordinary large body)",
            b'{"image": "' + b"A" * (size - 14) + b'"}',
        ),
        "quotes": (
            "more quotes than the keys and values may hold (refused by their count)",
            b'"ab' * (size // 3),
        ),
        "escaped_backslashes": (
            "escaped backslashes in a string",
            b'{"q": "' + b"\\\\" * ((size - 10) // 2) + b'"}',
        ),
        "escaped_quotes": (
            "escaped quotes in a string (each a quote to the count: refused)",
            b'{"q": "' + b'\\"' * ((size - 10) // 2) + b'"}',
        ),
        "digits_at_the_limit": (
            "numbers of the most digits allowed, side by side (invalid JSON)",
            (b"1" * Limits().max_json_number_digits + b" ") * (size // (Limits().max_json_number_digits + 1)),
        ),
        "values_past_the_limit": (
            "more values than the arrays may hold (refused by their count)",
            b"[" + b"0," * ((size - 3) // 2) + b"0]",
        ),
        "emoji_escapes": (
            "one string of escaped emoji",
            b'{"q": "' + pairs * ((size - 10) // len(pairs)) + b'"}',
        ),
        "emoji_escapes_100k_strings": (
            "100,000 strings of escaped emoji (parse_json walks each for a lone surrogate)",
            b"[" + b",".join([b'"' + pairs * per_string + b'"'] * 100_000) + b"]",
        ),
    }
    return cases


def module_at(commit: str) -> types.ModuleType:
    """``serve_app/edge/body.py`` as it was at ``commit``, loaded beside today's (its imports,
    ``Limits`` and ``RequestError``, resolve to today's package)."""
    shown = subprocess.run(["git", "show", f"{commit}:{MODULE}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:  # before the body's checks were one module, its JSON had its own
        shown = subprocess.run(
            ["git", "show", f"{commit}:{FORMER_MODULE}"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    source = shown.stdout
    name = f"serve_app.edge._json_body_at_{commit[:12]}"
    module = types.ModuleType(name)
    module.__package__ = "serve_app.edge"
    module.__file__ = f"{commit[:12]}:{MODULE}"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


_NO_PARSER = types.SimpleNamespace(loads=lambda text: None, JSONDecodeError=json.JSONDecodeError)


def precheck(module: types.ModuleType) -> Callable[[bytes], Any]:
    """``module``'s ``parse_json`` with the parser left out: its checks of the bytes alone."""

    def check(body: bytes) -> Any:
        with mock.patch.object(module, "json", _NO_PARSER):
            return module.parse_json(body, Limits())

    return check


def timed(call: Callable[[bytes], Any], body: bytes) -> tuple[float, float, str]:
    """Seconds ``call(body)`` took, on the clock and in this thread's CPU time (what other processes on
    the machine do not add to), and what it came to: parsed, its 4xx, or the parser's error."""
    started, cpu = time.perf_counter(), time.thread_time()
    try:
        call(body)
        outcome = "parsed"
    except RequestError as exc:
        outcome = f"{exc.status} {exc.code}: {exc.message[:120]}"
    except (ValueError, RecursionError) as exc:  # json.loads on its own
        outcome = type(exc).__name__
    return time.perf_counter() - started, time.thread_time() - cpu, outcome


Arm = tuple[str, str, Callable[[bytes], Any]]  # (code: after or before, or json_loads; what; the call)


def measure(sizes_mib: list[int], repeats: int, before: str | None) -> dict[str, Any]:
    modules = {"after": json_body} | ({"before": module_at(before)} if before else {})
    arms: list[Arm] = [("json_loads", "", json.loads)]
    for code, module in modules.items():
        arms += [
            (code, "precheck", precheck(module)),
            (code, "parse_json", lambda b, m=module: m.parse_json(b)),
        ]
    results = {f"{size}MiB": measure_size(size, arms, repeats, list(modules)) for size in sizes_mib}
    return {
        "bodies": {name: about for name, (about, _) in bodies(MIB).items()},
        "results": results,
        "summary": summary(results, list(modules)),
    }


def measure_size(size_mib: int, arms: list[Arm], repeats: int, codes: list[str]) -> dict[str, Any]:
    """Every body of ``size_mib`` MiB through every arm, ``repeats`` rounds."""
    cases = bodies(size_mib * MIB)
    seconds: dict[tuple[str, str, str], list[float]] = {}
    cpu: dict[tuple[str, str, str], list[float]] = {}
    outcomes: dict[tuple[str, str, str], str] = {}
    for round_ in range(repeats):
        for name, (_, body) in cases.items():
            for code, what, call in rotated(arms, round_):
                took, took_cpu, outcome = timed(call, body)
                seconds.setdefault((name, code, what), []).append(took)
                cpu.setdefault((name, code, what), []).append(took_cpu)
                outcomes.setdefault((name, code, what), outcome)
        print(f"body-precheck: {size_mib} MiB, round {round_ + 1} of {repeats}", file=sys.stderr)

    def figures(name: str, code: str, what: str) -> dict[str, Any]:
        key = (name, code, what)
        return {
            "seconds": spread(seconds[key], 5),
            "cpu_seconds": spread(cpu[key], 5),
            "outcome": outcomes[key],
        }

    return {
        name: {"bytes": len(body), "json_loads": figures(name, "json_loads", "")}
        | {
            code: {
                "precheck": figures(name, code, "precheck"),
                "parse_json": figures(name, code, "parse_json"),
            }
            for code in codes
        }
        for name, (_, body) in cases.items()
    }


def summary(results: dict[str, Any], codes: list[str]) -> dict[str, Any]:
    """Per size and clock, the slowest pre-check of each arm (its body named), against ``json.loads``
    of the ordinary large body of that size (one long string): medians."""
    out: dict[str, Any] = {}
    for size, cases in results.items():
        out[size] = {}
        for clock in ("seconds", "cpu_seconds"):
            loads = cases["image_string"]["json_loads"][clock]["median"]
            row: dict[str, Any] = {"json_loads_of_a_string": loads}
            for code in codes:
                name = max(cases, key=lambda case: cases[case][code]["precheck"][clock]["median"])
                worst = cases[name][code]["precheck"][clock]["median"]
                row[code] = {
                    "slowest_precheck_body": name,
                    "slowest_precheck": worst,
                    "times_json_loads_of_a_string": round(worst / loads, 1) if loads else None,
                }
            out[size][clock] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--before", default=None, help="a commit whose json_body.py is measured beside today's"
    )
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 4, 16], help="body sizes, MiB")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; each figure is their median")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    started = time.time()
    before = None
    if args.before:
        before = subprocess.run(
            ["git", "rev-parse", args.before], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    result = measure(args.sizes_mib, args.repeats, before)
    print(json.dumps(result["summary"], indent=2))
    if args.out:
        from harness.provenance import provenance
        from harness.results import write_result

        command = "python -m loadtest.body_precheck " + " ".join(argv if argv is not None else sys.argv[1:])
        meta = provenance(
            command.strip(),
            started=started,
            parameters={"sizes_mib": args.sizes_mib, "repeats": args.repeats, "before_commit": before},
        )
        write_result(args.out, result, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
