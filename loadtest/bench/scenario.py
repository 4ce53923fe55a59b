"""A scenario as data: its name, the section of bench/RESULTS.md it fills, the result file it writes,
the config it deploys, its parameters (a frozen dataclass of defaults), its run and its table.

A section whose file another command writes (the fault drills, the fuzzer, mai-eval's audit check, the
Ray-log reader) is a scenario without a run: rendered here, made by the command it names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.paths import RESULTS


@dataclass
class Bench:
    """What a scenario's run is given: the server's URL, the config it serves or is to serve (under
    configs/; None: the scenario's own), whether that server already serves it (``served``: deploy
    nothing), and the emulated datasets' records (the scripted questions every emulated scenario
    sends), built on first use."""

    url: str
    config: str | None = None
    served: bool = False

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        from harness.datasets import ensure_datasets
        from harness.jsonl import read_jsonl

        return [record for path in ensure_datasets().values() for record in read_jsonl(path)]


@dataclass(frozen=True)
class NoParameters:
    """For a scenario that takes none."""


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    result: str  # the file under bench/results
    table: Callable[[dict[str, Any]], list[str]]
    config: str | None = None  # the config under configs/ it deploys, named in the result's meta
    run: Callable[[Bench, Any], dict[str, Any]] | None = None
    parameters: Any = NoParameters()
    command: str | None = None  # the command that writes the file, for a scenario without a run
    # Whether its run serves ``Bench.config`` (or a server already serving it), so that it takes
    # ``--config`` and ``--url``; the others deploy their own config.
    takes_config: bool = False
    # Whether its run needs the local Ray; one that does not runs before Ray starts, so that no Ray
    # thread shares its process (a simulation timing its own CPU, a reader of another run's logs).
    needs_ray: bool = True
    # Whether a run of every scenario (no ``--only``) includes it; one that reads what another run
    # left (a Ray session's logs) runs only when named.
    in_full_run: bool = True
    # A variant of a family (one scenario whose ``variant`` parameter picks what it runs, each variant
    # its own run, file and table), named by ``--param variant=<it>``.
    variant: str | None = None
    # A family: its variants (``variant`` set on each), every one of them run unless ``variant`` picks
    # some; its own title, result and table are its first variant's.
    variants: tuple[Scenario, ...] = ()

    @property
    def path(self) -> Path:
        return RESULTS / self.result

    @property
    def runnable(self) -> bool:
        return self.run is not None

    def rerun(self) -> str:
        """The command that (re)makes this scenario's result."""
        picked = f" --param variant={self.variant}" if self.variant else ""
        return self.command or f"python -m loadtest.bench --only {self.name}{picked}"

    def accepts(self, key: str) -> bool:
        if self.variants:
            return key == "variant" or any(one.accepts(key) for one in self.variants)
        return key in {field.name for field in dataclasses.fields(self.parameters)}

    def each(self, overrides: Mapping[str, str] = {}) -> tuple[Scenario, ...]:
        """What runs of it: itself, or the variants of a family that ``variant`` (comma-separated) picks."""
        if not self.variants:
            return (self,)
        if "variant" not in overrides:
            return self.variants
        names = [name.strip() for name in overrides["variant"].split(",")]
        known = {str(one.variant): one for one in self.variants}
        if unknown := [name for name in names if name not in known]:
            raise ValueError(f"--param variant={','.join(unknown)}: {self.name} has {', '.join(known)}")
        return tuple(known[name] for name in names)

    def configured(self, overrides: Mapping[str, str]) -> Any:
        """The parameters with the ``overrides`` this scenario has, each parsed as its default's type
        (a family: its variants' own, checked)."""
        if self.variants:
            return [one.configured(overrides) for one in self.each(overrides)]
        changes = {}
        for key, text in overrides.items():
            if self.accepts(key):
                changes[key] = parse_like(getattr(self.parameters, key), key, text)
        return dataclasses.replace(self.parameters, **changes)


def family(name: str, *variants: Scenario) -> Scenario:
    """One scenario of ``variants`` (each a scenario of its own, named by its ``variant``)."""
    named = tuple(dataclasses.replace(one, name=name) for one in variants)
    return dataclasses.replace(named[0], variant=None, variants=named)


def module_family(name: str, *variants: tuple[Any, str, str, str]) -> Scenario:
    """A ``family`` whose variants are modules (``run``, ``table``, ``Parameters``), each given with its
    title, result file and config; a variant is named by its module."""
    return family(
        name,
        *(
            Scenario(
                name=name,
                variant=module.__name__.rpartition(".")[2],
                title=title,
                result=result,
                config=config,
                run=module.run,
                table=module.table,
                parameters=module.Parameters(),
            )
            for module, title, result, config in variants
        ),
    )


def parse_like(default: Any, key: str, text: str) -> Any:
    """``text`` as a value of ``default``'s type (int, float, bool or str; a tuple as comma-separated
    values of its first item's type, ``none`` for None)."""
    if isinstance(default, tuple):
        like = next((item for item in default if item is not None), "")
        return tuple(
            None if part.strip().lower() == "none" else parse_like(like, key, part.strip())
            for part in text.split(",")
        )
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[type(default)]
        raise ValueError(f"--param {key}={text}: expected {kind}") from None
    return text
