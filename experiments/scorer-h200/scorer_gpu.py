#!/usr/bin/env python3
"""Device check of the project's attention scorer (deployments/attention.py, ``ReasoningScorer``) on one GPU.

It reads the project's own files (MAI_SCORER_FILES=DIR: a copy of them laid out as below, for a
machine where only torch, transformers and Pillow are installed; the run recorded in scorer_gpu.json
used such a copy, byte for byte the project's at the commit it names) --
  deployments/attention.py           the module checked (stdlib + lazy torch, transformers, PIL; the
                                     package's other modules need Ray, and are not imported)
  models/demo-small/                 the tiny demo checkpoint (float32, 2 text layers)
  configs/checkpoints/qwen3-vl-{2b,8b}/  the released configs (no weights) the project vendors
  docs/examples/shape.png            the example image

Steps, each recorded in the JSON even when another fails:
  env          versions, the GPU, the transformers APIs the scorer registers its attention through
  correctness  demo-small through ReasoningScorer (the project's public API) on cpu/float32, gpu with no
               dtype set (bfloat16, the scorer's GPU default) and gpu/float32: the kept token sets
               (Jaccard at delta 0.8 and 0.5) and the attention rows (max abs diff, Spearman) across
               the three, and each against transformers' eager attention (output_attentions=True) at
               the same layer, device and dtype
  cost         Qwen3-VL-2B and -8B with RANDOM weights from the vendored config.json, bfloat16, built on
               the GPU: the scorer's prefill (ReasoningScorer.attention: mai_last_row, the last layer's
               final-position row read) against the same prefill with no row read and against
               transformers' own "sdpa", for an image of 1024 visual tokens (1024x1024 px through the
               released image processor under the engines' mm_processor_kwargs), a ~30-token question
               and 256 / 1024 / 4096 reasoning tokens: median ms of 5 runs after 2 warm-ups, peak GPU
               memory; plus a check of the row against eager attention at the real size, and which
               masks the attention calls got (None: SDPA's causal kernels, no L x L mask)
  installed    only when this runs on the carried 5.19 wheel (PYTHONPATH): env + correctness again in a
               subprocess with the machine's own transformers, if the time budget allows

--smoke runs every step's code on the CPU with tiny shapes (a shrunken config, short lengths, one
thread), to check the script on a machine with no GPU.

Output: progress lines (flushed), a summary, and JSON at $OUT/scorer_gpu.json ($OUT unset:
./scorer_gpu.json), rewritten after every step so a killed run still leaves what it got.
"""

# The script as run on the H200 (scorer_gpu.json), its paths the project's: its long report lines are
# kept, and its closures run inside the loop that defines them.
# ruff: noqa: E501, B023

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

START = time.perf_counter()
HERE = Path(__file__).resolve().parent
FILES = Path(os.environ.get("MAI_SCORER_FILES") or HERE.parents[1])  # the project, or a copy of its files
sys.path.insert(0, str(FILES))  # `deployments.attention`, as the project imports it
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEMO = FILES / "models" / "demo-small"
REAL = {name: FILES / "configs" / "checkpoints" / name for name in ("qwen3-vl-2b", "qwen3-vl-8b")}
VENDORED = FILES / "deployments" / "attention.py"
# configs/mai.yaml's mm_processor_kwargs for the released models' engines (what the scorer is given)
ENGINE_KWARGS = {"max_pixels": 4194304, "min_pixels": 65536}
REASONING = "The shape in the image is a red circle. Its colour is red, so the answer is yes. [[Yes]]"
LAYERS = (-1, 0)  # the scorer's default (last) and the first
DELTAS = (0.8, 0.5)

RESULT: dict = {"script": "experiments/scorer-h200/scorer_gpu.py", "steps": {}}
ROWS: dict = {}  # correctness: role -> example -> layer -> the scorer's weights (for the installed step)
OUT_PATH: Path = Path("scorer_gpu.json")
DEADLINE = START + 200.0


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:7.1f}s] {message}", flush=True)


def left() -> float:
    return DEADLINE - time.perf_counter()


def clean(value):
    """JSON-safe: non-finite floats as strings, tuples as lists, unknown objects as repr."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return repr(value)


def save() -> None:
    RESULT["elapsed_s"] = round(time.perf_counter() - START, 2)
    try:
        OUT_PATH.parent.mkdir(parents=True, exist_ok=True)
        tmp = OUT_PATH.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(clean(RESULT), indent=1))
        os.replace(tmp, OUT_PATH)
    except Exception as error:  # noqa: BLE001 - the run goes on; the summary still prints
        print(f"could not write {OUT_PATH}: {error!r}", flush=True)


def error_record(error: BaseException) -> dict:
    return {"error": f"{type(error).__name__}: {error}"[:2000], "traceback": traceback.format_exc()[-4000:]}


def run_step(name: str, function, *args) -> dict:
    """Runs one step; whatever it put in its record stays, an exception is recorded beside it."""
    record: dict = {"ok": None}
    RESULT["steps"][name] = record
    started = time.perf_counter()
    log(f"== step {name}")
    try:
        function(record, *args)
        record["ok"] = True
    except Exception as error:  # noqa: BLE001 - one failing step must not end the run
        record["ok"] = False
        record.update(error_record(error))
        log(f"step {name} FAILED: {record['error'][:500]}")
    finally:
        record["seconds"] = round(time.perf_counter() - started, 2)
        save()
    return record


# ---------------------------------------------------------------- the device


class Device:
    def __init__(self, smoke: bool):
        import torch

        self.torch = torch
        self.smoke = smoke
        self.cuda = (not smoke) and torch.cuda.is_available()
        self.name = "cuda" if self.cuda else "cpu"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def allocated(self) -> int | None:
        return self.torch.cuda.memory_allocated() if self.cuda else None

    def peak(self) -> int | None:
        return self.torch.cuda.max_memory_allocated() if self.cuda else None

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


def gib(value: int | None) -> float | None:
    return None if value is None else round(value / 2**30, 3)


# ---------------------------------------------------------------- step: env


def step_env(record: dict, dev: Device) -> None:
    import inspect

    import torch

    record["python"] = sys.version.split()[0]
    record["platform"] = platform.platform()
    record["executable"] = sys.executable
    record["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    record["torch"] = torch.__version__
    record["torch_cuda"] = torch.version.cuda
    record["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    record["cpu_threads"] = torch.get_num_threads()
    for name in ("transformers", "tokenizers", "PIL", "numpy", "safetensors", "accelerate", "torchvision"):
        try:
            module = __import__(name)
            record[name] = getattr(module, "__version__", "?")
            if name == "transformers":
                record["transformers_path"] = str(Path(module.__file__).parent)
        except Exception as error:  # noqa: BLE001
            record[name] = f"missing: {type(error).__name__}: {error}"
    record["vendored_attention_sha256"] = hashlib.sha256(VENDORED.read_bytes()).hexdigest()
    manifest = FILES / "MANIFEST.json"
    if manifest.exists():
        record["manifest"] = json.loads(manifest.read_text())
    record["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        record["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "total_gib": gib(props.total_memory),
            "free_gib": gib(free),
            "device_count": torch.cuda.device_count(),
        }
        record["sdp_backends"] = {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
            "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)(),
        }
        record["tf32"] = {
            "matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_conv": torch.backends.cudnn.allow_tf32,
        }
    record["run_device"] = dev.name
    # the transformers API that deployments/attention.py registers its attention through
    api: dict = {}
    for label, module, attr in (
        ("AttentionInterface", "transformers", "AttentionInterface"),
        ("AttentionMaskInterface", "transformers", "AttentionMaskInterface"),
        ("masking_utils.sdpa_mask", "transformers.masking_utils", "sdpa_mask"),
        (
            "integrations.sdpa_attention.sdpa_attention_forward",
            "transformers.integrations.sdpa_attention",
            "sdpa_attention_forward",
        ),
        ("Qwen3VLForConditionalGeneration", "transformers", "Qwen3VLForConditionalGeneration"),
        (
            "modeling_qwen3_vl.eager_attention_forward",
            "transformers.models.qwen3_vl.modeling_qwen3_vl",
            "eager_attention_forward",
        ),
    ):
        try:
            obj = getattr(__import__(module, fromlist=[attr]), attr)
            try:
                signature = (
                    str(inspect.signature(obj)) if callable(obj) and not inspect.isclass(obj) else "class"
                )
            except (TypeError, ValueError):
                signature = "?"
            api[label] = {"present": True, "signature": signature[:400]}
        except Exception as error:  # noqa: BLE001
            api[label] = {"present": False, "error": f"{type(error).__name__}: {error}"}
    record["transformers_api"] = api
    from deployments.attention import ATTENTION, register_attention

    register_attention()
    from transformers import AttentionInterface, AttentionMaskInterface

    record["registered"] = {
        "attention": ATTENTION in AttentionInterface._global_mapping,
        "mask": ATTENTION in AttentionMaskInterface._global_mapping,
    }
    log(
        f"python {record['python']}, torch {record['torch']} (cuda {record['torch_cuda']}), transformers "
        f"{record['transformers']} at {record.get('transformers_path')}, tokenizers {record['tokenizers']}"
    )
    log(f"gpu: {record.get('gpu')}")
    log(f"api present: { {k: v['present'] for k, v in api.items()} }, registered: {record['registered']}")


# ---------------------------------------------------------------- comparisons


def rankdata(values):
    import numpy as np

    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_values = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(a, b) -> float:
    import numpy as np

    if len(a) < 2:
        return 1.0
    ra, rb = rankdata(a), rankdata(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def compare(a, b) -> dict:
    """Two attention rows over the same reasoning tokens: their difference and the tokens each keeps."""
    import numpy as np

    from deployments.attention import select_by_mass

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    out: dict = {"n": len(x)}
    if len(x) != len(y):
        return out | {"error": f"lengths differ: {len(x)} vs {len(y)}"}
    if not len(x):
        return out
    out["finite"] = bool(np.isfinite(x).all() and np.isfinite(y).all())
    out["max_abs_diff"] = float(np.max(np.abs(x - y)))
    out["max_weight"] = float(max(np.max(x), np.max(y)))
    out["rel_max_abs_diff"] = out["max_abs_diff"] / out["max_weight"] if out["max_weight"] > 0 else 0.0
    out["spearman"] = spearman(x, y)
    out["top1_same"] = bool(int(np.argmax(x)) == int(np.argmax(y)))
    for delta in DELTAS:
        kx, ky = set(select_by_mass(x.tolist(), delta)), set(select_by_mass(y.tolist(), delta))
        union = kx | ky
        out[f"jaccard@{delta}"] = len(kx & ky) / len(union) if union else 1.0
        out[f"kept@{delta}"] = [len(kx), len(ky)]
    return out


def summarise(comparisons: list[dict]) -> dict:
    def values(key):
        return [c[key] for c in comparisons if isinstance(c.get(key), (int, float)) and math.isfinite(c[key])]

    summary: dict = {"cases": len(comparisons)}
    for key in ("max_abs_diff", "rel_max_abs_diff"):
        if values(key):
            summary[f"{key}_max"] = max(values(key))
    for key in ("spearman", *(f"jaccard@{d}" for d in DELTAS)):
        if values(key):
            summary[f"{key}_min"] = min(values(key))
            summary[f"{key}_mean"] = sum(values(key)) / len(values(key))
    summary["top1_same"] = sum(1 for c in comparisons if c.get("top1_same"))
    summary["all_finite"] = all(c.get("finite", True) for c in comparisons)
    return summary


# ---------------------------------------------------------------- images


def png_data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def drawn(size, shape: str, colour, background=(245, 245, 245)):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(image)
    w, h = size
    box = (w * 0.25, h * 0.25, w * 0.75, h * 0.75)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([(w * 0.5, h * 0.2), (w * 0.2, h * 0.8), (w * 0.8, h * 0.8)], fill=colour)
    else:
        draw.rectangle(box, fill=colour)
    return image


def examples() -> list[dict]:
    shape = (
        "data:image/png;base64,"
        + base64.b64encode((FILES / "docs" / "examples" / "shape.png").read_bytes()).decode()
    )
    blue = png_data_url(drawn((200, 160), "square", (30, 60, 200)))
    green = png_data_url(drawn((640, 480), "triangle", (30, 170, 60)))
    return [
        {"name": "shape.png / red?", "image": shape, "question": "Is the shape red?", "reasoning": REASONING},
        {
            "name": "blue square 200x160",
            "image": blue,
            "question": "What colour is the shape?",
            "reasoning": "The image shows one shape. It has four equal sides, so it is a square. Its colour is "
            "blue, not red and not green. So the colour of the shape is blue. [[Blue]]",
        },
        {
            "name": "green triangle 640x480",
            "image": green,
            "question": "Is there a triangle in the image?",
            "reasoning": (
                "The shape has three corners and three sides, so it is a triangle. It is green. " * 3
            )
            + "So the answer is yes. [[Yes]]",
        },
        {"name": "no image", "image": None, "question": "What colour is the shape?", "reasoning": REASONING},
        {
            "name": "shape.png / long reasoning",
            "image": shape,
            "question": "Is the shape red?",
            "reasoning": " ".join([REASONING] * 40),
        },
    ]


# ---------------------------------------------------------------- step: correctness on demo-small


def step_correctness(record: dict, dev: Device) -> None:
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from deployments.attention import ReasoningScorer

    gpu_word = "gpu" if not dev.smoke else "cpu"  # the scorer configuration's device word
    roles = [
        ("cpu_float32", "cpu", "float32"),
        # no dtype: the scorer's own GPU default (bfloat16); in --smoke, bfloat16 on the CPU stands in
        ("gpu_default_bf16", gpu_word, None if not dev.smoke else "bfloat16"),
        ("gpu_float32", gpu_word, "float32"),
    ]
    cases = examples()
    record["examples"] = [{"name": c["name"], "image": c["image"] is not None} for c in cases]
    rows = ROWS  # role -> example index -> layer -> weights
    record["roles"] = {}
    record["eager"] = {}
    for role, device, dtype in roles:
        info: dict = {"device": device, "dtype_arg": dtype}
        record["roles"][role] = info
        try:
            started = time.perf_counter()
            scorer = ReasoningScorer(str(DEMO), device=device, dtype=dtype, max_reasoning_tokens=4096)
            info["load_s"] = round(time.perf_counter() - started, 2)
            info["scorer_dtype"] = scorer.dtype
            info["model_dtype"] = str(scorer.model.dtype)
            info["model_device"] = str(next(scorer.model.parameters()).device)
            info["attn_implementation"] = scorer.model.config._attn_implementation
            tokenizer = scorer.processor.tokenizer
            rows[role] = {}
            info["cases"] = []
            for index, case in enumerate(cases):
                ids = tokenizer(case["reasoning"], add_special_tokens=False).input_ids[
                    : scorer.max_reasoning_tokens
                ]
                rows[role][index] = {}
                case_info: dict = {"reasoning_tokens": len(ids)}
                for layer in LAYERS:
                    started = time.perf_counter()
                    rows[role][index][layer] = scorer.attention(case["image"], case["question"], ids, layer)
                    case_info[f"attention_ms@{layer}"] = round((time.perf_counter() - started) * 1000, 1)
                inputs, start = scorer.inputs(case["image"], case["question"], ids)
                case_info["prompt_tokens"] = int(inputs["input_ids"].shape[1])
                case_info["image_tokens"] = int(
                    (inputs["input_ids"] == scorer.processor.image_token_id).sum()
                )
                selected = scorer.select(case["image"], case["question"], case["reasoning"], delta=0.8)
                case_info["select"] = {
                    "tokens_before": selected["tokens_before"],
                    "tokens_after": selected["tokens_after"],
                    "mass": selected["mass"],
                    "ms": round(selected["seconds"] * 1000, 1),
                    "text": selected["text"][:160],
                }
                info["cases"].append(case_info)
            log(
                f"correctness {role}: {scorer.dtype} on {info['model_device']}, load {info['load_s']} s, "
                f"select ms {[c['select']['ms'] for c in info['cases']]}"
            )
            # transformers' eager attention (full matrices) at the same device and dtype
            eager_info: dict = {}
            record["eager"][role] = eager_info
            try:
                eager = (
                    Qwen3VLForConditionalGeneration.from_pretrained(
                        str(DEMO), attn_implementation="eager", dtype=getattr(torch, scorer.dtype)
                    )
                    .to(scorer.device)
                    .eval()
                )
                comparisons = []
                for index, case in enumerate(cases):
                    ids = tokenizer(case["reasoning"], add_special_tokens=False).input_ids[
                        : scorer.max_reasoning_tokens
                    ]
                    inputs, start = scorer.inputs(case["image"], case["question"], ids)
                    with torch.no_grad():
                        matrices = eager.model(**inputs, output_attentions=True, use_cache=False).attentions
                    for layer in LAYERS:
                        expected = (
                            matrices[layer][0].float().mean(dim=0)[-1][start : start + len(ids)].tolist()
                        )
                        comparison = compare(rows[role][index][layer], expected)
                        comparisons.append(comparison | {"example": index, "layer": layer})
                eager_info["summary"] = summarise(comparisons)
                eager_info["cases"] = comparisons
                log(f"correctness {role} vs eager (same device/dtype): {fmt_summary(eager_info['summary'])}")
                del eager, matrices
            except Exception as error:  # noqa: BLE001
                eager_info.update(error_record(error))
                log(f"correctness {role} vs eager FAILED: {eager_info['error'][:300]}")
            del scorer
            dev.free()
        except Exception as error:  # noqa: BLE001
            info.update(error_record(error))
            log(f"correctness {role} FAILED: {info['error'][:300]}")
        save()
    record["pairs"] = {}
    for first, second in (
        ("cpu_float32", "gpu_default_bf16"),
        ("cpu_float32", "gpu_float32"),
        ("gpu_float32", "gpu_default_bf16"),
    ):
        if first not in rows or second not in rows:
            record["pairs"][f"{first} vs {second}"] = {"skipped": "a role failed"}
            continue
        comparisons = [  # what both roles got (a role that failed part way has fewer)
            compare(rows[first][i][layer], rows[second][i][layer]) | {"example": i, "layer": layer}
            for i in range(len(cases))
            for layer in LAYERS
            if layer in rows[first].get(i, {}) and layer in rows[second].get(i, {})
        ]
        record["pairs"][f"{first} vs {second}"] = {"summary": summarise(comparisons), "cases": comparisons}
        log(
            f"correctness {first} vs {second}: {fmt_summary(record['pairs'][f'{first} vs {second}']['summary'])}"
        )


def fmt_summary(summary: dict) -> str:
    def get(key, digits=4):
        value = summary.get(key)
        return f"{value:.{digits}g}" if isinstance(value, (int, float)) else "-"

    return (
        f"max|diff| {get('max_abs_diff_max', 3)} (rel {get('rel_max_abs_diff_max', 3)}), spearman min "
        f"{get('spearman_min')} mean {get('spearman_mean')}, jaccard@0.8 min {get('jaccard@0.8_min', 3)} mean "
        f"{get('jaccard@0.8_mean', 3)}, jaccard@0.5 min {get('jaccard@0.5_min', 3)}, top1 same "
        f"{summary.get('top1_same')}/{summary.get('cases')}, finite {summary.get('all_finite')}"
    )


# ---------------------------------------------------------------- step: cost at the real size


def real_config(name: str, smoke: bool):
    """The released config (no weights); in --smoke shrunk to a few layers and small widths, keeping the
    vocabulary, the special token ids, the head size and the image processor's patch geometry."""
    from transformers import AutoConfig

    if not smoke:
        return AutoConfig.from_pretrained(REAL[name])
    data = json.loads((REAL[name] / "config.json").read_text())
    data["text_config"].update(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    data["vision_config"].update(
        depth=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        out_hidden_size=256,
        deepstack_visual_indexes=[0, 1],
    )
    folder = Path(tempfile.mkdtemp(prefix="smoke-config-"))
    (folder / "config.json").write_text(json.dumps(data))
    return AutoConfig.from_pretrained(folder)


def prompt_inputs(
    config, pixel_values, grid_thw, merge: int, question_tokens: int, reasoning_tokens: int, seed: int
):
    """The scorer's transfer prompt as token ids (random text tokens, the real special and image ids):
    <|im_start|>user\\n<|vision_start|><|image_pad|>xT<|vision_end|>{question}\\nReasoning: {reasoning}
    \\nAnswer the question.<|im_end|>\\n<|im_start|>assistant\\n -- and the first reasoning position."""
    import torch

    generator = torch.Generator().manual_seed(seed)

    def text(n):
        return torch.randint(1000, 150000, (n,), generator=generator).tolist()

    im_start, im_end = 151644, 151645
    image_tokens = int(grid_thw.prod()) // merge**2
    before = (
        [im_start]
        + text(2)  # user \n
        + [config.vision_start_token_id]
        + [config.image_token_id] * image_tokens
        + [config.vision_end_token_id]
        + text(question_tokens)
        + text(4)  # question, "\nReasoning: "
    )
    reasoning = text(reasoning_tokens)
    after = text(6) + [im_end] + text(1) + [im_start] + text(2)  # "\nAnswer the question." ... assistant \n
    ids = torch.tensor([before + reasoning + after])
    mm = (ids == config.image_token_id).long()
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": pixel_values,
        "image_grid_thw": grid_thw,
        "mm_token_type_ids": mm,
    }
    return inputs, len(before), reasoning


def bench(dev: Device, function, warmup: int, runs: int) -> dict:
    torch = dev.torch
    for _ in range(warmup):
        function()
    dev.sync()
    dev.free()
    base = dev.allocated()
    dev.reset_peak()
    wall, gpu = [], []
    for _ in range(runs):
        if dev.cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dev.sync()
        started = time.perf_counter()
        if dev.cuda:
            begin.record()
        function()
        if dev.cuda:
            end.record()
        dev.sync()
        wall.append((time.perf_counter() - started) * 1000)
        if dev.cuda:
            gpu.append(begin.elapsed_time(end))
    out = {
        "median_ms": round(statistics.median(wall), 2),
        "min_ms": round(min(wall), 2),
        "max_ms": round(max(wall), 2),
        "runs_ms": [round(t, 2) for t in wall],
    }
    if gpu:
        out["cuda_event_median_ms"] = round(statistics.median(gpu), 2)
    if dev.cuda:
        out["peak_gib"] = gib(dev.peak())
        out["peak_over_resident_gib"] = gib(dev.peak() - base)
    return out


def step_cost(record: dict, dev: Device, args) -> None:
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, Qwen3VLForConditionalGeneration

    import deployments.attention as scorer_module
    from deployments.attention import ATTENTION, ReasoningScorer, register_attention

    register_attention()
    smoke = dev.smoke
    lengths = (
        [int(x) for x in args.lengths.split(",")]
        if args.lengths
        else ([16, 64] if smoke else [256, 1024, 4096])
    )
    eager_lengths = lengths[:1]
    warmup, runs = (1, 2) if smoke else (args.warmup, args.runs)
    image_size = (128, 128) if smoke else (1024, 1024)
    kwargs = {"max_pixels": 16384, "min_pixels": 4096} if smoke else ENGINE_KWARGS
    record.update(
        lengths=lengths,
        warmup=warmup,
        runs=runs,
        image_px=list(image_size),
        mm_processor_kwargs=kwargs,
        question_tokens=30,
        dtype="bfloat16",
        device=dev.name,
        layer_read=-1,
        models={},
    )
    variants = ("scorer", "no_capture", "sdpa")
    margin = 3.0 if smoke else 15.0  # seconds kept in hand before starting a piece of work
    init_rate = None  # seconds per billion parameters, from the first model built
    for name in [m for m in args.models.split(",") if m]:
        info: dict = {}
        record["models"][name] = info
        model = scorer = None
        try:
            config = real_config(name, smoke)
            text_cfg = config.text_config
            info["config"] = {
                "text_layers": text_cfg.num_hidden_layers,
                "hidden": text_cfg.hidden_size,
                "heads": text_cfg.num_attention_heads,
                "kv_heads": text_cfg.num_key_value_heads,
                "head_dim": getattr(text_cfg, "head_dim", None),
                "vocab": text_cfg.vocab_size,
                "vision_depth": config.vision_config.depth,
                "vision_hidden": config.vision_config.hidden_size,
            }
            # an estimate of the build before spending it: 8B ~ 4.1x the 2B's parameters
            estimate = (init_rate or 6.0) * (0.1 if smoke else 8.8 if "8b" in name else 2.2) + margin
            if left() < estimate:
                info["skipped"] = f"time budget: {left():.0f} s left, build + runs estimated {estimate:.0f} s"
                log(f"cost {name}: skipped ({info['skipped']})")
                continue
            dev.free()
            dev.reset_peak()
            torch.manual_seed(0)  # the same random weights on every run
            started = time.perf_counter()
            with torch.device(dev.name):
                model = Qwen3VLForConditionalGeneration._from_config(
                    config, dtype=torch.bfloat16, attn_implementation=ATTENTION
                )
            model.eval()
            dev.sync()
            info["build_s"] = round(time.perf_counter() - started, 2)
            params = sum(p.numel() for p in model.parameters())
            info["parameters_b"] = round(params / 1e9, 3)
            info["weights_gib"] = gib(dev.allocated())
            info["attn_implementation"] = model.config._attn_implementation
            info["param_device"] = str(next(model.parameters()).device)
            info["param_dtype"] = str(next(model.parameters()).dtype)
            init_rate = info["build_s"] / max(params / 1e9, 1e-3)
            log(
                f"cost {name}: built {info['parameters_b']} B params in {info['build_s']} s on {info['param_device']}, "
                f"{info['weights_gib']} GiB"
            )

            # the image as the released image processor makes it under the engines' kwargs
            processor = AutoImageProcessor.from_pretrained(REAL[name], **kwargs)
            rng = __import__("numpy").random.default_rng(0)
            picture = drawn(image_size, "circle", (200, 30, 30))
            noise = Image.fromarray(rng.integers(0, 255, (image_size[1], image_size[0], 3), dtype="uint8"))
            picture = Image.blend(picture, noise, 0.3)
            started = time.perf_counter()
            pixels = processor(images=[picture], return_tensors="pt")
            info["image_processor_ms"] = round((time.perf_counter() - started) * 1000, 1)
            info["image_processor"] = type(processor).__name__
            merge = config.vision_config.spatial_merge_size
            info["image_grid_thw"] = pixels.image_grid_thw.tolist()
            info["pixel_values_shape"] = list(pixels.pixel_values.shape)
            info["image_tokens"] = int(pixels.image_grid_thw.prod()) // merge**2

            scorer = ReasoningScorer.__new__(ReasoningScorer)  # the project's class, around this model
            scorer.torch, scorer.device, scorer.dtype = torch, dev.name, "bfloat16"
            scorer.max_reasoning_tokens, scorer.processor, scorer.model = 1 << 20, None, model
            scorer.layers = text_cfg.num_hidden_layers
            info["lengths"] = {}
            previous = None  # (total tokens, the scorer's median ms)
            for length in lengths:
                entry: dict = {}
                info["lengths"][str(length)] = entry
                try:
                    cpu_inputs, start, reasoning_ids = prompt_inputs(
                        config, pixels.pixel_values, pixels.image_grid_thw, merge, 30, length, seed=length
                    )
                    total = int(cpu_inputs["input_ids"].shape[1])
                    entry["prompt_tokens"] = total
                    started = time.perf_counter()
                    inputs = {k: v.to(dev.name) for k, v in cpu_inputs.items()}
                    dev.sync()
                    entry["to_device_ms"] = round((time.perf_counter() - started) * 1000, 2)
                    # ReasoningScorer.inputs, made from these tensors (the processor has no real tokenizer here)
                    scorer.inputs = lambda image_url, question, ids, _i=inputs, _s=start: (_i, _s)
                    if previous:
                        per_run = previous[1] / 1000 * (total / previous[0]) * 1.5
                        needed = per_run * (warmup + runs) * len(variants) + margin / 3
                        entry["estimated_s"] = round(needed, 1)
                        if needed > left():
                            entry["skipped"] = f"time budget: {left():.0f} s left, estimated {needed:.0f} s"
                            log(f"cost {name} reasoning {length}: skipped ({entry['skipped']})")
                            continue

                    def run_scorer():
                        return scorer.attention(None, "", reasoning_ids, -1)

                    def run_plain():
                        with torch.no_grad():
                            model.model(**inputs, use_cache=False)

                    if length == lengths[0]:
                        entry["sanity"] = sanity(dev, model, scorer_module, inputs, start, len(reasoning_ids))
                        log(f"cost {name}: sanity {entry['sanity']}")
                    for variant in variants:
                        try:
                            if left() < margin / 2:
                                entry[variant] = {"skipped": "time budget"}
                                continue
                            if variant == "scorer":
                                entry[variant] = bench(dev, run_scorer, warmup, runs)
                            elif variant == "no_capture":  # mai_last_row with no module read: SDPA alone
                                entry[variant] = bench(dev, run_plain, warmup, runs)
                            else:  # transformers' own sdpa implementation
                                model.set_attn_implementation("sdpa")
                                try:
                                    # a module marked for reading: had mai_last_row still run, it would keep a row
                                    scorer_module._capture.module = model.model.language_model.layers[
                                        -1
                                    ].self_attn
                                    scorer_module._capture.row = None
                                    entry[variant] = bench(dev, run_plain, warmup, runs)
                                    entry[variant]["attn_implementation"] = model.config._attn_implementation
                                    entry[variant]["mai_last_row_ran"] = (
                                        scorer_module._capture.row is not None
                                    )
                                finally:
                                    scorer_module._capture.module = scorer_module._capture.row = None
                                    model.set_attn_implementation(ATTENTION)
                        except Exception as error:  # noqa: BLE001
                            entry[variant] = error_record(error)
                            log(
                                f"cost {name} reasoning {length} {variant} FAILED: {entry[variant]['error'][:300]}"
                            )
                            dev.free()
                    scorer_ms = entry.get("scorer", {}).get("median_ms")
                    plain_ms = entry.get("no_capture", {}).get("median_ms")
                    if scorer_ms and plain_ms:
                        entry["capture_overhead_ms"] = round(scorer_ms - plain_ms, 2)
                        entry["capture_overhead_pct"] = round(100 * (scorer_ms - plain_ms) / plain_ms, 1)
                    if scorer_ms:
                        previous = (total, scorer_ms)
                    if length in eager_lengths and left() > margin * 1.3:
                        entry["eager_check"] = eager_check(
                            dev, model, scorer, inputs, reasoning_ids, ATTENTION
                        )
                        log(
                            f"cost {name} reasoning {length}: eager check {fmt_summary(entry['eager_check'].get('summary', {}))}"
                            f" eager ms {entry['eager_check'].get('eager_ms')} peak {entry['eager_check'].get('eager_peak_gib')}"
                        )
                    log(
                        f"cost {name} reasoning {length} ({total} tokens): "
                        + ", ".join(
                            f"{v} {entry[v].get('median_ms')} ms peak {entry[v].get('peak_gib')} GiB"
                            for v in variants
                            if isinstance(entry.get(v), dict)
                        )
                        + f", capture overhead {entry.get('capture_overhead_ms')} ms"
                    )
                except Exception as error:  # noqa: BLE001
                    entry.update(error_record(error))
                    log(f"cost {name} reasoning {length} FAILED: {entry['error'][:300]}")
                finally:
                    save()
        except Exception as error:  # noqa: BLE001
            info.update(error_record(error))
            log(f"cost {name} FAILED: {info['error'][:300]}")
        finally:
            scorer_module._capture.module = scorer_module._capture.row = None
            model = scorer = None  # noqa: F841 - drop the references before freeing
            dev.free()
            save()


def sanity(dev: Device, model, scorer_module, inputs, start: int, reasoning_len: int) -> dict:
    """One prefill with the last layer read, watching what the attention calls receive: the masks (None
    means SDPA's is_causal kernels and no L x L mask), and the row itself (finite, sums to 1)."""
    import transformers.integrations.sdpa_attention as sdpa_module

    torch = dev.torch
    calls: dict = {}
    original_sdpa = sdpa_module.sdpa_attention_forward
    original_row = scorer_module.last_row_attention
    seen_row: dict = {}

    def spy_sdpa(module, query, key, value, attention_mask, *args, **kwargs):
        kind = "none" if attention_mask is None else f"{attention_mask.dtype}{list(attention_mask.shape)}"
        where = "text" if hasattr(module, "layer_idx") else type(module).__name__
        label = f"{where} q{query.shape[2]} k{key.shape[2]} mask {kind}"
        calls[label] = calls.get(label, 0) + 1
        return original_sdpa(module, query, key, value, attention_mask, *args, **kwargs)

    def spy_row(query, key, attention_mask, scaling):
        seen_row["query"] = list(query.shape)
        seen_row["key"] = list(key.shape)
        seen_row["mask"] = (
            None if attention_mask is None else f"{attention_mask.dtype}{list(attention_mask.shape)}"
        )
        return original_row(query, key, attention_mask, scaling)

    sdpa_module.sdpa_attention_forward = spy_sdpa
    scorer_module.last_row_attention = spy_row
    try:
        scorer_module._capture.module = model.model.language_model.layers[-1].self_attn
        scorer_module._capture.row = None
        with torch.no_grad():
            model.model(**inputs, use_cache=False)
        row = scorer_module._capture.row
    finally:
        sdpa_module.sdpa_attention_forward = original_sdpa
        scorer_module.last_row_attention = original_row
        scorer_module._capture.module = scorer_module._capture.row = None
    out: dict = {"attention_calls": calls, "row_inputs": seen_row}
    if row is None:
        return out | {"row": None}
    sums = row.float().sum(dim=-1)
    head_mean = row[0].float().mean(dim=0)
    out |= {
        "row_shape": list(row.shape),
        "row_dtype": str(row.dtype),
        "finite": bool(torch.isfinite(row).all()),
        "row_sum_min": float(sums.min()),
        "row_sum_max": float(sums.max()),
        "reasoning_share": float(head_mean[start : start + reasoning_len].sum()),
    }
    return out


def eager_check(dev: Device, model, scorer, inputs, reasoning_ids, attention: str) -> dict:
    """The scorer's row (mai_last_row, bf16) against transformers' eager attention matrices at the same
    (last) layer of the same random-weight model: what the O(L^2) route costs and whether they agree."""
    torch = dev.torch
    out: dict = {}
    weights = scorer.attention(None, "", reasoning_ids, -1)
    start = scorer.inputs(None, "", reasoning_ids)[1]
    model.set_attn_implementation("eager")
    try:
        dev.free()
        dev.reset_peak()
        dev.sync()
        started = time.perf_counter()
        with torch.no_grad():
            matrices = model.model(**inputs, output_attentions=True, use_cache=False).attentions
        dev.sync()
        out["eager_ms"] = round((time.perf_counter() - started) * 1000, 1)
        out["eager_peak_gib"] = gib(dev.peak())
        out["eager_implementation"] = model.config._attn_implementation
        expected = matrices[-1][0].float().mean(dim=0)[-1][start : start + len(reasoning_ids)].tolist()
        del matrices
        comparison = compare(weights, expected)
        out["summary"] = summarise([comparison])
        out["case"] = comparison
    finally:
        model.set_attn_implementation(attention)
        dev.free()
    return out


# ---------------------------------------------------------------- step: the machine's own transformers


def step_installed(record: dict, args) -> None:
    import transformers

    path = Path(transformers.__file__).resolve()
    entries = [Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not any(entry in path.parents for entry in entries):
        record["skipped"] = (
            f"transformers {transformers.__version__} is not from PYTHONPATH: nothing else to compare"
        )
        log(record["skipped"])
        return
    budget = left() - 5
    if budget < (10 if args.smoke else 40):
        record["skipped"] = f"time budget: {left():.0f} s left"
        log(record["skipped"])
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = Path(tempfile.mkdtemp(prefix="installed-")) / "installed.json"
    rows_out = out.with_name("rows.json")
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--steps",
        "env,correctness",
        "--out",
        str(out),
        "--budget",
        str(int(max(budget, 30))),
        "--rows-out",
        str(rows_out),
    ]
    if args.smoke:
        command.append("--smoke")
    log(f"installed: {' '.join(command)} (PYTHONPATH unset)")
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=max(budget, 30))
    record["returncode"] = completed.returncode
    record["output_tail"] = (completed.stdout + completed.stderr)[-3000:]
    if out.exists():
        record["result"] = json.loads(out.read_text())
    for line in completed.stdout.splitlines():
        if "correctness" in line or "transformers" in line or "FAILED" in line:
            print("    [installed] " + line, flush=True)
    # the same role's rows under this run's transformers and the machine's own
    if rows_out.exists():
        theirs = json.loads(rows_out.read_text())
        versions = f"{transformers.__version__} vs {record.get('result', {}).get('steps', {}).get('env', {}).get('transformers')}"
        record["across_versions"] = {"versions": versions}
        for role, examples_rows in ROWS.items():
            if role not in theirs:
                continue
            comparisons = [
                compare(layers[layer], theirs[role][str(index)][str(layer)])
                | {"example": index, "layer": layer}
                for index, layers in examples_rows.items()
                for layer in layers
                if str(index) in theirs[role] and str(layer) in theirs[role][str(index)]
            ]
            record["across_versions"][role] = summarise(comparisons)
            log(f"installed: {role} transformers {versions}: {fmt_summary(record['across_versions'][role])}")


# ---------------------------------------------------------------- the summary


def print_summary() -> None:
    steps = RESULT["steps"]
    print("\n========== summary", flush=True)
    env = steps.get("env", {})
    print(
        f"env: torch {env.get('torch')} (cuda {env.get('torch_cuda')}), transformers {env.get('transformers')}"
        f" [{env.get('transformers_path')}], gpu {env.get('gpu', {}).get('name') if env.get('gpu') else None}"
        f" {env.get('gpu', {}).get('total_gib') if env.get('gpu') else ''} GiB",
        flush=True,
    )
    for name, step in steps.items():
        print(
            f"step {name}: ok={step.get('ok')} {step.get('seconds')} s {step.get('error', '')[:200]}",
            flush=True,
        )
    correctness = steps.get("correctness", {})
    for pair, value in correctness.get("pairs", {}).items():
        print(
            f"  {pair}: {fmt_summary(value.get('summary', {})) if 'summary' in value else value}", flush=True
        )
    for role, value in correctness.get("eager", {}).items():
        print(
            f"  {role} vs eager: {fmt_summary(value.get('summary', {})) if 'summary' in value else value.get('error')}",
            flush=True,
        )
    cost = steps.get("cost", {})
    if cost.get("models"):
        print(
            f"cost ({cost.get('dtype')} on {cost.get('device')}, image {cost.get('image_px')} px, "
            f"median of {cost.get('runs')} after {cost.get('warmup')} warm-ups):",
            flush=True,
        )
        print(
            f"  {'model':12} {'reason':>6} {'tokens':>6} {'scorer ms':>10} {'no-capt ms':>10} {'sdpa ms':>9} "
            f"{'ovh ms':>7} {'peak GiB s/n/sdpa':>20}",
            flush=True,
        )
        for model, info in cost["models"].items():
            if "error" in info or "skipped" in info:
                print(f"  {model:12} {info.get('skipped') or info.get('error', '')[:150]}", flush=True)
                if "build_s" not in info:
                    continue
            head = (
                f"  {model}: {info.get('parameters_b')} B params, build {info.get('build_s')} s, weights "
                f"{info.get('weights_gib')} GiB, image tokens {info.get('image_tokens')} grid {info.get('image_grid_thw')}"
            )
            print(head, flush=True)
            for length, entry in info.get("lengths", {}).items():
                if "sanity" in entry:
                    sanity_info = entry["sanity"]
                    print(
                        f"    attention calls at reasoning {length}: {sanity_info.get('attention_calls')}; row "
                        f"{sanity_info.get('row_shape')} {sanity_info.get('row_dtype')} finite "
                        f"{sanity_info.get('finite')} sums {sanity_info.get('row_sum_min')}..{sanity_info.get('row_sum_max')}",
                        flush=True,
                    )
                if "eager_check" in entry:
                    check = entry["eager_check"]
                    print(
                        f"    vs eager at reasoning {length}: "
                        f"{fmt_summary(check.get('summary', {})) if 'summary' in check else check.get('error')}; "
                        f"eager {check.get('eager_ms')} ms, peak {check.get('eager_peak_gib')} GiB",
                        flush=True,
                    )
            for length, entry in info.get("lengths", {}).items():
                if "skipped" in entry or ("error" in entry and "scorer" not in entry):
                    print(
                        f"  {model:12} {length:>6} {entry.get('skipped') or entry.get('error', '')[:150]}",
                        flush=True,
                    )
                    continue

                def ms(v):
                    return entry.get(v, {}).get(
                        "median_ms",
                        entry.get(v, {}).get("error", "-")[:20] if isinstance(entry.get(v), dict) else "-",
                    )

                def pk(v):
                    return entry.get(v, {}).get("peak_gib", "-") if isinstance(entry.get(v), dict) else "-"

                print(
                    f"  {model:12} {length:>6} {entry.get('prompt_tokens', '-'):>6} {ms('scorer'):>10} "
                    f"{ms('no_capture'):>10} {ms('sdpa'):>9} {str(entry.get('capture_overhead_ms', '-')):>7} "
                    f"{pk('scorer')}/{pk('no_capture')}/{pk('sdpa')}",
                    flush=True,
                )
    installed = steps.get("installed", {})
    if installed.get("result"):
        sub = installed["result"]["steps"]
        print(
            f"installed transformers {sub.get('env', {}).get('transformers')}: "
            + "; ".join(f"{k} ok={v.get('ok')}" for k, v in sub.items()),
            flush=True,
        )
        for pair, value in sub.get("correctness", {}).get("pairs", {}).items():
            print(
                f"  [installed] {pair}: {fmt_summary(value.get('summary', {})) if 'summary' in value else value}",
                flush=True,
            )
        for role, value in sub.get("correctness", {}).get("eager", {}).items():
            print(
                f"  [installed] {role} vs eager: "
                f"{fmt_summary(value.get('summary', {})) if 'summary' in value else value.get('error')}",
                flush=True,
            )
    across = installed.get("across_versions", {})
    for role, value in across.items():
        if role != "versions":
            print(f"  transformers {across.get('versions')}, {role}: {fmt_summary(value)}", flush=True)
    print(f"json: {OUT_PATH}  elapsed {time.perf_counter() - START:.1f} s", flush=True)


def main() -> int:
    global OUT_PATH, DEADLINE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="CPU, tiny shapes: check the script without a GPU"
    )
    parser.add_argument("--steps", default="env,correctness,cost,installed")
    parser.add_argument("--models", default="qwen3-vl-2b,qwen3-vl-8b")
    parser.add_argument(
        "--lengths", default="", help="reasoning tokens, comma-separated (default 256,1024,4096)"
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--budget", type=float, default=200.0, help="seconds from start; later work is skipped"
    )
    parser.add_argument(
        "--out", default="", help="JSON path (default $OUT/scorer_gpu.json or ./scorer_gpu.json)"
    )
    parser.add_argument("--rows-out", default="", help=argparse.SUPPRESS)  # the installed step's subprocess
    args = parser.parse_args()
    if args.out:
        OUT_PATH = Path(args.out)
    else:
        OUT_PATH = (Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(".")) / "scorer_gpu.json"
    DEADLINE = START + args.budget
    RESULT["args"] = vars(args)
    RESULT["started_unix"] = time.time()
    log(f"scorer-gpu/scorer_gpu.py {' '.join(sys.argv[1:])}: json -> {OUT_PATH}, budget {args.budget:.0f} s")
    steps = [s for s in args.steps.split(",") if s]
    try:
        import torch

        if args.smoke:
            torch.set_num_threads(1)
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        dev = Device(args.smoke)
        log(
            f"imports done: torch {torch.__version__}, transformers {transformers.__version__}, device {dev.name}"
        )
    except Exception as error:  # noqa: BLE001
        RESULT["import_error"] = error_record(error)
        save()
        print(f"imports FAILED: {RESULT['import_error']['error']}", flush=True)
        return 1
    if "env" in steps:
        run_step("env", step_env, dev)
    if "correctness" in steps:
        run_step("correctness", step_correctness, dev)
        if args.rows_out:
            Path(args.rows_out).write_text(json.dumps(clean(ROWS)))
    if "cost" in steps:
        run_step("cost", step_cost, dev, args)
    if "installed" in steps:
        run_step("installed", step_installed, args)
    RESULT["ok"] = all(step.get("ok") for step in RESULT["steps"].values())
    save()
    print_summary()
    return 0


if __name__ == "__main__":
    sys.exit(main())
