"""The GPUs a config may name (``accelerator_type``, ``mai-check-config --gpu``), as NVML describes
them: the device name, total memory (MiB, as nvidia-smi shows it) and compute capability."""

from __future__ import annotations

from typing import NamedTuple

MiB = 1 << 20


class GPU(NamedTuple):
    name: str
    memory_mib: int
    capability: tuple[int, int]

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB


GPUS: dict[str, GPU] = {
    "H100": GPU("NVIDIA H100 80GB HBM3", 81559, (9, 0)),
    "H200": GPU("NVIDIA H200", 143771, (9, 0)),
    "A100": GPU("NVIDIA A100-SXM4-80GB", 81920, (8, 0)),
    "L40S": GPU("NVIDIA L40S", 46068, (8, 9)),
    "L4": GPU("NVIDIA L4", 23034, (8, 9)),
    "A10G": GPU("NVIDIA A10G", 23028, (8, 6)),
}
DEFAULT_GPU = "H100"  # the paper's
GPU_MEMORY = {kind: gpu.memory_bytes for kind, gpu in GPUS.items()}
