"""Sparse reasoning transfer: mass selection, the budget selector, the attention scorer on the tiny
Qwen3-VL checkpoint, and what the cascade records."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deployments.attention import runs, select_by_mass
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import GAP, CascadeOptions, EngineUnavailableError, Selection, budget_select
from serve_app.core.prompts import PromptKind
from serve_app.core.question_parsing import read_question

from ..images import data_url
from .fakes import ScriptedVLM

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "tiny-small"


# ---------------------------------------------------------------- selection by attention mass


@given(
    st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), max_size=200),
    st.floats(min_value=0.01, max_value=1),
)
def test_mass_selection_is_an_ordered_minimal_subsequence_reaching_delta(weights, delta):
    kept = select_by_mass(weights, delta)
    assert kept == sorted(set(kept)) and all(0 <= i < len(weights) for i in kept)
    total = sum(weights)
    if not weights:
        assert kept == []
    elif total <= 0:
        assert kept == list(range(len(weights)))
    else:
        mass = sum(weights[i] for i in kept)
        assert mass >= delta * total - 1e-9
        # minimal: without its lightest member the set falls short
        lightest = min(weights[i] for i in kept)
        assert mass - lightest < delta * total + 1e-9 or lightest == 0
    assert select_by_mass(weights, delta) == kept  # deterministic


def test_mass_selection_examples_and_bad_delta():
    assert select_by_mass([0.1, 0.5, 0.1, 0.3], 0.8) == [1, 3]
    assert select_by_mass([0.25, 0.25, 0.25, 0.25], 0.5) == [0, 1]  # ties: earlier first
    assert select_by_mass([1, 2, 3], 1.0) == [0, 1, 2]
    assert runs([1, 2, 5, 6, 9]) == [[1, 2], [5, 6], [9]]
    with pytest.raises(ValueError, match="delta"):
        select_by_mass([1.0], 0)


# ---------------------------------------------------------------- the budget selector


def test_budget_keeps_the_ends_and_every_number_and_option_letter():
    words = ["so"] * 30
    words[0], words[29] = "First,", "end."
    words[10], words[15], words[20] = "42%", "(B)", "[[C]]"
    selection = budget_select(" ".join(words), head_words=3, tail_words=2)
    assert selection.text == f"First, so so{GAP}42%{GAP}(B){GAP}[[C]]{GAP}so end."
    assert (selection.tokens_before, selection.tokens_after) == (30, 8)
    short = budget_select("the bar is 12", head_words=48, tail_words=48)
    assert short.text == "the bar is 12" and short.tokens_after == 4
    assert budget_select("", 4, 4) == Selection("", 0, 0)


# ---------------------------------------------------------------- the cascade records the transfer


async def test_the_trace_records_tokens_before_and_after_selection():
    small = ScriptedVLM(
        {PromptKind.SIMPLE: "[[No]]", PromptKind.REASONING: " ".join(["word"] * 100) + " 7 [[No]]"}
    )
    large = ScriptedVLM(
        {PromptKind.SIMPLE: "[[Yes]]", PromptKind.TRANSFER: "[[No]]", PromptKind.STAGE2: "No"}
    )
    cascade = Cascade(small, large, selectors={"budget": _budget})
    result = await cascade.run(
        read_question("Is it red?", images=("data:,",)), CascadeOptions(transfer_selector="budget")
    )
    transfer = result.trace.to_dict()["transfer"]
    assert (
        transfer["selector"] == "budget"
        and transfer["tokens_before"] == 102
        and transfer["tokens_after"] == 10
    )
    assert transfer["error"] is None


async def _budget(reasoning, question):
    return budget_select(reasoning, 5, 5)


async def test_a_failing_selector_sends_the_full_reasoning_and_says_so():
    async def broken(reasoning, question):
        raise EngineUnavailableError("scorer gone")

    small = ScriptedVLM({PromptKind.SIMPLE: "[[No]]", PromptKind.REASONING: "a b c [[No]]"})
    large = ScriptedVLM(
        {PromptKind.SIMPLE: "[[Yes]]", PromptKind.TRANSFER: "[[No]]", PromptKind.STAGE2: "No"}
    )
    result = await Cascade(small, large, selectors={"attention": broken}).run(
        read_question("Is it red?", images=("data:,",)), CascadeOptions(transfer_selector="attention")
    )
    assert result.route == "transfer"
    transfer = result.trace.transfer
    assert "scorer gone" in transfer.error and transfer.tokens_before == transfer.tokens_after == 4
    assert "a b c [[No]]" in str(large.calls[-1].messages)


# ---------------------------------------------------------------- the attention scorer on the tiny checkpoint


@pytest.fixture(scope="module")
def scorer():
    from deployments.attention import ReasoningScorer

    assert (TINY / "config.json").exists(), "build the tiny models first: mai-build-tiny --out models"
    return ReasoningScorer(str(TINY), max_reasoning_tokens=512)


REASONING = "The shape in the image is a red circle. Its colour is red, so the answer is yes. [[Yes]]"


def test_attention_selection_is_an_ordered_subsequence_with_enough_mass(scorer):
    result = scorer.select(data_url(), "Is the shape red?", REASONING, delta=0.8)
    assert 0 < result["tokens_after"] < result["tokens_before"]
    assert result["mass"] >= 0.8 - 1e-6
    ids = scorer.processor.tokenizer(REASONING, add_special_tokens=False).input_ids
    kept_pieces = [piece.strip() for piece in result["text"].split(GAP.strip()) if piece.strip()]
    position = 0
    decoded = scorer.processor.tokenizer.decode(ids)
    for piece in kept_pieces:  # every kept run appears in the reasoning, in order
        found = decoded.find(piece.split()[0] if piece.split() else piece, position)
        assert found >= position, (piece, decoded)
        position = found
    again = scorer.select(data_url(), "Is the shape red?", REASONING, delta=0.8)
    assert {k: v for k, v in again.items() if k != "seconds"} == {
        k: v for k, v in result.items() if k != "seconds"
    }
    everything = scorer.select(data_url(), "Is the shape red?", REASONING, delta=1.0)
    assert everything["tokens_after"] == everything["tokens_before"]


def test_attention_selection_edge_cases(scorer):
    assert scorer.select(data_url(), "Q?", "", delta=0.8)["tokens_before"] == 0
    long = scorer.select(data_url(), "Q?", "red " * 2000, delta=0.5)
    assert long["tokens_before"] == 512 and 0 < long["tokens_after"] <= 512  # capped, not failed
    without_image = scorer.select(None, "Q?", REASONING, delta=0.8)
    assert without_image["tokens_after"] > 0
    with pytest.raises(ValueError, match="layer 9 does not exist"):
        scorer.select(data_url(), "Q?", REASONING, layer=9)
    assert scorer.select(data_url(), "Q?", REASONING, layer=0)["tokens_after"] > 0


def test_config_refuses_a_default_selector_that_is_not_deployed():
    from serve_app.config import AppConfig

    base = {
        "small": {"model_id": "s", "source": "./models/tiny-small"},
        "large": {"model_id": "l", "source": "org/large"},
    }
    with pytest.raises(ValueError, match="'attention' is not available"):
        AppConfig.model_validate(base | {"cascade": {"transfer_selector": "attention"}})
    config = AppConfig.model_validate(
        base
        | {
            "cascade": {"transfer_selector": "attention"},
            "transfer_selection": {"attention": True, "delta": 0.5},
        }
    )
    assert config.scorer_source() == str(TINY)  # the small model's checkpoint, resolved
    assert (
        AppConfig.model_validate(
            base | {"transfer_selection": {"scorer": {"source": "org/scorer"}}}
        ).scorer_source()
        == "org/scorer"
    )
    with pytest.raises(ValueError, match="needs num_gpus"):
        AppConfig.model_validate(base | {"transfer_selection": {"scorer": {"device": "gpu"}}})
