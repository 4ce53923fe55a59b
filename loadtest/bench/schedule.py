"""The one interleaving every scenario uses: what a scenario compares runs in an order rotated by one
from one repetition to the next, so that drift on a noisy machine falls on every arm alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

Arm = TypeVar("Arm")


def rotated(arms: Sequence[Arm], shift: int) -> list[Arm]:
    """``arms`` rotated left by ``shift`` (modulo their number)."""
    if not arms:
        return []
    shift %= len(arms)
    return [*arms[shift:], *arms[:shift]]


def run_order(
    arms: Sequence[Arm], concurrencies: Sequence[int], repetitions: int
) -> list[tuple[int, int, Arm]]:
    """(repetition, concurrency, arm) in the order they run: within a repetition each concurrency runs
    every arm once, the arms' order rotated by one from one repetition to the next."""
    return [
        (repetition, concurrency, arm)
        for repetition in range(repetitions)
        for concurrency in concurrencies
        for arm in rotated(arms, repetition)
    ]
