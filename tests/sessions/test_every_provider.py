"""`seamline sessions resume` and `fork` on every provider, native or emulated as its
capabilities say, shown end to end by what the backend receives.

The agent-CLI providers' own suites show the same through the store verbs for Claude Code
(native resume and fork), ACP (native resume) and OpenCode (native fork); here are the
others, each against its local fake: the model APIs (emulated: the rebuilt history is
sent), Codex (native resume and fork), Gemini CLI (native resume; fork refused as its
capability says) and the offline provider.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Complete
from seamline.providers.registry import create_provider
from seamline.sessions.sqlite_store import SQLiteStore
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import CliWorld, cli_path, collect, make_world, one_complete
from tests.providers.model_api_support import FAST, model_api_env  # noqa: F401 - a fixture

MODEL_APIS = [
    ("openai", "gpt-4o", {"route": "chat"}, FakeOpenAI),
    ("openai", "gpt-4o", {"route": "responses"}, FakeOpenAI),
    ("anthropic", "claude-sonnet-4-6", {}, FakeAnthropic),
]


def bodies(fake: FakeOpenAI | FakeAnthropic | FakeGemini) -> list[str]:
    return [json.dumps(r.body) for r in fake.model_requests()]


@pytest.mark.usefixtures("model_api_env")
@pytest.mark.parametrize(("name", "model", "options", "fake_class"), MODEL_APIS, ids=["chat", "responses", "anthropic"])
def test_model_apis_resume_and_fork_by_emulation(
    name: str, model: str, options: dict[str, str], fake_class: type[FakeOpenAI], tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    script = [{"text": "The code word is heron."}, {"text": "It was heron."}, {"text": "Forked answer."}]
    with fake_class(script) as fake:
        opts = {"base_url": fake.base_url, **FAST, **options}

        async def go() -> tuple[str, str]:
            first = await create_provider(name, model=model, options=opts).open(store=store)
            one_complete(await collect(first, "Remember the code word."))
            again = await create_provider(name, model=model, options=opts).resume(first.session_id, store=store)
            assert again.resumed == "emulated"
            assert one_complete(await collect(again, "What was the code word?")).text == "It was heron."
            fork = await create_provider(name, model=model, options=opts).fork(first.session_id, store=store, at=1)
            one_complete(await collect(fork, "Fork question"))
            for session in (first, again, fork):  # their HTTP clients, not left to the garbage collector
                await session.provider.close(session)
            return first.session_id, fork.session_id

        sid, fork_id = asyncio.run(go())
        seen = bodies(fake)
    assert "Remember the code word." in seen[1] and "The code word is heron." in seen[1]
    assert "What was the code word?" in seen[1]
    # the fork at message 1 carries the first exchange, not the resumed one
    assert "The code word is heron." in seen[2] and "What was the code word?" not in seen[2]
    record = store.get(fork_id)
    assert record is not None and record.parent_id == sid and record.metadata["fork"] == "emulated"


def test_offline_resume_and_fork_through_the_cli(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"

    def sl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*seamline_cmd, *args], env=cli_env, capture_output=True, text=True, timeout=60)

    first = sl("run", "--json", "--workspace", str(docs), "What does the store keep?")
    sid = json.loads(first.stdout.splitlines()[0])["session_id"]
    resumed = sl("sessions", "resume", sid, "--json", "How do exit codes work?")
    assert resumed.returncode == 0, resumed.stderr
    assert "cli.md" in json.loads(resumed.stdout.splitlines()[-1])["text"]
    forked = sl("sessions", "fork", sid, "--json", "--prompt", "What is a session?")
    assert forked.returncode == 0, forked.stderr
    shown = json.loads(sl("sessions", "show", sid, "--json").stdout)
    assert [e["content"] for e in shown["transcript"] if e["kind"] == "user"] == [
        "What does the store keep?",
        "How do exit codes work?",
    ]
    assert len(shown["descendants"]) == 1


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


@pytest.mark.real
def test_codex_resume_and_fork_are_native_through_the_store(world: CliWorld, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    with FakeOpenAI([{"text": "Noted."}, {"text": "It was ibis."}, {"text": "Forked."}]) as fake:
        options = {
            "executable": cli_path("codex"),
            "base_url": fake.base_url,
            "max_retries": "0",
            "sandbox": "danger-full-access",
        }

        async def go() -> tuple[str, str, str | None]:
            codex = create_provider("codex", model="gpt-5", options=options)
            first = await codex.open(store=store, workspace=world.workspace)
            one_complete(await collect(first, "ibis-marker"))
            again = await create_provider("codex", model="gpt-5", options=options).resume(first.session_id, store=store)
            assert again.resumed == "native"
            assert one_complete(await collect(again, "what did I say?")).text == "It was ibis."
            fork = await create_provider("codex", model="gpt-5", options=options).fork(first.session_id, store=store)
            one_complete(await collect(fork, "fork-marker"))
            for session in (first, again, fork):  # their warm app-servers
                await session.provider.close(session)
            return first.session_id, fork.session_id, first.provider_session_id

        sid, fork_id, psid = asyncio.run(go())
        seen = [json.dumps(r.body.get("input")) for r in fake.model_requests()]
    assert "ibis-marker" in seen[1] and "Noted." in seen[1]
    assert "ibis-marker" in seen[2] and "fork-marker" in seen[2]
    parent, child = store.get(sid), store.get(fork_id)
    assert parent is not None and child is not None
    assert parent.provider_session_id == psid and child.parent_id == sid
    assert child.metadata["fork"] == "native" and child.provider_session_id not in (None, psid)


@pytest.mark.real
def test_gemini_resume_is_native_and_fork_is_refused(world: CliWorld, tmp_path: Path) -> None:
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"maxAttempts": 1}}
    (world.home / ".gemini").mkdir()
    (world.home / ".gemini" / "settings.json").write_text(json.dumps(settings))  # API-key auth, as a user sets it
    store = SQLiteStore(tmp_path / "s.db")
    with FakeGemini([{"text": "Noted."}, {"text": "It was egret."}]) as fake:
        options = {"executable": cli_path("gemini"), "base_url": fake.root_url, "max_retries": "0"}

        async def go() -> str:
            gemini = create_provider("gemini-cli", model="gemini-2.5-flash", options=options)
            first = await gemini.open(store=store, workspace=world.workspace)
            one_complete(await collect(first, "egret-marker"))
            again = await create_provider("gemini-cli", model="gemini-2.5-flash", options=options).resume(
                first.session_id, store=store
            )
            assert again.resumed == "native"
            events = await collect(again, "what did I say?")
            assert isinstance(events[-1], Complete) and events[-1].text == "It was egret."
            return first.session_id

        sid = asyncio.run(go())
        seen = [json.dumps(r.body.get("contents")) for r in fake.model_requests()]
    assert "egret-marker" in seen[-1] and "Noted." in seen[-1]
    with pytest.raises(InvalidRequest, match="cannot fork"):
        asyncio.run(create_provider("gemini-cli", options=options).fork(sid, store=store))
