"""The two-image lmms-eval task (evaluation/lmms_eval_pairs.py): its documents are two-image questions
with short answers, its YAML is lmms-eval's LLaVA-Interleave in-domain task file (vendored verbatim in
tests/lmms_eval_prompts.py) with only the dataset and the name swapped, its functions lmms-eval's own;
and, where lmms-eval's environment is installed (`make lmms-eval`), lmms-eval loads the task from the
parquet file the converter writes, each document with its two images and its question. No server."""

import base64
import json
import os
import subprocess
import textwrap

import pytest
import yaml

from evaluation import lmms_eval_bench as bench
from evaluation.lmms_eval_pairs import (
    ANSWERS,
    FUNCTIONS,
    SOURCE,
    TASK,
    in_format,
    pair_records,
    task_yaml,
)
from evaluation.lmms_eval_parquet import is_image
from harness.easy_vqa import COLOURS, SHAPES
from harness.jsonl import write_jsonl
from harness.multi_turn import HELD_OUT, PAIR_QUESTIONS
from tests import lmms_eval_prompts as lmms

SOURCE_TEXT = lmms.INTERLEAVE_IN_DOMAIN_TEXT
FIELDS = {"sample_id", "question_id", "sub_task", "question_type", "question", "answer", "kind"}


def _asked(forms):
    return {form.format(colour=c, shape=s) for form in forms for c in COLOURS for s in SHAPES}


def test_pair_records_are_two_image_questions_with_short_answers():
    records = pair_records(12, seed=3)
    assert records == pair_records(12, seed=3) != pair_records(12, seed=4)
    held_out = _asked(form for forms in PAIR_QUESTIONS.values() for form in forms if form in HELD_OUT)
    for record in records:
        assert set(record) == FIELDS | {"image_0", "image_1"}
        assert record["sample_id"] == record["question_id"]
        assert record["sample_id"].startswith("multi-turn-3-")
        assert (record["sub_task"], record["question_type"]) == ("NLVR2_Mantis", "multi-choice")
        assert record["answer"] in ANSWERS and record["question"] in held_out
        assert record["kind"].removeprefix("images/") in PAIR_QUESTIONS
        pngs = [
            base64.b64decode(record[key].removeprefix("data:image/png;base64,"))
            for key in ("image_0", "image_1")
        ]
        assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs) and pngs[0] != pngs[1]
    assert {record["answer"] for record in records} >= {"yes", "no"}
    seen = pair_records(4, held_out=False)
    assert all(record["question"] not in held_out for record in seen)


class _Loader(yaml.SafeLoader):
    """YAML as lmms-eval reads it, each ``!function`` kept as the name it gives."""


_Loader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))


def test_the_yaml_is_lmms_evals_in_domain_task_with_only_the_dataset_swapped(monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "lmms_task_file", {SOURCE: SOURCE_TEXT}.__getitem__)
    parquet = tmp_path / "pairs.parquet"
    text = bench.pairs_yaml(TASK, parquet)

    # Above the task's name, the dataset: lmms-eval's on the Hub, ours the local parquet file.
    ours_dataset, _, ours = text.partition(f'task: "{TASK}"\n')
    theirs_dataset, _, theirs = SOURCE_TEXT.partition('task: "llava_interleave_bench_in_domain"\n')
    assert theirs_dataset.startswith("dataset_path: lmms-lab-encoder/LLaVA-NeXT-Interleave-Bench\n")
    assert ours_dataset == f"dataset_path: parquet\ndataset_kwargs:\n  data_files:\n    test: {parquet}\n"
    # Below it, every line as lmms-eval wrote it (prompt, scoring, generation), its functions named by
    # their module.
    functions = [line for line in ours.splitlines() if "!function" in line]
    assert len(functions) == 4 and all(f"!function {FUNCTIONS}." in line for line in functions)
    assert ours.replace(f"!function {FUNCTIONS}.", "!function utils.") == theirs

    loaded = yaml.load(text, _Loader)
    assert loaded["dataset_kwargs"] == {"data_files": {"test": str(parquet)}} and "dataset_name" not in loaded
    assert loaded["doc_to_text"] == ("function", f"{FUNCTIONS}.doc_to_text")
    assert loaded["metric_list"][0]["aggregation"] == ("function", f"{FUNCTIONS}.overall_score")
    assert loaded["lmms_eval_specific_kwargs"] == {"default": {"oe_post_prompt": "", "mcq_post_prompt": ""}}


def test_a_changed_task_file_is_refused():
    data = "dataset_path: parquet\n"
    for changed in (
        SOURCE_TEXT.replace("dataset_name: in_domain", "dataset_name: out_of_domain"),
        SOURCE_TEXT.replace('task: "llava_interleave_bench_in_domain"', 'task: "interleave"'),
        SOURCE_TEXT.replace("!function utils.", "!function interleave_utils."),
    ):
        with pytest.raises(ValueError, match="in_domain.yaml changed"):
            task_yaml(changed, TASK, data)


def test_the_reply_in_format_and_the_image_columns():
    assert [in_format(reply) for reply in ("Yes.", " no", "2", "0.")] == [True] * 4
    assert [in_format(reply) for reply in ("Two", "yes, both", "A")] == [False] * 3
    assert all(is_image(key) for key in ("image", "image_0", "image_15"))
    assert not any(is_image(key) for key in ("images", "image_a", "image_0x", "kind"))


# What lmms-eval makes of the task: run with lmms-eval's Python, in its environment.
LOAD_TASK = textwrap.dedent(
    """
    import json, sys
    from lmms_eval.tasks import TaskManager, get_task_dict
    from PIL import Image

    folder, name = sys.argv[1:]
    task = get_task_dict([name], TaskManager("WARNING", include_path=folder), "simple")[name]
    rows, scores = [], []
    for doc in task.test_docs():
        images = task.doc_to_visual(doc)
        scored = task.process_results(doc, [doc["answer"].capitalize() + "."])["overall_score"]
        scores.append(scored)
        rows.append({
            "images": [[i.mode, list(i.size)] for i in images if isinstance(i, Image.Image)],
            "columns": sorted(k for k in doc if k.startswith("image")),
            "text": task.doc_to_text(doc), "question": doc["question"], "score": scored["score"],
        })
    print(json.dumps({"rows": rows, "overall": task.aggregation()["overall_score"](scores)}))
    """
)


@pytest.fixture(scope="module")
def lmms_installed() -> None:
    """`make lmms-eval` (nothing to do when .venv-lmms is as new as its lock; else an install of a few
    minutes, hence ``slow``: `make test` runs it, `make test-tools` does not)."""
    done = subprocess.run(
        ["make", "lmms-eval"], cwd=bench.ROOT, capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


@pytest.mark.slow
def test_lmms_eval_loads_the_task_each_document_with_its_two_images(tmp_path, lmms_installed):
    assert bench.lmms_task_file(SOURCE) == SOURCE_TEXT  # the vendored file is the installed one
    jsonl, parquet = tmp_path / "pairs.jsonl", tmp_path / "pairs.parquet"
    write_jsonl(pair_records(3), jsonl)
    python = str(bench.LMMS_VENV / "bin" / "python")
    converter = bench.ROOT / "evaluation" / "lmms_eval_parquet.py"
    subprocess.run(
        [python, str(converter), str(jsonl), str(parquet)], check=True, timeout=300, capture_output=True
    )
    (tmp_path / f"{TASK}.yaml").write_text(bench.pairs_yaml(TASK, parquet))

    env = os.environ | bench.LMMS_EVAL_ENV
    done = subprocess.run(
        [python, "-c", LOAD_TASK, str(tmp_path), TASK], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(loaded["rows"]) == 3 and loaded["overall"] == 1.0
    for row in loaded["rows"]:
        assert row["images"] == [["RGB", [64, 64]]] * 2 and row["columns"] == ["image_0", "image_1"]
        assert row["text"] == row["question"] and row["score"] == 1
