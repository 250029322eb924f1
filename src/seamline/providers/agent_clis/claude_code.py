"""``claude-code``: Anthropic's Claude Code CLI driven headless (``claude -p``).

By default a session keeps one warm process, ``claude -p --input-format stream-json
--output-format stream-json --verbose --include-partial-messages``: each turn is one user
message on its stdin and ends with its ``result`` line; an abort is Claude Code's
``interrupt`` control request. With ``warm=false`` (or Claude Code's own per-turn budget,
``max_budget_usd``, which a long-lived process would count across turns) each turn is one
``claude -p PROMPT …`` process. seamline mints the session id (``--session-id``); a later
process resumes it (``--resume``), a fork copies it natively (``--resume PARENT
--fork-session --session-id NEW``). Cost is what Claude Code reports in its result frame.

Claude Code loads only the user's settings layer (``--setting-sources user``; the operator's
``setting_sources`` names others): a repository's ``.claude/settings.json`` hooks, its
``.mcp.json`` servers (``-p`` skips the trust dialog that would ask), plugins, skills and
agents would otherwise run on the host before seamline's permission service is asked
anything. The project's ``CLAUDE.md`` files, which only that layer loads, are appended to
the system prompt instead, read without following a link.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import ClassVar, Final

from seamline.errors import InvalidRequest
from seamline.events import Event, PermissionDecision, ToolCall
from seamline.providers.agent_clis.approvals import ApprovalSocket, claude_hook_settings, merge_events
from seamline.providers.agent_clis.base import COMMON_OPTIONS, AgentCliProvider, Invocation, SessionMode, uuid_for
from seamline.providers.agent_clis.parsers.base import StreamParser
from seamline.providers.agent_clis.parsers.claude_code import ClaudeStreamJsonParser
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, ProviderSession
from seamline.providers.programs.agent_settings import parse_setting_sources, project_memory
from seamline.providers.programs.model_gateway import GATEWAY_OPTIONS, STORED_LOGIN_NOTE, GatewayRoute
from seamline.providers.programs.runtime_dir import ensure_runtime_dir, remove_runtime_dir
from seamline.providers.programs.warm_process import WARM_OPTIONS, WarmProcess
from seamline.sandbox.private_files import write_private_file

__all__ = ["ClaudeCodeProvider"]

_SLUG: Final = re.compile(r"[^A-Za-z0-9]")
#: where the project's CLAUDE.md files are put for ``--append-system-prompt-file`` (a file:
#: one argument of exec may not pass 128 KiB, and project_memory allows 256 KiB a file)
_MEMORY_FILE: Final = "project-memory.md"
# How long a hook's request waits for its call to show in Claude Code's own stream (it is
# printed before the hook runs; seamline may read it a moment later under load).
_ANNOUNCED_WITHIN: Final = 15.0


class ClaudeCodeProvider(AgentCliProvider):
    """Claude Code as an agent: its own tools, sessions and cost report."""

    name: ClassVar[str] = "claude-code"
    keys: ClassVar[KeyPath] = "gateway"
    gateway_key_vars: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
    )
    stored_login: ClassVar[str | None] = "`claude /login`, kept in ~/.claude/.credentials.json, or an apiKeyHelper"
    description: ClassVar[str] = "Anthropic's Claude Code CLI (claude -p), running its own tools"
    default_model: ClassVar[str | None] = None
    options: ClassVar[dict[str, OptionSpec]] = {
        **COMMON_OPTIONS,
        **GATEWAY_OPTIONS,
        "base_url": OptionSpec("Anthropic API base URL (sets ANTHROPIC_BASE_URL)", kind="url", operator_only=True),
        "allowed_tools": OptionSpec("tools Claude Code may run without asking, comma-separated", default="Bash,Read"),
        "permission_mode": OptionSpec(
            "Claude Code's --permission-mode", choices=("default", "acceptEdits", "plan", "bypassPermissions")
        ),
        "max_budget_usd": OptionSpec("Claude Code's own --max-budget-usd for the turn", kind="number"),
        "config_dir": OptionSpec("Claude Code's config dir (sets CLAUDE_CONFIG_DIR)", operator_only=True),
        "setting_sources": OptionSpec(
            "settings layers Claude Code loads (user, project, local; comma-separated; empty: none); the "
            "default, user, keeps a repository's hooks, MCP servers and plugins from running",
            default="user",
            operator_only=True,
        ),
        **WARM_OPTIONS,
    }
    forking = "native"
    session_ids = "seamline"
    cost_source = "reported"
    budget = "native"
    routes = ("anthropic",)
    mcp_transports = ("stdio", "http", "sse")
    executable_name: ClassVar[str] = "claude"
    npm_package: ClassVar[str] = "@anthropic-ai/claude-code"
    tested_version: ClassVar[str] = "2.1.197"
    min_version: ClassVar[tuple[int, int, int]] = (2, 1, 0)
    max_version: ClassVar[tuple[int, int, int]] = (3, 0, 0)
    config_dir_name: ClassVar[str] = ".claude"
    default_endpoint: ClassVar[tuple[str, int] | None] = ("api.anthropic.com", 443)
    gateway_route: ClassVar[GatewayRoute | None] = GatewayRoute(
        vendor="anthropic",
        key_vars=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
        base_url_var="ANTHROPIC_BASE_URL",
        default_base_url="https://api.anthropic.com",
    )
    # Claude Code honours HTTPS_PROXY/NO_PROXY itself (its docs: corporate proxy settings).
    envelope_env: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_",
        "CLAUDE_CODE_",
        "DISABLE_",
        "IS_SANDBOX",
        "MAX_THINKING_TOKENS",
        "BASH_DEFAULT_TIMEOUT_MS",
        "BASH_MAX_TIMEOUT_MS",
        "API_TIMEOUT_MS",
    )

    def __init__(self, *, model: str | None = None, options: Mapping[str, str] | None = None) -> None:
        super().__init__(model=model, options=options)
        try:
            self._setting_sources = parse_setting_sources(self.option_values.get("setting_sources"))
        except ValueError as exc:
            raise InvalidRequest(f"option {exc}") from None

    def _invocation(
        self,
        *,
        session: ProviderSession,
        prompt: str,
        executable: str,
        mode: SessionMode,
        target: str | None,
    ) -> Invocation:
        return self._started(session, executable, ["-p", prompt], mode, target)

    def _warm_invocation(
        self, *, session: ProviderSession, executable: str, mode: SessionMode, target: str | None
    ) -> Invocation:
        # No prompt on the command line: every turn is a user message on stdin.
        invocation = self._started(session, executable, ["-p", "--input-format", "stream-json"], mode, target)
        # Claude Code writes its transcript a moment after a result, or at exit; a warm process
        # killed in that moment would leave nothing to resume. This makes it write it first.
        invocation.env["CLAUDE_CODE_EAGER_FLUSH"] = "1"
        return invocation

    def _started(
        self, session: ProviderSession, executable: str, head: list[str], mode: SessionMode, target: str | None
    ) -> Invocation:
        argv = [executable, *head, "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
        if mode == "fresh":
            argv += ["--session-id", uuid_for(session.session_id)]
        elif mode == "resume" and target:
            argv += ["--resume", target]
        elif mode == "fork" and target:
            argv += ["--resume", target, "--fork-session", "--session-id", uuid_for(session.session_id)]
        if self.model:
            argv += ["--model", self.model]
        if effort := self.option_values.get("effort"):
            argv += ["--effort", effort]
        if budget := self.option_values.get("max_budget_usd"):
            argv += ["--max-budget-usd", budget]
        hooked = self._approval_args(session)
        # With the hook, seamline's permission service decides every call; Claude Code's own
        # prompts (which refuse in headless mode) would be a second, different rule set.
        mode_name = self.option_values.get("permission_mode") or ("bypassPermissions" if hooked else None)
        if mode_name:
            argv += ["--permission-mode", mode_name]
        tools = [t.strip() for t in self.option_values.get("allowed_tools", "").split(",") if t.strip()]
        if tools:
            argv += ["--allowedTools", *tools]
        # seamline's own --settings (the hook) is the flag layer, which this does not touch.
        argv += [*hooked, *self._settings_args(session)]
        env: dict[str, str | None] = {
            # Claude Code retries a failing API call ten times over minutes by default.
            "CLAUDE_CODE_MAX_RETRIES": str(self._int_option("max_retries", 2)),
            "DISABLE_AUTOUPDATER": "1",
            # Set when seamline itself runs inside a Claude Code session; not the child's business.
            "CLAUDECODE": None,
            "CLAUDE_CODE_ENTRYPOINT": None,
        }
        if base_url := self.option_values.get("base_url"):
            env["ANTHROPIC_BASE_URL"] = base_url
        if config_dir := self.option_values.get("config_dir"):
            env["CLAUDE_CONFIG_DIR"] = config_dir
        if os.geteuid() == 0 and mode_name == "bypassPermissions":
            # As root, Claude Code refuses to bypass permissions outside a declared sandbox.
            env["IS_SANDBOX"] = "1"
        return Invocation(argv=argv, env=env)

    def _settings_args(self, session: ProviderSession) -> list[str]:
        """``--setting-sources`` and, where the project layer is left out, its ``CLAUDE.md``
        files as an addition to the system prompt (a file in the session's runtime folder,
        which the envelope binds read-only at the same path)."""
        args = ["--setting-sources", ",".join(self._setting_sources)]
        if "project" in self._setting_sources:
            return args
        memory = project_memory((session.workspace or Path.cwd()).resolve())
        if memory:
            folder = ensure_runtime_dir(session.session_id, session.state)
            args += ["--append-system-prompt-file", str(write_private_file(folder, _MEMORY_FILE, memory))]
        return args

    def _warm_wanted(self, session: ProviderSession) -> bool:
        # --max-budget-usd bounds what one process spends, which warm would be every turn's.
        return self.option_values.get("warm", "true") == "true" and not self.option_values.get("max_budget_usd")

    def _warm_message(self, prompt: str, warm: WarmProcess | None = None) -> bytes:
        message = {"role": "user", "content": [{"type": "text", "text": prompt}]}
        return json.dumps({"type": "user", "message": message}).encode() + b"\n"

    def _warm_interrupt(self, warm: WarmProcess | None = None) -> bytes | None:
        request = {"subtype": "interrupt"}
        line = {"type": "control_request", "request_id": f"seamline-{uuid.uuid4().hex[:16]}", "request": request}
        return json.dumps(line).encode() + b"\n"

    def _warm_terminal(self, line: bytes) -> bool:
        # Cheap: only a line that starts like a result frame is decoded.
        if not line.startswith(b'{"type":"result"'):
            return False
        try:
            frame = json.loads(line)
        except ValueError:
            return False
        return isinstance(frame, dict) and frame.get("type") == "result"

    def _warm_attachments(self, session: ProviderSession) -> list[tuple[object, Callable[[], Awaitable[None]]]]:
        # The approval hook named in the process's --settings must answer as long as it runs.
        bridge = session.state.get("approval_bridge")
        if isinstance(bridge, ApprovalSocket) and bridge.running:
            return [(bridge, bridge.stop)]
        return []

    def _envelope_inner_env(self, home: Path) -> dict[str, str]:
        return {"CLAUDE_CONFIG_DIR": str(home / self.config_dir_name)}

    def _new_parser(self, *, session: ProviderSession, mode: SessionMode, target: str | None) -> StreamParser:
        return ClaudeStreamJsonParser(model=self.model)

    # -- one approval path: a PreToolUse hook answered by the session's permission service --
    def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        return self._approved_turn(session, prompt)

    async def _approved_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        if session.approval is None:
            async for event in super()._turn(session, prompt):
                yield event
            return
        # A warm process that died takes its socket with it: settled before one is chosen.
        await self._settle_warm(session)
        bridge = session.state.get("approval_bridge")
        if not isinstance(bridge, ApprovalSocket) or not bridge.running:
            # Claude Code prints each tool_use before its PreToolUse hook runs: a request for a
            # call it never printed came from something else in the envelope.
            bridge = ApprovalSocket(
                session.approval,
                ensure_runtime_dir(session.session_id, session.state),
                announced_within=_ANNOUNCED_WITHIN,
            )
            await bridge.start()
            session.state["approval_bridge"] = bridge
        decided: set[str] = set()
        try:
            async for event in merge_events(super()._turn(session, prompt), bridge.events):
                if isinstance(event, ToolCall):
                    bridge.announce(event.call_id)
                if isinstance(event, PermissionDecision):
                    if event.request_id in decided:
                        continue  # Claude Code reports the hook's denial again in its result
                    decided.add(event.request_id)
                yield event
        finally:
            warm = session.state.get("cli_warm")
            if isinstance(warm, WarmProcess) and warm.alive and warm.holds(bridge):
                bridge.cancel_pending()  # the socket lives on with the process; no hook waits past a turn
            else:
                if session.state.get("approval_bridge") is bridge:
                    session.state.pop("approval_bridge", None)
                await bridge.stop()

    def _approval_args(self, session: ProviderSession) -> list[str]:
        """``--settings`` with the hook, while the session's approval socket is served. The
        hook runs before every tool call whatever ``--permission-mode`` or
        ``--allowedTools`` say, and its deny holds even under ``bypassPermissions``."""
        bridge = session.state.get("approval_bridge")
        if not isinstance(bridge, ApprovalSocket) or not bridge.running:
            return []
        return ["--settings", claude_hook_settings(bridge, timeout=self._float_option("turn_timeout", 600.0))]

    async def _close(self, session: ProviderSession) -> None:
        await super()._close(session)
        remove_runtime_dir(session.state)

    def _credentials_check(self, environ: Mapping[str, str]) -> PreflightCheck:
        for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
            if environ.get(key):
                return PreflightCheck(name="credentials", ok=True, detail=f"{key} is set")
        stored = self.config_dir() / ".credentials.json"
        if stored.is_file():
            return PreflightCheck(name="credentials", ok=True, detail=f"login stored in {stored} ({STORED_LOGIN_NOTE})")
        return PreflightCheck(
            name="credentials",
            ok=False,
            detail="no ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN or stored login",
            fix="export ANTHROPIC_API_KEY=... (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`)",
        )

    def config_dir(self) -> Path:
        given = self.option_values.get("config_dir") or os.environ.get("CLAUDE_CONFIG_DIR")
        return Path(given) if given else super().config_dir()

    def _seed_skip(self) -> frozenset[str]:
        return frozenset({"projects", "todos", "shell-snapshots", "statsig", "logs", "ide", "session-env", "debug"})

    def _referenced_files(self, config_dir: Path) -> Iterable[str]:
        # settings.json may name scripts (status line, hooks, API-key helper) by a path
        # relative to the config dir; those travel with the copy.
        found: list[str] = []
        for name in ("settings.json", "settings.local.json"):
            path = config_dir / name
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            found += [s for s in _strings(data) if _relative_file(config_dir, s)]
        return found

    def _expected_transcript(self, session: ProviderSession, psid: str) -> Path | None:
        cwd = str(session.workspace or Path.cwd())
        return self.config_dir_for(session) / "projects" / _SLUG.sub("-", cwd) / f"{psid}.jsonl"

    def _search_transcript(self, psid: str) -> Path | None:
        projects = self.config_dir() / "projects"
        if not projects.is_dir():
            return None
        for candidate in projects.glob(f"*/{psid}.jsonl"):
            return candidate
        return None


def _strings(data: object) -> Iterable[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from _strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from _strings(value)


def _relative_file(root: Path, value: str) -> bool:
    if not value or len(value) > 300 or "\n" in value or value.startswith(("/", "~")) or " " in value:
        return False
    try:
        return (root / value).is_file()
    except OSError:
        return False
