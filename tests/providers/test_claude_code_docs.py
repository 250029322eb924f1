"""The python examples of docs/providers-agent-clis.md run, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers-agent-clis.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_examples_run() -> None:
    blocks = BLOCK.findall(PAGE.read_text())
    assert len(blocks) >= 2
    namespace: dict[str, object] = {"__name__": "docs_providers_agent_clis"}
    for block in blocks:
        exec(compile(block, f"{PAGE.name}:example", "exec"), namespace)


def test_install_commands_in_the_table_match_the_providers() -> None:
    from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
    from seamline.providers.agent_clis.codex import CodexProvider
    from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider

    text = PAGE.read_text()
    for cls in (ClaudeCodeProvider, CodexProvider, GeminiCliProvider):
        assert cls().install_command() in text
