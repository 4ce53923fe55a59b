"""The first_run scenario without a server: a stream's timing from its events, a cell's medians and its
ratios to the paper's figures, the paper size a model's name gives, the image-token rule, the table,
and the runner's --config / --url."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from harness.paths import ROOT
from loadtest.bench.cli import check_served, config_name, main
from loadtest.bench.image_prompts import image_tokens, synthetic_png
from loadtest.bench.paper_reference import PaperSize, paper_size
from loadtest.bench.runner import command_of
from loadtest.bench.scenarios import SCENARIOS, first_run
from loadtest.bench.streaming import StreamError, StreamTiming, decode_tokens_per_s, timing_of


def sse(chunk: dict) -> str:
    return "data: " + json.dumps(chunk)


def content(text: str) -> str:
    return sse({"choices": [{"index": 0, "delta": {"content": text}}]})


USAGE = {"prompt_tokens": 90, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 32}}


def test_a_stream_is_timed_from_its_first_and_last_tokens_and_its_usage():
    lines = [
        (10.05, sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})),
        (10.10, content("The")),
        (10.12, ""),
        (10.20, content(" shape")),
        (10.30, content(" is red")),
        # Tokens past an end of sequence that decode to no text send no chunk; the finish does.
        (10.45, sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})),
        (10.46, sse({"choices": [], "usage": USAGE})),
        (10.47, "data: [DONE]"),
    ]
    timing = timing_of(10.0, lines)
    assert timing.first_s == pytest.approx(0.10)  # the role chunk carries no token
    assert timing.end_s == pytest.approx(0.46)
    assert (timing.prompt_tokens, timing.completion_tokens, timing.cached_tokens) == (90, 5, 32)


def test_decoding_runs_from_a_one_token_calls_latency_to_the_streams_end():
    # 64 tokens: the first at 0.05 s (a one-token call), the last at 2.05 s: 63 tokens in 2 s.
    assert decode_tokens_per_s(0.05, StreamTiming(0.1, 2.05, 90, 64, 0)) == pytest.approx(31.5)
    assert decode_tokens_per_s(0.05, StreamTiming(0.1, 2.05, 90, 1, 0)) is None
    # A one-token call slower than the whole stream (a slow sample): the stream's first chunk bounds
    # its first token, 7 tokens from 0.1 s to 0.4 s.
    assert decode_tokens_per_s(0.5, StreamTiming(0.1, 0.4, 90, 8, 0)) == pytest.approx(23.33, abs=0.01)
    assert decode_tokens_per_s(0.5, StreamTiming(0.4, 0.4, 90, 8, 0)) is None  # no time at all


def test_a_stream_without_content_or_usage_or_with_an_error_is_refused():
    with pytest.raises(StreamError, match="no content"):
        timing_of(0.0, [(0.1, sse({"choices": [], "usage": USAGE}))])
    with pytest.raises(StreamError, match="without usage"):
        timing_of(0.0, [(0.1, content("a"))])
    with pytest.raises(StreamError, match="the stream failed: .*overloaded"):
        timing_of(0.0, [(0.1, content("a")), (0.2, sse({"error": {"message": "overloaded"}}))])


def timings(ttfts_ms: list[float], decode_s: float, prompt: int = 576) -> list[first_run.Sample]:
    """One sample per TTFT: its stream's first chunk 40 ms later, its 64th token ``decode_s`` later."""
    return [
        first_run.Sample(ms / 1000, StreamTiming(ms / 1000 + 0.04, ms / 1000 + decode_s, prompt, 64, 32))
        for ms in ttfts_ms
    ]


def test_a_cell_has_medians_with_their_spread_and_its_ratios_to_the_paper():
    # Table 3 has 2B at 576 tokens: 27.92 ms; Table 4: 61.8 tokens/s. 63 tokens in 2.039 s: 30.9/s.
    cell = first_run.cell_summary(timings([60.0, 55.84, 50.0], 63 / 30.9), 64, 400, PaperSize("2b", "x"))
    assert cell["ttft_ms"] == {"median": 55.84, "min": 50.0, "max": 60.0, "n": 3}
    assert cell["first_chunk_ms"] == {"median": 95.84, "min": 90.0, "max": 100.0, "n": 3}
    assert cell["decode_tokens_per_s"]["median"] == pytest.approx(30.9)
    assert cell["prompt_tokens"]["median"] == 576 and cell["cached_tokens"]["median"] == 32
    assert cell["paper"] == {
        "ttft_ms": 27.92,
        "ttft_extrapolated": False,
        "decode_tokens_per_s": 61.8,
        "ttft_ratio": 2.0,
        "decode_ratio": 0.5,
    }
    assert (cell["image_tokens"], cell["image_tokens_from"], cell["image_tokens_measured"]) == (
        64,
        "processor",
        176,
    )


def test_without_a_rule_the_image_tokens_are_measured_and_without_a_paper_size_no_ratio():
    cell = first_run.cell_summary(timings([5.0], 1.0, prompt=2000), None, 1934, PaperSize(None, "7B"))
    assert (cell["image_tokens"], cell["image_tokens_from"]) == (66, "measured")
    assert cell["paper"] is None
    beyond = first_run.cell_summary(timings([5.0], 1.0, prompt=2000), None, 1934, PaperSize("8b", "x"))
    assert beyond["paper"]["ttft_extrapolated"] is True  # Table 3 stops at 1,536 tokens


def test_the_paper_size_is_read_from_the_names_or_is_the_papers_pair():
    assert paper_size("small", "Qwen/Qwen3-VL-2B-Instruct", "qwen3-vl-2b").size == "2b"
    assert paper_size("large", "Qwen/Qwen3-VL-8B-Instruct").size == "8b"
    assert paper_size("small", "Qwen/Qwen3-VL-4B-Instruct").size == "4b"
    assert paper_size("large", "Qwen/Qwen2.5-VL-7B-Instruct") == PaperSize(
        None, "7B, which the paper did not measure"
    )
    demo = paper_size("large", "./models/demo-large", "demo-large")
    assert demo.size == "8b" and "gives no size" in demo.basis


def test_the_image_tokens_follow_the_processors_resize_under_the_configs_pixel_bounds():
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(ROOT / "models" / "demo-small")  # 16 px a token
    bounds = {"min_pixels": 32 * 32, "max_pixels": 256 * 256}
    assert [image_tokens(processor, side, bounds) for side in (64, 256, 1024)] == [16, 256, 256]
    assert image_tokens(object(), 256) is None  # a family whose rule is unknown


def test_every_synthetic_image_is_new_and_of_its_side():
    first, second = synthetic_png(256, 0), synthetic_png(256, 1)
    assert first != second and synthetic_png(256, 0) == first
    image = Image.open(io.BytesIO(base64.b64decode(first.split(",", 1)[1])))
    assert image.size == (256, 256)


def crafted_result() -> dict:
    def cell(ttft: float, paper: dict | None) -> dict:
        return {
            "ttft_ms": {"median": ttft, "min": ttft - 1, "max": ttft + 2, "n": 3},
            "first_chunk_ms": {"median": 350.0, "min": 340.0, "max": 360.0, "n": 3},
            "decode_tokens_per_s": {"median": 30.9, "min": 30.0, "max": 31.5, "n": 3},
            "prompt_tokens": {"median": 1700, "min": 1700, "max": 1700, "n": 3},
            "cached_tokens": None,
            "image_tokens": 1024,
            "paper": paper,
        }

    paper = {
        "ttft_ms": 123.45,
        "ttft_extrapolated": True,
        "decode_tokens_per_s": 61.8,
        "ttft_ratio": 2.5,
        "decode_ratio": 0.5,
    }
    model = {"source": "Qwen/Qwen3-VL-2B-Instruct", "paper_size_basis": "2B by its name"}
    return {
        "config": "configs/mai.yaml",
        "repetitions": 3,
        "decode_tokens": 64,
        "reasoning_tokens": 250,
        "models": {
            "small": model
            | {
                "model_id": "qwen3-vl-2b",
                "paper_size": "2b",
                "stages": {"simple": {"sizes": {"1024": cell(308.6, paper)}}},
            },
            "large": model
            | {
                "model_id": "other",
                "paper_size": None,
                "paper_size_basis": "7B, which the paper did not measure",
                "stages": {"transfer": {"sizes": {"512": cell(40.0, None)}}},
            },
        },
    }


def cells_of(lines: list[str], first: str) -> list[str]:
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n" + "\n".join(lines))


def test_the_table_shows_each_model_and_prompt_beside_the_papers_figures():
    lines = first_run.table(crafted_result())
    header = cells_of(lines, "model")
    small = dict(zip(header, cells_of(lines, "small `qwen3-vl-2b` (2B)"), strict=True))
    assert small["prompt"] == "simple" and small["image"] == "1024²" and small["image tokens"] == "1024"
    assert small["prompt tokens (cached)"] == "1700 (–)"
    assert small["TTFT ms"] == "308.6 [307.6–310.6]" and small["paper TTFT ms"] == "123.45*"
    assert small["streamed first chunk ms"] == "350 [340–360]"
    assert [small["TTFT × paper"], small["paper tok/s"], small["decode × paper"]] == [
        "2.50×",
        "61.8",
        "0.50×",
    ]
    large = cells_of(lines, "large `other`")
    assert large[1] == "transfer" and large[7:] == ["–", "–", "30.9 [30–31.5]", "–", "–"]
    assert "64 tokens" in lines[0] and "(250 tokens)" in lines[0]
    assert lines[-1].startswith("The paper's model for each: small `qwen3-vl-2b`")


def test_only_scenarios_that_take_a_config_get_one_and_the_command_records_it(capsys):
    assert config_name("configs/mai.yaml") == "mai.yaml" == config_name("mai.yaml")
    assert config_name(str(ROOT / "configs" / "mai-cpu.yaml")) == "mai-cpu.yaml"
    with pytest.raises(ValueError, match="no such file"):
        config_name("configs/nope.yaml")
    with pytest.raises(ValueError, match="not under"):
        config_name(str(ROOT / "pyproject.toml"))
    with pytest.raises(ValueError, match="autoscaling deploy their own config; only first_run"):
        check_served("mai.yaml", None, [SCENARIOS["first_run"], SCENARIOS["autoscaling"]])
    with pytest.raises(ValueError, match="--url 127.0.0.1:8000"):
        check_served(None, "127.0.0.1:8000", [SCENARIOS["first_run"]])
    check_served("mai.yaml", "http://127.0.0.1:8000", [SCENARIOS["first_run"]])
    recorded = command_of(SCENARIOS["first_run"], {"sizes": "256", "n": "3"}, "mai.yaml", "http://h:8")
    assert recorded == (
        "python -m loadtest.bench --only first_run --config configs/mai.yaml --url http://h:8 "
        "--param sizes=256"
    )
    with pytest.raises(SystemExit):
        main(["--only", "autoscaling", "--config", "configs/mai-cpu.yaml"])
    assert "deploy their own config" in capsys.readouterr().err


def test_stages_outside_the_prompt_kinds_are_refused_and_the_small_model_gets_no_transfer_prompt():
    with pytest.raises(ValueError, match="stages: stage3 not among"):
        first_run.prompt_kinds(("simple", "stage3"))
    kinds = first_run.prompt_kinds(first_run.Parameters().stages)
    assert [k.value for k in kinds if first_run.sends("small", k)] == ["simple", "reasoning", "stage2"]
    assert len([k for k in kinds if first_run.sends("large", k)]) == 4
