"""What `seamline watch` makes of recorded events: the tool a live stored run is running
and the permission requests it waits on, and one line (or none) for every event type."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from seamline.cli.watch_rows import activity, fleet
from seamline.cli.watch_sources import _server_row, event_line
from seamline.events import (
    EVENT_TYPES,
    Complete,
    Error,
    Event,
    FileChange,
    Mode,
    PermissionDecision,
    PermissionRequest,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    encode_event,
)
from seamline.sessions.sqlite_store import SQLiteStore, open_store
from tests.worktrees.git_repo import git_home, make_repo, worktree_run

ONE_OF_EACH: tuple[Event, ...] = (
    Session(session_id="s" * 32, provider="scripted", model="m1"),
    TextDelta(text="par"),
    Text(text="partial answer\nsecond line"),
    ReasoningDelta(text="hm"),
    Reasoning(text="thinking it over"),
    ToolCall(call_id="c1", name="write_file", arguments={"path": "a.txt"}),
    ToolResult(call_id="c1", output="wrote a.txt", name="write_file"),
    ToolProgress(call_id="c1", message="half way"),
    PermissionRequest(request_id="r1", call_id="c1", tool="write_file", arguments={"path": "a.txt"}),
    PermissionDecision(request_id="r1", decision="deny", reason="not today"),
    FileChange(path="a.txt", kind="modified"),
    Usage(input_tokens=3, output_tokens=4, cost_usd=0.5),
    Mode(mode="planning"),
    Raw(source="x", payload={"k": 1}),
    Error(kind="timeout", message="too slow"),
    Complete(outcome="completed", stop_reason="end_turn"),
)


def test_every_event_type_has_its_line_or_none() -> None:
    assert sorted(e.type for e in ONE_OF_EACH) == sorted(EVENT_TYPES)
    lines = {e.type: event_line(e) for e in ONE_OF_EACH}
    assert {t for t, line in lines.items() if line is None} == {"text_delta", "reasoning_delta", "raw"}
    assert lines["session"] == f"session {'s' * 12} on scripted (m1)"
    assert lines["text"] == "assistant: partial answer […]"
    assert lines["tool_call"] == '→ write_file {"path": "a.txt"}'
    assert lines["tool_result"] == "  ✓ write_file wrote a.txt"
    assert lines["permission_request"] == '? permission asked: write_file {"path": "a.txt"}'
    assert lines["permission_decision"] == "  permission deny (once): not today"
    assert lines["usage"] == "  usage 3 in / 4 out · $0.5000"
    assert lines["error"] == "error (timeout): too slow"
    assert lines["complete"] == "[completed: end_turn]"
    assert event_line(FileChange(path="a.txt", kind="read")) is None


def _record(store: SQLiteStore, session_id: str, *events: Event) -> None:
    for event in events:
        store.append_raw(session_id, 1, "out", "event", encode_event(event).decode())
    store.flush()


def test_a_live_stored_runs_tool_and_waiting_requests() -> None:
    store = SQLiteStore(":memory:")
    try:
        store.create_session("a" * 32, provider="scripted", model=None)
        call = ToolCall(call_id="c1", name="write_file", arguments={})
        asked = PermissionRequest(request_id="r1", call_id="c1", tool="write_file", arguments={})
        _record(store, "a" * 32, call, asked)
        assert activity(store, "a" * 32) == ("write_file", 1)
        [row] = fleet(store)
        # A live run reads "running" (as a server's runs do), not "open", the word of a worktree's state.
        assert (row["status"], row["current_tool"], row["pending_approvals"]) == ("running", "write_file", 1)
        _record(store, "a" * 32, PermissionDecision(request_id="r1", decision="allow"))
        assert activity(store, "a" * 32) == ("write_file", 0)
        _record(store, "a" * 32, ToolResult(call_id="c1", output="ok"))
        assert activity(store, "a" * 32) == (None, 0)
        _record(store, "a" * 32, call, asked, Complete(outcome="aborted", stop_reason="cancelled"))
        assert activity(store, "a" * 32) == (None, 0)  # an ended turn waits on nothing
        store.set_status("a" * 32, "completed")
        [row] = fleet(store)
        assert (row["current_tool"], row["pending_approvals"]) == (None, 0)  # only live runs are read
    finally:
        store.close()


def test_a_servers_session_live_in_another_process_reads_running() -> None:
    session = {"id": "b" * 32, "provider": "scripted", "model": None, "status": "open", "created_at": 100.0,
               "updated_at": 100.0, "input_tokens": 0, "output_tokens": 0, "cost_usd": None, "title": "go",
               "run_options": {"worktree": {"branch": "seamline/bbbbbbbb", "state": "open"}}}  # fmt: skip
    row = _server_row(session, None, 130.0)  # no run of it in this server: its process writes the store
    assert (row["status"], row["worktree_state"], row["elapsed_s"]) == ("running", "open", 30.0)


@pytest.mark.parametrize("ending", ["merge", "discard"])
def test_a_worktree_runs_elapsed_time_ends_with_its_turn_not_its_merge_or_discard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    from seamline import worktrees

    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    store_path = tmp_path / "store.db"
    run_id = worktree_run(make_repo(tmp_path / "repo"), store_path, "notes.txt", "from the run\n")
    with monkeypatch.context() as later:  # merged or discarded an hour after the run ended
        clock = time.time
        later.setattr(time, "time", lambda: clock() + 3600.0)
        getattr(worktrees, ending)(run_id, store=store_path)
    store = open_store(store_path, read_only=True)
    try:
        record = store.get(run_id)
        assert record is not None and record.updated_at - record.created_at > 3600.0
        ended = max(row.created_at for row in store.raw_rows(run_id))  # the run's last event
        [row] = fleet(store, now=record.updated_at + 60.0)
    finally:
        store.close()
    assert row["worktree_state"] == ("merged" if ending == "merge" else "discarded")
    assert row["elapsed_s"] == round(ended - record.created_at, 1)
