"""Names renamed for one vocabulary (issue 72) keep their old spelling for one release: a request sent
with it is served as the new one and its reply says so in a ``Warning`` header (RFC 9111 code 299), on
every reply path; a config with it is read as the new one and warned of at start; the old and the new
spelling at once and differing are refused, naming both."""

import asyncio

import pytest
from pydantic import ValidationError

from serve_app.config import AppConfig, load_app_config
from serve_app.core.decision import RelaxTo
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.edge.errors import RequestError, warning_headers
from serve_app.edge.responses import Answered, Forwarded, Refused, chat_reply, http_reply
from serve_app.edge.routing import Passthrough, ToCascade, destination
from serve_app.engine_config.engine_check import old_settings, report

from ..images import chat_body, data_url
from .build import answer_job, chat_job
from .fakes import ScriptedVLM
from .ingress_replica import CONFIG, replica

S = PromptKind.SIMPLE
ROUTE_WARNING = '299 - "mai.route is renamed mai.destination; the old name goes in the next release"'
MODELS = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}


def test_the_warning_header_is_rfc_9111s_code_299_one_entry_per_old_name():
    assert warning_headers(()) == {}
    assert warning_headers(("a", "b")) == {"Warning": '299 - "a", 299 - "b"'}


@pytest.mark.parametrize("value", ["passthrough", "cascade", "auto"])
def test_mai_route_is_served_as_mai_destination_with_a_warning(value):
    old = destination(chat_body("Describe this image in detail.", mai={"route": value}), CONFIG)
    new = destination(chat_body("Describe this image in detail.", mai={"destination": value}), CONFIG)
    assert type(old) is type(new) and getattr(old, "reason", None) == getattr(new, "reason", None)
    assert new.warnings == () and len(old.warnings) == 1
    assert warning_headers(old.warnings)["Warning"] == ROUTE_WARNING
    both = destination(chat_body(mai={"route": value, "destination": value}), CONFIG)
    assert both.warnings == old.warnings  # the same value twice: served, still warned


def test_mai_route_and_mai_destination_differing_are_a_400_naming_both():
    with pytest.raises(RequestError) as error:
        destination(chat_body(mai={"route": "passthrough", "destination": "cascade"}), CONFIG)
    assert error.value.status == 400 and error.value.param == "mai.route"
    assert "mai.route" in error.value.message and "mai.destination" in error.value.message


def test_the_warning_reaches_every_reply():
    ingress = replica(ScriptedVLM({S: "[[Yes]]"}), ScriptedVLM({S: "[[Yes]]"}))
    for stream in (False, True):
        old = asyncio.run(ingress.chat(chat_body(mai={"route": "cascade"}, stream=stream), None))
        assert isinstance(old, Answered) and old.job.warnings
        reply = http_reply(old, chat_reply)
        assert reply.headers["warning"] == ROUTE_WARNING and reply.headers["x-mai-route"] == "agree_short"
        new = http_reply(
            asyncio.run(ingress.chat(chat_body(mai={"destination": "cascade"}), None)), chat_reply
        )
        assert "warning" not in new.headers
    refused = asyncio.run(ingress.chat(chat_body(mai={"route": "cascade"}, max_tokens=0), None))
    assert isinstance(refused, Refused) and refused.error.code == "invalid_max_tokens"
    assert http_reply(refused, chat_reply).headers["warning"] == ROUTE_WARNING
    forced = asyncio.run(ingress.chat({"model": "mai", "messages": [], "mai": {"route": "cascade"}}, None))
    assert isinstance(forced, Refused) and forced.error.headers["Warning"] == ROUTE_WARNING
    passed = destination(chat_body("Describe it in detail.", mai={"route": "auto"}), CONFIG)
    assert isinstance(passed, Passthrough)
    forwarded = Forwarded("l", passed.reason, body={}, warnings=passed.warnings)
    assert forwarded.headers["Warning"] == ROUTE_WARNING and forwarded.headers["x-mai-route"] == "passthrough"
    assert "Warning" not in Forwarded("l", "no image", body={}).headers


def test_a_cascade_policy_other_than_mai_warns_of_mai_route_too():
    routed = destination(chat_body(model="mai-small", mai={"route": "passthrough"}), CONFIG)
    assert isinstance(routed, ToCascade) and routed.warnings  # mai.destination is mai's alone


def test_the_config_reads_mai_route_as_mai_destination_and_warns():
    old = load_app_config(MODELS | {"mai_route": "passthrough"})
    assert old.mai_destination == "passthrough" and "mai_route" not in old.model_dump()
    assert old_settings(MODELS | {"mai_route": "passthrough"}) == (
        "mai_route is renamed mai_destination; the old name goes in the next release",
    )
    assert old_settings(MODELS | {"mai_destination": "passthrough"}) == ()
    assert (
        load_app_config(MODELS | {"mai_route": "cascade", "mai_destination": "cascade"}).mai_destination
        == "cascade"
    )
    with pytest.raises(ValidationError, match="mai_route .* and mai_destination .* differ"):
        AppConfig.model_validate(MODELS | {"mai_route": "cascade", "mai_destination": "auto"})


def test_a_replys_checks_carry_check_and_for_one_release_its_old_key_stage():
    ingress = replica(ScriptedVLM({S: "[[Yes]]"}), ScriptedVLM({S: "[[Yes]]"}))
    answered = asyncio.run(ingress.chat(chat_body(), None))
    assert isinstance(answered, Answered)
    [check] = answered.result.trace.checks
    assert check.check == "short" and not hasattr(check, "stage")
    [written] = answered.result.trace.to_dict()["checks"]
    assert written["check"] == written["stage"] == "short"


def test_mai_options_eager_reasoning_is_honoured_as_a_plan_with_a_warning():
    old = chat_job(CONFIG, chat_body(mai={"options": {"eager_reasoning": True}}))
    new = chat_job(CONFIG, chat_body(mai={"options": {"plan": "eager"}}))
    assert old.options.plan is new.options.plan is Plan.EAGER and new.warnings == ()
    assert old.warnings == (
        "mai.options.eager_reasoning is deprecated: send mai.options.plan: eager | sequential; "
        "the old name goes in the next release",
    )
    assert (
        chat_job(CONFIG, chat_body(mai={"options": {"eager_reasoning": False}})).options.plan
        is Plan.SEQUENTIAL
    )
    both = chat_job(CONFIG, chat_body(mai={"route": "cascade", "options": {"eager_reasoning": False}}))
    assert len(warning_headers(both.warnings)["Warning"].split(", 299")) == 2
    native = answer_job(
        CONFIG, {"image": data_url(), "question": "Is it red?", "options": {"eager_reasoning": True}}
    )
    assert native.options.plan is Plan.EAGER and "send options.plan: eager | sequential" in native.warnings[0]
    ingress = replica(ScriptedVLM({S: "[[Yes]]"}), ScriptedVLM({S: "[[Yes]]"}))
    answered = asyncio.run(ingress.chat(chat_body(mai={"options": {"eager_reasoning": True}}), None))
    assert "mai.options.eager_reasoning" in http_reply(answered, chat_reply).headers["warning"]


def test_the_configs_eager_reasoning_is_the_default_plan_eager_with_a_warning():
    old = MODELS | {"cascade": {"eager_reasoning": True}}
    assert load_app_config(old).cascade.adaptive.default is Plan.EAGER
    assert old_settings(old) == (
        "cascade.eager_reasoning is another name for a plan: set cascade.adaptive.default: eager; "
        "the old name goes in the next release",
    )
    assert old_settings(MODELS | {"cascade": {"adaptive": {"default": "eager"}}}) == ()


def test_relax_to_eager_reasoning_is_read_as_relax_to_eager_with_a_warning():
    assert RelaxTo.model_validate({"eager_reasoning": False}) == RelaxTo(eager=False)
    assert RelaxTo.model_validate({"eager_reasoning": False, "eager": False}).eager is False
    with pytest.raises(ValidationError, match="relax_to.eager_reasoning .* and relax_to.eager .* differ"):
        RelaxTo.model_validate({"eager_reasoning": False, "eager": None})
    old = MODELS | {"cascade": {"overload": {"max_large_queue": 4, "relax_to": {"eager_reasoning": False}}}}
    assert load_app_config(old).cascade.overload.relax_to.eager is False
    assert old_settings(old) == (
        "cascade.overload.relax_to.eager_reasoning is renamed relax_to.eager; "
        "the old name goes in the next release",
    )


def test_mai_check_config_prints_the_configs_warnings():
    lines = report(
        "configs/x.yaml", {"models": {}, "warnings": list(old_settings(MODELS | {"mai_route": "auto"}))}
    )
    assert lines == [
        "configs/x.yaml: warning: mai_route is renamed mai_destination; the old name goes in the next release"
    ]
