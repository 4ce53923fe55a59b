"""Datasets into mai-eval's JSONL format.

- ``easy-vqa``, ``charts``: the sets of ``harness.datasets`` (images inline as data URLs);
- ``lmms-eval``: the parquet files of the lmms-lab datasets lmms-eval reads, for a user who has them
  locally (``huggingface-cli download lmms-lab/ChartQA --repo-type dataset``). Images are written
  next to the JSONL (``<name>_images/``) and referenced by relative path.

Per task, the fields read and the metric (the paper's Table 10 datasets):

| task | lmms-lab dataset (split) | question | answer | metric |
|---|---|---|---|---|
| pope | POPE (test) | question | answer (yes/no) | yes_no (accuracy, F1) |
| mmbench | MMBench, en (dev) | hint + question, options A–E | answer (letter) | option |
| mmmu | MMMU (validation), one-image questions | question, options | answer | option / relaxed (open) |
| chartqa | ChartQA (test) | question | answer | relaxed |
| infovqa | DocVQA, InfographicVQA (validation) | question | answers (list) | anls |
| realworldqa | RealWorldQA (test) | question (options listed in it) | answer | option / relaxed |
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from serve_app.core.question_parsing import split_choices
from serve_app.edge.images import sniff_format

from .records import write_records

TASKS = ("pope", "mmbench", "mmmu", "chartqa", "infovqa", "realworldqa")
_IMAGE_TAG = re.compile(r"<image \d+>")
_LETTER_INSTRUCTION = re.compile(
    r"(?<!\s)\s*Please answer directly with only the letter of the correct option and nothing else\.?\s*$"
)


def convert_easy_vqa(out: Path, limit: int | None = None, split: str = "test") -> int:
    from harness.datasets import easy_vqa_records

    return write_records(easy_vqa_records(split, limit), out)


def convert_easy_vqa_balanced(out: Path, limit: int | None = None, split: str = "test") -> int:
    from harness.datasets import easy_vqa_balanced_records

    return write_records(easy_vqa_balanced_records(split, limit or 500), out)


def convert_charts(out: Path, limit: int | None = None) -> int:
    from harness.datasets import chart_records

    return write_records(chart_records(limit or 300), out)


def read_parquet_rows(files: Sequence[Path]) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for path in files:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such parquet file")
        for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
            yield from batch.to_pylist()


def _image_bytes(value: Any) -> bytes | None:
    """A datasets ``Image`` cell: ``{"bytes": ..., "path": ...}``, or raw bytes."""
    if isinstance(value, dict):
        return value.get("bytes")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return None


def _suffix(data: bytes) -> str:
    kind = sniff_format(data)
    return {"JPEG": ".jpg"}.get(kind, f".{kind.lower()}") if kind else ".img"


def _present(value: Any) -> bool:
    return value is not None and str(value).strip() not in ("", "nan", "None")


def record_of(task: str, row: dict[str, Any], index: int) -> tuple[dict[str, Any], bytes] | None:
    """One lmms-lab row as (record without its image, the image bytes); None when the row cannot be
    asked with one image."""
    if task == "pope":
        return (
            {
                "id": f"pope-{row.get('question_id', index)}",
                "question": row["question"].strip(),
                "answer": row["answer"].strip().lower(),
                "answer_type": "yes_no",
                "metric": "yes_no",
            },
            _image_bytes(row["image"]),
        )
    if task == "mmbench":
        choices = [str(row[letter]).strip() for letter in "ABCDE" if _present(row.get(letter))]
        hint = str(row["hint"]).strip() if _present(row.get("hint")) else ""
        question = f"{hint}\n{row['question'].strip()}" if hint else row["question"].strip()
        return (
            {
                "id": f"mmbench-{row.get('index', index)}",
                "question": question,
                "choices": choices,
                "answer": str(row["answer"]).strip(),
                "answer_type": "choice",
                "metric": "option",
            },
            _image_bytes(row["image"]),
        )
    if task == "mmmu":
        images = [row.get(f"image_{n}") for n in range(1, 8)]
        present = [image for image in images if image is not None and _image_bytes(image)]
        if len(present) != 1:
            return None
        question = _IMAGE_TAG.sub("the image", row["question"]).strip()
        choices = ast.literal_eval(row["options"]) if _present(row.get("options")) else []
        if row.get("question_type") == "multiple-choice" and len(choices) >= 2:
            return (
                {
                    "id": f"mmmu-{row['id']}",
                    "question": question,
                    "choices": [str(o) for o in choices],
                    "answer": str(row["answer"]).strip(),
                    "answer_type": "choice",
                    "metric": "option",
                },
                _image_bytes(present[0]),
            )
        return (
            {
                "id": f"mmmu-{row['id']}",
                "question": question,
                "answer": str(row["answer"]).strip(),
                "metric": "relaxed",
            },
            _image_bytes(present[0]),
        )
    if task == "chartqa":
        return (
            {
                "id": f"chartqa-{index}",
                "question": row["question"].strip(),
                "answer": str(row["answer"]).strip(),
                "metric": "relaxed",
            },
            _image_bytes(row["image"]),
        )
    if task == "infovqa":
        answers = row.get("answers")
        answers = list(answers) if isinstance(answers, list | tuple) else ast.literal_eval(answers)
        return (
            {
                "id": f"infovqa-{row.get('questionId', index)}",
                "question": row["question"].strip(),
                "answer": [str(a) for a in answers],
                "answer_type": "text",
                "metric": "anls",
            },
            _image_bytes(row["image"]),
        )
    if task == "realworldqa":
        question = _LETTER_INSTRUCTION.sub("", row["question"]).strip()
        text, choices = split_choices(question)
        answer = str(row["answer"]).strip()
        if choices and len(answer) == 1 and answer.isalpha():
            return (
                {
                    "id": f"realworldqa-{index}",
                    "question": text,
                    "choices": list(choices),
                    "answer": answer.upper(),
                    "answer_type": "choice",
                    "metric": "option",
                },
                _image_bytes(row["image"]),
            )
        return (
            {"id": f"realworldqa-{index}", "question": question, "answer": answer, "metric": "relaxed"},
            _image_bytes(row["image"]),
        )
    raise ValueError(f"unknown lmms-eval task {task!r}; known: {', '.join(TASKS)}")


def lmms_eval_records(
    task: str, rows: Iterable[dict[str, Any]], image_dir: Path, limit: int | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Records with their images written to ``image_dir`` (paths relative to its parent); and how
    many rows were skipped (more than one image, or none)."""
    if task not in TASKS:
        raise ValueError(f"unknown lmms-eval task {task!r}; known: {', '.join(TASKS)}")
    image_dir.mkdir(parents=True, exist_ok=True)
    records, skipped = [], 0
    for index, row in enumerate(rows):
        if limit is not None and len(records) >= limit:
            break
        converted = record_of(task, row, index)
        if converted is None or not converted[1]:
            skipped += 1
            continue
        record, image = converted
        name = re.sub(r"[^A-Za-z0-9._-]", "_", record["id"]) + _suffix(image)
        (image_dir / name).write_bytes(image)
        records.append(record | {"image": f"{image_dir.name}/{name}"})
    return records, skipped


def convert_lmms_eval(
    task: str, files: Sequence[Path], out: Path, limit: int | None = None
) -> tuple[int, int]:
    records, skipped = lmms_eval_records(
        task, read_parquet_rows(files), out.parent / f"{out.stem}_images", limit
    )
    return write_records(records, out), skipped
