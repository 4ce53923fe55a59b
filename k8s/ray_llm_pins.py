"""Ray's ``llm`` extra beside the stack the image runs, read from package metadata alone.

The image installs ``ray[serve]`` with vLLM 0.32.0 (pyproject.toml's gpu extra), not ``ray[llm]``, whose
metadata pins another vLLM. k8s/gpu_stack.py reports what ``ray[llm]`` would ask for next to what the gpu
extra resolved to, in its output and in requirements/gpu-resolution.json (``ray_llm_extra``), so that
the gap is stated and a new Ray or vLLM shows it changed. Each function is pure: requirement strings
(Ray's ``Requires-Dist``) and resolved versions in, rows out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

EXTRA = "llm"


def extra_requirements(requires_dist: Iterable[str], extra: str, environment: Mapping[str, str]) -> list[str]:
    """The requirements ``extra`` adds in ``environment`` (a marker environment): those whose marker
    holds with the extra and not without it, as written."""
    with_extra = {**environment, "extra": extra}
    without = {**environment, "extra": ""}
    added = []
    for text in requires_dist:
        marker = Requirement(text).marker
        if marker is not None and marker.evaluate(with_extra) and not marker.evaluate(without):
            added.append(text)
    return added


def beside_resolved(requirements: Iterable[str], resolved: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each requirement that names versions, with the version ``resolved`` holds for its package (None:
    not installed) and whether that version is one the requirement allows."""
    rows = []
    for text in requirements:
        requirement = Requirement(text)
        if not requirement.specifier:
            continue
        name = canonicalize_name(requirement.name)
        version = resolved.get(name)
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        rows.append(
            {
                "requirement": f"{requirement.name}{extras}{requirement.specifier}",
                "package": name,
                "pinned": any(spec.operator in ("==", "===") for spec in requirement.specifier),
                "resolved": version,
                "allowed": version is not None and requirement.specifier.contains(version, prereleases=True),
            }
        )
    return rows


def ray_llm_extra(
    ray_requires: Iterable[str], resolved: Mapping[str, str], environment: Mapping[str, str]
) -> dict[str, Any]:
    """The summary's ``ray_llm_extra``: Ray's version, what its llm extra adds on the image's platform,
    and each of those that names versions beside the resolved version."""
    requires = extra_requirements(ray_requires, EXTRA, environment)
    return {
        "ray": resolved.get("ray"),
        "requires": requires,
        "beside_resolved": beside_resolved(requires, resolved),
    }


def check_ray_llm_extra(summary: Mapping[str, Any]) -> list[str]:
    """The summary's ``ray_llm_extra`` is there, for the resolved Ray, and its rows are what its
    requirements and the resolved versions give."""
    block = summary.get("ray_llm_extra")
    if block is None:
        return ["the summary keeps no ray_llm_extra: run `python k8s/gpu_stack.py`"]
    ray = summary["packages"].get("ray")
    problems = []
    if block.get("ray") != ray:
        problems.append(f"ray_llm_extra is Ray {block.get('ray')}'s, the resolved Ray is {ray}")
    if block.get("beside_resolved") != beside_resolved(block.get("requires", []), summary["packages"]):
        problems.append("ray_llm_extra.beside_resolved is not what its requires and the packages give")
    return problems


def report_lines(block: Mapping[str, Any]) -> list[str]:
    """The report: each pin of the llm extra and each range the image is outside of, one a line, then
    the ranges the image is within."""
    head = f"ray[{EXTRA}] {block['ray']} asks for"
    lines = []
    within = []
    for row in block["beside_resolved"]:
        if row["pinned"] or not row["allowed"]:
            if row["resolved"] is None:
                lines.append(f"{head} {row['requirement']}; the image does not install {row['package']}")
            else:
                verdict = "allowed" if row["allowed"] else "not allowed"
                lines.append(f"{head} {row['requirement']}; the image has {row['resolved']}, {verdict}")
        else:
            within.append(row["requirement"])
    if within:
        lines.append(f"{head} {', '.join(within)}; the image's versions are within each")
    return lines
