"""Sandbox policies: what a sandboxed command may see, reach and spend.

A :class:`SandboxPolicy` is plain data, checked when it is built. It names the host
folders behind ``/inputs`` (read-only) and ``/outputs`` (read-write, with
``/outputs/scratch``), whether the host network is shared, which environment variables
pass in (an allowlist; names that look like credentials never pass), whether the
workspace's ``.git/config`` and ``.git/hooks`` may be written (not by default), whether
the sandbox may leave new git repositories inside the workspace (not by default: see
:mod:`seamline.sandbox.git_quarantine`), and the :class:`ResourceLimits` of each command.

>>> policy = SandboxPolicy.from_mapping({"network": False, "limits": {"wall_s": 5}})
>>> policy.limits.wall_s
5.0
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "SECRET_NAME",
    "ResourceLimits",
    "SandboxPolicy",
    "is_secret_name",
    "load_policy",
]

# Names passed through from the parent when set; everything else is cleared.
DEFAULT_ENV_ALLOW: Final = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")

# A variable whose name matches this is treated as a credential: it never enters a
# sandbox, even when an allowlist names it, and a command that names it is refused.
SECRET_NAME: Final = re.compile(
    r"(API_?KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|PRIVATE_KEY|AUTH|SESSION_KEY|"
    r"^(ANTHROPIC|OPENAI|GEMINI|GOOGLE|AZURE|AWS|MISTRAL|GROQ|COHERE|DEEPSEEK|XAI|OPENROUTER|HF|HUGGING)_)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable name looks like a credential."""
    return bool(SECRET_NAME.search(name))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceLimits:
    """Limits of one sandboxed command.

    ``wall_s`` wall-clock seconds; ``cpu_s`` CPU seconds (RLIMIT_CPU); ``memory_bytes``
    memory of the whole sandbox (a memory cgroup) where the machine lets seamline make
    one, else the address space of each process (RLIMIT_AS; ``seamline sandbox check``
    says which); ``max_processes`` processes of the sandbox (a pids cgroup, else
    RLIMIT_NPROC counted inside the sandbox's own user namespace); ``output_bytes``
    captured output, beyond which the command is stopped and its output truncated with a
    marker; ``tmp_bytes`` the size of the private ``/tmp`` (bwrap).
    """

    wall_s: float = 60.0
    cpu_s: int = 60
    memory_bytes: int = 4 * 1024**3
    max_processes: int = 128
    output_bytes: int = 1_000_000
    tmp_bytes: int = 512 * 1024**2

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise InvalidRequest(f"sandbox limit {f.name} must be a positive number, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxPolicy:
    """What a sandboxed command may see, reach and spend; see the module docstring."""

    inputs: Path | None = None
    outputs: Path | None = None
    network: bool = False
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    env_set: Mapping[str, str] = field(default_factory=dict)
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    #: ``.git/config`` and ``.git/hooks`` of the workspace are read-only inside unless this
    #: is set: the host's next ``git`` would run what they name (``core.fsmonitor``, hooks).
    git_config_writable: bool = False
    #: A repository the sandbox creates inside the workspace (a nested ``.git`` folder or
    #: file, a bare repository) is quarantined after the command or turn unless this is
    #: set: the host's next ``git status`` recurses into a nested one and runs its config.
    #: Configuration that names a program and new hooks are quarantined either way.
    nested_repositories: bool = False
    #: ``network.allow``: hosts (``host[:port]``) a whole-process sandbox (the envelope of an
    #: agent CLI) may reach through seamline's egress proxy, besides its model endpoint
    network_allow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (*self.env_allow, *self.env_set):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise InvalidRequest(f"sandbox env: {name!r} is not a variable name")
            if is_secret_name(name):
                raise InvalidRequest(
                    f"sandbox env: {name} looks like a credential; credentials never enter the sandbox"
                )
        if self.inputs is not None and not self.inputs.is_dir():
            raise InvalidRequest(f"sandbox inputs {self.inputs} is not a folder")

    def environment(self, parent: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a sandboxed command: fixed names, the allowlist, ``env_set``."""
        source = os.environ if parent is None else parent
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PWD": "/workspace",
            "WORKSPACE": "/workspace",
            "INPUTS": "/inputs",
            "OUTPUTS": "/outputs",
            "SCRATCH": "/outputs/scratch",
        }
        for name in self.env_allow:
            if name in source and not is_secret_name(name):
                env[name] = source[name]
        env.update(self.env_set)
        return env

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], *, base: Path | None = None) -> SandboxPolicy:
        """Build a policy from parsed TOML/JSON; relative folders are taken from ``base``."""
        known = {
            "inputs",
            "outputs",
            "network",
            "env_allow",
            "env_set",
            "limits",
            "git_config_writable",
            "nested_repositories",
        }
        unknown = set(data) - known
        if unknown:
            raise InvalidRequest(f"sandbox policy: unknown keys {sorted(unknown)}; known: {sorted(known)}")
        root = base or Path.cwd()

        def folder(key: str) -> Path | None:
            value = data.get(key)
            if value is None:
                return None
            if not isinstance(value, str):
                raise InvalidRequest(f"sandbox policy: {key} must be a path")
            return (root / value).resolve()

        limits_data = data.get("limits", {})
        if not isinstance(limits_data, Mapping):
            raise InvalidRequest("sandbox policy: limits must be a table")
        limit_names = {f.name for f in fields(ResourceLimits)}
        bad = set(limits_data) - limit_names
        if bad:
            raise InvalidRequest(f"sandbox policy: unknown limits {sorted(bad)}; known: {sorted(limit_names)}")
        try:
            limits = ResourceLimits(
                **{k: (float(v) if k == "wall_s" else int(v)) for k, v in limits_data.items()}  # type: ignore[arg-type]
            )
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"sandbox policy: bad limit: {exc}") from None
        network = data.get("network", False)
        network_allow: list[str] = []
        if isinstance(network, Mapping):
            unknown_net = set(network) - {"allow"}
            allow = network.get("allow", [])
            if unknown_net or not isinstance(allow, list) or not all(isinstance(h, str) for h in allow):
                raise InvalidRequest('sandbox policy: network must be true, false or {allow = ["host[:port]", ...]}')
            from seamline.sandbox.egress import AllowList

            network_allow = AllowList.parse(allow).render()  # checks each entry
            network = False
        if not isinstance(network, bool):
            raise InvalidRequest('sandbox policy: network must be true, false or {allow = ["host[:port]", ...]}')
        git_writable = data.get("git_config_writable", False)
        if not isinstance(git_writable, bool):
            raise InvalidRequest("sandbox policy: git_config_writable must be true or false")
        nested = data.get("nested_repositories", False)
        if not isinstance(nested, bool):
            raise InvalidRequest("sandbox policy: nested_repositories must be true or false")
        env_allow = data.get("env_allow", list(DEFAULT_ENV_ALLOW))
        env_set = data.get("env_set", {})
        if not isinstance(env_allow, list) or not all(isinstance(n, str) for n in env_allow):
            raise InvalidRequest("sandbox policy: env_allow must be a list of names")
        if not isinstance(env_set, Mapping) or not all(isinstance(v, str) for v in env_set.values()):
            raise InvalidRequest("sandbox policy: env_set must map names to strings")
        return cls(
            inputs=folder("inputs"),
            outputs=folder("outputs"),
            network=network,
            env_allow=tuple(env_allow),
            env_set=dict(env_set),
            limits=limits,
            git_config_writable=git_writable,
            nested_repositories=nested,
            network_allow=tuple(network_allow),
        )


def load_policy(path: str | os.PathLike[str]) -> SandboxPolicy:
    """Read a policy file: TOML (``.toml``) or JSON; folders are relative to the file."""
    import json

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read sandbox policy {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"sandbox policy {path} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"sandbox policy {path}: expected a table of settings")
    return SandboxPolicy.from_mapping(data, base=file.resolve().parent)
