"""The node inventory a config is checked against (serve_app/engine_config/placement.py): one host with
``--gpus N``, or the node groups of a KubeRay RayService or RayJob manifest at their ``maxReplicas``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from deployments.gpus import GPUS

from .placement import NodeGroup

PRODUCT_LABEL = "nvidia.com/gpu.product"


def one_host(gpus: int, gpu: str | None) -> list[NodeGroup]:
    return [NodeGroup(name="host", nodes=1, gpus=gpus, gpu=gpu)]


def manifest_groups(manifest: Mapping[str, Any]) -> list[NodeGroup]:
    """The head and worker groups of a RayService (``spec.rayClusterConfig``) or RayJob
    (``spec.rayClusterSpec``): GPUs from ``rayStartParams.num-gpus`` (else the container's
    ``nvidia.com/gpu`` limit), custom resources from ``rayStartParams.resources``, the GPU kind from
    the ``nvidia.com/gpu.product`` node selector."""
    spec = manifest.get("spec", {})
    cluster = spec.get("rayClusterConfig") or spec.get("rayClusterSpec")
    if not cluster:
        raise ValueError(
            "the manifest has no spec.rayClusterConfig (RayService) or spec.rayClusterSpec (RayJob)"
        )
    groups = [_group("head", 1, cluster["headGroupSpec"])]
    for worker in cluster.get("workerGroupSpecs", []):
        groups.append(_group(worker["groupName"], int(worker.get("maxReplicas", 1)), worker))
    return groups


def _group(name: str, nodes: int, spec: Mapping[str, Any]) -> NodeGroup:
    params = spec.get("rayStartParams", {})
    pod = spec["template"]["spec"]
    limits = pod["containers"][0].get("resources", {}).get("limits", {})
    gpus = int(float(params.get("num-gpus", limits.get("nvidia.com/gpu", 0))))
    resources = advertised_resources(spec)
    product = (pod.get("nodeSelector") or {}).get(PRODUCT_LABEL)
    return NodeGroup(name=name, nodes=nodes, gpus=gpus, gpu=gpu_kind(product), resources=resources)


def advertised_resources(group: Mapping[str, Any]) -> dict[str, float]:
    """The custom resources a group's ``rayStartParams.resources`` advertises (KubeRay's format: a
    JSON object inside a quoted string, '"{\\"mai_small\\": 1}"', or the object itself)."""
    raw = group.get("rayStartParams", {}).get("resources")
    if raw is None:
        return {}
    text = raw.strip()
    if text.startswith('"') and text.endswith('"'):
        text = json.loads(text)
    return json.loads(text)


def gpu_kind(product: str | None) -> str | None:
    """The known GPU a node label names (``NVIDIA-H100-80GB-HBM3`` -> ``H100``), else None."""
    if not product:
        return None
    label = product.upper()
    for kind in sorted(GPUS, key=len, reverse=True):
        if kind.upper() in label:
            return kind
    return None
