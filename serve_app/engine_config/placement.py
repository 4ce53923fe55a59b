"""Whether a config's engines fit a declared node inventory at their maximum replicas.

Each engine replica asks Ray for a bundle: a share of one GPU (a fraction shares a GPU, a whole one
takes it), the config's pin resources and accelerator type, and — on the GPU — the memory share vLLM
checks is free at start (``gpu_memory_utilization``); a GPU scorer asks for its fraction and pins.
The inventory is node groups, each so many nodes of so many GPUs of one kind, advertising custom
resources (``--gpus N`` on one host, or a RayService's worker groups at their ``maxReplicas``).
Replicas are placed largest first onto the first GPU they fit, as Ray packs fractional GPUs onto one
device; what fits nowhere can never start, however long it waits. Then each GPU of a known kind is
checked for the memory of what was placed on it (deployments/memory.py). CPUs are not counted: the
engines' CPU needs are small beside a GPU node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from deployments.memory import Need, card_problems, need_of, scorer_need_of

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
    need: Need | None = None  # what one replica needs of its GPU's memory
    accelerator_type: str | None = None

    def describe(self) -> str:
        parts = [f"GPU {self.gpu_share:g}"] + [f"{key} {value:g}" for key, value in self.resources.items()]
        return f"{self.name}: {self.replicas} x ({', '.join(parts)})"


def engine_asks(config: AppConfig) -> list[Ask]:
    """The GPU engines of ``config`` at their maximum replicas, and a GPU scorer's."""
    asks = []
    for role in ROLES:
        spec: ModelDeployment = getattr(config, role)
        if spec.engine != "vllm" or spec.device != "gpu":
            continue
        name = f"{role} {spec.model_id}"
        asks.append(
            Ask(
                name=name,
                replicas=spec.autoscaling.max_replicas,
                gpu_share=spec.gpu_share(),
                memory_share=float(spec.engine_kwargs.get("gpu_memory_utilization", DEFAULT_MEMORY_SHARE)),
                resources=dict(spec.pin_resources),
                need=need_of(name, spec),
                accelerator_type=spec.accelerator_type,
            )
        )
    scorer = config.transfer_selection.scorer
    if config.transfer_selection.attention and scorer.device == "gpu":
        mm = config.scorer_mm_processor_kwargs()
        asks.append(
            Ask(
                name="scorer",
                replicas=scorer.autoscaling.max_replicas,
                gpu_share=scorer.num_gpus,
                memory_share=0.0,  # checks nothing at start; its memory is counted per GPU
                resources=dict(scorer.pin_resources),
                need=scorer_need_of(config.scorer_source(), scorer.dtype, scorer.max_reasoning_tokens, mm),
            )
        )
    return asks


@dataclass
class _GPU:
    share: float = 0.0  # GPU share used
    memory: float = 0.0  # memory share used
    needs: list[Need] = field(default_factory=list)  # what each replica here needs of its memory


@dataclass
class _Node:
    group: NodeGroup
    resources: dict[str, float]
    gpus: list[_GPU]


def placement_problems(asks: Iterable[Ask], groups: Iterable[NodeGroup]) -> list[str]:
    """One line per engine whose replicas cannot all be placed, and one per memory rule a GPU of a known
    kind breaks with what was placed on it, naming the numbers; empty when everything fits."""
    asks, groups = list(asks), list(groups)
    nodes, unplaced = place(asks, groups)
    problems = []
    if unplaced:
        asked = sum(ask.replicas * ask.gpu_share for ask in asks)
        problems.append(
            f"at max_replicas the engines ask for {asked:g} GPUs ({'; '.join(a.describe() for a in asks)}) "
            f"and {', '.join(f'{missing} {name}' for name, missing in unplaced.items())} "
            f"replica(s) fit no GPU of the inventory ({_inventory(groups)}): they would wait forever; "
            "lower max_replicas or add nodes"
        )
    memory = [problem for _, _, found in memory_of(nodes) for problem in found]
    return problems + list(dict.fromkeys(memory))  # alike cards break a rule alike: once


def place(asks: Iterable[Ask], groups: Iterable[NodeGroup]) -> tuple[list[_Node], dict[str, int]]:
    """The nodes with every replica placed that fits, and the replicas left over per engine."""
    nodes = [
        _Node(group, dict(group.resources), [_GPU() for _ in range(group.gpus)])
        for group in groups
        for _ in range(group.nodes)
    ]
    asks = sorted(asks, key=lambda ask: -ask.gpu_share)
    placed = dict.fromkeys((ask.name for ask in asks), 0)
    for replica in range(max((ask.replicas for ask in asks), default=0)):  # the engines scale together
        for ask in asks:
            if replica < ask.replicas and _place(ask, nodes):
                placed[ask.name] += 1
    return nodes, {
        ask.name: ask.replicas - placed[ask.name] for ask in asks if placed[ask.name] < ask.replicas
    }


def memory_of(nodes: Iterable[_Node]) -> list[tuple[str, list[Need], list[str]]]:
    """Per GPU of a known kind with something on it, once per distinct set: its kind, the needs placed
    there and the memory rules they break (deployments/memory.py)."""
    seen, cards = set(), []
    for node in nodes:
        for gpu in node.gpus:
            key = (node.group.gpu, tuple(need.name for need in gpu.needs))
            if node.group.gpu is None or not gpu.needs or key in seen:
                continue
            seen.add(key)
            cards.append((node.group.gpu, gpu.needs, card_problems(node.group.gpu, gpu.needs)))
    return cards


def _place(ask: Ask, nodes: list[_Node]) -> bool:
    for node in nodes:
        if any(node.resources.get(key, 0.0) + EPSILON < value for key, value in ask.resources.items()):
            continue
        kind = node.group.gpu
        if ask.accelerator_type and kind is not None and kind != ask.accelerator_type:
            continue
        for gpu in node.gpus:
            shared = ask.gpu_share < 1
            fits = gpu.share + ask.gpu_share <= 1 + EPSILON and (
                gpu.memory + ask.memory_share <= 1 + EPSILON if shared else gpu.share == 0
            )
            if fits:
                gpu.share += ask.gpu_share
                gpu.memory += ask.memory_share if shared else 1.0
                if ask.need is not None:  # a second replica of one engine here is named apart
                    twins = sum(need.name.split(" #")[0] == ask.need.name for need in gpu.needs)
                    gpu.needs.append(
                        replace(ask.need, name=f"{ask.need.name} #{twins + 1}") if twins else ask.need
                    )
                for key, value in ask.resources.items():
                    node.resources[key] -= value
                return True
    return False


def _inventory(groups: list[NodeGroup]) -> str:
    return "; ".join(
        f"{group.name}: {group.nodes} node(s) x {group.gpus} {group.gpu or 'GPU'}"
        + "".join(f", {key} {value:g}" for key, value in group.resources.items())
        for group in groups
    )
