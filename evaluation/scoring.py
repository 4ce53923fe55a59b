"""Scoring one prediction against its record, and a dataset's metric over many: pure functions.

The matchers are the cascade's own (``serve_app.core.answers``): the harness scores exactly what the
server's verification calls agreement.

Metrics a record may name:
- ``option``: option accuracy (MMBench, MMMU multiple choice, RealWorldQA): the letter the prediction
  names, or the option whose text it repeats, equals the gold letter;
- ``yes_no``: POPE accuracy; over a dataset also precision, recall and F1 with "yes" as positive;
- ``relaxed``: ChartQA relaxed accuracy (numbers within 5 %, else exact);
- ``anls``: Average Normalised Levenshtein Similarity, threshold 0.5 (InfoVQA, DocVQA);
- ``exact``: case- and whitespace-insensitive exact match.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from serve_app.core.answers import normalize, option_letter, yes_no
from serve_app.core.scoring_rules import anls, relaxed_match

SCORING_METRICS = ("option", "yes_no", "relaxed", "anls", "exact")


def _golds(answer: Any) -> list[Any]:
    return list(answer) if isinstance(answer, list | tuple) else [answer]


def score(prediction: str | None, record: Mapping[str, Any]) -> float:
    """The record's metric for one prediction, in [0, 1]; ``None`` (no answer) scores 0."""
    metric, answer = record["metric"], record["answer"]
    if prediction is None:
        return 0.0
    if metric == "option":
        choices = record.get("choices") or None
        predicted = option_letter(prediction, choices)
        return float(
            predicted is not None and any(option_letter(g, choices) == predicted for g in _golds(answer))
        )
    if metric == "yes_no":
        predicted = yes_no(prediction)
        return float(predicted is not None and any(yes_no(g) == predicted for g in _golds(answer)))
    if metric == "relaxed":
        return float(any(relaxed_match(prediction, g) for g in _golds(answer)))
    if metric == "anls":
        return anls(prediction, _golds(answer))
    if metric == "exact":
        predicted = normalize(prediction, "text")
        return float(bool(predicted) and any(normalize(g, "text") == predicted for g in _golds(answer)))
    raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(SCORING_METRICS)}")


def yes_no_metrics(pairs: Iterable[tuple[str | None, str]]) -> dict[str, float]:
    """POPE's figures over (prediction, gold) pairs, "yes" the positive class: accuracy, precision,
    recall, F1 and the share of "yes" predictions. An unparseable prediction counts as wrong."""
    tp = fp = tn = fn = said_yes = total = 0
    for prediction, gold in pairs:
        total += 1
        predicted, truth = yes_no(prediction), yes_no(gold)
        said_yes += predicted == "yes"
        if truth == "yes":
            tp += predicted == "yes"
            fn += predicted != "yes"
        else:
            tn += predicted == "no"
            fp += predicted == "yes"
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "accuracy": (tp + tn) / total if total else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "yes_ratio": said_yes / total if total else 0.0,
    }


def bootstrap_interval(scores: Sequence[float], *, samples: int = 1000, seed: int = 0) -> list[float]:
    """95 % percentile-bootstrap interval of the mean score, in points (0-100); seeded."""
    if not scores:
        return [math.nan, math.nan]
    rng = random.Random(seed)
    n = len(scores)
    means = sorted(sum(scores[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    return [100 * means[int(0.025 * samples)], 100 * means[int(0.975 * samples) - 1]]


def dataset_metrics(
    predictions: Sequence[str | None], records: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The dataset's headline figure ``score`` (the mean per-record score, in %) with its 95 % bootstrap
    interval ``score_95ci``, and, when every record is yes/no, POPE's accuracy, precision, recall and
    F1 (in %)."""
    if len(predictions) != len(records):
        raise ValueError(f"{len(predictions)} predictions for {len(records)} records")
    if not records:
        return {"score": 0.0}
    scores = [score(prediction, record) for prediction, record in zip(predictions, records, strict=True)]
    result: dict[str, Any] = {
        "score": 100 * sum(scores) / len(scores),
        "score_95ci": bootstrap_interval(scores),
    }
    if all(record["metric"] == "yes_no" for record in records):
        pope = yes_no_metrics((p, str(r["answer"])) for p, r in zip(predictions, records, strict=True))
        result |= {name: 100 * value for name, value in pope.items()}
    return result
