"""The examples of docs/providers-model-apis.md run, against the local fakes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.providers.model_api_support import model_api_env

__all__ = ["model_api_env"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers-model-apis.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.usefixtures("model_api_env")
def test_model_api_page_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = BLOCK.findall(PAGE.read_text())
    assert blocks, "the page has no python example"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_providers_model_apis"}
    for block in blocks:
        exec(compile(block, f"{PAGE.name}:example", "exec"), namespace)
    assert namespace["result"].outcome == "completed"  # type: ignore[attr-defined]
