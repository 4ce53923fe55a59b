"""Logprobs are asked for only where they are read: the short answers (a few tokens each), the
reasoning's answer when ``min_confidence`` compares it, never an explanation's or a transfer's (the
2,048- and 512-token calls cost the most to return them), unless the client asks for the served
answer's logprobs, as a calibration does."""

import pytest

from serve_app.clients.llm_server import LLMServerClient
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions, Decoding, EngineCall
from serve_app.core.question_parsing import read_question

from .fakes import S2, E, R, S, ScriptedVLM, T

QUESTION = read_question("Is there a fan in the picture?", images=("data:image/png;base64,iVBORw0KGgo=",))
REASONING = "Let me look. There is none.\n[[No]]"


async def confidence_asked(options: CascadeOptions, small: dict, large: dict) -> dict[str, bool]:
    models = ScriptedVLM(small), ScriptedVLM(large)
    await Cascade(*models).run(QUESTION, options)
    return {
        call.engine_call.stage: call.engine_call.confidence
        for model in models
        for call in model.calls
        if call.engine_call is not None
    }


async def test_a_transfer_reads_the_short_answers_only_under_the_papers_rule():
    asked = await confidence_asked(
        CascadeOptions(), {S: "[[No]]", R: REASONING}, {S: "[[Yes]]", T: "[[Yes]]"}
    )
    assert asked == {"short_small": True, "short_large": True, "reason_small": False, "transfer_large": False}


async def test_under_min_confidence_the_inline_reasoning_is_read_too():
    asked = await confidence_asked(
        CascadeOptions(min_confidence=0.5), {S: "[[No]]", R: REASONING}, {S: "[[Yes]]", T: "[[Yes]]"}
    )
    assert asked == {"short_small": True, "short_large": True, "reason_small": True, "transfer_large": False}


async def test_with_a_stage_two_call_the_reasoning_itself_is_not_read():
    asked = await confidence_asked(
        CascadeOptions(stage2_answer="two_stage"),
        {S: "[[No]]", R: "There is none.", S2: "[[No]]"},
        {S: "[[Yes]]", T: "[[Yes]]"},
    )
    assert asked["reason_small"] is False and asked["stage2_small"] is True
    assert asked["transfer_large"] is False


async def test_an_explanation_is_served_never_compared():
    asked = await confidence_asked(CascadeOptions(policy="small-explain"), {E: "It is. [[Yes]]"}, {})
    assert asked == {"explain_small": False}


@pytest.mark.parametrize(
    ("server", "read", "client", "asked"),
    [
        (True, True, False, True),
        (True, False, False, False),  # the 2,048-token call whose answer nobody compares
        (True, False, True, True),  # the client asked for the served answer's logprobs
        (False, True, False, False),  # answer_logprobs: false
        (False, False, True, True),
    ],
)
def test_the_engine_is_asked_for_logprobs_where_they_are_read(server, read, client, asked):
    call = EngineCall("r1", "reason_small", R, confidence=read)
    body = LLMServerClient(None, "m", logprobs=server).body(
        [], max_tokens=8, call=call, decoding=Decoding(logprobs=client)
    )
    assert body["logprobs"] is asked
