"""The vLLM engine configuration a model's replica would build on a named GPU, built on a machine
without one.

vLLM decides much of an engine from the platform it runs on: the model runner (V1 or V2), async
scheduling, torch.compile and the CUDA-graph mode, the batched-token budget (larger on 70+ GiB
GPUs), the executor. This runs vLLM's own config code — ``create_engine_config`` as ray.serve.llm
calls it (``_get_vllm_engine_config``: the OpenAI server's usage context, its argument
normalisation), in a process whose environment is the replica's — with vLLM's CUDA platform
describing the named GPU (its name, memory and compute capability, as NVML reports them). The
CUDA kernels are absent here: their import is stubbed and their capability probes answer "not
supported", which decides only quantized kernels, none of which the shipped configs use. Triton,
which the GPU image installs (requirements/gpu-resolution.json), is declared present.

It runs as its own process (``python -m serve_app.engine_config.gpu_view``: the request as JSON on stdin,
the view as JSON on stdout), since the platform must be chosen before vLLM is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from typing import Any

from deployments.gpus import GPUS


def gpu_view(
    llm_config: dict[str, Any], env: dict[str, str], gpu: str, timeout_s: float = 300
) -> dict[str, Any]:
    """What the engine of ``llm_config`` (``LLMConfig`` keyword arguments) becomes on ``gpu``, in a
    process whose environment adds ``env`` (the replica's). Raises with vLLM's refusal."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    request = json.dumps({"llm_config": llm_config, "gpu": gpu})
    done = subprocess.run(
        [sys.executable, "-m", "serve_app.engine_config.gpu_view"],
        input=request,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=timeout_s,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the engine on {gpu} could not be built: {_last_error(done.stderr)}")
    return json.loads(lines[-1])


def _last_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if "Error" in line or "error" in line]
    return (errors or stderr.splitlines() or ["no output"])[-1].strip()


def _describe_gpu(gpu: str) -> None:
    """Make vLLM's current platform a CUDA platform describing ``gpu``; before vLLM is imported."""
    name, _, capability = GPUS[gpu]
    memory_bytes = GPUS[gpu].memory_bytes
    for module in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn"):
        sys.modules[module] = _Absent(module)
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class DescribedGPU(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(*capability)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return memory_bytes

        @classmethod
        def is_fully_connected(cls, device_ids: list[int]) -> bool:
            return True

    platforms._current_platform = DescribedGPU()  # type: ignore[assignment]  # vLLM's own slot, unset yet
    import vllm._custom_ops as ops

    for probe in ("cutlass_scaled_mm_supports_block_fp8", "cutlass_scaled_mm_supports_fp8"):
        setattr(ops, probe, lambda *args, **kwargs: False)


class _Absent(types.ModuleType):
    """A kernel extension that is not here: every name is a function that does nothing."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def _view(llm_config: dict[str, Any]) -> dict[str, Any]:
    import vllm.config.vllm as vllm_config_module
    from ray.llm._internal.serve.engines.vllm.vllm_engine import _get_vllm_engine_config
    from ray.serve.llm import LLMConfig
    from vllm import envs

    vllm_config_module.HAS_TRITON = True  # the GPU image installs it
    _, config = _get_vllm_engine_config(LLMConfig(**llm_config))
    compilation = config.compilation_config
    executor = "RayExecutorV2" if envs.VLLM_USE_RAY_V2_EXECUTOR_BACKEND else "RayDistributedExecutor"
    return {
        "device": config.device_config.device_type,
        "runner": "v2" if config.use_v2_model_runner else "v1",
        "async_scheduling": config.scheduler_config.async_scheduling,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": config.scheduler_config.max_num_seqs,
        "enforce_eager": config.model_config.enforce_eager,
        "compilation_mode": compilation.mode.name if compilation.mode is not None else None,
        "cudagraph_mode": compilation.cudagraph_mode.name if compilation.cudagraph_mode is not None else None,
        "executor": f"{config.parallel_config.distributed_executor_backend} ({executor})",
        "per_worker_gpus": envs.VLLM_RAY_PER_WORKER_GPUS,
        "kv_cache_memory_bytes": config.cache_config.kv_cache_memory_bytes,
        "gpu_memory_utilization": config.cache_config.gpu_memory_utilization,
        "generation_config": config.model_config.generation_config,
    }


def main() -> int:
    request = json.loads(sys.stdin.read())
    _describe_gpu(request["gpu"])
    print(json.dumps(_view(request["llm_config"]), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
