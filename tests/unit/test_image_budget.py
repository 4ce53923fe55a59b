"""One image budget per model: the processor's settings under the config's mm_processor_kwargs bound an
image's tokens; the prompt-size check and the ingress's image limits come from it; a context too small
for the budgets is refused at start with the numbers. The GPU configs are read against the released
Qwen3-VL checkpoints' own processor settings (configs/checkpoints)."""

from pathlib import Path

import pytest
from transformers import Qwen2VLImageProcessor

from harness.local_server import config_args
from serve_app.config import load_app_config
from serve_app.engine_config.image_budget import UnknownImageFamilyError, image_budget, pixel_bounds
from serve_app.engine_config.model_limits import ContextTooSmallError, with_model_limits

CHECKPOINTS = Path(__file__).resolve().parents[2] / "configs" / "checkpoints"
RELEASED = {"longest_edge": 16_777_216, "shortest_edge": 65_536}  # Qwen3-VL's preprocessor_config.json


def released_qwen3_vl() -> Qwen2VLImageProcessor:
    return Qwen2VLImageProcessor.from_pretrained(str(CHECKPOINTS / "qwen3-vl-8b"))


def test_the_released_qwen3_vl_processor_allows_the_whole_gpu_context_for_one_image():
    processor = released_qwen3_vl()
    assert processor.size == RELEASED and (processor.patch_size, processor.merge_size) == (16, 2)
    budget = image_budget(processor)
    assert (budget.max_pixels, budget.pixels_per_token, budget.max_tokens) == (16_777_216, 1024, 16_384)


def test_mm_processor_kwargs_bound_the_image_as_vllm_applies_them():
    processor = released_qwen3_vl()
    budget = image_budget(processor, {"max_pixels": 4_194_304, "min_pixels": 65_536})
    assert (budget.max_pixels, budget.min_pixels, budget.max_tokens) == (4_194_304, 65_536, 4096)
    # vLLM's order: size first, then min_pixels / max_pixels over it.
    assert pixel_bounds(processor, {"size": {"longest_edge": 1_048_576}}) == (65_536, 1_048_576)
    assert (
        pixel_bounds(processor, {"size": {"longest_edge": 1_048_576}, "max_pixels": 2_097_152})[1]
        == 2_097_152
    )
    with pytest.raises(ValueError, match="max_pixels"):
        image_budget(processor, {"max_pixels": 0})
    with pytest.raises(ValueError, match="min_pixels 70000 exceeds max_pixels 65536"):
        image_budget(processor, {"max_pixels": 65_536, "min_pixels": 70_000})


def test_a_family_without_a_known_rule_is_named():
    class Processor:
        pass

    with pytest.raises(UnknownImageFamilyError, match="Processor"):
        image_budget(Processor())


def gpu_config(name: str, **engine_overrides):
    """A shipped GPU config with its models read from the released checkpoints' settings."""
    args = config_args(name)
    for role, folder in (("small", "qwen3-vl-2b"), ("large", "qwen3-vl-8b")):
        args[role]["source"] = str(CHECKPOINTS / folder)
        args[role]["engine_kwargs"].update(engine_overrides)
    return load_app_config(args)


@pytest.mark.parametrize("name", ["mai.yaml", "mai-1gpu.yaml"])
def test_the_gpu_configs_leave_room_for_the_question_at_the_largest_image(name):
    config = with_model_limits(gpu_config(name))
    budgets = config.cascade.max_tokens
    left = 16_384 - 4096 - (budgets.reasoning + budgets.transfer) - 512
    assert config.limits.max_prompt_bytes == left > 8000
    assert (config.limits.max_image_aspect_ratio, config.limits.min_image_side) == (200.0, 1)


def test_a_context_too_small_for_the_budgets_is_refused_at_start_with_the_numbers():
    released = {"max_pixels": RELEASED["longest_edge"], "min_pixels": RELEASED["shortest_edge"]}
    with pytest.raises(ContextTooSmallError) as refused:
        with_model_limits(gpu_config("mai.yaml", mm_processor_kwargs=released))
    message = str(refused.value)
    for number in ("max_model_len 16384", "16384 tokens (max_pixels 16777216)", "2080", "512"):
        assert number in message
    assert "mm_processor_kwargs.max_pixels" in message
    # A configured prompt bound is kept, but it does not make the image fit: still refused.
    args = config_args("mai.yaml")
    args["limits"] = {"max_prompt_bytes": 4000}
    for role, folder in (("small", "qwen3-vl-2b"), ("large", "qwen3-vl-8b")):
        args[role]["source"] = str(CHECKPOINTS / folder)
    assert with_model_limits(load_app_config(args)).limits.max_prompt_bytes == 4000
    for role in ("small", "large"):
        args[role]["engine_kwargs"]["mm_processor_kwargs"] = released
    with pytest.raises(ContextTooSmallError):
        with_model_limits(load_app_config(args))


def test_the_demo_models_budget_is_their_processors():
    config = with_model_limits(load_app_config(config_args("mai-cpu.yaml")))
    assert config.limits.max_prompt_bytes is not None and config.limits.max_prompt_bytes > 1000


def test_a_mixed_pair_bounds_the_prompt_by_the_gemma_image_budget():
    """configs/mai-cpu-mixed.yaml: the demo Qwen3-VL small (64 tokens an image at most) and the tiny
    Gemma 3 large (256, its config.json's mm_tokens_per_image): the learnt prompt bound is what the
    Gemma context leaves; the same pair with a Qwen3-VL large would leave 192 bytes more."""
    from serve_app.engine_config.model_limits import TEMPLATE_TOKENS

    args = config_args("mai-cpu-mixed.yaml")
    budgets = load_app_config(args).cascade.max_tokens
    stage = max(budgets.reasoning + budgets.transfer, budgets.explain, budgets.reasoning + budgets.stage2)
    mixed = with_model_limits(load_app_config(args)).limits.max_prompt_bytes
    assert mixed == 4096 - 256 - stage - TEMPLATE_TOKENS
    args["large"] |= {"model_id": "demo-large", "source": "./models/demo-large"}
    assert with_model_limits(load_app_config(args)).limits.max_prompt_bytes == mixed + 256 - 64
