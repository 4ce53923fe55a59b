"""Every deployment of every shipped config gets its graceful shutdown timeout as Serve will read it:
the model deployments through ray.serve.llm's own builder (``build_llm_deployment``), the ingress,
the scorer and the fleet's deployments through the app's composition root."""

from pathlib import Path

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
    tier = model_tier(config)
    ingress = build_ingress(config, tier, "anonymous")
    assert drain_of(tier["small"]) == config.drain_s("small") > config.request_timeout_s > SERVE_DEFAULT_S
    assert drain_of(tier["large"]) == config.drain_s("large")
    assert drain_of(ingress) == config.drain_s("ingress") > config.drain_s("large")
    assert drain_of(tier["stats"]) == drain_of(tier["ledger"]) == FLEET_DRAIN_S
    if "scorer" in tier:
        assert drain_of(tier["scorer"]) == config.drain_s("scorer")
