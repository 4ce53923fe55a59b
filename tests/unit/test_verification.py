"""Verification: two model answers agree only when they say the same thing (core/verification.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serve_app.core.answers import ANSWER_KINDS, HEDGES, is_valid
from serve_app.core.verification import agree

# Distinct answers that share most of their letters: the ANLS >= 0.5 rule took each pair as one answer.
NEAR_MISSES = [
    ("rectangle", "triangle"),
    ("cat", "car"),
    ("blue", "blur"),
    ("left", "lift"),
    ("March", "Match"),
    ("Model A", "Model B"),
    ("1.5 million", "1.6 million"),
    ("2018", "2019"),
    ("red", "not red"),
    ("cat", "cat and dog"),
    ("red", "red or blue"),
    ("the left one", "the right one"),
    ("circle", "circles"),
    ("3 apples", "4 apples"),
]


@pytest.mark.parametrize(("a", "b"), NEAR_MISSES)
def test_near_misses_do_not_agree_as_text(a, b):
    assert not agree(a, b, "text")
    assert not agree(b, a, "text")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("New York", "New York City"),
        ("red", "Red."),
        ("the red one", "red"),
        ("a triangle", "triangle"),
        ("Triangle", "[[triangle]]".strip("[]")),
        ("1,234 people", "1234 people"),
    ],
)
def test_same_words_agree_as_text(a, b):
    assert agree(a, b, "text")
    assert agree(b, a, "text")


def test_integers_agree_only_when_equal():
    assert not agree("2018", "2019", "number")
    assert not agree("12", "13", "number")
    assert agree("12", "12.0", "number")
    assert agree("12%", "12", "number") and agree("12%", "0.12", "number")


def test_decimals_agree_within_the_stated_tolerance():
    assert agree("3.14", "3.1416", "number")
    assert not agree("0.5", "0.51", "number")
    assert agree("0.5", "0.51", "number", decimal_tolerance=0.02)


def test_a_unit_on_both_sides_must_be_the_same():
    assert agree("3.5 kg", "3.5", "number")
    assert not agree("3.5 kg", "3.5 lb", "number")
    assert not agree("1.5 million", "1.5 billion", "number")


@pytest.mark.parametrize("hedge", ["not sure", "No idea.", "N/A", "maybe", "cannot tell", "I don't know"])
@pytest.mark.parametrize("kind", ["yes_no", "text", "number"])
def test_a_hedge_is_no_answer_and_settles_nothing(hedge, kind):
    assert not is_valid(hedge, kind)
    assert not agree(hedge, "no", kind)
    assert not agree(hedge, hedge, kind)


def test_a_hedge_offered_as_an_option_is_an_answer():
    assert agree("Cannot tell", "C", "choice", choices=["yes", "no", "cannot tell"])


# A word list: no two distinct words of it may agree, under any kind that reads words.
WORDS = st.sampled_from(
    "red blue green yellow black white gray grey brown orange purple teal circle rectangle triangle square "
    "cat car cart card dog dot left lift right light top stop march match model mode one two three "
    "yes no true false up down north south east west".split()
)


@settings(max_examples=300, deadline=None)
@given(a=WORDS, b=WORDS)
def test_no_two_distinct_words_agree(a, b):
    assert agree(a, b, "text") == (a == b)


answers = st.one_of(
    st.text(max_size=30),
    WORDS,
    st.sampled_from(["Yes", "no.", "not sure", "[[C]]", "12%", "0.12", "1,000", "2018", "3.5 kg", *HEDGES]),
    st.sampled_from(["yes.", "No", "(b)", "c.", "Answer: D", "$5", "0", "0.0"]),
    st.builds(lambda x: f"{x}%", st.integers(-1000, 1000)),
    st.builds(lambda x: f"[[{x}]]", st.text(max_size=10)),
    st.builds(lambda a, b: f"{a} {b}", WORDS, WORDS),
    st.builds(lambda a, b: f"{a} and {b}", WORDS, WORDS),
    st.builds(str, st.floats(allow_nan=False, allow_infinity=False, width=32)),
)
choice_lists = st.one_of(st.none(), st.lists(st.text(min_size=1, max_size=8), min_size=2, max_size=5))


@settings(max_examples=500, deadline=None)
@given(a=answers, b=answers, kind=st.sampled_from(ANSWER_KINDS), choices=choice_lists)
def test_agreement_is_symmetric(a, b, kind, choices):
    assert agree(a, b, kind, choices=choices) == agree(b, a, kind, choices=choices)


@settings(max_examples=300, deadline=None)
@given(a=answers, kind=st.sampled_from(ANSWER_KINDS), choices=choice_lists)
def test_a_valid_answer_agrees_with_itself_and_an_invalid_one_with_nothing(a, kind, choices):
    assert agree(a, a, kind, choices=choices) == is_valid(a, kind, choices=choices)


@settings(max_examples=300, deadline=None)
@given(
    a=st.one_of(st.text(), st.none(), st.integers(), st.floats(), st.binary()),
    b=st.one_of(st.text(), st.none(), st.integers(), st.floats()),
    kind=st.one_of(st.sampled_from(ANSWER_KINDS), st.text(max_size=5)),
    tolerance=st.floats(0.0, 0.05),
)
def test_never_raises(a, b, kind, tolerance):
    assert agree(a, b, kind, decimal_tolerance=tolerance) in (True, False)


def test_the_reported_near_misses_are_told_apart_and_the_same_answers_agree():
    """The pairs ``python -m evaluation.matcher_report`` reports on, each as labelled."""
    from evaluation.matcher_report import NEAR_MISSES, near_miss_table

    assert [agree(a, b, kind) for kind, a, b, _ in NEAR_MISSES] == [same for *_, same in NEAR_MISSES]
    summary = near_miss_table()["summary"]
    assert summary["strict"]["false_agreements"] == 0 and summary["previous"]["false_agreements"] > 20


@pytest.mark.parametrize("name", ["anls_threshold", "rel_tol"])
def test_settings_verification_does_not_read_are_refused_by_name(name):
    from pydantic import ValidationError

    from serve_app.config import load_app_config
    from serve_app.core.contracts import CascadeOptions

    with pytest.raises(ValidationError, match=name):
        CascadeOptions.model_validate({name: 0.5})
    models = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    with pytest.raises(ValidationError, match=f"cascade.{name}"):
        load_app_config(models | {"cascade": {name: 0.05}})
    assert (
        load_app_config(models | {"cascade": {"decimal_tolerance": 0.02}}).cascade.decimal_tolerance == 0.02
    )
