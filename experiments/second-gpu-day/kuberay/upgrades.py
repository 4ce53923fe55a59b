"""What an upgrade of the RayService costs, read off the rendered manifests: its upgrade strategy, the
fields KubeRay ignores, where each pod takes the API keys from, and for each kind of change whether
it changes rayClusterConfig, what KubeRay then does, and the GPUs a second cluster would hold.

    python experiments/second-gpu-day/kuberay/upgrades.py experiments/second-gpu-day/kuberay/after.json
    python experiments/second-gpu-day/kuberay/upgrades.py experiments/second-gpu-day/kuberay/before.json \
        --k8s <dir>/k8s --commit d196e71   # another commit's: git archive d196e71 k8s | tar -x -C <dir>

What KubeRay does is its RayService controller's rule at the commit whose CRD k8s/crd/ vendors
(feeaf72): a change to rayClusterConfig other than the groups' replicas, minReplicas, maxReplicas and
tolerations, or worker groups added at the end, starts a new cluster under NewCluster (the default when
upgradeStrategy is absent) and NewClusterWithIncrementalUpgrade, and nothing under None; serveConfigV2
goes to the running cluster whatever the strategy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
SECRET = "mai-api-keys"
IGNORED = ("serviceUnhealthySecondThreshold", "deploymentUnhealthySecondThreshold")
DEFAULT_STRATEGY = "NewCluster"  # KubeRay's, when spec.upgradeStrategy.type is absent


def groups(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"head": cluster["headGroupSpec"]} | {g["groupName"]: g for g in cluster["workerGroupSpecs"]}


def key_sources(pod: dict[str, Any]) -> list[str]:
    """How the pod's Ray container takes the API keys: variables from the Secret, or a mount of it."""
    container = pod["containers"][0]
    volumes = {
        v["name"]: v for v in pod.get("volumes", []) if (v.get("secret") or {}).get("secretName") == SECRET
    }
    found = [
        f"env {item['name']} (secretKeyRef)"
        for item in container.get("env", [])
        if ((item.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") == SECRET
    ]
    for mount in container.get("volumeMounts", []):
        if mount["name"] in volumes:
            items = volumes[mount["name"]]["secret"].get("items", [])
            files = [str(PurePosixPath(mount["mountPath"]) / item["path"]) for item in items]
            how = f"subPath {mount['subPath']}" if "subPath" in mount else "whole folder"
            where = ", ".join(files) or mount["mountPath"]
            found.append(f"volume at {where} ({how}, readOnly {mount.get('readOnly', False)})")
    return found


def gpus(cluster: dict[str, Any], count: str) -> int:
    """GPUs of the cluster's pods with each worker group at ``count`` (replicas, maxReplicas)."""
    total = 0
    for group in cluster["workerGroupSpecs"]:
        [container] = group["template"]["spec"]["containers"]
        total += group[count] * int(container["resources"]["limits"].get("nvidia.com/gpu", 0))
    return total


def summary(folder: Path) -> dict[str, Any]:
    service = yaml.safe_load((folder / "rayservice.yaml").read_text())
    spec, cluster = service["spec"], service["spec"]["rayClusterConfig"]
    strategy = (spec.get("upgradeStrategy") or {}).get("type")
    effective = strategy or DEFAULT_STRATEGY
    sources = {name: key_sources(group["template"]["spec"]) for name, group in groups(cluster).items()}
    [application] = yaml.safe_load(spec["serveConfigV2"])["applications"]
    security = application["args"].get("security", {})
    keys_file = security.get("api_keys_file")
    # a rotation reaches running replicas only through a file the kubelet updates and the app reads again
    rotation_in_place = all(
        any(f"volume at {keys_file} (whole folder" in source for source in found)
        and not any(source.startswith("env ") for source in found)
        for found in sources.values()
    )
    second = {"gpus_at_start": gpus(cluster, "replicas"), "gpus_at_most": gpus(cluster, "maxReplicas")}
    new_cluster = effective in ("NewCluster", "NewClusterWithIncrementalUpgrade")

    def cluster_change(note: str) -> dict[str, Any]:
        return {
            "changes_rayClusterConfig": True,
            "kuberay": "starts a second cluster, switches once it serves" if new_cluster else note,
            "second_cluster_gpus": second if new_cluster else None,
        }

    in_place = {
        "changes_rayClusterConfig": False,
        "kuberay": "applied to the running cluster",
        "second_cluster_gpus": None,
    }
    waiting = "; while a second cluster is pending, to that one instead" if new_cluster else ""
    changes = {
        "serveConfigV2 edit": in_place | {"kuberay": in_place["kuberay"] + waiting},
        "API key rotation": (
            in_place
            | {"kuberay": "nothing: the Secret alone; the kubelet updates the file, replicas reread it"}
            if rotation_in_place
            else cluster_change("none started")
            | {"why": "pods read the keys when they start: a new pod per key change"}
        ),
        "image bump": cluster_change("none started: rolled out by NewCluster for the upgrade, or a recreate"),
        "a group's maxReplicas": {
            "changes_rayClusterConfig": True,
            "kuberay": "not applied to the running cluster (outside the hash), whatever the strategy",
            "second_cluster_gpus": None,
        },
    }
    jobs = [d for d in yaml.safe_load_all((folder / "rayjob.yaml").read_text()) if d["kind"] == "RayJob"]
    return {
        "rayservice": {
            "upgradeStrategy": spec.get("upgradeStrategy"),
            "effective_upgrade_type": effective,
            "ignored_fields": {field: spec[field] for field in IGNORED if field in spec},
            "api_keys_per_pod": sources,
            "serve_security": security,
            "changes": changes,
        },
        "rayjob_api_keys_per_pod": {
            name: key_sources(group["template"]["spec"])
            for job in jobs
            for name, group in groups(job["spec"]["rayClusterSpec"]).items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--k8s", type=Path, default=ROOT / "k8s", help="the folder of the rendered manifests")
    parser.add_argument("--commit", help="the commit the manifests are from (default: this checkout's HEAD)")
    args = parser.parse_args()
    commit = (
        args.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    command = f"python experiments/second-gpu-day/kuberay/upgrades.py {args.out}"
    if args.k8s.resolve() != (ROOT / "k8s").resolve():
        command += f" --k8s <dir>/k8s --commit {commit}"
    meta = {"command": command, "commit": commit, "manifests": ["k8s/rayservice.yaml", "k8s/rayjob.yaml"]}
    args.out.write_text(json.dumps({"meta": meta} | summary(args.k8s), indent=2) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
