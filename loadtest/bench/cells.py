"""How the tables of bench/RESULTS.md write a number: medians with their range, multiples, shares."""

from __future__ import annotations

from typing import Any


def cell(spread: dict[str, float], digits: int | None = None) -> str:
    """median [min–max], as recorded or rounded to ``digits``."""
    if digits is None:
        return f"{spread['median']} [{spread['min']}–{spread['max']}]"
    return f"{spread['median']:.{digits}f} [{spread['min']:.{digits}f}–{spread['max']:.{digits}f}]"


def percent_cell(spread: dict[str, float]) -> str:
    return f"{spread['median'] * 100:.1f}% [{spread['min'] * 100:.1f}–{spread['max'] * 100:.1f}]"


def median_range(spread: dict[str, float] | None) -> str:
    if not spread:
        return "–"
    return f"{spread['median']:g} [{spread['min']:g}–{spread['max']:g}]"


def percent(share: float | None, digits: int = 1) -> str:
    return "–" if share is None else f"{share * 100:.{digits}f}%"


def shares_text(shares: dict[str, Any], digits: int = 0) -> str:
    """route 12%, other 88%"""
    return ", ".join(f"{key} {value * 100:.{digits}f}%" for key, value in shares.items()) or "–"
