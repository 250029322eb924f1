"""Environment composition for spawned programs.

Layers are applied in order over a base environment; a key valued ``None`` in a layer
removes the key, which is how a provider scrubs what an ancestor process set (a routing
key, a base URL) from the environment of the program it starts.

>>> compose_env({"A": "1", "B": "2"}, {"B": None, "C": "3"})
{'A': '1', 'C': '3'}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

__all__ = ["HOST_GIT_CONFIG", "EnvLayer", "compose_env", "host_git_environment", "program_env"]

EnvLayer = Mapping[str, str | None]


def compose_env(base: Mapping[str, str] | None = None, *layers: EnvLayer) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``layers`` applied in order.

    A value of ``None`` unsets the key; any other value replaces it.
    """
    env = dict(os.environ if base is None else base)
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
    return env


#: Configuration the host's ``git`` gets from seamline (``GIT_CONFIG_COUNT``; it outranks the
#: repository's own and reaches submodules): no fsmonitor program, no recursion into
#: submodules or nested repositories, whose configuration the sandbox could write.
HOST_GIT_CONFIG: Final = (
    ("core.fsmonitor", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("fetch.recurseSubmodules", "false"),
)


def host_git_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus :data:`HOST_GIT_CONFIG`, for any
    ``git`` seamline runs or starts on the host in a workspace a sandbox has written."""
    env = dict(os.environ if base is None else base)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    count = max(count, 0)
    present = {(env.get(f"GIT_CONFIG_KEY_{i}"), env.get(f"GIT_CONFIG_VALUE_{i}")) for i in range(count)}
    for key, value in HOST_GIT_CONFIG:
        if (key, value) in present:
            continue  # given already (a seamline started by seamline)
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


def program_env(*layers: EnvLayer) -> dict[str, str]:
    """The environment of a program seamline starts on the host (an agent CLI, an ACP
    agent, OpenCode, an unsandboxed shell command): this process's environment with
    ``layers`` applied, plus :data:`HOST_GIT_CONFIG` for any ``git`` it runs in a workspace
    a sandbox may have written."""
    return host_git_environment(compose_env(None, *layers))
