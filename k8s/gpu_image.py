"""What the serving image is built from and with, beside k8s/gpu_stack.py's checks of the stack.

- The base image: k8s/Dockerfile's one FROM line, with the build arguments it names set to their
  defaults (``ARG RAY_DIGEST=`` before it: ``docker build --build-arg RAY_DIGEST=@sha256:<digest>``
  pins the base image by digest), read as ``<image>:<tag>`` and an optional ``@sha256:`` digest.
- The constraints: requirements/gpu-constraints.txt, ``name==version`` for every package of the
  committed resolution (requirements/gpu-resolution.json), which the Dockerfile hands to pip with
  ``-c`` when it installs the gpu extra, so that the image installs the versions that were resolved
  and checked. No hashes: a ``--hash`` in a constraints file turns on pip's hash-checking mode for the
  whole install, and that mode refuses the project's editable install (``-e '.[gpu]'``).

Each function is pure: texts in, texts or problems out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

CONSTRAINTS_PATH = "requirements/gpu-constraints.txt"
_ARG = re.compile(r"^ARG\s+(?P<name>\w+)(?:=(?P<default>\S*))?\s*$")
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def build_args(dockerfile: str) -> dict[str, str]:
    """The ARG lines before the first FROM (those a FROM line may use): name -> default ('' if none)."""
    defaults = {}
    for line in dockerfile.splitlines():
        if re.match(r"^FROM\s", line):
            break
        if match := _ARG.match(line):
            defaults[match["name"]] = (match["default"] or "").strip("\"'")
    return defaults


def expand(reference: str, dockerfile: str) -> str:
    """A FROM reference with ``${NAME}`` / ``$NAME`` set to the build arguments' defaults, as
    ``docker build`` without --build-arg would."""
    defaults = build_args(dockerfile)
    return _VARIABLE.sub(lambda match: defaults.get(match[1] or match[2], ""), reference)


def split_digest(reference: str) -> tuple[str, str | None]:
    """``image:tag@sha256:...`` -> (``image:tag``, ``sha256:...``); (reference, None) without a digest."""
    image, at, digest = reference.partition("@")
    if not at:
        return reference, None
    if not _DIGEST.match(digest):
        raise ValueError(f"k8s/Dockerfile: FROM {reference}: {digest!r} is not a sha256:<64 hex> digest")
    return image, digest


def constraints_text(summary: Mapping[str, Any]) -> str:
    """requirements/gpu-constraints.txt as the resolution ``summary`` gives it."""
    platform = (summary.get("platforms") or ["linux_x86_64"])[0]
    header = [
        "# The gpu extra's whole resolution (requirements/gpu-resolution.json: PyPI, pip "
        f"{summary.get('pip')}, Python {summary['python']},",
        f"# {platform}) as pip constraints: k8s/Dockerfile installs '.[gpu]' with",
        "# `-c requirements/gpu-constraints.txt`, so the image gets the versions resolved and checked.",
        "# Written by `python k8s/gpu_stack.py` with the resolution: do not edit. No hashes: a hash in a",
        "# constraints file turns on pip's hash-checking mode, which refuses the project's editable install.",
    ]
    pins = [f"{name}=={version}" for name, version in sorted(summary["packages"].items())]
    return "\n".join(header + pins) + "\n"


def constraint_pins(text: str) -> dict[str, str]:
    """name -> version of a constraints file's ``name==version`` lines."""
    pins = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.strip().partition("==")
            pins[name] = version
    return pins


def check_constraints(summary: Mapping[str, Any], text: str | None) -> list[str]:
    fix = "run `python k8s/gpu_stack.py` (it writes both from one resolution)"
    if text is None:
        return [f"{CONSTRAINTS_PATH} is missing: {fix}"]
    if text == constraints_text(summary):
        return []
    pins, packages = constraint_pins(text), dict(summary["packages"])
    differ = sorted(name for name in set(pins) | set(packages) if pins.get(name) != packages.get(name))
    shown = ", ".join(f"{name} {pins.get(name)} (resolved: {packages.get(name)})" for name in differ[:5])
    return [f"{CONSTRAINTS_PATH} is not the resolution's packages ({shown or 'its header'}): {fix}"]


def check_image_install(dockerfile: str) -> list[str]:
    """The Dockerfile copies the constraints into the image, then installs the gpu extra with them."""
    copy = re.search(
        rf"^COPY\s.*\s(?:{re.escape(CONSTRAINTS_PATH)}|requirements/?)\s+\S+\s*$", dockerfile, re.M
    )
    install = re.search(r"^RUN\s.*\bpip install\b.*'\.\[gpu\]'.*$", dockerfile, re.M)
    problems = []
    if install is None:
        return ["k8s/Dockerfile does not `pip install ... '.[gpu]'`"]
    if f"-c {CONSTRAINTS_PATH}" not in install[0]:
        problems.append(f"k8s/Dockerfile installs the gpu extra without -c {CONSTRAINTS_PATH}: {install[0]}")
    if copy is None or copy.start() > install.start():
        problems.append(f"k8s/Dockerfile does not COPY {CONSTRAINTS_PATH} into the image before installing")
    return problems
