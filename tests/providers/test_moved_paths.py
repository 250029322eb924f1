"""The import paths modules had before the provider families and the store got rooms of
their own still import, and give the very module at its new path (one module object, so
monkeypatching and ``isinstance`` see the same thing)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# Every old path, as the documentation and earlier releases named them.
OLD_TO_NEW = {
    "seamline.providers._retry": "seamline.providers.model_apis.retry",
    "seamline.providers._model_api": "seamline.providers.model_apis.base",
    "seamline.providers.anthropic_api": "seamline.providers.model_apis.anthropic_api",
    "seamline.providers.openai_api": "seamline.providers.model_apis.openai_api",
    "seamline.providers.agent_cli": "seamline.providers.agent_clis.base",
    "seamline.providers.cli_turn": "seamline.providers.agent_clis.turn",
    "seamline.providers.cli_approvals": "seamline.providers.agent_clis.approvals",
    "seamline.providers.cli_parsers": "seamline.providers.agent_clis.parsers",
    "seamline.providers.cli_parsers.claude_code": "seamline.providers.agent_clis.parsers.claude_code",
    "seamline.providers.claude_code": "seamline.providers.agent_clis.claude_code",
    "seamline.providers.codex_hooks": "seamline.providers.agent_clis.codex_hooks",
    "seamline.providers.codex_warm": "seamline.providers.agent_clis.codex_warm",
    "seamline.providers.codex": "seamline.providers.agent_clis.codex",
    "seamline.providers.gemini_cli": "seamline.providers.agent_clis.gemini_cli",
    "seamline.providers.envelope_launch": "seamline.providers.programs.envelope_launch",
    "seamline.providers.program_lookup": "seamline.providers.programs.lookup",
    "seamline.providers.runtime_dir": "seamline.providers.programs.runtime_dir",
    "seamline.providers.warm_process": "seamline.providers.programs.warm_process",
    "seamline.providers.cli_journal": "seamline.providers.programs.journal",
    "seamline.providers._acp_settings": "seamline.providers.programs.agent_settings",
    "seamline.providers._acp_agent": "seamline.providers.acp.agent_process",
    "seamline.providers._acp_translator": "seamline.providers.acp.translator",
    "seamline.providers._opencode_server": "seamline.providers.opencode.server",
    "seamline.providers.offline": "seamline.providers.local.offline",
    "seamline.providers.scripted": "seamline.providers.local.scripted",
    "seamline.sessions.core": "seamline.sessions.portable_store",
    "seamline.sessions.store": "seamline.sessions.sqlite_store",
}


@pytest.mark.parametrize(("old", "new"), sorted(OLD_TO_NEW.items()))
def test_an_old_path_gives_the_module_at_its_new_one(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_the_documented_imports_still_work() -> None:
    # docs/providers-agent-clis.md, and the two former one-module providers now rooms.
    from seamline.providers.agent_clis.parsers import ClaudeStreamJsonParser as new_parser
    from seamline.providers.agent_clis.parsers.claude_code import ClaudeStreamJsonParser as module_parser

    namespace: dict[str, object] = {}
    exec(  # the old spellings, which a type checker no longer knows
        "from seamline.providers.cli_parsers import ClaudeStreamJsonParser\n"
        "from seamline.providers.acp import AcpProvider\n"
        "from seamline.providers.opencode import OpenCodeProvider\n"
        "from seamline.sessions.store import SQLiteStore, open_store\n"
        "from seamline.sessions.core import SessionStore\n",
        namespace,
    )
    from seamline.providers.acp.provider import AcpProvider
    from seamline.providers.opencode.provider import OpenCodeProvider
    from seamline.sessions import SessionStore, SQLiteStore, open_store

    assert namespace["ClaudeStreamJsonParser"] is new_parser is module_parser
    assert namespace["AcpProvider"] is AcpProvider
    assert namespace["OpenCodeProvider"] is OpenCodeProvider
    assert namespace["SQLiteStore"] is SQLiteStore and namespace["open_store"] is open_store
    assert namespace["SessionStore"] is SessionStore
    with pytest.raises(AttributeError):
        importlib.import_module("seamline.providers.acp").NoSuchThing  # noqa: B018


def test_a_path_that_never_existed_is_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("seamline.providers.no_such_backend")


def test_the_old_paths_cost_nothing_until_asked_for() -> None:
    # A fresh interpreter: importing the seam imports no family.
    code = (
        "import sys, seamline.providers, seamline.sessions\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('seamline.providers.'))\n"
        "print(' '.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(out.stdout.split())
    families = {
        m for m in loaded if m.split(".")[2] in {"model_apis", "agent_clis", "acp", "opencode", "local", "programs"}
    }
    assert "seamline.providers.base" in loaded and families == set()
