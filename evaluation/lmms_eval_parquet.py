"""A JSONL file of questions (``image``, or ``image_0``, ``image_1``, ..., a base64 data URL) as the parquet
file an lmms-eval task reads, each image as a ``datasets`` Image feature (a plain struct column reaches
``doc_to_visual`` as a dict); every other field a string.

Runs in lmms-eval's environment (``make lmms-eval``), which has ``datasets``:
``.venv-lmms/bin/python evaluation/lmms_eval_parquet.py IN.jsonl OUT.parquet``.
"""

from __future__ import annotations

import base64
import json
import re
import sys


def is_image(key: str) -> bool:
    """``image`` (POPE, MMBench) or ``image_<n>`` (LLaVA-Interleave Bench's images, one column each)."""
    return key == "image" or re.fullmatch(r"image_\d+", key) is not None


def main(source: str, target: str) -> None:
    import datasets

    rows = [json.loads(line) for line in open(source, encoding="utf-8") if line.strip()]
    for row in rows:
        for key in filter(is_image, row):
            row[key] = {"bytes": base64.b64decode(row[key].split(",", 1)[1]), "path": None}
    features = datasets.Features(
        {key: datasets.Image() if is_image(key) else datasets.Value("string") for key in rows[0]}
    )
    data = datasets.Dataset.from_list(
        [{key: value if is_image(key) else str(value) for key, value in row.items()} for row in rows],
        features=features,
    )
    data.to_parquet(target)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: lmms_eval_parquet.py IN.jsonl OUT.parquet")
    main(sys.argv[1], sys.argv[2])
