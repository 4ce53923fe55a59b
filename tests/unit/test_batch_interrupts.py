"""mai-batch's Ctrl-C (batch/interrupts.py): the first SIGINT leaves the job a grace to write the rows
already answered, a second stops it at once. Real signals to this process."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from batch.interrupts import graceful_interrupt


@pytest.fixture(autouse=True)
def sigint_as_a_terminal_gives_it():
    """SIGINT at Python's default, as in a terminal: a shell's background job (the CI) ignores it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_the_first_ctrl_c_stops_the_job_once_its_grace_is_over():
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), graceful_interrupt(0.3, said.append):
        sigint()
        written = 0
        while time.monotonic() - started < 5:  # the driver writing rows as they come
            written += 1
            time.sleep(0.01)
    waited = time.monotonic() - started
    assert 0.25 <= waited < 2.0 and written > 5  # rows went on being written during the grace
    assert len(said) == 1 and "up to 0.3 s" in said[0] and "Ctrl-C again" in said[0]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back


def test_a_second_ctrl_c_stops_at_once():
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), graceful_interrupt(30.0, lambda text: None):
        sigint()
        time.sleep(0.05)
        sigint()
        time.sleep(5)
    assert time.monotonic() - started < 2.0


def test_a_job_that_ends_within_its_grace_ends_as_it_would():
    with graceful_interrupt(0.2, lambda text: None):
        sigint()
    time.sleep(0.4)  # the grace's timer was cancelled: no late KeyboardInterrupt
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored_and_no_grace_leaves_it_alone():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with graceful_interrupt(0.2, lambda text: None):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    with graceful_interrupt(0, lambda text: None):
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_outside_the_main_thread_nothing_is_installed():
    seen = []

    def job() -> None:
        with graceful_interrupt(0.2, lambda text: None):
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=job)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
