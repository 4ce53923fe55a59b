"""What the repair costs and buys on the demo pair: ``mai`` on the person-phrased validation set with
the served default (repair on failure: structured answers off) and with structured answers on every
closed stage, in interleaved rounds, on one deployment.

    flock /tmp/stack.lock .venv/bin/python experiments/repair/run.py            # 3 rounds
    .venv/bin/python experiments/repair/analysis.py                             # results.json

It builds the phrased set (``python -m evaluation.phrasings build``: 45 templates, each asked 40 times
about validation images, 15 templates held out of the demo's training), serves configs/mai-cpu.yaml as
committed on a new local Ray (two CPUs) and runs ``mai-eval run`` once per round over two policy specs,
``mai.repair`` (no option sent: the config's default) and ``mai.structured``
(``structured_answers=true``), their order alternating from round to round so that a drift of the
machine's load weighs on both alike. Round k's predictions go to ``validation/round-<k>/``.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

CONFIG = "mai-cpu.yaml"
SPECS = {"repair": "mai.repair=mai", "structured": "mai.structured=mai:structured_answers=true"}
PER_TEMPLATE = 40


def order(round_index: int) -> list[str]:
    """The conditions of a round, in the order they run: alternating from round to round."""
    names = list(SPECS)
    return names if round_index % 2 == 0 else names[::-1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split", choices=("validation", "test"), default="validation")
    args = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    dataset = ROOT / "bench" / "data" / f"phrased-{args.split}-{PER_TEMPLATE}.jsonl"
    build = [python, "-m", "evaluation.phrasings", "build", "--split", args.split, "--out", str(dataset)]
    subprocess.run(build, cwd=ROOT, check=True)

    from harness.local_server import config_args, deploy, local_ray

    with local_ray(num_cpus=2) as url:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        print(f"deploying configs/{CONFIG} as committed ...", file=sys.stderr, flush=True)
        deploy(config_args(CONFIG))
        for k in range(args.rounds):
            specs = ",".join(SPECS[name] for name in order(k))
            print(f"round {k + 1}/{args.rounds}: {specs}", file=sys.stderr, flush=True)
            command = [
                str(ROOT / ".venv" / "bin" / "mai-eval"), "run", str(dataset), "--url", url,
                "--policies", specs, "--concurrency", "8",
                "--out", str(HERE / args.split / f"round-{k + 1}"), "--no-progress",
            ]  # fmt: skip
            if subprocess.run(command, cwd=ROOT).returncode != 0:
                raise SystemExit("mai-eval run failed; run again to resume")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
