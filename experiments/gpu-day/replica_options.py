"""The Serve options ray.serve.llm gives each model's replica actor, per shipped config: the placement
bundles and the replica's environment, as ``LLMServer.get_deployment_options`` builds them.

    python experiments/gpu-day/replica_options.py experiments/gpu-day/replica-options-after.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from deployments.vlm import llm_config_kwargs  # noqa: E402
from serve_app.config import load_app_config  # noqa: E402

CONFIGS = ("mai.yaml", "mai-1gpu.yaml", "mai-cpu.yaml", "mai-cpu-mixed.yaml")


def replica_options() -> dict[str, dict[str, dict]]:
    from ray.llm._internal.serve.core.server.llm_server import LLMServer
    from ray.serve.llm import LLMConfig

    result: dict[str, dict[str, dict]] = {}
    # The driver's own runtime environment (empty for `serve run`) is all get_deployment_options reads
    # of a running Ray; no cluster is started for it.
    context = mock.Mock(runtime_env={})
    with mock.patch("ray.get_runtime_context", return_value=context):
        for name in CONFIGS:
            args = yaml.safe_load((ROOT / "configs" / name).read_text())["applications"][0]["args"]
            config = load_app_config(args)
            result[name] = {}
            for role in ("small", "large"):
                llm = LLMConfig(**llm_config_kwargs(getattr(config, role)))
                options = LLMServer.get_deployment_options(llm)
                actor = options["ray_actor_options"]
                result[name][role] = {
                    "placement_group_bundles": options["placement_group_bundles"],
                    "replica_env": actor["runtime_env"].get("env_vars", {}),
                }
    return result


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.write_text(json.dumps(replica_options(), indent=2) + "\n")
    print(out)
