import math

from hypothesis import given
from hypothesis import strategies as st

from serve_app.core.contracts import TokenLogprob
from serve_app.core.verification import answer_confidence


def tokens(*pieces: tuple[str, float]) -> tuple[TokenLogprob, ...]:
    return tuple(TokenLogprob(text, math.log(p)) for text, p in pieces)


def test_the_answer_inside_brackets_is_what_counts():
    reply = tokens(("It is red", 0.1), (".\n[[", 0.5), ("Ye", 0.9), ("s", 0.8), ("]]", 0.3))
    assert math.isclose(answer_confidence("It is red.\n[[Yes]]", reply), 0.9 * 0.8)


def test_a_bare_answer_counts_whole():
    assert math.isclose(answer_confidence("No.", tokens(("No", 0.6), (".", 0.5))), 0.6 * 0.5)


def test_no_logprobs_no_answer_or_other_tokens_give_none():
    assert answer_confidence("[[Yes]]", None) is None
    assert answer_confidence("[[Yes]]", ()) is None
    assert (
        answer_confidence("a long\nexplanation without an answer", tokens(("a long\nexplanation", 0.9)))
        is None
    )
    assert answer_confidence("[[Yes]]", tokens(("[[No]]", 0.9))) is None


def test_an_engine_that_returns_a_prefix_of_its_tokens_still_aligns():
    """The message text may lack what the tokens spell before it (a stripped leading space)."""
    reply = tokens((" ", 0.5), ("[[", 0.9), ("B", 0.7), ("]]", 0.9))
    assert math.isclose(answer_confidence("[[B]]", reply), 0.7)


@given(st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=1, max_size=6), st.integers(0, 5))
def test_any_split_of_the_answer_multiplies_its_token_probabilities(probabilities, cut):
    answer = "abcdefgh"[: len(probabilities)]
    pieces = [("Because.\n[[", 0.2)] + [(letter, p) for letter, p in zip(answer, probabilities, strict=True)]
    pieces.append(("]]", 0.3))
    confidence = answer_confidence(f"Because.\n[[{answer}]]", tokens(*pieces))
    assert math.isclose(confidence, math.prod(probabilities), rel_tol=1e-9)
    assert 0 < confidence <= 1
