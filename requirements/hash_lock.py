"""The locks with the sha256 of every file pip installs from them, so that `make install`, `make
lmms-eval` and the GPU image install exactly the files that were tested, or nothing.

    .venv/bin/python requirements/hash_lock.py          # resolve each lock on PyPI, write its hashed file
    .venv/bin/python requirements/hash_lock.py --check  # offline: each hashed file is its lock, hashed
    .venv/bin/python requirements/hash_lock.py --download DIR LOCK  # fetch its files, checking each hash

The locks: build-lock.txt (pip and the build backend, installed first everywhere), cpu-lock.txt (the CPU
stack) and dev-lock.txt (what the dev and eval extras add to it), lmms-eval-lock.txt (lmms-eval's
environment) and gpu-constraints.txt (the GPU image's stack, which k8s/gpu_stack.py writes from its
resolution and then hashes with this module).

Each lock (``name==version`` lines under ``#`` comments) stays as it is: `make install` also hands
requirements/cpu-lock.txt to pip as the constraints of the project's editable install, and pip turns a
``--hash`` in a constraints file into hash-checking mode for the whole install, which refuses an
editable project. Beside each lock, ``<lock>-hashed.txt`` carries the same pins with their hashes:
what the Makefile installs with ``--no-deps --require-hashes``.

The hashes are those of the files pip picks for the lock's target: this platform (CPython 3.11 on
Linux x86-64, the CPU stack's) for the Makefile's locks, and the GPU image's (CPython 3.11, wheels only,
manylinux up to glibc 2.35: ``IMAGE``) for gpu-constraints.txt, named to pip with ``--python-version``
and ``--platform``. pip's dry run (``--report``, metadata only, no download) resolves each pin on PyPI
with this machine's pip configuration left out (``--isolated``), and its report gives each file's
sha256, as PyPI's index publishes it. A file the report has no hash for is downloaded and hashed.
Standard library only, so that the Makefile's ``--check`` runs with any Python 3 before a virtual
environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements"
LOCKS = tuple(
    REQUIREMENTS / name
    for name in (
        "build-lock.txt",
        "cpu-lock.txt",
        "dev-lock.txt",
        "lmms-eval-lock.txt",
        "gpu-constraints.txt",
    )
)
INDEX = "https://pypi.org/simple"
PLATFORM = ("linux", "x86_64", (3, 11))


@dataclass(frozen=True)
class LockTarget:
    """Where a lock's files are installed, which decides the file pip picks for each pin: ``platforms``
    are pip's ``--platform`` tags, best first (empty: this machine's own, which must be ``PLATFORM``)."""

    label: str  # for the hashed file's header
    installed_by: str  # who installs the hashed file, for its header
    python: str = "3.11"
    platforms: tuple[str, ...] = ()


# The GPU image (k8s/Dockerfile): Ray's CUDA images are Ubuntu 22.04, glibc 2.35, so a wheel tagged up to
# manylinux_2_35 installs there; wheels only. k8s/gpu_stack.py resolves the gpu extra for the same tags.
IMAGE_GLIBC_MINOR = 35
IMAGE_PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(IMAGE_GLIBC_MINOR, 4, -1)) + (
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
LOCAL = LockTarget("CPython 3.11, Linux x86-64", "The Makefile installs")
IMAGE = LockTarget(
    "CPython 3.11, wheels for manylinux_2_35_x86_64", "k8s/Dockerfile installs", "3.11", IMAGE_PLATFORMS
)
TARGETS = {
    "build-lock.txt": LockTarget(LOCAL.label, "The Makefile and k8s/Dockerfile install"),
    "gpu-constraints.txt": IMAGE,
}


def target_of(lock: Path) -> LockTarget:
    return TARGETS.get(lock.name, LOCAL)


_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)$")
_HASH = re.compile(r"--hash=sha256:(?P<hex>[0-9a-f]{64})\b")
_GLIBC = re.compile(r"^manylinux_2_(\d+)_|^manylinux(2014|2010|1)_")
_LEGACY_GLIBC = {"2014": 17, "2010": 12, "1": 5}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def hashed_path(lock: Path) -> Path:
    return lock.with_name(f"{lock.stem}-hashed.txt")


def parse_lock(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A lock's ``#`` comment lines and its pins (name as written, version), in order."""
    comments, pins = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            comments.append(line)
        elif line.strip():
            match = _PIN.match(line.strip())
            if match is None:
                raise ValueError(f"line {number}: {line!r} is not name==version")
            pins.append((match["name"], match["version"]))
    return comments, pins


def parse_hashed(text: str) -> dict[str, tuple[str, list[str]]]:
    """A hashed file's pins: canonical name -> (version, sha256 hex digests); continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in joined.splitlines():
        if line.strip() and not line.startswith("#"):
            requirement, _, options = line.strip().partition(" ")
            name, _, version = requirement.partition("==")
            pins[canonical(name)] = (version, [match["hex"] for match in _HASH.finditer(options)])
    return pins


def files_from_report(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """pip's report -> canonical name -> {version, file, url, sha256 (None: the report has none)}."""
    files = {}
    for item in report["install"]:
        info = item["download_info"]
        hashes = info.get("archive_info", {}).get("hashes", {})
        files[canonical(item["metadata"]["name"])] = {
            "version": item["metadata"]["version"],
            "file": info["url"].rsplit("/", 1)[-1].split("#")[0],
            "url": info["url"],
            "sha256": hashes.get("sha256"),
        }
    return files


def glibc_floor(filenames: list[str]) -> int | None:
    """The newest glibc minor any of these wheels needs (a wheel needs the oldest its tags name)."""
    floors = []
    for filename in filenames:
        if filename.endswith(".whl"):
            minors = []
            for tag in filename[:-4].split("-")[-1].split("."):
                if match := _GLIBC.match(tag):
                    minors.append(int(match[1]) if match[1] else _LEGACY_GLIBC[match[2]])
            if minors:
                floors.append(min(minors))
    return max(floors) if floors else None


def render(
    lock: Path,
    comments: list[str],
    pins: list[tuple[str, str]],
    files: dict,
    pip: str,
    target: LockTarget = LOCAL,
) -> str:
    """The hashed file: the lock's comments, where it comes from, then each pin with its hash."""
    glibc = glibc_floor([entry["file"] for entry in files.values()])
    floor = f"Its wheels need glibc >= 2.{glibc}. " if glibc else ""
    lines = [
        *comments,
        "#",
        f"# requirements/{lock.name} with the sha256 of each file pip installs from it, written by",
        f"# `python requirements/hash_lock.py` (pip {pip}, {INDEX}, {target.label}).",
        f"# {floor}{target.installed_by} this file with --require-hashes.",
        "# Do not edit: change the lock, then run the script.",
    ]
    for name, version in pins:
        entry = files[canonical(name)]
        if entry["version"] != version:
            raise ValueError(f"{name}=={version} resolved to {entry['version']}")
        lines += [f"{name}=={version} \\", f"    --hash=sha256:{entry['sha256']}"]
    return "\n".join(lines) + "\n"


def check(lock_text: str, hashed_text: str, lock_name: str) -> list[str]:
    """Why the hashed file is not its lock, hashed; [] when it is."""
    comments, pins = parse_lock(lock_text)
    hashed = parse_hashed(hashed_text)
    fix = f"run `python requirements/hash_lock.py` ({lock_name})"
    problems = []
    if hashed_text.splitlines()[: len(comments)] != comments:
        problems.append(f"its header is not {lock_name}'s comments: {fix}")
    wanted = {canonical(name): version for name, version in pins}
    for name, version in wanted.items():
        if name not in hashed:
            problems.append(f"{name}=={version} has no line: {fix}")
        elif hashed[name][0] != version:
            problems.append(f"{name} is {hashed[name][0]}, the lock pins {version}: {fix}")
        elif not hashed[name][1]:
            problems.append(f"{name}=={version} has no --hash=sha256: {fix}")
    problems += [f"{name} is not in {lock_name}: {fix}" for name in sorted(set(hashed) - set(wanted))]
    return problems


def target_options(target: LockTarget) -> list[str]:
    """pip's options for a target other than this machine: its Python and platform tags, wheels only."""
    if not target.platforms:
        return []
    platforms = [option for platform in target.platforms for option in ("--platform", platform)]
    return ["--only-binary=:all:", "--python-version", target.python, *platforms]


def pip_command(lock: Path, report: Path, target: LockTarget = LOCAL) -> list[str]:
    # --isolated: this machine's pip configuration (extra indexes, find-links, constraints) stays out;
    # the hashes are those of the files PyPI serves for the target's platform.
    return [
        sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--quiet",
        "--dry-run", "--no-deps", "--ignore-installed", "--index-url", INDEX, *target_options(target),
        "--report", str(report), "-r", str(lock),
    ]  # fmt: skip


def download_sha256(name: str, version: str, folder: Path, target: LockTarget = LOCAL) -> str:
    """The sha256 of the file pip downloads for ``name==version``, for one the report has no hash for."""
    where = folder / canonical(name)
    subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "download", "--quiet", "--no-deps", "--index-url", INDEX,
         *target_options(target), "-d", str(where), f"{name}=={version}"],
        check=True, timeout=1800,
    )  # fmt: skip
    [file] = list(where.iterdir())
    return hashlib.sha256(file.read_bytes()).hexdigest()


def download_command(lock: Path, folder: Path, target: LockTarget = LOCAL) -> list[str]:
    """pip downloading every file of ``lock``'s hashed file for its target, refusing one whose sha256
    is not the hashed file's (--require-hashes): the check of the hashes against the real files."""
    return [
        sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "download", "--quiet",
        "--no-deps", "--require-hashes", "--index-url", INDEX, *target_options(target), "-d", str(folder),
        "-r", str(hashed_path(lock)),
    ]  # fmt: skip


def write_hashed(lock: Path) -> Path:
    comments, pins = parse_lock(lock.read_text())
    target = target_of(lock)
    with tempfile.TemporaryDirectory() as folder:
        report_path = Path(folder) / "report.json"
        subprocess.run(pip_command(lock, report_path, target), check=True, timeout=1800)
        report = json.loads(report_path.read_text())
        files = files_from_report(report)
        for name, version in pins:
            entry = files[canonical(name)]
            if entry["sha256"] is None:
                print(f"{name}=={version}: no hash in pip's report, downloading it", file=sys.stderr)
                entry["sha256"] = download_sha256(name, version, Path(folder), target)
    hashed = hashed_path(lock)
    hashed.write_text(render(lock, comments, pins, files, report.get("pip_version", "?"), target))
    return hashed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="check the hashed files; no network")
    mode.add_argument(
        "--download",
        type=Path,
        metavar="DIR",
        help="download each lock's files into DIR, checking every hash",
    )
    parser.add_argument("locks", nargs="*", type=Path, help="the locks (default: all of LOCKS)")
    args = parser.parse_args(argv)
    locks = [lock.resolve() for lock in args.locks] or list(LOCKS)
    if args.download:
        for lock in locks:
            subprocess.run(download_command(lock, args.download / lock.stem, target_of(lock)), check=True)
            print(f"{hashed_path(lock).name}: every file matches its sha256", file=sys.stderr)
        return 0
    if not args.check:
        here = (sys.platform, platform.machine(), sys.version_info[:2])
        if here != PLATFORM and any(not target_of(lock).platforms for lock in locks):
            print(f"hash_lock: hashes are for CPython 3.11 on Linux x86-64, this is {here}", file=sys.stderr)
            return 2
        for lock in locks:
            print(f"wrote {write_hashed(lock).relative_to(ROOT)}", file=sys.stderr)
    problems = []
    for lock in locks:
        hashed = hashed_path(lock)
        if not hashed.exists():
            problems.append(f"{hashed.name}: missing: run `python requirements/hash_lock.py`")
            continue
        problems += [f"{hashed.name}: {p}" for p in check(lock.read_text(), hashed.read_text(), lock.name)]
    for problem in problems:
        print(f"hash_lock: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
