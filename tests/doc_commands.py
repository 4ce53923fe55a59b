"""The shell commands the docs and the result files name, split into simple commands of words.

Where commands are: the shell blocks of the docs (bash, sh, shell; a console block's ``$ `` lines),
whatever their example marker; the code spans of the docs' prose whose first word is a command
(``python -m ...``, ``make ...``, a console script, an executable of the environment, a tool such as
``kubectl``); and a result file's ``meta.command``. A command is split as a shell splits it: quotes
taken off, comments and line continuations dropped, ``&&``, ``||``, ``|``, ``;``, ``&`` and new lines
between commands; a ``$(...)`` stays in its word and is a command of its own too; what a redirection
names is left out. Pure: no imports of the project.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.doc_examples import DOC_FILES, ROOT, blocks

SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console"})
# Where result files with a meta.command live.
RESULT_ROOTS = (ROOT / "bench" / "results", ROOT / "experiments")
# A run's inputs beside its results (mai-eval's dataset manifest and run record), not results.
RESULT_INPUTS = frozenset({"manifest.json", "run.json"})

_FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.S | re.M)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
# A code span's first word that makes it a command, besides the names ``command_heads`` adds.
_PLACEHOLDER = re.compile(r"<[A-Za-z][\w .:/-]*>")
_PATH_HEAD = re.compile(r"^\.?[\w.-]*/[\w./-]*bin/\w[\w.-]*$")


@dataclass(frozen=True)
class Command:
    where: str  # README.md:16, or bench/results/x.json: meta.command
    words: tuple[str, ...]
    inline: bool = False  # a code span of the prose, not a line of a shell block

    @property
    def text(self) -> str:
        return " ".join(self.words)


def split_script(script: str, first_line: int = 1) -> list[tuple[int, list[str]]]:
    """The simple commands of ``script``, each with the line it starts on (counted from
    ``first_line``) and its words."""
    found: list[tuple[int, list[str]]] = []
    _Splitter(script, first_line, found).run()
    return [(line, words) for line, words in found if words]


class _Splitter:
    def __init__(self, text: str, first_line: int, out: list[tuple[int, list[str]]]):
        self.text, self.i, self.line, self.out = text, 0, first_line, out
        self.words: list[str] = []
        self.word: list[str] | None = None
        self.start = first_line
        self.redirected = False

    def run(self) -> None:
        text = self.text
        while self.i < len(text):
            char = text[self.i]
            if char == "\\" and text.startswith("\\\n", self.i):
                self.i += 2
                self.line += 1
            elif char == "\\":
                self._add(text[self.i + 1 : self.i + 2])
                self.i += 2
            elif char == "'":
                end = text.find("'", self.i + 1)
                end = len(text) if end < 0 else end
                self._add(text[self.i + 1 : end])
                self.line += text.count("\n", self.i, end)
                self.i = end + 1
            elif char == '"':
                self._double_quoted()
            elif text.startswith(("$(", "${"), self.i):
                self._expansion()
            elif char == "#" and self.word is None:
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
            elif char in " \t":
                self._end_word()
                self.i += 1
            elif char == "\n":
                self._end_command()
                self.line += 1
                self.i += 1
            elif char in ";&|":
                self._end_command()
                self.i += 2 if text[self.i : self.i + 2] in ("&&", "||", ";;") else 1
            elif char == "<" and (placeholder := _PLACEHOLDER.match(text, self.i)):
                self._add(placeholder.group(0))  # <HOST>, <digest>: a word to fill in, no redirection
                self.i = placeholder.end()
            elif char in "<>":
                if self.word is not None and "".join(self.word).isdigit():
                    self.word = None  # 2> : the descriptor is no word
                self._end_word()
                self.i += 2 if text[self.i : self.i + 2] in (">>", ">&") else 1
                self.redirected = True
            else:
                self._add(char)
                self.i += 1
        self._end_command()

    def _add(self, chars: str) -> None:
        if self.word is None:
            self.word = []
            if not self.words:
                self.start = self.line
        self.word.append(chars)

    def _double_quoted(self) -> None:
        text, j = self.text, self.i + 1
        chars = []
        while j < len(text) and text[j] != '"':
            if text[j] == "\\" and j + 1 < len(text):
                chars.append(text[j + 1])
                j += 2
                continue
            if text.startswith("$(", j):
                end = _matching(text, j + 1)
                self._nested(text[j + 2 : end])
                chars.append(text[j : end + 1])
                j = end + 1
                continue
            chars.append(text[j])
            j += 1
        self._add("".join(chars))
        self.line += text.count("\n", self.i, j)
        self.i = j + 1

    def _expansion(self) -> None:
        text = self.text
        end = _matching(text, self.i + 1)
        if text[self.i + 1] == "(":
            self._nested(text[self.i + 2 : end])
        self._add(text[self.i : end + 1])
        self.line += text.count("\n", self.i, end)
        self.i = end + 1

    def _nested(self, script: str) -> None:
        _Splitter(script, self.line, self.out).run()

    def _end_word(self) -> None:
        if self.word is not None:
            if self.redirected:
                self.redirected = False  # what a redirection names is no argument
            else:
                self.words.append("".join(self.word))
            self.word = None

    def _end_command(self) -> None:
        self._end_word()
        self.redirected = False
        if self.words:
            self.out.append((self.start, self.words))
        self.words = []


def _matching(text: str, open_at: int) -> int:
    """The index of the bracket closing the one at ``open_at`` (``(`` or ``{``), quotes respected."""
    pairs = {"(": ")", "{": "}"}
    opening, closing = text[open_at], pairs[text[open_at]]
    depth, j, quote = 0, open_at, None
    while j < len(text):
        char = text[j]
        if quote:
            if char == quote:
                quote = None
            elif char == "\\" and quote == '"':
                j += 1
        elif char in "'\"":
            quote = char
        elif char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return len(text) - 1


def block_commands(paths: Iterable[Path] = DOC_FILES) -> list[Command]:
    """Every simple command of the docs' shell blocks."""
    found = []
    for path in paths:
        for block in blocks(path):
            if block.language not in SHELL_LANGUAGES:
                continue
            code = block.code
            if block.language == "console":  # only the prompt's lines are commands
                code = "\n".join(
                    line[2:] if line.startswith("$ ") else "" for line in block.code.splitlines()
                )
            name = block.id.rsplit(":", 1)[0]
            for line, words in split_script(code, block.line + 1):
                found.append(Command(f"{name}:{line}", tuple(words)))
    return found


def prose(text: str) -> str:
    """``text`` without its fenced blocks and HTML comments, line numbers kept."""
    blank = lambda match: "\n" * match.group(0).count("\n")  # noqa: E731
    return _COMMENT.sub(blank, _FENCED.sub(blank, text))


# Code spans that are the rest of a command the page names once: the benchmarks page's table of
# sections writes each scenario as ``--only <scenario>`` alone, for ``python -m loadtest.bench``.
FRAGMENTS = {"docs/benchmarks.md": {"--only": ("python", "-m", "loadtest.bench")}}


def span_commands(paths: Iterable[Path], heads: frozenset[str]) -> list[Command]:
    """Every code span of the docs' prose that is a command: its first word is one of ``heads`` or a
    path to an environment's ``bin/`` (or it continues a command, ``FRAGMENTS``)."""
    found = []
    for path in paths:
        text = prose(path.read_text(encoding="utf-8"))
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        fragments = FRAGMENTS.get(name, {})
        for match in _SPAN.finditer(text):
            span = " ".join(match.group(1).split())
            first = span.split(" ", 1)[0]
            if first in fragments and " " in span:
                span = " ".join(fragments[first]) + " " + span
            elif first not in heads and not _PATH_HEAD.match(first):
                continue
            line = text.count("\n", 0, match.start()) + 1
            for _, words in split_script(span):
                found.append(Command(f"{name}:{line}", tuple(words), inline=True))
    return found


def result_files(roots: Iterable[Path] = RESULT_ROOTS) -> Iterator[tuple[Path, dict]]:
    """Every JSON result file with a ``meta`` under ``roots``, with its meta."""
    for root in roots:
        for path in sorted(root.rglob("*.json")):
            if path.name in RESULT_INPUTS:
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and isinstance(data.get("meta"), dict):
                yield path, data["meta"]


def result_commands(roots: Iterable[Path] = RESULT_ROOTS) -> list[Command]:
    """The simple commands of every result file's ``meta.command``."""
    found = []
    for path, meta in result_files(roots):
        if not isinstance(meta.get("command"), str):
            continue
        where = f"{path.relative_to(ROOT).as_posix()}: meta.command"
        found += [Command(where, tuple(words)) for _, words in split_script(meta["command"])]
    return found
