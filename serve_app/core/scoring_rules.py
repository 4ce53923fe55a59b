"""The field's scoring rules for one prediction against gold: ChartQA's relaxed accuracy for numbers
and ANLS for open text (InfoVQA/DocVQA). Lenient on purpose (a typo still scores); the cascade never
verifies with them (``verification.py``). Pure functions, no I/O.
"""

from __future__ import annotations

from .answers import as_text, normalize, parse_number


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
