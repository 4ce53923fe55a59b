"""What ``mai-check-config`` shows of a config's GPU memory: each engine's (and a GPU scorer's) need on
the GPU it is placed on, the card's total, and the rules it breaks (deployments/memory.py).

Without an inventory, one replica of each is placed on a host of the GPU its engine names
(``accelerator_type``), else of ``--gpu``'s kind (a GPU scorer beside engines that all name one kind, on
theirs): replicas are alike, so one of each shows every card's share. With ``--gpus N`` or
``--cluster``, the replicas at ``max_replicas`` on that inventory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from deployments.gpus import GPUS
from deployments.memory import GiB, Need, usable_bytes

from ..config import AppConfig
from .placement import NodeGroup, engine_asks, memory_of, place


def memory_check(config: AppConfig, kind: str, inventory: Sequence[NodeGroup] | None = None) -> dict | None:
    """The cards of ``config``'s GPU processes and their memory, or None for a config without any."""
    asks = engine_asks(config)
    if not asks:
        return None
    named = {str(ask.accelerator_type) for ask in asks if ask.accelerator_type in GPUS}
    unnamed = any(ask.accelerator_type is None and ask.memory_share > 0 for ask in asks)  # an engine
    card = next(iter(named)) if len(named) == 1 and not unnamed else kind  # the scorer goes beside them
    if inventory is None:
        asks = [replace(ask, replicas=1) for ask in asks]
        inventory = [
            NodeGroup(name=f"host {gpu}", nodes=1, gpus=len(asks), gpu=gpu)
            for gpu in [card, *sorted(named - {card})]
        ]
    nodes, _ = place(asks, inventory)
    cards = [_card(gpu, needs, problems) for gpu, needs, problems in memory_of(nodes)]
    return {
        "gpu": card,
        "cards": cards,
        "problems": list(dict.fromkeys(problem for card in cards for problem in card["problems"])),
    }


def _card(kind: str, needs: Sequence[Need], problems: list[str]) -> dict[str, Any]:
    total = usable_bytes(kind)
    processes = [_process(need, total) for need in needs]
    footprints = [process["footprint"] for process in processes]
    needed = sum(value for value in footprints if value is not None)
    return {
        "gpu": kind,
        "usable_bytes": total,
        "processes": processes,
        "needed_bytes": needed,
        "free_bytes": total - needed,
        "unknown": [process["name"] for process in processes if process["footprint"] is None],
        "problems": problems,
    }


def _process(need: Need, total: int) -> dict[str, Any]:
    kv = need.kv if need.kv is not None else need.profiled_kv(total)
    return {
        "name": need.name,
        "weights_bytes": need.weights,
        "kv_bytes": kv,
        "kv_fixed": need.kv is not None,
        "kv_tokens": kv // need.kv_per_token if kv is not None and need.kv_per_token else None,
        "activations_bytes": need.activations,
        "context_bytes": need.context,
        "share": need.share,
        "share_bytes": None if need.share is None else int(need.share * total),
        "footprint": need.footprint(total),
    }


def memory_lines(path: str, memory: Mapping[str, Any] | None) -> list[str]:
    """The report's lines: per card, each process's need and the card's total."""
    lines = []
    for card in (memory or {}).get("cards", []):
        lines.append(f"{path} memory on one {card['gpu']} ({_gib(card['usable_bytes'])} as CUDA reports it):")
        for process in card["processes"]:
            lines.append(f"  {process['name']}: {_parts(process)}")
        unknown = f"; not counted: {', '.join(card['unknown'])} (weights unknown)" if card["unknown"] else ""
        lines.append(
            f"  together {_gib(card['needed_bytes'])}, {_gib(card['free_bytes'])} left{unknown}"
            + (" -- refused" if card["problems"] else "")
        )
    return lines


def _parts(process: Mapping[str, Any]) -> str:
    weights = "unknown" if process["weights_bytes"] is None else _gib(process["weights_bytes"])
    kv = process["kv_bytes"]
    notes = [f"{process['kv_tokens']:,} tokens"] if process["kv_tokens"] else []
    notes += [] if process["kv_fixed"] else ["what its share leaves"]
    kv_text = f"KV {_gib(kv or 0)}" + (f" ({', '.join(notes)})" if notes else "")
    kv_text = f"{kv_text} + " if kv is not None else ""  # the scorer keeps no KV cache
    text = (
        f"weights {weights} + {kv_text}activations and CUDA graphs {_gib(process['activations_bytes'])} "
        f"+ CUDA context {_gib(process['context_bytes'])}"
    )
    if process["footprint"] is not None:
        text += f" = {_gib(process['footprint'])}"
    if process["share"] is not None:
        text += f"; gpu_memory_utilization {process['share']:g} ({_gib(process['share_bytes'])})"
    return text


def _gib(value: float) -> str:
    return f"{value / GiB:.1f} GiB"
