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

from serve_app.core.answers import as_text, normalize, option_letter, parse_number, yes_no

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


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _within(pred: float, gold: float, rel_tol: float) -> bool:
    if gold == 0 or pred == 0:
        return pred == gold
    return abs(pred - gold) / abs(gold) <= rel_tol + 1e-12


def _numbers_match(pred: tuple[float, bool], gold: tuple[float, bool], rel_tol: float) -> bool:
    (p, p_pct), (g, g_pct) = pred, gold
    if _within(p, g, rel_tol):
        return True
    # lmms-eval quirk fixed: "12%" against "12" is the same figure written two ways.
    if p_pct != g_pct:
        return _within(p * 100 if p_pct else p, g * 100 if g_pct else g, rel_tol)
    return False


def relaxed_match(pred: object, gold: object, rel_tol: float = 0.05) -> bool:
    """ChartQA relaxed accuracy: numbers within ``rel_tol`` of the gold (exact when the gold is 0),
    anything else a case-insensitive exact match."""
    pred_text, gold_text = as_text(pred), as_text(gold)
    if pred_text is None or gold_text is None:
        return False
    pred_num, gold_num = parse_number(pred_text), parse_number(gold_text)
    if pred_num is not None and gold_num is not None:
        return _numbers_match(pred_num, gold_num, rel_tol)
    pred_clean, gold_clean = normalize(pred_text, "text"), normalize(gold_text, "text")
    return bool(gold_clean) and pred_clean == gold_clean


# ---------------------------------------------------------------------------------------------


def _levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def _anls_one(pred: str, gold: str, cutoff: float) -> float:
    pred, gold = _collapse(pred).casefold().strip(), _collapse(gold).casefold().strip()
    longest = max(len(pred), len(gold))
    if longest == 0:
        return 1.0
    distance = _levenshtein(pred, gold) / longest
    return 1.0 - distance if distance < cutoff else 0.0


def anls(pred: object, gold: object, *, cutoff: float = 0.5) -> float:
    """Average Normalised Levenshtein Similarity of one prediction (InfoVQA/DocVQA): 1 minus the
    normalised edit distance, 0 when that distance is >= ``cutoff``. ``gold`` may be one answer or
    a list of accepted answers (the best one counts)."""
    pred_text = as_text(pred)
    if pred_text is None:
        return 0.0
    golds = [gold] if not isinstance(gold, list | tuple) else list(gold)
    scores = [_anls_one(pred_text, g, cutoff) for g in (as_text(x) for x in golds) if g is not None]
    return max(scores, default=0.0)
