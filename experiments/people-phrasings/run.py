"""The demo pair on questions as people type them about easy-vqa's world, with structured answers on
and off: the share of answers valid for their kind, accuracy per form (held-out templates apart) and
time per request, for ``mai``, Full RT (``mai-transfer``) and the single models.

    flock /tmp/stack.lock .venv/bin/python experiments/people-phrasings/run.py                 # validation
    flock /tmp/stack.lock .venv/bin/python experiments/people-phrasings/run.py --split test \\
        --conditions served                                                               # once, at the end

It builds the phrased set (``python -m evaluation.phrasings build``: every template asked 40 times,
about the split's images), serves configs/mai-cpu.yaml as committed on a new local Ray (two CPUs) and
runs ``mai-eval run`` once over every policy and condition, each condition sent as the request option
``structured_answers`` (``on``, ``off``; ``served``: the config's own setting, no option sent). The
policies run one after another in the order below, a policy's two conditions side by side, so that a
drift of the machine's load weighs on both alike. Then ``python -m evaluation.phrasings report``
writes ``phrasings.json`` into the run's folder (``<split>/``) and prints the table. Predictions
resume (mai-eval's own): run it again after an interruption.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

CONFIG = "mai-cpu.yaml"
POLICIES = ("mai-small", "mai-large", "mai-transfer", "mai")
PER_TEMPLATE = 40


def specs(conditions: list[str]) -> list[str]:
    """mai-eval's policy specs: ``<policy>.<condition>=<policy>[:structured_answers=...]``."""
    out = []
    for policy in POLICIES:
        for condition in conditions:
            option = {"on": ":structured_answers=true", "off": ":structured_answers=false"}.get(condition, "")
            out.append(f"{policy}.{condition}={policy}{option}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("validation", "test"), default="validation")
    parser.add_argument("--conditions", default="on,off", help="on, off, served (comma-separated)")
    args = parser.parse_args()
    conditions = args.conditions.split(",")
    python = str(ROOT / ".venv" / "bin" / "python")
    dataset = ROOT / "bench" / "data" / f"phrased-{args.split}-{PER_TEMPLATE}.jsonl"
    build = [python, "-m", "evaluation.phrasings", "build", "--split", args.split, "--out", str(dataset)]
    subprocess.run(build, cwd=ROOT, check=True)
    out = HERE / args.split
    import logging

    from harness.local_server import config_args, deploy, local_ray

    with local_ray(num_cpus=2) as url:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        print(f"deploying configs/{CONFIG} as committed ...", file=sys.stderr, flush=True)
        deploy(config_args(CONFIG))
        command = [
            str(ROOT / ".venv" / "bin" / "mai-eval"), "run", str(dataset), "--url", url,
            "--policies", ",".join(specs(conditions)), "--concurrency", "8", "--out", str(out),
            "--no-progress",
        ]  # fmt: skip
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            raise SystemExit("mai-eval run failed; run again to resume")
    subprocess.run([python, "-m", "evaluation.phrasings", "report", str(out)], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
