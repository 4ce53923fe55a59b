"""A request for a model id is an allowlist: its fields, its messages' fields, its content parts (text,
and images in every spelling vLLM accepts, each checked and rewritten as a data URL) and its sampling
bounds. Everything else is a 4xx naming it, before any engine sees the request."""

import asyncio

import pytest

from serve_app.config import Limits
from serve_app.edge.errors import RequestError
from serve_app.edge.passthrough_body import CLIENT_FIELDS, SERVER_FIELDS, checked_body

from ..images import data_url, png_bomb

IMAGE = data_url()
REMOTE = "http://127.0.0.1:9/metadata"


def body(*parts, **fields):
    content = [*parts, {"type": "text", "text": "What is it?"}]
    return {"model": "l", "messages": [{"role": "user", "content": content}], **fields}


def check(payload, limits=None, fetched=None):
    async def fetch(url, param):
        if fetched is None:
            raise AssertionError(f"{url} was fetched")
        fetched.append((url, param))
        return IMAGE

    return asyncio.run(checked_body(payload, limits or Limits(), fetch))


def refused(payload, limits=None) -> RequestError:
    with pytest.raises(RequestError) as error:
        check(payload, limits)
    return error.value


SPELLINGS = {
    "typed, an object": {"type": "image_url", "image_url": {"url": "URL"}},
    "typed, a string": {"type": "image_url", "image_url": "URL"},
    "typed, detail auto": {"type": "image_url", "image_url": {"url": "URL", "detail": "auto"}},
    "typeless, a string": {"image_url": "URL"},
    "typeless, an object": {"image_url": {"url": "URL"}},
    "input_image": {"type": "input_image", "image_url": "URL"},
}


def spelt(name, url):
    part = SPELLINGS[name]
    image = part["image_url"]
    return {**part, "image_url": {**image, "url": url} if isinstance(image, dict) else url}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_every_image_spelling_is_checked_and_sent_as_one_data_url(name):
    checked = check(body(spelt(name, IMAGE)))
    assert checked["messages"][0]["content"][0] == {"type": "image_url", "image_url": {"url": IMAGE}}
    remote = refused(body(spelt(name, REMOTE)))  # remote images off: the engines never see the URL
    assert (remote.status, remote.param) == (400, "messages.0.content.0.image_url")
    assert "remote image URLs are disabled" in remote.message
    bomb = refused(body(spelt(name, png_bomb())))
    assert bomb.status == 413 and "pixels" in bomb.message


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_an_allowed_remote_image_in_any_spelling_is_downloaded_here(name):
    limits = Limits(allow_remote_images=True, remote_image_hosts=["images.example.com"])
    fetched: list = []
    url = "https://images.example.com/a.png"
    checked = check(body(spelt(name, url)), limits, fetched)
    assert fetched == [(url, "messages.0.content.0.image_url")]
    assert checked["messages"][0]["content"][0]["image_url"] == {"url": IMAGE}


@pytest.mark.parametrize(
    "part",
    [
        {"type": "audio_url", "audio_url": {"url": REMOTE}},
        {"type": "video_url", "video_url": {"url": REMOTE}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "image_embeds", "image_embeds": "AAAA"},
        {"type": "image_pil", "image_pil": None},
        {"type": "refusal", "refusal": "no"},
        {"audio_url": REMOTE},
        {"video_url": {"url": REMOTE}},
        {"prompt_embeds": {"data": "AAAA"}},
        {"uuid": "someone-elses-image", "image_url": None},
        {"type": "image_url", "image_url": {"url": IMAGE}, "uuid": "x"},
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": 3},
        7,
    ],
)
def test_any_other_part_is_a_400_naming_it(part):
    error = refused(body(part))
    assert error.status == 400 and error.param.startswith("messages.0.content.0")


def test_openais_image_details_are_taken_and_others_refused():
    for detail in ("auto", "low", "high"):
        checked = check(body({"type": "image_url", "image_url": {"url": IMAGE, "detail": detail}}))
        assert checked["messages"][0]["content"][0] == {"type": "image_url", "image_url": {"url": IMAGE}}
    error = refused(body({"type": "image_url", "image_url": {"url": IMAGE, "detail": "ultra"}}))
    assert (error.status, error.param) == (400, "messages.0.content.0.image_url.detail")


def test_what_clients_replay_in_a_conversation_passes():
    payload = body("a plain string part is text", chat_template_kwargs={"enable_thinking": False})
    payload["messages"] += [
        {"role": "assistant", "content": "yes", "reasoning_content": "it is red", "refusal": None},
        {"role": "user", "content": ["and now?"]},
    ]
    assert check(payload)["messages"] == payload["messages"]
    template = refused(body(chat_template_kwargs={"chat_template": "{{ 7 * 7 }}"}))
    assert (template.status, template.param) == (400, "chat_template_kwargs.chat_template")


def test_tool_call_arguments_get_the_bodys_json_bounds():
    payload = body()
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[" * 40 + "]" * 40}}
    payload["messages"].append({"role": "assistant", "content": None, "tool_calls": [call]})
    error = refused(payload)
    assert error.code == "invalid_json" and "levels deep" in error.message
    call["function"]["arguments"] = '{"x": [1, 2]}'
    assert check(payload)["messages"][1]["tool_calls"] == [call]
    call["function"]["arguments"] = '{"x": "\\ud83d\\ude00 a pair, then \\ud800 alone"}'  # JSON in JSON
    error = refused(payload)
    assert (error.code, error.param) == ("invalid_text", "messages.1.tool_calls.0.function.arguments.x")
    call["function"]["arguments"] = '{"x": "\\ud83d\\ude00"} not JSON'  # the engine keeps it as it is
    assert check(payload)["messages"][1]["tool_calls"] == [call]


def test_an_image_only_request_is_refused_before_any_download():
    limits = Limits(allow_remote_images=True, remote_image_hosts=["images.example.com"])
    payload = {
        "model": "l",
        "messages": [{"role": "user", "content": [{"image_url": "https://images.example.com/a"}]}],
    }
    with pytest.raises(RequestError) as error:
        check(payload, limits)  # ``check`` fails the test if anything is fetched
    assert error.value.code == "missing_text"


def test_images_count_across_spellings_and_messages():
    two = body({"image_url": IMAGE}, {"type": "input_image", "image_url": IMAGE})
    error = refused(two, Limits(max_passthrough_images=1))
    assert (error.code, error.param) == ("too_many_images", "messages")
    assert len(check(two, Limits(max_passthrough_images=2))["messages"][0]["content"]) == 3


@pytest.mark.parametrize("field", sorted(SERVER_FIELDS))
def test_what_only_the_server_sets_is_refused(field):
    error = refused(body(**{field: 1}))
    assert (error.status, error.param) == (400, field) and "set by the server" in error.message


@pytest.mark.parametrize("field", ["use_beam_search", "prompt_logprobs", "documents_", "temprature"])
def test_a_field_outside_the_allowlist_is_refused(field):
    error = refused(body(**{field: True}))
    assert (error.status, error.param) == (400, field) and repr(field) in error.message


def test_message_fields_are_allowlisted():
    payload = body()
    payload["messages"][0]["uuid"] = "x"
    error = refused(payload)
    assert (error.status, error.param) == (400, "messages.0.uuid")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 9}, "n"),
        ({"max_tokens": 4097}, "max_tokens"),
        ({"max_completion_tokens": 10**9}, "max_completion_tokens"),
        ({"min_tokens": 5000, "max_tokens": 10}, "min_tokens"),
        ({"ignore_eos": True, "max_tokens": 100_000}, "max_tokens"),
        ({"n": 8, "max_tokens": 4096, "min_tokens": 4096, "ignore_eos": True}, "max_tokens"),
        ({"n": 5, "max_completion_tokens": 4000, "max_tokens": 10}, "max_completion_tokens"),
        ({"stop": ["."] * 17}, "stop"),
        ({"logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias"),
    ],
)
def test_decode_work_is_bounded_by_configuration(fields, param):
    error = refused(body(**fields))
    assert (error.status, error.param) == (400, param) and "at most" in error.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("n", "64"), ("max_completion_tokens", "16000"), ("max_tokens", 16000.0), ("n", True)],
)
def test_counts_must_be_json_integers(field, value):
    error = refused(body(**{field: value}))
    assert (error.status, error.param) == (400, field) and "must be an integer" in error.message


def test_the_reply_budget_is_the_bound_when_the_request_sets_none():
    assert check(body())["max_tokens"] == 4096
    assert check(body(), Limits(max_passthrough_tokens=64))["max_tokens"] == 64
    assert check(body(max_tokens=7))["max_tokens"] == 7
    assert "max_tokens" not in check(body(max_completion_tokens=7))
    sent = body(n=8, temperature=0.5, top_k=20, stop=["."], logprobs=True, top_logprobs=3)
    assert check(sent) == sent | {"max_tokens": 2048}  # 8 choices within the 16384 of a request
    assert check(body(n=4, max_tokens=4096))["max_tokens"] == 4096  # 4 × 4096: within it
    assert check(body(n=3), Limits(max_passthrough_decode_tokens=10))["max_tokens"] == 3


def test_the_allowlists_do_not_overlap():
    assert not CLIENT_FIELDS & SERVER_FIELDS
