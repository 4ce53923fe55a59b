"""The tiny Gemma 3 builder: what it writes loads with transformers' Auto classes, renders a message with
Gemma 3's chat template, expands an image to the configured soft tokens, and keeps the weight layout and
vocabulary vLLM's Gemma 3 model reads."""

import json

import pytest

from training.tiny import training_corpus
from training.tiny_gemma3 import GEMMA3, NEWLINE_RUNS, Gemma3Spec, build

QUESTION = "What color is the shape?"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build(tmp_path_factory.mktemp("models"), training_corpus())


@pytest.fixture(scope="module")
def processor(checkpoint):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(checkpoint)


def image_message(text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


@pytest.mark.slow  # builds a model with torch
def test_processor_and_chat_template_render_gemma3_turns(processor):
    assert type(processor).__name__ == "Gemma3Processor"
    assert type(processor.image_processor).__name__ == "Gemma3ImageProcessor"
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
        *image_message(f"  {QUESTION} "),
        {"role": "assistant", "content": "red"},
        *image_message("And now?"),
    ]
    rendered = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<bos><start_of_turn>user\nAnswer briefly.\n\n<start_of_image>"
        f"{QUESTION}<end_of_turn>\n"
        "<start_of_turn>model\nred<end_of_turn>\n"
        "<start_of_turn>user\n<start_of_image>And now?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    single = processor.apply_chat_template(
        image_message(QUESTION), tokenize=False, add_generation_prompt=True
    )
    assert single.index("<start_of_turn>user\n") < single.index("<start_of_image>") < single.index(QUESTION)
    assert single.endswith("<end_of_turn>\n<start_of_turn>model\n")


@pytest.mark.slow  # builds a model with torch
def test_an_image_becomes_the_configured_soft_tokens_whatever_its_size(checkpoint, processor):
    from PIL import Image

    config = json.loads((checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForConditionalGeneration"]
    assert config["mm_tokens_per_image"] == processor.image_seq_length == GEMMA3.image_tokens
    tokenizer = processor.tokenizer
    text = processor.apply_chat_template(image_message(QUESTION), tokenize=False, add_generation_prompt=True)
    for size in [(100, 75), (33, 200)]:
        batch = processor(text=[text], images=[Image.new("RGB", size, (255, 0, 0))], return_tensors="pt")
        ids = batch["input_ids"][0].tolist()
        image_id = tokenizer.convert_tokens_to_ids("<image_soft_token>")
        assert ids.count(image_id) == GEMMA3.image_tokens
        first = ids.index(image_id)
        assert ids[first - 1] == tokenizer.convert_tokens_to_ids("<start_of_image>")
        assert ids[first + GEMMA3.image_tokens] == tokenizer.convert_tokens_to_ids("<end_of_image>")
        assert list(batch["pixel_values"].shape) == [1, 3, GEMMA3.image_size, GEMMA3.image_size]
    assert tokenizer.decode(ids[first + GEMMA3.image_tokens + 1 :]).startswith(f"\n\n{QUESTION}")


@pytest.mark.slow  # builds a model with torch
def test_weights_in_the_layout_vllm_reads_and_transformers_loads(checkpoint):
    from safetensors import safe_open
    from transformers import AutoTokenizer, Gemma3ForConditionalGeneration

    with safe_open(checkpoint / "model.safetensors", "pt") as weights:
        names = list(weights.keys())
    vision = [name for name in names if name.startswith("vision_tower.")]
    assert vision and all(name.startswith("vision_tower.vision_model.") for name in vision)
    _, info = Gemma3ForConditionalGeneration.from_pretrained(checkpoint, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    vocab = AutoTokenizer.from_pretrained(checkpoint).get_vocab()
    assert all(run in vocab for run in NEWLINE_RUNS)  # vLLM's Gemma 3 processor looks them up
    assert len(vocab) <= json.loads((checkpoint / "config.json").read_text())["text_config"]["vocab_size"]


@pytest.mark.slow  # builds a model with torch
def test_a_built_checkpoint_is_kept(checkpoint):
    weights = checkpoint / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert build(checkpoint.parent, training_corpus()) == checkpoint
    assert weights.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"head_dim": 32}, "head_dim=32"),
        ({"image_size": 66}, "image_size=66"),
        ({"image_tokens": 200}, "image_tokens=200"),
        ({"image_tokens": 9}, "image_tokens=9"),  # 3 does not divide 16 patches per side
    ],
)
def test_spec_rejects_sizes_vllm_cannot_run(change, message):
    with pytest.raises(ValueError, match=message):
        Gemma3Spec(**change)
