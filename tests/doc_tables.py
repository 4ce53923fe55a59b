"""The parts of a Markdown doc the doc checks read: a section's text, its tables' rows, the code spans
of a piece of text. Pure: no imports of the project."""

from __future__ import annotations

import re

_HEADING = re.compile(r"^(#{1,6}) (.+)$", re.M)
_CODE = re.compile(r"`([^`\n]+)`")
_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def section(text: str, heading: str) -> str:
    """The text under the heading ``heading`` (its words, without the #s), up to the next heading of
    the same level or higher; raises ``KeyError`` when the doc has no such heading."""
    for match in _HEADING.finditer(text):
        if match.group(2).strip() == heading:
            level = len(match.group(1))
            rest = text[match.end() :]
            ends = [m.start() for m in _HEADING.finditer(rest) if len(m.group(1)) <= level]
            return rest[: ends[0]] if ends else rest
    raise KeyError(f"no heading {heading!r}")


def table_rows(text: str, header: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of the table in ``text`` whose header cells are ``header``, each as header -> cell;
    raises ``KeyError`` when there is none."""
    lines = text.splitlines()
    for index, line in enumerate(lines[:-1]):
        if _cells(line) == list(header) and _RULE.match(lines[index + 1].strip()):
            rows = []
            for row in lines[index + 2 :]:
                if not row.strip().startswith("|"):
                    break
                rows.append(dict(zip(header, _cells(row), strict=True)))
            return rows
    raise KeyError(f"no table with the header {' | '.join(header)}")


def code_spans(text: str) -> list[str]:
    """The code spans of ``text`` (what stands between backticks), in order."""
    return _CODE.findall(text)


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if not (stripped.startswith("|") and stripped.endswith("|")):
        return []
    return [cell.strip() for cell in stripped[1:-1].split("|")]
