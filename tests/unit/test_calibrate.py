"""mai-eval calibrate's replay of the cascade, its front and its choice."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.calibrate import (
    QuestionPaths,
    Rule,
    StageOutcome,
    baselines,
    bootstrap_interval,
    cascade_yaml,
    choose,
    evaluate_rules,
    pareto_front,
    plan_table,
    precision_note,
    question_paths,
    replay,
    replay_plan,
    threshold_grid,
)
from evaluation.records import EvalRecord
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import Question
from serve_app.core.options import CascadeOptions
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind

from .fakes import ScriptedVLM

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER


def outcome(answer, confidence=None, tokens=1, latency=0.1):
    return StageOutcome(answer, confidence, tokens, latency)


def paths(small, large, reasoned, transfer, scores=(0.0, 1.0, 0.0), kind="yes_no"):
    return QuestionPaths("q", kind, (), small, large, reasoned, transfer, *scores)


ANSWERS = st.sampled_from(["yes", "no"])
CONFIDENCES = st.none() | st.floats(min_value=0.01, max_value=1.0)


@settings(max_examples=60, deadline=None)
@given(
    ANSWERS,
    ANSWERS,
    ANSWERS,
    CONFIDENCES,
    CONFIDENCES,
    CONFIDENCES,
    st.sampled_from([0.0, 0.5, 0.8, 0.95]),
    st.sampled_from([None, 0.6, 0.9]),
)
def test_the_replay_takes_the_route_the_cascade_takes(
    small, large, reasoned, c_small, c_large, c_reasoned, minimum, override
):
    """The same answers and confidences, through the real cascade and through the replay."""
    small_vlm = ScriptedVLM({S: f"[[{small}]]", R: f"Looked.\n[[{reasoned}]]"})
    large_vlm = ScriptedVLM({S: f"[[{large}]]", T: "[[yes]]"})
    small_vlm.confidences = {k: c for k, c in ((S, c_small), (R, c_reasoned)) if c is not None}
    large_vlm.confidences = {S: c_large} if c_large is not None else {}
    import asyncio

    result = asyncio.run(
        Cascade(small_vlm, large_vlm).run(
            Question("Is it red?"), CascadeOptions(min_confidence=minimum, confident_large=override)
        )
    )
    q = paths(
        outcome(small, c_small), outcome(large, c_large), outcome(reasoned, c_reasoned), outcome("yes", 0.9)
    )
    assert replay(q, Rule(minimum, override)).route == result.route


@settings(max_examples=80, deadline=None)
@given(
    ANSWERS,
    ANSWERS,
    ANSWERS,
    CONFIDENCES,
    CONFIDENCES,
    st.sampled_from([0.0, 0.8]),
    st.sampled_from(list(Plan)),
)
def test_every_plan_replays_the_route_and_answer_the_cascade_gives(
    small, large, reasoned, c_large, c_reasoned, minimum, plan
):
    small_vlm = ScriptedVLM({S: f"[[{small}]]", R: f"Looked.\n[[{reasoned}]]"})
    large_vlm = ScriptedVLM({S: f"[[{large}]]", T: "[[no]]"})
    small_vlm.confidences = {S: 0.9} | ({R: c_reasoned} if c_reasoned is not None else {})
    large_vlm.confidences = {S: c_large} if c_large is not None else {}
    import asyncio

    result = asyncio.run(
        Cascade(small_vlm, large_vlm).run(
            Question("Is it red?", kind="yes_no"), CascadeOptions(min_confidence=minimum, plan=plan)
        )
    )
    # scores: the large short answer, the transfer's: which one the route gave
    q = paths(outcome(small, 0.9), outcome(large, c_large), outcome(reasoned, c_reasoned), outcome("no", 0.9))
    replayed = replay_plan(q, Rule(minimum), plan.value)
    assert replayed.route == result.route
    assert replayed.score == (0.0 if result.trace.stages[-1].name == "transfer_large" else 1.0)


def test_plan_latencies_follow_each_plans_order_and_the_table_picks_the_fastest_within_the_goal():
    # stage 1 disagrees, the reasoning agrees with the large model: 0.3 + 1.0 sequential
    q = paths(
        outcome("yes", 0.9, 2, 0.1), outcome("no", 0.9, 3, 0.3), outcome("no", 0.9, 40, 1.0), outcome("no")
    )
    latency = {plan.value: replay_plan(q, Rule(), plan.value).latency_s for plan in Plan}
    assert latency == pytest.approx({"sequential": 1.3, "eager": 1.0, "reason-first": 1.0, "transfer": 1.1})
    agreeing = paths(
        outcome("no", 0.9, 2, 0.1), outcome("no", 0.9, 3, 0.3), outcome("no", 0.9, 40, 1.0), outcome("no")
    )
    eager = replay_plan(agreeing, Rule(), "eager")
    assert (eager.route, eager.latency_s, eager.small_tokens) == ("agree_short", 0.3, 2 + 12)  # 0.3 of 40
    table = plan_table([q, agreeing], Rule(), max_accuracy_loss=1.0)
    assert table["yes_no"]["plan"] == "eager"  # as accurate as Full RT, and the fastest
    assert set(table["yes_no"]["plans"]) == {plan.value for plan in Plan}


def test_costs_add_up_along_the_route():
    q = paths(
        outcome("yes", 0.9, 2, 0.1),
        outcome("no", 0.5, 3, 0.3),
        outcome("yes", 0.9, 40, 1.0),
        outcome("yes", 0.9, 4, 0.2),
        scores=(1.0, 0.0, 1.0),
    )
    result = replay(q, Rule())
    assert (result.route, result.score, result.small_tokens, result.large_tokens) == ("transfer", 1.0, 42, 7)
    assert math.isclose(result.latency_s, 0.3 + 1.0 + 0.2)
    settled = replay(q, Rule(confident_large=0.5))
    assert (settled.route, settled.score, settled.small_tokens, settled.large_tokens) == (
        "confident_large",
        0.0,
        2,
        3,
    )
    assert math.isclose(settled.latency_s, 0.3)


def test_a_wrong_unsure_agreement_is_caught_only_by_a_threshold():
    q = paths(
        outcome("no", 0.6),
        outcome("no", 0.7),
        outcome("yes", 0.95),
        outcome("yes", 0.9),
        scores=(0.0, 0.0, 1.0),
    )
    assert replay(q, Rule()).route == "agree_short" and replay(q, Rule()).score == 0.0
    assert replay(q, Rule(0.8)).route == "transfer" and replay(q, Rule(0.8)).score == 1.0


def many(n=40):
    """Half the questions: a confident right agreement; half: an unsure wrong one that transfer fixes."""
    right = paths(
        outcome("yes", 0.95),
        outcome("yes", 0.97),
        outcome("yes", 0.9, 30, 1.0),
        outcome("yes", 0.9, 3, 0.2),
        scores=(1.0, 1.0, 1.0),
    )
    wrong = paths(
        outcome("no", 0.55),
        outcome("no", 0.6),
        outcome("yes", 0.9, 30, 1.0),
        outcome("yes", 0.9, 3, 0.2),
        scores=(0.0, 0.0, 1.0),
    )
    return [right, wrong] * (n // 2)


def test_the_front_and_the_choice():
    data = many()
    rules = evaluate_rules(data, threshold_grid(data))
    full_rt = baselines(data)["mai-transfer"]
    assert full_rt["accuracy"] == 100 and evaluate_rules(data, [Rule()])[0]["accuracy"] == 50
    front = pareto_front(rules)
    assert [r["latency_s"] for r in front] == sorted(r["latency_s"] for r in front)
    assert all(a["accuracy"] < b["accuracy"] for a, b in zip(front, front[1:], strict=False))
    chosen = choose(rules, full_rt, max_accuracy_loss=1.0)
    assert chosen["accuracy"] == 100 and 0.55 < chosen["rule"]["min_confidence"] <= 0.95
    assert chosen["latency_s"] < full_rt["latency_s"] and chosen["escalated"] == 0.5
    assert choose(rules, full_rt, max_escalation=0.0)["accuracy"] == 50
    assert choose(rules, full_rt | {"accuracy": 200}, max_accuracy_loss=1.0) is None


def test_intervals_and_the_precision_note():
    low, high = bootstrap_interval([1.0, 0.0] * 100)
    assert 40 < low < 50 < high < 60
    assert precision_note(100, 85.0, 1.0).startswith("100 questions give an accuracy a 95 % interval of ±7.0")
    assert "About 4898 questions" in precision_note(100, 85.0, 1.0)
    assert precision_note(100_000, 85.0, 1.0) is None and precision_note(100, 85.0, None) is None


def test_question_paths_come_from_the_three_runs_and_leave_out_failures():
    record = EvalRecord.model_validate(
        {"id": "1", "image": "data:,", "question": "Is it red?", "answer": "yes", "metric": "yes_no"}
    )
    stage = {"status": "ok", "completion_tokens": 2, "latency_s": 0.1, "answer": "yes", "confidence": 0.9}
    rows = {
        "mai-small": {
            "1": {"status": 200, "score": 1.0, "kind": "yes_no", "stages": [stage | {"name": "short_small"}]}
        },
        "mai-large": {
            "1": {"status": 200, "score": 1.0, "kind": "yes_no", "stages": [stage | {"name": "short_large"}]}
        },
        "mai-transfer": {
            "1": {
                "status": 200,
                "score": 0.0,
                "kind": "yes_no",
                "stages": [
                    stage | {"name": "reason_small"},
                    stage | {"name": "transfer_large", "answer": "no"},
                ],
            }
        },
    }
    [q], missing = question_paths([record], rows)
    assert missing == [] and q.transfer.answer == "no" and q.score_transfer == 0.0 and q.kind == "yes_no"
    rows["mai-large"]["1"]["status"] = 503
    assert question_paths([record], rows) == ([], ["1"])


def test_the_yaml_is_the_cascade_section():
    import yaml

    text = cascade_yaml(Rule(0.8, None), "fitted on val.jsonl")
    assert yaml.safe_load(text) == {"cascade": {"min_confidence": 0.8}} and text.startswith("# fitted")
    assert yaml.safe_load(cascade_yaml(Rule(0.8, 0.99), "x"))["cascade"]["confident_large"] == 0.99
    from serve_app.config import load_app_config

    section = yaml.safe_load(cascade_yaml(Rule(0.8), "x", plans={"yes_no": "reason-first", "text": "eager"}))
    models = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    adaptive = load_app_config(models | section).cascade.adaptive  # a section the server accepts
    assert adaptive.mode == "table" and adaptive.table == {"yes_no": Plan.REASON_FIRST, "text": Plan.EAGER}


@pytest.mark.parametrize("value", [-1, 2])
def test_the_cli_refuses_impossible_goals(value, tmp_path):
    from evaluation.cli import main

    with pytest.raises(SystemExit):
        main(["calibrate", str(tmp_path / "d.jsonl"), "--out", str(tmp_path), "--max-escalation", str(value)])
