"""The NVIDIA driver the GPU stack needs, and the one this machine has.

The GPU stack is CUDA 13 (PyPI's torch 2.13.0 and vLLM 0.32.0: ``k8s/gpu_stack.py`` derives the major
from ``requirements/gpu-resolution.json`` and fails when it is not ``STACK_CUDA_MAJOR``). CUDA 13.x
needs driver 580 or newer (NVIDIA's minor version compatibility table). On an older driver the
failure would otherwise come at CUDA's initialisation in the engine's worker, after the weights are
downloaded: ``mai-check-config`` and each GPU replica check it first (``require_driver``).

``visible_driver`` reads the driver's version through NVML (nvidia-ml-py, which the GPU image has)
or ``nvidia-smi``; ``None`` where neither sees a driver (a CPU machine: nothing is checked there).
``MAI_NVIDIA_DRIVER`` set to a version is taken as the driver found, instead of asking (drills and
tests of the refusal on a machine without a GPU).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping

STACK_CUDA_MAJOR = 13
MIN_DRIVER_FOR_CUDA = {12: 525, 13: 580}  # NVIDIA's minimum driver per CUDA major (Linux)
MIN_DRIVER = MIN_DRIVER_FOR_CUDA[STACK_CUDA_MAJOR]
DRIVER_ENV = "MAI_NVIDIA_DRIVER"
_VERSION = re.compile(r"^\d+(?:\.\d+)*$")


class DriverTooOld(RuntimeError):
    """The NVIDIA driver cannot run the GPU stack's CUDA."""


def parse_driver(text: str) -> tuple[int, ...]:
    """``"580.65.06"`` -> ``(580, 65, 6)``; a ValueError for anything else."""
    version = text.strip()
    if not _VERSION.match(version):
        raise ValueError(f"{text!r} is not an NVIDIA driver version (e.g. 580.65.06)")
    return tuple(int(part) for part in version.split("."))


def driver_problem(found: str) -> str | None:
    """Why driver ``found`` cannot run the stack, naming both versions; None when it can."""
    if parse_driver(found) >= (MIN_DRIVER,):
        return None
    return (
        f"NVIDIA driver {found.strip()} is older than {MIN_DRIVER}: the GPU stack is CUDA "
        f"{STACK_CUDA_MAJOR}, which needs driver {MIN_DRIVER} or newer; upgrade the GPU nodes' driver "
        "(docs/gpu-serving.md: the GPU image and the driver it needs)"
    )


def _nvml_driver() -> str | None:
    try:
        import pynvml  # nvidia-ml-py: in the GPU image (vLLM's and FlashInfer's requirement)
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver library or no device: NVMLError and its kinds
        return None
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()
    return _version_or_none(version.decode() if isinstance(version, bytes) else str(version))


def _smi_driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    command = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return _version_or_none(lines[0]) if done.returncode == 0 and lines else None


def _version_or_none(text: str) -> str | None:
    return text.strip() if _VERSION.match(text.strip()) else None


def visible_driver(environ: Mapping[str, str] = os.environ) -> str | None:
    """The driver version this machine shows (``MAI_NVIDIA_DRIVER`` first), or None when none is seen."""
    override = environ.get(DRIVER_ENV, "").strip()
    if override:
        if not _VERSION.match(override):
            raise ValueError(f"{DRIVER_ENV}={override!r} is not an NVIDIA driver version (e.g. 580.65.06)")
        return override
    return _nvml_driver() or _smi_driver()


def require_driver(probe: Callable[[], str | None] = visible_driver) -> str | None:
    """Raise DriverTooOld when the driver ``probe`` sees cannot run the stack; return the version
    (None when no driver is seen: nothing to check)."""
    found = probe()
    if found is None:
        return None
    problem = driver_problem(found)
    if problem is not None:
        raise DriverTooOld(problem)
    return found
