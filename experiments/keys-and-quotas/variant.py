"""A shipped config with named keys for the key measurements: a keys file of fresh random keys (the
``quota`` key with a requests_per_minute, ``tokens`` with a tokens_per_minute, ``flood`` and
``trickle`` without), and the ingress fixed at ``--ingress-replicas``.

    python experiments/keys-and-quotas/variant.py configs/mai-emulated.yaml --ingress-replicas 2 \
        --requests-per-minute 120 --out /tmp/keys-run
    # -> /tmp/keys-run/config.yaml, keys.yaml, keys.env (QUOTA_KEY=..., TOKENS_KEY=..., FLOOD_KEY=..., ...)
"""

from __future__ import annotations

import argparse
import hashlib
import secrets
from pathlib import Path

import yaml


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=Path)
    parser.add_argument("--ingress-replicas", type=int, default=1)
    parser.add_argument("--requests-per-minute", type=int, default=120)
    parser.add_argument("--tokens-per-minute", type=int, default=40_000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    keys = {name: secrets.token_hex(16) for name in ("quota", "tokens", "flood", "trickle")}
    quotas = {
        "quota": {"requests_per_minute": args.requests_per_minute},
        "tokens": {"tokens_per_minute": args.tokens_per_minute},
    }
    entries = [
        {"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest()} | quotas.get(name, {})
        for name, key in keys.items()
    ]
    (args.out / "keys.yaml").write_text(yaml.safe_dump({"keys": entries}, sort_keys=False))
    (args.out / "keys.env").write_text("".join(f"{name.upper()}_KEY={key}\n" for name, key in keys.items()))
    config = yaml.safe_load(args.config.read_text())
    app = config["applications"][0]["args"]
    app["security"] = app.get("security", {}) | {"keys_file": str((args.out / "keys.yaml").resolve())}
    ingress = app.setdefault("ingress", {})
    ingress["autoscaling"] = ingress.get("autoscaling", {}) | {
        "min_replicas": args.ingress_replicas,
        "max_replicas": args.ingress_replicas,
        "target_ongoing_requests": ingress.get("autoscaling", {}).get("target_ongoing_requests", 16),
    }
    ingress["autoscaling"].pop("initial_replicas", None)
    (args.out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    print(args.out / "config.yaml")


if __name__ == "__main__":
    main()
