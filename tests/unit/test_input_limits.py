"""Input the models would refuse is refused first, as a 400 naming the cause: JSON past its nesting,
key or number limits; images whose shape the models' image processor refuses; prompts that cannot fit
the engines' context; and, when a model refuses anyway, its 4xx is the client's error, not a 503."""

import asyncio
import json

import pytest

from serve_app.clients.failures import error_response_failure, input_error_code
from serve_app.clients.llm_server import _completion_of
from serve_app.config import AppConfig, Limits
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions, EngineUnavailableError, InputRejectedError, Policy
from serve_app.core.prompts import PromptKind
from serve_app.core.question_parsing import read_question
from serve_app.edge.body import parse_json
from serve_app.edge.errors import RequestError, request_error_of
from serve_app.engine_config.model_limits import context_budgets, geometry, with_model_limits

from ..images import chat_body, data_url
from .build import answer_job, chat_job
from .fakes import ScriptedVLM

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER
MODELS = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}


def refused(call, *args, **kwargs) -> RequestError:
    with pytest.raises(RequestError) as error:
        call(*args, **kwargs)
    return error.value


# ---------------------------------------------------------------- JSON


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests more than 32 levels deep"),
        (b'{"a": ' + b"[" * 33 + b"]" * 33 + b"}", "nests more than 32 levels deep"),
        (b'{"n": ' + b"9" * 5000 + b"}", "5000 characters"),
        (b'{"n": -1.' + b"5" * 100 + b"}", "103 characters"),
        (json.dumps({f"k{i}": i for i in range(10_001)}).encode(), "more than 10000 keys"),
        (b"[" + b"0," * 100_001 + b"0]", "more than 100000 values"),
        (b'["' + b'ab"ab"' * 120_000 + b'"]', "strings, more than its keys and values"),
        (b"[" * 40 + b'"' + b'\\"' * 50_000, "nests more than 32 levels deep"),
        (b'{"a": "\xff"}', "not UTF-8"),
    ],
)
def test_json_past_its_limits_is_a_400(body, needle):
    error = refused(parse_json, body, Limits())
    assert (error.status, error.code) == (400, "invalid_json") and needle in error.message


def test_json_within_its_limits_parses_and_brackets_in_strings_do_not_count():
    body = json.dumps({"q": "[" * 1000 + "{", "n": [1, -2.5e3, {"x": [None, True]}]}).encode()
    assert parse_json(body, Limits()) == {"q": "[" * 1000 + "{", "n": [1, -2500.0, {"x": [None, True]}]}
    assert parse_json(b"[" * 32 + b"]" * 32, Limits()) is not None
    escaped = {"q": 'a \\"quoted\\" [[word]] {"x": [1, 2]} \\', "n": [[[[1e5]]]], "k": ":,"}
    assert parse_json(json.dumps(escaped).encode(), Limits(max_json_depth=5, max_json_keys=16)) == escaped


# ---------------------------------------------------------------- images and prompts before any model


LIMITED = AppConfig.model_validate(
    MODELS | {"limits": {"max_image_aspect_ratio": 200, "min_image_side": 2, "max_prompt_bytes": 100}}
)


@pytest.mark.parametrize(
    ("size", "needle"), [((2, 600), "aspect ratio of 300"), ((4000, 16), "250"), ((1, 1), "at least 2")]
)
def test_an_image_the_processor_refuses_is_a_400_before_any_model(size, needle):
    error = refused(chat_job, LIMITED, chat_body(image=data_url(size=size)))
    assert (error.status, error.code, error.param) == (
        400,
        "invalid_image",
        "messages",
    ) and needle in error.message
    chat_job(LIMITED, chat_body(image=data_url(size=(2, 400))))  # a ratio of exactly 200 is taken


def test_a_prompt_that_cannot_fit_the_context_is_a_400_before_any_model():
    error = refused(chat_job, LIMITED, chat_body("Is it red? " + "word " * 20))
    assert (error.status, error.code) == (400, "context_length_exceeded") and "at most 100" in error.message
    system = chat_body("Is it red?")
    system["messages"].insert(0, {"role": "system", "content": "é" * 50})  # 100 bytes of system message
    assert refused(chat_job, LIMITED, system).code == "context_length_exceeded"
    native = {"image": data_url(), "question": "Is it red? " * 10}
    assert refused(answer_job, LIMITED, native).param == "question"


def test_the_limits_are_learnt_from_the_served_models_processor_and_context():
    from harness.local_server import config_args
    from serve_app.config import load_app_config

    config = with_model_limits(load_app_config(config_args("mai-cpu.yaml")))
    limits = config.limits
    assert (limits.max_image_aspect_ratio, limits.min_image_side) == (200.0, 1)  # Qwen2-VL's smart_resize
    budgets = config.cascade.max_tokens
    # The demo checkpoints' processors take 128×128 images in patches merged 2×2 (64 image tokens).
    from training.demo.recipes import IMAGE_PIXELS, SPECS

    image_tokens = max(IMAGE_PIXELS // (spec.model.patch_size * 2) ** 2 for spec in SPECS.values())
    assert image_tokens == 64
    images = limits.max_images  # the config's: each at the image budget's bound
    assert images == 2
    assert (
        limits.max_prompt_bytes == 4096 - (budgets.reasoning + budgets.transfer) - images * image_tokens - 512
    )
    kept = config.model_copy(update={"limits": limits.model_copy(update={"max_image_aspect_ratio": 50.0})})
    assert with_model_limits(kept).limits.max_image_aspect_ratio == 50.0  # a configured limit is kept
    # No max_model_len, no processor: nothing to derive the check from.
    assert context_budgets(AppConfig.model_validate(MODELS), [None, None]) is None


def test_geometry_asks_the_processors_own_resize():
    class Processor:
        patch_size, merge_size, size = 14, 2, {"shortest_edge": 3136, "longest_edge": 1_000_000}

    assert geometry(Processor()) == (None, 1)  # no smart_resize in its module: nothing learnt
    from transformers import Qwen2VLImageProcessor

    assert geometry(Qwen2VLImageProcessor()) == (200.0, 1)


# ---------------------------------------------------------------- what a model refuses anyway


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (
            "Failed to apply Qwen3VLProcessor on data={...}: absolute aspect ratio must be smaller than 200",
            "invalid_image",
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
            "context_length_exceeded",
        ),
        ("temperature must be non-negative", "invalid_request"),
    ],
)
def test_an_engines_4xx_names_the_kind_of_input(message, code):
    assert input_error_code(message) == code
    with pytest.raises(InputRejectedError) as error:
        _completion_of({"error": {"message": message, "code": 400}}, "m", 0.1)
    assert error.value.code == code
    with pytest.raises(EngineUnavailableError):
        _completion_of({"error": {"message": message, "code": 500}}, "m", 0.1)
    # The passthrough sorts an engine's error response the same way, and the edge answers it once.
    passed = request_error_of(error_response_failure({"message": message, "code": 413}, "m"))
    assert (passed.status, passed.code) == (413, code) and "Retry-After" not in passed.headers
    failed = request_error_of(error_response_failure({"message": message, "code": 500}, "m"))
    assert failed.status == 503 and failed.headers["Retry-After"]


@pytest.mark.parametrize(
    ("small", "large", "stage"),
    [
        (
            {S: "[[No]]"},
            {S: InputRejectedError("m: Failed to apply processor", "invalid_image")},
            "short_large",
        ),
        (
            {S: "[[No]]", R: InputRejectedError("m: maximum context length", "context_length_exceeded")},
            {S: "[[Yes]]"},
            "reason_small",
        ),
        (
            {S: "[[No]]", R: "x [[No]]"},
            {S: "[[Yes]]", T: InputRejectedError("m: context", "context_length_exceeded")},
            "transfer_large",
        ),
    ],
)
async def test_a_refused_input_fails_the_request_whichever_stage_met_it(small, large, stage):
    small_model, large_model = ScriptedVLM(small), ScriptedVLM(large)
    with pytest.raises(InputRejectedError) as error:
        await Cascade(small_model, large_model).run(
            read_question("Is it red?", images=("data:,",)), CascadeOptions()
        )
    rejected = error.value
    [refusal] = [v for v in (*small.values(), *large.values()) if isinstance(v, InputRejectedError)]
    assert rejected is refusal and rejected.stage == stage  # no degraded route hides it
    assert rejected.model == stage.rsplit("_", 1)[1]
    reply = request_error_of(rejected)
    assert reply.status == 400 and reply.code == refusal.code and repr(stage) in reply.message


async def test_a_refusal_in_stage_one_cancels_the_other_models_call():
    small = ScriptedVLM({S: "[[Yes]]"}, delays={S: 5.0})
    large = ScriptedVLM({S: InputRejectedError("l: Failed to apply processor", "invalid_image")})
    started = asyncio.get_running_loop().time()
    with pytest.raises(InputRejectedError):
        await Cascade(small, large).run(
            read_question("Is it red?", images=("data:,",)), CascadeOptions(policy=Policy.CASCADE)
        )
    assert asyncio.get_running_loop().time() - started < 1 and small.cancelled() == [S]


# ---------------------------------------------------------------- the passthrough's request to the engine


def test_the_passthrough_request_is_fully_validated_and_travels_to_the_replica():
    """vLLM types a system message's content as an Iterable, which pydantic validates lazily into an
    object Ray cannot send (found by the fuzzer as a 500): it arrives as a list, its parts checked."""
    import pickle

    from serve_app.edge.passthrough import chat_request

    system = {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    request = chat_request({"messages": [system, {"role": "user", "content": "hi"}]}, "l")
    assert request.messages[0]["content"] == [{"type": "text", "text": "Be brief."}]
    assert pickle.loads(pickle.dumps(request)).messages[0]["content"] == request.messages[0]["content"]
    broken = {"role": "system", "content": [{"type": "text"}]}
    with pytest.raises(RequestError) as error:
        chat_request({"messages": [broken, {"role": "user", "content": "hi"}]}, "l")
    assert error.value.status == 400 and "text" in error.value.message
