"""Handoff: a session continued on another backend keeps one transcript and one ledger,
and says which backend ran which turns (``run --session ID --provider P``,
``sessions fork ID --provider P``, ``resume(..., handoff=True)``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.providers.local.offline import OfflineProvider
from seamline.sessions.handoffs import backend_spans, handoffs_of
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import (
    ROOT,
    AgentAnthropic,
    CliWorld,
    cli_path,
    collect,
    make_world,
    one_complete,
)
from tests.providers.model_api_support import FAST, model_api_env  # noqa: F401 - a fixture
from tests.sessions.conftest import StoreFactory


def test_a_handoff_keeps_the_transcript_and_records_the_switch(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store()  # SQLite and PostgreSQL

    async def go() -> str:
        first = await OfflineProvider().open(store=store, workspace=tmp_path)
        one_complete(await collect(first, "remember heron"))
        with pytest.raises(InvalidRequest, match="hand it over"):
            await scripted([{"text": "x"}]).resume(first.session_id, store=store)
        taker = scripted([{"text": "It was heron."}])
        again = await taker.resume(first.session_id, store=store, handoff=True)
        assert again.resumed == "emulated" and again.session_id == first.session_id
        one_complete(await collect(again, "what was it?"))
        sent = taker.last_call
        assert sent is not None and "remember heron" in json.dumps([m.content for m in sent.messages])
        return first.session_id

    sid = asyncio.run(go())
    record = store.require(sid)
    assert (record.provider, record.provider_session_id) == ("scripted", None)
    (switch,) = handoffs_of(record.metadata)
    assert (switch["from"], switch["to"], switch["after_turn"], switch["at_message"]) == ("offline", "scripted", 1, 2)
    kinds = [(e.turn, e.role) for e in store.transcript(sid) if e.kind in ("user", "assistant")]
    assert kinds == [(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant")]
    spans = backend_spans(record.provider, record.model, handoffs_of(record.metadata), store.usage_rows(sid))
    assert [(s.provider, s.turns) for s in spans] == [("offline", (1, 1)), ("scripted", (2, None))]
    assert spans[0].totals.input_tokens > 0 and spans[1].totals.input_tokens == 0  # the scripted turn reports none


def test_a_fork_onto_another_backend_is_emulated_and_names_where_it_came_from(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> tuple[str, str]:
        first = await OfflineProvider().open(store=store, workspace=tmp_path)
        one_complete(await collect(first, "remember ibis"))
        fork = await scripted([{"text": "forked"}]).fork(first.session_id, store=store, handoff=True)
        one_complete(await collect(fork, "go on"))
        return first.session_id, fork.session_id

    sid, fork_id = asyncio.run(go())
    parent, child = store.require(sid), store.require(fork_id)
    assert parent.provider == "offline" and handoffs_of(parent.metadata) == []  # the parent is left as it was
    assert child.provider == "scripted" and child.metadata["fork"] == "emulated" and child.parent_id == sid
    assert [h["from"] for h in handoffs_of(child.metadata)] == ["offline"]
    store.close()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


@pytest.mark.real
@pytest.mark.usefixtures("model_api_env")
def test_claude_code_then_codex_then_openai_keep_one_transcript_and_three_usage_rows(
    world: CliWorld, tmp_path: Path
) -> None:
    store_file = tmp_path / "store.db"
    usage = {"input_tokens": 40, "output_tokens": 5}
    with (
        AgentAnthropic([{"text": "The bird is heron.", "usage": usage}], fallback={"text": "side"}) as claude_api,
        FakeOpenAI([{"text": "Codex heard heron.", "usage": usage}, {"text": "OpenAI heard heron too."}]) as openai,
    ):

        def seamline(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "seamline", "run", "--json", "--store", str(store_file), *args]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)
            assert done.returncode == 0, done.stderr
            return done

        first = seamline(
            "--provider", "claude-code", "--model", "claude-sonnet-4-5", "--workspace", str(world.workspace),
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={claude_api.root_url}", "-o", "max_retries=0",
            "Remember the bird: heron.",
        )  # fmt: skip
        sid = json.loads(first.stdout.splitlines()[0])["session_id"]
        seamline(
            "--session", sid, "--provider", "codex", "--model", "gpt-5", "-o", f"executable={cli_path('codex')}",
            "-o", f"base_url={openai.base_url}", "-o", "max_retries=0", "-o", "sandbox=danger-full-access",
            "Which bird?",
        )  # fmt: skip
        last = seamline(
            "--session", sid, "--provider", "openai", "--model", "gpt-4o", "-o", f"base_url={openai.base_url}",
            *(arg for key, value in FAST.items() for arg in ("-o", f"{key}={value}")), "And now?",
        )  # fmt: skip
        to_codex, to_openai = (json.dumps(r.body) for r in openai.model_requests())
    assert json.loads(last.stdout.splitlines()[-1])["text"] == "OpenAI heard heron too."
    assert "The bird is heron." in to_codex  # Claude Code's answer travelled to Codex as history
    assert "The bird is heron." in to_openai and "Codex heard heron." in to_openai
    store = SQLiteStore(store_file)
    try:
        record = store.require(sid)
        assert record.provider == "openai"
        assert [(h["from"], h["to"]) for h in handoffs_of(record.metadata)] == [
            ("claude-code", "codex"),
            ("codex", "openai"),
        ]
        said = [(e.turn, e.role, e.content) for e in store.transcript(sid) if e.kind in ("user", "assistant")]
        assert [(t, r) for t, r, _ in said] == [(turn, role) for turn in (1, 2, 3) for role in ("user", "assistant")]
        rows = store.usage_rows(sid)
        # Claude Code's turn is metered per model request by the gateway (a side request too).
        assert sorted({row.turn for row in rows}) == [1, 2, 3] and [row.turn for row in rows] == sorted(
            row.turn for row in rows
        )
    finally:
        store.close()
    shown = subprocess.run(
        [sys.executable, "-m", "seamline", "sessions", "show", sid, "--json", "--store", str(store_file)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=True,
    )  # fmt: skip
    backends = json.loads(shown.stdout)["backends"]
    assert [(b["provider"], b["turns"]) for b in backends] == [
        ("claude-code", [1, 1]),
        ("codex", [2, 2]),
        ("openai", [3, None]),
    ]
    assert all(b["totals"]["input_tokens"] > 0 for b in backends)
