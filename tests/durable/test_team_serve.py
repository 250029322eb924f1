"""A team server: ``seamline serve --on temporal`` twice over one PostgreSQL store, two
``seamline worker``s on one Temporal dev server, runs started over HTTP through either
server, one server and one worker killed (kill -9) at seeded-random moments and started
again. Every run completes, the store's ledger of usage equals what the fake model API
delivered, and clients that follow runs with ``Last-Event-ID``, switching servers
mid-stream, see every event of the store exactly once, in order."""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from seamline.durable.ledger import RunLedger
from seamline.sessions.sqlite_store import open_store
from tests.durable.conftest import DevServer, Processes
from tests.durable.team_serve_support import Follower, Serve, start_run, wait_until
from tests.fakes.openai_api import FakeOpenAI
from tests.leftovers import Leftovers
from tests.sessions.conftest import fresh_database, postgres_url

__all__ = ["postgres_url"]  # the session-scoped PostgreSQL server, shared with the store tests

pytestmark = pytest.mark.real

SEED = int(os.environ.get("SEAMLINE_TEAM_SEED", "45"))
RUNS = int(os.environ.get("SEAMLINE_TEAM_RUNS", "100"))  # bench/team_serve.py runs more
USAGE = {"input_tokens": 12, "output_tokens": 7}
_WAIT_S = 600.0  # a bound on waiting for a condition, never a measure
_STREAM_ENDS_S = 120.0  # a bound on a stream's end once its run ended (followers read with a longer timeout)


@pytest.fixture
def pg_store(postgres_url: str) -> str:
    pytest.importorskip("psycopg")
    return fresh_database(postgres_url)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    answer = {"chunks": ["The ", "store ", "keeps ", "every ", "event."], "chunk_delay": 0.05, "usage": USAGE}
    api = FakeOpenAI(fallback=answer)
    api.start()
    try:
        yield api
    finally:
        api.stop()


def test_runs_over_two_servers_and_two_workers_survive_kill_9_and_followers_see_each_event_once(
    pg_store: str, dev_server: DevServer, processes: Processes, fake: FakeOpenAI, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    queue = f"team-{SEED}-{os.getpid()}"
    processes.env.update(
        {
            "SEAMLINE_TRACES": str(tmp_path / "traces"),
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": fake.base_url,
        }
    )
    # The openai provider is a real one, pointed at the fake on 127.0.0.1 by OPENAI_BASE_URL.
    processes.env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    watch = Leftovers()
    watch.baseline()
    serve_args = [
        "--on", "temporal", "--temporal", dev_server.target, "--task-queue", queue, "--store", pg_store,
        "--workspace", str(tmp_path),
        # A follower looks at the store only when notified (a lost notification would hang
        # the test): events must reach every server through LISTEN/NOTIFY.
        "--fallback-s", "600",
    ]  # fmt: skip
    servers = [Serve(processes, "serve-a", serve_args), Serve(processes, "serve-b", serve_args)]
    worker_args = ("--sticky-timeout-s", "1")
    try:
        for server in servers:
            server.start()
        processes.worker(dev_server.target, queue, "worker-1", worker_args)
        doomed = processes.worker(dev_server.target, queue, "worker-2", worker_args)
        watch.watch()

        deadline = time.monotonic() + _WAIT_S
        kill_serve_at = rng.randrange(RUNS // 5, RUNS // 2)  # runs started before serve-b dies
        kill_worker_at = rng.randrange(RUNS // 5, RUNS // 2)  # runs finished before worker-2 dies
        follow_at = sorted(rng.sample(range(RUNS // 2), 3))  # the runs the three clients follow
        run_ids: list[str] = []
        prompts: dict[str, str] = {}
        followers: list[Follower] = []
        lock = threading.Lock()
        over = threading.Event()  # set when the test ends: clients still retrying give up

        def submit(n: int) -> str:
            run_id = start_run(servers, f"question <{n}>", random.Random(SEED * 1000 + n), deadline=deadline, stop=over)
            with lock:
                run_ids.append(run_id)
                prompts[run_id] = f"question <{n}>"
                if n in follow_at:
                    follower = Follower(servers, run_id, random.Random(SEED + n))
                    followers.append(follower)
                    follower.start(deadline)
            return run_id

        store = open_store(pg_store)
        ledger = RunLedger(store)

        def finished() -> int:
            return int(store._query("SELECT COUNT(*) FROM durable_runs WHERE report IS NOT NULL")[0][0])

        worker_killed = False

        def busy(pid: int) -> bool:
            rows = store._query(
                "SELECT COUNT(*) FROM durable_turns WHERE status = 'running' AND worker LIKE ?", (f"{pid}@%",)
            )
            return int(rows[0][0]) > 0

        futures: list[concurrent.futures.Future[str]] = []

        def started(count: int) -> bool:
            for future in futures:  # a start that failed fails the test now, not at the bound
                if future.done():
                    future.result()
            return len(run_ids) >= count

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        try:
            futures += [pool.submit(submit, n) for n in range(RUNS)]
            wait_until(lambda: started(kill_serve_at), "runs started before the server's kill", timeout=_WAIT_S)
            servers[1].kill()  # kill -9 of serve-b's process group, requests and streams in flight
            servers[1].start()
            watch.watch()
            # The worker dies mid-turn: after a seeded number of finished runs, while it runs one.
            wait_until(
                lambda: finished() >= kill_worker_at and busy(doomed.pid),
                "the worker running a turn after the seeded number of runs",
                timeout=_WAIT_S,
                every=0.02,
            )
            os.killpg(doomed.pid, 9)
            doomed.wait(timeout=30)
            worker_killed = True
            processes.worker(dev_server.target, queue, "worker-2b", worker_args)
            watch.watch()
            for future in futures:
                future.result(timeout=_WAIT_S)
            assert started(RUNS)
        finally:
            over.set()
            pool.shutdown(wait=False, cancel_futures=True)  # a failed test does not wait out the others
        assert worker_killed and len(set(run_ids)) == RUNS

        wait_until(lambda: finished() >= RUNS, f"all {RUNS} runs finished", timeout=_WAIT_S, every=0.5)
        for run_id in run_ids:
            report = ledger.report(run_id)
            assert report is not None and report["outcome"] == "completed", (run_id, report)
        # One durable run per HTTP run: a retried start never made a second.
        assert int(store._query("SELECT COUNT(*) FROM durable_runs")[0][0]) == RUNS

        # The ledger (usage recorded in the store, a killed worker's spend included) equals
        # what the fake model API delivered, run by run, but for one window: a response the
        # fake finished sending to the worker killed before it recorded the usage. Such a
        # loss is allowed only on a turn that was started again (its first start died), one
        # response at most, and the test says how many there were.
        delivered: dict[str, int] = {}
        for request in fake.delivered:
            text = json.dumps(request.body)
            for run_id, prompt in prompts.items():
                if prompt in text:  # "question <1>" is in no other run's prompt
                    delivered[run_id] = delivered.get(run_id, 0) + 1
                    break
        assert sum(delivered.values()) == len(fake.delivered), "a delivered request names no run"
        lost: list[str] = []
        for run_id in run_ids:
            turns = ledger.turns(run_id)
            recorded_in = sum(int(t["input_tokens"] or 0) for t in turns.values())
            recorded_out = sum(int(t["output_tokens"] or 0) for t in turns.values())
            sent = delivered.get(run_id, 0)
            responses = recorded_in // USAGE["input_tokens"]
            assert (recorded_in, recorded_out) == (
                responses * USAGE["input_tokens"],
                responses * USAGE["output_tokens"],
            )
            if responses != sent:
                assert sent - responses == 1 and max(t["starts"] for t in turns.values()) >= 2, (run_id, sent, turns)
                lost.append(run_id)
        assert len(lost) <= 2, lost  # the responses in flight to one killed worker
        retried = int(store._query("SELECT COUNT(*) FROM durable_turns WHERE starts > 1")[0][0])
        assert retried >= 1, "the killed worker's turn was not started again"
        print(
            f"\nteam serve: {RUNS} runs, {len(fake.delivered)} responses delivered, {retried} turns started again, "
            f"{len(lost)} responses lost with the killed worker"
        )

        for follower in followers:
            assert follower.thread is not None
            # Every run has ended in the store: a stream that is not woken now never will be
            # (the servers do not poll), so this bound fails a missing fan-out.
            follower.thread.join(timeout=_STREAM_ENDS_S)
            assert not follower.thread.is_alive(), f"run {follower.run_id} was not followed to its end"
            assert follower.error is None, follower.error
            kept = [msgspec.json.decode(e) for _, _, e in ledger.events_after(follower.run_id, 0, limit=100_000)]
            numbers = [n for n, _ in follower.events]
            assert numbers == list(range(1, len(kept) + 1)), (follower.run_id, numbers)
            assert [data for _, data in follower.events] == kept
            assert follower.switches >= 1
        store.close()
    finally:
        processes.kill_all()
    assert watch.problems() == []
