"""What a call samples with on an engine whose checkpoint declares sampling (the released Qwen3-VL's
generation_config.json), by vLLM's own code: the server's defaults as its ``ModelConfig`` reads them
under the engine arguments a shipped GPU config gives, and its ``ChatCompletionRequest``'s precedence
(the request's value, else the server's default, else OpenAI's). A passthrough that leaves a field
unset gets the checkpoint's value, as from vLLM's own server; a cascade call samples as its
``Decoding`` says, whatever the checkpoint declares."""

from pathlib import Path

import pytest
import yaml

from deployments.vlm import engine_kwargs
from serve_app.clients.llm_server import LLMServerClient
from serve_app.config import load_app_config
from serve_app.core.contracts import GREEDY, Decoding, EngineCall
from serve_app.core.prompts import PromptKind
from serve_app.edge.passthrough import chat_request

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Is the sky blue?"}]


@pytest.fixture(scope="module")
def server_defaults() -> dict:
    """The 8B engine's sampling defaults: mai-1gpu.yaml's engine arguments over the released checkpoint."""
    from vllm.config import ModelConfig

    application = yaml.safe_load((ROOT / "configs/mai-1gpu.yaml").read_text())["applications"][0]
    large = load_app_config(application["args"]).large
    model = ModelConfig(
        model=str(ROOT / "configs/checkpoints/qwen3-vl-8b"),
        generation_config=engine_kwargs(large)["generation_config"],
        skip_tokenizer_init=True,
    )
    return model.get_diff_sampling_param()


def sampling(request, defaults: dict):
    """The SamplingParams vLLM's chat server makes of ``request`` (a ChatCompletionRequest)."""
    return request.to_sampling_params(8, defaults)


def test_the_engine_takes_the_checkpoints_released_sampling_as_its_defaults(server_defaults):
    assert server_defaults == {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0}


def test_a_passthrough_that_omits_sampling_gets_the_checkpoints_defaults(server_defaults):
    omitted = sampling(chat_request({"messages": MESSAGES, "max_tokens": 8}, "qwen3-vl-8b"), server_defaults)
    assert (omitted.temperature, omitted.top_k, omitted.top_p) == (0.7, 20, 0.8)
    body = {"messages": MESSAGES, "max_tokens": 8, "temperature": 0.2, "top_k": 5}
    asked = sampling(chat_request(body, "qwen3-vl-8b"), server_defaults)
    assert (asked.temperature, asked.top_k, asked.top_p) == (0.2, 5, 0.8)  # what it sets is kept


@pytest.mark.parametrize(
    ("decoding", "expected"),
    [(GREEDY, (0.0, 0, 1.0)), (Decoding(temperature=1.0, top_p=0.9, seed=3), (1.0, 0, 0.9))],
)
def test_a_cascade_call_samples_as_its_decoding_says_on_any_checkpoint(server_defaults, decoding, expected):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    client = LLMServerClient(None, "qwen3-vl-8b")
    call = EngineCall("r1", "short_large", PromptKind.SIMPLE)
    body = client.body(MESSAGES, max_tokens=8, call=call, decoding=decoding)
    params = sampling(ChatCompletionRequest.model_validate(dict(body)), server_defaults)
    assert (params.temperature, params.top_k, params.top_p) == expected
    assert (params.min_p, params.repetition_penalty, params.presence_penalty) == (0.0, 1.0, 0.0)
    assert params.frequency_penalty == 0.0
