"""Reading a client's question: its answer-format instruction, its options, and the reply in the format
it asked for (core/question_parsing.py, core/instructions.py)."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.core.instructions import FORMS, ReplyForm, reply_in_format, trailing_instruction
from serve_app.core.question_parsing import QuestionFormatError, parse_question, read_question, split_choices

from ..images import chat_body
from .build import chat_job
from .test_api import CONFIG


def form_of(text: str) -> str | None:
    instruction = parse_question(text).instruction
    return instruction.form if instruction else None


@pytest.mark.parametrize(
    "text",
    [
        "What colour is the shape? Answer the question using a single word or phrase.",
        "What colour is the shape?\n  answer  THE question using a single word or phrase",
        "What colour is the shape?\n\nAnswer the question using a single word or phrase.  ",
    ],
)
def test_an_instruction_is_recognised_in_any_case_spacing_and_full_stop(text):
    parsed = parse_question(text)
    assert parsed.text == "What colour is the shape?"
    assert parsed.instruction is not None and parsed.instruction.form == "single_word_or_phrase"


@pytest.mark.parametrize(
    "text",
    [
        "ReplyForm in French: what colour is the shape?",  # an instruction of no known form
        "What colour is the shape? Think hard and answer in one word.",
        # the phrase is not a sentence of its own
        "What does the sign say after Answer the question using a single word or phrase",
        "Which is the Answer:",  # a cue that is part of the question
    ],
)
def test_an_unknown_instruction_leaves_the_question_as_sent(text):
    parsed = parse_question(text)
    assert (parsed.text, parsed.instruction, parsed.choices) == (text, None, ())


def test_a_letter_instruction_without_options_is_not_taken():
    text = "What colour is the shape?\nAnswer with the option's letter from the given choices directly."
    parsed = parse_question(text)
    assert (parsed.text, parsed.instruction) == (text, None)


def test_yes_or_no_to_a_question_with_options_is_not_taken():
    text = "Which shape?\nA. circle\nB. square\nAnswer yes or no."
    parsed = parse_question(text)
    assert parsed.instruction is None and parsed.text == "Which shape?\nAnswer yes or no."


def test_yes_or_no_makes_the_question_yes_no_unless_the_request_says_otherwise():
    assert read_question("The shape is red. Answer yes or no.").kind == "yes_no"
    assert read_question("The shape is red. Answer yes or no.", kind="text").kind == "text"


def test_the_options_label_question_label_and_instruction_all_go():
    text = "Question: Which shape is it?\nOptions:\nA. circle\nB. square\nAnswer with the option letter only."
    parsed = read_question(text)
    assert (parsed.question, parsed.choices, parsed.kind) == (
        "Which shape is it?",
        ("circle", "square"),
        "choice",
    )
    assert parsed.choices_from_text == ("circle", "square")
    assert parsed.instruction is not None and parsed.instruction.reply is ReplyForm.LETTER


def test_an_instruction_between_question_and_options():
    text = (
        "Which shape is it?\nAnswer with the option's letter from the given choices directly.\n"
        "(A) circle\n(B) square"
    )
    parsed = parse_question(text)
    assert (parsed.text, parsed.choices) == ("Which shape is it?", ("circle", "square"))
    assert parsed.instruction is not None and parsed.instruction.form == "option_letter_directly"


def test_inline_options():
    assert split_choices("Which shape is it? (A) circle (B) square (C) triangle") == (
        "Which shape is it?",
        ("circle", "square", "triangle"),
    )
    assert split_choices("Which is it?\nChoices: (A) circle (B) square") == (
        "Which is it?",
        ("circle", "square"),
    )
    assert split_choices("What is (A) here?") == ("What is (A) here?", ())
    assert split_choices("Pick (A) or (B)")[1] == ()  # a letter with nothing after it is no option


def test_options_in_the_text_that_equal_the_requests_are_read_once():
    parsed = parse_question("Which?\nA. Cat\nB.  dog", choices=["cat", "dog"])
    assert (parsed.text, parsed.choices, parsed.choices_from_text) == (
        "Which?",
        ("cat", "dog"),
        ("Cat", "dog"),
    )


def test_options_in_the_text_that_differ_from_the_requests_are_refused_naming_both():
    with pytest.raises(QuestionFormatError) as error:
        parse_question("Which?\nA. cat\nB. dog", choices=["cat", "cow"])
    assert error.value.code == "conflicting_choices"
    assert "(A. cat, B. dog)" in str(error.value) and "(A. cat, B. cow)" in str(error.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("Answer the question using a single word or phrase.", "only an answer-format instruction"),
        ("Question: Answer with the option letter only.\nA. x\nB. y", "only an answer-format instruction"),
        ("Options: (A) circle (B) square", "only options"),
    ],
)
def test_a_question_that_is_only_an_instruction_or_options_is_refused(text, needle):
    with pytest.raises(QuestionFormatError) as error:
        parse_question(text)
    assert error.value.code == "missing_question" and needle in str(error.value)


def test_the_http_edge_names_the_field_of_conflicting_choices():
    from serve_app.edge.errors import RequestError

    with pytest.raises(RequestError) as error:
        chat_job(CONFIG, chat_body("Which?\nA. cat\nB. dog", mai={"choices": ["x", "y"]}))
    assert (error.value.status, error.value.param) == (400, "mai.choices")


# Each form the table holds is recognised after a question, and only the question is left.
PHRASES = [(form.name, phrase) for form in FORMS for phrase in form.phrases]
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


@given(
    words=st.lists(WORDS, min_size=1, max_size=8),
    phrase=st.sampled_from(PHRASES),
    joint=st.sampled_from(["\n", " ", "\n\n"]),
)
def test_every_form_in_the_table_comes_off_any_question(words, phrase, joint):
    name, text = phrase
    question = "Is " + " ".join(words) + "?"
    assert trailing_instruction(question + joint + text)[0] == question
    assert trailing_instruction(question + joint + text)[1].form == name


@given(st.text(max_size=200))
def test_any_text_is_read_or_refused_by_name(text):
    try:
        parsed = parse_question(text)
    except QuestionFormatError as error:
        assert error.code == "missing_question"
    else:
        assert parsed.text and len(parsed.text) <= len(text.strip())


# ---------------------------------------------------------------- the reply in the client's format

SHORT = trailing_instruction("Q? Answer the question using a single word or phrase.")[1]
LETTER = trailing_instruction("Q? Answer with the option letter only.")[1]


@pytest.mark.parametrize(
    ("answer", "kind", "choices", "expected"),
    [
        ("yes.", "yes_no", (), "Yes"),
        ("No, there is not", "yes_no", (), "No"),
        ("circle", "yes_no", (), "circle"),  # not an answer of its kind: unchanged, never invented
        ("(B)", "choice", ("cat", "dog"), "B"),
        ("dog", "choice", ("cat", "dog"), "B"),
        ("E", "choice", ("cat", "dog"), "E"),
        ("12%", "number", (), "12%"),
        ("red", "text", (), "red"),
    ],
)
def test_the_reply_follows_the_instruction(answer, kind, choices, expected):
    assert reply_in_format(answer, SHORT, kind, choices) == expected
    assert reply_in_format(answer, LETTER, kind, choices) == expected


def test_without_an_instruction_the_answer_is_unchanged():
    assert reply_in_format("yes.", None, "yes_no") == "yes."
    assert reply_in_format("(B)", None, "choice", ("cat", "dog")) == "(B)"


@pytest.mark.parametrize(
    "text",
    [
        "Given P(A) = 0.3 and P(B) = 0.5, what is P(A and B)?",
        "If f(A) = 2 and f(B) = 3, what is f(C)?",
        "Which panel, (A) or (B), shows the higher peak?",
        "The shapes (A) circle (B) square",  # marks in the middle of a sentence
    ],
)
def test_letters_in_brackets_inside_a_sentence_are_no_options(text):
    assert split_choices(text) == (text, ())
    assert parse_question(text).choices == ()


def test_with_the_requests_choices_lettered_lines_before_the_question_stay_in_it():
    text = "Statements:\nA. The cell divides.\nB. The cell grows.\nWhich statements are true?"
    parsed = parse_question(text, choices=["A only", "B only", "Both", "Neither"])
    assert (parsed.text, parsed.choices_from_text) == (text, ())
    assert parsed.choices == ("A only", "B only", "Both", "Neither")


def test_options_compare_without_their_final_full_stop():
    parsed = parse_question("Which?\nA. cat.\nB. dog.", choices=["cat", "dog"])
    assert (parsed.text, parsed.choices) == ("Which?", ("cat", "dog"))


def test_an_option_line_with_a_long_run_of_spaces_is_read_whole():
    assert split_choices("Which?\nA. x" + " " * 8000 + "y\nB. z") == ("Which?", ("x" + " " * 8000 + "y", "z"))


def test_a_reply_nothing_could_be_read_from_is_never_formatted():
    from serve_app.core.cascade import Cascade
    from serve_app.core.contracts import CascadeOptions, Question
    from serve_app.core.prompts import PromptKind

    from .fakes import ScriptedVLM

    unread = "Not sure, the image is too dark to tell whether there is a dog or a cat in it"
    question = Question("Is there a dog?", images=("data:,",), kind="yes_no", instruction=SHORT)
    small, large = ScriptedVLM({}), ScriptedVLM({PromptKind.SIMPLE: unread})
    result = asyncio.run(Cascade(small, large).run(question, CascadeOptions(policy="large")))
    assert result.answer == unread and not result.trace.answer_parsed
