"""lmms-eval itself, from the environment `make lmms-eval` installs (requirements/lmms-eval-lock.txt),
against the real CPU stack the end-to-end tests share, run as docs/evaluation.md runs it: its OpenAI
backend with ``--force_simple``, lmms-eval 0.7.3's own tasks with only the dataset swapped for a few
easy-vqa questions in a local parquet file, offline: its POPE task on yes/no questions, and its
LLaVA-Interleave in-domain task on two-image questions (evaluation/lmms_eval_pairs.py). An
environment that drifts (a dependency that stops lmms-eval before its first question, or one a task
imports) or a server lmms-eval cannot read fails here. lmms-eval exits 0 after either (it logs an
error raised during the evaluation, and records a request it gave up on as the answer), so what it
wrote is checked: every answer, and the metrics."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from evaluation.lmms_eval_bench import (
    IN_FORMAT,
    LMMS_EVAL_ENV,
    LMMS_VENV,
    UTILS,
    lmms_eval_command,
    pairs_yaml,
    pope_records,
    pope_yaml,
)
from evaluation.lmms_eval_pairs import SUB_TASK, pair_records
from evaluation.lmms_eval_pairs import TASK as PAIRS_TASK
from harness.jsonl import write_jsonl

from .stack import BASE, ROOT

TASK = "easyvqa_pope"
QUESTIONS = 5
PAIRS = 4  # two-image questions
INSTALL_S = 1800  # a clean machine downloads torch and its CUDA libraries from PyPI
RUN_S = 600
FAILED = "[LMMS_EVAL_REQUEST_FAILED"  # how lmms-eval's OpenAI backend writes a request it gave up on


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def lmms_python() -> Path:
    """`make lmms-eval`: nothing to do when .venv-lmms is as new as its lock. Session-scoped so that,
    named before ``server``, it installs before a stack starts."""
    done = subprocess.run(
        ["make", "lmms-eval"], cwd=ROOT, capture_output=True, text=True, timeout=INSTALL_S, check=False
    )
    output = _tail(done.stdout + done.stderr)
    assert done.returncode == 0, f"make lmms-eval exited {done.returncode}:\n{output}"
    return LMMS_VENV / "bin" / "python"


def write_parquet(folder: Path, name: str, records: list[dict[str, str]], lmms_python: Path) -> Path:
    """``records`` as the parquet file a task reads, written by evaluation/lmms_eval_parquet.py."""
    jsonl, parquet = folder / f"{name}.jsonl", folder / f"{name}.parquet"
    write_jsonl(records, jsonl)
    converter = ROOT / "evaluation" / "lmms_eval_parquet.py"
    subprocess.run([str(lmms_python), str(converter), str(jsonl), str(parquet)], check=True, timeout=300)
    return parquet


def write_task(folder: Path, lmms_python: Path) -> None:
    """lmms-eval's pope.yaml on ``QUESTIONS`` easy-vqa yes/no questions, its utils beside it."""
    folder.mkdir()
    parquet = write_parquet(folder, "pope", pope_records(QUESTIONS), lmms_python)
    shutil.copy(UTILS, folder / "utils.py")
    (folder / f"{TASK}.yaml").write_text(pope_yaml(TASK, parquet, bare=False))


def run_task(lmms_python: Path, task: str, questions: int, folder: Path) -> tuple[list[dict], dict]:
    """lmms-eval on the first ``questions`` of ``task`` (its files in ``folder / "tasks"``) against
    `mai`; the samples it wrote, each answered (none given up on), and its results."""
    tasks, out = folder / "tasks", folder / "out"
    command = lmms_eval_command(lmms_python, BASE, "mai", task, tasks, out, questions)
    command += ["--limit", str(questions)]
    env = os.environ | LMMS_EVAL_ENV
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_S)
    output = _tail(done.stdout + done.stderr)
    assert done.returncode == 0, f"lmms-eval exited {done.returncode}:\n{output}"

    written = {kind: list(out.rglob(f"*_{kind}")) for kind in (f"samples_{task}.jsonl", "results.json")}
    assert all(len(files) == 1 for files in written.values()), f"lmms-eval wrote {written}:\n{output}"
    [samples_file], [results_file] = written.values()
    samples = [json.loads(line) for line in samples_file.read_text().splitlines() if line.strip()]
    assert sorted(sample["doc_id"] for sample in samples) == list(range(questions))
    for sample in samples:
        reply = reply_of(sample)
        assert reply.strip() and not reply.startswith(FAILED), f"question {sample['doc_id']}: {reply!r}"
    results = json.loads(results_file.read_text())
    assert results["n-samples"][task]["effective"] == questions
    return samples, results


def reply_of(sample: dict) -> str:
    """The reply as the task scored it (0.7.3 writes the string)."""
    reply = sample["filtered_resps"]
    return reply[0] if isinstance(reply, list) else reply


def test_lmms_eval_answers_every_question_through_the_openai_backend(lmms_python, server, tmp_path):
    write_task(tmp_path / "tasks", lmms_python)
    samples, results = run_task(lmms_python, TASK, QUESTIONS, tmp_path)
    for sample in samples:  # POPE's form: the bare yes or no
        assert IN_FORMAT[TASK](reply_of(sample)), f"question {sample['doc_id']}: {reply_of(sample)!r}"
    correct = sum(sample["pope_accuracy"]["score"] for sample in samples)
    assert results["results"][TASK]["pope_accuracy,none"] == pytest.approx(correct / QUESTIONS)


def two_image_requests() -> int:
    """The requests the cascade has taken with more than one image (at most limits.max_images, 2 on
    the CPU stack): /v1/mai/stats, ``destinations.cascade.reasons.images``."""
    time.sleep(1.1)  # the stats are a snapshot at most a second old
    destinations = httpx.get(f"{BASE}/v1/mai/stats", timeout=30).json()["destinations"]
    return destinations.get("cascade", {}).get("reasons", {}).get("images", 0)


def test_lmms_eval_asks_two_image_questions_with_both_images(lmms_python, server, tmp_path):
    """lmms-eval's LLaVA-Interleave in-domain task on ``PAIRS`` two-image questions: its sample log
    leaves the images out (it drops image values), so the server counts them: every request reached
    the cascade with its two images."""
    (tmp_path / "tasks").mkdir()
    records = pair_records(PAIRS)
    parquet = write_parquet(tmp_path / "tasks", "pairs", records, lmms_python)
    (tmp_path / "tasks" / f"{PAIRS_TASK}.yaml").write_text(pairs_yaml(PAIRS_TASK, parquet))
    before = two_image_requests()
    samples, results = run_task(lmms_python, PAIRS_TASK, PAIRS, tmp_path)

    for sample in samples:  # 0.7.3's log keeps no document: the task's own scoring names it
        record = records[sample["doc_id"]]
        scored = sample["overall_score"]
        assert scored["sample_id"] == record["sample_id"] and scored["answer"] == record["answer"]
        assert scored["sub_task"] == SUB_TASK and scored["score"] in (0, 1)
    mean = sum(sample["overall_score"]["score"] for sample in samples) / PAIRS
    assert results["results"][PAIRS_TASK]["overall_score,none"] == pytest.approx(mean)
    deadline = time.monotonic() + 30  # each replica's counts reach the stats holder on its next report
    while (taken := two_image_requests() - before) < PAIRS and time.monotonic() < deadline:
        pass
    assert taken == PAIRS, f"{taken} of {PAIRS} requests reached the cascade with two images"
