"""The attention scorer's prefill: the configured device names torch's, and the one attention row it
reads (scaled-dot-product attention everywhere, one softmax row at one layer) gives the scores the
full attention matrices of transformers' eager attention give, on the tiny Qwen3-VL checkpoint."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest

from deployments.attention import last_row_attention, select_by_mass, torch_device
from deployments.settings import ScorerSettings

from ..images import data_url

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "tiny-small"
REASONING = "The shape in the image is a red circle. Its colour is red, so the answer is yes. [[Yes]]"


# ---------------------------------------------------------------- device names


def test_a_gpu_setting_is_torchs_cuda():
    assert torch_device("gpu") == "cuda"
    assert torch_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"one of \['cpu', 'gpu'\], got 'cuda'"):
        torch_device("cuda")


def test_every_device_the_scorer_settings_accept_has_a_torch_name():
    devices = get_args(ScorerSettings.model_fields["device"].annotation)
    assert set(devices) == {"cpu", "gpu"}
    assert {device: torch_device(device) for device in devices} == {"cpu": "cpu", "gpu": "cuda"}


# ---------------------------------------------------------------- one attention row


@pytest.mark.parametrize("mask", ["causal", "padded", "additive"])
def test_the_last_row_is_eager_attentions_last_row(mask):
    import torch
    from transformers.models.qwen3_vl.modeling_qwen3_vl import eager_attention_forward

    torch.manual_seed(0)
    batch, heads, kv_heads, length, dim = 2, 4, 2, 9, 8
    query = torch.randn(batch, heads, length, dim)
    key = torch.randn(batch, kv_heads, length, dim)
    causal = torch.ones(length, length, dtype=torch.bool).tril().expand(batch, 1, length, length)
    allowed = causal.clone()
    if mask != "causal":
        allowed[1, :, :, :3] = False  # the second sequence is left-padded by three tokens
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, training=False)
    _, eager = eager_attention_forward(module, query, key, key, additive, scaling=dim**-0.5)
    given = {"causal": None, "padded": allowed, "additive": additive}[mask]
    row = last_row_attention(query, key, given, dim**-0.5)
    assert row.shape == (batch, heads, length)
    torch.testing.assert_close(row, eager[:, :, -1, :], rtol=1e-6, atol=1e-7)
    if mask != "causal":
        assert row[1, :, :3].abs().max() == 0  # padding gets no attention


# ---------------------------------------------------------------- the scorer on the tiny checkpoint


@pytest.fixture(scope="module")
def scorer():
    from deployments.attention import ReasoningScorer

    assert (TINY / "config.json").exists(), "build the tiny models first: mai-build-tiny --out models"
    return ReasoningScorer(str(TINY), max_reasoning_tokens=512)


@pytest.fixture(scope="module")
def eager_model():
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(
        str(TINY), attn_implementation="eager", dtype=torch.float32
    )
    return model.eval()


@pytest.mark.parametrize("image", [True, False])
def test_the_scores_are_the_full_attention_matrices_scores(scorer, eager_model, image):
    import torch

    image_url = data_url() if image else None
    ids = scorer.processor.tokenizer(REASONING * 3, add_special_tokens=False).input_ids
    inputs, start = scorer.inputs(image_url, "Is the shape red?", ids)
    with torch.no_grad():
        matrices = eager_model(**inputs, output_attentions=True).attentions  # every layer, every row
    assert matrices[0].shape[-2:] == (inputs["input_ids"].shape[1],) * 2
    for layer in range(-scorer.layers, scorer.layers):
        expected = matrices[layer][0].float().mean(dim=0)[-1][start : start + len(ids)]
        scores = scorer.attention(image_url, "Is the shape red?", ids, layer)
        torch.testing.assert_close(torch.tensor(scores), expected, rtol=1e-5, atol=1e-7)
        for delta in (0.3, 0.8, 1.0):
            assert select_by_mass(scores, delta) == select_by_mass(expected.tolist(), delta)
    # the layers differ, so reading the wrong one would show
    assert not torch.allclose(matrices[0][0, :, -1], matrices[-1][0, :, -1])


def test_concurrent_calls_each_read_their_own_row(scorer):
    questions = [(data_url(), "Is the shape red?", 0), (None, "What colour?", -1)] * 3
    alone = [scorer.select(image, question, REASONING, layer=layer) for image, question, layer in questions]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(
            pool.map(lambda item: scorer.select(item[0], item[1], REASONING, layer=item[2]), questions)
        )
    strip = [{k: v for k, v in result.items() if k != "seconds"} for result in alone]
    assert [{k: v for k, v in result.items() if k != "seconds"} for result in together] == strip
    assert strip[0] != strip[1]  # the two questions differ, so a crossed row would show
