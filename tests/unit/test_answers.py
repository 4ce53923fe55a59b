import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.scoring import anls, relaxed_match
from serve_app.core.answers import (
    ANSWER_KINDS,
    extract_answer,
    is_valid,
    normalize,
    option_letter,
    parse_number,
)
from serve_app.core.question_parsing import infer_kind, split_choices
from serve_app.core.verification import agree

# ---------------------------------------------------------------- extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[C]]", "C"),
        ("reasoning...\n[[first]] more [[ second ]]", "second"),
        ("[[Yes]].", "Yes"),
        ("Yes.", "Yes"),
        ("C", "C"),
        ("Answer: 400", "400"),
        ("The answer is C.", "C"),
        ("Step 1: look.\nStep 2: count.\nThe final answer is 12%.", "12%"),
        ("**No**", "No"),
        ("\\boxed{42}", "42"),
        ("[[answer]]", None),  # the template's placeholder echoed back is not an answer
        ("[[ ]] No", "No"),
        ("", None),
        ("   \n ", None),
        (None, None),
        ("Let me think about the picture. The fan moves air around the room.\nIt cools people.", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_takes_the_last_bracketed_answer_of_a_reasoning():
    reasoning = "1. The code assigns '12345'.\n2. find returns 0.\nThe output is not '1' [[0]]"
    assert extract_answer(reasoning) == "0"


# ---------------------------------------------------------------- option letters


@pytest.mark.parametrize(
    "text",
    [
        "C",
        "(C)",
        "c.",
        "c",
        "[[C]]",
        "Answer: C",
        "The answer is (C).",
        "C. 400",
        "C) 400",
        "Option C",
        "[[(C)]]",
    ],
)
def test_option_letter_forms(text):
    assert option_letter(text) == "C"


def test_option_text_maps_to_its_letter_when_choices_are_given():
    choices = ["500", "450", "400", "600"]
    assert option_letter("400", choices) == "C"
    assert option_letter("400", None) is None
    assert agree("400", "[[C]]", "choice", choices=choices)
    assert not agree("400", "[[A]]", "choice", choices=choices)


@pytest.mark.parametrize("text", ["a dog", "Because the image shows it", "", "42"])
def test_no_option_letter_in_plain_text(text):
    assert option_letter(text) is None


# ---------------------------------------------------------------- yes / no


@pytest.mark.parametrize(
    ("a", "b"), [("Yes.", "yes"), ("YES", "[[Yes]]"), ("No, there is not.", "no"), ("no", "No.")]
)
def test_yes_no_agreement(a, b):
    assert agree(a, b, "yes_no")


def test_yes_does_not_agree_with_no():
    assert not agree("Yes", "No", "yes_no")
    # lmms-eval's POPE parser reads anything without "no" as yes; we do not.
    assert normalize("maybe", "yes_no") == "maybe"
    assert not agree("maybe", "Yes", "yes_no")


def test_paper_example_2_zero_is_not_no_but_its_stage2_answer_is():
    """Appendix B.6, Example 2: the small model answered "[[0]]" to a yes/no question."""
    reasoning_answer = extract_answer("The output of the code is not '1', but rather the integer '0'.\n[[0]]")
    assert reasoning_answer == "0"
    assert not agree(reasoning_answer, "No", "yes_no")
    assert agree(extract_answer("No"), "No", "yes_no")


def test_paper_example_1_letters():
    """Appendix B.6, Example 1: 2B-S said [[A]], 2B-R said [[C]] (the truth)."""
    assert not agree("[[A]]", "[[C]]", "choice")
    assert agree("...is 400.\n\n[[C]]", "C", "choice")


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("text", "value", "percent"),
    [
        ("12%", 0.12, True),
        ("1,234", 1234.0, False),
        ("$1,234.50", 1234.5, False),
        ("3.5 kg", 3.5, False),
        ("-4", -4.0, False),
        ("about 30", 30.0, False),
        (".5", 0.5, False),
        ("1e3", 1000.0, False),
    ],
)
def test_parse_number(text, value, percent):
    parsed = parse_number(text)
    assert parsed is not None
    assert math.isclose(parsed[0], value) and parsed[1] is percent


@pytest.mark.parametrize("text", ["12 to 15", "abc", "", "2019-2020", "nan", "1.2.3"])
def test_parse_number_rejects_non_numbers(text):
    assert parse_number(text) is None


def test_relaxed_match_is_chartqa_relaxed_accuracy():
    assert relaxed_match("105", "100")  # exactly 5 % off the gold
    assert relaxed_match("95", "100")
    assert not relaxed_match("105.1", "100")
    assert not relaxed_match("0.01", "0")  # exact when the gold is 0
    assert relaxed_match("0", "0")
    assert relaxed_match("12%", "0.12")
    assert relaxed_match("12%", "12")  # the percent sign's quirk, fixed
    assert relaxed_match("Brazil", "brazil")
    assert not relaxed_match("Brazil", "Brazilia")


def test_number_agreement_tolerance_edges():
    assert not agree("100", "105", "number")  # integers: exact
    assert agree("1,000", "1000", "number")
    assert not agree("1,000", "1,050", "number")
    assert agree("100.0", "100.5", "number")  # decimals: within 1 % of the larger
    assert not agree("100.0", "101.5", "number")
    assert agree("100.0", "101.5", "number", decimal_tolerance=0.02)
    assert not agree("0", "0.001", "number")
    assert agree("0", "0.0", "number")
    assert agree("12%", "0.12", "number")
    assert agree("12%", "12", "number")
    assert not agree("12%", "13", "number")
    assert agree("$1,234", "1234 dollars", "number")
    assert not agree("unknown", "Unknown", "number")  # no number: not an answer to a number question


# ---------------------------------------------------------------- ANLS


def test_anls_values():
    assert anls("hello world", "Hello   World") == 1.0
    assert anls("abc", "xyz") == 0.0
    assert math.isclose(anls("kitten", "sitting"), 1 - 3 / 7)  # Levenshtein 3 over length 7
    assert anls("abcd", "abxy") == 0.0  # normalised distance 0.5 reaches the cutoff
    assert math.isclose(anls("kitten", "kittens"), 1 - 1 / 7)
    assert anls("pred", ["other", "PRED"]) == 1.0  # best of several accepted answers


def test_text_agreement_on_words():
    assert agree("New York City", "new york  city", "text")
    assert agree("New York", "New York City", "text")  # the shorter's words all stand in the longer
    assert not agree("new york city", "new york cty", "text")  # a typo is another word
    assert not agree("new york", "los angeles", "text")


# ---------------------------------------------------------------- never agree on nothing


@pytest.mark.parametrize("kind", ANSWER_KINDS)
@pytest.mark.parametrize(("a", "b"), [(None, None), (None, "x"), ("", ""), ("  ", "  "), ("...", "...")])
def test_none_or_empty_never_agrees(kind, a, b):
    assert not agree(a, b, kind)
    assert not agree(b, a, kind)


# ---------------------------------------------------------------- properties


def test_answers_that_answer_nothing_are_not_valid_and_never_agree():
    assert not agree("maybe", "maybe", "yes_no") and not is_valid("maybe", "yes_no")
    assert not agree("E", "E", "choice", choices=["a", "b"]) and not is_valid(
        "E", "choice", choices=["a", "b"]
    )
    assert is_valid("[[B]]", "choice", choices=["a", "b"]) and is_valid("b", "choice", choices=["a", "b"])
    assert not is_valid("rectangle", "yes_no") and is_valid("Yes.", "yes_no")
    assert not is_valid("unknown", "number") and is_valid("$1,234", "number")
    assert not is_valid("", "text") and not is_valid(None, "text") and is_valid("a fan", "text")


@settings(max_examples=300, deadline=None)
@given(
    a=st.one_of(st.text(), st.none(), st.integers(), st.floats(), st.binary(), st.lists(st.text())),
    b=st.one_of(st.text(), st.none(), st.integers(), st.floats()),
    kind=st.one_of(st.sampled_from(ANSWER_KINDS), st.text(max_size=5)),
    tolerance=st.floats(0.0, 0.05),
)
def test_matchers_never_raise(a, b, kind, tolerance):
    assert agree(a, b, kind, decimal_tolerance=tolerance) in (True, False)
    assert isinstance(normalize(a, kind), str)
    extract_answer(a)
    assert 0.0 <= anls(a, b) <= 1.0
    assert relaxed_match(a, b) in (True, False)
    assert infer_kind(a) in ANSWER_KINDS


@settings(max_examples=200, deadline=None)
@given(value=st.floats(1.0, 1e9), ratio=st.floats(0.0, 0.0099))
def test_decimals_within_one_percent_agree(value, ratio):
    assert agree(f"{value:.6f}", f"{value * (1 + ratio):.6f}", "number")


@settings(max_examples=200, deadline=None)
@given(value=st.floats(1e-3, 1e9), ratio=st.floats(0.0102, 10.0))
def test_decimals_beyond_one_percent_of_the_larger_disagree(value, ratio):
    assert not agree(repr(value), repr(value * (1 + ratio)), "number")


# ---------------------------------------------------------------- kinds and options


@pytest.mark.parametrize(
    ("question", "choices", "kind"),
    [
        ("Is there a car in the image?", None, "yes_no"),
        ("The image shows a python code. Is the output of the code '1'?", None, "yes_no"),
        ("I feel very cold. Is the tool in the picture suitable for use?", None, "yes_no"),
        ("Does the man wear a hat?", None, "yes_no"),
        ("Is the shape red? Answer yes or no.", None, "yes_no"),
        ("How many bars are there? Answer with a number.", None, "number"),
        ("How many bars are above 40?", None, "number"),
        ("What percentage of people chose tea?", None, "number"),
        ("What is the value of the red bar?", None, "number"),
        ("What colour is the shape?", None, "text"),
        ("Which city is shown?", ["Paris", "Rome"], "choice"),
        ("What is the size of real GDP?\nA. 500\nB. 450\nC. 400\nD. 600", None, "choice"),
        # contracted negatives open yes/no questions too
        ("Isn't the shape a triangle?", None, "yes_no"),
        ("Can’t you see a circle?", None, "yes_no"),
        ("Won't it rain?", None, "yes_no"),
        ("Island or sea?", None, "text"),  # no auxiliary verb, only its letters
        # people leave the question mark out of an either/or question, never out of another sentence
        ("Is the shape red or brown", None, "choice"),
        ("Is it red or brown. Is it a circle?", None, "yes_no"),
        ("Is the shape red or not", None, "yes_no"),
    ],
)
def test_infer_kind(question, choices, kind):
    assert infer_kind(question, choices) == kind


def test_split_choices():
    assert split_choices("What is it?\nA. cat\nB. dog") == ("What is it?", ("cat", "dog"))
    assert split_choices("What?\n(A) x\n(B) y\n(C) z") == ("What?", ("x", "y", "z"))
    assert split_choices("Hi\nB. x\nC. y") == ("Hi\nB. x\nC. y", ())  # must start at A
    assert split_choices("Only\nA. one") == ("Only\nA. one", ())


def test_split_choices_keeps_a_trailing_instruction_in_the_question():
    mmbench = (
        "Which animal? Options:\nA. cat\nB. dog\n\n"
        "Answer with the option's letter from the given choices directly."
    )
    assert split_choices(mmbench) == (
        "Which animal?\nAnswer with the option's letter from the given choices directly.",
        ("cat", "dog"),
    )
    assert infer_kind(mmbench) == "choice"
    # Lettered lines that do not start at A, or an option list interrupted by text, are not options.
    assert split_choices("Q\nA. x\nnote\nB. y")[1] == ()


def test_an_options_own_text_wins_over_a_letter_pattern():
    bacteria = ["C. elegans", "E. coli", "B. subtilis"]
    assert option_letter("C. elegans", bacteria) == "A"
    assert option_letter("E. coli", bacteria[:2]) == "B" and is_valid(
        "E. coli", "choice", choices=bacteria[:2]
    )
    assert option_letter("A", ["B", "A"]) == "A"  # a bare letter is a letter
    assert option_letter("C. 400", ["500", "450", "400"]) == "C"
