"""Every deployment drains its calls before Serve stops it (serve_app/core/lifecycle.py): each
graceful shutdown timeout is derived from the config's own timeouts, on every deployment the app binds,
and one set too short is refused naming the numbers."""

from pathlib import Path

import pytest
import yaml

from deployments.vlm import deployment_options
from serve_app.app import build_ingress, model_tier
from serve_app.config import AppConfig
from serve_app.core.lifecycle import DRAIN_MARGIN_S, FLEET_DRAIN_S, STREAM_BACKSTOP_S, Drains

ROOT = Path(__file__).resolve().parents[2]
SERVE_DEFAULT_S = 20.0  # ray/serve/_private/constants.py: what a deployment gets without one


def args(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())["applications"][0]["args"]


def test_a_model_outlives_its_longest_call_and_an_ingress_its_longest_request():
    drains = Drains(request_timeout_s=300, stage_timeouts_s=(30, None, 120), held_s=70)
    assert drains.model_s() == 300 + DRAIN_MARGIN_S
    assert Drains(60, (30, 120), 0).model_s() == 120 + DRAIN_MARGIN_S  # a stage allowed longer counts
    assert drains.ingress_s() == 70 + 300 + STREAM_BACKSTOP_S + DRAIN_MARGIN_S


@pytest.mark.parametrize("name", ["mai.yaml", "mai-1gpu.yaml", "mai-cpu.yaml", "mai-emulated.yaml"])
def test_every_shipped_config_gives_each_deployment_more_than_its_longest_call(name):
    config = AppConfig.model_validate(args(name))
    limits = config.limits
    for role, spec in (("small", config.small), ("large", config.large)):
        drain = deployment_options(spec, config.drain_s(role))["graceful_shutdown_timeout_s"]
        assert drain > config.request_timeout_s > SERVE_DEFAULT_S
    assert config.drain_s("scorer") == config.drain_s("small")
    held = limits.body_timeout_s + config.ingress.share_wait_s + config.readiness.wait_s
    assert config.drain_s("ingress") > held + config.request_timeout_s


def test_the_app_binds_every_deployment_with_its_drain():
    config = AppConfig.model_validate(args("mai-emulated.yaml"))
    tier = model_tier(config)
    ingress = build_ingress(config, tier, "anonymous")._bound_deployment
    drains = {
        name: app._bound_deployment._deployment_config.graceful_shutdown_timeout_s
        for name, app in tier.items()
    }
    assert drains == {
        "small": config.drain_s("small"),
        "large": config.drain_s("large"),
        "stats": FLEET_DRAIN_S,
        "ledger": FLEET_DRAIN_S,
    }
    assert ingress._deployment_config.graceful_shutdown_timeout_s == config.drain_s("ingress")


def test_the_drains_follow_the_request_timeout_also_on_a_copy():
    """mai-batch runs the server's config with its row timeout (a model_copy): its models drain for it."""
    short = AppConfig.model_validate(args("mai-cpu.yaml"))
    longer = short.model_copy(update={"request_timeout_s": short.request_timeout_s + 100})
    for part in ("small", "large", "ingress", "scorer"):
        assert longer.drain_s(part) == short.drain_s(part) + 100


def test_a_drain_shorter_than_the_longest_call_is_refused_naming_both():
    base = args("mai-cpu.yaml")
    wrong = base | {"large": base["large"] | {"graceful_shutdown_timeout_s": 20}}
    with pytest.raises(
        ValueError,
        match=r"large.graceful_shutdown_timeout_s 20 s is shorter than the longest call "
        r"\(120 s request_timeout_s\) and a margin \(130 s\)",
    ):
        AppConfig.model_validate(wrong)
    wrong = base | {"ingress": base["ingress"] | {"graceful_shutdown_timeout_s": 150}}
    with pytest.raises(
        ValueError,
        match=r"ingress.graceful_shutdown_timeout_s 150 s is shorter than "
        r"the longest request it holds \(205 s\)",
    ):
        AppConfig.model_validate(wrong)
    longer = base | {"small": base["small"] | {"graceful_shutdown_timeout_s": 600}}
    assert AppConfig.model_validate(longer).drain_s("small") == 600
