"""The engine each GPU config gets on a GPU, built by vLLM's own config code with its CUDA platform
describing the GPU (serve_app/engine_config/gpu_view.py), in the replica's environment, with the usage
context ray.serve.llm's replica uses; and the fallbacks docs/troubleshooting.md names doing what it says."""

from pathlib import Path

import pytest
import yaml

from serve_app.engine_config.engine_check import check_config, main

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "configs" / "checkpoints"
RELEASED = {"small": str(CHECKPOINTS / "qwen3-vl-2b"), "large": str(CHECKPOINTS / "qwen3-vl-8b")}
RELEASED_SAMPLING = {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0}


def serve_config(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


@pytest.mark.parametrize(("name", "share"), [("mai.yaml", 1.0), ("mai-1gpu.yaml", 0.49)])
def test_a_gpu_config_on_an_h100(name, share):
    result = check_config(serve_config(name), RELEASED, gpu="H100")
    for role in ("small", "large"):
        view = result["models"][role]["on_gpu"]
        assert view["device"] == "cuda"
        assert view["runner"] == "v2" and view["async_scheduling"] is True
        # The OpenAI server's usage context on a 70+ GiB GPU (the offline LLM class would get 16,384).
        assert view["max_num_batched_tokens"] == 8192
        assert view["compilation_mode"] == "VLLM_COMPILE" and view["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert view["executor"] == "ray (RayExecutorV2)"
        assert view["per_worker_gpus"] == share  # what the executor reads in the replica's process
        assert view["generation_config"] == "auto"  # a passthrough samples as from vLLM's own server
        assert view["checkpoint_sampling_defaults"] == RELEASED_SAMPLING  # what its unset fields take


def test_on_an_l4_the_batched_token_budget_is_the_smaller_gpus():
    # As the KubeRay template places them: the 2B on an L4, the 8B on an H100 (an L4 would leave the
    # 8B no whole context of KV cache: the memory check refuses it there).
    config = serve_config("mai.yaml")
    args = config["applications"][0]["args"]
    args["small"]["accelerator_type"], args["large"]["accelerator_type"] = "L4", "H100"
    result = check_config(config, RELEASED, gpu="L4")
    assert result["models"]["small"]["on_gpu"]["max_num_batched_tokens"] == 2048
    assert result["models"]["large"]["on_gpu"]["max_num_batched_tokens"] == 8192
    assert {card["gpu"] for card in result["memory"]["cards"]} == {"L4", "H100"}
    with pytest.raises(ValueError, match="large qwen3-vl-8b on one L4"):
        check_config(serve_config("mai.yaml"), RELEASED, gpu="L4")


def test_the_documented_fallbacks_turn_off_what_they_name():
    config = serve_config("mai-1gpu.yaml")
    large = config["applications"][0]["args"]["large"]
    large["engine_kwargs"] |= {"enforce_eager": True, "async_scheduling": False}
    large["env"] = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "0"}
    view = check_config(config, RELEASED, gpu="H100")["models"]["large"]["on_gpu"]
    assert view["enforce_eager"] is True and view["cudagraph_mode"] == "NONE"
    assert view["async_scheduling"] is False
    assert view["runner"] == "v1"
    assert view["executor"] == "ray (RayDistributedExecutor)"


def test_mai_check_config_prints_the_gpu_engine_and_refuses_what_cannot_be_placed(tmp_path, capsys):
    checkpoints = [f"--checkpoint={role}={path}" for role, path in RELEASED.items()]
    assert main([str(ROOT / "configs" / "mai-1gpu.yaml"), *checkpoints, "--gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert "on H100: runner v2, async scheduling on, 8192 batched tokens" in out
    assert "at 0.49 GPU per worker, KV 24 GiB fixed" in out and "top_k 20" in out
    assert main([str(ROOT / "configs" / "mai.yaml"), *checkpoints, "--gpus", "2", "--no-gpu-view"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "ask for 8 GPUs" in line and "wait forever" in line


def test_mai_check_config_prints_what_each_card_holds_and_refuses_what_cannot_fit(capsys):
    """The memory check (serve_app/engine_config/memory.py) on the card a config names, or --gpu's."""
    checkpoints = [f"--checkpoint={role}={path}" for role, path in RELEASED.items()]
    h200 = str(ROOT / "configs" / "mai-1gpu-h200.yaml")
    assert main([h200, *checkpoints, "--gpu", "H200", "--no-gpu-view"]) == 0
    out = capsys.readouterr().out
    assert f"{h200} memory on one H200 (139.8 GiB as CUDA reports it):" in out
    assert (
        "  large qwen3-vl-8b: weights 16.3 GiB + KV 68.0 GiB (495,160 tokens) + activations and CUDA graphs "
        "3.1 GiB + CUDA context 1.0 GiB = 88.4 GiB; gpu_memory_utilization 0.65 (90.9 GiB)"
    ) in out
    assert "  together 119.6 GiB, 20.2 GiB left" in out
    one_gpu = str(ROOT / "configs" / "mai-1gpu.yaml")
    assert main([one_gpu, *checkpoints, "--gpu", "L4", "--no-gpu-view"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "one L4 (21.9 GiB as CUDA reports it)" in line and "= 61.6 GiB" in line
