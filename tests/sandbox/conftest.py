"""Fixtures of the sandbox tests: real bubblewrap, a workspace, a fake home with a fake key."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from seamline.sandbox import ResourceLimits, Sandbox, SandboxPolicy, open_sandbox, probe

SETUP_HINT = (
    "bubblewrap is missing or cannot isolate here: run `bash scripts/system/20-bubblewrap.sh` (or scripts/setup --dev)"
)


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    """Fails (never skips) when real bubblewrap cannot run: the sandbox tests need it."""
    report = probe("bwrap")
    if not report.ok:
        pytest.fail(f"{SETUP_HINT}\n{report.render()}")


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """A workspace, an outputs folder, inputs, and host things a sandbox must not reach."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\n")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "data.csv").write_text("a,b\n1,2\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE KEY-----\nSEAMLINE-FAKE-KEY-0123\n-----END FAKE KEY-----\n")
    (home / "notes.txt").write_text("private notes SEAMLINE-PRIVATE-NOTES\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SEAMLINE-OUTSIDE-SECRET\n")
    return {"ws": ws, "inputs": inputs, "home": home, "outside": outside, "outputs": tmp_path / "outputs"}


def tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    """Every path under ``root`` with its content hash (or link target) and mode."""
    out: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                out[str(p.relative_to(root))] = ("link:" + os.readlink(p), st.st_mode)
            elif p.is_dir():
                out[str(p.relative_to(root))] = ("dir", st.st_mode)
            else:
                out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
    return out


@pytest.fixture
def make_sandbox(bwrap_ready: None, host: dict[str, Path]) -> Iterator[object]:
    def build(*, network: bool = False, limits: ResourceLimits | None = None) -> Sandbox:
        policy = SandboxPolicy(inputs=host["inputs"], network=network, limits=limits or ResourceLimits(wall_s=20))
        return open_sandbox("bwrap", workspace=host["ws"], outputs=host["outputs"], policy=policy)

    yield build
