"""Whether a config's engines fit a declared node inventory at their maximum replicas.

Each engine replica asks Ray for a bundle: a share of one GPU (a fraction shares a GPU, a whole one
takes it), the config's pin resources, and — on the GPU — the memory share vLLM checks is free at
start (``gpu_memory_utilization``). The inventory is node groups, each so many nodes of so many GPUs
of one kind, advertising custom resources (``--gpus N`` on one host, or a RayService's worker groups
at their ``maxReplicas``). Replicas are placed largest first onto the first GPU they fit, as Ray
packs fractional GPUs onto one device; what fits nowhere can never start, however long it waits.
CPUs are not counted: the engines' CPU needs are small beside a GPU node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..config import AppConfig, ModelDeployment
from ..core.roles import ROLES

EPSILON = 1e-9
DEFAULT_MEMORY_SHARE = 0.9  # vLLM's gpu_memory_utilization


@dataclass(frozen=True)
class NodeGroup:
    """``nodes`` nodes, each with ``gpus`` GPUs of kind ``gpu`` (None: unknown) and ``resources``."""

    name: str
    nodes: int
    gpus: int
    gpu: str | None = None
    resources: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Ask:
    """What each of ``replicas`` replicas of one engine asks for."""

    name: str
    replicas: int
    gpu_share: float
    memory_share: float
    resources: Mapping[str, float] = field(default_factory=dict)
    kv_cache_memory_bytes: int | None = None

    def describe(self) -> str:
        parts = [f"GPU {self.gpu_share:g}"] + [f"{key} {value:g}" for key, value in self.resources.items()]
        return f"{self.name}: {self.replicas} x ({', '.join(parts)})"


def engine_asks(config: AppConfig) -> list[Ask]:
    """The GPU engines of ``config`` at their maximum replicas."""
    asks = []
    for role in ROLES:
        spec: ModelDeployment = getattr(config, role)
        if spec.engine != "vllm" or spec.device != "gpu":
            continue
        asks.append(
            Ask(
                name=f"{role} {spec.model_id}",
                replicas=spec.autoscaling.max_replicas,
                gpu_share=spec.gpu_share(),
                memory_share=float(spec.engine_kwargs.get("gpu_memory_utilization", DEFAULT_MEMORY_SHARE)),
                resources=dict(spec.pin_resources),
                kv_cache_memory_bytes=spec.engine_kwargs.get("kv_cache_memory_bytes"),
            )
        )
    return asks


@dataclass
class _Node:
    group: NodeGroup
    resources: dict[str, float]
    gpus: list[list[float]]  # per GPU: [GPU share used, memory share used]
    hosts: set[str] = field(default_factory=set)  # the engines with a replica here


def placement_problems(
    asks: Iterable[Ask], groups: Iterable[NodeGroup], gpu_memory_bytes: Mapping[str, int]
) -> list[str]:
    """One line per engine whose replicas cannot all be placed (or whose KV budget does not fit its
    GPU's memory share), naming the numbers; empty when everything fits."""
    groups = list(groups)
    nodes = [
        _Node(group, dict(group.resources), [[0.0, 0.0] for _ in range(group.gpus)])
        for group in groups
        for _ in range(group.nodes)
    ]
    asks = sorted(asks, key=lambda ask: -ask.gpu_share)
    placed = dict.fromkeys((ask.name for ask in asks), 0)
    for replica in range(max((ask.replicas for ask in asks), default=0)):  # the engines scale together
        for ask in asks:
            if replica < ask.replicas and _place(ask, nodes):
                placed[ask.name] += 1
    unplaced = [ask for ask in asks if placed[ask.name] < ask.replicas]
    problems = []
    if unplaced:
        asked = sum(ask.replicas * ask.gpu_share for ask in asks)
        problems.append(
            f"at max_replicas the engines ask for {asked:g} GPUs ({'; '.join(a.describe() for a in asks)}) "
            f"and {', '.join(f'{ask.replicas - placed[ask.name]} {ask.name}' for ask in unplaced)} "
            f"replica(s) fit no GPU of the inventory ({_inventory(groups)}): they would wait forever; "
            "lower max_replicas or add nodes"
        )
    for ask in asks:
        problems.extend(_kv_problems(ask, nodes, gpu_memory_bytes))
    return problems


def _place(ask: Ask, nodes: list[_Node]) -> bool:
    for node in nodes:
        if any(node.resources.get(key, 0.0) + EPSILON < value for key, value in ask.resources.items()):
            continue
        for gpu in node.gpus:
            shared = ask.gpu_share < 1
            fits = gpu[0] + ask.gpu_share <= 1 + EPSILON and (
                gpu[1] + ask.memory_share <= 1 + EPSILON if shared else gpu[0] == 0
            )
            if fits:
                gpu[0] += ask.gpu_share
                gpu[1] += ask.memory_share if shared else 1.0
                for key, value in ask.resources.items():
                    node.resources[key] -= value
                node.hosts.add(ask.name)
                return True
    return False


def _kv_problems(ask: Ask, nodes: list[_Node], gpu_memory_bytes: Mapping[str, int]) -> list[str]:
    if ask.kv_cache_memory_bytes is None:
        return []
    kinds = {node.group.gpu for node in nodes if ask.name in node.hosts and node.group.gpu is not None}
    problems = []
    for kind in sorted(kind for kind in kinds if kind is not None and kind in gpu_memory_bytes):
        room = ask.memory_share * gpu_memory_bytes[kind]
        if ask.kv_cache_memory_bytes >= room:
            problems.append(
                f"{ask.name}: kv_cache_memory_bytes {ask.kv_cache_memory_bytes / 2**30:.1f} GiB does not fit "
                f"gpu_memory_utilization {ask.memory_share} of a {kind} ({room / 2**30:.1f} GiB) beside "
                "the weights"
            )
    return problems


def _inventory(groups: list[NodeGroup]) -> str:
    return "; ".join(
        f"{group.name}: {group.nodes} node(s) x {group.gpus} {group.gpu or 'GPU'}"
        + "".join(f", {key} {value:g}" for key, value in group.resources.items())
        for group in groups
    )
