"""first_run: each model of a config asked directly with every prompt the policies send it (Simple,
Reasoning, Stage 2, and reasoning transfer for the large model), streamed, at a few image sizes: time
to first token, decoding speed, prompt, cached and image tokens, beside the paper's H100 figures for
the same model size (Tables 3 and 4). The check to run first on new hardware: ``--config`` serves
another config (``configs/mai.yaml`` on GPUs), ``--url`` measures a server already serving it."""

from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import dataclass
from typing import Any

from serve_app.core.prompts import PromptKind
from serve_app.core.roles import ROLES

from ..cells import median_range
from ..paper_reference import PaperSize, paper_decode_tokens_per_s, paper_size, paper_ttft_ms, table3_range
from ..scenario import Bench, Scenario
from ..streaming import StreamTiming, decode_tokens_per_s
from ..summary import spread

CONFIG = "mai-cpu.yaml"
ANSWER_KIND = "text"  # the question's answer kind: the short-answer prompts, the reference transfer form


@dataclass(frozen=True)
class Parameters:
    sizes: tuple[int, ...] = (256, 512, 1024)  # sides of the square synthetic images, pixels
    repetitions: int = 5
    decode_tokens: int = 64  # every call decodes this many tokens (ignore_eos), for a decoding speed
    stages: tuple[str, ...] = ("simple", "reasoning", "stage2", "transfer")
    question: str = "What is the color of the shape?"
    timeout_s: float = 300.0  # one call
    deploy_timeout_s: float = 1800.0  # until /readyz is 200, when the run deploys the config itself


def sends(role: str, kind: PromptKind) -> bool:
    """Whether a policy sends this prompt to this model: all of them but the transfer prompt, which
    only the large model reads."""
    return not (role == "small" and kind is PromptKind.TRANSFER)


def prompt_kinds(stages: tuple[str, ...]) -> tuple[PromptKind, ...]:
    known = {kind.value for kind in PromptKind}
    if unknown := [stage for stage in stages if stage not in known]:
        raise ValueError(f"stages: {', '.join(unknown)} not among {', '.join(sorted(known))}")
    return tuple(PromptKind(stage) for stage in stages)


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """Deploy the config (unless ``bench.served``), wait for ``/readyz``, then per repetition, image
    size, model and prompt two calls through the ingress's passthrough (``model: <model_id>``), one at
    a time, each with an image never sent before (no prefix-cache hit on the image): one token, not
    streamed (its latency is the time to the first token), then ``decode_tokens`` streamed with usage
    (the decoding speed, the prompt's and the cached tokens, the first chunk a streaming client gets)."""
    from harness.local_server import config_args, deploy
    from serve_app.config import load_app_config

    from ..image_prompts import model_image_tokens

    name = bench.config or CONFIG
    args = config_args(name)
    config = load_app_config(args)
    kinds = prompt_kinds(parameters.stages)
    if not bench.served:
        deploy(args, timeout_s=parameters.deploy_timeout_s)
    models = {role: getattr(config, role) for role in ROLES}
    measured = asyncio.run(measure(bench.url, models, kinds, config.cascade.max_tokens.reasoning, parameters))
    result: dict[str, Any] = {
        "config": f"configs/{name}",
        "question": parameters.question,
        "sizes": list(parameters.sizes),
        "repetitions": parameters.repetitions,
        "decode_tokens": parameters.decode_tokens,
        "reasoning_tokens": measured["reasoning_tokens"],
        "models": {},
    }
    for role, model in models.items():
        paper = paper_size(role, model.source, model.model_id)
        rule = model_image_tokens(
            model.source, model.engine_kwargs.get("mm_processor_kwargs") or {}, parameters.sizes
        )
        result["models"][role] = {
            "model_id": model.model_id,
            "source": model.source,
            "paper_size": paper.size,
            "paper_size_basis": paper.basis,
            "stages": {
                kind.value: {
                    "prompt_tokens_without_image": measured["text_only"][(role, kind)],
                    "sizes": {
                        str(side): cell_summary(
                            measured["timings"][(role, kind, side)],
                            rule[side],
                            measured["text_only"][(role, kind)],
                            paper,
                        )
                        for side in parameters.sizes
                    },
                }
                for kind in kinds
                if sends(role, kind)
            },
        }
    return result


async def measure(
    url: str, models: dict[str, Any], kinds: tuple[PromptKind, ...], reasoning_budget: int, p: Parameters
) -> dict[str, Any]:
    """The calls: a warm-up per model and size, the small model's reasoning that the Stage 2 and
    transfer prompts carry (written once), each prompt's tokens without its image, then the timed
    pairs: one token not streamed, then the stream."""
    import httpx

    from serve_app.core.prompts import PromptLayout, build_messages

    from ..image_prompts import synthetic_png
    from ..streaming import complete, stream_chat

    images = itertools.count()
    key = os.environ.get("MAI_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    def body(role: str, kind: PromptKind, side: int | None, reasoning: str, max_tokens: int) -> dict:
        image = None if side is None else synthetic_png(side, next(images))
        carries = kind in (PromptKind.STAGE2, PromptKind.TRANSFER)
        messages = build_messages(
            [] if image is None else [image],
            p.question,
            (),
            ANSWER_KIND,
            kind,
            reasoning=reasoning if carries else None,
            layout=PromptLayout(models[role].prompt_layout),
        )
        return {
            "model": models[role].model_id,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }

    async with httpx.AsyncClient(base_url=url, timeout=p.timeout_s, headers=headers) as http:
        await check_serves(http, [model.model_id for model in models.values()])
        for side, role in itertools.product(p.sizes, ROLES):  # warm-up, not counted
            await complete(http, body(role, PromptKind.SIMPLE, side, "", 1))
        _, written = await complete(
            http, body("small", PromptKind.REASONING, p.sizes[0], "", reasoning_budget)
        )
        reasoning = (written["choices"][0]["message"]["content"] or "").strip()
        text_only = {}
        for role, kind in itertools.product(ROLES, kinds):
            if sends(role, kind):
                _, reply = await complete(http, body(role, kind, None, reasoning, 1))
                text_only[(role, kind)] = reply["usage"]["prompt_tokens"]
        timings: dict[tuple[str, PromptKind, int], list[Sample]] = {}
        for _, side, role, kind in itertools.product(range(p.repetitions), p.sizes, ROLES, kinds):
            if sends(role, kind):
                ttft_s, _ = await complete(http, body(role, kind, side, reasoning, 1))
                call = body(role, kind, side, reasoning, p.decode_tokens) | {"ignore_eos": True}
                sample = Sample(ttft_s, await stream_chat(http, call))
                timings.setdefault((role, kind, side), []).append(sample)
    return {
        "timings": timings,
        "text_only": text_only,
        "reasoning_tokens": written["usage"]["completion_tokens"],
    }


async def check_serves(http: Any, model_ids: list[str]) -> None:
    """The server serves these model ids (``GET /v1/models``): a run against another config stops."""
    response = await http.get("/v1/models")
    response.raise_for_status()
    served = {entry["id"] for entry in response.json()["data"]}
    if missing := [model_id for model_id in model_ids if model_id not in served]:
        raise RuntimeError(
            f"the server does not serve {', '.join(missing)} (it serves {', '.join(sorted(served))}): "
            "pass the config it serves with --config"
        )


@dataclass(frozen=True)
class Sample:
    """One repetition of a cell: a one-token call's latency and the stream of the same prompt."""

    ttft_s: float
    stream: StreamTiming


def cell_summary(
    samples: list[Sample], image_rule: int | None, text_only_tokens: int, paper: PaperSize
) -> dict[str, Any]:
    """One model, prompt and image size over the repetitions: medians with their spread, the image's
    tokens (by the processor's rule, else the prompt's tokens less the same prompt's without the
    image), and the paper's figures at the same prompt length with the ratios to them."""
    streams = [sample.stream for sample in samples]
    prompt = spread([s.prompt_tokens for s in streams], 1)
    ttft = spread([1000 * sample.ttft_s for sample in samples], 2)
    decode = spread([decode_tokens_per_s(sample.ttft_s, sample.stream) for sample in samples], 1)
    assert prompt is not None and ttft is not None, "a cell without calls"
    with_markers = round(prompt["median"] - text_only_tokens)
    summary: dict[str, Any] = {
        "ttft_ms": ttft,
        "first_chunk_ms": spread([1000 * s.first_s for s in streams], 2),
        "decode_tokens_per_s": decode,
        "prompt_tokens": prompt,
        "cached_tokens": spread([s.cached_tokens for s in streams], 1),
        "completion_tokens": spread([s.completion_tokens for s in streams], 1),
        "image_tokens": with_markers if image_rule is None else image_rule,
        "image_tokens_from": "measured" if image_rule is None else "processor",
        "image_tokens_measured": with_markers,  # the image's tokens and its markers
        "paper": None,
    }
    if paper.size is not None:
        paper_ttft, outside = paper_ttft_ms(paper.size, prompt["median"])
        paper_decode = paper_decode_tokens_per_s(paper.size)
        summary["paper"] = {
            "ttft_ms": paper_ttft,
            "ttft_extrapolated": outside,
            "decode_tokens_per_s": paper_decode,
            "ttft_ratio": round(ttft["median"] / paper_ttft, 2),
            "decode_ratio": None if decode is None else round(decode["median"] / paper_decode, 2),
        }
    return summary


def table(result: dict[str, Any]) -> list[str]:
    low, high = table3_range()
    lines = [
        f"`{result['config']}`: each model asked directly through the ingress (`model: <model_id>`), one "
        "call at a time, a synthetic image never sent before in every call; "
        f"{result['repetitions']} repetitions: median [min–max]. TTFT: a one-token call's latency, as the "
        "client sees it; streamed first chunk: the same prompt streamed, whose chunks ray.serve.llm sends "
        f"in batches. Decoding: {result['decode_tokens']} tokens streamed (`ignore_eos`), those after the "
        "first per second after the TTFT. Stage 2 and transfer prompts carry the small model's own "
        f"reasoning ({result['reasoning_tokens']} tokens). Paper: Qwen3-VL on one H100, TTFT from Table 3 "
        f"at the same prompt tokens (* outside the {low:,}–{high:,} tokens it measured: held flat below, "
        "extrapolated above), decoding from Table 4; × paper: this run's median over the paper's figure.",
        "",
        "| model | prompt | image | image tokens | prompt tokens (cached) | TTFT ms | streamed first "
        "chunk ms | paper TTFT ms | TTFT × paper | decode tok/s | paper tok/s | decode × paper |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for role, model in result["models"].items():
        size = model["paper_size"]
        label = f"{role} `{model['model_id']}`" + (f" ({size[:-1]}B)" if size else "")
        notes.append(f"{role} `{model['model_id']}` (`{model['source']}`): {model['paper_size_basis']}")
        for stage, row in model["stages"].items():
            for side, cell in row["sizes"].items():
                paper = cell["paper"] or {}
                marked = "*" if paper.get("ttft_extrapolated") else ""
                cached = f"{cell['cached_tokens']['median']:g}" if cell["cached_tokens"] else "–"
                lines.append(
                    f"| {label} | {stage} | {side}² | {cell['image_tokens']} | "
                    f"{cell['prompt_tokens']['median']:g} ({cached}) | {median_range(cell['ttft_ms'])} | "
                    f"{median_range(cell['first_chunk_ms'])} | {paper.get('ttft_ms', '–')}{marked} | "
                    f"{_ratio(paper.get('ttft_ratio'))} | {median_range(cell['decode_tokens_per_s'])} | "
                    f"{paper.get('decode_tokens_per_s', '–')} | {_ratio(paper.get('decode_ratio'))} |"
                )
    return [*lines, "", "The paper's model for each: " + "; ".join(notes) + "."]


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


SCENARIO = Scenario(
    name="first_run",
    title="First run: each model's time to first token and decoding speed",
    result="first_run.json",
    config=CONFIG,
    run=run,
    table=table,
    parameters=Parameters(),
    takes_config=True,
)
