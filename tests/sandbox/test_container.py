"""The ``container`` backend: no mounts of its own, but the same env, guard and limits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline.errors import PermissionDenied, SandboxViolation
from seamline.sandbox import ResourceLimits, SandboxPolicy, open_sandbox

pytestmark = pytest.mark.real


def test_container_runs_in_the_workspace_with_the_allowlist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-FAKE-CONTAINER-KEY")
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = SandboxPolicy(limits=ResourceLimits(wall_s=10, output_bytes=5000, max_processes=8))
    sandbox = open_sandbox("container", workspace=ws, outputs=tmp_path / "out", policy=policy)
    assert sandbox.backend.name == "container" and not sandbox.backend.isolates
    out = asyncio.run(sandbox.run_shell("pwd; env; echo made > made.txt"))
    assert out.startswith("exit code 0") and str(ws) in out
    assert "sk-ant-FAKE" not in out and (ws / "made.txt").read_text() == "made\n"
    assert (tmp_path / "out" / "scratch").is_dir()
    with pytest.raises(PermissionDenied):
        asyncio.run(sandbox.run_shell("echo $ANTHROPIC_API_KEY"))
    with pytest.raises(SandboxViolation, match="output cap"):
        asyncio.run(sandbox.run_shell("head -c 1000000 /dev/zero"))
    with pytest.raises(SandboxViolation, match="more than 8 processes"):
        asyncio.run(sandbox.run_shell("for i in $(seq 1 30); do sleep 2 & done; wait"))
