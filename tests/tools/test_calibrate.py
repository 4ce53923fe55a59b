"""mai-eval calibrate: the real cascade replayed over recorded stages, its front and its choice."""

import asyncio
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.calibrate import (
    RecordedQuestion,
    Rule,
    baselines,
    bootstrap_interval,
    choose,
    evaluate_rules,
    pareto_front,
    plan_table,
    precision_note,
    recorded_questions,
    run_replay,
    threshold_grid,
)
from evaluation.calibration_report import cascade_yaml
from evaluation.records import EvalRecord
from evaluation.replay import RecordedStage, ReplayGapError, replay
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.core.question_parsing import read_question

from ..unit.fakes import ScriptedVLM

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER
NAMES = ("short_small", "short_large", "reason_small", "transfer_large")


def stage(answer, confidence=None, tokens=1, latency=0.1):
    return RecordedStage(answer, confidence, 10, tokens, latency)


def recorded(small, large, reasoned, transfer, gold="yes", qid="q", question="Is it red?"):
    record = EvalRecord.model_validate(
        {"id": qid, "image": "data:,", "question": question, "answer": gold, "metric": "yes_no"}
    )
    stages = dict(zip(NAMES, (small, large, reasoned, transfer), strict=True))
    return RecordedQuestion(record, read_question(question), stages)


def one(q, options):
    [result] = run_replay([q], options)
    return result


ANSWERS = st.sampled_from(["yes", "no", "maybe", "triangle"])
CONFIDENCES = st.none() | st.floats(min_value=0.01, max_value=1.0)


@settings(max_examples=80, deadline=None)
@given(
    st.tuples(ANSWERS, ANSWERS, ANSWERS, ANSWERS),
    st.tuples(CONFIDENCES, CONFIDENCES, CONFIDENCES),
    st.sampled_from([0.0, 0.5, 0.8, 0.95]),
    st.sampled_from([None, 0.6, 0.9]),
    st.sampled_from(list(Plan)),
)
def test_the_replay_serves_what_the_cascade_serves_from_live_clients(
    answers, confidences, minimum, override, plan
):
    """The same stage answers and confidences, once from scripted live clients and once from the
    recording: the same route and answer, whatever the rule and the plan. A recording holds no
    repair, so the live cascade is the one without repairs that the replay runs (``replay``)."""
    small, large, reasoned, transfer = answers
    c_small, c_large, c_reasoned = confidences
    small_vlm = ScriptedVLM({S: f"[[{small}]]", R: f"Looked.\n[[{reasoned}]]"})
    large_vlm = ScriptedVLM({S: f"[[{large}]]", T: f"[[{transfer}]]"})
    small_vlm.confidences = {k: c for k, c in ((S, c_small), (R, c_reasoned)) if c is not None}
    large_vlm.confidences = {k: c for k, c in ((S, c_large), (T, 0.9)) if c is not None}
    options = CascadeOptions(min_confidence=minimum, confident_large=override, plan=plan)
    live = asyncio.run(Cascade(small_vlm, large_vlm, repairs=False).run(read_question("Is it red?"), options))
    q = recorded(
        stage(small, c_small), stage(large, c_large), stage(reasoned, c_reasoned), stage(transfer, 0.9)
    )
    replayed = replay({"q": q.question}, options, {"q": q.stages})["q"]
    assert (replayed.route, replayed.answer) == (live.route, live.answer)
    assert [s.name for s in replayed.trace.stages] == [s.name for s in live.trace.stages]


def test_plan_latencies_follow_each_plans_order_on_the_virtual_clock():
    # stage 1 disagrees, the reasoning agrees with the large model: 0.3 + 1.0 sequential
    q = recorded(stage("yes", 0.9, 2, 0.1), stage("no", 0.9, 3, 0.3), stage("no", 0.9, 40, 1.0), stage("no"))
    latency = {plan.value: one(q, CascadeOptions(plan=plan)).latency_s for plan in Plan}
    assert latency == pytest.approx(
        {
            "sequential": 1.3,
            "eager": 1.0,
            "reason-first": 1.0,
            "full-transfer": 1.1,
            "small-only": 0.1,
            "large-only": 0.3,
            "small-reason-only": 1.0,
        }
    )
    agreeing = recorded(
        stage("no", 0.9, 2, 0.1), stage("no", 0.9, 3, 0.3), stage("no", 0.9, 40, 1.0), stage("no")
    )
    eager = one(agreeing, CascadeOptions(plan=Plan.EAGER))
    # the reasoning ran 0.3 s of its 1.0 before stage 1 settled and it was cancelled
    assert (eager.route, eager.latency_s) == ("agree_short", pytest.approx(0.3))
    assert eager.engine_s == pytest.approx(0.1 + 0.3 + 0.3)


def test_the_table_names_the_cheapest_plan_within_the_goal_single_model_plans_included():
    right_small = recorded(
        stage("yes", 0.9, 2, 0.1), stage("no", 0.9, 3, 0.3), stage("yes", 0.9, 40, 1.0), stage("no")
    )
    table = plan_table([right_small] * 4, Rule(), max_accuracy_loss=1.0, objective="latency")
    assert set(table["yes_no"]["plans"]) == {plan.value for plan in Plan}
    assert table["yes_no"]["plan"] == "small-only"  # as accurate as Full RT (more), and the cheapest
    assert table["yes_no"]["plans"]["full-transfer"]["accuracy"] == 0
    wrong_small = recorded(
        stage("no", 0.9, 2, 0.1), stage("yes", 0.9, 3, 0.3), stage("yes", 0.9, 40, 1.0), stage("yes")
    )
    assert plan_table([wrong_small] * 4, Rule(), objective="latency")["yes_no"]["plan"] == "large-only"


def test_the_table_records_what_the_server_would_have_learnt_of_each_kind():
    """The estimates a learn-mode server starts from are those its plan controller would read from
    the replayed traces: stage 1 never settles here (the short answers disagree), the reasoning always
    does (it agrees with the large short answer), and the stage times are the recorded ones."""
    q = recorded(stage("yes", 0.9, 2, 0.1), stage("no", 0.9, 3, 0.3), stage("no", 0.9, 40, 1.0), stage("no"))
    estimates = plan_table([q] * 4, Rule(), objective="latency")["yes_no"]["estimates"]
    assert (estimates["p1"], estimates["p2"]) == (0.0, 1.0)
    assert estimates["large_short_s"] == pytest.approx(0.3) and estimates["reasoning_s"] == pytest.approx(1.0)
    assert estimates["stage1_s"] == pytest.approx(0.3)


def test_costs_add_up_along_the_route():
    q = recorded(
        stage("yes", 0.9, 2, 0.1),
        stage("no", 0.5, 3, 0.3),
        stage("yes", 0.7, 40, 1.0),
        stage("yes", 0.9, 4, 0.2),
    )
    result = one(q, Rule().options())
    assert (result.route, result.score, result.small_tokens, result.large_tokens) == ("transfer", 1.0, 42, 7)
    assert math.isclose(result.latency_s, 0.3 + 1.0 + 0.2) and math.isclose(
        result.engine_s, 0.1 + 0.3 + 1.0 + 0.2
    )
    settled = one(q, Rule(confident_large=0.4).options())  # 0.5 is confident enough, and 0.9 more so
    assert settled.route == "transfer"
    q = recorded(stage("yes", 0.3, 2, 0.1), stage("no", 0.5, 3, 0.3), stage("yes"), stage("yes"))
    settled = one(q, Rule(confident_large=0.4).options())
    assert (settled.route, settled.score, settled.small_tokens, settled.large_tokens) == (
        "confident_large",
        0.0,
        2,
        3,
    )
    assert math.isclose(settled.latency_s, 0.3)


def test_an_invalid_transfer_answer_is_replayed_as_the_fallback_the_cascade_serves():
    q = recorded(stage("no"), stage("not sure"), stage("yes"), stage("triangle"))
    result = one(q, Rule().options())
    assert (result.route, result.score) == ("fallback", 1.0)


def test_a_stage_the_pass_did_not_record_is_a_gap_never_a_failed_model():
    q = recorded(stage("no"), stage("yes"), stage("yes"), stage("yes"))
    results = replay({"q": q.question}, CascadeOptions(stage2_answer="two_stage"), {"q": q.stages})
    assert isinstance(results["q"], ReplayGapError)


def test_a_wrong_unsure_agreement_is_caught_only_by_a_threshold():
    q = recorded(stage("no", 0.6), stage("no", 0.7), stage("yes", 0.95), stage("yes", 0.9))
    assert (one(q, Rule().options()).route, one(q, Rule().options()).score) == ("agree_short", 0.0)
    assert (one(q, Rule(0.8).options()).route, one(q, Rule(0.8).options()).score) == ("transfer", 1.0)


def many(n=40):
    """Half the questions: a confident right agreement; half: an unsure wrong one that transfer fixes."""
    right = recorded(
        stage("yes", 0.95), stage("yes", 0.97), stage("yes", 0.9, 30, 1.0), stage("yes", 0.9, 3, 0.2)
    )
    wrong = recorded(
        stage("no", 0.55), stage("no", 0.6), stage("yes", 0.9, 30, 1.0), stage("yes", 0.9, 3, 0.2), qid="w"
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
    by_engine = choose(rules, full_rt, max_accuracy_loss=1.0, objective="engine_time")
    assert by_engine["engine_s"] == min(r["engine_s"] for r in rules if r["accuracy"] >= 99)


def test_intervals_and_the_precision_note():
    low, high = bootstrap_interval([1.0, 0.0] * 100)
    assert 40 < low < 50 < high < 60
    assert precision_note(100, 85.0, 1.0).startswith("100 questions give an accuracy a 95 % interval of ±7.0")
    assert "About 4898 questions" in precision_note(100, 85.0, 1.0)
    assert precision_note(100_000, 85.0, 1.0) is None and precision_note(100, 85.0, None) is None


def test_recorded_questions_come_from_the_three_runs_and_leave_out_failures():
    record = EvalRecord.model_validate(
        {"id": "1", "image": "data:,", "question": "Is it red?", "answer": "yes", "metric": "yes_no"}
    )
    done = {"status": "ok", "completion_tokens": 2, "latency_s": 0.1, "answer": "yes", "confidence": 0.9}
    rows = {
        "mai-small": {"1": {"status": 200, "stages": [done | {"name": "short_small"}]}},
        "mai-large": {"1": {"status": 200, "stages": [done | {"name": "short_large"}]}},
        "mai-transfer": {
            "1": {
                "status": 200,
                "stages": [
                    done | {"name": "reason_small"},
                    done | {"name": "transfer_large", "answer": "no"},
                ],
            }
        },
    }
    [q], missing = recorded_questions([record], rows)
    assert missing == [] and q.stages["transfer_large"].answer == "no" and q.kind == "yes_no"
    rows["mai-large"]["1"]["status"] = 503
    assert recorded_questions([record], rows) == ([], ["1"])


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
    calibrated = {"yes_no": {"p1": 0.04, "p2": 0.5, "q": None, "reasoning_s": 0.61234567}}
    section = yaml.safe_load(
        cascade_yaml(Rule(0.8), "x", plans={"yes_no": "small-reason-only"}, calibrated=calibrated)
    )
    adaptive = load_app_config(models | section).cascade.adaptive
    assert adaptive.calibrated["yes_no"].p1 == 0.04 and adaptive.calibrated["yes_no"].q is None
    assert adaptive.calibrated["yes_no"].reasoning_s == pytest.approx(0.612346)


@pytest.mark.parametrize("value", [-1, 2])
def test_the_cli_refuses_impossible_goals(value, tmp_path):
    from evaluation.cli import main

    with pytest.raises(SystemExit):
        main(["calibrate", str(tmp_path / "d.jsonl"), "--out", str(tmp_path), "--max-escalation", str(value)])


def test_a_replayed_calibration_writes_calibration_json_naming_the_command_and_commit(tmp_path, capsys):
    """``mai-eval calibrate --replay-only`` over a recorded pass (no server): calibration.json carries
    the command's provenance under ``meta``, after the summary and the rules."""
    import json

    from evaluation.cli import main
    from evaluation.predictions import PredictionStore
    from evaluation.records import load_records
    from harness.provenance import git_commit

    data = tmp_path / "d.jsonl"
    lines = [
        {"id": str(i), "image": "data:,", "question": "Is it red?", "answer": "yes", "metric": "yes_no"}
        for i in range(6)
    ]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "calibration"
    store = PredictionStore(out, data, load_records(data))
    store.open(fresh=True)
    done = {"status": "ok", "completion_tokens": 2, "latency_s": 0.1, "answer": "yes", "confidence": 0.9}
    stages = {
        "mai-small": ["short_small"],
        "mai-large": ["short_large"],
        "mai-transfer": ["reason_small", "transfer_large"],
    }
    for run, names in stages.items():
        for line in lines:
            store.append(
                run, {"id": line["id"], "status": 200, "stages": [done | {"name": n} for n in names]}
            )
    argv = ["calibrate", str(data), "--out", str(out), "--replay-only", "--no-progress"]
    assert main(argv) == 0
    written = json.loads((out / "calibration.json").read_text())
    assert list(written)[-2:] == ["rules", "meta"] and written["questions"] == 6
    assert written["meta"]["command"] == "mai-eval " + " ".join(argv)
    assert written["meta"]["commit"] == git_commit()["commit"]
    assert isinstance(written["meta"]["uncommitted_changes"], bool) and written["meta"]["duration_s"] >= 0
    assert "# Calibration:" in capsys.readouterr().out
