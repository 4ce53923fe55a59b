"""The functions of the easy-vqa tasks for lmms-eval (written beside their YAML files by
``python -m evaluation.lmms_eval_bench``): lmms-eval's own POPE and MMBench functions, and exact scoring
for the shape questions. Imported by lmms-eval, in its own environment (``make lmms-eval``)."""

from lmms_eval.tasks.mmbench.en_utils import mmbench_doc_to_text, mmbench_doc_to_visual  # noqa: F401
from lmms_eval.tasks.pope.utils import (  # noqa: F401
    pope_aggregate_accuracy,
    pope_aggregate_f1_score,
    pope_aggregate_precision,
    pope_aggregate_recall,
    pope_aggregate_yes_ratio,
    pope_doc_to_text,
    pope_doc_to_visual,
    pope_process_results,
)


def letter_process_results(doc, results):
    """The reply is exactly the gold option's letter (MMBench's own scoring asks a GPT judge)."""
    return {"exact_letter": 1.0 if results[0].strip() == doc["answer"] else 0.0}


def shape_process_results(doc, results):
    """The reply is the gold shape, as RealWorldQA scores open answers: lower-cased, a final "." off."""
    return {"exact_match": 1.0 if results[0].lower().strip().rstrip(".") == doc["shape"] else 0.0}
