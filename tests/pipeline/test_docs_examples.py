"""The python examples of docs/pipelines.md and docs/trace.md run, in order, as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", ["pipelines.md", "trace.md"])
def test_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no python example"
    (tmp_path / "README.md").write_text("# example workspace\n")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.replace('.', '_')}"}
    for block in blocks:
        exec(compile(block, f"{page}:example", "exec"), namespace)
    assert "controller" in namespace


def test_yaml_example_is_a_valid_definition(tmp_path: Path) -> None:
    from seamline.pipeline import load_definition

    text = (DOCS / "pipelines.md").read_text()
    yaml_block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert yaml_block is not None
    file = tmp_path / "draft-check.yaml"
    file.write_text(yaml_block.group(1))
    definition = load_definition(file)
    assert definition.name == "draft-check" and definition.phase("check").judge
