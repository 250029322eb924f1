"""A team server on one machine for the tests: ``seamline serve --on temporal`` processes
over one PostgreSQL store and one Temporal dev server, `seamline worker`s, and HTTP
clients that start runs and follow them with ``Last-Event-ID`` across the servers.

Every process runs in its own process group and is killed by group (kill -9) by the
test's :class:`~tests.durable.conftest.Processes`."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx

from tests.durable.conftest import Processes, free_port, kill_group

_START_S = 90.0
PROVIDER = "openai"
MODEL = "gpt-4o-mini"


@dataclass
class Serve:
    """One ``seamline serve --on temporal`` process on a port that stays its own across
    restarts (a client that switches servers keeps its two addresses)."""

    processes: Processes
    name: str
    argv: list[str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.processes.tmp / f"{self.name}.log"
        mark = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "seamline", "serve", *self.argv, "--port", str(self.port)],
                stdout=out,
                stderr=out,
                env=self.processes.env,
                start_new_session=True,
            )
        self.processes.started.append(self.proc)
        deadline = time.monotonic() + _START_S
        while b"seamline: serving" not in log.read_bytes()[mark:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start (exit {self.proc.poll()}): {log.read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        kill_group(self.proc)


def start_run(servers: list[Serve], prompt: str, rng: random.Random, *, deadline: float, stop: threading.Event) -> str:
    """Start a ``single`` pipeline run through one of the servers; a failed request (a
    server killed under it) is asked again, of any server, with the same Idempotency-Key,
    so a run the first one had started is not started twice."""
    key = uuid.uuid4().hex
    body = {"prompt": prompt, "provider": PROVIDER, "model": MODEL}
    last = ""
    while time.monotonic() < deadline and not stop.is_set():  # stop: the test is over
        server = rng.choice(servers)
        try:
            reply = httpx.post(
                f"{server.url}/v1/pipelines/single/runs", json=body, headers={"Idempotency-Key": key}, timeout=60
            )
        except httpx.HTTPError as exc:
            last = repr(exc)
            time.sleep(0.1)  # a server restarting: ask again (a bounded retry, not a wait for a result)
            continue
        if reply.status_code == 201:
            run_id: str = reply.json()["id"]
            assert run_id == key, f"a start with Idempotency-Key {key} made run {run_id}"
            return run_id
        last = f"{reply.status_code} {reply.text}"
        time.sleep(0.1)
    raise AssertionError(f"no server took the run: {last}")


@dataclass
class Follower:
    """Follows one run over SSE (seamline format), switching servers after a random
    number of events or when a server dies, resuming with ``Last-Event-ID``."""

    servers: list[Serve]
    run_id: str
    rng: random.Random
    events: list[tuple[int, dict[str, object]]] = field(default_factory=list)
    switches: int = 0
    error: str | None = None
    thread: threading.Thread | None = None

    def start(self, deadline: float) -> None:
        self.thread = threading.Thread(target=self._follow, args=(deadline,), daemon=True)
        self.thread.start()

    def _follow(self, deadline: float) -> None:
        try:
            at = self.rng.randrange(len(self.servers))
            while time.monotonic() < deadline:
                server = self.servers[at % len(self.servers)]
                at += 1
                budget = self.rng.randint(1, 4)  # events read from this server before switching
                try:
                    if self._read(server, budget):
                        return
                except _OutOfOrder as exc:
                    self.error = f"run {self.run_id}: {exc}"
                    return
                except httpx.HTTPError:
                    pass  # the server died under the stream: read on from the other one
                self.switches += 1
            self.error = f"run {self.run_id} not followed to its end"
        except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
            self.error = repr(exc)

    def _read(self, server: Serve, budget: int) -> bool:
        """Read up to ``budget`` events; True when the stream ended with the run."""
        headers = {"Last-Event-ID": str(self.events[-1][0])} if self.events else {}
        url = f"{server.url}/v1/runs/{self.run_id}/events?format=seamline"
        with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(60, read=300)) as reply:
            if reply.status_code != 200:
                reply.read()
                raise httpx.HTTPError(f"{reply.status_code}: {reply.text}")
            for number, data in _sse_events(reply.iter_lines()):
                expected = self.events[-1][0] + 1 if self.events else 1
                if number != expected:  # a lost or repeated event: stop here, the test reports it
                    raise _OutOfOrder(f"{server.name} sent event {number} where {expected} was due")
                self.events.append((number, data))
                budget -= 1
                if budget == 0:
                    return False
        return bool(self.events) and self.events[-1][1].get("type") == "complete"


class _OutOfOrder(Exception):
    """An event id that is not the next one."""


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[int, dict[str, object]]]:
    number: int | None = None
    for line in lines:
        if line.startswith("id: "):
            number = int(line[4:])
        elif line.startswith("data: ") and number is not None:
            yield number, json.loads(line[6:])
            number = None


def wait_until(check: object, what: str, *, timeout: float, every: float = 0.2) -> None:
    """Poll ``check()`` until it is true; fail naming ``what`` after ``timeout``."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(every)
