"""The progress bars of a model's training: tqdm on stderr, on the terminal line of its process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# The terminal line of the progress bars drawn here: models trained side by side each keep one.
_BAR_LINE: ContextVar[int] = ContextVar("bar_line", default=0)


@contextmanager
def bars_on_line(line: int) -> Iterator[None]:
    """Within the block, ``progress_bar`` draws on terminal line ``line``."""
    token = _BAR_LINE.set(line)
    try:
        yield
    finally:
        _BAR_LINE.reset(token)


def progress_bar(iterable, *, enabled: bool, **options):
    """A tqdm bar on stderr, on this process's line."""
    from tqdm import tqdm

    return tqdm(iterable, disable=not enabled, file=sys.stderr, position=_BAR_LINE.get(), **options)
