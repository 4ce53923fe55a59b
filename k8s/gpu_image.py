"""What the serving image is built from and with, beside k8s/gpu_stack.py's checks of the stack.

- The base image: k8s/Dockerfile's one FROM line, with the build arguments it names set to their
  defaults (``ARG RAY_DIGEST=`` before it: ``docker build --build-arg RAY_DIGEST=@sha256:<digest>``
  pins the base image by digest), read as ``<image>:<tag>`` and an optional ``@sha256:`` digest.
- The lock: requirements/gpu-constraints.txt, ``name==version`` for every package of the committed
  resolution (requirements/gpu-resolution.json), and beside it requirements/gpu-constraints-hashed.txt,
  the same pins with the sha256 of the file pip installs for each on the image's platform
  (requirements/hash_lock.py writes it). The image installs, in this order and nothing else:
  requirements/build-lock-hashed.txt (pip, setuptools) and the hashed GPU lock, each with ``--no-deps
  --require-hashes``, then the project's editable install with ``--no-index --no-build-isolation`` and
  the hash-free lock as constraints, which installs the project alone (a requirement of the gpu extra
  that the lock lacks fails the build instead of being fetched unhashed). The constraints stay
  hash-free: a ``--hash`` in a constraints file turns on pip's hash-checking mode for the whole
  install, and that mode refuses an editable install (``-e '.[gpu]'``).

Each function is pure: texts in, texts or problems out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

CONSTRAINTS_PATH = "requirements/gpu-constraints.txt"
HASHED_PATH = "requirements/gpu-constraints-hashed.txt"  # hash_lock.hashed_path of the constraints
BUILD_HASHED_PATH = "requirements/build-lock-hashed.txt"
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
        f"# {platform}): k8s/Dockerfile installs these pins from {HASHED_PATH}",
        "# (each file's sha256, --no-deps --require-hashes), then '.[gpu]' with --no-index and",
        "# `-c requirements/gpu-constraints.txt`, so the image gets the files resolved and checked.",
        "# Written by `python k8s/gpu_stack.py` with the resolution and its hashed twin: do not edit. No",
        "# hashes here: a hash in a constraints file turns on pip's hash-checking mode, which refuses the",
        "# project's editable install.",
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


def _pip_installs(dockerfile: str) -> list[tuple[int, str]]:
    """(offset, the whole RUN instruction, continuation lines joined) of each RUN that runs pip install."""
    runs = []
    for match in re.finditer(r"^RUN\s(?:[^\n]*\\\n)*[^\n]*$", dockerfile, re.M):
        text = re.sub(r"\\\n\s*", " ", match[0])
        if re.search(r"\bpip install\b", text):
            runs.append((match.start(), text))
    return runs


def _copied_at(dockerfile: str, path: str) -> int | None:
    """The offset of the first COPY that brings ``path`` into the image (by name, or its folder)."""
    folder = path.rsplit("/", 1)[0]
    for match in re.finditer(r"^COPY\s[^\n]*$", dockerfile, re.M):
        sources = match[0].split()[1:-1]
        if path in sources or folder in sources or f"{folder}/" in sources:
            return match.start()
    return None


def check_image_install(dockerfile: str) -> list[str]:
    """The Dockerfile installs pip and setuptools, then the GPU lock, each from its hashed file with
    --no-deps --require-hashes, then the gpu extra with --no-index (nothing fetched), --no-build-isolation
    (built with the setuptools just installed) and the hash-free lock as constraints; each file is
    copied into the image before it is used, and nothing else is installed with pip."""
    runs = _pip_installs(dockerfile)
    hashed = {
        path: next((at for at, text in runs if f"-r {path}" in text), None)
        for path in (BUILD_HASHED_PATH, HASHED_PATH)
    }
    extra = next(((at, text) for at, text in runs if "'.[gpu]'" in text), None)
    if extra is None:
        return ["k8s/Dockerfile does not `pip install ... '.[gpu]'`"]
    problems = []
    for path, at in hashed.items():
        text = next((text for start, text in runs if start == at), "")
        if at is None:
            problems.append(f"k8s/Dockerfile does not install -r {path}")
        elif "--no-deps" not in text.split() or "--require-hashes" not in text.split():
            problems.append(f"k8s/Dockerfile installs {path} without --no-deps --require-hashes: {text}")
        elif at > extra[0]:
            problems.append(f"k8s/Dockerfile installs {path} after the gpu extra")
    build, gpu = hashed[BUILD_HASHED_PATH], hashed[HASHED_PATH]
    if build is not None and gpu is not None and build > gpu:
        problems.append(
            f"k8s/Dockerfile installs {HASHED_PATH} before pip and setuptools ({BUILD_HASHED_PATH})"
        )
    for flag in ("--no-index", "--no-build-isolation", f"-c {CONSTRAINTS_PATH}"):
        if flag not in extra[1]:
            problems.append(f"k8s/Dockerfile installs the gpu extra without {flag}: {extra[1]}")
    uses = {BUILD_HASHED_PATH: build, HASHED_PATH: gpu, CONSTRAINTS_PATH: extra[0]}
    for path, used in uses.items():
        copied = _copied_at(dockerfile, path)
        if used is not None and (copied is None or copied > used):
            problems.append(f"k8s/Dockerfile does not COPY {path} into the image before installing")
    known = {at for at in (build, gpu, extra[0]) if at is not None}
    problems += [
        f"k8s/Dockerfile installs what no hashed file names: {text}" for at, text in runs if at not in known
    ]
    return problems
