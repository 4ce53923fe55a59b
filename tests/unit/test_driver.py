"""The NVIDIA driver check (deployments/driver.py): versions parsed, a driver older than the GPU stack's
minimum refused with both versions named, the probe's answer where no driver is visible (None: nothing
checked) and through NVML, nvidia-smi or MAI_NVIDIA_DRIVER; a GPU model's replica checks it before
ray.serve.llm's engine start (which downloads the weights), a CPU model's never; the GPU scorer before
its checkpoint; and mai-check-config refuses a GPU config on a driver too old before it builds an engine,
and says when it checked none. No GPU here: every driver below is faked."""

import asyncio
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from deployments import driver
from deployments.driver import (
    DRIVER_ENV,
    MIN_DRIVER,
    DriverTooOld,
    driver_problem,
    parse_driver,
    require_driver,
    visible_driver,
)

ROOT = Path(__file__).resolve().parents[2]
# ray.serve.llm's LLMServer has an async __del__: an instance collected outside an event loop warns.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'LLMServer.__del__' was never awaited")
OLD, NEW = "570.86.15", "580.65.06"


def test_the_minimum_is_cuda_13s_580():
    assert (driver.STACK_CUDA_MAJOR, MIN_DRIVER) == (13, 580)
    assert driver.MIN_DRIVER_FOR_CUDA[driver.STACK_CUDA_MAJOR] == MIN_DRIVER


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("580.65.06", (580, 65, 6)),
        ("570.86.15\n", (570, 86, 15)),
        ("580", (580,)),
        ("595.45.04", (595, 45, 4)),
    ],
)
def test_a_driver_version_is_read_as_numbers(text, version):
    assert parse_driver(text) == version


@pytest.mark.parametrize("text", ["", "[N/A]", "580.x", "v580.65", "580..1", "NVIDIA-SMI has failed"])
def test_anything_else_is_not_a_driver_version(text):
    with pytest.raises(ValueError, match="is not an NVIDIA driver version"):
        parse_driver(text)


@pytest.mark.parametrize("found", ["580", "580.00.01", NEW, "595.45.04", "1000.1"])
def test_580_and_later_pass(found):
    assert driver_problem(found) is None


@pytest.mark.parametrize("found", [OLD, "579.99", "535.230.02", "525.60.13"])
def test_an_older_driver_is_refused_naming_both_versions(found):
    problem = driver_problem(found)
    assert problem is not None
    assert f"NVIDIA driver {found} is older than 580" in problem
    assert "CUDA 13, which needs driver 580 or newer" in problem


def test_require_driver_checks_what_the_probe_sees():
    assert require_driver(lambda: None) is None  # no driver visible: nothing to check
    assert require_driver(lambda: NEW) == NEW
    with pytest.raises(DriverTooOld, match=f"{OLD} is older than 580"):
        require_driver(lambda: OLD)


# ---------------------------------------------------------------- the probe


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine as a CPU one: no pynvml, no nvidia-smi, no override."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.setattr(driver.shutil, "which", lambda name: None)
    monkeypatch.delenv(DRIVER_ENV, raising=False)


def test_no_driver_visible_is_none(no_gpu):
    assert visible_driver() is None


def test_the_override_is_taken_as_the_driver_found_and_must_be_a_version(no_gpu):
    assert visible_driver({DRIVER_ENV: OLD}) == OLD
    assert visible_driver({DRIVER_ENV: " "}) is None
    with pytest.raises(ValueError, match=f"{DRIVER_ENV}='old' is not an NVIDIA driver version"):
        visible_driver({DRIVER_ENV: "old"})


def test_nvml_gives_the_driver_when_it_is_installed(no_gpu, monkeypatch):
    calls = []
    nvml = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlSystemGetDriverVersion=lambda: NEW.encode(),
        nvmlShutdown=lambda: calls.append("shutdown"),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert visible_driver() == NEW and calls == ["init", "shutdown"]

    def no_library():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=no_library))
    assert visible_driver() is None


@pytest.mark.parametrize(
    ("returncode", "stdout", "found"),
    [(0, f"{OLD}\n{OLD}\n", OLD), (9, "", None), (0, "[N/A]\n", None), (0, "", None)],
)
def test_nvidia_smi_gives_the_driver_of_the_first_gpu(no_gpu, monkeypatch, returncode, stdout, found):
    monkeypatch.setattr(driver.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    seen = []

    def run(command, **kwargs):
        seen.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout, "")

    monkeypatch.setattr(driver.subprocess, "run", run)
    assert visible_driver() == found
    assert seen == [["/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]]


def test_a_hung_nvidia_smi_is_no_driver_seen(no_gpu, monkeypatch):
    monkeypatch.setattr(driver.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def hang(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(driver.subprocess, "run", hang)
    assert visible_driver() is None


# ---------------------------------------------------------------- the replicas


def llm_config(device):
    """The LLMConfig the app builds for a model on ``device`` (deployments/vlm.py)."""
    from ray.serve.llm import LLMConfig

    from deployments.settings import ModelDeployment
    from deployments.vlm import llm_config_kwargs

    spec = ModelDeployment(model_id="m", source="org/m", device=device)
    return LLMConfig(**llm_config_kwargs(spec))


class EngineStarted(Exception):
    """Raised by the fake engine's start: the test stops there (before ray.serve.llm's telemetry)."""


def start(config, order):
    """ModelServer's start with a fake engine that records when ray.serve.llm builds and starts it (the
    real one downloads the weights first thing in its start)."""
    from deployments.model_server import ModelServer

    class Engine:
        def __init__(self, config):
            order.append("engine built")

        async def start(self):
            order.append("engine started")
            raise EngineStarted

    server = ModelServer.sync_init(config, engine_cls=Engine)
    asyncio.run(server.start())


def test_a_gpu_replica_on_an_old_driver_stops_before_the_engine_starts(monkeypatch):
    monkeypatch.setenv(DRIVER_ENV, OLD)
    order: list[str] = []
    with pytest.raises(DriverTooOld, match=f"NVIDIA driver {OLD} is older than 580"):
        start(llm_config("gpu"), order)
    assert order == []  # no engine: no weights downloaded, no CUDA


def test_a_gpu_replica_on_a_driver_that_runs_the_stack_starts_its_engine(monkeypatch):
    monkeypatch.setenv(DRIVER_ENV, NEW)
    order: list[str] = []
    with pytest.raises(EngineStarted):
        start(llm_config("gpu"), order)
    assert order == ["engine built", "engine started"]


def test_a_cpu_replica_checks_no_driver(monkeypatch):
    monkeypatch.setenv(DRIVER_ENV, OLD)  # whatever the machine has, a CPU model starts as before
    order: list[str] = []
    with pytest.raises(EngineStarted):
        start(llm_config("cpu"), order)
    assert order == ["engine built", "engine started"]


def test_the_hook_asks_the_probe_only_for_a_gpu_model():
    from deployments.model_server import check_replica_driver

    def probe():
        raise AssertionError("a CPU model asked for the driver")

    check_replica_driver(SimpleNamespace(accelerator_config=SimpleNamespace(kind="cpu"), model_id="m"), probe)
    gpu = SimpleNamespace(accelerator_config=SimpleNamespace(kind="gpu"), model_id="m")
    check_replica_driver(gpu, lambda: None)  # no driver visible: a warning in the log, the replica starts
    with pytest.raises(DriverTooOld):
        check_replica_driver(gpu, lambda: OLD)


def test_a_gpu_scorer_on_an_old_driver_stops_before_its_checkpoint_is_read(monkeypatch):
    from deployments import scorer
    from deployments.settings import ScorerSettings

    def read_checkpoint(*args, **kwargs):
        raise AssertionError("the checkpoint was read")

    monkeypatch.setattr(scorer, "ReasoningScorer", read_checkpoint)
    monkeypatch.setenv(DRIVER_ENV, OLD)
    with pytest.raises(DriverTooOld, match=OLD):
        scorer.AttentionScorer.func_or_class(ScorerSettings(device="gpu", num_gpus=1), "org/m")
    with pytest.raises(AssertionError, match="the checkpoint was read"):  # on CPU: no check
        scorer.AttentionScorer.func_or_class(ScorerSettings(device="cpu"), "org/m")


# ---------------------------------------------------------------- mai-check-config


def shipped(name):
    from serve_app.config import check_application

    [application] = yaml.safe_load((ROOT / "configs" / name).read_text())["applications"]
    return check_application(application)


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("mai.yaml", ["small", "large"]),
        ("mai-1gpu.yaml", ["small", "large"]),
        ("mai-cpu.yaml", []),
        ("mai-cpu-mixed.yaml", []),
        ("mai-emulated.yaml", []),  # emulated engines need no GPU
    ],
)
def test_what_of_each_shipped_config_needs_the_driver(name, parts):
    from serve_app.engine_config.driver_check import check_driver, gpu_parts

    config = shipped(name)
    assert gpu_parts(config) == parts
    result = check_driver(config, lambda: OLD if not parts else NEW)  # a CPU config never refuses
    assert result == {"needed_by": parts, "found": NEW if parts else None, "required": 580}


def test_a_gpu_config_on_an_old_driver_is_refused_naming_both_versions():
    from serve_app.engine_config.driver_check import check_driver

    with pytest.raises(ValueError, match=f"small, large on GPU: NVIDIA driver {OLD} is older than 580"):
        check_driver(shipped("mai.yaml"), lambda: OLD)
    assert check_driver(shipped("mai.yaml"), lambda: None)["found"] is None


def test_the_report_says_whether_the_driver_was_checked():
    from serve_app.engine_config.driver_check import driver_line

    path = "configs/mai.yaml"
    [line] = driver_line(path, {"needed_by": ["small", "large"], "found": None, "required": 580})
    assert line.startswith(f"{path}: NVIDIA driver not checked (none visible here") and "need 580" in line
    [line] = driver_line(path, {"needed_by": ["small"], "found": NEW, "required": 580})
    assert line == f"{path}: NVIDIA driver {NEW} (the GPU stack needs 580 or newer): ok"
    assert driver_line(path, {"needed_by": [], "found": None, "required": 580}) == []
    assert driver_line(path, None) == []


def test_mai_check_config_exits_2_on_an_old_driver_before_building_an_engine(monkeypatch, capsys):
    from serve_app.engine_config import engine_check

    def build(spec):
        raise AssertionError("an engine was built")

    monkeypatch.setattr(engine_check, "engine_settings", build)
    monkeypatch.setenv(DRIVER_ENV, OLD)
    assert engine_check.main([str(ROOT / "configs" / "mai.yaml")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"mai.yaml: ValueError: small, large on GPU: NVIDIA driver {OLD} is older than 580" in line
