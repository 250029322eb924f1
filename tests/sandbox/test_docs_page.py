"""The example of docs/sandbox.md runs (real bubblewrap)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "sandbox.md"


@pytest.mark.real
def test_sandbox_page_example_runs(bwrap_ready: None) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert blocks, "docs/sandbox.md has no python example"
    namespace: dict[str, object] = {"__name__": "docs_sandbox"}
    for block in blocks:
        exec(compile(block, "sandbox.md:example", "exec"), namespace)
    assert "result" in namespace


def test_sandbox_page_policy_example_parses(tmp_path: Path) -> None:
    from seamline.sandbox import load_policy

    toml = re.findall(r"```toml\n(.*?)```", PAGE.read_text(), re.S)
    assert len(toml) == 1
    (tmp_path / "data").mkdir()
    (tmp_path / "policy.toml").write_text(toml[0])
    policy = load_policy(tmp_path / "policy.toml")
    assert policy.inputs == tmp_path / "data" and policy.env_set == {"MODE": "ci"}
    assert policy.limits.max_processes == 128
