"""Fit the cascade's verification thresholds on a labelled set: ``mai-eval calibrate``.

One pass records what every stage of the full path answers, with its confidence, tokens and time:
``mai-small`` and ``mai-large`` (the two Simple answers of stage 1) and ``mai-transfer`` (the small
model's reasoning and the large model's answer with it). Decoding is greedy, so the cascade under any
thresholds takes, per question, exactly the stages those runs recorded: every rule is then replayed
offline, none is run again. For a grid of ``min_confidence`` x ``confident_large`` it computes accuracy
(95 % bootstrap intervals), escalation, route shares, completion tokens per model and the expected
latency from the measured per-stage times (stage 1's two calls in parallel), draws the
accuracy/latency front beside the baselines, and picks the rule for a stated goal.

Pure functions here; the CLI (``evaluation/cli.py``) runs the pass and writes the files.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from serve_app.core.answers import agree, is_valid
from serve_app.core.listed_choices import split_choices

from .records import EvalRecord
from .scoring import bootstrap_interval

CALIBRATION_RUNS = ("mai-small", "mai-large", "mai-transfer")
Z_95 = 1.959964


@dataclass(frozen=True)
class StageOutcome:
    answer: str | None
    confidence: float | None
    completion_tokens: int
    latency_s: float


@dataclass(frozen=True)
class QuestionPaths:
    """What every stage of the full path did on one question, and what each possible final answer scored."""

    id: str
    kind: str
    choices: tuple[str, ...]
    small_short: StageOutcome
    large_short: StageOutcome
    reasoning: StageOutcome
    transfer: StageOutcome
    score_small: float  # mai-small's answer
    score_large: float  # mai-large's answer: the cascade's answer on every route but transfer
    score_transfer: float  # mai-transfer's answer: the cascade's answer on the transfer route
    # Whether the answers match under the kind's matcher (independent of any threshold, so computed once);
    # None: the replay asks the matcher.
    short_match: bool | None = None
    reasoned_match: bool | None = None


@dataclass(frozen=True)
class Rule:
    min_confidence: float = 0.0
    confident_large: float | None = None

    @property
    def label(self) -> str:
        large = "off" if self.confident_large is None else f"{self.confident_large:.3g}"
        return f"min_confidence {self.min_confidence:.3g}, confident_large {large}"


@dataclass(frozen=True)
class Replay:
    """One question under one rule: the route the cascade takes and what it costs."""

    route: str
    score: float
    small_tokens: int
    large_tokens: int
    latency_s: float


def _stage(row: Mapping[str, Any], name: str) -> StageOutcome | None:
    stage = next(
        (s for s in row.get("stages", []) if s.get("name") == name and s.get("status") == "ok"), None
    )
    if stage is None:
        return None
    return StageOutcome(
        stage.get("answer"),
        stage.get("confidence"),
        int(stage.get("completion_tokens") or 0),
        float(stage.get("latency_s") or 0.0),
    )


def question_paths(
    records: Sequence[EvalRecord], rows: Mapping[str, Mapping[str, Mapping[str, Any]]], **matcher: float
) -> tuple[list[QuestionPaths], list[str]]:
    """The full path of every record answered under all three calibration runs (``rows``: run name ->
    record id -> prediction row); also the ids left out (a run failed or a stage is missing)."""
    paths, missing = [], []
    for record in records:
        small, large, transfer = (rows.get(run, {}).get(record.id) for run in CALIBRATION_RUNS)
        stages = None
        if small and large and transfer and all(row.get("status") == 200 for row in (small, large, transfer)):
            stages = (
                _stage(small, "short_small"),
                _stage(large, "short_large"),
                _stage(transfer, "reason_small"),
                _stage(transfer, "transfer_large"),
            )
        if stages is None or None in stages:
            missing.append(record.id)
            continue
        choices = tuple(record.choices or split_choices(record.question)[1])
        kind = large.get("kind") or "text"
        small_short, large_short, reasoning, _ = stages
        paths.append(
            QuestionPaths(
                record.id,
                kind,
                choices,
                *stages,
                float(small["score"]),
                float(large["score"]),
                float(transfer["score"]),
                short_match=agree(small_short.answer, large_short.answer, kind, choices=choices, **matcher),
                reasoned_match=agree(reasoning.answer, large_short.answer, kind, choices=choices, **matcher),
            )
        )
    return paths, missing


def _confident(outcomes: Iterable[StageOutcome], threshold: float) -> bool:
    return threshold == 0 or all(o.confidence is not None and o.confidence >= threshold for o in outcomes)


def replay(q: QuestionPaths, rule: Rule, *, anls_threshold: float = 0.5, rel_tol: float = 0.05) -> Replay:
    """The cascade's route for ``q`` under ``rule``: the same decisions ``serve_app.core.cascade`` makes."""

    def agreed(a: StageOutcome, b: StageOutcome, known: bool | None) -> bool:
        matched = known
        if matched is None:
            matched = agree(
                a.answer, b.answer, q.kind, choices=q.choices, anls_threshold=anls_threshold, rel_tol=rel_tol
            )
        return matched and _confident((a, b), rule.min_confidence)

    small, large = q.small_short.completion_tokens, q.large_short.completion_tokens
    latency = max(q.small_short.latency_s, q.large_short.latency_s)
    if agreed(q.small_short, q.large_short, q.short_match):
        return Replay("agree_short", q.score_large, small, large, latency)
    confidence = q.large_short.confidence
    valid = is_valid(q.large_short.answer, q.kind, choices=q.choices)
    if rule.confident_large is not None and valid and confidence is not None:
        if confidence >= rule.confident_large:
            return Replay("confident_large", q.score_large, small, large, latency)
    small += q.reasoning.completion_tokens
    latency += q.reasoning.latency_s
    if agreed(q.reasoning, q.large_short, q.reasoned_match):
        return Replay("agree_reasoned", q.score_large, small, large, latency)
    large += q.transfer.completion_tokens
    return Replay("transfer", q.score_transfer, small, large, latency + q.transfer.latency_s)


def summarize(name: str, replays: Sequence[Replay], *, interval: bool = True, **extra: Any) -> dict[str, Any]:
    """One rule's figures; ``interval``: with the accuracy's 95 % bootstrap interval (the costly part)."""
    n = len(replays)
    scores = [r.score for r in replays]
    routes = Counter(r.route for r in replays)
    return {
        "name": name,
        **extra,
        "accuracy": 100 * sum(scores) / n,
        "accuracy_95ci": bootstrap_interval(scores) if interval else None,
        "routes": {route: count / n for route, count in sorted(routes.items())},
        "escalated": sum(r.route in ("agree_reasoned", "transfer") for r in replays) / n,
        "small_completion_tokens": sum(r.small_tokens for r in replays) / n,
        "large_completion_tokens": sum(r.large_tokens for r in replays) / n,
        "latency_s": sum(r.latency_s for r in replays) / n,
    }


def baselines(paths: Sequence[QuestionPaths]) -> dict[str, dict[str, Any]]:
    """The single-model policies and Full RT, from the same measured stages."""

    def run(name: str, score, small, large, latency) -> dict[str, Any]:
        return summarize(name, [Replay("single", score(q), small(q), large(q), latency(q)) for q in paths])

    return {
        "mai-small": run(
            "mai-small",
            lambda q: q.score_small,
            lambda q: q.small_short.completion_tokens,
            lambda q: 0,
            lambda q: q.small_short.latency_s,
        ),
        "mai-large": run(
            "mai-large",
            lambda q: q.score_large,
            lambda q: 0,
            lambda q: q.large_short.completion_tokens,
            lambda q: q.large_short.latency_s,
        ),
        "mai-transfer": run(
            "mai-transfer",
            lambda q: q.score_transfer,
            lambda q: q.reasoning.completion_tokens,
            lambda q: q.transfer.completion_tokens,
            lambda q: q.reasoning.latency_s + q.transfer.latency_s,
        ),
    }


def threshold_grid(paths: Sequence[QuestionPaths], steps: int = 40) -> list[Rule]:
    """``min_confidence`` at 0 and at the quantiles of the stage-1 confidences; ``confident_large`` off
    and at the upper quantiles of the large model's. Every distinct outcome of a threshold lies between
    two observed confidences, so quantiles cover the choices the data can tell apart."""

    def quantiles(values: list[float], start: float) -> list[float]:
        values = sorted(values)
        if not values:
            return []
        picks = {
            values[min(len(values) - 1, int(len(values) * (start + (1 - start) * i / steps)))]
            for i in range(steps)
        }
        return sorted(round(v, 6) for v in picks if v > 0)

    stage_one = [
        c for q in paths for c in (q.small_short.confidence, q.large_short.confidence) if c is not None
    ]
    large = [q.large_short.confidence for q in paths if q.large_short.confidence is not None]
    minimums = [0.0, *quantiles(stage_one, 0.0)]
    overrides: list[float | None] = [None, *quantiles(large, 0.5)]
    return [Rule(m, c) for m in minimums for c in overrides]


def evaluate_rules(
    paths: Sequence[QuestionPaths], rules: Iterable[Rule], *, intervals: bool = True, **matcher: float
) -> list[dict[str, Any]]:
    return [
        summarize(
            rule.label, [replay(q, rule, **matcher) for q in paths], interval=intervals, rule=asdict(rule)
        )
        for rule in rules
    ]


def with_interval(paths: Sequence[QuestionPaths], result: dict[str, Any], **matcher: float) -> dict[str, Any]:
    """``result`` (of ``evaluate_rules(..., intervals=False)``) with its accuracy interval."""
    [full] = evaluate_rules(paths, [Rule(**result["rule"])], **matcher)
    return result | {"accuracy_95ci": full["accuracy_95ci"]}


def pareto_front(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules no other rule beats on both accuracy (higher) and expected latency (lower), by latency."""
    front, best = [], -math.inf
    for result in sorted(results, key=lambda r: (r["latency_s"], -r["accuracy"])):
        if result["accuracy"] > best:
            front.append(result)
            best = result["accuracy"]
    return front


def choose(
    results: Sequence[dict[str, Any]],
    full_rt: dict[str, Any],
    *,
    max_accuracy_loss: float | None = None,
    max_escalation: float | None = None,
) -> dict[str, Any] | None:
    """The rule for the goal: the fastest within ``max_accuracy_loss`` points of Full RT, or the most
    accurate that escalates at most ``max_escalation`` of the questions. None when no rule meets it."""
    if max_escalation is not None:
        fitting = [r for r in results if r["escalated"] <= max_escalation]
        return max(fitting, key=lambda r: (r["accuracy"], -r["latency_s"]), default=None)
    loss = 1.0 if max_accuracy_loss is None else max_accuracy_loss
    fitting = [r for r in results if r["accuracy"] >= full_rt["accuracy"] - loss]
    return min(fitting, key=lambda r: (r["latency_s"], -r["accuracy"]), default=None)


def paired_difference_interval(
    paths: Sequence[QuestionPaths], rule: Rule, *, samples: int = 1000, seed: int = 0, **matcher: float
) -> list[float]:
    """95 % bootstrap interval (points) of the rule's accuracy minus Full RT's, question by question."""
    differences = [replay(q, rule, **matcher).score - q.score_transfer for q in paths]
    return bootstrap_interval(differences, samples=samples, seed=seed)


def precision_note(n: int, accuracy: float, max_accuracy_loss: float | None) -> str | None:
    """Say so, with numbers, when ``n`` questions cannot resolve the accuracy loss asked for."""
    if max_accuracy_loss is None or n == 0:
        return None
    p = min(max(accuracy / 100, 0.01), 0.99)
    half_width = 100 * Z_95 * math.sqrt(p * (1 - p) / n)
    if half_width <= max_accuracy_loss:
        return None
    needed = math.ceil((Z_95 * 100 / max_accuracy_loss) ** 2 * p * (1 - p))
    return (
        f"{n} questions give an accuracy a 95 % interval of ±{half_width:.1f} points, wider than the "
        f"{max_accuracy_loss:g} point(s) of loss asked for: the choice may miss the goal on other questions. "
        f"About {needed} questions would give ±{max_accuracy_loss:g}."
    )


def cascade_yaml(rule: Rule, comment: str, plans: Mapping[str, str] | None = None) -> str:
    """The ``cascade:`` section of the chosen rule and, when given, the plan table per answer kind
    (``cascade.adaptive.table``: applied as it is with ``mode: table``, allowed to the controller with
    ``mode: learn``)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += ["cascade:", f"  min_confidence: {rule.min_confidence:g}"]
    if rule.confident_large is not None:
        lines.append(f"  confident_large: {rule.confident_large:g}")
    if plans:
        table = ", ".join(f"{kind}: {plan}" for kind, plan in sorted(plans.items()))
        lines += [
            "  # per answer kind, the fastest plan within the goal's accuracy of Full RT on that kind",
            f"  adaptive: {{mode: table, table: {{{table}}}}}",
        ]
    return "\n".join(lines) + "\n"


PLANS = ("sequential", "eager", "reason-first", "transfer")  # serve_app/core/plans.py, in its order


def replay_plan(
    q: QuestionPaths, rule: Rule, plan: str, *, anls_threshold: float = 0.5, rel_tol: float = 0.05
) -> Replay:
    """``q`` under ``rule`` and one of the cascade's plans, from the same recorded stages.

    ``eager`` takes the sequential route with the reasoning started beside stage 1 (a stage-1 exit
    cancels it when stage 1 ends: its tokens counted for that share of the reasoning's time);
    ``reason-first`` settles on the reasoned answer agreeing with the large short one, else transfers;
    ``transfer`` is Full RT. Latencies add the recorded stage times as the plan orders them, so they
    leave out what running stages together costs on shared hardware."""
    matcher = {"anls_threshold": anls_threshold, "rel_tol": rel_tol}
    if plan == "sequential":
        return replay(q, rule, **matcher)
    reasoning, transfer = q.reasoning, q.transfer
    if plan == "transfer":
        return Replay(
            "transfer",
            q.score_transfer,
            reasoning.completion_tokens,
            transfer.completion_tokens,
            reasoning.latency_s + transfer.latency_s,
        )
    if plan == "eager":
        sequential = replay(q, rule, **matcher)
        stage_one = max(q.small_short.latency_s, q.large_short.latency_s)
        if sequential.route in ("agree_short", "confident_large"):
            share = min(1.0, stage_one / reasoning.latency_s) if reasoning.latency_s > 0 else 1.0
            small = sequential.small_tokens + round(share * reasoning.completion_tokens)
            return Replay(sequential.route, sequential.score, small, sequential.large_tokens, stage_one)
        latency = max(stage_one, reasoning.latency_s)
        if sequential.route == "transfer":
            latency += transfer.latency_s
        return Replay(
            sequential.route, sequential.score, sequential.small_tokens, sequential.large_tokens, latency
        )
    if plan != "reason-first":
        raise ValueError(f"unknown plan {plan!r}; the plans are {', '.join(PLANS)}")
    matched = q.reasoned_match
    if matched is None:
        matched = agree(reasoning.answer, q.large_short.answer, q.kind, choices=q.choices, **matcher)
    large = q.large_short.completion_tokens
    latency = max(q.large_short.latency_s, reasoning.latency_s)
    if matched and _confident((reasoning, q.large_short), rule.min_confidence):
        return Replay("agree_reasoned", q.score_large, reasoning.completion_tokens, large, latency)
    large += transfer.completion_tokens
    return Replay(
        "transfer", q.score_transfer, reasoning.completion_tokens, large, latency + transfer.latency_s
    )


def plan_table(
    paths: Sequence[QuestionPaths], rule: Rule, *, max_accuracy_loss: float = 1.0, **matcher: float
) -> dict[str, dict[str, Any]]:
    """Per answer kind, every plan replayed under ``rule``, and the plan the table names: the fastest
    (by replayed latency) within ``max_accuracy_loss`` points of Full RT's accuracy on that kind."""
    table: dict[str, dict[str, Any]] = {}
    for kind in sorted({q.kind for q in paths}):
        questions = [q for q in paths if q.kind == kind]
        plans = {
            plan: summarize(plan, [replay_plan(q, rule, plan, **matcher) for q in questions])
            for plan in PLANS
        }
        floor = plans["transfer"]["accuracy"] - max_accuracy_loss
        fitting = [plan for plan in PLANS if plans[plan]["accuracy"] >= floor]
        chosen = min(fitting, key=lambda plan: plans[plan]["latency_s"])
        table[kind] = {"questions": len(questions), "plan": chosen, "plans": plans}
    return table
