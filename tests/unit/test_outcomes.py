"""The request path returns values (``edge.outcomes``): answered, forwarded or refused, never HTTP;
``mai-batch`` reads them as they are (``batch.answerer.reply_of``), and a refusal is counted once,
whichever way it leaves."""

import asyncio

import pytest

from batch.answerer import reply_of
from serve_app.core.contracts import EngineUnavailableError
from serve_app.core.prompts import PromptKind
from serve_app.edge.responses import Answered, Forwarded, Refused, chat_completion

from ..images import chat_body
from .fakes import ScriptedVLM
from .ingress_replica import replica

S = PromptKind.SIMPLE


def test_an_answer_is_a_value_with_its_job_decision_and_result():
    ingress = replica(ScriptedVLM({S: "[[Yes]]"}), ScriptedVLM({S: "[[Yes]]"}))
    outcome = asyncio.run(ingress.chat(chat_body(), "row-1"))
    assert isinstance(outcome, Answered)
    assert outcome.job.request_id == "row-1" and outcome.result.route == "agree_short"
    assert outcome.decision.plan is not None and outcome.result.trace.plan == outcome.decision.plan.plan.value
    reply = reply_of(outcome, 0.1)
    assert reply.status == 200 and reply.route == "agree_short"
    assert reply.body["choices"][0]["message"]["content"] == outcome.result.answer
    assert reply.tokens == outcome.result.trace.tokens().as_dict() and reply.tokens["large"]


def test_the_request_id_is_made_once_where_the_request_comes_in():
    ingress = replica(ScriptedVLM({S: "[[Yes]]"}), ScriptedVLM({S: "[[Yes]]"}))
    made = asyncio.run(ingress.chat(chat_body(), None))
    assert isinstance(made, Answered) and len(made.job.request_id) == 32
    assert chat_completion(made.job, made.result)["mai"]["request_id"] == made.job.request_id
    bad = asyncio.run(ingress.chat(chat_body(), "no spaces allowed"))
    assert isinstance(bad, Refused) and bad.error.code == "invalid_request_id"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "model_not_found"),
        (chat_body(max_tokens=0), 400, "invalid_max_tokens"),
    ],
)
def test_bad_input_is_a_refusal_counted_once(body, status, code):
    ingress = replica(ScriptedVLM({}), ScriptedVLM({}))
    outcome = asyncio.run(ingress.chat(body, None))
    assert isinstance(outcome, Refused) and outcome.status == status
    assert outcome.error.code == code and ingress.metrics.errors == [(status, code)]
    reply = reply_of(outcome, 0.0)
    assert reply.status == status and reply.body == outcome.error.body() and reply.route is None


def test_a_failed_model_is_a_refusal_with_its_503_not_an_exception():
    failing = ScriptedVLM({S: EngineUnavailableError("l is unavailable (ActorDiedError)")})
    ingress = replica(ScriptedVLM({S: "[[Yes]]"}), failing)
    outcome = asyncio.run(ingress.chat(chat_body(), None))
    assert isinstance(outcome, Refused) and outcome.status == 503
    assert outcome.error.headers["Retry-After"] == "5"


def test_a_forwarded_reply_is_read_as_its_json_body():
    forwarded = Forwarded("l", "no image", body={"choices": [{"message": {"content": "hi"}}]})
    reply = reply_of(forwarded, 0.2)
    assert reply.status == 200 and reply.body == forwarded.body and reply.route is None
    assert forwarded.headers == {"x-mai-route": "passthrough", "x-mai-route-reason": "no image"}


def test_a_bug_is_no_refusal_it_rises():
    ingress = replica(ScriptedVLM({S: ValueError("a bug")}), ScriptedVLM({S: "[[Yes]]"}))
    with pytest.raises(ValueError, match="a bug"):
        asyncio.run(ingress.chat(chat_body(), None))
