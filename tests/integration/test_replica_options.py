"""What each model's replica actor gets, as ray.serve.llm builds its Serve options
(``LLMServer.get_deployment_options``): the engine runs inside the replica, so the replica's environment
is the one vLLM's executor reads."""

from pathlib import Path
from unittest import mock

import pytest
import yaml

from deployments.vlm import PER_WORKER_GPUS, llm_config_kwargs
from serve_app.config import load_app_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {
    "mai.yaml": None,
    "mai-2gpu.yaml": None,
    "mai-1gpu.yaml": "0.49",
    "mai-1gpu-h200.yaml": "0.49",
    "mai-cpu.yaml": None,
    "mai-cpu-mixed.yaml": None,
}


def app_args(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())["applications"][0]["args"]


def replica_options(kwargs: dict) -> dict:
    """ray.serve.llm's deployment options for an LLMConfig; the driver's runtime environment, the only
    thing read of a running Ray, is empty as under ``serve run``."""
    from ray.llm._internal.serve.core.server.llm_server import LLMServer
    from ray.serve.llm import LLMConfig

    with mock.patch("ray.get_runtime_context", return_value=mock.Mock(runtime_env={})):
        return LLMServer.get_deployment_options(LLMConfig(**kwargs))


@pytest.mark.parametrize(("name", "share"), CONFIGS.items())
def test_the_replica_running_the_engine_gets_its_gpu_share(name, share):
    config = load_app_config(app_args(name))
    for spec in (config.small, config.large):
        options = replica_options(llm_config_kwargs(spec))
        env = options["ray_actor_options"]["runtime_env"]["env_vars"]
        assert env.get(PER_WORKER_GPUS) == share
        [bundle] = options["placement_group_bundles"]
        if share is not None:
            assert bundle["GPU"] == float(share)  # the worker's request fits the bundle it runs in
        assert env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"


def test_ray_serve_llm_still_gives_the_share_to_its_helper_tasks_only():
    """ray-project/ray#63875. When this fails, ray.serve.llm hands the replica the fractional share
    itself: remove deployments.vlm.replica_env's PER_WORKER_GPUS workaround and this test."""
    from ray.serve.llm import LLMConfig

    spec = load_app_config(app_args("mai-1gpu.yaml")).large
    kwargs = llm_config_kwargs(spec)
    kwargs["runtime_env"] = {
        "env_vars": {k: v for k, v in kwargs["runtime_env"]["env_vars"].items() if k != PER_WORKER_GPUS}
    }
    # The replica's options are built first, as build_llm_deployment does; the helper tasks' environment
    # is derived later, inside the replica (that derivation writes into the LLMConfig it reads).
    replica = dict(replica_options(kwargs)["ray_actor_options"]["runtime_env"]["env_vars"])
    helper = LLMConfig(**kwargs).get_engine_config().get_runtime_env_with_local_env_vars()
    assert helper["env_vars"][PER_WORKER_GPUS] == "0.49"
    assert PER_WORKER_GPUS not in replica


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"bundle": {"GPU": 2}}, "bundle GPU 2.0 is not a share of one GPU"),
        ({"bundle": {"GPU": 0}}, "bundle GPU 0.0 is not a share of one GPU"),
        (
            {"env": {PER_WORKER_GPUS: "1.0"}},
            "VLLM_RAY_PER_WORKER_GPUS '1.0' differs from the bundle's GPU share 0.49",
        ),
    ],
)
def test_a_share_that_cannot_work_is_refused_naming_the_numbers(change, refusal):
    args = app_args("mai-1gpu.yaml")
    args["small"] = args["small"] | change
    with pytest.raises(ValueError, match=refusal):
        load_app_config(args)


def test_a_kv_budget_over_the_memory_share_of_the_named_gpu_is_refused_at_start():
    args = app_args("mai-1gpu.yaml")
    small = args["small"]
    small["engine_kwargs"] = small["engine_kwargs"] | {"kv_cache_memory_bytes": 24 * 2**30}
    assert load_app_config(args)  # no GPU named: the check waits for mai-check-config --gpu
    args["small"] = small | {"accelerator_type": "H100"}
    with pytest.raises(
        ValueError,
        match=r"weights 4.0 GiB \+ KV 24.0 GiB \+ activations and CUDA graphs 2.2 GiB = 30.2 GiB exceed "
        r"its gpu_memory_utilization 0.25 \(19.8 GiB\)",
    ):
        load_app_config(args)
    # 0.35 of the card (27.7 GiB) held the budget alone once; with the weights it does not.
    args["small"]["engine_kwargs"]["gpu_memory_utilization"] = 0.35
    with pytest.raises(ValueError, match=r"raise the share to 0.39"):
        load_app_config(args)
    args["small"]["engine_kwargs"]["kv_cache_memory_bytes"] = 20 * 2**30  # 26.2 GiB in all: fits
    assert load_app_config(args).small.accelerator_type == "H100"


def test_a_hub_revision_pins_weights_and_tokenizer_and_only_a_hub_source_takes_one():
    commit = "0123456789abcdef0123456789abcdef01234567"
    args = app_args("mai.yaml")
    args["large"] = args["large"] | {"revision": commit}
    kwargs = llm_config_kwargs(load_app_config(args).large)
    assert kwargs["engine_kwargs"]["revision"] == kwargs["engine_kwargs"]["tokenizer_revision"] == commit
    for change, refusal in (
        ({"revision": "main"}, "String should match pattern"),
        ({"revision": commit, "source": "./models/demo-large"}, "revision is for a hub source"),
        ({"engine_kwargs": {"revision": commit}}, "engine_kwargs.revision is set from the model's revision"),
    ):
        wrong = app_args("mai.yaml")
        wrong["large"] = wrong["large"] | change
        with pytest.raises(ValueError, match=refusal):
            load_app_config(wrong)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_model_deployment_serves_the_cascades_plain_call(name):
    """The ingress calls ``complete`` (deployments/model_server.py) on every model; ray.serve.llm builds
    the deployment from the class the LLMConfig names, LLMServer's options unchanged."""
    from ray.llm._internal.serve.core.server.llm_server import LLMServer
    from ray.serve.llm import LLMConfig, build_llm_deployment

    from deployments.model_server import ModelServer

    config = load_app_config(app_args(name))
    for spec in (config.small, config.large):
        kwargs = llm_config_kwargs(spec)
        with mock.patch("ray.get_runtime_context", return_value=mock.Mock(runtime_env={})):
            app = build_llm_deployment(LLMConfig(**kwargs))
        served = app._bound_deployment.func_or_class
        assert issubclass(served, ModelServer) and issubclass(served, LLMServer)
        assert callable(served.complete) and served.chat is LLMServer.chat
        assert app._bound_deployment._deployment_config.max_ongoing_requests == spec.max_ongoing_requests
