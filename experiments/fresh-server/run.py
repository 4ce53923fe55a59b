"""A fresh server on the demo pair: the plan of its first request per question class, and how often an
audit alert fires in its first 300 questions with every request audited, under the alert rule before
(a Wilson 95 % upper bound over the allowance, from one sample on) and after (evidence: the exact
lower bound over it, or ``alert_min_samples`` audits at a rate over it).

    flock /tmp/stack.lock .venv/bin/python experiments/fresh-server/run.py

It serves configs/mai-cpu.yaml on a new local Ray (two CPUs) with two overrides: ``cascade.audit.rate``
1.0 (every request audited) and ``report_interval_s`` 0.5 (the stats follow each audit closely); neither
touches the plan. Then:

1. one request per class, the first the server sees: a yes/no question, a colour question (text), a
   choice with its options sent, a count (number), each about the first image of the set below; it keeps
   each reply's ``plan``, ``plan_basis``, ``plan_reason`` and route;
2. ``mai-eval run`` of ``mai`` on 300 questions of easy-vqa's validation split (``easy_vqa_records``,
   seed 0: train images the models never see), concurrency 8, while it polls ``GET /v1/mai/stats``
   every 0.5 s until the audits stop moving. Each poll's class windows are read under both rules: the
   server's ``alert`` (after) and ``upper_95 > max_disagreement`` (before; ``upper_95`` is the Wilson
   bound the old rule read).

results.json: the first requests, and per class the distinct windows seen (by audit count), how many of
them alert under each rule, the audit count at which each rule first fired, and the last window.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from harness.paths import DATASETS  # noqa: E402
from harness.provenance import provenance  # noqa: E402
from harness.results import write_result  # noqa: E402

CONFIG = "mai-cpu.yaml"
QUESTIONS = 300
OVERRIDES = {"cascade": {"audit": {"rate": 1.0, "report_interval_s": 0.5}}}
FIRST = {
    "yes_no": {"question": "Is there a red shape in the image?"},
    "text": {"question": "What color is the shape?"},
    "choice": {"question": "Which shape is in the image?", "choices": ["circle", "rectangle", "triangle"]},
    "number": {"question": "How many shapes are there?"},
}
POLL_S = 0.5
SETTLED_S = 15.0  # the audits have stopped when the stats did not move for this long after the run


def first_requests(url: str, image: str) -> dict[str, Any]:
    import httpx

    from evaluation.requests import user_message

    out = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for cls, ask in FIRST.items():
            body: dict[str, Any] = {"model": "mai", "messages": [user_message(image, ask["question"])]}
            if "choices" in ask:
                body["mai"] = {"choices": ask["choices"]}
            reply = client.post("/v1/chat/completions", json=body)
            mai = reply.json().get("mai", {}) if reply.status_code == 200 else {}
            trace = mai.get("trace", {})
            out[cls] = {
                "question": ask,
                "status": reply.status_code,
                "kind": trace.get("kind"),
                "plan": trace.get("plan"),
                "plan_basis": trace.get("plan_basis"),
                "plan_reason": trace.get("plan_reason"),
                "route": mai.get("route"),
                "answer": mai.get("answer"),
            }
            print(f"[first] {cls}: {out[cls]}", file=sys.stderr, flush=True)
    return out


def poll_stats(url: str, stop: threading.Event, polls: list[dict[str, Any]]) -> None:
    import httpx

    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            try:
                body = client.get("/v1/mai/stats").json()
            except (httpx.HTTPError, ValueError):
                body = None
            if body is not None:
                polls.append({"at": time.time(), "body": body})
            stop.wait(POLL_S)


def audits_total(body: dict[str, Any]) -> int:
    return sum(entry["audit"]["audited"] for entry in body.get("classes", {}).values())


def alert_figures(polls: list[dict[str, Any]]) -> dict[str, Any]:
    """Per class: the distinct windows the polls saw (keyed by their audit count) and what each rule
    said of them."""
    limit = polls[-1]["body"]["audit"]["max_disagreement"]
    classes: dict[str, dict[int, dict[str, Any]]] = {}
    for poll in polls:
        for cls, entry in poll["body"].get("classes", {}).items():
            audit = entry["audit"]
            window = audit["window"]
            if window["audited"]:
                classes.setdefault(cls, {})[window["audited"]] = {
                    "audited": window["audited"],
                    "disagreed": window["disagreed"],
                    "before": audit["upper_95"] > limit,
                    "after": audit["alert"],
                    "evidence": audit["alert_evidence"],
                }
    figures = {}
    for cls, windows in sorted(classes.items()):
        seen = [windows[count] for count in sorted(windows)]
        figures[cls] = {
            "windows_seen": len(seen),
            "alerting_before": sum(w["before"] for w in seen),
            "alerting_after": sum(w["after"] for w in seen),
            "first_alert_before_at_audits": next((w["audited"] for w in seen if w["before"]), None),
            "first_alert_after_at_audits": next((w["audited"] for w in seen if w["after"]), None),
            "last": seen[-1],
        }
    return {"max_disagreement": limit, "classes": figures}


def main() -> int:
    import logging

    from harness.datasets import easy_vqa_records
    from harness.jsonl import write_jsonl
    from harness.local_server import config_args, deploy, local_ray

    dataset = DATASETS / f"easy-vqa-validation-{QUESTIONS}.jsonl"
    records = list(easy_vqa_records("validation", QUESTIONS))
    write_jsonl(records, dataset)
    started = time.time()
    with local_ray(num_cpus=2) as url:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        print(f"deploying configs/{CONFIG} with {OVERRIDES} ...", file=sys.stderr, flush=True)
        deploy(config_args(CONFIG, OVERRIDES))
        first = first_requests(url, records[0]["image"])
        polls: list[dict[str, Any]] = []
        stop = threading.Event()
        poller = threading.Thread(target=poll_stats, args=(url, stop, polls), daemon=True)
        poller.start()
        command = [
            str(ROOT / ".venv" / "bin" / "mai-eval"), "run", str(dataset), "--url", url,
            "--policies", "mai", "--concurrency", "8", "--out", str(HERE / "run"), "--no-progress",
        ]  # fmt: skip
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            raise SystemExit("mai-eval run failed")
        last, moved = -1, time.monotonic()
        while time.monotonic() - moved < SETTLED_S:
            time.sleep(POLL_S)
            total = audits_total(polls[-1]["body"]) if polls else -1
            if total != last:
                last, moved = total, time.monotonic()
        stop.set()
        poller.join()
    result = {
        "config": f"configs/{CONFIG}",
        "overrides": OVERRIDES,
        "dataset": {"path": str(dataset.relative_to(ROOT)), "records": len(records)},
        "first_requests": first,
        "polls": len(polls),
        "alerts": alert_figures(polls),
        "final_stats": polls[-1]["body"] if polls else None,
    }
    meta = provenance("python experiments/fresh-server/run.py", config=CONFIG, started=started)
    print(write_result(HERE / "results.json", result, meta), file=sys.stderr)
    print(json.dumps({"first_requests": first, "alerts": result["alerts"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
