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

Then, on the same deployment, questions from outside the demo's world (``OUTSIDE``: words and forms
easy-vqa never has) about four of the set's images, each once as served: what kind the server read,
on what basis, what it answered and whether it needed a repair (``validation/outside.json``;
``--outside-only`` runs only these).
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
# Questions the demo models never met, in general English: (question, the kind it asks).
OUTSIDE = (
    ("What animal is in the picture?", "text"),
    ("Is there a dog in the image?", "yes_no"),
    ("How many people are there?", "number"),
    ("What is written on the sign?", "text"),
    ("Count the cars.", "number"),
    ("Tell me whether it is raining.", "yes_no"),
    ("Is the sky blue or grey?", "choice"),
    ("Which animal is it?\nA. cat\nB. dog\nC. horse", "choice"),
    ("Describe the picture.", "text"),
    ("What percentage of the image is red?", "number"),
)


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
    parser.add_argument("--outside-only", action="store_true", help="only the questions from outside")
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
        for k in range(0 if args.outside_only else args.rounds):
            specs = ",".join(SPECS[name] for name in order(k))
            print(f"round {k + 1}/{args.rounds}: {specs}", file=sys.stderr, flush=True)
            command = [
                str(ROOT / ".venv" / "bin" / "mai-eval"), "run", str(dataset), "--url", url,
                "--policies", specs, "--concurrency", "8",
                "--out", str(HERE / args.split / f"round-{k + 1}"), "--no-progress",
            ]  # fmt: skip
            if subprocess.run(command, cwd=ROOT).returncode != 0:
                raise SystemExit("mai-eval run failed; run again to resume")
        outside(url, dataset, HERE / args.split / "outside.json")
    return 0


def outside(url: str, dataset: Path, out: Path) -> None:
    """Every ``OUTSIDE`` question about four images of ``dataset``, once each, as served."""
    import httpx

    from harness.jsonl import read_jsonl
    from harness.provenance import provenance
    from harness.results import write_result
    from serve_app.core.answers import is_valid

    images = [record["image"] for record in read_jsonl(dataset)[:160:40]]
    rows = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for question, wanted in OUTSIDE:
            for n, image in enumerate(images):
                content = [
                    {"type": "image_url", "image_url": {"url": image}},
                    {"type": "text", "text": question},
                ]
                body = {"model": "mai", "messages": [{"role": "user", "content": content}]}
                response = client.post("/v1/chat/completions", json=body)
                reply = response.json()
                row = {"question": question, "wanted_kind": wanted, "image": n}
                row["status"] = response.status_code
                if response.status_code == 200:
                    # a passthrough's mai object has no trace: the model's own reply, no kind read
                    trace = reply["mai"].get("trace", {})
                    answer = reply["choices"][0]["message"]["content"]
                    choices = trace.get("choices_from_text") or trace.get("options_named") or None
                    row |= {
                        "answer": answer,
                        "kind": trace.get("kind"),
                        "kind_basis": trace.get("kind_basis"),
                        "valid_for_wanted": is_valid(answer, wanted, choices=choices),
                        "route": reply["mai"]["route"],
                        "reason": reply["mai"].get("reason"),
                        "repair": trace.get("repair"),
                    }
                rows.append(row)
    served = [row for row in rows if row["status"] == 200]
    summary = {
        "requests": len(rows),
        "served": len(served),
        "kind_as_wanted": sum(row["kind"] == row["wanted_kind"] for row in served),
        "valid_for_wanted": sum(row["valid_for_wanted"] for row in served),
        "repaired": sum(row["repair"] is not None for row in served),
        "passed_through": sum(row["route"] == "passthrough" for row in served),
    }
    command = "flock /tmp/stack.lock .venv/bin/python experiments/repair/run.py"
    print(f"outside the demo's world: {summary}", file=sys.stderr)
    write_result(out, {"summary": summary, "rows": rows}, provenance(command, config=CONFIG))


if __name__ == "__main__":
    raise SystemExit(main())
