"""The ACP client's file methods (``fs/read_text_file``, ``fs/write_text_file``) do on the
host no more than the agent's sandbox would let it do: nothing outside the workspace,
no link followed (in any folder on the way, at any moment), ``.git`` read-only, only
regular files, a hard link replaced rather than written through.

Every request here is what a forged line on the agent's stdout can ask for (see
tests/sandbox/test_envelope_acp_stdout.py for the attack with the real agent); the
handler is the one seamline's ``acp`` provider serves the agent with.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.providers.acp.agent_process import AcpAgent, AcpChannel
from seamline.sandbox.confined_files import ConfinedPathRefused, relative_beneath
from seamline.transport.jsonrpc import JsonRpcError


def _agent(workspace: Path) -> tuple[AcpAgent, AcpChannel]:
    agent = AcpAgent(("test",), ["/bin/false"])
    channel = AcpChannel(wire_id="s1", workspace=workspace)
    agent.channels["s1"] = channel
    return agent, channel


def _call(agent: AcpAgent, method: str, **params: Any) -> Any:
    return asyncio.run(agent._on_request(method, {"sessionId": "s1", **params}))


def _refused(agent: AcpAgent, method: str, **params: Any) -> str:
    with pytest.raises(JsonRpcError) as caught:
        _call(agent, method, **params)
    return str(caught.value)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret\n")
    return workspace, outside


def test_a_write_into_git_is_refused_config_and_hooks_alike(world: tuple[Path, Path]) -> None:
    workspace, _ = world
    (workspace / ".git" / "hooks").mkdir(parents=True)
    config = workspace / ".git" / "config"
    config.write_text("[core]\n\tbare = false\n")
    agent, _ = _agent(workspace)
    fsmonitor = "[core]\n\tfsmonitor = touch /tmp/pwned\n"
    for target in (config, workspace / ".git" / "hooks" / "pre-commit", workspace / "sub" / ".GIT" / "config"):
        assert ".git is read-only" in _refused(agent, "fs/write_text_file", path=str(target), content=fsmonitor)
    assert config.read_text() == "[core]\n\tbare = false\n"
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (workspace / "sub").exists()


def test_a_folder_link_is_never_followed_even_one_pointing_inside(world: tuple[Path, Path]) -> None:
    workspace, outside = world
    (workspace / "real").mkdir()
    (workspace / "inner").symlink_to(workspace / "real")
    (workspace / "out").symlink_to(outside)
    agent, _ = _agent(workspace)
    assert "is a link" in _refused(agent, "fs/write_text_file", path=str(workspace / "inner" / "a.txt"), content="x")
    assert "is a link" in _refused(agent, "fs/read_text_file", path=str(workspace / "out" / "secret.txt"))
    assert "is a link" in _refused(agent, "fs/write_text_file", path="out/new.txt", content="x")
    assert not (workspace / "real" / "a.txt").exists() and not (outside / "new.txt").exists()


def test_a_file_link_is_neither_read_nor_written_through(world: tuple[Path, Path]) -> None:
    workspace, outside = world
    (workspace / "notes.txt").symlink_to(outside / "secret.txt")
    agent, _ = _agent(workspace)
    assert "is a link" in _refused(agent, "fs/read_text_file", path="notes.txt")
    assert "is a link" in _refused(agent, "fs/write_text_file", path="notes.txt", content="overwritten")
    assert (outside / "secret.txt").read_text() == "host secret\n"


def test_a_hard_link_to_a_file_elsewhere_is_replaced_not_written_through(world: tuple[Path, Path]) -> None:
    workspace, outside = world
    os.link(outside / "secret.txt", workspace / "same.txt")
    agent, channel = _agent(workspace)
    assert _call(agent, "fs/write_text_file", path="same.txt", content="new\n") is None
    assert (workspace / "same.txt").read_text() == "new\n"
    assert (outside / "secret.txt").read_text() == "host secret\n"
    assert [c.kind for c in channel.updates.get_nowait()] == ["edited"]  # type: ignore[union-attr]


def test_a_fifo_is_refused_without_blocking(world: tuple[Path, Path]) -> None:
    workspace, _ = world
    os.mkfifo(workspace / "pipe")
    agent, _ = _agent(workspace)
    assert "not a regular file" in _refused(agent, "fs/read_text_file", path="pipe")
    assert "not a regular file" in _refused(agent, "fs/write_text_file", path="pipe", content="x")


def test_reads_and_writes_inside_keep_working_and_report_the_change(world: tuple[Path, Path]) -> None:
    workspace, _ = world
    agent, channel = _agent(workspace)
    assert (
        _call(agent, "fs/write_text_file", path=str(workspace / "deep" / "er" / "a.txt"), content="1\n2\n3\n") is None
    )
    (workspace / "deep" / "er" / "a.txt").chmod(0o600)
    assert _call(agent, "fs/write_text_file", path="deep/er/a.txt", content="1\n2\n3\n4\n") is None
    assert (workspace / "deep" / "er" / "a.txt").stat().st_mode & 0o777 == 0o600  # the mode is kept
    assert _call(agent, "fs/read_text_file", path="deep/er/a.txt", line=2, limit=2) == {"content": "2\n3\n"}
    kinds = [change.kind for _ in range(3) for change in channel.updates.get_nowait()]  # type: ignore[union-attr]
    assert kinds == ["created", "edited", "read"]
    assert sorted(p.name for p in (workspace / "deep" / "er").iterdir()) == ["a.txt"]  # no temporary file left
    assert "outside the workspace" in _refused(agent, "fs/write_text_file", path="../escape.txt", content="x")
    assert "outside the workspace" in _refused(agent, "fs/read_text_file", path="/etc/passwd")


def test_a_folder_flipping_to_a_link_never_lets_a_write_out(world: tuple[Path, Path]) -> None:
    """The race of the issue: a folder that flips between a directory and a link to a host
    folder while writes go in. A check of the resolved path before the write let 6 of
    3,000 writes out; opening each component without following links lets none."""
    workspace, outside = world
    flip, staging = workspace / "flip", workspace / "flip-link"
    flip.mkdir()
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            try:
                staging.symlink_to(outside)
                os.rename(flip, workspace / "flip-dir")
                os.rename(staging, flip)
                os.rename(flip, staging)
                os.rename(workspace / "flip-dir", flip)
                staging.unlink()
            except OSError:
                continue

    agent, _ = _agent(workspace)
    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()

    async def writes() -> None:
        for i in range(1500):
            try:
                await agent._on_request(
                    "fs/write_text_file", {"sessionId": "s1", "path": str(flip / f"w{i}.txt"), "content": "x"}
                )
            except JsonRpcError:
                continue

    try:
        asyncio.run(writes())
    finally:
        stop.set()
        thread.join()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "..", ".", "", ".git", "/", "b/..", "x\0"]), max_size=6), st.booleans())
def test_a_path_is_either_refused_or_names_components_beneath_the_root(pieces: list[str], absolute: bool) -> None:
    root = Path("/srv/ws")
    raw = ("/srv/ws/" if absolute else "") + "/".join(pieces)
    try:
        parts = relative_beneath(root, raw)
    except ConfinedPathRefused:
        return
    assert parts and all(p not in ("", ".", "..") and "/" not in p and "\0" not in p for p in parts)
    assert os.path.normpath(os.path.join(str(root), *parts)).startswith("/srv/ws/")
