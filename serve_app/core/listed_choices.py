"""Options written into a question's text: "A. cat" lines (also "A) cat", "(A) cat", "A: cat"), or one
line of "(A) cat (B) dog" after the question or an "Options:" label.

Pure functions, no I/O.
"""

from __future__ import annotations

import re

# Matched against a line without trailing whitespace: no backtracking over long runs of spaces.
_CHOICE_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+(\S.*)$")
# An inline mark stands alone: "(A) cat", never "P(A)" or "(A),".
_INLINE_LETTER = re.compile(r"(?:^|(?<=\s))\(([A-Z])\)\s+")
# What may stand before inline options: nothing, the end of the question, or a label.
_BEFORE_INLINE = re.compile(r"(?:^|[?:])\s*$")
# The label harnesses put before the options: lmms-eval mmbench's sys_prompt ("There are several
# options:"), mmmu's qwen3_vl format ("Options:"), and the usual "Choices:".
_OPTIONS_LABEL = re.compile(
    r"(?:^|(?<=[.?!])\s+)(?:there\s+are\s+several\s+options|options|choices)\s*:\s*\Z",
    re.IGNORECASE | re.MULTILINE,
)


def _lettered(letters: list[str]) -> bool:
    """Two or more letters running A, B, C, ... without gaps."""
    return len(letters) >= 2 and letters == [chr(ord("A") + i) for i in range(len(letters))]


def split_choices(question: str, *, trailing: bool = False) -> tuple[str, tuple[str, ...]]:
    """Split a question that lists lettered options into the question text and the options.

    One option a line ("A. cat", "B. dog", ...): the options must run A, B, C, ... without gaps and be
    the last lettered lines; lines after them (an instruction such as "Answer with the option's
    letter", as lmms-eval's MMBench and RealWorldQA prompts add) stay in the question text, unless
    ``trailing``: then options must end the text, and lettered lines followed by more text are part of
    the question (statements, a dialogue). Else the last line may list them inline, "(A) cat (B) dog",
    after the question or a label. A label ending the text before the options ("Options:", "There are
    several options:") goes with them. Otherwise the question is returned whole with no options."""
    lines = [line.rstrip() for line in question.rstrip().splitlines()]
    found = [_CHOICE_LINE.match(line) for line in lines]
    end = len(lines)
    while end and not found[end - 1]:
        end -= 1
    start = end
    while start and found[start - 1]:
        start -= 1
    matches = [match for match in found[start:end] if match]
    if _lettered([match.group(1) for match in matches]):
        if trailing and any(line.strip() for line in lines[end:]):
            return question.strip(), ()
        text = "\n".join(
            line for line in [without_label("\n".join(lines[:start])), *lines[end:]] if line.strip()
        )
        return text.strip(), tuple(match.group(2) for match in matches)
    return _inline_choices(question)


def _inline_choices(question: str) -> tuple[str, tuple[str, ...]]:
    lines = question.rstrip().splitlines()
    last = lines[-1] if lines else ""
    marks = list(_INLINE_LETTER.finditer(last))
    if not marks or not _lettered([mark.group(1) for mark in marks]):
        return question.strip(), ()
    options = tuple(
        last[mark.end() : following.start() if following else len(last)].strip()
        for mark, following in zip(marks, [*marks[1:], None], strict=True)
    )
    if any(not option for option in options) or not _BEFORE_INLINE.search(
        without_label(last[: marks[0].start()])
    ):
        return question.strip(), ()
    return without_label("\n".join([*lines[:-1], last[: marks[0].start()]])), options


def without_label(text: str) -> str:
    """``text`` without an options label ("Options:") ending it."""
    return _OPTIONS_LABEL.sub("", text.rstrip()).strip()
