"""What an ACP agent is told so that its own configuration cannot decide what seamline is
asked.

An ACP agent sends ``session/request_permission`` only for the calls its own rules leave
open. Those rules come from files a repository or the agent itself can write: a
workspace's ``.claude/settings.json`` with ``permissions.allow: ["Bash"]`` made
claude-agent-acp run the shell unasked (no permission event, no deny rule, no hard denial),
and its ``permissions.defaultMode`` (``acceptEdits``) let edits through the same way. So:

- claude-agent-acp is started with no settings layers (``_meta.claudeCode.options.
  settingSources``: ``[]`` unless the operator names some with ``setting_sources``); the
  project's ``CLAUDE.md`` files, which only that layer would load, are given as an addition
  to its system prompt instead (read without following a link);
- a session whose mode runs calls unasked (``acceptEdits``, ``bypassPermissions``,
  ``dontAsk``, Gemini's ``yolo`` …; any mode but ``default`` and ``plan`` where the agent
  offers ``default``) is set back to ``default`` with ``session/set_mode``; where it cannot
  be, the session is refused;
- a permission is granted once, never "always": the agent keeps asking, and seamline's own
  rules keep deciding (an agent's "always" would stop it from asking for the rest of the
  session, whatever a later deny rule or hard denial says).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from seamline.sandbox.private_files import PrivatePathRefused, read_file_beneath

__all__ = [
    "SETTING_SOURCES",
    "is_claude_agent",
    "mode_to_reset",
    "parse_setting_sources",
    "session_meta",
]

SETTING_SOURCES: Final = ("user", "project", "local")
_MEMORY_FILES: Final = (("CLAUDE.md",), (".claude", "CLAUDE.md"))
_MEMORY_LIMIT: Final = 256 * 1024
_SAFE_MODES: Final = frozenset({"default", "plan"})


def is_claude_agent(info: Mapping[str, Any]) -> bool:
    """Whether ``initialize``'s ``agentInfo`` names claude-agent-acp (or its old name)."""
    name = str(info.get("name") or "")
    return name.rsplit("/", 1)[-1] in ("claude-agent-acp", "claude-code-acp")


def parse_setting_sources(value: str | None) -> list[str]:
    """``setting_sources`` (``user,project,local``, comma-separated) as a list; empty: none."""
    sources = [s.strip() for s in (value or "").split(",") if s.strip()]
    unknown = [s for s in sources if s not in SETTING_SOURCES]
    if unknown:
        raise ValueError(f"setting_sources takes {', '.join(SETTING_SOURCES)}; not {', '.join(unknown)}")
    return list(dict.fromkeys(sources))


def session_meta(workspace: Path, sources: Sequence[str]) -> dict[str, Any]:
    """The ``_meta`` of claude-agent-acp's ``session/new`` and ``session/load``."""
    meta: dict[str, Any] = {"claudeCode": {"options": {"settingSources": list(sources)}}}
    if "project" not in sources:
        memory = project_memory(workspace)
        if memory:
            meta["systemPrompt"] = {"append": memory}
    return meta


def project_memory(workspace: Path) -> str:
    """The workspace's ``CLAUDE.md`` and ``.claude/CLAUDE.md``, as Claude Code would show
    them, read without following a link (a link or anything larger than 256 KiB is left out)."""
    found: list[str] = []
    for parts in _MEMORY_FILES:
        try:
            data, _ = read_file_beneath(workspace, parts, limit=_MEMORY_LIMIT)
        except (PrivatePathRefused, OSError):
            continue
        text = data.decode("utf-8", errors="replace").strip()
        if text:
            found.append(
                f"Contents of {workspace / Path(*parts)} (project instructions, checked into the codebase):\n\n{text}"
            )
    return "\n\n".join(found)


def mode_to_reset(result: Any) -> str | None:
    """The mode a ``session/new``/``session/load`` result left the session in, when it is one
    that runs calls unasked and the agent offers ``default`` to go back to; else ``None``."""
    modes = result.get("modes") if isinstance(result, Mapping) else None
    if not isinstance(modes, Mapping):
        return None
    current = modes.get("currentModeId")
    if not isinstance(current, str) or current in _SAFE_MODES:
        return None
    offered = modes.get("availableModes")
    ids = {m.get("id") for m in offered if isinstance(m, Mapping)} if isinstance(offered, list) else set()
    # An agent without a "default" mode names its modes its own way (seamline's own ACP
    # agent: agent, planning): nothing to go back to.
    return current if "default" in ids else None
