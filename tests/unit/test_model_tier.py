"""One composition root: the server and ``mai-batch`` bind the same model tier (``serve_app.app.
model_tier``), by the same names, and ``--attach`` finds it by the names its deployments are given."""

from pathlib import Path

import yaml

from batch.model_tier import model_apps
from serve_app.app import build_ingress, model_tier
from serve_app.config import AppConfig
from serve_app.core.roles import TIER

ROOT = Path(__file__).resolve().parents[2]


def emulated() -> AppConfig:
    app = yaml.safe_load((ROOT / "configs/mai-emulated.yaml").read_text())["applications"][0]
    return AppConfig.model_validate(app["args"])


def test_batch_serves_the_servers_model_tier_by_the_same_names():
    config = emulated()
    server, batch = model_tier(config), model_apps(config)
    assert set(server) == set(batch) == set(TIER) - {"scorer"}  # no attention selection configured
    for name, app in server.items():
        deployment = app._bound_deployment
        assert deployment.name.startswith(TIER[name]), (name, deployment.name)
        assert batch[name]._bound_deployment.name == deployment.name
        assert batch[name]._bound_deployment.init_args == deployment.init_args


def test_the_ingress_is_bound_to_the_tier_it_is_given():
    config = emulated()
    tier = model_tier(config)
    ingress = build_ingress(config, tier, "anonymous")._bound_deployment
    small, large, _, scorer, stats, ledger, access = ingress.init_args
    assert small is tier["small"] and large is tier["large"]
    assert stats is tier["stats"] and ledger is tier["ledger"]
    assert scorer is None and access == "anonymous"
