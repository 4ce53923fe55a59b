"""easy-vqa's questions in people's phrasings (``harness.phrasings``): the evaluation set and its report.

    python -m evaluation.phrasings build --split validation   # bench/data/phrased-validation-40.jsonl
    mai-eval run bench/data/phrased-validation-40.jsonl --policies mai,mai-small,mai-large \\
        --out bench/results/phrasings/validation
    python -m evaluation.phrasings report bench/results/phrasings/validation   # phrasings.json there
    python -m evaluation.phrasings build --split test          # once, for the final evaluation

The set asks every template, training and held-out alike, ``--per-template`` times (default 40), each
time about an image drawn with a seed: the validation split's images (easy-vqa train images the demo
models never see: for every choice) or the test split's (the one final evaluation, never for
choosing). Questions go as a person sends them: no ``answer_type``, so the server infers the kind, and
reads an either/or question's options from its text. Each record also carries its ``form``,
``template``, ``held_out``, the kind the form wants (``wanted_kind``) and, for either/or, its
``options``. The report gives accuracy (with 95 % intervals) and the share of valid answers (valid for
the kind the form wants, ``serve_app.core.answers.is_valid``) and of fitting ones (a colour to a colour
question, a shape to a shape question, an option, yes or no, a number) per form, seen and held-out
templates apart, and per template.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.easy_vqa import COLOURS, SHAPES, ImageFacts
from harness.paths import DATASETS
from harness.phrasings import FORM_KINDS, FORMS, TEMPLATES, Template, answer, draw_slots, fill
from serve_app.core.answers import is_valid, normalize, parse_number, without_article, yes_no

from .scoring import bootstrap_interval, score

PROGRAM = "python -m evaluation.phrasings"
SPLITS = ("validation", "test")
PER_TEMPLATE = 40
# How each form is scored: yes/no as POPE does, a number with ChartQA's relaxed match, the rest exactly
# (an either/or answer is the option's text, the reply the server gives).
FORM_METRICS = {
    "yes_no": "yes_no",
    "colour": "exact",
    "shape": "exact",
    "either_or": "exact",
    "count": "relaxed",
}


def template_records(
    facts: Mapping[int, ImageFacts],
    image_ids: Sequence[int],
    image_url: Callable[[int], str],
    split: str,
    *,
    per_template: int = PER_TEMPLATE,
    seed: int = 0,
    templates: Sequence[Template] = TEMPLATES,
) -> Iterator[dict[str, Any]]:
    """``per_template`` records per template, each about an image of ``image_ids`` (those with known
    ``facts``), drawn with a seed of its own per template (adding a template changes no other's)."""
    images = sorted(image for image in set(image_ids) if image in facts)
    if per_template < 1:
        raise ValueError(f"per_template must be at least 1, got {per_template}")
    if len(images) < per_template:
        raise ValueError(f"{len(images)} images with known facts, fewer than per_template={per_template}")
    for template in templates:
        rng = random.Random(f"{seed}:{split}:{template.name}")
        for index, image in enumerate(rng.sample(images, per_template)):
            slots = draw_slots(template, facts[image], rng)
            record: dict[str, Any] = {
                "id": f"phrased-{split}-{template.name}-{index}",
                "image": image_url(image),
                "question": fill(template, slots),
                "answer": answer(template, facts[image], slots),
                "metric": FORM_METRICS[template.form],
                "form": template.form,
                "template": template.name,
                "held_out": template.held_out,
                "wanted_kind": FORM_KINDS[template.form],
            }
            if template.form == "either_or":
                record["options"] = [slots["a"], slots["b"]]
            yield record


def phrased_records(split: str, per_template: int = PER_TEMPLATE, seed: int = 0) -> list[dict[str, Any]]:
    """The phrased set on easy-vqa's ``split``: validation (the committed held-out train images) or
    test; images inline as data URLs, what each shows read off its own easy-vqa answers."""
    import easy_vqa

    from harness.easy_vqa import QA, facts_by_image, held_out_images

    from .records import image_data_url

    if split not in SPLITS:
        raise ValueError(f"the phrased set's split must be validation or test, got {split!r}")
    questions, answers, image_ids = (
        easy_vqa.get_test_questions() if split == "test" else easy_vqa.get_train_questions()
    )
    paths = easy_vqa.get_test_image_paths() if split == "test" else easy_vqa.get_train_image_paths()
    facts = facts_by_image(QA(i, q, a) for q, a, i in zip(questions, answers, image_ids, strict=True))
    images = held_out_images(image_ids) if split == "validation" else set(image_ids)
    return list(
        template_records(
            facts,
            sorted(images),
            lambda image: image_data_url(str(paths[image]), Path("/")),
            split,
            per_template=per_template,
            seed=seed,
        )
    )


def fits(answer_text: str | None, record: Mapping[str, Any]) -> bool:
    """Whether an answer is one the record's form can have: yes or no, a colour, a shape, one of the
    options, a number."""
    if answer_text is None:
        return False
    form = record["form"]
    if form == "yes_no":
        return yes_no(answer_text) is not None
    if form == "count":
        return parse_number(answer_text) is not None
    allowed = {"colour": COLOURS, "shape": SHAPES}.get(form) or record.get("options") or ()
    return without_article(normalize(answer_text, "text")) in allowed


def _figures(rows: Sequence[tuple[float, bool, bool, bool]]) -> dict[str, Any]:
    scores = [row[0] for row in rows]
    return {
        "questions": len(rows),
        "answered": sum(row[3] for row in rows),
        "accuracy": round(100 * sum(scores) / len(rows), 1),
        "accuracy_95ci": [round(bound, 1) for bound in bootstrap_interval(scores)],
        "valid": round(100 * sum(row[1] for row in rows) / len(rows), 1),
        "fitting": round(100 * sum(row[2] for row in rows) / len(rows), 1),
    }


def phrasing_report(
    records: Sequence[Mapping[str, Any]], answers: Mapping[str, str | None]
) -> dict[str, Any]:
    """Accuracy (%, with its 95 % interval), the share of answers valid for the kind the form wants
    (``is_valid``, with an either/or question's options) and of fitting ones (``fits``), over all
    records, seen and held-out templates apart (``split``), per form and split, and per template.
    ``answers``: record id -> the served answer; a record without one scores 0 and is neither valid
    nor fitting."""
    groups: dict[tuple[str, ...], list[tuple[float, bool, bool, bool]]] = defaultdict(list)
    for record in records:
        given = answers.get(record["id"])
        valid = given is not None and is_valid(given, record["wanted_kind"], choices=record.get("options"))
        row = (score(given, record), valid, fits(given, record), given is not None)
        split = "held_out" if record["held_out"] else "seen"
        for key in (
            ("all",),
            ("split", split),
            ("form", record["form"], split),
            ("template", record["template"]),
        ):
            groups[key].append(row)
    by_form: dict[str, dict[str, Any]] = {}
    for form in FORMS:
        parts = {
            split: _figures(groups[("form", form, split)])
            for split in ("seen", "held_out")
            if groups[("form", form, split)]
        }
        if parts:
            by_form[form] = parts
    return {
        "all": _figures(groups[("all",)]) if records else None,
        "split": {
            split: _figures(groups[("split", split)])
            for split in ("seen", "held_out")
            if groups[("split", split)]
        },
        "by_form": by_form,
        "by_template": {
            key[1]: _figures(rows) for key, rows in sorted(groups.items()) if key[0] == "template"
        },
    }


def policy_answers(out: Path) -> dict[str, dict[str, str | None]]:
    """policy -> record id -> the served answer (None for an error), from a ``mai-eval run`` folder's
    ``predictions/<policy>.jsonl`` (the latest row per id)."""
    from harness.jsonl import read_jsonl

    answers: dict[str, dict[str, str | None]] = {}
    for path in sorted((out / "predictions").glob("*.jsonl")):
        latest = {row["id"]: row for row in read_jsonl(path, skip_truncated=True)}
        answers[path.stem] = {
            record_id: row.get("answer") if row.get("status") == 200 else None
            for record_id, row in latest.items()
        }
    return answers


def request_times(out: Path) -> dict[str, dict[str, float]]:
    """policy -> its mean and median seconds per request, from a ``mai-eval run`` folder's results.json
    (none before the run has written it)."""
    import json

    path = out / "results.json"
    if not path.exists():
        return {}
    policies = json.loads(path.read_text())["policies"]
    return {
        name: {"mean_s": round(row["latency_mean_s"], 3), "p50_s": round(row["latency_p50_s"], 3)}
        for name, row in policies.items()
        if row.get("latency_mean_s") is not None
    }


def markdown(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per policy: accuracy on seen and held-out templates, then per form (seen / held out),
    the valid share over all, and the mean seconds per request."""
    header = ["policy", "seen", "held out", *FORMS, "valid", "s/request"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for policy, report in reports.items():
        split = report["split"]
        cells = [policy, *(f"{split[s]['accuracy']} %" if s in split else "–" for s in ("seen", "held_out"))]
        for form in FORMS:
            parts = report["by_form"].get(form, {})
            cells.append(
                " / ".join(f"{parts[s]['accuracy']}" if s in parts else "–" for s in ("seen", "held_out"))
            )
        cells.append(f"{report['all']['valid']} %" if report["all"] else "–")
        time = report.get("time_per_request")
        cells.append(f"{time['mean_s']}" if time else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="write the phrased set of a split as mai-eval JSONL")
    build.add_argument("--split", choices=SPLITS, required=True)
    build.add_argument("--per-template", type=int, default=PER_TEMPLATE, help="questions per template (40)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--out", type=Path, help="default: bench/data/phrased-<split>-<per template>.jsonl")
    report = commands.add_parser("report", help="per-form figures of a mai-eval run on a phrased set")
    report.add_argument("out", type=Path, help="the mai-eval run's --out folder")
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.per_template < 1:
            parser.error("--per-template must be at least 1")
        from .records import write_records

        out = args.out or DATASETS / f"phrased-{args.split}-{args.per_template}.jsonl"
        count = write_records(phrased_records(args.split, args.per_template, args.seed), out)
        print(f"{out}: {count} questions, {len(TEMPLATES)} templates", file=sys.stderr)
        return 0
    import json

    from harness.jsonl import read_jsonl
    from harness.provenance import provenance
    from harness.results import write_result

    from .passes import command_line

    manifest = args.out / "manifest.json"
    if not manifest.exists():
        parser.error(f"{manifest} does not exist: run `mai-eval run <phrased set> --out {args.out}` first")
    dataset = Path(json.loads(manifest.read_text())["dataset"])
    records = read_jsonl(dataset)
    missing = [r["id"] for r in records if "form" not in r or "wanted_kind" not in r]
    if missing:
        parser.error(
            f"{dataset} is not a phrased set ({missing[0]} has no form); build one with `{PROGRAM} build`"
        )
    times = request_times(args.out)
    reports = {
        policy: phrasing_report(records, answers) | {"time_per_request": times.get(policy)}
        for policy, answers in policy_answers(args.out).items()
    }
    command = command_line(PROGRAM, sys.argv[1:] if argv is None else argv)
    written = write_result(
        args.out / "phrasings.json", {"dataset": str(dataset), "policies": reports}, provenance(command)
    )
    print(markdown(reports))
    print(f"{written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
