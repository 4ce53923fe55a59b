"""The answer kind the server reads from every person-phrased template (harness/phrasings.py), against
the kind its form wants (``FORM_KINDS``), seen and held-out templates apart.

    python experiments/answer-kinds/kinds.py --out experiments/answer-kinds/after.json
    # the rule of another checkout (its own harness and server code), e.g. the one before a change:
    git archive COMMIT | tar -x -C /tmp/before
    cd /tmp/before && PYTHONPATH=. python /path/to/kinds.py --checkout COMMIT --out /path/to/before.json

Each template is filled with the values of one image (a red circle) and read by
``question_parsing.read_question``, the one place the server decides a question's kind. Pure; no
server, no model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main() -> int:
    sys.path.insert(0, str(Path.cwd()))
    from harness.phrasings import FORM_KINDS, TEMPLATES, fill
    from serve_app.core.question_parsing import read_question

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checkout", help="the commit read (default: git rev-parse HEAD of the cwd)")
    args = parser.parse_args()
    slots = {"colour": "red", "shape": "circle", "a": "red", "b": "blue"}
    rows = []
    for template in TEMPLATES:
        text = fill(template, {k: v for k, v in slots.items() if "{" + k + "}" in template.text})
        question = read_question(text)
        want = FORM_KINDS[template.form]
        rows.append(
            {
                "template": template.name,
                "form": template.form,
                "held_out": template.held_out,
                "question": text,
                "true_kind": want,
                "kind": question.kind,
                "kind_basis": getattr(question, "kind_basis", None),
                "correct": question.kind == want,
            }
        )
    summary: dict[str, dict[str, int]] = {}
    for row in rows:
        part = "held_out" if row["held_out"] else "seen"
        counts = summary.setdefault(f"{row['form']}/{part}", {"templates": 0, "correct": 0})
        counts["templates"] += 1
        counts["correct"] += row["correct"]
    commit = (
        args.checkout
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    result = {
        "command": "python experiments/answer-kinds/kinds.py --out " + str(args.out),
        "checkout": commit or None,
        "templates": len(rows),
        "correct": sum(row["correct"] for row in rows),
        "by_form": summary,
        "wrong": [row for row in rows if not row["correct"]],
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("checkout", "templates", "correct", "wrong")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
