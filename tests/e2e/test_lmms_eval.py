"""lmms-eval itself, from the environment `make lmms-eval` installs (requirements/lmms-eval-lock.txt),
against the real CPU stack the end-to-end tests share, run as docs/evaluation.md runs it: its OpenAI
backend with ``--force_simple``, lmms-eval 0.7.3's own POPE task with only the dataset swapped for a
few easy-vqa yes/no questions in a local parquet file, offline. An environment that drifts (a
dependency that stops lmms-eval before its first question) or a server lmms-eval cannot read fails
here. lmms-eval exits 0 after either (it logs an error raised during the evaluation, and records a
request it gave up on as the answer), so what it wrote is checked: every answer, and the metrics."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from evaluation.lmms_eval_bench import (
    IN_FORMAT,
    LMMS_EVAL_ENV,
    LMMS_VENV,
    UTILS,
    lmms_eval_command,
    pope_records,
    pope_yaml,
)
from harness.jsonl import write_jsonl

from .stack import BASE, ROOT

TASK = "easyvqa_pope"
QUESTIONS = 5
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


def write_task(folder: Path, lmms_python: Path) -> None:
    """lmms-eval's pope.yaml on ``QUESTIONS`` easy-vqa yes/no questions, its utils beside it."""
    folder.mkdir()
    jsonl, parquet = folder / "pope.jsonl", folder / "pope.parquet"
    write_jsonl(pope_records(QUESTIONS), jsonl)
    converter = ROOT / "evaluation" / "lmms_eval_parquet.py"
    subprocess.run([str(lmms_python), str(converter), str(jsonl), str(parquet)], check=True, timeout=300)
    shutil.copy(UTILS, folder / "utils.py")
    (folder / f"{TASK}.yaml").write_text(pope_yaml(TASK, parquet, bare=False))


def test_lmms_eval_answers_every_question_through_the_openai_backend(lmms_python, server, tmp_path):
    tasks, out = tmp_path / "tasks", tmp_path / "out"
    write_task(tasks, lmms_python)
    command = lmms_eval_command(lmms_python, BASE, "mai", TASK, tasks, out, QUESTIONS)
    command += ["--limit", str(QUESTIONS)]
    env = os.environ | LMMS_EVAL_ENV
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_S)
    output = _tail(done.stdout + done.stderr)
    assert done.returncode == 0, f"lmms-eval exited {done.returncode}:\n{output}"

    written = {kind: list(out.rglob(f"*_{kind}")) for kind in (f"samples_{TASK}.jsonl", "results.json")}
    assert all(len(files) == 1 for files in written.values()), f"lmms-eval wrote {written}:\n{output}"
    [samples_file], [results_file] = written.values()
    samples = [json.loads(line) for line in samples_file.read_text().splitlines() if line.strip()]
    assert sorted(sample["doc_id"] for sample in samples) == list(range(QUESTIONS))
    for sample in samples:
        reply = sample["filtered_resps"]  # the reply as the task scored it (0.7.3 writes the string)
        reply = reply[0] if isinstance(reply, list) else reply
        where = f"question {sample['doc_id']}: {reply!r}"
        assert not reply.startswith(FAILED), where
        assert IN_FORMAT[TASK](reply), where  # POPE's form: the bare yes or no

    results = json.loads(results_file.read_text())
    assert results["n-samples"][TASK]["effective"] == QUESTIONS
    correct = sum(sample["pope_accuracy"]["score"] for sample in samples)
    assert results["results"][TASK]["pope_accuracy,none"] == pytest.approx(correct / QUESTIONS)
