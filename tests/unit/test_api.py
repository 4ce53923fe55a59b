"""Request validation: every bad input is a RequestError (4xx) naming the problem."""

import base64

import pytest

from serve_app.config import AppConfig
from serve_app.core.plans import Plan
from serve_app.edge.body import parse_json
from serve_app.edge.errors import RequestError
from serve_app.edge.routing import Passthrough

from ..images import chat_body, data_url, image_bytes, png_bomb
from .build import answer_job, chat_job

CONFIG = AppConfig.model_validate(
    {
        "small": {"model_id": "s", "source": "org/s"},
        "large": {"model_id": "l", "source": "org/l"},
        "limits": {"max_image_bytes": 200_000, "max_image_pixels": 1_000_000},
    }
)


def chat_error(payload) -> RequestError:
    with pytest.raises(RequestError) as error:
        chat_job(CONFIG, payload)
    return error.value


def test_a_good_chat_request_becomes_a_job():
    job = chat_job(
        CONFIG, chat_body("What is the size of real GDP?\nA. 500\nB. 450\nC. 400", model="mai-transfer")
    )
    assert job.options.policy == "transfer"
    assert job.question.question == "What is the size of real GDP?"
    assert job.question.choices == ("500", "450", "400")
    assert job.question.kind == "choice"
    assert job.question.image_url.startswith("data:image/png;base64,")


def test_explicit_choices_answer_type_options_and_max_tokens():
    body = chat_body(
        "Which?", max_tokens=5, mai={"choices": ["x", "y"], "options": {"eager_reasoning": True}}
    )
    job = chat_job(CONFIG, body)
    assert job.question.choices == ("x", "y") and job.options.plan is Plan.EAGER  # eager names a plan
    assert job.options.max_tokens.simple == 5 and job.options.max_tokens.transfer == 5
    assert job.options.max_tokens.reasoning == CONFIG.cascade.max_tokens.reasoning


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_every_accepted_image_format(fmt):
    job = chat_job(CONFIG, chat_body(image=data_url(fmt)))
    assert job.question.image_url.startswith(f"data:image/{fmt.lower()};base64,")


def test_bare_base64_image_is_accepted_on_the_native_route():
    job = answer_job(CONFIG, {"image": base64.b64encode(image_bytes()).decode(), "question": "Is it red?"})
    assert job.question.kind == "yes_no" and job.model == "mai"


@pytest.mark.parametrize(
    ("payload", "status", "code", "needle"),
    [
        (chat_body(model="gpt-4"), 404, "model_not_found", "unknown model 'gpt-4'"),
        (
            {"model": "mai-large", "messages": [{"role": "system", "content": "hi"}]},
            400,
            "missing_user_message",
            "no user message",
        ),
        ({"model": "mai-small", "messages": []}, 400, "invalid_request", "messages"),
        (
            {"model": "mai", "messages": [], "mai": {"destination": "cascade"}},
            400,
            "invalid_request",
            "messages",
        ),
        (chat_body(model="mai", mai={"destination": "sideways"}), 400, "invalid_request", "mai.destination"),
        (chat_body(model="mai", mai={"route": "sideways"}), 400, "invalid_request", "mai.route"),
        (
            {"model": "mai-large", "messages": [{"role": "user", "content": "Is it red?"}]},
            400,
            "missing_image",
            "no image",
        ),
        (chat_body(question="   "), 400, "missing_question", "question is empty"),
        (chat_body(question="x" * 9000), 400, "question_too_long", "over the limit"),
        (chat_body(image="data:image/png;base64,@@@notbase64@@@"), 400, "invalid_image", "not valid base64"),
        (
            chat_body(image="data:image/png;base64," + base64.b64encode(b"hello, I am text").decode()),
            400,
            "invalid_image",
            "not a PNG, JPEG, WebP or GIF (got 16 bytes of text)",
        ),
        (
            chat_body(image="https://example.com/cat.png"),
            400,
            "remote_image_disabled",
            "remote image URLs are disabled",
        ),
        (chat_body(image="file:///etc/passwd"), 400, "invalid_image", "file: URLs"),
        (chat_body(image="ftp://host/x.png"), 400, "invalid_image", "unsupported image URL scheme 'ftp'"),
        (chat_body(image=data_url(size=(1200, 1000))), 413, "image_too_large", "over the limit of 1000000"),
        (chat_body(image=png_bomb()), 413, "image_too_large", "pixels"),
        (
            chat_body(image="data:image/png;base64," + "A" * 400_000),
            413,
            "image_too_large",
            "larger than the limit",
        ),
        (chat_body(max_tokens=0), 400, "invalid_max_tokens", "max_tokens must be at least 1"),
        (
            chat_body(max_completion_tokens=-3),
            400,
            "invalid_max_tokens",
            "max_completion_tokens must be at least 1",
        ),
        (
            chat_body(mai={"options": {"policy": "large"}}),
            400,
            "invalid_request",
            "unknown field 'mai.options.policy'",
        ),
        (chat_body(mai={"answer_type": "poem"}), 400, "invalid_request", "mai.answer_type"),
        (chat_body(mai={"task": "Chart QA!"}), 400, "invalid_request", "mai.task"),
        (chat_body(mai={"task": "x" * 33}), 400, "invalid_request", "mai.task"),
        (chat_body(mai={"answer_type": "choice"}), 400, "missing_choices", "needs options"),
        (
            chat_body(question="Answer the question using a single word or phrase."),
            400,
            "missing_question",
            "only an answer-format instruction ('Answer the question using a single word or phrase.')",
        ),
        (
            chat_body(question="Which?\nA. cat\nB. dog", mai={"choices": ["cat", "cow"]}),
            400,
            "conflicting_choices",
            "the options written in the question (A. cat, B. dog) differ from the request's choices "
            "(A. cat, B. cow)",
        ),
        ([1, 2], 400, "invalid_json", "JSON object"),
    ],
)
def test_bad_chat_requests(payload, status, code, needle):
    error = chat_error(payload)
    assert (error.status, error.code) == (status, code), error.message
    assert needle in error.message
    assert error.body()["error"]["message"] == error.message


def test_two_images_are_more_than_allowed():
    body = chat_body(model="mai-large")
    body["messages"][0]["content"].insert(0, {"type": "image_url", "image_url": {"url": data_url()}})
    error = chat_error(body)
    assert (
        error.code == "too_many_images"
        and "2 images" in error.message
        and "reads at most 1 (limits.max_images)" in error.message
    )
    forced = body | {"model": "mai", "mai": {"destination": "cascade"}}
    assert chat_error(forced).code == "too_many_images"  # never an image dropped unsaid
    passed = chat_job(CONFIG, body | {"model": "mai"})
    assert isinstance(passed, Passthrough) and passed.reason == "2 images"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"temperature": 3}, "temperature"),  # the model's own schema bounds it, not the cascade's
        ({"messages": []}, "messages"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_image", "image_url": data_url()}]}]},
            "messages.0.content",
        ),
    ],
)
def test_a_mai_body_the_cascade_does_not_read_is_the_large_models_to_judge(change, field):
    passed = chat_job(CONFIG, chat_body(model="mai") | change)
    assert isinstance(passed, Passthrough) and passed.model_id == CONFIG.large.model_id
    assert passed.reason is not None and passed.reason.startswith("a body the cascade does not read")
    assert field in passed.reason and "mai" not in passed.payload
    assert passed.reason.isascii() and "\n" not in passed.reason  # it becomes a header
    forced = chat_body(model="mai", mai={"destination": "cascade"}) | change
    assert chat_error(forced).code == "invalid_request"  # forced to the cascade: its schema refuses


def test_more_cascade_images_than_the_engines_take_cannot_be_configured():
    with pytest.raises(ValueError, match=r"limits.max_images 2 exceeds the 1 image\(s\)"):
        AppConfig.model_validate(CONFIG.model_dump() | {"limits": {"max_images": 2}})
    two = {"engine_kwargs": {"limit_mm_per_prompt": {"image": 2}}}
    config = CONFIG.model_dump()
    config["small"] |= two
    config["large"] |= two
    assert AppConfig.model_validate(config | {"limits": {"max_images": 2}}).limits.max_images == 2


def test_corrupt_png_is_rejected():
    data = image_bytes()
    broken = data[:40] + b"\x00" * 30 + data[70:]
    error = chat_error(chat_body(image="data:image/png;base64," + base64.b64encode(broken).decode()))
    assert error.code == "invalid_image" and "corrupt" in error.message


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"question": "Q?"}, "image: Field required"),
        ({"image": data_url(), "question": "Q?", "policy": "medium"}, "policy"),
        ({"image": data_url(), "question": "Q?", "extra": 1}, "unknown field 'extra'"),
        ({"image": data_url(), "question": "Q?", "choices": ["only one"]}, "choices"),
        ({"image": data_url(), "question": "Q?", "choices": ["a", " "]}, "choices must not be empty"),
    ],
)
def test_bad_native_requests(payload, needle):
    with pytest.raises(RequestError) as error:
        answer_job(CONFIG, payload)
    assert error.value.status == 400 and needle in error.value.message


@pytest.mark.parametrize(
    ("body", "needle"), [(b"", "empty"), (b"{not json", "not valid JSON"), (b"\xff\xfe", "not valid JSON")]
)
def test_malformed_json(body, needle):
    with pytest.raises(RequestError) as error:
        parse_json(body)
    assert error.value.code == "invalid_json" and needle in error.value.message


def test_request_ids_come_from_the_client_when_valid():
    assert chat_job(CONFIG, chat_body(), "client-42.a:b_c").request_id == "client-42.a:b_c"
    assert len(answer_job(CONFIG, {"image": data_url(), "question": "Q?"}).request_id) == 32
    for bad in ("", "has space", "x" * 129, "semi;colon"):
        with pytest.raises(RequestError) as error:
            chat_job(CONFIG, chat_body(), bad)
        assert error.value.code == "invalid_request_id"


def test_config_rejects_unknown_keys_by_name():
    with pytest.raises(ValueError, match="max_replica"):
        AppConfig.model_validate(
            {
                "small": {
                    "model_id": "s",
                    "source": "x",
                    "autoscaling": {"target_ongoing_requests": 1, "max_replica": 3},
                },
                "large": {"model_id": "l", "source": "y"},
            }
        )
    with pytest.raises(ValueError, match="different model_id"):
        AppConfig.model_validate(
            {"small": {"model_id": "m", "source": "x"}, "large": {"model_id": "m", "source": "y"}}
        )
    with pytest.raises(ValueError, match="min_replicas"):
        AppConfig.model_validate(
            {
                "small": {
                    "model_id": "s",
                    "source": "x",
                    "autoscaling": {"target_ongoing_requests": 1, "min_replicas": 3, "max_replicas": 2},
                },
                "large": {"model_id": "l", "source": "y"},
            }
        )


@pytest.mark.parametrize("value", [1.5, -0.1, True, "high", [0.5]])
@pytest.mark.parametrize("option", ["min_confidence", "confident_large"])
def test_confidence_options_out_of_range_or_not_numbers_are_400s_naming_them(option, value):
    with pytest.raises(RequestError) as error:
        chat_job(CONFIG, chat_body(mai={"options": {option: value}}))
    assert error.value.status == 400 and option in error.value.param and option in error.value.message


def test_confidence_options_reach_the_job():
    job = chat_job(CONFIG, chat_body(mai={"options": {"min_confidence": 0.8, "confident_large": 1}}))
    assert (job.options.min_confidence, job.options.confident_large) == (0.8, 1.0)
    assert chat_job(CONFIG, chat_body()).options.min_confidence == 0  # the paper's rule by default
    calibrated = CONFIG.model_copy(
        update={"cascade": CONFIG.cascade.model_copy(update={"confident_large": 0.9})}
    )
    assert chat_job(calibrated, chat_body()).options.confident_large == 0.9
    paper = chat_job(calibrated, chat_body(mai={"options": {"min_confidence": 0, "confident_large": None}}))
    assert (paper.options.min_confidence, paper.options.confident_large) == (0, None)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"model": "mai", "messages": [{"role": "user", "content": "Is it red?"}]}, "no image"),
        (chat_body(model="mai") | {"messages": chat_body()["messages"] * 2}, "do not alternate"),
        (chat_body("Describe this image in detail."), "open generation"),
        (chat_body("Is it red? Explain why."), "open generation"),
        (chat_body(n=2), "n"),
        (chat_body(stop=["."]), "stop"),
        (chat_body(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        (chat_body(mai={"destination": "passthrough"}), "the request's mai.destination"),
    ],
)
def test_mai_sends_what_it_does_not_fit_to_the_large_model(body, reason):
    job = chat_job(CONFIG, body)
    assert isinstance(job, Passthrough) and job.model_id == "l" and reason in job.reason


def test_mai_runs_the_cascade_where_it_fits_whatever_the_cap():
    body = chat_body("Is the shape red?", max_tokens=1024, temperature=0, n=1, user="u1")
    body["messages"].insert(0, {"role": "system", "content": "Answer in French."})
    job = chat_job(CONFIG, body)
    assert not isinstance(job, Passthrough) and job.question.system == ("Answer in French.",)
    budgets = CONFIG.cascade.max_tokens
    assert job.options.max_tokens == budgets  # 1024 caps nothing: every stage keeps its budget
    assert chat_job(CONFIG, chat_body(max_tokens=5)).options.max_tokens.simple == 5
    forced = chat_job(CONFIG, chat_body("Describe it.", mai={"destination": "cascade"}))
    assert not isinstance(forced, Passthrough)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Tell me whether the shape is red.", "yes_no"),
        ("Can you tell me if it is a circle?", "yes_no"),
        ("Could you tell me the number of shapes?", "number"),
        ("Please tell us the total of the bars.", "number"),
    ],
)
def test_an_instruction_that_asks_a_closed_kind_is_the_cascades_not_open_generation(text, kind):
    job = chat_job(CONFIG, chat_body(text))
    assert not isinstance(job, Passthrough) and job.question.kind == kind
    open_one = chat_job(CONFIG, chat_body("Tell me about the picture."))
    assert isinstance(open_one, Passthrough) and "open generation" in open_one.reason


def test_an_instruction_to_tell_an_attribute_asks_a_short_answer():
    job = chat_job(CONFIG, chat_body("Tell me the colour of the circle."))
    assert not isinstance(job, Passthrough) and job.question.kind == "text"
    for text in (
        "Tell me a story about it.",
        "Can you tell me why it is red?",
        "Tell us more.",
        "Tell me what you see.",
        "Could you tell me what colour the car is?",
        "Tell me in detail what the chart shows.",
        "Tell me the story behind this picture.",
    ):
        assert isinstance(chat_job(CONFIG, chat_body(text)), Passthrough), text


def test_sampling_and_logprobs_become_every_stages_decoding():
    body = chat_body(temperature=0.7, top_p=0.9, seed=3, logprobs=True, top_logprobs=2)
    job = chat_job(CONFIG, body)
    assert not isinstance(job, Passthrough)
    decoding = job.options.decoding
    assert (decoding.temperature, decoding.top_p, decoding.seed) == (0.7, 0.9, 3)
    assert (decoding.logprobs, decoding.top_logprobs) == (True, 2)
    greedy = chat_job(CONFIG, chat_body(model="mai-large-reason")).options.decoding
    assert (greedy.temperature, greedy.top_p, greedy.seed, greedy.logprobs) == (0, 1, None, False)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"n": 0}, "n"),
    ],
)
def test_bad_sampling_values_are_refused_by_name(extra, param):
    error = chat_error(chat_body(model="mai-transfer", **extra))
    assert (error.status, error.param) == (400, param)


@pytest.mark.parametrize(
    "extra", [{"n": 2}, {"stop": ["."]}, {"presence_penalty": 0.5}, {"response_format": {}}]
)
def test_other_cascade_policies_refuse_what_they_cannot_honour(extra):
    [name] = extra
    error = chat_error(chat_body(model="mai-large-reason", **extra))
    assert (error.status, error.param, error.code) == (400, name, "unsupported_parameter")
    assert "model 'l'" in error.message


def test_cascade_policies_read_a_follow_up_and_every_system_message():
    conversation = chat_body(model="mai-large")
    conversation["messages"] += [
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "Sure?"},
    ]
    job = chat_job(CONFIG, conversation)
    assert [turn.role for turn in job.question.context] == ["user", "assistant"]
    assert job.question.question == "Sure?" and job.question.images == ()
    body = chat_body(model="mai-large")
    body["messages"][:0] = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "developer", "content": "Answer in French."},
    ]
    assert chat_job(CONFIG, body).question.system == ("Be brief.", "Answer in French.")


def test_a_seed_no_engine_takes_is_a_400_naming_it():
    """vLLM takes a 64-bit seed. The cascade's schema refuses a larger one, so a ``mai`` body with it
    goes to the large model, whose schema refuses it with a 400."""
    from serve_app.edge.passthrough import chat_request

    routed = chat_job(CONFIG, chat_body("Is it red?", seed=2**64))
    assert isinstance(routed, Passthrough) and routed.reason.endswith("(at seed)")
    with pytest.raises(RequestError) as error:
        chat_request(routed.payload, routed.model_id)
    assert error.value.status == 400 and error.value.param == "seed"


def test_the_servers_top_logprobs_need_logprobs_in_the_config_and_in_a_request():
    with pytest.raises(ValueError, match=r"top_logprobs \(2\) needs logprobs"):
        AppConfig.model_validate(CONFIG.model_dump() | {"cascade": {"decoding": {"top_logprobs": 2}}})
    decoding = {"decoding": {"top_logprobs": 2, "logprobs": True}}
    config = AppConfig.model_validate(CONFIG.model_dump() | {"cascade": decoding})
    with pytest.raises(RequestError) as error:
        chat_job(config, chat_body("Is it red?", logprobs=False))
    assert error.value.status == 400 and error.value.param == "top_logprobs"
    assert "top_logprobs (2) needs logprobs: true" in str(error.value)
    with pytest.raises(RequestError) as error:
        chat_job(CONFIG, chat_body("Is it red?", top_logprobs=3))
    assert error.value.param == "top_logprobs" and "top_logprobs (3) needs logprobs: true" in str(error.value)


@pytest.mark.parametrize("text", ["Listen, is the shape red?", "Listed here: is the shape red?"])
def test_a_word_that_begins_like_a_generating_verb_is_no_instruction(text):
    job = chat_job(CONFIG, chat_body(text))
    assert not isinstance(job, Passthrough), job.reason


@pytest.mark.parametrize(
    "text",
    [
        "Can you please describe the image?",
        "Will you describe the image?",
        "Question: Describe the image in detail.",
        "Please summarise the chart.",
    ],
)
def test_routing_reads_open_generation_as_the_question_reader_does(text):
    # One reader: what routing sends to the large model as open generation is what the question
    # reader reads as an instruction for open text, after the same polite forms and "Question:" label.
    routed = chat_job(CONFIG, chat_body(text))
    assert isinstance(routed, Passthrough) and "open generation" in routed.reason
    forced = chat_job(CONFIG, chat_body(text, mai={"destination": "cascade"}))
    assert not isinstance(forced, Passthrough) and forced.question.kind == "text"
