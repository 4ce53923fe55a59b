"""mai-check-config's driver check: a config that runs a model (or the attention scorer) on a GPU is
refused on a machine whose NVIDIA driver cannot run the GPU stack, naming the driver found and the one
needed (``deployments/driver.py``); where no driver is visible, the report says it was not checked.
A config of CPU (or emulated) models checks nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from deployments.driver import DRIVER_ENV, MIN_DRIVER, driver_problem, visible_driver

from ..config import AppConfig
from ..core.roles import ROLES


def gpu_parts(config: AppConfig) -> list[str]:
    """What of ``config`` runs on a GPU: the roles of its vLLM models on ``gpu``, and the scorer."""
    parts = [
        role
        for role in ROLES
        if getattr(config, role).device == "gpu" and getattr(config, role).engine == "vllm"
    ]
    selection = config.transfer_selection
    if selection.attention and selection.scorer.device == "gpu":
        parts.append("scorer")
    return parts


def check_driver(config: AppConfig, probe: Callable[[], str | None] = visible_driver) -> dict[str, Any]:
    """The driver check of one config: ``{"needed_by", "found", "required"}``; raises ValueError when
    a GPU part meets a driver too old."""
    parts = gpu_parts(config)
    found = probe() if parts else None
    if found is not None and (problem := driver_problem(found)) is not None:
        raise ValueError(f"{', '.join(parts)} on GPU: {problem}")
    return {"needed_by": parts, "found": found, "required": MIN_DRIVER}


def driver_line(path: str, driver: Mapping[str, Any] | None) -> list[str]:
    """The report's line: the driver found, or that none was visible (nothing for a CPU config)."""
    if not driver or not driver["needed_by"]:
        return []
    if driver["found"] is None:
        return [
            f"{path}: NVIDIA driver not checked (none visible here: no NVML, no nvidia-smi, no "
            f"{DRIVER_ENV}); the GPU nodes need {driver['required']} or newer"
        ]
    return [
        f"{path}: NVIDIA driver {driver['found']} (the GPU stack needs {driver['required']} or newer): ok"
    ]
