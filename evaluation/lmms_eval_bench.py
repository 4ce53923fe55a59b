"""lmms-eval, unmodified, against the server: easy-vqa questions asked the way its tasks ask.

Five tasks, each with lmms-eval's own prompt builders and only the dataset swapped for a seeded sample of
easy-vqa's test split (validation images for the two-image task):
- ``easyvqa_pope``: lmms-eval's POPE task (its YAML and utils) on yes/no questions, and
  ``easyvqa_pope_bare``: the same with its post_prompt set to "" (the bare question);
- ``easyvqa_mmbench``: shape questions in MMBench's form (options as "A. ..." lines, MMBench's
  instruction), scored as the exact letter, and ``easyvqa_shape``: the same questions in short-answer
  form with POPE's instruction, scored as the exact shape;
- ``easyvqa_pairs``: lmms-eval's LLaVA-Interleave Bench in-domain task on two-image questions about
  validation images (evaluation/lmms_eval_pairs.py), scored by its own exact match.

Every policy runs every task, interleaved; the result (accuracy, 95 % interval, the replies; ``meta``: the
command's provenance record) goes to ``bench/results/lmms-eval/easy-vqa.json`` and the per-question
replies to ``predictions.jsonl`` beside it.
Needs lmms-eval's environment (``make lmms-eval``). Without ``--url`` it serves configs/mai-cpu.yaml
here (the one server stack on this machine).

    python -m evaluation.lmms_eval_bench [--url http://127.0.0.1:8000] [--pope 500] [--shapes 300] \
        [--pairs 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from evaluation import lmms_eval_pairs as pairs_task
from harness.jsonl import write_jsonl
from harness.paths import DATASETS, RESULTS, ROOT
from harness.provenance import git_commit, provenance
from harness.results import write_result
from serve_app.core.intervals import wilson_interval

COMMAND = "python -m evaluation.lmms_eval_bench"
LMMS_VENV = ROOT / ".venv-lmms"
OUT = RESULTS / "lmms-eval"
TASKS_DIR = DATASETS / "lmms-eval"
UTILS = Path(__file__).resolve().parent / "lmms_eval_tasks" / "utils.py"
POLICIES = ("mai", "mai-large", "mai-transfer")
SHAPES = ("circle", "rectangle", "triangle")
TASKS = ("easyvqa_pope", "easyvqa_pope_bare", "easyvqa_mmbench", "easyvqa_shape", pairs_task.TASK)
# The reply in the task's own format: lmms-eval's POPE compares the lower-cased reply to "yes"/"no",
# the MMBench form wants the letter alone, the shape form the shape, the two-image task the answer.
IN_FORMAT = {
    "easyvqa_pope": lambda reply: reply.lower().strip() in ("yes", "no"),
    "easyvqa_pope_bare": lambda reply: reply.lower().strip() in ("yes", "no"),
    "easyvqa_mmbench": lambda reply: reply.strip() in ("A", "B", "C"),
    "easyvqa_shape": lambda reply: reply.lower().strip().rstrip(".") in SHAPES,
    pairs_task.TASK: pairs_task.in_format,
}
METRIC = {
    "easyvqa_pope": "pope_accuracy",
    "easyvqa_pope_bare": "pope_accuracy",
    "easyvqa_mmbench": "exact_letter",
    "easyvqa_shape": "exact_match",
    pairs_task.TASK: pairs_task.METRIC,
}
SPLIT = "easy-vqa test (seed 0); pairs: validation images (seed 0)"  # where the questions come from
Documents = Sequence[Mapping[str, str]]  # a task's documents, in order


# ---------------------------------------------------------------- the datasets


def pope_records(count: int, seed: int = 0) -> list[dict[str, str]]:
    """``count`` seeded easy-vqa test yes/no questions as POPE documents."""
    from harness.datasets import easy_vqa_records

    records = [r for r in easy_vqa_records("test", None, seed=seed) if r["answer_type"] == "yes_no"]
    return [
        {"question_id": r["id"], "question": r["question"], "answer": r["answer"], "image": r["image"]}
        for r in records[:count]
    ]


def shape_records(count: int, seed: int = 0) -> list[dict[str, str]]:
    """``count`` seeded easy-vqa test shape questions, each with the three shapes as options in a
    seeded order: the fields of MMBench's documents, ``answer`` the gold letter and ``shape`` the shape."""
    from harness.datasets import easy_vqa_records

    rng = random.Random(seed)
    records = [r for r in easy_vqa_records("test", None, seed=seed) if r["answer"] in SHAPES][:count]
    documents = []
    for index, record in enumerate(records):
        choices = list(SHAPES)
        rng.shuffle(choices)
        documents.append(
            {
                "index": str(index),
                "question_id": record["id"],
                "question": record["question"],
                "hint": "nan",
                **{letter: option for letter, option in zip("ABC", choices, strict=True)},
                "answer": "ABC"[choices.index(record["answer"])],
                "shape": record["answer"],
                "category": "shape",
                "L2-category": "shape",
                "source": "easy-vqa",
                "split": "test",
                "image": record["image"],
            }
        )
    return documents


# ---------------------------------------------------------------- the tasks


def lmms_task_file(relative: str) -> str:
    """A file of the installed lmms-eval's tasks."""
    [site] = (LMMS_VENV / "lib").glob("python3*/site-packages")
    return (site / "lmms_eval" / "tasks" / relative).read_text()


def _without_functions(text: str) -> dict[str, Any]:
    return yaml.safe_load("".join(line for line in text.splitlines(True) if "!function" not in line))


def _data(parquet: Path) -> str:
    return f"dataset_path: parquet\ndataset_kwargs:\n  data_files:\n    test: {parquet}\n"


def pope_yaml(task: str, parquet: Path, *, bare: bool) -> str:
    """lmms-eval's pope.yaml with only the dataset and the name swapped (and, ``bare``, no post_prompt)."""
    text = lmms_task_file("pope/pope.yaml")
    text = re.sub(r"dataset_path: .*\ndataset_kwargs:\n  token: True\n", _data(parquet), text)
    text = text.replace('task: "pope"', f'task: "{task}"')
    if bare:
        post = '    post_prompt: "\\nAnswer the question using a single word or phrase."'
        assert post in text, "lmms-eval's pope.yaml changed: its default post_prompt is not where it was"
        text = text.replace(post, '    post_prompt: ""', 1)
    return text


def pairs_yaml(task: str, parquet: Path) -> str:
    """lmms-eval's LLaVA-Interleave in-domain YAML on ``parquet``, named ``task`` (lmms_eval_pairs.py)."""
    return pairs_task.task_yaml(lmms_task_file(pairs_task.SOURCE), task, _data(parquet))


def own_task_yaml(
    task: str,
    parquet: Path,
    *,
    prompt: str,
    process_results: str,
    metric: str,
    target: str,
    settings: dict[str, Any],
) -> str:
    """A task on ``parquet`` with lmms-eval's ``prompt`` builders (``utils.<prompt>_doc_to_visual``,
    ``_doc_to_text``), its ``settings`` (generation and prompt kwargs) and our scoring
    (``utils.<process_results>``, reported as ``metric``)."""
    fields = {
        "task": task,
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_target": target,
        **settings,
        "metric_list": [{"metric": metric, "aggregation": "mean", "higher_is_better": True}],
    }
    return (
        _data(parquet)
        + f"doc_to_visual: !function utils.{prompt}_doc_to_visual\n"
        + f"doc_to_text: !function utils.{prompt}_doc_to_text\n"
        + f"process_results: !function utils.{process_results}\n"
        + yaml.safe_dump(fields, sort_keys=False)
    )


def mmbench_yaml(task: str, parquet: Path) -> str:
    """MMBench's prompt (its doc_to_text, its lmms_eval_specific_kwargs and generation settings from
    the installed YAML files), the exact letter as the metric."""
    template = _without_functions(lmms_task_file("mmbench/_default_template_mmbench_en_yaml"))
    settings = {key: template[key] for key in ("generation_kwargs", "lmms_eval_specific_kwargs")}
    return own_task_yaml(
        task,
        parquet,
        prompt="mmbench",
        process_results="letter_process_results",
        metric="exact_letter",
        target="answer",
        settings=settings,
    )


def shape_yaml(task: str, parquet: Path) -> str:
    """The shape questions in short-answer form: POPE's prompt builder and settings, the shape as the
    target, exact match as the metric."""
    pope = _without_functions(lmms_task_file("pope/pope.yaml"))
    settings = {
        "generation_kwargs": pope["generation_kwargs"],
        "lmms_eval_specific_kwargs": {"default": pope["lmms_eval_specific_kwargs"]["default"]},
    }
    return own_task_yaml(
        task,
        parquet,
        prompt="pope",
        process_results="shape_process_results",
        metric="exact_match",
        target="shape",
        settings=settings,
    )


def write_tasks(folder: Path, pope: Documents, shapes: Documents, pairs: Documents) -> None:
    """The five tasks' YAML files, their utils.py and their parquet files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    parquets = {}
    for name, rows in (("pope", pope), ("shapes", shapes), ("pairs", pairs)):
        jsonl = folder / f"{name}.jsonl"
        write_jsonl(rows, jsonl)
        parquets[name] = folder / f"{name}.parquet"
        converter = [str(LMMS_VENV / "bin" / "python"), str(Path(__file__).with_name("lmms_eval_parquet.py"))]
        subprocess.run([*converter, str(jsonl), str(parquets[name])], check=True)
    shutil.copy(UTILS, folder / "utils.py")
    files = {
        "easyvqa_pope": pope_yaml("easyvqa_pope", parquets["pope"], bare=False),
        "easyvqa_pope_bare": pope_yaml("easyvqa_pope_bare", parquets["pope"], bare=True),
        "easyvqa_mmbench": mmbench_yaml("easyvqa_mmbench", parquets["shapes"]),
        "easyvqa_shape": shape_yaml("easyvqa_shape", parquets["shapes"]),
        pairs_task.TASK: pairs_yaml(pairs_task.TASK, parquets["pairs"]),
    }
    for task, text in files.items():
        (folder / f"{task}.yaml").write_text(text)


# ---------------------------------------------------------------- running lmms-eval


def lmms_eval_command(
    python: Path, url: str, policy: str, task: str, include_path: Path, out: Path, concurrency: int
) -> list[str]:
    """The lmms-eval command line that runs ``task`` (from ``include_path``) against ``policy`` at
    ``url``, through its OpenAI backend, writing samples and results under ``out``."""
    model_args = (
        f"model_version={policy},base_url={url}/v1,api_key=none,num_concurrent={concurrency},timeout=300"
    )
    return [
        str(python), "-m", "lmms_eval", "--model", "openai", "--force_simple", "--model_args", model_args,
        "--tasks", task, "--include_path", str(include_path), "--output_path", str(out), "--log_samples",
    ]  # fmt: skip


# lmms-eval offline: the task's data is local, and its OpenAI backend wants a key.
LMMS_EVAL_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "none"}


def run_lmms_eval(url: str, policy: str, task: str, out: Path, concurrency: int) -> Path:
    """One lmms-eval run of ``task`` against ``policy``; the samples file it wrote."""
    target = out / f"{task}--{policy}"
    shutil.rmtree(target, ignore_errors=True)
    command = lmms_eval_command(
        LMMS_VENV / "bin" / "python", url, policy, task, TASKS_DIR, target, concurrency
    ) + ["--verbosity", "WARNING"]
    started = time.monotonic()
    subprocess.run(command, check=True, env=os.environ | LMMS_EVAL_ENV, stdout=subprocess.DEVNULL)
    print(f"  {task} / {policy}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    [samples] = target.rglob(f"*_samples_{task}.jsonl")
    return samples


def score(
    task: str, samples: Iterable[Mapping[str, Any]], documents: Sequence[Mapping[str, str]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The summary of one run and its per-question replies, as lmms-eval scored them; ``documents``
    are the task's documents in order (a sample names its document by index)."""
    rows = []
    for sample in samples:
        metric = sample[METRIC[task]]
        correct = metric["score"] if isinstance(metric, dict) else metric
        reply = sample["filtered_resps"]
        reply = reply[0] if isinstance(reply, list) else reply
        question_id = documents[sample["doc_id"]]["question_id"]
        rows.append({"id": question_id, "reply": reply, "correct": bool(correct)})
    rows.sort(key=lambda row: row["id"])
    correct = sum(row["correct"] for row in rows)
    replies = Counter(row["reply"].strip().lower() for row in rows)
    summary = {
        "questions": len(rows),
        "correct": correct,
        "accuracy": round(correct / len(rows), 4) if rows else None,
        "ci95": [round(bound, 4) for bound in wilson_interval(correct, len(rows))],
        "in_format": round(sum(IN_FORMAT[task](row["reply"]) for row in rows) / len(rows), 4)
        if rows
        else None,
        "replies": dict(replies.most_common(6)),
    }
    return summary, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: serve configs/mai-cpu.yaml here)")
    parser.add_argument("--pope", type=int, default=500, help="yes/no questions (default 500)")
    parser.add_argument("--shapes", type=int, default=300, help="shape questions (default 300)")
    parser.add_argument("--pairs", type=int, default=200, help="two-image questions (default 200)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--rescore", action="store_true", help="score the runs already made again, without running lmms-eval"
    )
    parser.add_argument(
        "--server-commit", help="with --url: the commit the server runs, when it is not this checkout's"
    )
    args = parser.parse_args(argv)
    started = time.time()
    if not (LMMS_VENV / ".installed").exists():
        parser.error("lmms-eval is not installed: run `make lmms-eval` first")
    policies = args.policies.split(",")
    pope, shapes = pope_records(args.pope), shape_records(args.shapes)
    pairs = pairs_task.pair_records(args.pairs)
    write_tasks(TASKS_DIR, pope, shapes, pairs)
    documents = {task: shapes if "pope" not in task else pope for task in TASKS} | {pairs_task.TASK: pairs}
    raw = DATASETS / "lmms-eval-runs"  # lmms-eval's own output: its samples, not committed
    if args.out.resolve() != OUT:
        raw = raw / args.out.resolve().relative_to(OUT)

    def evaluate(url: str) -> int:
        summaries: dict[str, dict[str, Any]] = {task: {} for task in TASKS}
        predictions = []
        for task in TASKS:  # every policy on a task before the next task: the runs interleave
            for policy in policies:
                samples = (
                    next((raw / f"{task}--{policy}").rglob(f"*_samples_{task}.jsonl"))
                    if args.rescore
                    else run_lmms_eval(url, policy, task, raw, args.concurrency)
                )
                lines = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
                summaries[task][policy], rows = score(task, lines, documents[task])
                predictions += [{"task": task, "policy": policy, **row} for row in rows]
        command = (
            COMMAND
            + (f" --pope {args.pope}" if args.pope != 500 else "")
            + (f" --shapes {args.shapes}" if args.shapes != 300 else "")
            + (f" --pairs {args.pairs}" if args.pairs != 200 else "")
        )
        if args.rescore:  # the runs' own provenance, and the command and commit that scored them again
            meta = json.loads((args.out / "easy-vqa.json").read_text())["meta"]
            meta |= {"rescored": {"command": f"{command} --rescore", **git_commit()}}
        else:
            meta = provenance(
                command,
                config=None if args.url else "mai-cpu.yaml",
                started=started,
                # A server started elsewhere: its config is not known here, the record names its URL.
                **({"url": args.url} if args.url else {}),
                server_commit=args.server_commit or git_commit().get("commit"),
                lmms_eval="0.7.3",
                lmms_eval_args="--model openai --force_simple --model_args model_version=<policy>,"
                f"num_concurrent={args.concurrency}",
                questions={"pope": args.pope, "shapes": args.shapes, "pairs": args.pairs, "split": SPLIT},
            )
        result = {"tasks": summaries, "differences": differences(summaries)}
        write_result(args.out / "easy-vqa.json", result, meta)
        write_jsonl(predictions, args.out / "predictions.jsonl")
        print(json.dumps(result["tasks"], indent=1))
        return 0

    from evaluation.demo_eval import _with_server

    return evaluate(args.url or "") if args.rescore else _with_server(args.url, evaluate)


def differences(summaries: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per policy, in points: POPE with its instruction minus the bare question, and the short-answer
    form of the shape questions minus MMBench's form."""
    pairs = {
        "pope_minus_bare": ("easyvqa_pope", "easyvqa_pope_bare"),
        "short_minus_mmbench": ("easyvqa_shape", "easyvqa_mmbench"),
    }
    return {
        policy: {
            name: round(100 * (summaries[a][policy]["accuracy"] - summaries[b][policy]["accuracy"]), 1)
            for name, (a, b) in pairs.items()
            if policy in summaries[a] and policy in summaries[b]
        }
        for policy in summaries["easyvqa_pope"]
    }


if __name__ == "__main__":
    raise SystemExit(main())
