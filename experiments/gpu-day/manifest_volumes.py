"""The volumes of every pod in the rendered KubeRay manifests: what each mounts where, and from what.

python experiments/gpu-day/manifest_volumes.py experiments/gpu-day/manifest-volumes-after.json
python experiments/gpu-day/manifest_volumes.py before.json DIR   # manifests from another folder
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = {"rayservice.yaml": ("rayClusterConfig",), "rayjob.yaml": ("rayClusterSpec",)}


def pods(document: dict, key: str) -> dict[str, dict]:
    cluster = document["spec"][key]
    groups = {"head": cluster["headGroupSpec"]} | {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    return {name: group["template"]["spec"] for name, group in groups.items()}


def volumes(folder: Path = ROOT / "k8s") -> dict[str, dict]:
    result: dict[str, dict] = {}
    for name, (key,) in MANIFESTS.items():
        for document in yaml.safe_load_all((folder / name).read_text()):
            if document and document.get("kind") in ("RayService", "RayJob"):
                for group, spec in pods(document, key).items():
                    container = spec["containers"][0]
                    env = {
                        item["name"]: item.get("value")
                        for item in container.get("env", [])
                        if "value" in item
                    }
                    result[f"{name} {group}"] = {
                        "volumes": spec.get("volumes", []),
                        "mounts": container.get("volumeMounts", []),
                        "cache_env": {key: env[key] for key in ("HF_HOME", "VLLM_CACHE_ROOT") if key in env},
                    }
    return result


if __name__ == "__main__":
    out = Path(sys.argv[1])
    folder = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "k8s"
    out.write_text(json.dumps(volumes(folder), indent=2) + "\n")
    print(out)
