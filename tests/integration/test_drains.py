"""Every deployment of every shipped config gets its graceful shutdown timeout as Serve will read it:
the model deployments through ray.serve.llm's own builder (``build_llm_deployment``), the ingress,
the scorer and the fleet's deployments through the app's composition root."""

from pathlib import Path
from unittest import mock

import pytest
import yaml

from serve_app.app import build_ingress, model_tier
from serve_app.config import load_app_config
from serve_app.core.lifecycle import FLEET_DRAIN_S

ROOT = Path(__file__).resolve().parents[2]
SERVE_DEFAULT_S = 20.0
SHIPPED = sorted(path.name for path in (ROOT / "configs").glob("mai*.yaml"))


def drain_of(app) -> float:
    return app._bound_deployment._deployment_config.graceful_shutdown_timeout_s


@pytest.mark.parametrize("name", SHIPPED)
def test_each_deployment_drains_for_its_longest_call(name):
    args = yaml.safe_load((ROOT / "configs" / name).read_text())["applications"][0]["args"]
    config = load_app_config(args)
    # ray.serve.llm's builder reads the driver's runtime environment, the only thing it reads of a
    # running Ray (empty under `serve run`); unmocked, it would start one in this process.
    with mock.patch("ray.get_runtime_context", return_value=mock.Mock(runtime_env={})):
        tier = model_tier(config)
    ingress = build_ingress(config, tier, "anonymous")
    assert drain_of(tier["small"]) == config.drain_s("small") > config.request_timeout_s > SERVE_DEFAULT_S
    assert drain_of(tier["large"]) == config.drain_s("large")
    assert drain_of(ingress) == config.drain_s("ingress") > config.drain_s("large")
    assert drain_of(tier["stats"]) == drain_of(tier["ledger"]) == FLEET_DRAIN_S
    if "scorer" in tier:
        assert drain_of(tier["scorer"]) == config.drain_s("scorer")


def test_no_ray_was_started_here():
    """The next module starts a local Ray of its own (``ray.init(address="local")``), which fails if
    one is running in this process."""
    import ray

    assert not ray.is_initialized()
