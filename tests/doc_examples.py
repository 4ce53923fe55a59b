"""The fenced code blocks of the docs, and how each example is marked to run.

Every block whose info string is bash, sh, shell, console or python is an *example* and carries, on
the line right before its opening fence, one of::

    <!-- example: unit -->              run by the unit tests: no server, no network, seconds
    <!-- example: server: expects <text> -->  run end to end against configs/mai-cpu.yaml on
                                        127.0.0.1:8000; what it prints must contain <text>, the
                                        answer the doc documents
    <!-- example: not-run: <reason> --> not run, and why

Blocks in other languages (yaml, json, text, none) are not examples. Pure: no imports of the project.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "python"})
KINDS = ("unit", "server", "not-run")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^<!--\s*example:\s*(?P<kind>[A-Za-z-]+)\s*(?::(?P<reason>.*?))?\s*-->$")


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, CONTRIBUTING.md and every markdown file under docs/."""
    files = [root / "README.md", root / "CONTRIBUTING.md"]
    return [path for path in files if path.exists()] + sorted((root / "docs").rglob("*.md"))


DOC_FILES = doc_files()


@dataclass(frozen=True)
class Block:
    file: Path
    line: int  # 1-based line of the opening fence
    language: str  # the info string's first word, lower case ("" when none)
    marker: str | None  # the marker's kind as written (unit, server, not-run, ...); None: no marker
    reason: str  # a not-run marker's reason ("" otherwise)
    code: str

    @property
    def is_example(self) -> bool:
        return self.language in EXAMPLE_LANGUAGES

    @property
    def id(self) -> str:
        try:
            name = self.file.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            name = str(self.file)
        return f"{name}:{self.line}"

    def problem(self) -> str | None:
        """Why this example's marker is not valid; None when it is (or the block is no example)."""
        if not self.is_example:
            return None
        if self.marker is None:
            return f"{self.id}: a {self.language} block with no <!-- example: ... --> line before it"
        if self.marker not in KINDS:
            return f"{self.id}: unknown example kind {self.marker!r} (one of {', '.join(KINDS)})"
        if self.marker == "not-run" and not self.reason:
            return f"{self.id}: a not-run example must say why (<!-- example: not-run: <reason> -->)"
        if self.marker == "server" and self.expected is None:
            return (
                f"{self.id}: a server example says what it prints (<!-- example: server: expects <text> -->)"
            )
        if self.marker == "unit" and self.reason:
            return f"{self.id}: a unit example takes no reason"
        return None

    @property
    def expected(self) -> str | None:
        """What a server example's output must contain: its marker's ``expects <text>``."""
        prefix = "expects "
        return self.reason[len(prefix) :] if self.reason.startswith(prefix) else None


def parse(text: str, file: Path = Path("<text>")) -> list[Block]:
    """Every fenced block of ``text`` (markdown), examples or not, in order."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        info = opening["info"].strip().split()
        marker = _MARKER.match(lines[i - 1].strip()) if i > 0 else None
        found.append(
            Block(
                file=file,
                line=i + 1,
                language=info[0].lower() if info else "",
                marker=marker["kind"] if marker else None,
                reason=(marker["reason"] or "").strip() if marker else "",
                code="\n".join(body) + "\n",
            )
        )
        i = j + 1
    return found


def blocks(path: Path | str) -> list[Block]:
    """The fenced blocks of the markdown file at ``path``."""
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), path)


def examples(paths: list[Path] | None = None) -> list[Block]:
    """Every example block (bash, sh, shell, console, python) of ``paths`` (default: DOC_FILES)."""
    return [block for path in paths or DOC_FILES for block in blocks(path) if block.is_example]
