"""The sampling defaults a checkpoint brings to vLLM under ``generation_config="auto"``, as vLLM reads
them: the released Qwen3-VL Instruct sampling from a generation_config.json, nothing from a checkpoint
without one, nothing from the demo models."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from serve_app.engine_config.generation_defaults import generation_defaults

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "configs" / "checkpoints"
# The sampling the released Qwen3-VL Instruct checkpoints declare.
RELEASED = {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0}


def checkpoint(tmp_path: Path, generation_config: dict | None) -> Path:
    """A folder with the released 8B config.json and, unless None, this generation_config.json."""
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    shutil.copy(CHECKPOINTS / "qwen3-vl-8b" / "config.json", folder / "config.json")
    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config, indent=2))
    return folder


def test_a_generation_config_with_sampling_sets_the_servers_defaults(tmp_path):
    declared = {
        "bos_token_id": 151643,
        "pad_token_id": 151643,
        "do_sample": True,
        "eos_token_id": [151645, 151643],
        "top_k": 20,
        "top_p": 0.8,
        "repetition_penalty": 1.0,
        "temperature": 0.7,
    }
    assert generation_defaults(checkpoint(tmp_path, declared)) == RELEASED


def test_hugging_faces_max_new_tokens_is_vllms_max_tokens(tmp_path):
    declared = {"temperature": 0.3, "max_new_tokens": 128, "presence_penalty": 1.5}
    assert generation_defaults(checkpoint(tmp_path, declared)) == {
        "temperature": 0.3,
        "presence_penalty": 1.5,
        "max_tokens": 128,
    }


def test_a_checkpoint_without_a_generation_config_sets_no_sampling(tmp_path):
    assert generation_defaults(checkpoint(tmp_path, None)) == {}


@pytest.mark.parametrize("model", ["demo-small", "demo-large"])
def test_the_demo_models_set_no_sampling(model):
    assert generation_defaults(ROOT / "models" / model) == {}


# SHA-256 of the released files (configs/checkpoints/README.md says where each is recorded).
RELEASED_DIGESTS = {
    "qwen3-vl-2b": "1e241830b48b397cb0900101421df5450baddc7adf01e5fc86b5615865f3bae4",
    "qwen3-vl-8b": "8469742d1fce0de951c8909b26a2c0c0d8490837ce476efb114da9e0cefc4d44",
}


@pytest.mark.parametrize("folder", sorted(RELEASED_DIGESTS))
def test_the_vendored_released_checkpoints_set_the_released_sampling(folder):
    released = (CHECKPOINTS / folder / "generation_config.json").read_bytes()
    assert hashlib.sha256(released).hexdigest() == RELEASED_DIGESTS[folder]  # the released bytes
    assert generation_defaults(CHECKPOINTS / folder) == RELEASED


def test_a_folder_without_a_config_is_not_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        generation_defaults(tmp_path)
