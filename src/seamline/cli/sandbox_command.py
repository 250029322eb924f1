"""``seamline sandbox check``: what isolation this machine can give, and why not.

Also builds the sandbox and the edit journal that ``seamline run --sandbox`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.providers.base import Provider
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sandbox.policy import SandboxPolicy, load_policy
from seamline.sandbox.probe import SANDBOX_MODES, SandboxMode, open_sandbox, probe
from seamline.sandbox.runtime import Sandbox
from seamline.sessions.sqlite_store import default_store_path
from seamline.tools.workspace import Workspace

__all__ = ["add_parser", "envelope_options", "policy_envelope_options", "run", "sandbox_for_run"]

_EPILOG: Final = """\
examples:
  seamline sandbox check                  probe bubblewrap (what `--sandbox auto` would use)
  seamline sandbox check --mode container
  seamline sandbox check --json

exit codes: 0 the mode is available, 1 it is not (the output says why and how to fix it)
"""


def add_parser(commands: Any) -> str:
    sandbox = commands.add_parser(
        "sandbox",
        help="check what isolation this machine can give the file and shell tools",
        description="Inspect the sandbox that `seamline run --sandbox` would use.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    actions = sandbox.add_subparsers(dest="sandbox_action", metavar="ACTION")
    check = actions.add_parser("check", help="probe the sandbox backends and report what works")
    check.add_argument("--mode", choices=SANDBOX_MODES, default="auto", help="backend to probe (default: auto)")
    check.add_argument("--bwrap", metavar="PATH", help="bubblewrap binary to use (default: $SEAMLINE_BWRAP or PATH)")
    check.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return "sandbox"


def run(args: argparse.Namespace) -> int:
    if args.sandbox_action != "check":
        raise SeamlineUsage("say what to do: `seamline sandbox check`")
    report = probe(args.mode, bwrap=args.bwrap)
    from seamline.sandbox.envelope_limits import envelope_limit_facts

    envelope = envelope_limit_facts()  # the whole-program envelope of agent CLIs, ACP agents, OpenCode
    if args.json:
        print(
            json.dumps(
                {
                    "mode": report.mode,
                    "ok": report.ok,
                    "backend": report.backend,
                    "bwrap": report.bwrap,
                    "version": report.version,
                    "features": report.features,
                    "process_limit": report.process_limit,
                    "memory_limit": report.memory_limit,
                    "unix_sockets": report.unix_sockets,
                    "tmp_size": report.tmp_size,
                    "problems": report.problems,
                    "guidance": report.guidance,
                    **envelope,
                }
            )
        )
    else:
        print(report.render())
        print(f"agent envelope process limit: {envelope['envelope_process_limit']}")
        print(f"agent envelope memory limit: {envelope['envelope_memory_limit']}")
    return 0 if report.ok else 1


def sandbox_for_run(args: argparse.Namespace, workspace: Workspace) -> tuple[Sandbox | None, EditJournal | None]:
    """The sandbox and journal of ``seamline run --sandbox MODE``; ``(None, None)`` without it.

    The journal lives beside the session store (``<store>.edits.db``); ``/outputs`` is the
    policy's folder, else ``outputs/<time>-<id>`` beside the store (a temporary folder with
    ``--no-store``, which also keeps no journal).
    """
    mode: SandboxMode | None = getattr(args, "sandbox", None)
    policy_file: str | None = getattr(args, "sandbox_policy", None)
    if mode is None:
        if policy_file:
            raise SeamlineUsage("--sandbox-policy needs --sandbox auto|bwrap|container")
        return None, None
    policy = load_policy(policy_file) if policy_file else SandboxPolicy()
    store_file = _store_file(getattr(args, "store", None))
    if policy.outputs is not None:
        outputs = policy.outputs
    elif getattr(args, "no_store", False) or store_file is None:
        outputs = Path(tempfile.mkdtemp(prefix="seamline-outputs-"))
    else:
        outputs = store_file.parent / "outputs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    sandbox = open_sandbox(mode, workspace=workspace.root, outputs=outputs, policy=policy)
    journal = None
    if not getattr(args, "no_store", False):
        journal = EditJournal(journal_path_for(store_file or default_store_path()))
    return sandbox, journal


def _store_file(location: str | None) -> Path | None:
    """The store's file, or None for a server store (postgresql://…)."""
    where = location or str(default_store_path())
    if where.startswith(("postgresql://", "postgres://")):
        data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(data_home) / "seamline" / "store.db"
    return Path(where).expanduser()


def envelope_options(args: argparse.Namespace, provider_cls: type[Provider]) -> dict[str, str] | None:
    """The provider options that put a program-running backend in the envelope for
    ``--sandbox MODE`` (with ``--allow-host`` and the policy's ``network.allow``), or None
    for a backend whose tools seamline runs itself (the tool sandbox applies then).

    A backend that runs programs and cannot be isolated is refused (exit 2) with the reason
    and the fix: ``--sandbox`` never silently does nothing.
    """
    mode: str | None = getattr(args, "sandbox", None)
    hosts: list[str] = list(getattr(args, "allow_host", None) or [])
    if not provider_cls.runs_own_tools:
        if hosts:
            raise SeamlineUsage("--allow-host applies to backends that run programs (agent CLIs, ACP, OpenCode)")
        return None
    if mode is None:
        if hosts or getattr(args, "sandbox_policy", None):
            raise SeamlineUsage("--allow-host and --sandbox-policy need --sandbox bwrap|auto")
        return None
    name = provider_cls.name
    if "sandbox" not in provider_cls.options:
        raise SeamlineUsage(
            f"--sandbox {mode}: {name} runs its own programs and seamline cannot isolate it yet; "
            "nothing was run. Run it without --sandbox (unisolated) or choose a backend that supports "
            "the envelope (claude-code, codex, gemini-cli, acp, opencode)"
        )
    if mode == "container":
        raise SeamlineUsage(
            f"--sandbox container: {name} runs its own programs; seamline isolates them with bubblewrap "
            "(--sandbox bwrap or auto). Nothing was run"
        )
    from seamline.errors import InvalidRequest, SandboxViolation
    from seamline.sandbox.egress import AllowList
    from seamline.sandbox.envelope import envelope_refusal

    try:
        limits = policy_envelope_options(getattr(args, "sandbox_policy", None), who=name, hosts=hosts)
        AllowList.parse(hosts)
        envelope_refusal(mode, who=name)
    except (SandboxViolation, InvalidRequest) as exc:
        raise SeamlineUsage(exc.message) from None
    options = {"sandbox": mode, **limits}
    if hosts:
        options["allow_hosts"] = ",".join(hosts)
    return options


def policy_envelope_options(policy_file: str | None, *, who: str, hosts: list[str]) -> dict[str, str]:
    """What a ``--sandbox-policy`` gives a program in the envelope: its ``network.allow``
    (added to ``hosts``) and its ``[limits]`` as the options ``max_processes``,
    ``memory_bytes`` and ``tmp_bytes``, checked to hold here (:class:`SandboxViolation`)
    or refused when they cannot apply to a whole program (:class:`InvalidRequest`)."""
    if not policy_file:
        return {}
    from seamline.sandbox.bwrap import find_prlimit
    from seamline.sandbox.envelope_limits import EnvelopeLimits, check_envelope_limits, policy_limit_options

    hosts += list(load_policy(policy_file).network_allow)
    options = policy_limit_options(policy_file)
    check_envelope_limits(EnvelopeLimits.from_options(options), who=who, prlimit=find_prlimit())
    return options
