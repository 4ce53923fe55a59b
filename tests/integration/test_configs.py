"""The shipped configs validate, and turn into ray.serve.llm LLMConfigs with the settings MAI needs."""

import json
from pathlib import Path

import pytest
import yaml

from deployments.vlm import ENGINE_FETCHES_NOTHING, NO_MEDIA_DOMAIN, llm_config_kwargs
from serve_app.config import load_app_config

ROOT = Path(__file__).resolve().parents[2]
# The shipped configs that serve real models (mai-emulated.yaml's are emulated)
SERVED_CONFIGS = (
    "mai.yaml",
    "mai-2gpu.yaml",
    "mai-1gpu.yaml",
    "mai-1gpu-h200.yaml",
    "mai-cpu.yaml",
    "mai-cpu-mixed.yaml",
)


def app_args(name: str) -> dict:
    serve_config = yaml.safe_load((ROOT / "configs" / name).read_text())
    [application] = serve_config["applications"]
    assert application["import_path"] == "serve_app.app:build_app"
    return application["args"]


@pytest.mark.parametrize("name", SERVED_CONFIGS)
def test_config_builds_llm_configs(name):
    from ray.serve.llm import LLMConfig

    config = load_app_config(app_args(name))
    for spec in (config.small, config.large):
        kwargs = llm_config_kwargs(spec)
        llm = LLMConfig(**kwargs)
        deployment = llm.deployment_config
        assert (
            deployment["autoscaling_config"]["target_ongoing_requests"] <= deployment["max_ongoing_requests"]
        )
        assert deployment["max_queued_requests"] >= 1
        router = deployment["request_router_config"]  # stage affinity, on in every shipped config
        assert router["request_router_class"] == "deployments.stage_router:StageAffinityRouter"
        assert 1 <= router["request_router_kwargs"]["max_queue"] <= deployment["max_ongoing_requests"]
        assert llm.engine_kwargs["enable_prefix_caching"] is True
        # As many images as a cascade request may carry (limits.max_images), no video.
        assert llm.engine_kwargs["limit_mm_per_prompt"] == {"image": config.limits.max_images, "video": 0}
        assert llm.engine_kwargs["max_model_len"] >= config.cascade.max_tokens.reasoning + 1024
        # The engines fetch nothing: every image reaches them as a data URL.
        assert llm.engine_kwargs["allowed_media_domains"] == [NO_MEDIA_DOMAIN]
        assert llm.engine_kwargs["allowed_local_media_path"] == ""
        assert llm.runtime_env["env_vars"]["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"


def test_a_config_cannot_let_the_engines_fetch():
    args = app_args("mai-cpu.yaml")
    for key, value in (("allowed_media_domains", ["images.example.com"]), ("allowed_local_media_path", "/")):
        wrong = args | {"large": args["large"] | {"engine_kwargs": {key: value}}}
        with pytest.raises(ValueError, match=f"engine_kwargs.{key} is set by the server"):
            load_app_config(wrong)


def test_the_engines_media_settings_refuse_every_url_a_client_names(tmp_path):
    """vLLM's own media connector, built from the engine arguments the engines get, refuses a remote
    URL before any connection (the connection object here would fail the test if asked) and a file."""
    from vllm.multimodal.media.connector import MediaConnector
    from vllm.multimodal.media.image import ImageMediaIO

    class NoConnection:
        def get_bytes(self, *args, **kwargs):
            raise AssertionError("the engine tried to fetch a URL a client named")

    (tmp_path / "secret.png").write_bytes(b"not an image")
    connector = MediaConnector(connection=NoConnection(), **ENGINE_FETCHES_NOTHING)
    for url in ("http://169.254.169.254/latest/meta-data", "https://images.example.com/a.png"):
        with pytest.raises(ValueError, match="allowed domains"):
            connector.load_from_url(url, ImageMediaIO())
    with pytest.raises(RuntimeError, match="allowed-local-media-path"):
        connector.load_from_url(f"file://{tmp_path}/secret.png", ImageMediaIO())


def test_gpu_config_puts_qwen3_vl_2b_and_8b_on_a_gpu_each():
    config = load_app_config(app_args("mai.yaml"))
    small, large = llm_config_kwargs(config.small), llm_config_kwargs(config.large)
    assert small["model_loading_config"]["model_source"] == "Qwen/Qwen3-VL-2B-Instruct"
    assert large["model_loading_config"]["model_source"] == "Qwen/Qwen3-VL-8B-Instruct"
    for kwargs in (small, large):
        assert kwargs["accelerator_config"] == {"kind": "gpu"}
        assert kwargs["placement_group_config"]["bundle_per_worker"]["GPU"] == 1
        assert kwargs["deployment_config"]["autoscaling_config"]["max_replicas"] > 1


def test_one_gpu_config_shares_the_gpu_and_its_memory():
    config = load_app_config(app_args("mai-1gpu.yaml"))
    small, large = llm_config_kwargs(config.small), llm_config_kwargs(config.large)
    assert small["model_loading_config"]["model_source"] == "Qwen/Qwen3-VL-2B-Instruct"
    assert large["model_loading_config"]["model_source"] == "Qwen/Qwen3-VL-8B-Instruct"
    gpu = [kwargs["placement_group_config"]["bundle_per_worker"]["GPU"] for kwargs in (small, large)]
    assert sum(gpu) <= 1  # both placement groups fit on one GPU
    # Each engine has a fixed KV budget, and the free memory each checks for at start fits both.
    for kwargs in (small, large):
        assert kwargs["engine_kwargs"]["kv_cache_memory_bytes"] > 0
    assert sum(kwargs["engine_kwargs"]["gpu_memory_utilization"] for kwargs in (small, large)) <= 1
    memory = [kwargs["engine_kwargs"]["gpu_memory_utilization"] for kwargs in (small, large)]
    assert sum(memory) < 1 and memory[1] > memory[0]
    for kwargs in (small, large):
        assert kwargs["deployment_config"]["autoscaling_config"]["max_replicas"] == 1


def test_pin_resources_go_into_the_engine_bundle():
    args = app_args("mai.yaml")
    args["small"] = args["small"] | {"pin_resources": {"mai_small": 1}, "accelerator_type": "L4"}
    kwargs = llm_config_kwargs(load_app_config(args).small)
    assert kwargs["placement_group_config"]["bundle_per_worker"] == {"GPU": 1, "mai_small": 1}
    assert kwargs["accelerator_type"] == "L4"


def test_cpu_config_uses_the_committed_demo_models(tmp_path):
    config = load_app_config(app_args("mai-cpu.yaml"))
    assert config.small.local_source() == ROOT / "models" / "demo-small"
    assert config.large.local_source() == ROOT / "models" / "demo-large"
    for source in (config.small.local_source(), config.large.local_source()):
        assert (source / "config.json").exists() and (source / "model.safetensors").exists()
        assert json.loads((source / "mai-demo.json").read_text())["steps"] > 0
    missing = config.small.model_copy(update={"source": str(tmp_path / "nothing")})
    with pytest.raises(FileNotFoundError, match="mai-build-tiny"):
        llm_config_kwargs(missing)


@pytest.mark.parametrize("name", SERVED_CONFIGS)
def test_engine_kwargs_are_arguments_the_pinned_vllm_knows(name):
    """Every engine argument (ours and the config's) is split by ray.serve.llm's own code into vLLM's
    engine and frontend arguments and builds vLLM's argument classes, on the vLLM version the GPU extra
    pins: a misspelt or retired argument fails here instead of on a GPU deployment."""
    import tomllib

    import vllm
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.serve.llm import LLMConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    gpu_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "gpu"
    ]
    assert f"vllm=={vllm.__version__}" in gpu_extra
    config = load_app_config(app_args(name))
    for spec in (config.small, config.large):
        engine = VLLMEngineConfig.from_llm_config(LLMConfig(**llm_config_kwargs(spec)))
        AsyncEngineArgs(**engine.engine_kwargs)
        FrontendArgs(**engine.frontend_kwargs)
        assert set(engine.engine_kwargs) | set(engine.frontend_kwargs) == set(
            llm_config_kwargs(spec)["engine_kwargs"]
        )
    misspelt = config.large.model_copy(update={"engine_kwargs": {"gpu_memory_utilisation": 0.9}})
    with pytest.raises(ValueError, match="gpu_memory_utilisation"):
        VLLMEngineConfig.from_llm_config(LLMConfig(**llm_config_kwargs(misspelt)))


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("mai.yaml", "coupled"),
        ("mai-emulated.yaml", "coupled"),
        ("mai-cpu.yaml", "coupled"),
        ("mai-cpu-mixed.yaml", "coupled"),
        ("mai-1gpu.yaml", "per-deployment"),
        ("mai-1gpu-h200.yaml", "per-deployment"),
        ("mai-2gpu.yaml", "per-deployment"),
    ],
)
def test_each_config_names_the_autoscaling_policy_its_args_ask_for(name, policy):
    """Ray Serve reads an application-level policy from the config entry, not from the builder: a
    config asking for coupled scaling must carry it, one asking for per-deployment must not."""
    from ray.serve.schema import ServeDeploySchema

    from serve_app.config import COUPLED_POLICY, check_application

    serve_config = yaml.safe_load((ROOT / "configs" / name).read_text())
    ServeDeploySchema.model_validate(serve_config)  # what `serve run` / `serve deploy` check
    [application] = serve_config["applications"]
    assert check_application(application).autoscaling.policy.value == policy
    if policy == "coupled":
        without = {key: value for key, value in application.items() if key != "autoscaling_policy"}
        with pytest.raises(ValueError, match="autoscaling_policy"):
            check_application(without)
        other = application | {"autoscaling_policy": {"policy_function": "x:y"}}
        with pytest.raises(
            ValueError, match=f"needs autoscaling_policy: {{policy_function: {COUPLED_POLICY}}}"
        ):
            check_application(other)
    else:
        named = application | {"autoscaling_policy": {"policy_function": "x:y"}}
        with pytest.raises(ValueError, match="autoscaling.policy"):
            check_application(named)


CHECKPOINTS = ROOT / "configs" / "checkpoints"
RELEASED_CHECKPOINTS = {"small": str(CHECKPOINTS / "qwen3-vl-2b"), "large": str(CHECKPOINTS / "qwen3-vl-8b")}


@pytest.mark.parametrize(
    ("name", "executor", "gpu_share"),
    [
        ("mai.yaml", "ray", 1.0),
        ("mai-2gpu.yaml", "ray", 1.0),
        ("mai-1gpu.yaml", "ray", 0.49),
        ("mai-1gpu-h200.yaml", "ray", 0.49),
        ("mai-cpu.yaml", "mp", None),
        ("mai-cpu-mixed.yaml", "mp", None),
    ],
)
def test_every_shipped_config_becomes_the_engine_vllm_would_build(name, executor, gpu_share):
    """The whole path a deployment takes before its engine starts, in the installed ray.serve.llm and
    vLLM: LLMConfig -> ray.serve.llm's engine settings (executor, bundles, fractional-GPU variable) ->
    vLLM's full engine configuration (types, ranges, the context against the model's own), with the
    GPU models read from the released Qwen3-VL checkpoints' config files."""
    from serve_app.engine_config.engine_check import check_config

    checkpoints = RELEASED_CHECKPOINTS if executor == "ray" else {}  # the CPU configs' models are local
    result = check_config(yaml.safe_load((ROOT / "configs" / name).read_text()), checkpoints)
    for role in ("small", "large"):
        model = result["models"][role]
        assert model["executor"] == executor  # GPUs: vLLM's Ray executor, as ray.serve.llm always runs it
        images = 2 if name == "mai-cpu.yaml" else 1  # the CPU default reads two images a request
        assert model["limit_mm_per_prompt"] == {"image": images, "video": 0}
        if gpu_share is not None:
            assert [bundle["GPU"] for bundle in model["bundles"]] == [gpu_share]
            fractional = gpu_share < 1
            assert (model["per_worker_gpus"] == str(gpu_share)) is fractional
            assert (model["kv_cache_memory_bytes"] is not None) is fractional
        budget = model["image_budget"]
        assert budget["max_image_tokens"] + budget["largest_stage_tokens"] < model["max_model_len"]
    assert result["max_prompt_bytes"] >= 1000
    assert result["max_passthrough_images"] == images  # the engines' count


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"scheduling_policy": "prio"}, "policy"),
        ({"max_model_len": 10_000_000}, "max_model_len"),
        ({"max_num_seqs": 0}, "max_num"),
        ({"gpu_memory_utilisation": 0.9}, "gpu_memory_utilisation"),
    ],
)
def test_a_misspelt_or_out_of_range_engine_key_fails_here_not_on_a_cluster(change, refusal):
    from serve_app.engine_config.engine_check import check_config

    serve_config = yaml.safe_load((ROOT / "configs" / "mai.yaml").read_text())
    serve_config["applications"][0]["args"]["large"]["engine_kwargs"].update(change)
    with pytest.raises(Exception, match=refusal):
        check_config(serve_config, RELEASED_CHECKPOINTS)


def test_mai_check_config_names_each_failing_config_in_one_line(tmp_path, capsys):
    from serve_app.engine_config.engine_check import main

    shared = yaml.safe_load((ROOT / "configs" / "mai-1gpu.yaml").read_text())
    for role in ("small", "large"):
        shared["applications"][0]["args"][role]["engine_kwargs"].pop("kv_cache_memory_bytes")
    bad = tmp_path / "shared.yaml"
    bad.write_text(yaml.safe_dump(shared))
    report = tmp_path / "check.json"
    checkpoints = [f"--checkpoint={role}={path}" for role, path in RELEASED_CHECKPOINTS.items()]
    assert main([str(bad), *checkpoints, "--json", str(report)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "kv_cache_memory_bytes" in line and "small" in line
    assert "error" in json.loads(report.read_text())[str(bad)]
