"""Each deployment's graceful shutdown timeout, as the app binds it, for every shipped config (None:
Serve's default, 20 s). Run from a checkout's root: python experiments/second-gpu-day/lifecycle/drains.py"""

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path.cwd()))

from serve_app.app import build_ingress, model_tier  # noqa: E402
from serve_app.config import load_app_config  # noqa: E402


def drain_of(app) -> float | None:
    config = app._bound_deployment._deployment_config
    configured = "graceful_shutdown_timeout_s" in config.user_configured_option_names
    return config.graceful_shutdown_timeout_s if configured else None


result = {}
for path in sorted(Path("configs").glob("mai*.yaml")):
    config = load_app_config(yaml.safe_load(path.read_text())["applications"][0]["args"])
    tier = model_tier(config)
    apps = {**tier, "ingress": build_ingress(config, tier, "anonymous")}
    result[path.name] = {
        "request_timeout_s": config.request_timeout_s,
        "graceful_shutdown_timeout_s": {name: drain_of(app) for name, app in apps.items()},
    }
print(json.dumps(result, indent=2))
