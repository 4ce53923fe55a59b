"""Answers valid by construction (serve_app/core/answer_forms.py): the closed form of each kind as the
regex a stage's completion must match, the stages asking their engine for it, an engine refusing the
grammar, and the options no grammar can tell apart refused before any model runs."""

import re

import pytest

from deployments.emulated_script import constrained_pieces, reply_pieces
from serve_app.clients.failures import error_response_failure
from serve_app.core.answer_forms import AnswerFormError, answer_form, check_choices
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions, ConstraintRejectedError
from serve_app.core.prompts import PromptKind
from serve_app.core.question_parsing import read_question

from .fakes import ScriptedVLM

S, R, T, E = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER, PromptKind.EXPLAIN


def matches(form, prompt_kind, text):
    return re.fullmatch(form.regex(prompt_kind), text) is not None


@pytest.mark.parametrize(
    ("form", "good", "bad"),
    [
        (answer_form("yes_no"), ["[[yes]]", "[[No]]"], ["[[maybe]]", "yes", "[[yes]] ", "[[yes, it is]]"]),
        (answer_form("number"), ["[[12]]", "[[-3.5]]"], ["[[twelve]]", "[[1.]]", "[[12%]]"]),
        (answer_form("choice", ["cat", "dog", "cow"]), ["[[A]]", "[[C]]"], ["[[D]]", "[[cat]]", "[[a]]"]),
        (
            answer_form("choice", ["red", "light blue"], options_named=True),
            ["[[red]]", "[[light blue]]"],
            ["[[A]]", "[[blue]]", "[[green]]"],
        ),
    ],
)
def test_a_short_answer_is_exactly_one_of_the_forms_answers(form, good, bad):
    for prompt_kind in (S, PromptKind.STAGE2, T):
        assert all(matches(form, prompt_kind, text) for text in good)
        assert not any(matches(form, prompt_kind, text) for text in bad)


def test_a_reasoning_is_free_text_up_to_its_final_constrained_answer():
    form = answer_form("yes_no")
    for prompt_kind in (R, E):
        assert matches(form, prompt_kind, "I see a red shape.\nIt is red, so: [[yes]]")
        assert not matches(form, prompt_kind, "I see a red shape. [[maybe]]")
        assert not matches(form, prompt_kind, "[[yes]] because it is red")  # the answer ends it
        assert matches(form, prompt_kind, "It is red [a single bracket]. [[no]]")
        # The first [[ a reasoning writes opens its answer: no [[circle]] to a yes/no question.
        assert not matches(form, prompt_kind, "It is a [[circle]], so [[no]]")


def test_open_text_is_free_and_options_a_grammar_cannot_tell_apart_are_named():
    assert answer_form("text") is None
    with pytest.raises(AnswerFormError, match="options 0 and 2 are the same"):
        answer_form("choice", ["red", "blue", " Red "])
    with pytest.raises(AnswerFormError, match="option 1 is empty"):
        check_choices(["red", "  "])
    with pytest.raises(AnswerFormError, match="needs options"):
        check_choices([])
    # Options with regex syntax are matched literally.
    form = answer_form("choice", ["a+b", "(c)"], options_named=True)
    assert matches(form, S, "[[a+b]]") and matches(form, S, "[[(c)]]") and not matches(form, S, "[[aab]]")


YES_NO = read_question("Is the shape red?", images=("data:image/png;base64,AAAA",))


async def test_every_stage_asks_its_engine_for_the_form_and_the_trace_says_which():
    small = ScriptedVLM({S: "[[no]]", R: "It is red. [[yes]]"})
    large = ScriptedVLM({S: "[[yes]]"})
    result = await Cascade(small, large).run(YES_NO, CascadeOptions(structured_answers=True))
    assert result.route == "agree_reasoned"
    regex = {call.prompt_kind: call.engine_call.constraint for call in small.calls + large.calls}
    assert regex[S] == answer_form("yes_no").regex(S) and regex[R] == answer_form("yes_no").regex(R)
    assert all(stage.constraint == answer_form("yes_no").pattern for stage in result.trace.stages)
    free = await Cascade(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})).run(YES_NO)
    assert all(stage.constraint is None for stage in free.trace.stages)  # off by default
    text = read_question("What is the color of the shape?", images=("data:image/png;base64,AAAA",))
    small, large = ScriptedVLM({S: "[[red]]"}), ScriptedVLM({S: "[[red]]"})
    await Cascade(small, large).run(text, CascadeOptions(structured_answers=True))
    assert [call.engine_call.constraint for call in small.calls + large.calls] == [None, None]


class RefusesGrammars(ScriptedVLM):
    async def complete(self, messages, *, max_tokens, call, decoding):
        if call.constraint is not None:
            self.refused = getattr(self, "refused", 0) + 1
            raise ConstraintRejectedError("large: structured outputs are not supported by this backend")
        return await super().complete(messages, max_tokens=max_tokens, call=call, decoding=decoding)


async def test_an_engine_that_refuses_the_grammar_is_asked_again_without_it_and_the_trace_says_so():
    small = ScriptedVLM({S: "[[yes]]"})
    large = RefusesGrammars({S: "[[yes]]"})
    result = await Cascade(small, large).run(YES_NO, CascadeOptions(structured_answers=True))
    assert (result.route, result.answer) == ("agree_short", "yes")  # today's behaviour
    short_large = next(stage for stage in result.trace.stages if stage.name == "short_large")
    assert "not supported" in short_large.constraint_refused and short_large.status == "ok"
    assert large.refused == 1 and [call.engine_call.constraint for call in large.calls] == [None]
    short_small = next(stage for stage in result.trace.stages if stage.name == "short_small")
    assert short_small.constraint_refused is None


def test_a_grammar_refusal_is_told_from_other_refusals_only_for_a_constrained_call():
    detail = {"code": 400, "message": "Failed to compile the regex grammar: unsupported lookahead"}
    grammar = error_response_failure(detail, "m", constrained=True)
    assert isinstance(grammar, ConstraintRejectedError)
    assert "error id" in str(grammar) and "lookahead" not in str(grammar)  # the engine's words: logged
    refused = error_response_failure(detail, "m")  # no grammar asked: the input's fault
    assert not isinstance(refused, ConstraintRejectedError) and refused.status == 400


@pytest.mark.parametrize("prompt_kind", ["simple", "reasoning", "stage2", "transfer"])
def test_the_emulated_engine_honours_the_form(prompt_kind):
    form = answer_form("choice", ["cat", "dog"])
    pieces = reply_pieces("B", prompt_kind, 12)
    shaped = constrained_pieces(pieces, form.regex(PromptKind(prompt_kind)), "choice")
    assert shaped is not None and re.fullmatch(form.regex(PromptKind(prompt_kind)), "".join(shaped))
    assert shaped[1] == "B"  # the scripted answer, kept where the form admits it
    narrow = answer_form("choice", ["cat"])  # only A: the scripted B is replaced
    assert constrained_pieces(pieces, narrow.regex(PromptKind(prompt_kind)), "choice")[1] == "A"
    assert constrained_pieces(pieces, r"\[\[zebra\]\]", "choice") is None  # no scripted reply matches


MODELS = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}


def test_the_server_setting_and_a_requests_override_and_a_400_for_options_a_grammar_cannot_tell_apart():
    from serve_app.config import AppConfig
    from serve_app.edge.errors import RequestError

    from ..images import data_url
    from .build import answer_job

    on = AppConfig.model_validate(MODELS | {"cascade": {"structured_answers": True}})
    off = AppConfig.model_validate(MODELS)
    body = {"image": data_url(), "question": "Which one?", "choices": ["red", "blue"]}
    assert answer_job(on, body).options.structured_answers is True
    assert answer_job(off, body).options.structured_answers is False
    overridden = body | {"options": {"structured_answers": False}}
    assert answer_job(on, overridden).options.structured_answers is False
    twice = body | {"choices": ["red", "blue", "Red"]}
    with pytest.raises(RequestError) as refused:
        answer_job(on, twice)
    assert (refused.value.status, refused.value.code, refused.value.param) == (
        400,
        "invalid_choices",
        "choices",
    )
    assert "options 0 and 2 are the same" in refused.value.message
    assert answer_job(off, twice).question.choices == ("red", "blue", "Red")  # answered today: kept


def test_an_either_or_question_keeps_its_named_options_through_the_chat_api():
    """The chat job copies the question with its system messages: the copy still names its options,
    so its form is the options' text, never letters."""
    from serve_app.config import AppConfig

    from ..images import chat_body
    from .build import chat_job

    on = AppConfig.model_validate(MODELS | {"cascade": {"structured_answers": True}})
    body = chat_body("Is the shape red or blue?")
    body["messages"].insert(0, {"role": "system", "content": "Answer briefly."})
    question = chat_job(on, body).question
    assert question.system == ("Answer briefly.",)
    assert question.options_named and question.choices == ("red", "blue")
    assert answer_form(question.kind, question.choices, options_named=question.options_named).pattern == (
        "(?:red|blue)"
    )
