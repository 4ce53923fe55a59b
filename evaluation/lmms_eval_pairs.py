"""The two-image task of ``python -m evaluation.lmms_eval_bench``: ``easyvqa_pairs``, lmms-eval's
LLaVA-Interleave Bench in-domain task (``llava_interleave_bench_in_domain``: its YAML, its prompt, its
scoring) with only the dataset swapped for easy-vqa two-image questions.

The questions are ``harness.multi_turn``'s (the same colour? how many are <colour>? do both show a
<shape>?) about validation images (easy-vqa train images the demo models never saw), in the held-out
phrasings unless told otherwise. Each is a document of the benchmark as its functions read it:
``image_0`` and ``image_1`` (the two images, which lmms-eval's OpenAI backend sends in one user
message), ``question`` (sent as it is: the task's post-prompts are empty), ``question_type``
"multi-choice" (scored by its ``mcq_acc``: the reply equals the answer once lower-cased and stripped of
punctuation, so "Yes." is right and "Yes, both are red" wrong) and ``sub_task`` "NLVR2_Mantis" (the
benchmark's own two-image subtask, one category for all: the task's ``overall_score`` is the accuracy).

The YAML names the task's functions by their module (``!function lmms_eval.tasks.
llava_interleave_bench.utils.<name>``, which lmms-eval imports when no ``<module>.py`` sits beside the
YAML) rather than through lmms_eval_tasks/utils.py: that module imports ``rouge`` when it loads, and an
import failing in the shared utils.py would stop the other tasks too.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

from harness.easy_vqa import validation_facts
from harness.multi_turn import draw

TASK = "easyvqa_pairs"
SOURCE = "llava_interleave_bench/in_domain.yaml"  # under lmms_eval/tasks/
FUNCTIONS = "lmms_eval.tasks.llava_interleave_bench.utils"
SUB_TASK = "NLVR2_Mantis"
QUESTION_TYPE = "multi-choice"
ANSWERS = ("yes", "no", "0", "1", "2")
METRIC = "overall_score"
_DATASET = re.compile(r"dataset_path: .*\ndataset_name: in_domain\ndataset_kwargs:\n  token: True\n")
_NAME = 'task: "llava_interleave_bench_in_domain"'


def _data_url(path: str) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def pair_records(count: int, seed: int = 0, *, held_out: bool = True) -> list[dict[str, str]]:
    """``count`` seeded two-image questions (``harness.multi_turn.draw``) as the benchmark's documents,
    the images as data URLs in ``image_0`` and ``image_1`` (lmms_eval_parquet.py makes them images);
    ``kind`` (``images/same_colour``, ...) is kept beside them, for breakdowns."""
    facts, paths = validation_facts()
    return [
        {
            "sample_id": record["id"],
            "question_id": record["id"],
            "sub_task": SUB_TASK,
            "question_type": QUESTION_TYPE,
            "question": record["question"],
            "answer": record["answer"],
            "kind": record["kind"],
            **{f"image_{n}": _data_url(paths[image]) for n, image in enumerate(record["images"])},
        }
        for record in draw(facts, sorted(facts), count, seed, held_out=held_out)["images"]
    ]


def task_yaml(source: str, task: str, data: str) -> str:
    """lmms-eval's in_domain.yaml (``source``, its text) with only its dataset swapped for ``data`` (the
    YAML lines naming the local one), its name for ``task``, and its functions named by their module."""
    text, swapped = _DATASET.subn(data, source)
    if swapped != 1 or _NAME not in text or "!function utils." not in text:
        raise ValueError(
            f"lmms-eval's {SOURCE} changed: its dataset, name or functions are not where they were"
        )
    return text.replace(_NAME, f'task: "{task}"').replace("!function utils.", f"!function {FUNCTIONS}.")


def in_format(reply: str) -> bool:
    """The reply is one of the answers alone ("Yes." counts: the task's scoring drops the full stop)."""
    return reply.lower().strip().rstrip(".") in ANSWERS
