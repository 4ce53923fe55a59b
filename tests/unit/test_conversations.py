"""Follow-up turns and several images through the cascade: what fits, what every stage reads, what is
refused (cascade policies) or passed through (``mai``), and how each request is counted."""

from __future__ import annotations

import asyncio
import functools

import pytest

from serve_app.config import AppConfig
from serve_app.core.audit import AuditBook, MergedAudits
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions
from serve_app.core.prompts import PromptKind, Turn, build_messages
from serve_app.core.question_parsing import read_question
from serve_app.edge.errors import RequestError
from serve_app.edge.routing import Passthrough, destination, destination_reasons

from ..images import chat_body, data_url
from .build import chat_job
from .fakes import ScriptedVLM

MODELS = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
TWO = {"engine_kwargs": {"limit_mm_per_prompt": {"image": 2}}}
CONFIG = AppConfig.model_validate(
    {
        "small": MODELS["small"] | TWO,
        "large": MODELS["large"] | TWO,
        "limits": {"max_images": 2, "max_context_turns": 4, "max_prompt_bytes": 2000},
    }
)
RED, BLUE = data_url("PNG"), data_url("JPEG")


def image(url: str = RED) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def text(words: str) -> dict:
    return {"type": "text", "text": words}


def follow_up(model: str = "mai", question: str = "Is it round?") -> dict:
    """What is the colour? -> red -> ``question``, the image in the first turn."""
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [image(), text("What is the color of the shape?")]},
            {"role": "assistant", "content": "red"},
            {"role": "user", "content": question},
        ],
    }


def two_images(model: str = "mai", question: str = "Do the two shapes have the same color?") -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": [image(RED), image(BLUE), text(question)]}],
    }


def refused(config: AppConfig, body: dict) -> RequestError:
    with pytest.raises(RequestError) as error:
        chat_job(config, body)
    return error.value


def test_a_follow_up_runs_the_cascade_on_its_last_turn_with_the_conversation_as_context():
    job = chat_job(CONFIG, follow_up())
    question = job.question
    assert question.question == "Is it round?" and question.kind == "yes_no" and question.images == ()
    assert question.system == ("Be brief.",)
    [asked, answered] = question.context
    assert (asked.role, asked.text, len(asked.images)) == ("user", "What is the color of the shape?", 1)
    assert asked.images[0].startswith("data:image/png;base64,")  # checked like the question's own
    assert (answered.role, answered.text, answered.images) == ("assistant", "red", ())
    assert question.image_url == asked.images[0] and question.image_count == 1


def test_two_images_in_one_turn_are_both_read_in_order():
    job = chat_job(CONFIG, two_images())
    assert [url[:15] for url in job.question.images] == ["data:image/png;", "data:image/jpeg"]
    assert job.question.kind == "yes_no" and job.question.context == ()


def test_every_stage_reads_the_conversation_and_the_images_before_its_own_text():
    small = ScriptedVLM({PromptKind.SIMPLE: "[[yes]]", PromptKind.REASONING: "It is round. [[no]]"})
    large = ScriptedVLM({PromptKind.SIMPLE: "[[no]]"})
    question = chat_job(CONFIG, follow_up()).question
    result = asyncio.run(Cascade(small=small, large=large).run(question, CascadeOptions(policy="cascade")))
    assert result.route == "agree_reasoned" and result.answer == "no"
    assert result.trace.context_turns == 2 and result.trace.images == 1
    calls = [*small.calls, *large.calls]
    assert len(calls) == 3
    prefixes = [call.messages[:-1] for call in calls]
    assert all(prefix == prefixes[0] for prefix in prefixes)  # one prefix for the engine's cache
    system, user, assistant = prefixes[0]
    assert system == {"role": "system", "content": "Be brief."}
    assert user["content"][0]["type"] == "image_url" and user["content"][1]["text"].startswith("What is")
    assert assistant == {"role": "assistant", "content": "red"}
    for call in calls:
        last = call.messages[-1]
        assert last["role"] == "user" and [part["type"] for part in last["content"]] == ["text"]
        assert last["content"][0]["text"].startswith("Is it round?")


def test_a_single_image_question_is_laid_out_as_before():
    """No context, one image: the message every stage sent before conversations were read."""
    messages = build_messages(["data:x"], "Is it red?", (), "yes_no", PromptKind.SIMPLE, system=["Be brief."])
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:x"}},
                {
                    "type": "text",
                    "text": "Is it red?\nWithout thinking, directly answer the question using a single word "
                    "or phrase in the format: [[answer]]",
                },
            ],
        },
    ]
    several = build_messages(["a", "b"], "Same?", (), "yes_no", PromptKind.SIMPLE)
    assert [part.get("image_url") for part in several[0]["content"][:2]] == [{"url": "a"}, {"url": "b"}]
    context = build_messages([], "And?", (), "text", PromptKind.SIMPLE, context=[Turn("user", "", ("a",))])
    assert context[0] == {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a"}}]}


def test_read_question_takes_the_images_and_the_question_has_none_without_them():
    assert read_question("Is it red?").image_url is None
    assert read_question("Is it red?", images=["a", "b"]).image_count == 2


@pytest.mark.parametrize(
    ("change", "code", "cause"),
    [
        # an image in an assistant turn
        (lambda m: m[2].update(content=[image(), text("red")]), "misplaced_image", "image_in_assistant"),
        # an image part in a system message
        (lambda m: m[0].update(content=[image(), text("Be brief.")]), "misplaced_image", "image_in_system"),
        # two user turns in a row
        (lambda m: m[2].update(role="user"), "invalid_conversation", "turn_order"),
        # the conversation starts with the assistant
        (lambda m: m.insert(1, {"role": "assistant", "content": "Hi"}), "invalid_conversation", "turn_order"),
        # a tool's turn
        (
            lambda m: m.__setitem__(2, {"role": "tool", "content": "x", "tool_call_id": "1"}),
            "unsupported_conversation",
            "tool_calls",
        ),
        # an assistant turn that calls tools
        (
            lambda m: m[2].update(tool_calls=[{"id": "1", "type": "function", "function": {"name": "f"}}]),
            "unsupported_conversation",
            "tool_calls",
        ),
        # more images than limits.max_images, across the turns
        (
            lambda m: m[3].update(content=[image(), image(BLUE), text("And these?")]),
            "too_many_images",
            "images",
        ),
        # more turns before the question than limits.max_context_turns (4)
        (
            lambda m: m.__setitem__(
                slice(1, 1),
                [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}] * 2,
            ),
            "context_too_long",
            "context_turns",
        ),
        # more text than limits.max_prompt_bytes (2000)
        (lambda m: m[2].update(content="red " * 600), "context_length_exceeded", "context_bytes"),
        # no image in any turn
        (lambda m: m[1].update(content="What is the color of the shape?"), "missing_image", "no_image"),
    ],
)
def test_a_conversation_that_breaks_a_rule_is_a_400_for_a_cascade_policy_and_passes_through_under_mai(
    change, code, cause
):
    body = follow_up(model="mai-large")
    change(body["messages"])
    error = refused(CONFIG, body)
    assert (error.status, error.code, error.param) == (400, code, "messages"), error.message
    passed = chat_job(CONFIG, body | {"model": "mai"})
    assert isinstance(passed, Passthrough) and passed.model_id == "l" and passed.causes == (cause,)
    assert passed.reason is not None and passed.reason.isascii() and "\n" not in passed.reason  # a header


def test_an_empty_content_or_a_last_turn_of_the_assistant_is_no_fit():
    body = follow_up(model="mai-large")
    body["messages"].append({"role": "assistant", "content": "no"})
    assert refused(CONFIG, body).code == "invalid_conversation"
    body = follow_up(model="mai-large", question="")
    assert refused(CONFIG, body).code == "missing_question"


def test_what_answers_today_still_answers():
    """One image, one turn, and under ``mai`` every conversation the cascade does not take."""
    assert chat_job(CONFIG, chat_body()).question.context == ()
    one = AppConfig.model_validate(MODELS)  # the default: one image
    assert isinstance(chat_job(one, two_images()), Passthrough)
    assert chat_job(one, follow_up()).question.context  # a follow-up with one image is the cascade's


def test_each_request_is_counted_by_its_destination_and_reasons():
    routes = [
        destination(body, CONFIG)
        for body in (
            chat_body(),
            follow_up(),
            two_images(),
            chat_body("Describe the image in detail."),
            chat_body(logprobs=True, frequency_penalty=1, x_unknown_field=2),
            chat_body(model="l"),
        )
    ]
    assert [destination_reasons(routed) for routed in routes] == [
        ("cascade", ("one_image",)),
        ("cascade", ("follow_up",)),
        ("cascade", ("images",)),
        ("passthrough", ("open_generation",)),
        ("passthrough", ("unhonoured:frequency_penalty", "unhonoured:other")),  # never a client's name
        ("passthrough", ("named_model",)),
    ]
    book = AuditBook(window=10)
    for routed in routes:
        book.record_destination(*destination_reasons(routed))
    body = book.destinations_body()
    assert body["cascade"] == {
        "requests": 3,
        "share": 0.5,
        "reasons": {"follow_up": 1, "images": 1, "one_image": 1},
    }
    assert body["passthrough"]["requests"] == 3 and body["passthrough"]["reasons"]["unhonoured:other"] == 1


def test_destination_counts_merge_across_replicas_and_an_older_replica_reports_none():
    first, second = AuditBook(window=10), AuditBook(window=10)
    first.record_destination("cascade", ("follow_up",))
    second.record_destination("passthrough", ("images",))
    merged = AuditBook.merged([first.state(), second.state()], window=10)
    assert merged.destinations_body()["cascade"]["share"] == 0.5
    holder = MergedAudits(window=10)
    holder.count_totals(first.state(), None)
    older = {key: value for key, value in second.state().items() if key != "destinations"}
    holder.count_totals(older, None)  # a replica of the release before: no destinations
    assert holder.destinations_body()["cascade"] == {"requests": 1, "share": 1.0, "reasons": {"follow_up": 1}}
    first.record_destination("cascade", ("one_image",))
    holder.count_totals(
        first.state(),
        {"served_tokens": 0, "audit_tokens": 0, "not_run": {}}
        | {"destinations": {"cascade": 1, "cascade:follow_up": 1}},
    )
    assert holder.destinations_body()["cascade"]["requests"] == 2


@pytest.mark.parametrize(
    ("question", "code", "cause"),
    [
        ([image()], "missing_question", "no_question"),  # a follow-up that is only an image
        ("", "missing_question", "no_question"),
        ("What? " * 2000, "question_too_long", "question_chars"),
    ],
    ids=["image only", "empty", "too long"],
)
def test_a_follow_up_the_cascade_cannot_read_passes_through_under_mai_as_before(question, code, cause):
    loose = AppConfig.model_validate(CONFIG.model_dump() | {"limits": {"max_images": 2}})  # no byte bound
    body = follow_up(model="mai-large")
    body["messages"][-1]["content"] = question
    assert refused(loose, body).code == code
    passed = chat_job(loose, body | {"model": "mai"})
    assert isinstance(passed, Passthrough) and passed.causes == (cause,)


@pytest.mark.parametrize(
    "fields",
    [
        {"function_call": {"name": "f", "arguments": "{}"}, "content": None},
        {"tool_calls": {}},  # not a list, but there
        {"tool_calls": ""},
        {"tool_call_id": "1"},
    ],
)
def test_every_spelling_of_a_tool_call_is_a_tool_turn(fields):
    body = follow_up(model="mai-large")
    body["messages"][2].update(fields)
    assert refused(CONFIG, body).code == "unsupported_conversation"
    assert chat_job(CONFIG, follow_up() | {"messages": body["messages"]}).causes == ("tool_calls",)


def test_an_earlier_turn_is_bounded_like_the_question_whatever_the_prompt_budget():
    config = AppConfig.model_validate(
        CONFIG.model_dump() | {"limits": {"max_images": 2, "max_prompt_bytes": None}}
    )
    body = follow_up(model="mai-large")
    body["messages"][2]["content"] = "x" * (config.limits.max_question_chars + 1)
    error = refused(config, body)
    assert error.code == "question_too_long" and "a turn before the question" in error.message
    assert chat_job(config, body | {"model": "mai"}).causes == ("context_chars",)


def test_an_error_names_at_most_ten_roles():
    body = follow_up(model="mai-large")
    body["messages"][1:1] = [{"role": "user", "content": "Hi"}] * 5000
    message = refused(CONFIG, body).message
    assert "(5003 in all)" in message and len(message) < 400


@pytest.mark.parametrize("question", ["   ", "Is it red? " * 800], ids=["empty", "too long"])
def test_a_follow_ups_question_and_a_single_images_are_judged_by_one_rule(question):
    loose = AppConfig.model_validate(CONFIG.model_dump() | {"limits": {"max_images": 2}})  # no byte bound
    follow = follow_up(model="mai-large", question=question)
    single = {"model": "mai-large", "messages": [{"role": "user", "content": [image(), text(question)]}]}
    errors = [refused(loose, body) for body in (follow, single)]
    assert len({(error.code, error.message) for error in errors}) == 1


def test_the_conversations_bytes_are_counted_once_for_routing_and_the_job(monkeypatch):
    from serve_app.edge import routing

    counted = []
    original = routing.UserTurn.prompt_bytes.func

    def counting(turn):
        counted.append(turn)
        return original(turn)

    monkeypatch.setattr(routing.UserTurn, "prompt_bytes", functools.cached_property(counting))
    routing.UserTurn.prompt_bytes.__set_name__(routing.UserTurn, "prompt_bytes")
    chat_job(CONFIG, follow_up(model="mai-large"))
    assert len(counted) == 1
    body = follow_up(model="mai-large")
    body["messages"][2]["content"] = "red " * 600  # under max_question_chars, over max_prompt_bytes
    error = refused(CONFIG, body)
    assert error.code == "context_length_exceeded" and "limits.max_prompt_bytes" in error.message
