"""The parameters the memory check counts (deployments/architecture.py) are the ones transformers
builds from the same config files: the released Qwen3-VL checkpoints', text model and vision tower,
on torch's meta device (no memory, no weights)."""

from pathlib import Path

import pytest

from deployments.architecture import read_architecture

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("folder", ["qwen3-vl-2b", "qwen3-vl-8b"])
def test_the_counted_parameters_are_the_models_transformers_builds(folder):
    import torch
    from transformers import AutoConfig, Qwen3VLForConditionalGeneration

    path = ROOT / "configs" / "checkpoints" / folder
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(AutoConfig.from_pretrained(path))
    built = sum(parameter.numel() for parameter in model.parameters())
    assert read_architecture(path).parameters == built
    vision = sum(parameter.numel() for parameter in model.model.visual.parameters())
    assert vision > 0.04 * built  # the vision tower is counted: 19 % of the 2B, 7 % of the 8B
