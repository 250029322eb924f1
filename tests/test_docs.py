"""The examples in docs/ run: every ```python block of a page, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = ["events.md", "providers.md", "tools.md", "sessions.md", "python-api.md", "worktrees.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", PAGES)
def test_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no python example"
    (tmp_path / "README.md").write_text("# example workspace\n")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.replace('.', '_')}"}
    for block in blocks:
        exec(compile(block, f"{page}:example", "exec"), namespace)
