import asyncio
import math

import pytest

from evaluation.replay import recorded_stages, replay
from harness.virtual_clock import VirtualClockLoop
from serve_app.core.cascade import Cascade, ModelUnavailableError
from serve_app.core.contracts import (
    CascadeOptions,
    Completion,
    ConstraintRejectedError,
    Decoding,
    EngineCall,
    EngineUnavailableError,
    Policy,
    Question,
    StageTimeouts,
    TokenBudgets,
)
from serve_app.core.plans import Plan
from serve_app.core.question_parsing import read_question
from serve_app.core.trace import RepairRecord

from .fakes import S2, E, R, S, ScriptedVLM, T

IMAGE = "data:image/png;base64,iVBORw0KGgo="
YES_NO = read_question("Is there a fan in the picture?", images=(IMAGE,))
CHOICE = read_question("What is the size of real GDP?", images=(IMAGE,), choices=("500", "450", "400", "600"))


def models(small: dict, large: dict, small_delays=None, large_delays=None):
    return ScriptedVLM(small, small_delays or {}), ScriptedVLM(large, large_delays or {})


async def run(small, large, question=YES_NO, **options):
    return await Cascade(small, large).run(question, CascadeOptions(**options))


# ---------------------------------------------------------------- the four routes of the cascade


async def test_agree_short_returns_after_stage_one():
    small, large = models({S: "[[Yes]]"}, {S: "[[yes.]]"})
    result = await run(small, large)
    assert result.route == "agree_short"
    assert result.answer == "yes"  # the large model's answer, not the small "Yes"
    assert small.kinds() == [S] and large.kinds() == [S]
    assert [s.name for s in result.trace.stages] == ["short_small", "short_large"]
    assert result.trace.answer_parsed


async def test_agree_reasoned_when_small_reasoning_matches_large_short():
    small, large = models({S: "[[No]]", R: "Let me look. The fan is there.\n[[Yes]]"}, {S: "[[Yes]]"})
    result = await run(small, large)
    assert result.route == "agree_reasoned"
    assert result.answer == "Yes"
    assert small.kinds() == [S, R] and large.kinds() == [S]


async def test_transfer_gives_the_large_model_the_small_reasoning():
    reasoning = "The curves AD and SRAS meet at 400.\n[[C]]"
    small, large = models({S: "[[A]]", R: reasoning}, {S: "[[B]]", T: "[[C]]"})
    result = await run(small, large, question=CHOICE)
    assert result.route == "transfer"
    assert result.answer == "C"
    assert large.kinds() == [S, T]
    transfer_prompt = large.instruction_of(1)
    assert transfer_prompt.startswith("The following is a reference answer from a smaller model")
    assert reasoning.strip() in transfer_prompt
    assert [s.name for s in result.trace.stages] == [
        "short_small",
        "short_large",
        "reason_small",
        "transfer_large",
    ]


async def test_transfer_form_can_be_overridden():
    small, large = models({S: "[[A]]", R: "thinking [[C]]"}, {S: "[[B]]", T: "C"})
    result = await run(small, large, question=CHOICE, transfer_form="according")
    assert result.route == "transfer"
    assert large.kinds() == [S, T]  # the "according" form is a transfer, not a Stage 2 call
    assert large.instruction_of(1).startswith("According to previous thinking: thinking [[C]]")
    assert result.answer == "C"


async def test_paper_example_2_inline_transfers_but_two_stage_agrees():
    """B.6 Example 2: the small model reasons correctly but answers "[[0]]" to a yes/no question."""
    question = read_question("The image shows a python code. Is the output of the code '1'?", images=(IMAGE,))
    reasoning = "find returns 0, so the output is not '1' but 0.\n[[0]]"
    replies_small = {S: "[[Yes]]", R: reasoning, S2: "No"}

    small, large = models(replies_small, {S: "[[No]]", T: "No"})
    inline = await run(small, large, question=question, stage2_answer="inline")
    assert inline.route == "transfer"
    assert small.kinds() == [S, R]

    small, large = models(replies_small, {S: "[[No]]"})
    two_stage = await run(small, large, question=question, stage2_answer="two_stage")
    assert two_stage.route == "agree_reasoned"
    assert two_stage.answer == "No"
    assert small.kinds() == [S, R, S2]
    assert small.instruction_of(2).startswith("According to previous thinking: " + reasoning.strip())


async def test_paper_example_3_reference_transfer():
    """B.6 Example 3: 8B-S and 2B-R both say yes; 8B reading 2B-R under the reference prompt says No."""
    question = read_question(
        "I feel very cold. Is the tool in the picture suitable for use?", images=(IMAGE,)
    )
    reasoning = "1. Identify the Object: a table fan.\n5. Conclusion: it is suitable.\n\n[[yes]]"
    small, large = models({R: reasoning}, {T: "No"})
    result = await run(small, large, question=question, policy="transfer", transfer_form="reference")
    assert result.route == "transfer" and result.answer == "No"
    prompt = large.instruction_of(0)
    assert prompt.startswith(
        "The following is a reference answer from a smaller model (it might be wrong or incomplete): 1. "
        "Identify"
    )
    assert "Please answer the question yourself, using the reference only if it seems reasonable." in prompt
    # In the cascade the same replies stop early: 2B-R agrees with 8B-S (the paper's MV2B(R)/8B(S) column).
    small, large = models({S: "[[No]]", R: reasoning}, {S: "[[Yes]]"})
    assert (await run(small, large, question=question)).route == "agree_reasoned"


# ---------------------------------------------------------------- single-model policies


@pytest.mark.parametrize(("policy", "model"), [("small", "small"), ("large", "large")])
async def test_simple_policies_call_one_model_once(policy, model):
    small, large = models({S: "[[small says]]"}, {S: "[[large says]]"})
    result = await run(small, large, policy=policy)
    assert result.route == "single"
    assert result.answer == f"{model} says"
    assert len(small.calls) == (1 if model == "small" else 0)
    assert len(large.calls) == (1 if model == "large" else 0)


@pytest.mark.parametrize("policy", ["small-reason", "large-reason"])
async def test_reason_baselines_use_two_stage_by_default(policy):
    replies = {R: "thinking hard, the answer is 0\n[[0]]", S2: "No"}
    small, large = models(replies, replies)
    result = await run(small, large, policy=policy)
    used = small if policy == "small-reason" else large
    assert used.kinds() == [R, S2]
    assert result.route == "single" and result.answer == "No"


async def test_reason_baseline_inline_reads_the_reasoning():
    small, large = models({R: "thinking\n[[Yes]]"}, {})
    result = await run(small, large, policy="small-reason", stage2_answer="inline")
    assert small.kinds() == [R] and result.answer == "Yes"


async def test_full_transfer_policy_always_transfers():
    small, large = models({R: "it is red [[red]]"}, {T: "red"})
    result = await run(
        small, large, question=Question("What colour is it?", images=(IMAGE,), kind="text"), policy="transfer"
    )
    assert result.route == "transfer"
    assert small.kinds() == [R] and large.kinds() == [T]  # open text: the reference form (InfoVQA)
    assert result.answer == "red"


# ---------------------------------------------------------------- failures and degraded routes


async def test_small_failure_in_stage_one_returns_the_large_answer():
    small, large = models({S: EngineUnavailableError("engine died")}, {S: "[[Yes]]"})
    result = await run(small, large)
    assert result.route == "degraded_large_only" and result.answer == "Yes"
    assert result.trace.stages[0].status == "error" and "engine died" in result.trace.stages[0].error


async def test_small_timeout_in_stage_one_returns_the_large_answer_and_cancels_the_call():
    small, large = models({S: "[[No]]"}, {S: "[[Yes]]"}, small_delays={S: 5.0})
    result = await run(small, large, timeouts=StageTimeouts(short_s=0.05))
    assert result.route == "degraded_large_only"
    assert result.trace.stages[0].status == "timeout"
    assert small.cancelled() == [S]


async def test_small_failure_while_reasoning_returns_the_large_answer():
    small, large = models({S: "[[No]]", R: EngineUnavailableError("gone")}, {S: "[[Yes]]"})
    result = await run(small, large)
    assert result.route == "degraded_no_reasoning" and result.answer == "Yes"


async def test_reasoning_timeout_degrades_and_cancels_the_reasoning():
    small, large = models({S: "[[No]]", R: "late"}, {S: "[[Yes]]"}, small_delays={R: 5.0})
    result = await run(small, large, timeouts=StageTimeouts(reasoning_s=0.05))
    assert result.route == "degraded_no_reasoning"
    assert small.cancelled() == [R]


async def test_large_failure_is_a_typed_error_by_default():
    small, large = models({S: "[[No]]"}, {S: EngineUnavailableError("oom")})
    with pytest.raises(ModelUnavailableError) as error:
        await run(small, large)
    assert error.value.model == "large"
    assert error.value.trace.stages[1].status == "error"


async def test_large_failure_can_fall_back_to_the_small_answer():
    small, large = models({S: "[[No]]"}, {S: EngineUnavailableError("oom")})
    result = await run(small, large, on_large_failure="small")
    assert result.route == "degraded_small_only" and result.answer == "No"


async def test_both_failing_is_an_error_even_with_small_fallback():
    small, large = models({S: EngineUnavailableError("a")}, {S: EngineUnavailableError("b")})
    with pytest.raises(ModelUnavailableError):
        await run(small, large, on_large_failure="small")


async def test_large_failure_in_transfer_keeps_the_large_short_answer():
    small, large = models({S: "[[A]]", R: "hmm [[D]]"}, {S: "[[B]]", T: EngineUnavailableError("oom")})
    result = await run(small, large, question=CHOICE)
    assert result.route == "degraded_no_transfer" and result.answer == "B"


async def test_single_policy_failure_is_a_typed_error():
    small, large = models({S: EngineUnavailableError("x")}, {})
    with pytest.raises(ModelUnavailableError) as error:
        await run(small, large, policy="small")
    assert error.value.model == "small"


async def test_failed_stage2_falls_back_to_the_inline_answer():
    small, large = models({R: "thinking [[Yes]]", S2: EngineUnavailableError("x")}, {})
    result = await run(small, large, policy="small-reason")
    assert result.answer == "Yes"
    assert [s.status for s in result.trace.stages] == ["ok", "error"]


# ---------------------------------------------------------------- parallelism, eager reasoning, cancellation


async def test_stage_one_runs_both_models_in_parallel():
    small, large = models({S: "[[Yes]]"}, {S: "[[Yes]]"}, {S: 0.2}, {S: 0.2})
    await run(small, large)
    first, second = small.calls[0], large.calls[0]
    assert second.started_at < first.finished_at and first.started_at < second.finished_at


async def test_eager_reasoning_is_cancelled_when_stage_one_agrees():
    small, large = models({S: "[[Yes]]", R: "never"}, {S: "[[Yes]]"}, small_delays={R: 10.0})
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run(small, large, plan=Plan.EAGER)
    assert loop.time() - started < 2.0
    assert result.route == "agree_short"
    assert small.kinds() == [R, S]
    assert small.cancelled() == [R]
    assert {s.name: s.status for s in result.trace.stages}["reason_small"] == "cancelled"


async def test_eager_reasoning_is_used_once_when_stage_one_disagrees():
    small, large = models(
        {S: "[[No]]", R: "so [[Yes]]"}, {S: "[[Yes]]"}, small_delays={R: 0.5}, large_delays={S: 0.5}
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run(small, large, plan=Plan.EAGER)
    assert result.route == "agree_reasoned"
    assert small.kinds().count(R) == 1 and small.cancelled() == []
    # Reasoning overlapped stage 1: about 0.5 s, where one after the other takes 1.0 s (a wide margin,
    # so a loaded machine does not fail it).
    assert loop.time() - started < 0.9


def on_a_virtual_clock(coroutine):
    """``coroutine`` run on a virtual clock (``harness.virtual_clock``): the scripted delays take no wall time
    and the trace's times are exact."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def starts(result) -> dict[str, float]:
    return {stage.name: stage.start_s for stage in result.trace.stages}


ESCALATING = {S: "[[A]]", R: "The curves meet at 400.\n[[C]]"}, {S: "[[B]]", T: "[[C]]"}


@pytest.mark.parametrize(
    "eager, expected, latency",
    [
        # Stage 1 starts at once; the reasoning when the later short answer ended; the transfer after it.
        (False, {"short_small": 0.0, "short_large": 0.0, "reason_small": 0.5, "transfer_large": 1.5}, 1.625),
        # An eager reasoning starts beside stage 1.
        (True, {"reason_small": 0.0, "short_small": 0.0, "short_large": 0.0, "transfer_large": 1.0}, 1.125),
    ],
    ids=["sequential", "eager"],
)
def test_each_stage_starts_when_the_stages_it_waits_for_have_ended(eager, expected, latency):
    small, large = models(*ESCALATING, small_delays={S: 0.25, R: 1.0}, large_delays={S: 0.5, T: 0.125})
    plan = Plan.EAGER if eager else Plan.SEQUENTIAL
    result = on_a_virtual_clock(run(small, large, question=CHOICE, plan=plan))
    assert result.route == "transfer"
    assert starts(result) == expected
    assert result.trace.latency_s == latency
    stages = result.trace.to_dict()["stages"]
    assert {stage["name"]: stage["start_s"] for stage in stages} == expected


async def test_a_stage_starts_on_the_event_loops_clock_from_the_requests_start():
    small, large = models(*ESCALATING, small_delays={S: 0.1}, large_delays={S: 0.3})
    loop = asyncio.get_running_loop()
    before = loop.time()
    result = await run(small, large, question=CHOICE)
    after = loop.time()
    by_name = {stage.name: stage for stage in result.trace.stages}
    # Wide margins, so that a loaded machine does not fail it: stage 1 starts at once, the reasoning
    # once the large short answer's 0.3 s have passed.
    assert 0 <= by_name["short_small"].start_s < 0.15 and 0 <= by_name["short_large"].start_s < 0.15
    reasoning, transfer = by_name["reason_small"], by_name["transfer_large"]
    assert 0.29 <= reasoning.start_s <= transfer.start_s <= result.trace.latency_s <= after - before


def test_a_recording_without_start_times_replays_with_them():
    """A calibration pass recorded before stages had a start (``evaluation.predictions.prediction_of``
    keeps no ``start_s``) still replays, and the replay's trace has them."""
    rows = [
        {"name": "short_small", "status": "ok", "answer": "A", "latency_s": 0.25},
        {"name": "short_large", "status": "ok", "answer": "B", "latency_s": 0.5},
        {"name": "reason_small", "status": "ok", "answer": "C", "latency_s": 1.0},
        {"name": "transfer_large", "status": "ok", "answer": "C", "latency_s": 0.125},
    ]
    [result] = replay({"q": CHOICE}, CascadeOptions(), {"q": recorded_stages(rows)}).values()
    assert result.route == "transfer"
    assert starts(result) == {
        "short_small": 0.0,
        "short_large": 0.0,
        "reason_small": 0.5,
        "transfer_large": 1.5,
    }


async def test_cancelling_the_request_cancels_the_model_calls():
    small, large = models({S: "[[Yes]]", R: "x"}, {S: "[[Yes]]"}, {S: 10.0, R: 10.0}, {S: 10.0})
    task = asyncio.ensure_future(run(small, large, plan=Plan.EAGER))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(small.cancelled()) == sorted([S, R]) and large.cancelled() == [S]


# ---------------------------------------------------------------- trace, budgets, selector, parsing


async def test_trace_counts_tokens_per_model_and_stage():
    small, large = models({S: "[[A]]", R: "one two three [[C]]"}, {S: "[[B]]", T: "[[C]]"})
    result = await run(small, large, question=CHOICE)
    trace = result.trace.to_dict()
    assert trace["route"] == "transfer" and trace["policy"] == "cascade" and trace["kind"] == "choice"
    by_name = {stage["name"]: stage for stage in trace["stages"]}
    assert by_name["reason_small"]["completion_tokens"] == 4
    assert by_name["reason_small"]["answer"] == "C"
    assert trace["tokens"]["small"]["completion_tokens"] == 1 + 4
    assert trace["tokens"]["large"]["completion_tokens"] == 1 + 1
    assert (
        trace["tokens"]["large"]["prompt_tokens"]
        == by_name["short_large"]["prompt_tokens"] + by_name["transfer_large"]["prompt_tokens"]
    )
    assert all(stage["prompt_tokens"] > 0 for stage in trace["stages"])


async def test_token_budgets_are_passed_per_prompt_kind():
    small, large = models({S: "[[A]]", R: "x [[D]]"}, {S: "[[B]]", T: "[[C]]"})
    budgets = TokenBudgets(simple=7, reasoning=99, transfer=5)
    await run(small, large, question=CHOICE, max_tokens=budgets)
    assert [c.max_tokens for c in small.calls] == [7, 99]
    assert [c.max_tokens for c in large.calls] == [7, 5]


@pytest.mark.parametrize("policy", list(Policy))
async def test_every_stage_decodes_as_the_request_says(policy):
    small, large = models(
        {S: "[[A]]", E: "x [[A]]", R: "x [[D]]", S2: "D"},
        {S: "[[B]]", E: "y [[B]]", R: "y [[B]]", S2: "B", T: "[[C]]"},
    )
    decoding = Decoding(temperature=0.7, top_p=0.9, seed=3)
    await run(small, large, question=CHOICE, policy=policy, decoding=decoding)
    calls = small.calls + large.calls
    assert calls and all(call.decoding == decoding for call in calls)


async def test_the_reply_logprobs_are_those_of_the_completion_the_answer_came_from():
    small, large = models({S: "[[A]]", R: "x [[D]]"}, {S: "[[B]]", T: "[[C]]"})
    small.confidences = large.confidences = {S: 0.5, R: 0.6, T: 0.8}
    result = await run(small, large, question=CHOICE, decoding=Decoding(logprobs=True))
    assert result.route == "transfer"
    assert "".join(token.token for token in result.logprobs) == "[[C]]"
    assert math.isclose(sum(token.logprob for token in result.logprobs), math.log(0.8))
    reasoned = await run(*models({S: "[[A]]", R: "x [[D]]"}, {S: "[[B]]"}), question=CHOICE)
    assert reasoned.logprobs is None  # not asked for


async def test_unparsed_final_answer_is_the_stripped_text_and_flagged():
    small, large = models({}, {S: "  I cannot tell from this blurry picture, sorry about that.\n  "})
    result = await run(small, large, policy="large")
    assert result.answer == "I cannot tell from this blurry picture, sorry about that."
    assert result.trace.answer_parsed is False


async def test_transfer_selector_hook_chooses_what_the_large_model_reads():
    async def first_line(reasoning: str, question: Question) -> str:
        return reasoning.splitlines()[0]

    small, large = models({S: "[[A]]", R: "KEEP THIS\nDROP THIS\n[[D]]"}, {S: "[[B]]", T: "[[C]]"})
    cascade = Cascade(small, large, selectors={"first_line": first_line})
    await cascade.run(CHOICE, CascadeOptions(transfer_selector="first_line"))
    assert "KEEP THIS" in large.instruction_of(1) and "DROP THIS" not in large.instruction_of(1)


async def test_unknown_selector_and_kind_are_rejected():
    small, large = models({}, {})
    with pytest.raises(ValueError, match="transfer_selector"):
        await Cascade(small, large).run(YES_NO, CascadeOptions(transfer_selector="nope"))
    with pytest.raises(ValueError, match="answer kind"):
        Question("Q?", kind="poem")
    assert small.calls == [] and large.calls == []


def test_options_validate():
    with pytest.raises(ValueError, match="extra"):
        CascadeOptions(polcy="small")
    with pytest.raises(ValueError):
        CascadeOptions(policy="medium")
    assert CascadeOptions(policy="large-reason").resolved_stage2_answer() == "two_stage"
    assert CascadeOptions().resolved_stage2_answer() == "inline"
    assert (
        CascadeOptions(policy=Policy.CASCADE, stage2_answer="two_stage").resolved_stage2_answer()
        == "two_stage"
    )


def test_question_infers_its_kind():
    assert read_question("How many cats?").kind == "number"
    assert read_question("Which?", choices=["a", "b"]).kind == "choice"
    assert read_question("Is it?").kind == "yes_no"


async def test_every_call_names_its_request_stage_and_prompt_kind():
    small, large = models({S: "[[No]]", R: "It is red.\n[[No]]"}, {S: "[[Yes]]", T: "[[No]]"})
    await Cascade(small, large).run(YES_NO, CascadeOptions(), request_id="req-7")
    calls = [call.engine_call for call in small.calls + large.calls]
    assert {call.request_id for call in calls} == {"req-7"}
    assert [(call.stage, call.prompt_kind) for call in calls] == [
        ("short_small", S),
        ("reason_small", R),
        ("short_large", S),
        ("transfer_large", T),
    ]
    assert large.instruction_of(1).startswith("According to previous thinking")  # a yes/no transfer: still T


async def test_a_request_without_an_id_gets_one_for_all_its_calls():
    small, large = models({S: "[[No]]"}, {S: "[[Yes]]", T: "[[No]]"})
    small.replies[R] = "[[No]]"
    await Cascade(small, large).run(YES_NO)
    ids = {call.engine_call.request_id for call in small.calls + large.calls}
    assert len(ids) == 1 and ids.pop()


@pytest.mark.parametrize(("policy", "model"), [("small-explain", "small"), ("large-explain", "large")])
async def test_explain_policies_answer_from_one_explain_call(policy, model):
    small, large = models({E: "It is red.\n[[Yes]]"}, {E: "Red shape.\n[[yes]]"})
    result = await run(small, large, policy=policy, max_tokens=TokenBudgets(explain=77))
    called, idle = (small, large) if model == "small" else (large, small)
    assert called.kinds() == [E] and idle.calls == [] and called.calls[0].max_tokens == 77
    assert result.route == "single" and result.answer.lower() == "yes"
    assert [stage.name for stage in result.trace.stages] == [f"explain_{model}"]


# ---------------------------------------------------------------- confidence-calibrated verification


async def test_the_papers_rule_accepts_any_agreement_and_records_the_check():
    small, large = models({S: "[[Yes]]"}, {S: "[[yes]]"})
    small.confidences, large.confidences = {S: 0.2}, {}
    result = await run(small, large)
    assert result.route == "agree_short"
    [check] = result.trace.checks
    assert (check.check, check.answers, check.matched, check.min_confidence, check.accepted) == (
        "short",
        ("Yes", "yes"),
        True,
        0.0,
        True,
    )
    assert math.isclose(check.confidences[0], 0.2) and check.confidences[1] is None


async def test_an_unsure_agreement_goes_on_to_reasoning():
    small, large = models({S: "[[Yes]]", R: "It is blue.\n[[No]]"}, {S: "[[Yes]]", T: "[[No]]"})
    small.confidences, large.confidences = {S: 0.95, R: 0.9}, {S: 0.6, T: 0.9}
    result = await run(small, large, min_confidence=0.8)
    assert result.route == "transfer" and result.answer == "No"
    assert [(c.check, c.matched, c.accepted) for c in result.trace.checks] == [
        ("short", True, False),
        ("reasoned", False, False),
    ]
    assert math.isclose(result.trace.stages[1].confidence, 0.6)


async def test_an_answer_without_a_confidence_is_not_confident():
    small, large = models({S: "[[Yes]]", R: "Red.\n[[Yes]]"}, {S: "[[Yes]]", T: "[[Yes]]"})
    small.confidences, large.confidences = {S: 0.99, R: 0.99}, {}  # the large engine sends no logprobs
    result = await run(small, large, min_confidence=0.5)
    assert [(c.check, c.accepted) for c in result.trace.checks] == [("short", False), ("reasoned", False)]
    assert result.route == "transfer"


async def test_confident_agreements_stop_at_stage_one():
    small, large = models({S: "[[Yes]]"}, {S: "[[Yes]]"})
    small.confidences, large.confidences = {S: 0.9}, {S: 0.85}
    result = await run(small, large, min_confidence=0.8)
    assert result.route == "agree_short" and small.kinds() == [S]


async def test_a_confident_large_answer_settles_a_disagreement_only_when_asked():
    replies = ({S: "[[No]]", R: "Red.\n[[No]]"}, {S: "[[Yes]]", T: "[[No]]"})
    small, large = models(*replies)
    large.confidences = {S: 0.97}
    settled = await run(small, large, confident_large=0.95)
    assert settled.route == "confident_large" and settled.answer == "Yes" and small.kinds() == [S]
    assert [(c.check, c.accepted) for c in settled.trace.checks] == [
        ("short", False),
        ("confident_large", True),
    ]

    small, large = models(*replies)
    large.confidences = {S: 0.9}
    assert (await run(small, large, confident_large=0.95)).route == "transfer"
    small, large = models(*replies)
    large.confidences = {S: 0.99}
    assert (await run(small, large)).route == "transfer"  # off by default


async def test_a_confident_large_answer_never_overrules_a_more_confident_valid_small_one():
    """The README's first request: the small model said red at 0.99, the large brown at 0.83."""
    colour = read_question("What is the color of the shape?", images=(IMAGE,))
    replies = ({S: "[[red]]", R: "The shape is red.\n[[red]]"}, {S: "[[brown]]", T: "[[red]]"})
    small, large = models(*replies)
    small.confidences, large.confidences = {S: 0.99}, {S: 0.83}
    result = await run(small, large, question=colour, confident_large=0.69)
    assert result.route == "transfer" and result.answer == "red"
    check = result.trace.checks[1]
    assert (check.check, check.answers, check.confidences, check.accepted) == (
        "confident_large",
        ("brown", "red"),
        (0.83, 0.99),
        False,
    )
    small, large = models(*replies)
    small.confidences, large.confidences = {S: 0.7}, {S: 0.83}  # the less confident small answer
    assert (await run(small, large, question=colour, confident_large=0.69)).route == "confident_large"
    small, large = models({S: "[[maybe]]"}, replies[1])  # not a valid answer: overrules nothing
    small.confidences, large.confidences = {S: 0.99}, {S: 0.83}
    assert (await run(small, large, question=colour, confident_large=0.69)).route == "confident_large"


async def test_an_invalid_transfer_answer_falls_back_to_the_reasoned_answer():
    """ "Is the shape red?" answered "triangle" by the transfer: the reasoned "yes" is served."""
    small, large = models({S: "[[no]]", R: "It is red.\n[[yes]]"}, {S: "[[no idea]]", T: "[[triangle]]"})
    result = await run(small, large)
    assert result.route == "fallback" and result.answer == "yes" and result.trace.answer_valid
    fallback = result.trace.fallback
    assert (fallback.route, fallback.stage, fallback.answer, fallback.served) == (
        "transfer",
        "transfer_large",
        "triangle",
        "reason_small",
    )


async def test_the_fallback_order_is_reasoned_then_large_then_small():
    small, large = models({S: "[[yes]]", R: "I am lost.\n[[circle]]"}, {S: "[[no]]", T: "[[circle]]"})
    result = await run(small, large)
    assert (result.route, result.answer, result.trace.fallback.served) == ("fallback", "no", "short_large")
    small, large = models({S: "[[yes]]", R: "[[circle]]"}, {S: "[[not sure]]", T: "[[circle]]"})
    result = await run(small, large)
    assert (result.route, result.answer, result.trace.fallback.served) == ("fallback", "yes", "short_small")


async def test_with_no_valid_answer_anywhere_the_last_stage_is_asked_for_its_form_alone():
    small, large = models({S: "[[blue]]", R: "[[circle]]"}, {S: "[[red]]", T: "[[triangle]]"})
    large.constrained[T] = "[[no]]"
    result = await run(small, large)
    assert (result.route, result.answer, result.trace.answer_valid) == ("transfer", "no", True)
    assert result.trace.fallback is None
    assert result.trace.repair == RepairRecord("transfer_large", "triangle", "repair_large", True)
    repair = large.calls[-1]
    # The transfer's own prompt (the same reasoning in it), its completion held to [[yes|no]].
    assert repair.prompt_kind is T and repair.messages == large.calls[-2].messages
    assert repair.engine_call.constraint == r"\[\[(?:[Yy]es|[Nn]o)\]\]"
    assert result.trace.stages[-1].name == "repair_large" and result.trace.stages[-1].constraint


async def test_a_reasoning_with_no_answer_is_asked_its_stage_2_question_in_its_form():
    question = read_question("How many shapes are there?", images=(IMAGE,))
    reasoning = "I count the shapes one by one, and there are"
    small, large = models({R: reasoning}, {})
    small.constrained[S2] = "[[1]]"
    result = await run(small, large, question=question, plan="small-reason-only", stage2_answer="inline")
    assert (result.route, result.answer) == ("single", "1")
    repair = small.calls[-1]
    assert repair.prompt_kind is S2 and reasoning in str(repair.messages)
    assert result.trace.repair.stage == "reason_small" and result.trace.repair.answered


async def test_a_repair_answered_out_of_its_form_leaves_the_answer_as_it_was():
    """The engine answered the repair, but not in the form (as under a token budget too small for
    it): no 503 for what a retry would repeat; the answer as it was, not valid, and the trace says so."""
    unread = "I looked at it\nfor a long while and saw nothing I could name."
    small, large = models({S: unread, R: "Let me think about the shape at length.\nIt is odd."}, {S: unread})
    large.replies[T] = EngineUnavailableError("down")
    result = await run(small, large)
    assert result.trace.repair == RepairRecord("short_large", None, "repair_large", False)
    assert "not one of a yes_no question" in result.trace.stages[-1].error
    assert result.answer == "" and not result.trace.answer_valid


async def test_an_open_answer_cut_off_in_its_brackets_is_repaired():
    sign = read_question("What is written on the sign?", images=(IMAGE,))
    cut = "[[Speed limit"
    small, large = models({S: cut, R: cut}, {S: cut, T: cut})
    for model in (small, large):
        model.constrained[S] = model.constrained[T] = "[[Speed limit 30]]"
    result = await run(small, large, question=sign)
    assert result.answer == "Speed limit 30" and result.trace.repair.answered


async def test_no_repair_where_none_can_be_asked_and_none_for_an_open_answer_of_none():
    # Options no grammar can tell apart: the answer is served as it was, unrepaired.
    twins = read_question("Which is it?", images=(IMAGE,), choices=("cat", "Cat"))
    small, large = models({S: "[[dog]]", R: "[[dog]]"}, {S: "[[dog]]", T: "[[dog]]"})
    result = await run(small, large, question=twins)
    assert result.trace.repair is None and not result.trace.answer_valid
    # An engine that already refused a grammar is not asked for one again.
    small, large = models({S: "[[blue]]", R: "[[circle]]"}, {S: "[[red]]", T: "[[triangle]]"})
    large.constrained[T] = ConstraintRejectedError("no structured outputs")
    result = await run(small, large, structured_answers=True)
    assert result.trace.stages[-1].constraint_refused and result.trace.repair is None
    assert (result.route, result.answer) == ("transfer", "triangle")
    # "None" is an open answer: served, not repaired.
    sign = read_question("What is written on the sign?", images=(IMAGE,))
    small, large = models({S: "[[none]]", R: "[[none]]"}, {S: "[[None]]", T: "[[None]]"})
    result = await run(small, large, question=sign)
    assert result.trace.repair is None and result.answer == "None"


async def test_a_repair_the_engine_refuses_the_form_of_is_not_asked_again_without_it():
    small, large = models({S: "[[blue]]", R: "[[circle]]"}, {S: "[[red]]", T: "[[triangle]]"})
    large.constrained[T] = ConstraintRejectedError("no grammar here")
    with pytest.raises(ModelUnavailableError):
        await run(small, large)
    assert [c.prompt_kind for c in large.calls].count(T) == 2  # the transfer, its repair: no third
    assert large.calls[-1].engine_call.constraint is not None


async def test_a_degraded_route_with_an_invalid_answer_falls_back_too():
    small, large = models({S: "[[no]]", R: "[[yes]]"}, {S: "[[square]]"})
    large.replies[T] = EngineUnavailableError("down")
    result = await run(small, large)
    assert (result.route, result.answer) == ("fallback", "yes")
    assert result.trace.fallback.route == "degraded_no_transfer"


async def test_single_model_baselines_serve_what_their_model_said_with_its_validity():
    small, large = models({}, {S: "[[triangle]]"})
    result = await run(small, large, policy="large")
    assert (result.route, result.answer, result.trace.answer_valid) == ("single", "triangle", False)


async def test_an_either_or_question_is_a_choice_asked_as_it_is_and_answered_with_the_option():
    question = read_question("Is the shape red or blue?", images=(IMAGE,))
    assert (question.kind, question.choices, question.options_named) == ("choice", ("red", "blue"), True)
    small, large = models({S: "[[Red]]"}, {S: "[[red.]]"})
    result = await run(small, large, question=question)
    assert (result.route, result.answer) == ("agree_short", "red")
    assert result.trace.options_named == ["red", "blue"]
    prompt = small.calls[0].messages[-1]["content"]
    asked, instruction = prompt[1]["text"].split("\n")
    assert asked == "Is the shape red or blue?"  # no lettered options added
    assert "letter" not in instruction
    small, large = models({S: "[[red]]"}, {S: "[[B]]"})  # a letter names an option too; they differ
    assert (await run(small, large, question=question)).trace.checks[0].matched is False


async def test_the_request_choices_win_over_the_options_an_either_or_question_names():
    question = read_question("Is the shape red or blue?", images=(IMAGE,), choices=("green", "yellow"))
    assert question.choices == ("green", "yellow") and not question.options_named
    small, large = models({S: "[[A]]"}, {S: "[[A]]"})
    result = await run(small, large, question=question)
    assert result.answer == "A"
    assert "red, blue" in result.trace.choices_note and "green, yellow" in result.trace.choices_note


def test_an_either_or_question_with_or_not_stays_yes_no():
    assert read_question("Is the shape red or not?", images=(IMAGE,)).kind == "yes_no"
    assert read_question("Is the shape red or blue?", images=(IMAGE,), kind="yes_no").choices == ()


def test_confidence_options_validate():
    for bad in (
        {"min_confidence": 1.5},
        {"min_confidence": -0.1},
        {"confident_large": 0},
        {"min_confidence": "x"},
    ):
        with pytest.raises(ValueError):
            CascadeOptions(**bad)


class ClientWithoutDecoding:
    """A client written to an old contract: ``complete`` without the ``decoding`` keyword."""

    async def complete(self, messages, *, max_tokens, call: EngineCall) -> Completion:
        return Completion("[[yes]]", 1, 1, 0.0)


@pytest.mark.parametrize(
    ("policy", "broken"),
    [
        (Policy.CASCADE, "small"),
        (Policy.CASCADE, "large"),
        (Policy.LARGE, "large"),
        (Policy.TRANSFER, "small"),
    ],
)
async def test_a_bug_in_a_client_fails_the_request_and_is_never_a_degraded_route(policy, broken):
    """The contract's old form (no ``decoding``) is a TypeError in our process: the request fails with
    it (the server's 500), never a degraded route or a "model unavailable"."""
    small, large = models({S: "[[Yes]]", R: "x [[Yes]]"}, {S: "[[Yes]]", T: "[[Yes]]"})
    pair = (ClientWithoutDecoding(), large) if broken == "small" else (small, ClientWithoutDecoding())
    with pytest.raises(TypeError, match="decoding"):
        await Cascade(*pair).run(read_question("Is it red?"), CascadeOptions(policy=policy))


async def test_a_bug_in_a_selector_fails_the_request():
    async def broken(reasoning, question):
        raise KeyError("a bug")

    small, large = models({S: "[[A]]", R: "hmm [[D]]"}, {S: "[[B]]", T: "[[C]]"})
    options = CascadeOptions(transfer_selector="broken")
    with pytest.raises(KeyError):
        await Cascade(small, large, selectors={"broken": broken}).run(CHOICE, options)
