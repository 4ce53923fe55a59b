"""What the client sends a model deployment and reads back: plain values (deployments/model_server.py),
made here from vLLM's own reply types as a model's replica makes them."""

import asyncio
import logging
import math
import re

import pytest

from deployments.model_server import complete_plainly, reply_of
from serve_app.clients.llm_server import _completion_of
from serve_app.config import AppConfig
from serve_app.core.contracts import EngineUnavailableError


def response(content: str, logprobs=None, usage=None) -> dict:
    """The plain reply of a ChatCompletionResponse carrying ``content`` (and its tokens' logprobs)."""
    from ray.serve.llm.openai_api_models import ChatCompletionResponse

    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
        "logprobs": {"content": logprobs} if logprobs is not None else None,
    }
    usage = usage or {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    reply = ChatCompletionResponse.model_validate({"model": "m", "choices": [choice], "usage": usage})
    return reply_of(reply)


def token(text: str, logprob: float, top=()) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": list(top)}


def test_the_generated_tokens_and_their_logprobs_are_kept():
    tokens = [token("[[", -0.01), token("Yes", math.log(0.8)), token("]]", 0.0)]
    completion = _completion_of(response("[[Yes]]", tokens), "m", 0.2)
    assert [t.token for t in completion.token_logprobs] == ["[[", "Yes", "]]"]
    assert math.isclose(completion.token_logprobs[1].logprob, math.log(0.8))
    assert (completion.prompt_tokens, completion.completion_tokens) == (12, 3)


def test_cached_prompt_tokens_are_read_from_the_usage_details():
    def usage(cached):
        details = {"prompt_tokens_details": {"cached_tokens": cached}}
        return {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, **details}

    assert _completion_of(response("[[Yes]]", usage=usage(8)), "m", 0.1).cached_tokens == 8
    assert _completion_of(response("[[Yes]]", usage=usage(0)), "m", 0.1).cached_tokens == 0
    # An engine that does not report it: unknown, not zero.
    assert _completion_of(response("[[Yes]]"), "m", 0.1).cached_tokens is None


def test_an_engine_without_logprobs_gives_none():
    assert _completion_of(response("[[Yes]]"), "m", 0.1).token_logprobs is None
    assert _completion_of(response("[[Yes]]", []), "m", 0.1).token_logprobs is None


@pytest.fixture
def logged():
    """The records of the ingress's logger (``ray.serve``, which Ray keeps from propagating)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("ray.serve")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_an_error_response_is_an_engine_error_whose_detail_stays_in_the_log(logged):
    internals = "RayTaskError(ValueError): ray::ServeReplica:small (pid=4242, ip=10.0.0.7) boom"
    with pytest.raises(EngineUnavailableError, match="m failed the request") as error:
        _completion_of({"error": {"code": 500, "message": internals, "type": ""}}, "m", 0.1)
    error_id = re.search(r"error id ([0-9a-f]{16})", str(error.value)).group(1)
    assert "pid" not in str(error.value) and "10.0.0.7" not in str(error.value)
    [record] = [record for record in logged if error_id in record.getMessage()]
    assert internals in record.getMessage()


def test_a_transport_failure_reaches_the_client_without_the_engines_words(logged):
    from ray.exceptions import RayError

    from serve_app.clients.failures import engine_call

    with pytest.raises(EngineUnavailableError) as error, engine_call("m"):
        raise RayError("ray::ServeReplica (pid=4242, ip=10.0.0.7) Traceback: File /x.py, line 3")
    assert str(error.value).startswith("m is unavailable (error id ") and "pid" not in str(error.value)
    assert any(record.exc_info and "pid=4242" in str(record.exc_info[1]) for record in logged)


def test_confidence_rules_need_logprobs():
    base = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    with pytest.raises(ValueError, match="answer_logprobs"):
        AppConfig.model_validate(base | {"answer_logprobs": False, "cascade": {"min_confidence": 0.5}})
    with pytest.raises(ValueError, match="answer_logprobs"):
        AppConfig.model_validate(base | {"answer_logprobs": False, "cascade": {"confident_large": 0.9}})
    assert AppConfig.model_validate(base | {"answer_logprobs": False}).cascade.min_confidence == 0


class Reply:
    """A DeploymentResponse stand-in: awaited for the model's reply, cancellable."""

    def __init__(self, reply):
        self._reply, self.cancelled = reply, False

    def __await__(self):
        return self._reply.__await__()

    def cancel(self):
        self.cancelled = True


class RecordingHandle:
    """A model deployment's handle stand-in: records each body ``complete`` gets (and the call beside
    it) and answers it with ``reply`` (a plain reply, or an async function of the body)."""

    def __init__(self, reply):
        self.reply, self.requests, self.calls = reply, [], []

    @property
    def complete(self):
        return self

    def remote(self, body, call=None):
        self.requests.append(body)
        self.calls.append(call)

        async def answer():
            return await self.reply(body) if callable(self.reply) else self.reply

        return Reply(answer())


def engine_request(body):
    """The body as the model's replica reads it: ray.serve.llm's ChatCompletionRequest (vLLM's)."""
    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    return ChatCompletionRequest.model_validate(body)


async def test_each_call_decodes_as_its_decoding_says():
    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.contracts import Decoding, EngineCall
    from serve_app.core.prompts import PromptKind

    tokens = [token("Yes", -0.1, top=[{"token": "Yes", "logprob": -0.1}, {"token": "No", "logprob": -2.4}])]
    handle = RecordingHandle(response("Yes", tokens))
    client = LLMServerClient(handle, "m", logprobs=False)
    call = EngineCall("r1", "short_small", PromptKind.SIMPLE)
    await client.complete([{"role": "user", "content": "Hi"}], max_tokens=4, call=call)
    greedy = engine_request(handle.requests[-1])
    assert (greedy.temperature, greedy.top_p, greedy.seed, greedy.logprobs) == (0, 1, None, False)
    assert greedy.request_id == handle.requests[-1]["request_id"] == str(handle.calls[-1])
    decoding = Decoding(temperature=0.7, top_p=0.9, seed=3, logprobs=True, top_logprobs=2)
    completion = await client.complete(
        [{"role": "user", "content": "Hi"}], max_tokens=4, call=call, decoding=decoding
    )
    sent = engine_request(handle.requests[-1])
    assert (sent.temperature, sent.top_p, sent.seed, sent.logprobs, sent.top_logprobs) == (
        0.7,
        0.9,
        3,
        True,
        2,
    )
    assert [(top.token, top.logprob) for top in completion.token_logprobs[0].top] == [
        ("Yes", -0.1),
        ("No", -2.4),
    ]


async def test_a_generation_the_engine_failed_is_an_engine_error_never_a_bug():
    """vLLM raises GenerationError when a generation finishes with "error" (seen once in 1,300
    requests on the CPU stack): the model's replica sends it as a 500, so the route degrades."""
    from vllm.exceptions import GenerationError

    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.contracts import EngineCall
    from serve_app.core.prompts import PromptKind

    async def failed(request):
        raise GenerationError()
        yield  # an async generator, as a chat's reply is

    client = LLMServerClient(
        RecordingHandle(lambda body: complete_plainly(failed, body)), "m", logprobs=False
    )
    with pytest.raises(EngineUnavailableError, match="m failed the request"):
        await client.complete([], max_tokens=4, call=EngineCall("r1", "reason_small", PromptKind.REASONING))


async def test_a_body_the_models_schema_refuses_is_our_bug_not_an_unavailable_model():
    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.contracts import EngineCall
    from serve_app.core.prompts import PromptKind

    async def never(request):
        raise AssertionError("an invalid body reached the engine")
        yield

    client = LLMServerClient(RecordingHandle(lambda body: complete_plainly(never, body)), "m")
    call = EngineCall("r1", "short_small", PromptKind.SIMPLE)
    with pytest.raises(RuntimeError, match="refused a cascade call's body"):
        await client.complete([{"role": "user", "content": 5}], max_tokens=4, call=call)


async def test_cancelling_a_call_cancels_the_handles_response():
    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.contracts import EngineCall
    from serve_app.core.prompts import PromptKind

    async def slow(body):
        await asyncio.sleep(60)

    handle = RecordingHandle(slow)
    replies = []
    remote = handle.remote
    handle.remote = lambda body, call=None: replies.append(remote(body, call)) or replies[-1]
    client = LLMServerClient(handle, "m")
    call = EngineCall("r1", "short_small", PromptKind.SIMPLE)
    task = asyncio.ensure_future(client.complete([], max_tokens=4, call=call))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [reply.cancelled for reply in replies] == [True]


async def test_an_audits_calls_carry_its_engine_priority_and_served_calls_none():
    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.contracts import EngineCall
    from serve_app.core.prompts import PromptKind

    handle = RecordingHandle(response("Yes", None))
    client = LLMServerClient(handle, "m", logprobs=False)
    messages = [{"role": "user", "content": "Hi"}]
    await client.complete(messages, max_tokens=4, call=EngineCall("r1", "short_small", PromptKind.SIMPLE))
    audit = EngineCall("audit-r1", "reasoning", PromptKind.REASONING, "text", priority=5, audit=True)
    await client.complete(messages, max_tokens=4, call=audit)
    assert [engine_request(body).priority for body in handle.requests] == [0, 5]  # vLLM's default is 0


async def test_a_constrained_call_asks_vllm_for_structured_outputs_and_a_free_one_does_not():
    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.answer_forms import answer_form
    from serve_app.core.contracts import ConstraintRejectedError, EngineCall
    from serve_app.core.prompts import PromptKind

    regex = answer_form("yes_no").regex(PromptKind.SIMPLE)
    handle = RecordingHandle(response("[[yes]]", None))
    client = LLMServerClient(handle, "m", logprobs=False)
    messages = [{"role": "user", "content": "Hi"}]
    await client.complete(messages, max_tokens=4, call=EngineCall("r1", "short_small", PromptKind.SIMPLE))
    constrained = EngineCall("r1", "short_large", PromptKind.SIMPLE, "yes_no", constraint=regex)
    await client.complete(messages, max_tokens=4, call=constrained)
    free, asked = (engine_request(body) for body in handle.requests)
    assert free.structured_outputs is None and asked.structured_outputs.regex == regex  # vLLM's type
    refused = {"error": {"code": 400, "message": "xgrammar could not compile the regex", "type": ""}}
    with pytest.raises(ConstraintRejectedError):
        _completion_of(refused, "m", 0.1, constrained=True)


def test_an_audit_priority_needs_engines_that_schedule_by_priority():
    base = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    audit = {"cascade": {"audit": {"priority": 1}}}
    with pytest.raises(ValueError) as refused:
        AppConfig.model_validate(base | audit)
    assert "small.engine_kwargs.scheduling_policy and large.engine_kwargs.scheduling_policy" in str(
        refused.value
    )
    by_priority = {"engine_kwargs": {"scheduling_policy": "priority"}}
    small = base["small"] | by_priority
    with pytest.raises(ValueError, match=r"set large\.engine_kwargs\.scheduling_policy: priority"):
        AppConfig.model_validate(base | audit | {"small": small})
    config = AppConfig.model_validate(base | audit | {"small": small, "large": base["large"] | by_priority})
    assert config.cascade.audit.priority == 1
    with pytest.raises(ValueError, match="priority"):
        AppConfig.model_validate(base | {"cascade": {"audit": {"priority": -1}}})  # ahead of served calls


def test_a_body_carries_its_messages_where_ray_serve_llms_prefix_cache_router_reads_them():
    """prefix_cache_routing: the router reads ``messages`` off a call's first argument."""
    from types import SimpleNamespace

    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
        PrefixCacheAffinityRouter,
    )

    from serve_app.clients.llm_server import LLMServerClient
    from serve_app.core.contracts import EngineCall
    from serve_app.core.prompts import PromptKind

    client = LLMServerClient(RecordingHandle(None), "m")
    messages = [{"role": "user", "content": [{"type": "text", "text": "Is the square red?"}]}]
    body = client.body(messages, max_tokens=4, call=EngineCall("r1", "short_small", PromptKind.SIMPLE))
    router = object.__new__(PrefixCacheAffinityRouter)
    text = router._extract_text_from_request(SimpleNamespace(args=[body], kwargs={}))
    assert "Is the square red?" in text
    assert engine_request(body).messages == messages  # and it is still the plain body


async def test_a_body_vllms_checks_across_fields_refuse_is_our_bug_too():
    """vLLM's own validators raise its VLLMValidationError, which pydantic does not wrap."""

    async def never(request):
        raise AssertionError("an invalid body reached the engine")
        yield

    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2}
    reply = await complete_plainly(never, body)
    assert "top_logprobs" in reply["invalid"]
    with pytest.raises(RuntimeError, match="refused a cascade call's body"):
        _completion_of(reply, "m", 0.1)


def test_the_completion_names_the_replica_its_reply_names():
    assert _completion_of({**response("[[Yes]]"), "replica": "r-7"}, "m", 0.1).replica == "r-7"
    assert _completion_of(response("[[Yes]]"), "m", 0.1).replica is None  # a reply from outside Serve
