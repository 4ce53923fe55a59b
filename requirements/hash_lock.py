"""The locks with the sha256 of every file pip installs from them, so that `make install` and
`make lmms-eval` install exactly the files that were tested, or nothing.

    .venv/bin/python requirements/hash_lock.py          # resolve each lock on PyPI, write its hashed file
    .venv/bin/python requirements/hash_lock.py --check  # offline: each hashed file is its lock, hashed

Each lock (``name==version`` lines under ``#`` comments) stays as it is: `make install` also hands
requirements/cpu-lock.txt to pip as the constraints of the project's editable install, and pip turns a
``--hash`` in a constraints file into hash-checking mode for the whole install, which refuses an
editable project. Beside each lock, ``<lock>-hashed.txt`` carries the same pins with their hashes:
what the Makefile installs with ``--no-deps --require-hashes``.

The hashes are those of the files pip picks for this platform (CPython 3.11 on Linux x86-64, the
CPU stack's): pip's dry run (``--report``, metadata only, no download) resolves each pin on PyPI with
this machine's pip configuration left out (``--isolated``), and its report gives each file's sha256.
A file the report has no hash for is downloaded and hashed. Standard library only, so that the
Makefile's ``--check`` runs with any Python 3 before a virtual environment exists.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCKS = (ROOT / "requirements" / "cpu-lock.txt", ROOT / "requirements" / "lmms-eval-lock.txt")
INDEX = "https://pypi.org/simple"
PLATFORM = ("linux", "x86_64", (3, 11))
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


def render(lock: Path, comments: list[str], pins: list[tuple[str, str]], files: dict, pip: str) -> str:
    """The hashed file: the lock's comments, where it comes from, then each pin with its hash."""
    glibc = glibc_floor([entry["file"] for entry in files.values()])
    floor = f"Its wheels need glibc >= 2.{glibc}. " if glibc else ""
    lines = [
        *comments,
        "#",
        f"# requirements/{lock.name} with the sha256 of each file pip installs from it, written by",
        f"# `python requirements/hash_lock.py` (pip {pip}, {INDEX}, CPython 3.11, Linux x86-64).",
        f"# {floor}The Makefile installs this file with --require-hashes.",
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


def pip_command(lock: Path, report: Path) -> list[str]:
    # --isolated: this machine's pip configuration (extra indexes, find-links, constraints) stays out;
    # the hashes are those of the files PyPI serves for this platform.
    return [
        sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--quiet",
        "--dry-run", "--no-deps", "--ignore-installed", "--index-url", INDEX, "--report", str(report),
        "-r", str(lock),
    ]  # fmt: skip


def download_sha256(name: str, version: str, folder: Path) -> str:
    """The sha256 of the file pip downloads for ``name==version``, for one the report has no hash for."""
    target = folder / canonical(name)
    subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "download", "--quiet", "--no-deps", "--index-url", INDEX,
         "-d", str(target), f"{name}=={version}"],
        check=True, timeout=1800,
    )  # fmt: skip
    [file] = list(target.iterdir())
    return hashlib.sha256(file.read_bytes()).hexdigest()


def write_hashed(lock: Path) -> Path:
    comments, pins = parse_lock(lock.read_text())
    with tempfile.TemporaryDirectory() as folder:
        report_path = Path(folder) / "report.json"
        subprocess.run(pip_command(lock, report_path), check=True, timeout=1800)
        report = json.loads(report_path.read_text())
        files = files_from_report(report)
        for name, version in pins:
            entry = files[canonical(name)]
            if entry["sha256"] is None:
                print(f"{name}=={version}: no hash in pip's report, downloading it", file=sys.stderr)
                entry["sha256"] = download_sha256(name, version, Path(folder))
    target = hashed_path(lock)
    target.write_text(render(lock, comments, pins, files, report.get("pip_version", "?")))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="check the hashed files; no network")
    parser.add_argument("locks", nargs="*", type=Path, help="the locks (default: both)")
    args = parser.parse_args(argv)
    locks = [lock.resolve() for lock in args.locks] or list(LOCKS)
    if not args.check:
        here = (sys.platform, platform.machine(), sys.version_info[:2])
        if here != PLATFORM:
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
