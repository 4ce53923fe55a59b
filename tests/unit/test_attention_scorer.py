"""The attention scorer's prefill: the configured device names torch's, its dtype follows the device
unless set, its processor sees an image under the engine's mm_processor_kwargs, and the one attention
row it reads (scaled-dot-product attention everywhere, one softmax row at one layer) gives the scores
the full attention matrices of transformers' eager attention give, on the tiny Qwen3-VL checkpoint."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest

from deployments.attention import (
    last_row_attention,
    load_processor,
    scorer_dtype,
    select_by_mass,
    torch_device,
)
from deployments.settings import ScorerSettings
from serve_app.engine_config.image_budget import image_budget

from ..images import data_url

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "tiny-small"
REASONING = "The shape in the image is a red circle. Its colour is red, so the answer is yes. [[Yes]]"
# An engine's mm_processor_kwargs at the tiny checkpoint's scale: half its processor's 16,384 pixels.
ENGINE_KWARGS = {"max_pixels": 8192, "min_pixels": 4096}
BIG = (640, 480)  # more pixels than either bound


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


# ---------------------------------------------------------------- dtype


def test_the_dtype_is_bfloat16_on_a_gpu_and_float32_on_the_cpu_unless_set():
    assert scorer_dtype("gpu") == "bfloat16"
    assert scorer_dtype("cpu") == "float32"
    assert scorer_dtype("gpu", "float32") == "float32"
    assert scorer_dtype("cpu", "bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match=r"one of \['float32', 'bfloat16', 'float16'\], got 'fp8'"):
        scorer_dtype("gpu", "fp8")
    with pytest.raises(ValueError, match="got 'cuda'"):
        scorer_dtype("cuda")


# ---------------------------------------------------------------- the processor's image budget


def image_tokens(processor, size: tuple[int, int]) -> int:
    """The image tokens of a ``size`` image in the scorer's prompt, as ``processor`` makes them."""
    from PIL import Image

    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is the shape red?"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    inputs = processor(text=[text], images=[Image.new("RGB", size, (200, 30, 30))], return_tensors="pt")
    return int((inputs.input_ids == processor.image_token_id).sum())


def test_the_processor_honours_the_engines_max_pixels():
    released = load_processor(str(TINY))
    engine = load_processor(str(TINY), ENGINE_KWARGS)
    budget = image_budget(released.image_processor, ENGINE_KWARGS)  # what the engine allows an image
    assert (budget.max_pixels, budget.max_tokens) == (8192, 8)
    assert 0 < image_tokens(engine, BIG) <= budget.max_tokens
    assert image_tokens(released, BIG) > budget.max_tokens  # without them the image costs more
    assert image_tokens(released, BIG) <= image_budget(released.image_processor).max_tokens


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


def test_the_scorer_reads_an_image_under_its_mm_processor_kwargs_in_float32_on_the_cpu():
    from deployments.attention import ReasoningScorer

    scorer = ReasoningScorer(str(TINY), max_reasoning_tokens=64, mm_processor_kwargs=ENGINE_KWARGS)
    assert (scorer.dtype, str(scorer.model.dtype)) == ("float32", "torch.float32")
    ids = scorer.processor.tokenizer(REASONING, add_special_tokens=False).input_ids
    inputs, _ = scorer.inputs(data_url(size=BIG), "Is the shape red?", ids)
    tokens = int((inputs["input_ids"] == scorer.processor.image_token_id).sum())
    assert 0 < tokens <= 8
    assert int(inputs["image_grid_thw"].prod()) // 4 == tokens  # 2x2 patches merge into one token


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
