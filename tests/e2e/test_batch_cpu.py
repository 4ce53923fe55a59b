"""mai-batch on the real CPU stack: real vLLM-CPU engines with the demo models, attached to the session's
`serve run configs/mai-cpu.yaml` (this machine holds one stack), the command run as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

from .stack import ROOT

MAI_BATCH = str(Path(sys.executable).with_name("mai-batch"))
ENV = {**os.environ, "RAY_ADDRESS": "auto", "RAY_AUTH_MODE": "disabled"}


def mai_batch(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAI_BATCH, *args, "--config", "configs/mai-cpu.yaml", "--attach", "mai", "--no-progress"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_fifty_records_one_bad_through_batch_are_answered_scored_and_resumed(server, tmp_path):
    from harness.datasets import easy_vqa_records

    records = list(easy_vqa_records("test", limit=49))
    bad = dict(records[0], id="bad-image", image="images/missing.png")
    data, out = tmp_path / "data.jsonl", tmp_path / "out"
    data.write_text("".join(json.dumps(record) + "\n" for record in [*records[:20], bad, *records[20:]]))

    run = mai_batch(str(data), "--output", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        row["id"]: row
        for row in map(json.loads, (out / "predictions" / "mai.jsonl").read_text().splitlines())
    }
    assert len(rows) == 50
    assert rows["bad-image"]["status"] == 400 and "images/missing.png" in rows["bad-image"]["error"]
    answered = [row for row in rows.values() if row["status"] == 200]
    assert len(answered) == 49
    assert all(row["route"] and row["stages"] for row in answered)  # traced as the server traces
    # The demo pair answers its own world: far above the chance a broken path would score.
    assert sum(row["score"] for row in answered) / len(answered) >= 0.8
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == 50 and summary["errors"] == 1 and summary["retried"] == 0
    assert (
        summary["tokens"]["small"]["completion_tokens"] > 0
        and summary["tokens"]["large"]["prompt_tokens"] > 0
    )
    assert not any(route.startswith("degraded") for route in summary["routes"])
    assert "50 rows" in run.stdout and "1 errors" in run.stdout

    # mai-eval report scores the folder; the same command again has nothing left to do.
    report = subprocess.run(
        [str(Path(sys.executable).with_name("mai-eval")), "report", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 1 and "| mai |" in report.stdout, report.stderr[-2000:]  # 1: one row failed
    again = mai_batch(str(data), "--output", str(out))
    assert again.returncode == 0 and "every one of the 50 rows" in again.stdout
    assert len((out / "predictions" / "mai.jsonl").read_text().splitlines()) == 50


def test_an_openai_batch_file_gets_chat_completions_with_their_traces(server, tmp_path):
    from harness.datasets import easy_vqa_records

    def line(custom_id: str, record: dict, model: str = "mai") -> str:
        content = [
            {"type": "image_url", "image_url": {"url": record["image"]}},
            {"type": "text", "text": record["question"]},
        ]
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        return json.dumps(
            {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
        )

    records = list(easy_vqa_records("test", limit=4))
    lines = [line(f"q{i}", record) for i, record in enumerate(records)]
    lines.append(line("small-model", records[0], model="demo-small"))  # a model id: passed through
    lines.append(line("unknown", records[0], model="gpt-9"))
    source, output = tmp_path / "requests.jsonl", tmp_path / "out.jsonl"
    source.write_text("\n".join(lines) + "\n")

    run = mai_batch(str(source), "--output", str(output))
    assert run.returncode == 0, run.stderr[-3000:]
    out = {row["custom_id"]: row for row in map(json.loads, output.read_text().splitlines())}
    for i in range(4):
        body = out[f"q{i}"]["response"]["body"]
        assert out[f"q{i}"]["response"]["status_code"] == 200 and body["object"] == "chat.completion"
        assert body["mai"]["trace"]["stages"] and body["usage"]["total_tokens"] > 0
    assert out["small-model"]["response"]["status_code"] == 200
    assert out["small-model"]["response"]["body"]["model"] == "demo-small"
    assert out["unknown"]["response"]["status_code"] in (400, 404)
    assert "gpt-9" in out["unknown"]["response"]["body"]["error"]["message"]


def test_conversation_and_two_image_rows_run_the_cascade_in_both_formats(server, tmp_path):
    """A record with earlier turns or a second image, and an OpenAI batch line holding a conversation:
    each row runs the cascade with every turn and image, as the server's trace says."""
    from harness.datasets import easy_vqa_records

    first, second = easy_vqa_records("validation", limit=2)
    follow_up = dict(
        first,
        id="follow-up",
        turns=[
            {"role": "user", "text": "What shape is in the image?", "images": [first["image"]]},
            {"role": "assistant", "text": "circle"},
        ],
        image=second["image"],  # the question's turn carries one image of its own
    )
    pair = dict(first, id="pair", images=[second["image"]])
    data, out = tmp_path / "data.jsonl", tmp_path / "out"
    data.write_text("".join(json.dumps(record) + "\n" for record in (follow_up, pair)))
    run = mai_batch(str(data), "--output", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        row["id"]: row
        for row in map(json.loads, (out / "predictions" / "mai.jsonl").read_text().splitlines())
    }
    assert rows["follow-up"]["status"] == 200 and rows["pair"]["status"] == 200, rows
    assert all(row["route"] and row["stages"] for row in rows.values())
    assert (rows["follow-up"]["context_turns"], rows["follow-up"]["images"]) == (2, 2)
    assert (rows["pair"]["context_turns"], rows["pair"]["images"]) == (0, 2)

    asked = [{"type": "image_url", "image_url": {"url": first["image"]}}, {"type": "text", "text": "Color?"}]
    messages = [
        {"role": "user", "content": asked},
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": [{"type": "text", "text": "Is it a circle?"}]},
    ]
    body = {"model": "mai", "messages": messages}
    line = {"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": body}
    source, output = tmp_path / "requests.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(line) + "\n")
    run = mai_batch(str(source), "--output", str(output))
    assert run.returncode == 0, run.stderr[-3000:]
    [row] = map(json.loads, output.read_text().splitlines())
    trace = row["response"]["body"]["mai"]["trace"]
    assert row["response"]["status_code"] == 200 and (trace["context_turns"], trace["images"]) == (2, 1)
