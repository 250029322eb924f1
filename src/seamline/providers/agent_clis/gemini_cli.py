"""``gemini-cli``: Google's Gemini CLI driven headless (``gemini -p -o stream-json``).

Each turn is one ``gemini`` process. seamline mints the session id (``--session-id``); a
later turn resumes it (``--resume ID``). The Gemini CLI cannot fork. It reports tokens, not
cost, so usage is priced from the price data. Its retry count and, when only an API key is
given, its auth type go into a system-defaults settings file of seamline's (the lowest
precedence layer, so the user's own settings still win).

The approval hook goes into a system settings file of seamline's (the layer merged last),
under a name new for every start of the CLI: the CLI merges ``hooksConfig.disabled`` as a
union over its layers, so a fixed name could be disabled from the user's settings, the
workspace's, or the private home the model's shell can write. Before the CLI starts, the
layers it will merge are read and merged as it merges them; a turn whose hook would not run
is refused (see :func:`_hook_problem`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

from seamline.errors import InvalidRequest
from seamline.events import Event, Raw
from seamline.providers.agent_clis.approvals import GEMINI_HOOK_NAME, ApprovalSocket, gemini_hook_settings, merge_events
from seamline.providers.agent_clis.base import COMMON_OPTIONS, AgentCliProvider, Invocation, SessionMode, uuid_for
from seamline.providers.agent_clis.parsers.base import StreamParser
from seamline.providers.agent_clis.parsers.gemini_cli import GeminiStreamJsonParser
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, ProviderSession
from seamline.providers.programs.envelope_launch import envelope_home
from seamline.providers.programs.journal import journaled_turn
from seamline.providers.programs.model_gateway import GATEWAY_OPTIONS, STORED_LOGIN_NOTE, GatewayRoute
from seamline.providers.programs.runtime_dir import ensure_runtime_dir
from seamline.sandbox.private_files import PrivatePathRefused, read_file_beneath, write_private_file
from seamline.tools.permission_bridge import GEMINI_TOOL_CLASSES

__all__ = ["GeminiCliProvider"]

# Where the envelope binds seamline's settings files for the CLI (root's there, see envelope_uid).
_INNER_DEFAULTS: Final = "/etc/gemini-cli/system-defaults.json"
_INNER_SYSTEM: Final = "/etc/gemini-cli/settings.json"
_RESTRICTED: Final = "GEMINI_RESTRICTED_MODE"
_NO_HOOK_NOTICE: Final = (
    "seamline's approval hook cannot be given to the Gemini CLI here (it reads it only from a folder "
    "that is root's all the way up), so the CLI runs in its default mode: no shell or write tools. "
    "Run it in the envelope (--sandbox bwrap) to have them, each call approved by seamline"
)


class GeminiCliProvider(AgentCliProvider):
    """The Gemini CLI as an agent: its own tools and sessions; tokens priced by seamline."""

    name: ClassVar[str] = "gemini-cli"
    keys: ClassVar[KeyPath] = "gateway"
    gateway_key_vars: ClassVar[tuple[str, ...]] = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    stored_login: ClassVar[str | None] = "a Google login, kept in ~/.gemini/oauth_creds.json"
    description: ClassVar[str] = "Google's Gemini CLI (gemini -p -o stream-json), running its own tools"
    default_model: ClassVar[str | None] = "gemini-2.5-flash"
    options: ClassVar[dict[str, OptionSpec]] = {
        **COMMON_OPTIONS,
        **GATEWAY_OPTIONS,
        "base_url": OptionSpec("Gemini API base URL (sets GOOGLE_GEMINI_BASE_URL)", kind="url", operator_only=True),
        "approval_mode": OptionSpec(
            "the CLI's --approval-mode (default: yolo when seamline's approval hook decides every call, "
            "else default, which offers no shell or write tools headless)",
            choices=("default", "auto_edit", "yolo", "plan"),
        ),
        "gemini_home": OptionSpec("home the CLI keeps .gemini under (sets GEMINI_CLI_HOME)", operator_only=True),
    }
    # A BeforeTool hook asks seamline's permission service before each of its tool calls.
    tool_approval = "every_call"
    # The CLI reads a system settings file (the hook's) only when it and every folder above it
    # are root's: inside the envelope it runs as uid 0 (capabilities dropped), the file bound
    # read-only under /etc/gemini-cli, so the user's own file is root's there.
    envelope_uid: ClassVar[int | None] = 0
    forking = "none"
    session_ids = "seamline"
    cost_source = "priced"
    budget = "seamline"
    routes = ("gemini-api",)
    mcp_transports = ("stdio", "http", "sse")
    executable_name: ClassVar[str] = "gemini"
    npm_package: ClassVar[str] = "@google/gemini-cli"
    tested_version: ClassVar[str] = "0.61.0"
    min_version: ClassVar[tuple[int, int, int]] = (0, 50, 0)
    max_version: ClassVar[tuple[int, int, int]] = (1, 0, 0)
    config_dir_name: ClassVar[str] = ".gemini"
    default_endpoint: ClassVar[tuple[str, int] | None] = ("generativelanguage.googleapis.com", 443)
    gateway_route: ClassVar[GatewayRoute | None] = GatewayRoute(
        vendor="gemini",
        key_vars=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        base_url_var="GOOGLE_GEMINI_BASE_URL",
        default_base_url="https://generativelanguage.googleapis.com",
    )
    envelope_env: ClassVar[tuple[str, ...]] = ("GEMINI_", "GOOGLE_")

    def _invocation(
        self,
        *,
        session: ProviderSession,
        prompt: str,
        executable: str,
        mode: SessionMode,
        target: str | None,
    ) -> Invocation:
        argv = [executable, "-p", prompt, "-o", "stream-json", "--skip-trust"]
        if mode == "resume" and target:
            argv += ["--resume", target]
        else:
            argv += ["--session-id", uuid_for(session.session_id)]
        # An explicit model also saves the routing request the default "auto" model makes.
        if self.model:
            argv += ["-m", self.model]
        mode_name = session.state.get("gemini_mode") or self.option_values.get("approval_mode")
        if isinstance(mode_name, str) and mode_name:
            argv += ["--approval-mode", mode_name]
        env: dict[str, str | None] = {}
        if base_url := self.option_values.get("base_url"):
            env["GOOGLE_GEMINI_BASE_URL"] = base_url
        if home := self.option_values.get("gemini_home"):
            env["GEMINI_CLI_HOME"] = home
        enveloped = self._sandbox_mode() != "none"
        for key, variable, inside in (
            ("gemini_defaults", "GEMINI_CLI_SYSTEM_DEFAULTS_PATH", _INNER_DEFAULTS),
            ("gemini_system", "GEMINI_CLI_SYSTEM_SETTINGS_PATH", _INNER_SYSTEM),  # the approval hook
        ):
            value = session.state.get(key)
            if isinstance(value, str):
                env[variable] = inside if enveloped else value
        if "gemini_system" in session.state:
            # A .env file the CLI loads (the workspace's, the home's) sets only variables the
            # environment lacks: given here, it cannot put the CLI in restricted mode, which
            # loads no hook at all.
            env[_RESTRICTED] = "false"
        return Invocation(argv=argv, env=env)

    def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        # The CLI edits the workspace itself: the turn is one step of the edit journal.
        inner = self._with_defaults(session, prompt)
        return journaled_turn(session, self.name, inner)

    async def _with_defaults(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        defaults: dict[str, object] = {
            # The CLI retries a failing call ten times by default, over minutes.
            "general": {"maxAttempts": max(self._int_option("max_retries", 2) + 1, 1)},
        }
        if os.environ.get("GEMINI_API_KEY") and not self._user_auth_type():
            defaults["security"] = {"auth": {"selectedType": "gemini-api-key"}}
        enveloped = self._sandbox_mode() != "none"
        # Inside the envelope the files are bound under /etc/gemini-cli; outside, the CLI reads
        # them only from a folder that is root's all the way up (so only when seamline is root).
        folder = ensure_runtime_dir(session.session_id, session.state) if enveloped else _secure_dir()
        hooked = session.approval is not None and folder is not None
        # What this turn puts in the state, and takes out again only while it is still its own.
        mine: dict[str, str] = {
            "gemini_mode": self._approval_mode(hooked=hooked, approval=session.approval is not None)
        }
        session.state.update(mine)
        made: list[Path] = []
        bridge: ApprovalSocket | None = None
        try:
            if folder is None and session.approval is not None:
                yield Raw(source="seamline", payload={"notice": _NO_HOOK_NOTICE})
            if folder is not None:
                made.append(_settings_file(folder, "gemini-defaults-", defaults))
                mine["gemini_defaults"] = session.state["gemini_defaults"] = str(made[-1])
            if not hooked or folder is None or session.approval is None:
                async for event in self._gated_turn(session, prompt):
                    yield event
                return
            bridge = ApprovalSocket(
                session.approval, ensure_runtime_dir(session.session_id, session.state), classes=GEMINI_TOOL_CLASSES
            )
            # Every start of the CLI (every turn) gets a name no other layer can know beforehand.
            name = f"{GEMINI_HOOK_NAME}-{secrets.token_hex(16)}"
            timeout = self._float_option("turn_timeout", 600.0)
            settings = gemini_hook_settings(bridge, timeout=timeout, base=_system_settings(), name=name)
            if (problem := _hook_problem(self._layers(session, defaults, settings), name)) is not None:
                raise InvalidRequest(
                    f"gemini-cli: seamline's approval hook would not run ({problem}), so the CLI's tool calls "
                    "could not be approved; the CLI was not started"
                )
            await bridge.start()
            made.append(_settings_file(folder, "gemini-system-", settings))
            mine["gemini_system"] = session.state["gemini_system"] = str(made[-1])
            async for event in merge_events(self._gated_turn(session, prompt), bridge.events):
                yield event
        finally:
            for key, value in mine.items():
                if session.state.get(key) == value:
                    del session.state[key]
            if bridge is not None:
                await bridge.stop()
            for path in made:
                path.unlink(missing_ok=True)

    def _layers(
        self, session: ProviderSession, defaults: Mapping[str, object], system: Mapping[str, object]
    ) -> list[Mapping[str, object] | None]:
        """The settings the CLI will merge, lowest first (its ``mergeSettings``): system
        defaults (seamline's), the user's (the private home's in the envelope, or before it
        is seeded the host's it is seeded from), the workspace's (taken as trusted: the
        environment or the user's settings may make it so), and the system settings
        (seamline's). The private home and the workspace are the model's to write: read
        without following a link. A layer not read is ``None``: the CLI refuses a file it
        cannot parse, and no layer can know the hook's name in advance."""
        home = envelope_home(self.name, session.session_id) if self._sandbox_mode() != "none" else None
        if home is not None and home.is_dir():
            user = _read_beneath(home, (self.config_dir_name, "settings.json"))
        else:
            user = _read_settings(self.config_dir() / "settings.json")
        workspace = _read_beneath((session.workspace or Path.cwd()).resolve(), (self.config_dir_name, "settings.json"))
        return [defaults, user, workspace, system]

    def _approval_mode(self, *, hooked: bool, approval: bool) -> str:
        """The CLI's ``--approval-mode``: as given, else ``yolo`` when seamline's hook decides
        every call (or nothing is to be approved), else ``default`` (no shell or write tools
        headless). A mode that runs tools unasked, where the hook cannot be given, is refused."""
        given = self.option_values.get("approval_mode")
        if hooked or not approval:
            return given or "yolo"
        if given in ("yolo", "auto_edit"):
            raise InvalidRequest(
                f"gemini-cli: approval_mode={given} would run the CLI's tools without seamline's approval: "
                "the CLI reads seamline's approval hook only from a folder that is root's all the way up. "
                "Run it in the envelope (--sandbox bwrap), where seamline gives it the hook, or drop "
                "-o approval_mode"
            )
        return given or "default"

    def _user_auth_type(self) -> str | None:
        try:
            settings = json.loads((self.config_dir() / "settings.json").read_text())
        except (OSError, ValueError):
            return None
        auth = settings.get("security", {}).get("auth", {}) if isinstance(settings, dict) else {}
        value = auth.get("selectedType") if isinstance(auth, dict) else None
        return value if isinstance(value, str) else None

    def _envelope_inner_env(self, home: Path) -> dict[str, str]:
        return {"GEMINI_CLI_HOME": str(home)}

    def _envelope_ro_at(self, session: ProviderSession) -> list[tuple[Path, str]]:
        pairs = (("gemini_defaults", _INNER_DEFAULTS), ("gemini_system", _INNER_SYSTEM))
        found = [(session.state.get(key), inside) for key, inside in pairs]
        return [(Path(path), inside) for path, inside in found if isinstance(path, str)]

    def _new_parser(self, *, session: ProviderSession, mode: SessionMode, target: str | None) -> StreamParser:
        return GeminiStreamJsonParser(model=self.model)

    def _ready(self) -> None:
        # Only a missing key and login stops a session here: seeding selects the key's auth type.
        if not any(os.environ.get(k) for k in ("GEMINI_API_KEY", "GOOGLE_API_KEY")):
            super()._ready()

    def _credentials_check(self, environ: Mapping[str, str]) -> PreflightCheck:
        for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
            if environ.get(key):
                if self._user_auth_type() is None and _secure_dir() is None:
                    return PreflightCheck(
                        name="credentials",
                        ok=False,
                        detail=f"{key} is set but no auth type is selected in {self.config_dir() / 'settings.json'}",
                        fix='add {"security": {"auth": {"selectedType": "gemini-api-key"}}} to that file',
                    )
                return PreflightCheck(name="credentials", ok=True, detail=f"{key} is set")
        stored = self.config_dir() / "oauth_creds.json"
        if stored.is_file():
            return PreflightCheck(name="credentials", ok=True, detail=f"login stored in {stored} ({STORED_LOGIN_NOTE})")
        return PreflightCheck(
            name="credentials",
            ok=False,
            detail="no GEMINI_API_KEY, GOOGLE_API_KEY or stored login",
            fix="export GEMINI_API_KEY=... (or run `gemini` once and log in)",
        )

    def config_dir(self) -> Path:
        home = self.option_values.get("gemini_home") or os.environ.get("GEMINI_CLI_HOME")
        return Path(home) / self.config_dir_name if home else super().config_dir()

    def _seed_skip(self) -> frozenset[str]:
        return frozenset({"tmp", "history", "logs"})

    def _referenced_files(self, config_dir: Path) -> Iterable[str]:
        # settings.json may name context files (GEMINI.md by default) that live beside it.
        try:
            settings = json.loads((config_dir / "settings.json").read_text())
        except (OSError, ValueError):
            return ["GEMINI.md"]
        context = settings.get("context", {}) if isinstance(settings, dict) else {}
        names = context.get("fileName", "GEMINI.md") if isinstance(context, dict) else "GEMINI.md"
        listed = names if isinstance(names, list) else [names]
        return [n for n in listed if isinstance(n, str) and not n.startswith(("/", "~"))]

    def _search_transcript(self, psid: str) -> Path | None:
        tmp = self.config_dir() / "tmp"
        if not tmp.is_dir():
            return None
        short = psid.split("-", 1)[0]
        # A resumed turn in a later minute leaves a stub ``session-<minute>-<id>.jsonl``
        # (header only) and appends the turn to the original file, so several files name
        # this session: the transcript is the one written last.
        found: list[tuple[int, int, Path]] = []
        for candidate in tmp.glob(f"*/chats/session-*{short}*.json*"):
            try:
                with candidate.open("rb") as fh:
                    head = fh.read(4096)
                    stat = os.fstat(fh.fileno())
            except OSError:
                continue
            if psid.encode() in head:
                found.append((stat.st_mtime_ns, stat.st_size, candidate))
        return max(found)[2] if found else None


def _settings_file(folder: Path, prefix: str, settings: Mapping[str, object]) -> Path:
    # The runtime folder: written without following a link (see seamline.sandbox.private_files).
    return write_private_file(folder, f"{prefix}{secrets.token_hex(8)}.json", json.dumps(settings))


def _system_settings() -> dict[str, object]:
    """The machine's own Gemini CLI system settings, which seamline's file stands in for."""
    path = os.environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or "/etc/gemini-cli/settings.json"
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _secure_dir() -> Path | None:
    """A folder for seamline's settings files that the Gemini CLI will read: it and every
    folder above it are root's and writable by no one else (the CLI's own rule for system
    settings). Only a seamline running as root has one; ``None`` otherwise."""
    candidates = []
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(runtime) / "seamline")
    candidates.append(Path(os.environ.get("HOME") or Path.home()) / ".cache" / "seamline")
    for folder in candidates:
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if all(_root_only(p) for p in (folder, *folder.parents)):
                return folder
        except OSError:
            continue
    return None


def _root_only(path: Path) -> bool:
    found = path.stat()
    return found.st_uid == 0 and not found.st_mode & 0o022


def _read_settings(path: Path) -> dict[str, Any] | None:
    try:
        return _settings_of(path.read_bytes())
    except OSError:
        return None


def _read_beneath(root: Path, relative: tuple[str, ...]) -> dict[str, Any] | None:
    try:
        data, _ = read_file_beneath(root, relative, limit=16 * 1024**2)
    except (OSError, PrivatePathRefused):
        return None
    return _settings_of(data)


def _settings_of(data: bytes) -> dict[str, Any] | None:
    """A settings file as the CLI reads it (JSON with comments); ``None`` if it is not an
    object."""
    try:
        found = json.loads(_without_comments(data.decode("utf-8", "replace")))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _without_comments(text: str) -> str:
    """``text`` less its ``//`` and ``/* */`` comments outside strings (strip-json-comments)."""
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _hook_problem(layers: Iterable[Mapping[str, object] | None], name: str) -> str | None:
    """Why the hook named ``name`` would not run once the CLI merged ``layers`` (lowest
    first), or ``None``. The merge is the CLI's own (``customDeepMerge``) over its schema
    defaults, for the two keys that decide: ``hooksConfig`` (``enabled`` taken from the last
    layer that sets it, ``disabled`` a union) and ``hooks`` (each event's list a
    concatenation); the CLI's config then reads ``hooksConfig.enabled ?? true`` and skips
    the hooks whose name is in ``disabled``."""
    if os.environ.get(_RESTRICTED) == "true":
        return f"{_RESTRICTED}=true makes the CLI load no hook; unset it"
    merged: dict[str, Any] = {"hooksConfig": {"enabled": True, "disabled": [], "notifications": True}, "hooks": {}}
    for layer in layers:
        if layer is not None:
            _merge_into(
                merged, {k: json.loads(json.dumps(layer[k])) for k in ("hooksConfig", "hooks") if k in layer}, ()
            )
    config = merged.get("hooksConfig")
    enabled = config.get("enabled") if isinstance(config, dict) else None
    if enabled is not None and enabled in (False, 0, ""):
        return "a settings layer turns hooks off (hooksConfig.enabled)"
    disabled = (config.get("disabled") if isinstance(config, dict) else None) or []
    if isinstance(disabled, (list, str)) and name in disabled:
        return "a settings layer lists it in hooksConfig.disabled"
    hooks = merged.get("hooks")
    groups = hooks.get("BeforeTool") if isinstance(hooks, dict) else None
    for group in groups if isinstance(groups, list) else []:
        listed = group.get("hooks") if isinstance(group, dict) else None
        if isinstance(listed, list) and any(isinstance(h, dict) and h.get("name") == name for h in listed):
            return None
    return "the merged settings do not carry it"


def _merge_into(target: dict[str, Any], source: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """The CLI's ``mergeRecursively`` (``hooksConfig.disabled`` a union, ``hooks.<event>``
    a concatenation, everything else replaced or merged as objects)."""
    for key, value in source.items():
        here = (*path, key)
        strategy = (
            "union"
            if here == ("hooksConfig", "disabled")
            else "concat"
            if len(here) == 2 and here[0] == "hooks"
            else None
        )
        found = target.get(key)
        if isinstance(found, list) and strategy is not None:
            added = value if isinstance(value, list) else [value]
            joined = found + added
            target[key] = joined if strategy == "concat" else _union(joined)
        elif isinstance(found, dict) and isinstance(value, dict):
            _merge_into(found, value, here)
        elif isinstance(value, dict):
            target[key] = {}
            _merge_into(target[key], value, here)
        else:
            target[key] = value


def _union(items: list[Any]) -> list[Any]:
    # JavaScript's Set: equal primitives once, objects each by themselves.
    out: list[Any] = []
    for item in items:
        if isinstance(item, (dict, list)) or not any(type(o) is type(item) and o == item for o in out):
            out.append(item)
    return out
