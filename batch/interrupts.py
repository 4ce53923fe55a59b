"""Ctrl-C that keeps the rows already answered (no Ray).

A row's answer reaches the driver a moment after the model gives it (batch/pipeline.py: about a second,
a few under load), so a Ctrl-C that stopped at once would throw away rows already answered on their way
to the output. The first SIGINT therefore only asks the job to stop: the driver goes on writing the
rows that come for ``grace_s`` seconds, then stops (``KeyboardInterrupt``, as before). A second SIGINT
stops at once. What is lost is then the rows still being answered when the job stops: at most the rows
in flight.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

GRACE_S = 5.0  # how long the first Ctrl-C lets the rows already answered reach the output


@contextmanager
def graceful_interrupt(grace_s: float = GRACE_S, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Inside the block, the first SIGINT raises ``KeyboardInterrupt`` in the main thread ``grace_s``
    seconds later (saying so through ``say``), a second one at once. Outside the main thread, with no
    grace, or where SIGINT is ignored (a shell's background job), SIGINT is left as it is."""
    if (
        grace_s <= 0
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        yield
        return
    say = say or _to_stderr
    timer: list[threading.Timer] = []

    def on_sigint(signum: int, frame: Any) -> None:
        if timer:  # the second Ctrl-C, or the grace is over
            raise KeyboardInterrupt
        say(
            f"mai-batch: stopping; writing the rows already answered for up to {grace_s:g} s "
            "(Ctrl-C again to stop now)"
        )
        timer.append(threading.Timer(grace_s, _thread.interrupt_main, (signal.SIGINT,)))
        timer[0].daemon = True
        timer[0].start()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if timer:
            timer[0].cancel()


def _to_stderr(text: str) -> None:
    print(f"\n{text}", file=sys.stderr, flush=True)
