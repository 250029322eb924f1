"""The examples in docs/ run: every ```python block of a page, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = ["events.md", "providers.md", "tools.md", "sessions.md", "python-api.md", "worktrees.md", "evals.md", "a2a.md"]
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


def test_the_command_summary_of_docs_cli_names_every_command() -> None:
    """docs/cli.md opens with every command's synopsis (it left out `watch`)."""
    from seamline.cli.main import _parser

    _, owners = _parser([], load_all=True)
    summary = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text().split("```")[1]
    import re

    missing = [name for name in owners if not re.search(rf"^seamline (.*\| )?{name}\b", summary, re.M)]
    assert not missing, f"docs/cli.md's summary leaves out: {missing}"
