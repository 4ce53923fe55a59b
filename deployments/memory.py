"""What a GPU engine (or the attention scorer) needs of a card's memory, and whether what is placed on one
card fits it. Pure: numbers and config files (deployments/architecture.py), no torch or vLLM.

An engine's need, in bytes:

- **weights**: parameters x bytes of the engine's dtype (a quantized checkpoint: its stored bytes), the
  parameters as deployments/architecture.py counts them; unknown without the checkpoint's config
  files at hand (a hub id the project does not vendor): the check then says so.
- **KV cache**: ``kv_cache_memory_bytes``; without it vLLM profiles and gives the KV cache what
  ``gpu_memory_utilization`` leaves, which must hold one whole context (vLLM refuses it otherwise).
- **activations and CUDA graphs** (an estimate): the tensors of vLLM's profile step alive at once
  (one decoder layer's MLP and attention inputs for ``max_num_batched_tokens`` tokens, or the vision
  tower's MLP on the largest image; the image's embeddings; the sampler's float32 logits for
  ``max_num_seqs`` sequences), doubled for what it leaves out (attention workspaces, the allocator's
  fragmentation), plus a 1 GiB CUDA graph pool unless ``enforce_eager``. Unset, the step's tokens and
  sequences are vLLM's largest defaults (8,192 and 1,024).
- **CUDA context**: 1 GiB a process (0.5 GiB measured at torch's start on an H200, before vLLM loads
  its kernels and libraries' workspaces).

A card's usable memory is what CUDA reports as its total: NVML's less 615 MiB, the gap measured on an
H200 (NVML 143,771 MiB, CUDA 139.80 GiB: experiments/scorer-h200/scorer_gpu.json). The rules, per
card, for everything placed on it (``card_problems``):

1. an engine with a fixed KV budget stays within its share (weights + KV + activations <= share x
   total): vLLM does not hold it to the share, so an engine over it takes the others' memory;
2. an engine without one keeps a whole context of KV cache within its share;
3. each engine's start check passes even when it starts last: its share is free beside the others'
   footprints and its own CUDA context;
4. the footprints together fit the card.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .architecture import DTYPE_BYTES, Architecture, architecture_of
from .gpus import GPUS, MiB

GiB = 1 << 30
DRIVER_RESERVE_MIB = 615  # NVML's total less CUDA's, on the H200 measured
CUDA_CONTEXT = GiB  # per process
CUDA_GRAPHS = GiB
MARGIN = 2
DEFAULT_BATCHED_TOKENS = 8192  # vLLM's largest default (OpenAI server, a 70+ GiB GPU)
DEFAULT_SEQS = 1024
PROMPT_ALLOWANCE = 512  # templates and a question beside the image and the reasoning


def usable_bytes(kind: str) -> int:
    """The memory CUDA reports as the card's total."""
    return (GPUS[kind].memory_mib - DRIVER_RESERVE_MIB) * MiB


def gib(value: float) -> str:
    return f"{value / GiB:.1f} GiB"


@dataclass(frozen=True)
class Need:
    """What one process needs of its card. ``share``: the engine's gpu_memory_utilization (None for the
    scorer, which checks nothing at start); ``kv`` None: a profiled engine, whose KV cache is what its
    share leaves and must hold ``min_kv``."""

    name: str
    weights: int | None
    kv: int | None
    activations: int
    share: float | None = None
    min_kv: int = 0
    kv_per_token: int = 0
    context: int = CUDA_CONTEXT

    def footprint(self, total: int) -> int | None:
        if self.share is not None and self.kv is None:
            return self.context + math.ceil(self.share * total)
        if self.weights is None:
            return None
        return self.context + self.weights + (self.kv or 0) + self.activations

    def parts(self, total: int) -> str:
        """Weights, KV cache and activations, as a sum of figures (the CUDA context apart)."""
        kv = self.kv if self.kv is not None else self.profiled_kv(total)
        weights = "unknown" if self.weights is None else gib(self.weights)
        return f"weights {weights} + KV {gib(kv or 0)} + activations and CUDA graphs {gib(self.activations)}"

    def profiled_kv(self, total: int) -> int | None:
        if self.share is None or self.weights is None:
            return None
        return math.floor(self.share * total) - self.weights - self.activations


class EngineSpec(Protocol):
    """What the estimate reads of a model deployment (deployments/settings.py's ModelDeployment)."""

    @property
    def model_id(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def engine_kwargs(self) -> dict[str, Any]: ...
    @property
    def accelerator_type(self) -> str | None: ...
    def local_source(self) -> Path | None: ...
    def gpu_share(self) -> float: ...
    def shares_a_gpu(self) -> bool: ...


def need_of(name: str, spec: EngineSpec) -> Need:
    return engine_need(name, spec, architecture_of(spec.source, spec.local_source()))


def shared_gpu_problems(small: EngineSpec, large: EngineSpec, scorer: Need | None = None) -> list[str]:
    """Two engines on fractions of one GPU: each checks at start that the device's free memory covers
    its gpu_memory_utilization share, so the shares must fit the device together; on a GPU one of them
    names (accelerator_type), everything on it must fit its memory (``card_problems``)."""
    models = {"small": small, "large": large}
    if not all(model.shares_a_gpu() for model in models.values()):
        return []
    if sum(model.gpu_share() for model in models.values()) > 1:
        return []  # the bundles cannot share one GPU: each engine gets its own
    shares = {
        f"{role}.engine_kwargs.gpu_memory_utilization": float(
            model.engine_kwargs.get("gpu_memory_utilization", 0.9)
        )
        for role, model in models.items()
    }
    if sum(shares.values()) > 1:
        return [
            f"{' + '.join(f'{key} ({value})' for key, value in shares.items())} exceed one GPU: both "
            "engines share it (fractional GPU bundles), and each needs its share free at start"
        ]
    kind = small.accelerator_type or large.accelerator_type
    if kind not in GPUS:
        return []
    needs = [need_of(f"{role} {model.model_id}", model) for role, model in models.items()]
    return card_problems(kind, needs + ([scorer] if scorer is not None else []))


def activations(arch: Architecture, tokens: int, image_tokens: int, seqs: int, dtype_bytes: int) -> int:
    """The profile step's largest tensors alive at once, doubled (the module's docstring)."""
    projections = (arch.heads + 2 * arch.kv_heads) * arch.head_dim
    text = tokens * (3 * arch.intermediate + 2 * arch.hidden + projections) * dtype_bytes
    patches = image_tokens * arch.merge * arch.merge
    vision = patches * (2 * arch.vision_intermediate + 4 * arch.vision_hidden) * dtype_bytes
    embeddings = image_tokens * arch.out_hidden * arch.image_outputs * dtype_bytes
    logits = seqs * arch.vocab * 4 * 2
    return MARGIN * (max(text, vision) + embeddings + logits)


def engine_need(name: str, spec: EngineSpec, arch: Architecture | None) -> Need:
    """The need of one vLLM engine; weights None when the checkpoint's parameters are unknown."""
    kwargs = spec.engine_kwargs
    share = float(kwargs.get("gpu_memory_utilization", 0.9))
    budget = kwargs.get("kv_cache_memory_bytes")
    if arch is None:
        return Need(name, None, budget, 0, share)
    dtype = DTYPE_BYTES.get(str(kwargs.get("dtype", "auto"))) or arch.dtype_bytes
    kv_dtype = 1 if str(kwargs.get("kv_cache_dtype", "auto")).startswith("fp8") else dtype
    context = int(kwargs.get("max_model_len") or 0) or arch.context
    pixels = (kwargs.get("mm_processor_kwargs") or {}).get("max_pixels")
    tokens = int(kwargs.get("max_num_batched_tokens") or DEFAULT_BATCHED_TOKENS)
    seqs = int(kwargs.get("max_num_seqs") or DEFAULT_SEQS)
    image = arch.image_tokens(pixels, context) if arch.vision_hidden else 0
    graphs = 0 if kwargs.get("enforce_eager") else CUDA_GRAPHS
    per_token = arch.kv_bytes_per_token(kv_dtype)
    return Need(
        name=name,
        weights=weights_bytes(arch, dtype, quantized="quantization" in kwargs),
        kv=budget,
        activations=activations(arch, tokens, image, seqs, dtype) + graphs,
        share=share,
        min_kv=context * per_token,
        kv_per_token=per_token,
    )


def weights_bytes(arch: Architecture, dtype_bytes: int, quantized: bool = False) -> int | None:
    """The weights in memory: a quantized checkpoint's stored bytes, else parameters x dtype bytes."""
    if quantized or arch.quantized:
        return arch.stored_bytes
    return None if arch.parameters is None else arch.parameters * dtype_bytes


def scorer_need(
    arch: Architecture | None, dtype: str, max_reasoning_tokens: int, max_pixels: int | None
) -> Need:
    """The attention scorer on a GPU: its checkpoint in transformers (weights in ``dtype``), the
    prefill of its largest prompt (the largest image, the reasoning cap, a question) estimated as an
    engine's step, no sampler and no CUDA graphs."""
    if arch is None:
        return Need("scorer", None, None, 0)
    size = DTYPE_BYTES.get(dtype) or 2
    image = arch.image_tokens(max_pixels, 1 << 20) if arch.vision_hidden else 0
    prompt = image + max_reasoning_tokens + PROMPT_ALLOWANCE
    steps = activations(arch, prompt, image, 0, size)
    return Need("scorer", weights_bytes(arch, size), None, steps)


def scorer_need_of(
    source: str, dtype: str | None, max_reasoning_tokens: int, mm_processor_kwargs: Mapping[str, Any]
) -> Need:
    """The scorer's need from its settings: ``source`` a hub id or a resolved local folder."""
    local = Path(source) if Path(source).is_absolute() else None
    arch = architecture_of(source, local)
    return scorer_need(arch, dtype or "bfloat16", max_reasoning_tokens, mm_processor_kwargs.get("max_pixels"))


def card_problems(kind: str, needs: Sequence[Need]) -> list[str]:
    """One line per rule (the module's docstring) that the processes on one card of ``kind`` break,
    naming every number; empty when they fit."""
    total = usable_bytes(kind)
    card = f"one {kind} ({gib(total)} as CUDA reports it)"
    problems = []
    footprints = {need.name: need.footprint(total) for need in needs}
    for need in needs:
        if need.share is not None:
            problems.extend(_share_problems(need, card, total))
    known = [value for value in footprints.values() if value is not None]
    if sum(known) > total:
        listed = " + ".join(f"{name} {gib(value)}" for name, value in footprints.items() if value is not None)
        problems.append(
            f"what is placed on {card} needs {listed} = {gib(sum(known))} (CUDA contexts included), "
            f"over its {gib(total)}"
        )
        return problems
    for need in needs:  # each engine's start check, when it starts last
        if need.share is None:
            continue
        room = math.floor(need.share * total)
        others = {name: value for name, value in footprints.items() if name != need.name and value}
        free = total - sum(others.values()) - need.context
        if room > free:
            listed = ", ".join(f"{name} {gib(value)}" for name, value in others.items())
            beside = f"the others ({listed}) and " if listed else ""
            problems.append(
                f"{need.name} on {card}: at start it needs its gpu_memory_utilization {need.share:g} "
                f"({gib(room)}) free, but beside {beside}its own CUDA context ({gib(need.context)}) "
                f"{gib(free)} is left when it starts last: lower the shares"
            )
    return problems


def _share_problems(need: Need, card: str, total: int) -> list[str]:
    """Rules 1 and 2: an engine within its share, and a profiled engine's KV cache a whole context."""
    assert need.share is not None
    room = math.floor(need.share * total)
    if need.kv is not None:
        used = (need.weights or 0) + need.kv + need.activations
        if used <= room:
            return []
        fits = room - (need.weights or 0) - need.activations
        share = math.ceil(used / total * 100) / 100
        lower = math.floor(fits / GiB * 10) / 10  # GiB, rounded down: what fits
        remedy = [f"lower kv_cache_memory_bytes to {lower:.1f} GiB"] if lower > 0 else []
        remedy += [f"raise the share to {share:g}"] if share <= 1 - need.context / total else []
        return [
            f"{need.name} on {card}: {need.parts(total)} = {gib(used)} exceed its gpu_memory_utilization "
            f"{need.share:g} ({gib(room)}); vLLM does not hold an engine with a fixed KV budget to its "
            f"share, so it would take the others' memory: {' or '.join(remedy) or 'it does not fit the card'}"
        ]
    if need.weights is None:
        return []
    kv = room - need.weights - need.activations
    if kv >= need.min_kv:
        return []
    return [
        f"{need.name} on {card}: gpu_memory_utilization {need.share:g} ({gib(room)}) less weights "
        f"{gib(need.weights)} and activations and CUDA graphs {gib(need.activations)} leaves {gib(kv)} of "
        f"KV cache, under one whole context ({gib(need.min_kv)}): vLLM refuses it at start; a larger "
        "card, a shorter max_model_len or a smaller model"
    ]
