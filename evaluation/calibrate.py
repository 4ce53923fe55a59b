"""Fit the cascade's verification thresholds and plans on a labelled set: ``mai-eval calibrate``.

One pass records what every stage of the full path answers, with its confidence, tokens and time:
``mai-small`` and ``mai-large`` (the two Simple answers of stage 1) and ``mai-transfer`` (the small
model's reasoning, its answer read inline, and the large model's answer with it). Decoding is greedy,
so a stage asked again answers the same: every rule and plan is then *replayed* by running the real
cascade over the recorded stages (``replay.py``, on a virtual clock), and whatever answer it serves
is scored against gold. Nothing of the cascade's logic is restated here.

For a grid of ``min_confidence`` x ``confident_large`` it computes accuracy (95 % bootstrap
intervals), escalation, route shares, completion tokens per model, latency and engine seconds, draws
the accuracy/cost front beside the baselines, and picks the rule for a stated goal. Under that rule a
plan table names, per answer kind, the cheapest plan under the objective within the goal's accuracy of
Full RT on that kind, the single-model plans (``small``, ``large``, ``small-reason``) included.

Pure functions here; ``passes.calibrate_pass`` (``mai-eval calibrate``) runs the pass and writes the files.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evaluation.rules import PAPER_RULE
from serve_app.core.contracts import CascadeOptions, Policy, Question
from serve_app.core.plan_choice import CalibratedEstimates
from serve_app.core.plan_stats import Observation, estimates_of, observe
from serve_app.core.plans import Objective, Plan
from serve_app.core.question_parsing import QuestionFormatError, read_question
from serve_app.core.roles import LARGE, SMALL
from serve_app.core.routes import STAGE1_EXITS, Route
from serve_app.core.trace import CascadeResult

from .calibration_report import cascade_yaml
from .records import EvalRecord
from .replay import RecordedStage, engine_seconds, recorded_stages, replay
from .rules import Rule
from .run import RunSpec
from .scoring import bootstrap_interval, score

CALIBRATION_RUNS = ("mai-small", "mai-large", "mai-transfer")
# Each asks for the served answer's logprobs, so every stage's answer comes with its confidence: the
# replay compares the reasoning's, which a server asks the engine for only under min_confidence.
CALIBRATION_SPECS = tuple(RunSpec(name, name, logprobs=True) for name in CALIBRATION_RUNS)
# The stages a question needs recorded, and the run each comes from.
RECORDED = {
    "short_small": "mai-small",
    "short_large": "mai-large",
    "reason_small": "mai-transfer",
    "transfer_large": "mai-transfer",
}
Z_95 = 1.959964
COST_KEYS: dict[str, str] = {
    "latency": "latency_s",
    "engine_time": "engine_s",
    "large_tokens": "large_tokens",
}
# The policies the replay compares every rule with, as the server names them, and how each runs.
BASELINES: dict[str, dict[str, Any]] = {
    "mai-small": {"policy": Policy.SMALL},
    "mai-large": {"policy": Policy.LARGE},
    "mai-small-reason (inline)": {"policy": Policy.SMALL_REASON, "stage2_answer": "inline"},
    "mai-transfer": {"policy": Policy.TRANSFER},
}


@dataclass(frozen=True)
class RecordedQuestion:
    """One labelled question as the server reads it, and what its stages answered in the pass."""

    record: EvalRecord
    question: Question
    stages: Mapping[str, RecordedStage]

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def kind(self) -> str:
        return self.question.kind


@dataclass(frozen=True)
class Replay:
    """One question under one rule: the route the cascade took, the score of what it served, what
    it cost."""

    route: str
    score: float
    small_tokens: int  # completion tokens
    large_tokens: int  # completion tokens
    latency_s: float
    engine_s: float
    large_total_tokens: int = 0  # prompt and completion: the large model's share of the work
    observation: Observation | None = None  # what the server's plan controller would learn of it


def recorded_questions(
    records: Sequence[EvalRecord], rows: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> tuple[list[RecordedQuestion], list[str]]:
    """Every record answered under all three calibration runs (``rows``: run name -> record id ->
    prediction row), with its stages; also the ids left out (a run failed or a stage is missing)."""
    questions, missing = [], []
    for record in records:
        stages: dict[str, RecordedStage] = {}
        for name, run in RECORDED.items():
            row = rows.get(run, {}).get(record.id)
            if row is not None and row.get("status") == 200:
                stage = recorded_stages(row.get("stages", [])).get(name)
                if stage is not None:
                    stages[name] = stage
        try:
            question = read_question(record.question, record.choices, record.answer_type)
        except QuestionFormatError:
            question = None
        if question is None or len(stages) < len(RECORDED):
            missing.append(record.id)
            continue
        questions.append(RecordedQuestion(record, question, stages))
    return questions, missing


def run_replay(questions: Sequence[RecordedQuestion], options: CascadeOptions) -> list[Replay]:
    """Every question through the real cascade under ``options``, scored against its gold answer."""
    results = replay({q.id: q.question for q in questions}, options, {q.id: q.stages for q in questions})
    return [_replayed(q, results[q.id]) for q in questions]


def _replayed(q: RecordedQuestion, result: CascadeResult | BaseException) -> Replay:
    if isinstance(result, BaseException):
        raise RuntimeError(f"the replay of question {q.id!r} failed: {result!r}") from result
    tokens = result.trace.tokens()
    large = tokens[LARGE]
    return Replay(
        result.route,
        score(result.answer, q.record.model_dump()),
        tokens[SMALL]["completion_tokens"],
        large["completion_tokens"],
        result.trace.latency_s,
        engine_seconds(result),
        large["prompt_tokens"] + large["completion_tokens"],
        observe(result.trace, 0.0),
    )


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
        "escalated": sum(r.route not in (*STAGE1_EXITS, Route.SINGLE) for r in replays) / n,
        "small_completion_tokens": sum(r.small_tokens for r in replays) / n,
        "large_completion_tokens": sum(r.large_tokens for r in replays) / n,
        "latency_s": sum(r.latency_s for r in replays) / n,
        "engine_s": sum(r.engine_s for r in replays) / n,
        "large_tokens": sum(r.large_total_tokens for r in replays) / n,
    }


def baselines(questions: Sequence[RecordedQuestion]) -> dict[str, dict[str, Any]]:
    """The single-model policies and Full RT, replayed from the same recorded stages."""
    return {
        name: summarize(name, run_replay(questions, CascadeOptions(**options)))
        for name, options in BASELINES.items()
    }


def threshold_grid(questions: Sequence[RecordedQuestion], steps: int = 20) -> list[Rule]:
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

    small = [q.stages["short_small"].confidence for q in questions]
    large = [q.stages["short_large"].confidence for q in questions]
    stage_one = [c for c in (*small, *large) if c is not None]
    minimums = [0.0, *quantiles(stage_one, 0.0)]
    overrides: list[float | None] = [None, *quantiles([c for c in large if c is not None], 0.5)]
    return [Rule(m, c) for m in minimums for c in overrides]


def evaluate_rules(
    questions: Sequence[RecordedQuestion], rules: Iterable[Rule], *, intervals: bool = True, progress=None
) -> list[dict[str, Any]]:
    results = []
    for rule in rules:
        replays = run_replay(questions, rule.options())
        results.append(summarize(rule.label, replays, interval=intervals, rule=asdict(rule)))
        if progress is not None:
            progress(1)
    return results


def with_interval(questions: Sequence[RecordedQuestion], result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (of ``evaluate_rules(..., intervals=False)``) with its accuracy interval."""
    [full] = evaluate_rules(questions, [Rule(**result["rule"])])
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
    objective: Objective = "latency",
) -> dict[str, Any] | None:
    """The rule for the goal: the cheapest under ``objective`` within ``max_accuracy_loss`` points of
    Full RT, or the most accurate that escalates at most ``max_escalation`` of the questions. None
    when no rule meets it."""
    cost = COST_KEYS[objective]
    if max_escalation is not None:
        fitting = [r for r in results if r["escalated"] <= max_escalation]
        return max(fitting, key=lambda r: (r["accuracy"], -r[cost]), default=None)
    loss = 1.0 if max_accuracy_loss is None else max_accuracy_loss
    fitting = [r for r in results if r["accuracy"] >= full_rt["accuracy"] - loss]
    return min(fitting, key=lambda r: (r[cost], -r["accuracy"]), default=None)


def paired_difference_interval(
    questions: Sequence[RecordedQuestion], options: CascadeOptions, *, samples: int = 1000, seed: int = 0
) -> list[float]:
    """95 % bootstrap interval (points) of the accuracy under ``options`` minus Full RT's, question by
    question."""
    served = run_replay(questions, options)
    full_rt = run_replay(questions, CascadeOptions(policy=Policy.TRANSFER))
    return bootstrap_interval(
        [a.score - b.score for a, b in zip(served, full_rt, strict=True)], samples=samples, seed=seed
    )


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


def plan_table(
    questions: Sequence[RecordedQuestion],
    rule: Rule,
    *,
    max_accuracy_loss: float = 1.0,
    objective: Objective = "latency",
) -> dict[str, dict[str, Any]]:
    """Per answer kind, every plan replayed under ``rule``, and the plan the table names: the cheapest
    under ``objective`` within ``max_accuracy_loss`` points of Full RT's accuracy on that kind."""
    cost = COST_KEYS[objective]
    table: dict[str, dict[str, Any]] = {}
    for kind in sorted({q.kind for q in questions}):
        of_kind = [q for q in questions if q.kind == kind]
        replays = {plan: run_replay(of_kind, rule.options(plan=plan)) for plan in Plan}
        plans = {plan.value: summarize(plan.value, replayed) for plan, replayed in replays.items()}
        floor = plans[Plan.FULL_TRANSFER.value]["accuracy"] - max_accuracy_loss
        fitting = [plan for plan in plans if plans[plan]["accuracy"] >= floor]
        chosen = min(fitting, key=lambda plan: plans[plan][cost])
        observations = [r.observation for replayed in replays.values() for r in replayed if r.observation]
        estimates = CalibratedEstimates.of(estimates_of(observations)).model_dump()
        table[kind] = {
            "questions": len(of_kind),
            "plan": chosen,
            "objective": objective,
            "plans": plans,
            "estimates": estimates,
        }
    return table


def goal_text(max_accuracy_loss: float | None, max_escalation: float | None, objective: Objective) -> str:
    if max_escalation is not None:
        return f"at most {100 * max_escalation:g} % of questions escalated, most accurate"
    loss = 1.0 if max_accuracy_loss is None else max_accuracy_loss
    return f"within {loss:g} point(s) of Full RT's accuracy, cheapest by {objective}"


def calibration_summary(
    dataset: str,
    questions: Sequence[RecordedQuestion],
    missing: Sequence[str],
    *,
    max_accuracy_loss: float | None = None,
    max_escalation: float | None = None,
    objective: Objective = "latency",
    progress=None,
) -> tuple[dict[str, Any], list[dict[str, Any]], str | None]:
    """Everything ``mai-eval calibrate`` reports: the summary (baselines, the paper's rule, the front,
    the chosen rule with its paired difference from Full RT, the plan table), every rule's figures,
    and the ``cascade:`` YAML of the choice (None when no rule meets the goal)."""
    base = baselines(questions)
    grid = threshold_grid(questions)
    rules = evaluate_rules(questions, grid, intervals=False, progress=progress)
    goal = goal_text(max_accuracy_loss, max_escalation, objective)
    chosen = choose(
        rules,
        base["mai-transfer"],
        max_accuracy_loss=max_accuracy_loss,
        max_escalation=max_escalation,
        objective=objective,
    )
    summary: dict[str, Any] = {
        "dataset": dataset,
        "questions": len(questions),
        "left_out": list(missing),
        "runs": list(CALIBRATION_RUNS),
        "replay": "the real cascade (serve_app.core.cascade) over the recorded stages, on a virtual clock",
        "goal": goal,
        "objective": objective,
        "baselines": base,
        "paper_rule": evaluate_rules(questions, [Rule(**PAPER_RULE)])[0] | {"name": "mai (paper rule)"},
        "front": [with_interval(questions, result) for result in pareto_front(rules)],
        "precision_note": precision_note(
            len(questions),
            base["mai-transfer"]["accuracy"],
            None if max_escalation is not None else (max_accuracy_loss or 1.0),
        ),
        "chosen": None,
    }
    if chosen is None:
        return summary, rules, None
    rule = Rule(**chosen["rule"])
    summary["chosen"] = with_interval(questions, chosen) | {
        "difference_vs_full_rt_95ci": paired_difference_interval(questions, rule.options())
    }
    loss = 1.0 if max_accuracy_loss is None else max_accuracy_loss
    summary["plans"] = plan_table(questions, rule, max_accuracy_loss=loss, objective=objective)
    yaml_text = cascade_yaml(
        rule,
        f"mai-eval calibrate on {dataset} ({len(questions)} questions)\n{goal}",
        plans={kind: entry["plan"] for kind, entry in summary["plans"].items()},
        calibrated={kind: entry["estimates"] for kind, entry in summary["plans"].items()},
    )
    return summary, rules, yaml_text
