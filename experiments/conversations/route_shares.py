"""Where a mixed sample of chat requests goes under ``mai`` with the routing of the checkout this runs
from: one-image questions, follow-ups, two-image questions and requests for open generation, as
``routing.destination`` decides for ``configs/mai-cpu.yaml`` (in process, no server). Run it from two
checkouts to compare them:

    python experiments/conversations/route_shares.py --out after.json
    (cd ../before && python /path/to/route_shares.py --out before.json)
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

SAMPLE = {"one_image": 40, "follow_up": 25, "images": 25, "open_generation": 10}
OPEN = ("Describe the image in detail.", "Can you write a short story about this picture?")


def _turn(url: str, text: str) -> dict:
    image = {"type": "image_url", "image_url": {"url": url}}
    return {"role": "user", "content": [image, {"type": "text", "text": text}]}


def bodies(seed: int = 0) -> list[tuple[str, dict]]:
    from harness.datasets import easy_vqa_records, sample_png_data_url
    from harness.easy_vqa import facts_by_image, held_out_images, load_questions
    from harness.multi_turn import chat_messages, draw

    qas, _ = load_questions()
    facts = {i: f for i, f in facts_by_image(qas).items() if i in held_out_images()}
    url = sample_png_data_url()
    drawn = draw(facts, sorted(facts), max(SAMPLE["follow_up"], SAMPLE["images"]), seed)
    sample = [
        ("one_image", [_turn(r["image"], r["question"])])
        for r in easy_vqa_records("validation", SAMPLE["one_image"], seed)
    ]
    sample += [
        ("follow_up", chat_messages(r, lambda _: url)) for r in drawn["follow_up"][: SAMPLE["follow_up"]]
    ]
    sample += [("images", chat_messages(r, lambda _: url)) for r in drawn["images"][: SAMPLE["images"]]]
    rng = random.Random(seed)
    sample += [("open_generation", [_turn(url, rng.choice(OPEN))]) for _ in range(SAMPLE["open_generation"])]
    return [(kind, {"model": "mai", "messages": messages}) for kind, messages in sample]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bodies", type=Path, help="read the sample from this JSONL (kind, body) instead")
    parser.add_argument("--write-bodies", type=Path, help="write the sample as JSONL and stop")
    args = parser.parse_args()
    if args.bodies:
        sample = [tuple(json.loads(line)) for line in args.bodies.read_text().splitlines()]
    else:
        sample = bodies()
    if args.write_bodies:
        args.write_bodies.write_text("".join(json.dumps(item) + "\n" for item in sample))
        return
    from harness.local_server import config_args
    from serve_app.config import load_app_config
    from serve_app.edge.routing import Passthrough, destination

    config = load_app_config(config_args("mai-cpu.yaml"))
    counts: dict[str, Counter] = {}
    for kind, body in sample:
        routed = destination(body, config)
        where = f"passthrough: {routed.reason}" if isinstance(routed, Passthrough) else "cascade"
        counts.setdefault(kind, Counter())[where] += 1
    total = Counter(where for kinds in counts.values() for where in kinds.elements())
    result = {
        "sample": {kind: sum(c.values()) for kind, c in counts.items()},
        "by_kind": {kind: dict(c) for kind, c in counts.items()},
        "cascade_share": round(total["cascade"] / len(sample), 4),
        "destinations": dict(total),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
