"""The stored pending permission requests (``pending_permissions``), on SQLite and on a
real PostgreSQL server: written, listed, removed, and taken over only from a dead server
of this host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from seamline.events import PermissionRequest
from seamline.sessions.pending import PendingPermissions
from tests.sessions.conftest import StoreFactory


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(timeout=60)
    return done.pid


def _request(call: str) -> PermissionRequest:
    return PermissionRequest(request_id=f"perm-{call}", call_id=call, tool="shell", arguments={"command": "make"})


def test_a_stored_request_is_listed_removed_and_adopted_only_from_a_dead_server(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_session("s1", provider="openai", model="gpt-4o")
    pending = PendingPermissions(store)
    facts = {"prompt": "build", "started_by": "ana", "max_steps": 7}
    pending.add("r1", "s1", facts, _request("c1"))
    pending.add("r1", "s1", facts, _request("c1"))  # the same request again: one row
    pending.add("r1", "s1", facts, _request("c2"))
    pending.add("r2", "s1", facts, _request("c3"))
    rows = pending.rows()
    assert [(r.run_id, r.request_id) for r in rows] == [("r1", "perm-c1"), ("r1", "perm-c2"), ("r2", "perm-c3")]
    assert rows[0].run == facts and rows[0].request == _request("c1") and rows[0].session_id == "s1"
    assert {(r.owner_pid, r.owner_host) for r in rows} == {(os.getpid(), socket.gethostname())}
    assert pending.adopt() == [], "this process lives: nothing of it is taken"

    # r1's server died on this host; r2's lives on another one.
    dead = _dead_pid()
    with store._transaction():
        store._execute("UPDATE pending_permissions SET owner_pid = ? WHERE run_id = ?", (dead, "r1"))
        store._execute("UPDATE pending_permissions SET owner_host = ? WHERE run_id = ?", ("elsewhere", "r2"))
    taken = pending.adopt()
    assert [(r.run_id, r.request_id, r.owner_pid) for r in taken] == [("r1", "perm-c1", dead), ("r1", "perm-c2", dead)]
    assert pending.adopt() == [], "claimed: this process owns them now"
    owners = {(r.run_id, r.request_id): r.owner_pid for r in pending.rows()}
    assert owners[("r1", "perm-c1")] == os.getpid() and owners[("r2", "perm-c3")] == os.getpid()

    # Another process on the same store sees the same rows.
    other = PendingPermissions(make_store())
    assert [r.request_id for r in other.rows()] == ["perm-c1", "perm-c2", "perm-c3"]
    pending.remove("r1", "perm-c1")
    assert [r.request_id for r in other.rows()] == ["perm-c2", "perm-c3"]
    pending.remove_run("r1")
    pending.remove_run("r2")
    assert other.rows() == []
