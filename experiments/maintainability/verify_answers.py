"""The same ``mai`` answers before and after a change: every question of a set (a mai-eval JSONL file)
sent to a serving stack one at a time, with a fixed request id, and each reply's status, answer text
and route written to a JSONL file; ``--compare A B`` says which differ, byte for byte.

    python experiments/maintainability/verify_answers.py --url http://127.0.0.1:8000 \
        --data /tmp/verify.jsonl --out experiments/maintainability/after.jsonl
    python experiments/maintainability/verify_answers.py --compare before.jsonl after.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path


def ask(url: str, row: dict, request_id: str) -> dict:
    body = {
        "model": "mai",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": row["image"]}},
                    {"type": "text", "text": row["question"]},
                ],
            }
        ],
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-request-id": request_id},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            status, answer = reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        status, answer = error.code, json.loads(error.read() or b"{}")
    mai = answer.get("mai") or {}
    choices = answer.get("choices") or [{}]
    return {
        "id": row["id"],
        "question": row["question"],
        "status": status,
        "content": (choices[0].get("message") or {}).get("content"),
        "route": mai.get("route"),
        "route_reason": mai.get("route_reason") or mai.get("reason"),
    }


def compare(before: Path, after: Path) -> int:
    old = [json.loads(line) for line in before.read_text().splitlines()]
    new = [json.loads(line) for line in after.read_text().splitlines()]
    differ = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    for a, b in differ:
        print(json.dumps({"before": a, "after": b}))
    print(f"{len(old) - len(differ)} of {len(old)} replies identical, {len(differ)} differ")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path)
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    with args.out.open("w") as out:
        for n, row in enumerate(rows):
            out.write(json.dumps(ask(args.url.rstrip("/"), row, f"verify-{n}")) + "\n")
            print(f"\r{n + 1}/{len(rows)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
