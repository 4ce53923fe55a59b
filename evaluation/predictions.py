"""What is kept of each answered record (``prediction_of``) and where (``PredictionStore``): the
predictions folder mai-eval and mai-batch both write, and ``mai-eval report`` scores."""

from __future__ import annotations

import json
from collections.abc import Sized
from pathlib import Path
from typing import Any

from harness.jsonl import append_jsonl, read_jsonl
from harness.provenance import file_sha256

from .records import EvalRecord
from .scoring import score


class DatasetMismatchError(ValueError):
    """The output folder holds results of another dataset."""


def prediction_of(
    record: EvalRecord, policy: str, status: int, latency_s: float, body: Any
) -> dict[str, Any]:
    """What is kept of one response: the answer and its score, or the error."""
    row: dict[str, Any] = {
        "id": record.id,
        "policy": policy,
        "status": status,
        "latency_s": round(latency_s, 6),
    }
    if status == 200 and isinstance(body, dict):
        answer = body["choices"][0]["message"]["content"]
        mai = body.get("mai", {})
        trace = mai.get("trace", {})
        row |= {
            "answer": answer,
            "score": score(answer, record.model_dump()),
            "route": mai.get("route"),
            "plan": trace.get("plan"),
            "kind": trace.get("kind"),
            "kind_basis": trace.get("kind_basis"),
            "context_turns": trace.get("context_turns"),
            "images": trace.get("images"),
            "stages": [
                {
                    key: stage.get(key)
                    for key in (
                        "name",
                        "model",
                        "prompt_kind",
                        "status",
                        "prompt_tokens",
                        "cached_tokens",
                        "completion_tokens",
                        "latency_s",
                        "answer",
                        "confidence",
                    )
                }
                for stage in trace.get("stages", [])
            ],
            "checks": trace.get("checks", []),
            "usage": body.get("usage", {}),
            "transfer": trace.get("transfer"),
            "repair": trace.get("repair"),
        }
    else:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        row["error"] = (
            error.get("message") if isinstance(error, dict) and error.get("message") else str(body)[:500]
        )
    return row


class PredictionStore:
    """``<out>/predictions/<policy>.jsonl`` (one line per answered request, appended as answers
    arrive) and ``<out>/runs.jsonl`` (one line per timed segment of a policy's run)."""

    def __init__(
        self, out: Path, dataset: Path | str, records: Sized, *, dataset_sha256: str | None = None
    ):  # only the records' count is kept; a dataset named by URI comes with its digest
        self.out = out
        self.dir = out / "predictions"
        self.manifest = {
            "dataset": str(dataset),
            "dataset_sha256": dataset_sha256 or file_sha256(Path(dataset)),
            "records": len(records),
        }

    def open(self, *, fresh: bool) -> None:
        """Create the folder, or check that it holds results of this very dataset."""
        path = self.out / "manifest.json"
        if fresh:
            for stale in [*self.dir.glob("*.jsonl"), self.out / "runs.jsonl"]:
                stale.unlink(missing_ok=True)
        elif path.exists():
            existing = json.loads(path.read_text())
            if existing.get("dataset_sha256") != self.manifest["dataset_sha256"]:
                raise DatasetMismatchError(
                    f"{self.out} holds results of another dataset ({existing.get('dataset')}); "
                    "choose another --out, or pass --fresh to start over"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.manifest, indent=2) + "\n")

    def path(self, policy: str) -> Path:
        return self.dir / f"{policy}.jsonl"

    def load(self, policy: str) -> dict[str, dict[str, Any]]:
        """The latest row per record id under ``policy``."""
        path = self.path(policy)
        return {row["id"]: row for row in read_jsonl(path, skip_truncated=True)} if path.exists() else {}

    def done(self, policy: str) -> set[str]:
        return {record_id for record_id, row in self.load(policy).items() if row["status"] == 200}

    def append(self, policy: str, row: dict[str, Any]) -> None:
        append_jsonl(row, self.path(policy))

    def add_segment(self, policy: str, segment: dict[str, Any]) -> None:
        append_jsonl({"policy": policy, **segment}, self.out / "runs.jsonl")

    def segments(self, policy: str) -> list[dict[str, Any]]:
        path = self.out / "runs.jsonl"
        if not path.exists():
            return []
        return [segment for segment in read_jsonl(path) if segment["policy"] == policy]
