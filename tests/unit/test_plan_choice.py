"""The plan each request runs (serve_app/core/plan_choice.py): the modes, which plans are allowed, the
default before a class is measured, exploration, and the settings refused at start."""

import dataclasses

import pytest
from pydantic import ValidationError

from serve_app.config import load_app_config
from serve_app.core.contracts import CascadeOptions, Decoding, Policy, TokenBudgets
from serve_app.core.decision import decide
from serve_app.core.plan_choice import (
    AdaptiveSettings,
    CalibratedEstimates,
    PlanBasis,
    PlanChoice,
    allowed_plans,
    choose_plan,
    explore_draw,
    plan_summary,
    reference_plan,
    seeded_estimates,
)
from serve_app.core.plans import SINGLE_MODEL, Plan, PlanEstimates

# A yes/no class as the demo pair serves it: stage 1 almost never settles, reasoning is long.
YES_NO = PlanEstimates(
    requests=480,
    stage1_runs=480,
    p1=0.04,
    p2=0.5,
    q=0.52,
    stage1_s=0.3,
    large_short_s=0.25,
    reasoning_s=0.6,
    transfer_s=0.3,
    large_short_tokens=110,
    transfer_tokens=300,
)
# A colour class: the same stages, but stage 1 settles nearly everything.
COLOUR = dataclasses.replace(YES_NO, p1=0.97, q=0.98)
LEARN = AdaptiveSettings(mode="learn", explore=0.0)
EVERY = [plan for plan in Plan if plan not in SINGLE_MODEL]  # what may be allowed without a table


def allowed(settings=LEARN, cls="yes_no", bounds=None, reference=Plan.FULL_TRANSFER, max_disagreement=0.05):
    return allowed_plans(
        settings, cls, reference=reference, exit_bounds=bounds or {}, max_disagreement=max_disagreement
    )


def test_answer_identical_plans_and_the_reference_are_always_allowed_others_only_when_audited():
    assert list(allowed()) == [Plan.SEQUENTIAL, Plan.EAGER, Plan.FULL_TRANSFER]
    assert Plan.FULL_TRANSFER not in allowed(reference=None)  # the audit compares against another policy
    assert Plan.REASON_FIRST not in allowed(bounds={"agree_reasoned": 0.051})
    why = allowed(bounds={"agree_reasoned": 0.031, "agree_short": 0.4})[Plan.REASON_FIRST]
    assert "agree_reasoned 0.031" in why  # bounded by its own exit: agree_short's bound is not its
    table = AdaptiveSettings(mode="learn", table={"yes_no": Plan.REASON_FIRST})
    assert allowed(table, cls="yes_no/pope")[Plan.REASON_FIRST] == "the calibrated table"
    only = AdaptiveSettings(mode="learn", plans=(Plan.SEQUENTIAL,))
    assert list(allowed(only, bounds={"agree_reasoned": 0.0})) == [Plan.SEQUENTIAL]
    assert (
        reference_plan(Policy.TRANSFER) is Plan.FULL_TRANSFER and reference_plan(Policy.LARGE_REASON) is None
    )


def test_learn_picks_the_least_expected_latency_and_says_why():
    choice = choose_plan(LEARN, "yes_no", YES_NO, EVERY, draw=0.5)
    costs = {plan: round(cost, 4) for plan, cost in choice.expected.items()}
    assert choice.plan is min(costs, key=costs.get) and choice.plan is not Plan.SEQUENTIAL
    assert choice.reason.startswith("yes_no: stage-1 accept 0.04 over 480 requests; ")
    assert "over sequential" in choice.reason
    # Eager saves the colour class 1 % (the 3 % stage 1 leaves x stage 1's time): under min_saving.
    assert choose_plan(LEARN, "color", COLOUR, EVERY, draw=0.5).plan is Plan.SEQUENTIAL
    eager_any_saving = AdaptiveSettings(mode="learn", explore=0.0, min_saving=0.0)
    assert choose_plan(eager_any_saving, "color", COLOUR, EVERY, draw=0.5).plan is Plan.EAGER
    # On the large model's tokens: 110 + 0.96 x 0.5 x 300 < 300, so stage 1 pays; where reasoning
    # rarely settles either (p2 0.1: 110 + 0.96 x 0.9 x 300 > 300), Full RT saves the short call.
    tokens = AdaptiveSettings(mode="learn", explore=0.0, objective="large_tokens")
    assert choose_plan(tokens, "yes_no", YES_NO, EVERY, draw=0.5).plan is Plan.SEQUENTIAL
    hard = dataclasses.replace(YES_NO, p2=0.1, q=0.1)
    assert choose_plan(tokens, "yes_no", hard, EVERY, draw=0.5).plan is Plan.FULL_TRANSFER


def test_on_busy_shared_engines_the_work_a_plan_adds_decides():
    # Latency counts eager's reasoning beside stage 1 as free; engine time counts every call.
    work = AdaptiveSettings(mode="learn", explore=0.0, objective="engine_time")
    measured = dataclasses.replace(YES_NO, small_short_s=0.3)
    assert choose_plan(LEARN, "yes_no", measured, EVERY, draw=0.5).plan is Plan.EAGER
    choice = choose_plan(work, "yes_no", measured, EVERY, draw=0.5)
    # sequential 0.3 + 0.25 + 0.96 (0.6 + 0.5 x 0.3) = 1.27; reason-first 0.25 + 0.6 + 0.48 x 0.3 = 0.99;
    # transfer 0.6 + 0.3 = 0.9: Full RT makes the fewest calls where stage 1 settles nothing
    assert choice.plan is Plan.FULL_TRANSFER and "engine-s expected" in choice.reason
    assert (
        choose_plan(work, "color", dataclasses.replace(COLOUR, small_short_s=0.3), EVERY, draw=0.5).plan
        is Plan.SEQUENTIAL
    )


def test_a_class_runs_the_default_until_measured_and_explores_a_share_of_its_requests():
    young = PlanEstimates(requests=49)
    choice = choose_plan(AdaptiveSettings(mode="learn", default=Plan.EAGER), "yes_no", young, EVERY, draw=0.9)
    assert choice.plan is Plan.EAGER and "49 of 50 observations" in choice.reason
    explore = AdaptiveSettings(mode="learn", explore=0.1)
    draws = [explore_draw(f"r{i}", 0) for i in range(4000)]
    plans = [
        choose_plan(explore, "yes_no", YES_NO, [Plan.SEQUENTIAL, Plan.FULL_TRANSFER], draw=d).plan
        for d in draws
    ]
    assert plans.count(Plan.SEQUENTIAL) / len(plans) == pytest.approx(0.1, abs=0.015)
    assert explore_draw("r1", 0) == explore_draw("r1", 0) != explore_draw("r1", seed=1)


def test_which_request_explores_is_the_servers_draw_not_the_clients_id():
    """Under the default settings the same request id explores on some sends and not on others: a
    client cannot pick an id that always explores (or never does); a configured seed ties the draw to
    the id, for reproducible runs."""
    from serve_app.core.audit import AuditBook, AuditSettings
    from serve_app.edge.learning import PlanController

    def controller(**settings):
        built = PlanController(
            AdaptiveSettings(mode="learn", explore=0.5, **settings),
            AuditSettings(),
            AuditBook(10),
            shared=True,
        )
        built.shared_estimates["yes_no"] = YES_NO
        return built

    fresh = controller()
    explored = {"explore" in fresh.choose("yes_no", "same").reason for _ in range(64)}
    assert explored == {True, False} and AdaptiveSettings().seed is None
    assert controller().draws.secret != fresh.draws.secret  # each replica its own secret
    seeded = controller(seed=5)
    assert len({seeded.choose("yes_no", "same").reason for _ in range(16)}) == 1
    # Pure: the same secret and id draw the same; the secret is what the client cannot see.
    assert explore_draw("7", None, b"k" * 32) == explore_draw("7", None, b"k" * 32)
    assert explore_draw("7", None, b"k" * 32) != explore_draw("7", None, b"j" * 32)
    with pytest.raises(ValueError, match="secret"):
        explore_draw("7", None)


def test_off_and_table_modes_are_fixed():
    assert choose_plan(AdaptiveSettings(), "yes_no", YES_NO, EVERY, draw=0.5).plan is Plan.SEQUENTIAL
    table = AdaptiveSettings(mode="table", table={"yes_no": Plan.FULL_TRANSFER, "text/chartqa": Plan.EAGER})
    assert choose_plan(table, "yes_no/pope", YES_NO, EVERY, draw=0.0).plan is Plan.FULL_TRANSFER
    assert choose_plan(table, "text/chartqa", COLOUR, EVERY, draw=0.0).plan is Plan.EAGER
    assert choose_plan(table, "text", COLOUR, EVERY, draw=0.0).plan is Plan.SEQUENTIAL


def test_the_stats_summary_shows_the_estimates_costs_and_current_plan():
    summary = plan_summary(LEARN, "yes_no", YES_NO, allowed())
    assert summary["plan"] == choose_plan(LEARN, "yes_no", YES_NO, list(allowed()), draw=1.0).plan.value
    assert summary["estimates"]["p1"] == 0.04 and summary["estimates"]["requests"] == 480
    assert set(summary["allowed"]) == {"sequential", "eager", "full-transfer"}
    assert summary["allowed"]["full-transfer"] == {"why": "the audit's reference", "expected": 0.9}


CONFIG = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}


@pytest.mark.parametrize(
    ("adaptive", "named"),
    [
        ({"mode": "sometimes"}, "mode"),
        ({"objective": "cheapest"}, "objective"),
        ({"plans": ["sequential", "speculative"]}, "plans"),
        ({"explore": 1.5}, "explore"),
        ({"explore": -0.1}, "explore"),
        ({"default": "full-transfer", "plans": ["sequential", "eager"]}, "default 'full-transfer'"),
        ({"default": "transfer"}, "default"),
        ({"table": {"yes_no": "small-reason"}}, "table.yes_no"),
        ({"plans": ["sequential", "large"]}, "plans.1"),
        ({"table": {"yes_no": "reason-first"}, "plans": ["sequential"]}, "table names plans"),
        ({"mode": "table"}, "needs a table"),
        ({"window": 0}, "window"),
        ({"shape": 1}, "shape"),
    ],
)
def test_bad_adaptive_settings_are_refused_at_start_naming_the_key(adaptive, named):
    with pytest.raises(ValidationError) as refused:
        load_app_config(CONFIG | {"cascade": {"adaptive": adaptive}})
    assert "adaptive" in str(refused.value) and named in str(refused.value)


def test_the_plan_has_one_place_in_the_server_config():
    with pytest.raises(ValidationError, match="cascade.adaptive.default"):
        load_app_config(CONFIG | {"cascade": {"plan": "eager"}})
    with pytest.raises(ValidationError, match="eager_reasoning"):
        load_app_config(CONFIG | {"cascade": {"eager_reasoning": True, "adaptive": {"mode": "learn"}}})
    eager = load_app_config(CONFIG | {"cascade": {"eager_reasoning": True}}).cascade.adaptive
    assert eager.default is Plan.EAGER  # the server's eager_reasoning is the default plan eager
    assert choose_plan(eager, "yes_no", PlanEstimates(), EVERY, draw=0.5).plan is Plan.EAGER
    with pytest.raises(ValidationError, match="contradicts"):
        load_app_config(
            CONFIG | {"cascade": {"eager_reasoning": True, "adaptive": {"default": "sequential"}}}
        )


# What a request steers: its own run, never what the table learns (decision.decide: measures_plan).
STEERING = [
    ({"options": {"plan": "eager"}}, {}),  # a forced plan would teach the table its costs on demand
    ({"options": {"eager_reasoning": False}}, {}),  # another name for a forced plan
    ({"options": {"min_confidence": 0}}, {}),  # its own thresholds settle other shares at stage 1
    ({"options": {"confident_large": 0.9}}, {}),
    ({"options": {"structured_answers": True}}, {}),
    ({"options": {"stage2_answer": "two_stage"}}, {}),
    ({}, {"temperature": 0.7}),  # its own sampling
    ({}, {"max_tokens": 4}),  # a cap under the stages' budgets
]
# What leaves the stages as configured: the reply's logprobs, what a failed large model does.
NEUTRAL = [({}, {}), ({"options": {"on_large_failure": "small"}}, {}), ({}, {"logprobs": True})]


def test_only_requests_the_server_plans_and_runs_as_configured_feed_the_class_estimates():
    """A forced plan or a request's own options run as asked, but count for nothing in the class's
    estimates: else one client, forcing a plan or its own thresholds, would move the plan every other
    request of its class runs."""
    from serve_app.core.prompts import PromptKind

    from ..images import chat_body
    from .fakes import ScriptedVLM
    from .ingress_replica import client_of, replica

    S = PromptKind.SIMPLE
    config = load_app_config(CONFIG | {"cascade": {"min_confidence": 0.5, "adaptive": {"mode": "learn"}}})
    small = ScriptedVLM({S: "[[yes]]"}, confidences={S: 0.9})
    ingress = replica(small, ScriptedVLM({S: "[[yes]]"}, confidences={S: 0.9}), config)
    client = client_of(ingress)
    traces = []
    for mai, extra in NEUTRAL[:1] + STEERING + NEUTRAL[1:]:
        reply = client.post("/v1/chat/completions", json=chat_body(mai=mai, **extra))
        assert reply.status_code == 200, (mai, extra, reply.text)
        traces.append(reply.json()["mai"]["trace"])
    assert [trace["plan"] for trace in traces[1:3]] == ["eager", "sequential"]  # run as forced
    assert all("forced by the request" in trace["plan_reason"] for trace in traces[1:3])
    observed = ingress.plans.book.classes["yes_no"]
    assert len(observed) == len(NEUTRAL) and {o.plan for o in observed} == {"sequential"}


def test_the_decision_measures_only_a_plan_the_server_chose_run_as_configured():
    server = CascadeOptions(min_confidence=0.5)

    def measures(**update):
        options = server.model_copy(update=update)
        return decide(
            options, "yes_no", server=server, choose=lambda: PlanChoice(Plan.EAGER, "-")
        ).measures_plan

    assert measures() and measures(on_large_failure="small")
    assert measures(decoding=Decoding(logprobs=True, top_logprobs=2))  # the reply's, not the stages'
    assert not measures(plan=Plan.EAGER)  # forced, even to the plan the server would choose
    assert not measures(plan=Plan.SEQUENTIAL)
    assert not measures(min_confidence=0.6) and not measures(confident_large=0.9)
    assert not measures(decoding=Decoding(temperature=0.7))
    assert not measures(max_tokens=TokenBudgets(simple=4, stage2=4, transfer=4, explain=4))
    # A cap under the explain policies' budget only (lmms-eval's max_tokens): the cascade's stages
    # run as configured.
    assert measures(max_tokens=server.max_tokens.model_copy(update={"explain": 64}))
    assert not measures(structured_answers=True) and not measures(transfer_selector="budget")
    assert not measures(policy=Policy.TRANSFER)  # not the cascade: no plan at all


# ---------------------------------------------------------------- the calibration's plan from request one


def test_a_fresh_class_runs_the_calibrated_table_plan_from_its_first_request():
    settings = AdaptiveSettings(mode="learn", explore=0.0, table={"yes_no": Plan.SMALL_REASON_ONLY})
    fresh = PlanEstimates()
    for cls in ("yes_no", "yes_no/pope"):  # a task's class falls back to its kind's entry
        choice = choose_plan(settings, cls, fresh, list(allowed(settings, cls=cls)), draw=0.5)
        assert choice.plan is Plan.SMALL_REASON_ONLY and choice.basis is PlanBasis.CALIBRATION
        assert "0 of 50 observations; the calibrated plan table" in choice.reason
    other = choose_plan(settings, "text", fresh, list(allowed(settings, cls="text")), draw=0.5)
    assert other.plan is Plan.SEQUENTIAL and other.basis is PlanBasis.CONFIGURED  # no entry: the default
    # Once measured, the class's own estimates decide among the allowed plans.
    measured = choose_plan(settings, "yes_no", YES_NO, list(allowed(settings)), draw=0.5)
    assert measured.basis is PlanBasis.OBSERVATIONS


CALIBRATED = CalibratedEstimates.of(YES_NO)


def test_calibrated_estimates_seed_a_fresh_class_and_observations_refine_them():
    settings = AdaptiveSettings(mode="learn", explore=0.0, calibrated={"yes_no": CALIBRATED})
    seeded, basis = seeded_estimates(settings, "yes_no/pope", PlanEstimates())
    assert basis is PlanBasis.CALIBRATION
    assert (seeded.requests, seeded.stage1_runs, seeded.p1, seeded.reasoning_s) == (50, 50, 0.04, 0.6)
    # 150 observations at p1 0.5 and reasoning 1.2 s against the calibration's 50: a weighted mean.
    observed = dataclasses.replace(YES_NO, requests=150, stage1_runs=150, p1=0.5, reasoning_s=1.2)
    refined, basis = seeded_estimates(settings, "yes_no", observed)
    assert basis is PlanBasis.CALIBRATION_AND_OBSERVATIONS and refined.requests == 200
    assert refined.p1 == pytest.approx((50 * 0.04 + 150 * 0.5) / 200)
    assert refined.reasoning_s == pytest.approx((50 * 0.6 + 150 * 1.2) / 200)
    heavier = AdaptiveSettings(mode="learn", calibrated={"yes_no": CALIBRATED}, calibration_weight=150)
    assert seeded_estimates(heavier, "yes_no", observed)[0].p1 == pytest.approx((0.04 + 0.5) / 2)
    # A quantity the calibration did not measure is the observations' alone.
    partial = AdaptiveSettings(mode="learn", calibrated={"yes_no": CalibratedEstimates(p1=0.1)})
    assert seeded_estimates(partial, "yes_no", observed)[0].reasoning_s == 1.2
    assert seeded_estimates(settings, "text", observed)[1] is PlanBasis.OBSERVATIONS  # not calibrated


def test_with_calibrated_estimates_the_first_request_runs_the_cheapest_plan_and_says_so():
    settings = AdaptiveSettings(mode="learn", explore=0.0, calibrated={"yes_no": CALIBRATED})
    from_seed = choose_plan(settings, "yes_no", PlanEstimates(), list(allowed(settings)), draw=0.5)
    from_observations = choose_plan(LEARN, "yes_no", YES_NO, list(allowed()), draw=0.5)
    assert from_seed.plan is from_observations.plan  # the same estimates, the same choice
    assert from_seed.basis is PlanBasis.CALIBRATION and "no observation yet" in from_seed.reason
    summary = plan_summary(settings, "yes_no", PlanEstimates(), allowed(settings))
    assert summary["basis"] == "calibration" and summary["plan"] == from_seed.plan.value


def test_calibrated_estimates_are_validated_at_start():
    with pytest.raises(ValidationError, match="p1"):
        AdaptiveSettings(mode="learn", calibrated={"yes_no": {"p1": 1.5}})
    with pytest.raises(ValidationError, match="stage1_secs"):
        AdaptiveSettings(mode="learn", calibrated={"yes_no": {"stage1_secs": 0.3}})
