"""What the client reads from an engine's response (objects shaped like vLLM's ChatCompletionResponse)."""

import math
from types import SimpleNamespace as Obj

import pytest

from serve_app.client import EngineError, _completion_of
from serve_app.config import AppConfig


def response(content: str, logprobs=None):
    choice = Obj(
        message=Obj(content=content), logprobs=Obj(content=logprobs) if logprobs is not None else None
    )
    return Obj(choices=[choice], usage=Obj(prompt_tokens=12, completion_tokens=3), error=None)


def test_the_generated_tokens_and_their_logprobs_are_kept():
    tokens = [
        Obj(token="[[", logprob=-0.01),
        Obj(token="Yes", logprob=math.log(0.8)),
        Obj(token="]]", logprob=0.0),
    ]
    completion = _completion_of(response("[[Yes]]", tokens), "m", 0.2)
    assert [t.token for t in completion.token_logprobs] == ["[[", "Yes", "]]"]
    assert math.isclose(completion.token_logprobs[1].logprob, math.log(0.8))
    assert (completion.prompt_tokens, completion.completion_tokens) == (12, 3)


def test_an_engine_without_logprobs_gives_none():
    assert _completion_of(response("[[Yes]]"), "m", 0.1).token_logprobs is None
    assert _completion_of(response("[[Yes]]", []), "m", 0.1).token_logprobs is None


def test_an_error_response_is_an_engine_error():
    with pytest.raises(EngineError, match="m: boom"):
        _completion_of(Obj(error=Obj(message="boom")), "m", 0.1)


def test_confidence_rules_need_logprobs():
    base = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    with pytest.raises(ValueError, match="answer_logprobs"):
        AppConfig.model_validate(base | {"answer_logprobs": False, "cascade": {"min_confidence": 0.5}})
    with pytest.raises(ValueError, match="answer_logprobs"):
        AppConfig.model_validate(base | {"answer_logprobs": False, "cascade": {"confident_large": 0.9}})
    assert AppConfig.model_validate(base | {"answer_logprobs": False}).cascade.min_confidence == 0
