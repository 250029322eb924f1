"""Stores for the session tests: every test runs on SQLite and on a real PostgreSQL server.

The PostgreSQL server is the one `scripts/test` starts (SEAMLINE_TEST_POSTGRES_URL); when
pytest runs alone, one is started here with scripts/pg-test-server and stopped after.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Complete
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.sqlite_store import open_store
from seamline.testing import scripted
from seamline.tools import Toolset

ROOT = Path(__file__).resolve().parents[2]
StoreFactory = Callable[[], SessionStore]


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("SEAMLINE_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    # not under pytest's private temp folder: the server runs as the postgres user
    parent = Path(tempfile.mkdtemp(prefix="seamline-pg-"))
    parent.chmod(0o755)
    folder = parent / "server"
    started = subprocess.run(
        ["bash", str(ROOT / "scripts" / "pg-test-server"), "start", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if started.returncode != 0:
        pytest.fail(f"cannot start a PostgreSQL server (run `bash scripts/setup --dev`): {started.stderr}")
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "pg-test-server"), "stop", str(folder)], timeout=60)
        parent.rmdir()


def fresh_database(admin_url: str) -> str:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return fresh_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def make_store(store_location: str) -> Iterator[StoreFactory]:
    opened: list[SessionStore] = []

    def factory() -> SessionStore:
        store = open_store(store_location)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        try:
            store.close()
        except Exception:  # noqa: BLE001 - a test may have closed it already
            pass


async def scripted_turn(
    store: SessionStore,
    script: Sequence[Mapping[str, Any]],
    prompt: str,
    *,
    resume: str | None = None,
    tools: Toolset | None = None,
) -> str:
    """One turn of a scripted session (a new one, or ``resume``), closed after; its id."""
    provider = scripted(script)
    session = await (
        provider.resume(resume, store=store, tools=tools) if resume else provider.open(store=store, tools=tools)
    )
    try:
        events = [e async for e in session.send(prompt)]
    finally:
        await provider.close(session)
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    return session.session_id
