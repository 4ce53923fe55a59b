"""A job's input as the files it is read from: one JSONL file, a folder of JSONL shards, or a glob of
them, on the local disk or any filesystem pyarrow reads (``file://``, ``s3://``, ``gs://``, ``hdfs://``).

Shards are read in the order of their paths, and a row's number counts on across them: the first
shard's lines are 1 to n, the next one's n + 1 on (blank lines counted, as in one file). So a row
keeps its number, and a rerun finds what it answered, as long as the set of shards stays the same.
A folder's shards are its files ending ``.jsonl`` (not its subfolders'); a glob's are the files it
matches (``*``, ``?`` and ``[...]`` within one folder level; ``**`` any depth).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SHARD_SUFFIX = ".jsonl"
_GLOB = frozenset("*?[")


class NoInputError(FileNotFoundError):
    """An input that names no file: a missing path, a folder without shards, a glob matching none.
    Its message says what is wrong with the input, which the caller names."""


@dataclass(frozen=True)
class Shards:
    """The input's files, sorted, on one filesystem (``paths`` as that filesystem names them)."""

    source: str  # as the command line gave it
    filesystem: Any  # a pyarrow.fs.FileSystem
    paths: tuple[str, ...]
    base: str  # the file's folder, the folder, or a glob's folder before its first pattern

    def open(self, path: str) -> Any:
        """One shard as a stream; ``OSError`` naming it when it cannot be read."""
        try:
            return self.filesystem.open_input_stream(path)
        except OSError as exc:
            raise OSError(f"cannot read the input shard {path}: {exc}") from exc

    def folder(self) -> str:
        """Where a record's relative image path is read from: the input's folder (``base``) on the local
        disk; the working folder for an input elsewhere, whose images a record names otherwise."""
        return self.base if self.source.startswith("file://") or "://" not in self.source else "."

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)


def shards_of(source: str) -> Shards:
    """The shards ``source`` names; ``NoInputError`` when it names none, ``OSError`` when its
    filesystem cannot be reached."""
    from pyarrow import fs

    local = "://" not in source
    path = os.path.abspath(source) if local else source
    if _is_glob(path):  # the folder before the first pattern, then the pattern's parts
        first = min(path.index(char) for char in _GLOB if char in path)
        cut = path.rfind("/", 0, first)
        fixed, pattern = path[:cut] or "/", path[cut + 1 :].split("/")
    else:
        fixed, pattern = path, []
    filesystem, inner = (fs.LocalFileSystem(), fixed) if local else fs.FileSystem.from_uri(fixed)
    if pattern:
        paths = _matches(filesystem, inner, pattern)
        if not paths:
            raise NoInputError("matches no file")
        return Shards(source, filesystem, tuple(paths), inner)
    info = filesystem.get_file_info(inner)
    if info.type == fs.FileType.Directory:
        selector = fs.FileSelector(inner, recursive=False)
        paths = sorted(
            entry.path
            for entry in filesystem.get_file_info(selector)
            if entry.type == fs.FileType.File and entry.path.endswith(SHARD_SUFFIX)
        )
        if not paths:
            raise NoInputError(f"is a folder with no {SHARD_SUFFIX} file")
        return Shards(source, filesystem, tuple(paths), inner)
    if info.type == fs.FileType.NotFound:
        raise NoInputError("no such file or folder")
    return Shards(source, filesystem, (inner,), inner.rpartition("/")[0] or "/")


def _is_glob(path: str) -> bool:
    return any(char in _GLOB for char in path)


def _matches(filesystem: Any, base: str, pattern: list[str]) -> list[str]:
    """The files under the folder ``base`` whose path below it matches the glob parts ``pattern``,
    sorted."""
    from pyarrow import fs

    deep = "**" in pattern or len(pattern) > 1
    selector = fs.FileSelector(base, recursive=deep, allow_not_found=True)
    found = []
    for entry in filesystem.get_file_info(selector):
        relative = entry.path[len(base) :].lstrip("/").split("/")
        if entry.type == fs.FileType.File and _match_parts(relative, pattern):
            found.append(entry.path)
    return sorted(found)


def _match_parts(names: list[str], patterns: list[str]) -> bool:
    """Whether the path parts ``names`` match the glob parts ``patterns`` (``**``: any parts)."""
    if not patterns:
        return not names
    head, *tail = patterns
    if head == "**":
        return any(_match_parts(names[skip:], tail) for skip in range(len(names) + 1))
    return bool(names) and fnmatch.fnmatchcase(names[0], head) and _match_parts(names[1:], tail)
