"""Measurements of Qwen3-VL on one H100 from the MAI paper, as data for the emulated VLM.

- TTFT_MS (Table 3): time to first token by total context tokens (image + query).
- DECODE_TOKENS_PER_S (Table 4): average decoding speed.
- COMPLETION_TOKENS (Table 5): mean generated tokens per dataset and prompt (S)imple, (E)xplain,
  (R)easoning.
- ROUTE_SHARES (Table 10): the share of requests the 2B/8B cascade settles at each route.
"""

from __future__ import annotations

from typing import Literal, get_args

ModelSize = Literal["2b", "4b", "8b"]
Dataset = Literal["pope", "mmmu", "mmbench", "chartqa", "infovqa", "realworldqa"]
MODELS: tuple[str, ...] = get_args(ModelSize)
DATASETS: tuple[str, ...] = get_args(Dataset)

# Table 3: (total tokens, TTFT ms). Total 320 was profiled twice (256² image + 256 query tokens,
# 512² image + 64 query tokens); both points are kept and averaged by the interpolation.
TTFT_MS: dict[str, list[tuple[int, float]]] = {
    "2b": [
        (128, 27.52),
        (320, 27.79),
        (576, 27.92),
        (320, 28.22),
        (512, 28.00),
        (768, 28.89),
        (1088, 45.96),
        (1280, 46.97),
        (1536, 49.80),
    ],
    "4b": [
        (128, 32.21),
        (320, 32.15),
        (576, 34.66),
        (320, 32.79),
        (512, 32.86),
        (768, 39.02),
        (1088, 65.87),
        (1280, 69.33),
        (1536, 77.86),
    ],
    "8b": [
        (128, 33.76),
        (320, 36.25),
        (576, 47.93),
        (320, 36.74),
        (512, 43.91),
        (768, 53.45),
        (1088, 94.27),
        (1280, 102.65),
        (1536, 115.31),
    ],
}

# Table 4, "Avg Tok/s".
DECODE_TOKENS_PER_S: dict[str, float] = {"2b": 61.80, "4b": 47.77, "8b": 47.26}

# Table 5: dataset -> model -> (S, E, R) mean completion tokens.
COMPLETION_TOKENS: dict[str, dict[str, tuple[float, float, float]]] = {
    "pope": {"2b": (1.0, 105.4, 266.1), "4b": (1.0, 97.0, 168.6), "8b": (1.0, 34.4, 149.3)},
    "mmmu": {"2b": (101.7, 1448.9, 2019.1), "4b": (47.8, 1122.9, 1822.2), "8b": (45.8, 944.6, 1548.7)},
    "mmbench": {"2b": (3.7, 449.6, 569.3), "4b": (2.9, 336.1, 475.2), "8b": (2.2, 106.0, 426.5)},
    "chartqa": {"2b": (3.5, 95.8, 256.3), "4b": (3.6, 276.1, 352.2), "8b": (3.5, 249.8, 294.3)},
    "infovqa": {"2b": (3.4, 74.7, 192.5), "4b": (3.6, 240.7, 288.0), "8b": (3.5, 177.9, 228.2)},
    "realworldqa": {"2b": (1.4, 155.6, 244.4), "4b": (1.1, 209.0, 346.2), "8b": (1.0, 221.5, 297.0)},
}

# Table 10: dataset -> (agree after Simple, agree after small Reasoning, reasoning transfer) shares.
ROUTE_SHARES: dict[str, tuple[float, float, float]] = {
    "pope": (0.9452, 0.0051, 0.0497),
    "mmmu": (0.5533, 0.1578, 0.2889),
    "mmbench": (0.8634, 0.0605, 0.0762),
    "chartqa": (0.7200, 0.0780, 0.2020),
    "infovqa": (0.6169, 0.0968, 0.2863),
    "realworldqa": (0.6654, 0.1373, 0.1974),
}

# Table 11 (sequential upper bound, cold engines): MAI speedup over Full RT per dataset;
# Table 12: MAI over 8B-R on ChartQA with vLLM at batch size 32.
PAPER_SPEEDUP_VS_TRANSFER: dict[str, float] = {
    "pope": 8.05,
    "mmbench": 4.69,
    "mmmu": 1.76,
    "chartqa": 2.60,
    "infovqa": 1.81,
    "realworldqa": 2.09,
}
PAPER_SPEEDUP_VS_LARGE_REASON_CHARTQA = 2.40


def ttft_ms(model: str, total_tokens: float) -> float:
    """TTFT by linear interpolation over Table 3 (duplicates averaged), extrapolated linearly from
    the last two points beyond 1536 tokens and held flat below 128."""
    points: dict[int, list[float]] = {}
    for tokens, ms in TTFT_MS[model]:
        points.setdefault(tokens, []).append(ms)
    xs = sorted(points)
    ys = [sum(points[x]) / len(points[x]) for x in xs]
    if total_tokens <= xs[0]:
        return ys[0]
    # The segment that holds total_tokens, or the last one to extrapolate from.
    i = next((i for i in range(1, len(xs)) if total_tokens <= xs[i]), len(xs) - 1)
    x0, y0, x1, y1 = xs[i - 1], ys[i - 1], xs[i], ys[i]
    return y0 + (y1 - y0) * (total_tokens - x0) / (x1 - x0)
