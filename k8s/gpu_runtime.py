"""What the GPU image meets when it runs, beside the packages k8s/gpu_stack.py resolves: the NVIDIA driver
its CUDA major needs, and FlashInfer's prebuilt kernels.

- The driver: ``deployments/driver.py`` states the stack's CUDA major and the minimum driver that
  ``mai-check-config`` and each GPU replica hold a node's driver to (580 for CUDA 13). The check: that
  major is the one torch and vLLM require (derived from the resolution), and k8s/Dockerfile names the
  same minimum.
- FlashInfer (flashinfer-python, which vLLM pins) ships its kernels apart: ``flashinfer-cubin``
  (precompiled cubins; without it FlashInfer downloads each from NVIDIA's artifactory,
  ``FLASHINFER_CUBINS_REPOSITORY``, at its first use) and ``flashinfer-jit-cache`` (its own CUDA
  kernels compiled ahead of time for one CUDA version; without it each is compiled with nvcc at its
  first use, into ``~/.cache/flashinfer``). FlashInfer refuses either at another version than its own
  (a RuntimeError when it loads). The resolution keeps, for each, the version it resolved (if any) and
  the versions the index serves for flashinfer-python's (``flashinfer_kernels``), asked when
  `python k8s/gpu_stack.py` resolves. The check: a kernel package resolved at another version fails;
  one the index serves at flashinfer-python's version and the image lacks fails (add it to the gpu
  extra); one the index does not serve at that version is reported, with what then happens at run time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # deployments/driver.py: the minimum the replicas hold the driver to
    sys.path.append(str(ROOT))
from deployments.driver import MIN_DRIVER, MIN_DRIVER_FOR_CUDA, STACK_CUDA_MAJOR  # noqa: E402

FLASHINFER = "flashinfer-python"
KERNEL_PACKAGES = {
    "flashinfer-cubin": "FlashInfer downloads each cubin it needs from NVIDIA's artifactory "
    "(FLASHINFER_CUBINS_REPOSITORY) at its first use",
    "flashinfer-jit-cache": "FlashInfer compiles each of its kernels with nvcc at its first use, into "
    "~/.cache/flashinfer",
}


def check_driver_minimum(majors: set[int], dockerfile: str) -> list[str]:
    """deployments/driver.py's CUDA major is the stack's, and k8s/Dockerfile names its minimum driver."""
    problems = []
    if len(majors) == 1 and majors != {STACK_CUDA_MAJOR}:
        [major] = majors
        wanted = MIN_DRIVER_FOR_CUDA.get(major)
        problems.append(
            f"deployments/driver.py checks the driver for CUDA {STACK_CUDA_MAJOR} (>= {MIN_DRIVER}), the "
            f"stack is CUDA {major}: set STACK_CUDA_MAJOR = {major}"
            + ("" if wanted else " and its minimum driver in MIN_DRIVER_FOR_CUDA")
        )
    if f"NVIDIA driver >= {MIN_DRIVER}" not in dockerfile:
        problems.append(f"k8s/Dockerfile does not say the GPU nodes need an NVIDIA driver >= {MIN_DRIVER}")
    return problems


def matches(package: str, version: str, flashinfer: str) -> bool:
    """Whether ``package`` at ``version`` is flashinfer-python ``flashinfer``'s: the same version (the
    JIT cache's may carry a CUDA local version, ``0.7.0+cu130``), as FlashInfer checks when it loads."""
    return version == flashinfer or (
        package == "flashinfer-jit-cache" and version.startswith(f"{flashinfer}+")
    )


def flashinfer_kernels(
    packages: Mapping[str, str], index_versions: Callable[[str], list[str]]
) -> dict[str, Any] | None:
    """The resolution's ``flashinfer_kernels``: per kernel package, the version resolved and the versions
    the index serves for the resolved flashinfer-python (``index_versions``: name -> versions, newest
    first). None when nothing resolved flashinfer-python."""
    flashinfer = packages.get(FLASHINFER)
    if flashinfer is None:
        return None
    block: dict[str, Any] = {FLASHINFER: flashinfer, "packages": {}}
    for name in KERNEL_PACKAGES:
        served = index_versions(name)
        block["packages"][name] = {
            "resolved": packages.get(name),
            "on_index_for_flashinfer": [version for version in served if matches(name, version, flashinfer)],
            "newest_on_index": served[0] if served else None,
        }
    return block


def check_flashinfer_kernels(summary: Mapping[str, Any], index: str) -> list[str]:
    packages = summary["packages"]
    flashinfer = packages.get(FLASHINFER)
    if flashinfer is None:
        return []
    block = summary.get("flashinfer_kernels") or {}
    fix = "run `python k8s/gpu_stack.py`"
    if block.get(FLASHINFER) != flashinfer:
        return [f"the resolution keeps no flashinfer_kernels for {FLASHINFER} {flashinfer}: {fix}"]
    problems = []
    for name in KERNEL_PACKAGES:
        entry, resolved = block["packages"].get(name), packages.get(name)
        if entry is None or entry["resolved"] != resolved:
            problems.append(f"flashinfer_kernels is not the resolution's {name} ({resolved}): {fix}")
        elif resolved is not None and not matches(name, resolved, flashinfer):
            problems.append(
                f"{name} {resolved} is not {FLASHINFER} {flashinfer}'s: FlashInfer refuses it when it loads"
            )
        elif resolved is None and entry["on_index_for_flashinfer"]:
            problems.append(
                f"{index} serves {name} {entry['on_index_for_flashinfer'][0]} for {FLASHINFER} {flashinfer}, "
                f"and the image does not install it ({KERNEL_PACKAGES[name]}): add it to the gpu extra"
            )
    return problems


def report_lines(block: Mapping[str, Any] | None, index: str) -> list[str]:
    """One line per kernel package: in the image, or why not and what happens instead."""
    if not block:
        return []
    lines = []
    for name, entry in block["packages"].items():
        if entry["resolved"] is not None:
            lines.append(f"{name} {entry['resolved']}: in the image, beside {FLASHINFER} {block[FLASHINFER]}")
        elif not entry["on_index_for_flashinfer"]:
            newest = entry["newest_on_index"]
            lines.append(
                f"{name}: {index} serves none for {FLASHINFER} {block[FLASHINFER]}"
                f"{f' (its newest: {newest})' if newest else ''}; in the image {KERNEL_PACKAGES[name]}"
            )
    return lines


def pip_index_versions(name: str, index: str) -> list[str]:
    """The versions ``index`` serves of ``name``, newest first ([] when it serves none), as pip sees them."""
    command = [
        sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "index", "versions",
        "--json", "--index-url", index, name,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        if "No matching distribution found" in done.stderr:
            return []
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return list(json.loads(done.stdout)["versions"])
