"""The repair's figures from ``run.py``'s rounds: per condition and form, the share of replies valid for
the kind the form wants, the share that needed a repair, accuracy as served and as it was before the
repair existed (the unrepaired answer, scored the same way), and the time per request with the share of
it spent in repairs; per condition, the median over rounds with its spread.

    .venv/bin/python experiments/repair/analysis.py [--split validation]    # <split>/results.json

"Before" is read off the same requests: a repair runs only after everything else the request did, so
without it the request serves the unrepaired answer at its latency less the repair's. That leaves out
what a repair's engine time does to the other requests in flight at concurrency 8, which the mean time
per request of the two conditions in the same rounds includes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from evaluation.phrasings import FORMS  # noqa: E402
from evaluation.scoring import score  # noqa: E402
from harness.jsonl import read_jsonl  # noqa: E402
from harness.provenance import provenance  # noqa: E402
from harness.results import write_result  # noqa: E402
from serve_app.core.answers import is_valid  # noqa: E402


def repair_latency(row: dict[str, Any]) -> float:
    """Seconds the request spent in its repair (0 without one)."""
    return sum(s.get("latency_s") or 0.0 for s in row.get("stages", []) if s["name"].startswith("repair_"))


def condition_round(records: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One condition's figures in one round."""
    latest = {row["id"]: row for row in rows}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record_id, record in records.items():
        row = latest.get(record_id)
        served = row.get("answer") if row and row.get("status") == 200 else None
        repair = (row or {}).get("repair")
        before = (repair.get("answer") or "") if repair else served
        figures = {
            "answered": served is not None,
            "valid": served is not None
            and is_valid(served, record["wanted_kind"], choices=record.get("options")),
            "valid_before": before is not None
            and is_valid(before, record["wanted_kind"], choices=record.get("options")),
            "repaired": repair is not None,
            "score": score(served, record),
            "score_before": score(before, record),
            "latency_s": row["latency_s"] if row and row.get("status") == 200 else None,
            "repair_s": repair_latency(row) if row else 0.0,
        }
        split = "held_out" if record["held_out"] else "seen"
        for key in ("all", split, f"{record['form']}/{split}", f"template/{record['template']}"):
            groups[key].append(figures)
    return {key: summary(items) for key, items in sorted(groups.items())}


def summary(items: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(items)
    times = [i["latency_s"] for i in items if i["latency_s"] is not None]
    repair_s = sum(i["repair_s"] for i in items if i["latency_s"] is not None)

    def share(field: str) -> float:
        return round(100 * sum(bool(i[field]) for i in items) / n, 2)

    return {
        "questions": n,
        "answered": sum(i["answered"] for i in items),
        "valid": share("valid"),
        "valid_before": share("valid_before"),
        "repaired": share("repaired"),
        "accuracy": round(100 * sum(i["score"] for i in items) / n, 2),
        "accuracy_before": round(100 * sum(i["score_before"] for i in items) / n, 2),
        "mean_s": round(statistics.fmean(times), 4) if times else None,
        "mean_s_before": round((sum(times) - repair_s) / len(times), 4) if times else None,
        "repair_time_share": round(100 * repair_s / sum(times), 2) if times else None,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split", choices=("validation", "test"), default="validation")
    args = parser.parse_args()
    folder = HERE / args.split
    rounds = sorted(folder.glob("round-*"), key=lambda p: int(p.name.split("-")[1]))
    if not rounds:
        raise SystemExit(f"no rounds in {folder}: run experiments/repair/run.py first")
    dataset = Path(json.loads((rounds[0] / "manifest.json").read_text())["dataset"])
    records = {r["id"]: r for r in read_jsonl(dataset)}
    per_round: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for folder_k in rounds:
        for path in sorted((folder_k / "predictions").glob("*.jsonl")):
            condition = path.stem.removeprefix("mai.")  # the policy spec mai.<condition>
            per_round[condition].append(condition_round(records, read_jsonl(path, skip_truncated=True)))
    conditions = {}
    for condition, figures in per_round.items():
        overall = [f["all"] for f in figures]
        conditions[condition] = {
            "rounds": len(figures),
            "mean_s": spread([f["mean_s"] for f in overall]),
            "mean_s_before": spread([f["mean_s_before"] for f in overall]),
            "repair_time_share": spread([f["repair_time_share"] for f in overall]),
            "valid": spread([f["valid"] for f in overall]),
            "per_round": figures,
        }
    forms = {f"{form}/{split}" for form in FORMS for split in ("seen", "held_out")}
    table = {
        condition: {key: value for key, value in data["per_round"][0].items() if key in forms | {"all"}}
        for condition, data in conditions.items()
    }
    written = write_result(
        folder / "results.json",
        {"dataset": str(dataset), "conditions": conditions, "round_1_by_form": table},
        provenance(f"python experiments/repair/analysis.py --split {args.split}"),
    )
    for condition, data in conditions.items():
        print(
            f"{condition}: mean {data['mean_s']}, before {data['mean_s_before']}, "
            f"repair share % {data['repair_time_share']}, valid % {data['valid']}"
        )
    print(written, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
