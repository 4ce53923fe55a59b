"""How each policy yields its reasoning's answer (stage2_answer) on every shipped config, resolved as the
ingress resolves a request's options; before this change the server's defaults reached every policy.

    python experiments/gpu-day/policy_options.py experiments/gpu-day/policy-options-after.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from serve_app.config import load_app_config
from serve_app.core.contracts import CascadeOptions, Policy

ROOT = Path(__file__).resolve().parents[2]


def resolve(cascade, policy: Policy) -> CascadeOptions:
    if hasattr(cascade, "request_options"):
        return cascade.request_options({"policy": policy})
    return CascadeOptions.model_validate(cascade.request_defaults() | {"policy": policy})  # the old path


def table(root: Path) -> dict[str, dict[str, str]]:
    result = {}
    for path in sorted((root / "configs").glob("*.yaml")):
        args = yaml.safe_load(path.read_text())["applications"][0]["args"]
        cascade = load_app_config(args).cascade
        result[path.name] = {
            policy.value: resolve(cascade, policy).resolved_stage2_answer() for policy in Policy
        }
    return result


if __name__ == "__main__":
    out = Path(sys.argv[1])
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT
    out.write_text(json.dumps(table(root), indent=2) + "\n")
    print(out)
