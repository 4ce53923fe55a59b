"""Where datasets and results live: the one place every script that reads or writes them looks."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
DATASETS = ROOT / "bench" / "data"  # built on first use, not committed
RESULTS = ROOT / "bench" / "results"
RESULTS_SUMMARY = ROOT / "bench" / "RESULTS.md"
DEMO_EVAL = RESULTS / "demo-eval"
DEMO_CALIBRATION = RESULTS / "demo-calibration"
