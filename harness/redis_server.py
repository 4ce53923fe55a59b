"""A real Redis for the tests and the benches: Debian's ``redis-server`` (``apt-get install -y
redis-server``) run as a subprocess on 127.0.0.1 and a free port, in a temporary directory, with
persistence off.

    with RedisServer() as server:              # started; stopped (and its directory removed) on exit
        client = redis.Redis.from_url(server.url)
        server.stop()                          # connections now fail
        server.start()                         # or server.restart(): the same port, an empty database

No Redis client (it PINGs over a raw socket), so it runs before the ``redis`` client is installed.
Each start is a fresh, empty server: nothing is saved (``--save ""``, ``--appendonly no``). Stop it from
the test or fixture that started it: tests/conftest.py leaves the interpreter with ``os._exit``, which
runs no finalizer.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from .local_server import free_port

HOST = "127.0.0.1"
MISSING = "Debian's redis-server is needed: apt-get install -y redis-server"


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` binary on PATH (or at the path given)."""


class _PortTaken(RuntimeError):
    """redis-server could not bind its port: another process took it after free_port() released it."""


def _bulk(*words: str) -> bytes:
    """A command in RESP, Redis's wire format: an array of bulk strings."""
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        data = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class RedisServer:
    """Debian's ``redis-server`` on 127.0.0.1 and a free port (``port``, ``url``), no password unless
    ``password`` is given (``--requirepass``). ``start()`` returns once a PING answers +PONG (up to
    ``start_timeout`` seconds, else it raises with the server's output); ``stop()`` terminates it and
    waits for it to exit; ``restart()`` is both, on the same port."""

    def __init__(
        self,
        password: str | None = None,
        *,
        binary: str | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        found = shutil.which(binary or "redis-server")
        if found is None:
            raise RedisServerMissing(MISSING)
        self.binary = found
        self.password = password
        self.start_timeout = start_timeout
        self.host = HOST
        self._port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: Path | None = None
        self._cleanup: weakref.finalize[[subprocess.Popen[bytes], Path], RedisServer] | None = None
        self._started = False  # once it has answered, its port is its own: restarts keep it

    # -- where it answers ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``; with a password ``redis://:<password>@127.0.0.1:<port>/0``
        (percent-encoded, as ``redis.Redis.from_url`` decodes it)."""
        auth = f":{quote(self.password, safe='')}@" if self.password is not None else ""
        return f"redis://{auth}{self.host}:{self._port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- life cycle ------------------------------------------------------------------------------------

    def command(self, folder: Path) -> list[str]:
        """The server's command line: loopback only, this port, ``folder`` as its directory, nothing saved."""
        command = [
            self.binary,
            "--port", str(self._port),
            "--bind", self.host,
            "--dir", str(folder),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "notice",
        ]  # fmt: skip
        if self.password is not None:
            command += ["--requirepass", self.password]
        return command

    def start(self) -> RedisServer:
        """Start the server (a no-op when it runs) and wait until a PING answers +PONG. The first start
        takes another free port if someone took this one meanwhile; later ones keep theirs."""
        if self.running:
            return self
        for attempt in range(3):
            try:
                return self._start_once()
            except _PortTaken:
                if self._started or attempt == 2:
                    raise
                self._port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self) -> RedisServer:
        self._folder = Path(tempfile.mkdtemp(prefix="mai-redis-"))
        log = (self._folder / "redis-server.log").open("wb")
        try:
            self._process = subprocess.Popen(
                self.command(self._folder),
                cwd=self._folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        # if the object is dropped without stop(), its process and folder go with it
        self._cleanup = weakref.finalize(self, _cleanup, self._process, self._folder)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._process.poll() is not None:
                output = self.output()
                self.stop()
                error = _PortTaken if "Address already in use" in output else RuntimeError
                raise error(
                    f"redis-server exited with status {self._process.returncode} before answering "
                    f"on {self.host}:{self._port}:\n{output}"
                )
            if self.ping():
                self._started = True
                return self
            if time.monotonic() > deadline:
                output = self.output()
                self.stop()
                raise RuntimeError(
                    f"redis-server did not answer PING on {self.host}:{self._port} within "
                    f"{self.start_timeout:g} s:\n{output}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server and wait for it to exit (connections fail from then on); remove its
        directory. A no-op when it is not running."""
        if self._cleanup is not None:
            self._cleanup()  # _cleanup(process, folder), once
            self._cleanup = None
        self._folder = None

    def restart(self) -> RedisServer:
        """Stop, then start on the same port: an empty server (nothing is persisted)."""
        self.stop()
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- probes ----------------------------------------------------------------------------------------

    def ping(self, timeout: float = 1.0) -> bool:
        """True when the server answers PING with +PONG over a raw socket (after AUTH, with a password)."""
        commands = []
        if self.password is not None:
            commands.append((_bulk("AUTH", self.password), b"+OK"))
        commands.append((_bulk("PING"), b"+PONG"))
        try:
            with socket.create_connection((self.host, self._port), timeout=timeout) as sock:
                reader = sock.makefile("rb")
                for request, expected in commands:
                    sock.sendall(request)
                    if reader.readline().rstrip(b"\r\n") != expected:
                        return False
                return True
        except OSError:
            return False

    def output(self) -> str:
        """What the server has written (stdout and stderr), for error messages."""
        if self._folder is None:
            return ""
        try:
            return (self._folder / "redis-server.log").read_text(errors="replace")
        except OSError:
            return ""

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"RedisServer({self.host}:{self._port}, {state})"


def _cleanup(process: subprocess.Popen[bytes], folder: Path) -> None:
    _stop_process(process)
    shutil.rmtree(folder, ignore_errors=True)
