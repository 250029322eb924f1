"""MCP server configuration: read, check and merge.

A configuration file is JSON with the servers under ``mcpServers`` (the ``.mcp.json``
format agent tools share) or ``servers``::

    {"mcpServers": {
        "everything": {"type": "stdio", "command": "node", "args": ["server.js", "stdio"]},
        "search": {"type": "http", "url": "http://127.0.0.1:8931/mcp", "required": true}
    }}

Each server declares its transport in ``type``: ``stdio`` (``command``, ``args``, ``env``,
``cwd``) or ``http`` (streamable HTTP: ``url``, ``headers``); an entry with a ``command``
and no ``type`` is stdio, as agent tools read it. Optional keys: ``required`` (the run
stops when the server fails; default false: the run goes on without it),
``startup_timeout`` and ``call_timeout`` (seconds), ``tool_class`` (overrides the class
read from the server's tool annotations), ``prefix`` (put before every tool name), and
``disabled``. ``${VAR}`` in strings is replaced from the environment; ``${MCP_CONFIG_DIR}``
in a stdio server's command, args and cwd is the folder of the file that declares it.

Layers merge by server name, later winning: the user's file
(``$XDG_CONFIG_HOME/seamline/mcp.json``), the workspace's ``.mcp.json``, the profile's
servers, then files given with ``--mcp-config``. A later ``{"disabled": true}`` removes a
server an earlier layer added.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from seamline.errors import InvalidRequest

__all__ = [
    "McpServerConfig",
    "Transport",
    "load_mcp_config",
    "merge_mcp_layers",
    "parse_mcp_servers",
    "read_mcp_file",
    "user_mcp_config_path",
]

Transport = Literal["stdio", "http"]
_TRANSPORTS: Final[dict[str, Transport]] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
}
_KEYS: Final = frozenset(
    {
        "type",
        "transport",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "required",
        "startup_timeout",
        "call_timeout",
        "tool_class",
        "prefix",
        "disabled",
        "description",
    }
)
_CLASSES: Final = ("read", "write", "execute", "network")
_VAR: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerConfig:
    """One MCP server, checked."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    required: bool = False
    startup_timeout: float = 30.0
    call_timeout: float = 120.0
    tool_class: str | None = None
    prefix: str = ""
    origin: str = ""


CONFIG_DIR_VAR = "${MCP_CONFIG_DIR}"


def user_mcp_config_path() -> Path:
    """``$XDG_CONFIG_HOME/seamline/mcp.json`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "seamline" / "mcp.json"


def read_mcp_file(path: str | os.PathLike[str], *, missing_ok: bool = False) -> dict[str, dict[str, Any]]:
    """The raw server entries of one file (not yet checked)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise InvalidRequest(f"MCP config {path} does not exist") from None
    except OSError as exc:
        raise InvalidRequest(f"cannot read MCP config {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"MCP config {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"MCP config {path}: expected an object with mcpServers")
    servers = data.get("mcpServers", data.get("servers"))
    if servers is None:
        raise InvalidRequest(f"MCP config {path}: no mcpServers object")
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise InvalidRequest(f"MCP config {path}: mcpServers maps names to objects")
    folder = str(file.resolve().parent)
    return {str(k): _with_config_dir(dict(v), folder) for k, v in servers.items()}


def _with_config_dir(entry: dict[str, Any], folder: str) -> dict[str, Any]:
    """``${MCP_CONFIG_DIR}`` in a stdio server's command, args and cwd is the folder of the
    file that declares it, so a file can name a program beside it from any working folder."""
    for key in ("command", "cwd"):
        if isinstance(entry.get(key), str):
            entry[key] = entry[key].replace(CONFIG_DIR_VAR, folder)
    if isinstance(entry.get("args"), list):
        entry["args"] = [a.replace(CONFIG_DIR_VAR, folder) if isinstance(a, str) else a for a in entry["args"]]
    return entry


def merge_mcp_layers(layers: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Merge raw layers by server name; a later layer replaces a server whole."""
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for name, entry in layer.items():
            if entry.get("disabled"):
                merged.pop(name, None)
            else:
                merged[name] = dict(entry)
    return merged


def parse_mcp_servers(entries: Mapping[str, Mapping[str, Any]], *, origin: str = "MCP config") -> list[McpServerConfig]:
    """Check raw entries and build their configs; every mistake is an InvalidRequest."""
    return [_parse_one(name, entry, origin) for name, entry in entries.items()]


def _parse_one(name: str, entry: Mapping[str, Any], origin: str) -> McpServerConfig:
    where = f"{origin}: server {name!r}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InvalidRequest(f"{where}: a server name uses letters, digits, '.', '_' and '-'")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise InvalidRequest(f"{where}: unknown keys {unknown}; known: {sorted(_KEYS)}")
    declared = entry.get("type", entry.get("transport"))
    if declared is None and "command" in entry:
        declared = "stdio"
    if declared is None:
        raise InvalidRequest(f'{where}: declare its transport with "type": "stdio" or "http"')
    transport = _TRANSPORTS.get(str(declared))
    if transport is None:
        raise InvalidRequest(f"{where}: transport {declared!r} is not supported; use stdio or http (streamable HTTP)")
    tool_class = entry.get("tool_class")
    if tool_class is not None and tool_class not in _CLASSES:
        raise InvalidRequest(f"{where}: tool_class is one of {', '.join(_CLASSES)}")
    common: dict[str, Any] = {
        "name": name,
        "transport": transport,
        "required": _bool(entry.get("required", False), where, "required"),
        "startup_timeout": _seconds(entry.get("startup_timeout", 30.0), where, "startup_timeout"),
        "call_timeout": _seconds(entry.get("call_timeout", 120.0), where, "call_timeout"),
        "tool_class": tool_class,
        "prefix": _text(entry.get("prefix", ""), where, "prefix"),
        "origin": origin,
    }
    if transport == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            raise InvalidRequest(f"{where}: a stdio server needs a command")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise InvalidRequest(f"{where}: args is a list of strings")
        cwd = entry.get("cwd")
        return McpServerConfig(
            command=_expand(command),
            args=tuple(_expand(a) for a in args),
            env=_string_map(entry.get("env", {}), where, "env"),
            cwd=_expand(_text(cwd, where, "cwd")) if cwd is not None else None,
            **common,
        )
    url = entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidRequest(f"{where}: an http server needs a url starting with http:// or https://")
    return McpServerConfig(url=_expand(url), headers=_string_map(entry.get("headers", {}), where, "headers"), **common)


def _expand(value: str) -> str:
    return _VAR.sub(lambda m: os.environ.get(m.group(1), m.group(2) if m.group(2) is not None else m.group(0)), value)


def _string_map(value: object, where: str, key: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidRequest(f"{where}: {key} maps names to strings")
    return {k: _expand(v) for k, v in value.items()}


def _text(value: object, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: {key} is a string")
    return value


def _bool(value: object, where: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{where}: {key} is true or false")
    return value


def _seconds(value: object, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidRequest(f"{where}: {key} is a positive number of seconds")
    return float(value)


def load_mcp_config(
    *,
    workspace: str | os.PathLike[str] | None = None,
    profile_servers: Mapping[str, Mapping[str, Any]] | None = None,
    files: Iterable[str | os.PathLike[str]] = (),
    user_file: str | os.PathLike[str] | None = None,
    workspace_file: bool = True,
) -> list[McpServerConfig]:
    """The merged servers: user file < workspace ``.mcp.json`` < profile < ``files``.
    ``workspace_file=False`` leaves the workspace's file out (the repository chose its
    programs; ``seamline run`` loads it only with ``--project-mcp``)."""
    layers: list[Mapping[str, Mapping[str, Any]]] = []
    origins: dict[str, str] = {}

    def add(entries: Mapping[str, Mapping[str, Any]], origin: str) -> None:
        layers.append(entries)
        for name in entries:
            origins[name] = origin

    user = Path(user_file) if user_file is not None else user_mcp_config_path()
    add(read_mcp_file(user, missing_ok=True), str(user))
    if workspace is not None and workspace_file:
        local = Path(workspace) / ".mcp.json"
        add(read_mcp_file(local, missing_ok=True), str(local))
    if profile_servers:
        add({k: dict(v) for k, v in profile_servers.items()}, "profile")
    for file in files:
        add(read_mcp_file(file), str(file))
    merged = merge_mcp_layers(layers)
    return [parse_mcp_servers({name: entry}, origin=origins[name])[0] for name, entry in merged.items()]
