"""How long Serve took to start each replica, and every scale-up its controller decided, read from a
Ray session's Serve controller logs (a session folder such as /tmp/ray/session_latest).

    python -m loadtest.replica_starts /tmp/ray/session_latest \
        --out bench/results/autoscaling/replica-starts.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness.paths import RESULTS
from harness.provenance import provenance
from harness.results import write_result

from .bench.summary import spread

STARTING = re.compile(r"^INFO (\S+ \S+) controller \d+ -- Starting Replica\(id='(\w+)', deployment='([^']+)'")
STARTED = re.compile(
    r"^INFO (\S+ \S+) controller \d+ -- Replica\(id='(\w+)', deployment='([^']+)', .*started successfully"
)


def replica_starts(session: Path) -> dict[str, Any]:
    """From a Ray session's Serve controller log: seconds from "Starting Replica" to "started
    successfully", per deployment (what any policy waits for after it decides to scale up)."""
    import datetime

    def at(stamp: str) -> float:
        return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()

    starting: dict[str, float] = {}
    seconds: dict[str, list[float]] = {}
    for path in sorted((session / "logs" / "serve").glob("controller_*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if match := STARTING.match(line):
                starting[match[2]] = at(match[1])
            elif (match := STARTED.match(line)) and match[2] in starting:
                seconds.setdefault(match[3], []).append(at(match[1]) - starting.pop(match[2]))
    return {
        deployment: spread(values, 1) | {"starts": len(values)}
        for deployment, values in sorted(seconds.items())
    }


UPSCALING = re.compile(
    r"^INFO (\S+ \S+) controller \d+ -- Upscaling Deployment\(name='([^']+)'.* from (\d+) to (\d+)"
)


def upscale_decisions(session: Path) -> list[dict[str, Any]]:
    """Every scale-up Serve's controller decided, with the clock time, and when the first replica it
    started was running (the deployment's next "started successfully")."""
    started: list[tuple[str, str]] = []
    decisions: list[dict[str, Any]] = []
    for path in sorted((session / "logs" / "serve").glob("controller_*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if match := UPSCALING.match(line):
                decisions.append(
                    {"at": match[1], "deployment": match[2], "from": int(match[3]), "to": int(match[4])}
                )
            elif match := STARTED.match(line):
                started.append((match[1], match[3]))
    for decision in decisions:
        later = [at for at, name in started if name == decision["deployment"] and at > decision["at"]]
        decision["first_running"] = min(later) if later else None
    return decisions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.replica_starts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("session", type=Path, help="a Ray session folder")
    parser.add_argument("--out", type=Path, default=RESULTS / "autoscaling" / "replica-starts.json")
    args = parser.parse_args(argv)
    if not (args.session / "logs" / "serve").is_dir():
        parser.error(f"{args.session} has no logs/serve folder: not a Ray session folder")
    result = {
        "session": args.session.name,
        "seconds": replica_starts(args.session),
        "upscales": upscale_decisions(args.session),
    }
    command = f"python -m loadtest.replica_starts {args.session} --out {args.out}"
    write_result(args.out, result, provenance(command))
    print(json.dumps(result["seconds"], indent=2), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
