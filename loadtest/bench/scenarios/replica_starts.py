"""replica_starts: how long Serve took to start each replica, and every scale-up its controller decided,
read from a Ray session's Serve controller logs (a session folder such as /tmp/ray/session_latest,
the default: the last session Ray started on this machine).

    python -m loadtest.bench --only replica_starts --param variant=policies --param session=<session>

It reads what another run left, so it needs no Ray and runs only when named; its variant names the run
whose session it reads, each into its own file: ``policies`` after ``--only autoscaling --param
variant=policies``, ``shipped`` after ``--only autoscaling --param variant=shipped``.
"""

from __future__ import annotations

import datetime
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cells import cell
from ..scenario import Bench, Scenario, family
from ..summary import spread


@dataclass(frozen=True)
class Parameters:
    session: str = "/tmp/ray/session_latest"  # a Ray session folder, with logs/serve in it


STARTING = re.compile(r"^INFO (\S+ \S+) controller \d+ -- Starting Replica\(id='(\w+)', deployment='([^']+)'")
STARTED = re.compile(
    r"^INFO (\S+ \S+) controller \d+ -- Replica\(id='(\w+)', deployment='([^']+)', .*started successfully"
)


def start_seconds(session: Path) -> dict[str, Any]:
    """From a Ray session's Serve controller log: seconds from "Starting Replica" to "started
    successfully", per deployment (what any policy waits for after it decides to scale up)."""

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


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """The replica start times and scale-up decisions of the session ``parameters.session`` names (its
    real folder's name when it is a link such as session_latest)."""
    session = Path(parameters.session).expanduser()
    if not (session / "logs" / "serve").is_dir():
        raise ValueError(f"{session} has no logs/serve folder: not a Ray session folder")
    return {
        "session": session.resolve().name,
        "seconds": start_seconds(session),
        "upscales": upscale_decisions(session),
    }


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"From Ray session `{result['session']}`, Serve's controller log: seconds from \"Starting "
        'Replica" to "started successfully", per deployment, median [min–max] over its starts.',
        "",
        "| deployment | starts | seconds to start |",
        "|---|---|---|",
    ]
    for deployment, figures in result["seconds"].items():
        lines.append(f"| {deployment} | {figures['starts']} | {cell(figures, 1)} |")
    if "upscales" not in result:
        return [*lines, "", "Scale-up decisions: not in this file."]
    if not result["upscales"]:
        return [*lines, "", "Serve's controller decided no scale-up in this session."]

    def at(stamp: str) -> datetime.datetime:
        return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")

    decisions: dict[str, list[dict[str, Any]]] = {}
    for decision in result["upscales"]:
        decisions.setdefault(decision["deployment"], []).append(decision)
    lines += [
        "",
        f"{len(result['upscales'])} scale-ups decided; per deployment, the seconds from a decision to the "
        "deployment's next replica running:",
        "",
        "| deployment | scale-ups decided | replicas, from → to | decision to a new replica running, s |",
        "|---|---|---|---|",
    ]
    for deployment, made in sorted(decisions.items()):
        steps = ", ".join(dict.fromkeys(f"{d['from']} → {d['to']}" for d in made))
        waits = [
            (at(d["first_running"]) - at(d["at"])).total_seconds() for d in made if d.get("first_running")
        ]
        if len(waits) > 1:
            waited = f"{statistics.median(waits):.1f} [{min(waits):.1f}–{max(waits):.1f}]"
        else:
            waited = f"{waits[0]:.1f}" if waits else "–"
        if len(made) > len(waits):
            waited += f" ({len(made) - len(waits)} with none running after it)"
        lines.append(f"| {deployment} | {len(made)} | {steps} | {waited} |")
    return lines


SCENARIO = family(
    "replica_starts",
    *(
        Scenario(
            name="replica_starts",
            variant=variant,
            title=f"How long Serve took to start a replica (the {session}'s session)",
            result=result,
            run=run,
            table=table,
            parameters=Parameters(),
            needs_ray=False,
            in_full_run=False,
        )
        for variant, session, result in (
            ("policies", "coupled bench", "autoscaling/replica-starts.json"),
            ("shipped", "shipped config", "autoscaling/replica-starts-shipped.json"),
        )
    ),
)
