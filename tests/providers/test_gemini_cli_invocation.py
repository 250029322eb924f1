"""gemini-cli without the real program: argv dialect, capabilities, preflight, the
trusted-folder rule for seamline's settings file."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from seamline.events import Complete, Error
from seamline.providers.agent_clis import gemini_cli
from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider
from seamline.providers.base import ProviderSession
from seamline.transport.subprocess import group_members
from tests.providers.agent_cli_support import private_runtime_dir


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in CLIs need no key, but a session checks for one before it starts."""
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")


def session_of(provider: GeminiCliProvider, tmp_path: Path) -> ProviderSession:
    return ProviderSession(provider=provider, session_id="0" * 32, workspace=tmp_path, store=None, tools=None)  # type: ignore[arg-type]


def test_capabilities_are_truthful() -> None:
    caps = GeminiCliProvider.capabilities()
    assert (caps.forking, caps.session_ids, caps.cost_source) == ("none", "seamline", "priced")


def test_argv_for_fresh_and_resumed_sessions(tmp_path: Path) -> None:
    provider = GeminiCliProvider(model="gemini-2.5-pro", options={"base_url": "http://127.0.0.1:9"})
    session = session_of(provider, tmp_path)
    session.state["gemini_mode"] = "yolo"  # as the turn sets it when seamline's hook decides every call
    fresh = provider._invocation(session=session, prompt="hi", executable="gemini", mode="fresh", target=None)
    assert fresh.argv == [
        "gemini", "-p", "hi", "-o", "stream-json", "--skip-trust",
        "--session-id", "00000000-0000-0000-0000-000000000000", "-m", "gemini-2.5-pro", "--approval-mode", "yolo",
    ]  # fmt: skip
    assert fresh.env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"
    resumed = provider._invocation(session=session, prompt="hi", executable="gemini", mode="resume", target="abc")
    assert resumed.argv[6:8] == ["--resume", "abc"]


def test_preflight_missing_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("seamline.providers.programs.lookup._places", list)  # not the project's .tools either
    checks = asyncio.run(GeminiCliProvider().preflight())
    assert checks[0].fix == "npm install -g @google/gemini-cli@0.61.0"


def test_settings_file_goes_only_where_the_cli_trusts_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    open_home = tmp_path / "open"
    open_home.mkdir(mode=0o777)
    open_home.chmod(0o777)
    monkeypatch.setenv("HOME", str(open_home))
    # /tmp and this folder are world-writable: the CLI would skip a settings file there.
    assert gemini_cli._secure_dir() is None


def test_settings_file_goes_only_where_root_owns_every_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # The CLI skips a system settings file unless it and every folder above it are root's:
    # a private folder of a user who is not root will not do.
    private = private_runtime_dir(monkeypatch, request)
    monkeypatch.setenv("HOME", str(tmp_path))  # /tmp is everyone's: no folder there either
    if os.geteuid() == 0:
        assert gemini_cli._secure_dir() == private / "seamline"
        os.chown(private, 1000, 1000)
    assert gemini_cli._secure_dir() is None


def test_seeding_carries_the_context_files_settings_name(tmp_path: Path) -> None:
    parent = tmp_path / "parent" / ".gemini"
    (parent / "tmp" / "abc").mkdir(parents=True)
    (parent / "settings.json").write_text('{"context": {"fileName": ["AGENTS.md"]}}')
    (parent / "AGENTS.md").write_text("rules\n")
    (parent / "tmp" / "abc" / "chat.json").write_text("{}")
    node = tmp_path / "node"
    GeminiCliProvider().seed(node, tmp_path / "parent")
    assert (node / ".gemini" / "AGENTS.md").read_text() == "rules\n"
    assert (node / ".gemini" / "settings.json").is_file() and not (node / ".gemini" / "tmp").exists()


@pytest.mark.parametrize("stub_first", [True, False])
def test_transcript_is_the_live_file_when_a_resume_left_a_stub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stub_first: bool
) -> None:
    # A resumed turn in a later minute first writes a stub ``session-<minute>-<id>.jsonl``
    # (header and context only), then appends the turn to the original file: the
    # transcript is the file written last, whichever order the folder lists them in.
    monkeypatch.setenv("HOME", str(tmp_path))
    psid = "4148c081-54c1-4f95-b861-36612a32739b"
    chats = tmp_path / ".gemini" / "tmp" / "ws" / "chats"
    chats.mkdir(parents=True)
    header = json.dumps({"sessionId": psid, "kind": "main"}) + "\n"
    live = chats / "session-2026-12-03T07-01-4148c081.jsonl"
    stub = chats / "session-2026-12-03T07-02-4148c081.jsonl"
    for path in (stub, live):
        path.write_text(header + ('{"type":"user","content":[{"text":"zeppelin"}]}\n' if path is live else ""))
    os.utime(stub, ns=(1_000_000_000, 1_000_000_000))
    os.utime(live, ns=(2_000_000_000, 2_000_000_000))
    # The folder's listing order is the file system's: play both orders.
    listed = Path.glob
    first = stub if stub_first else live

    def in_order(self: Path, pattern: str) -> list[Path]:
        return sorted(listed(self, pattern), key=lambda p: p != first)

    monkeypatch.setattr(Path, "glob", in_order)
    provider = GeminiCliProvider()
    session = session_of(provider, tmp_path)
    session.provider_session_id = psid
    assert provider.transcript_location(session) == live


RETRIES_ON_STDERR = """
import json, sys, time
print(json.dumps({"type": "init", "session_id": "retry-1", "model": "m"}), flush=True)
n = 0
while True:
    n += 1
    print(f"Attempt {n} failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request",
          file=sys.stderr, flush=True)
    print("    at async retryWithBackoff (file:///gemini/bundle.js:1:1)", file=sys.stderr, flush=True)
    time.sleep(0.2)
"""


def test_retries_reported_on_stderr_only_meet_our_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 14, item 13: no stdout after init; the retries show on stderr. Our bound ends the
    # turn as transport, long before the turn timeout.
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS")
    monkeypatch.setenv("HOME", str(tmp_path))
    exe = tmp_path / "bin" / "gemini"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\n{RETRIES_ON_STDERR}")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    provider = GeminiCliProvider(
        options={"executable": str(exe), "max_retries": "2", "turn_timeout": "60", "grace": "0.5"}
    )

    async def go() -> tuple[list[object], list[int]]:
        session = await provider.open(workspace=tmp_path)
        events = [e async for e in session.send("hi")]
        return events, group_members(session.state["cli_process"].pgid)

    events, left = asyncio.run(go())
    errors = [e for e in events if isinstance(e, Error)]
    retries = [e.attempt for e in errors if e.attempt is not None]
    assert retries[:3] == [1, 2, 3] and all(e.kind == "transport" for e in errors)
    assert errors[-1].attempt is None and "retried" in errors[-1].message
    final = events[-1]
    assert isinstance(final, Complete) and (final.outcome, final.stop_reason) == ("failed", "transport")
    assert left == []
