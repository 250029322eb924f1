"""``seamline acp``: seamline as an Agent Client Protocol agent on stdin/stdout."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, Final

from seamline.cli.main import SeamlineUsage, parse_options

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline acp                                  # the offline provider, in an ACP client
  seamline acp --provider claude-code --model sonnet
  seamline acp --provider scripted -o script=demo.yaml
  seamline acp --pipeline answer-review         # each prompt runs the pipeline; phases are the plan
  seamline run --provider acp -o command="seamline acp --provider scripted -o script=demo.yaml" "hi"

stdout carries the protocol (JSON-RPC 2.0, one message per line); everything else goes
to stderr. Sessions live in the store like those of `seamline run`: an ACP client can
list and load them. Tool calls that need approval are asked of the client
(session/request_permission); permission rules and hard denials apply first.
See docs/acp-agent.md.
"""


def add_parser(commands: Any) -> str:
    acp = commands.add_parser(
        "acp",
        help="serve as an ACP agent on stdio (for Zed, JetBrains, Toad and other ACP clients)",
        description="Speak the Agent Client Protocol (v1) as an agent on stdin/stdout, on any provider.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    acp.add_argument("--provider", "-p", default="offline", metavar="NAME", help="backend to use (default: offline)")
    acp.add_argument("--model", "-m", metavar="NAME", help="model name, in the provider's own terms")
    acp.add_argument(
        "--provider-option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="provider option; repeatable (see `seamline providers list --options`)",
    )
    acp.add_argument(
        "--store",
        metavar="PATH|URL",
        help="session store: a file or postgresql://… (default: $SEAMLINE_STORE or the user data dir)",
    )
    acp.add_argument("--no-store", action="store_true", help="keep nothing on disk (no session/load or list)")
    acp.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "container"),
        help="run shell commands isolated and journal every edit (as `seamline run --sandbox`); "
        "write and shell tools then run without asking",
    )
    acp.add_argument("--sandbox-policy", metavar="FILE", help="sandbox policy file (TOML or JSON); needs --sandbox")
    acp.add_argument(
        "--pipeline",
        metavar="NAME|FILE",
        help="run every prompt as this pipeline (built in: single, answer-review; or a YAML/JSON file); "
        "its phases are the client's plan",
    )
    acp.add_argument("--yes", "-y", action="store_true", help="allow write and shell tools without asking the client")
    acp.add_argument("--budget-usd", type=float, metavar="USD", help="stop each turn once its cost passes this")
    acp.add_argument("--max-steps", type=int, default=50, metavar="N", help="most model calls in a turn (default: 50)")
    acp.add_argument(
        "--cancel-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long a cancelled turn may take to settle before it is stopped outright (default: 5)",
    )
    return "acp"


def _enveloped(args: argparse.Namespace, options: dict[str, str]) -> dict[str, str]:
    """A backend that runs programs runs in the envelope by default (``-o sandbox=none``
    turns it off); refused at start, exit 2, where it cannot be isolated."""
    from seamline.cli.sandbox_command import policy_envelope_options
    from seamline.errors import InvalidRequest, SandboxViolation
    from seamline.providers.programs.envelope_launch import operator_envelope
    from seamline.providers.registry import provider_class
    from seamline.sandbox.envelope import envelope_refusal

    cls = provider_class(args.provider)
    if not cls.runs_own_tools:
        return options
    if args.sandbox == "container":
        raise SeamlineUsage(f"--sandbox container: {cls.name} runs its own programs; use --sandbox bwrap or auto")
    mode = options.get("sandbox") or args.sandbox or "auto"
    merged = operator_envelope(cls, options, mode=mode)
    if merged.get("sandbox") in ("bwrap", "auto"):
        try:
            envelope_refusal(merged["sandbox"], who=cls.name)
        except SandboxViolation as exc:
            raise SeamlineUsage(f"(to run it unisolated, say so: -o sandbox=none) {exc.message}") from None
        # The policy's network.allow and [limits] hold in the envelope, or it does not start.
        hosts: list[str] = []
        try:
            merged.update(policy_envelope_options(args.sandbox_policy, who=cls.name, hosts=hosts))
        except (SandboxViolation, InvalidRequest) as exc:
            raise SeamlineUsage(exc.message) from None
        merged = operator_envelope(cls, merged, mode=merged["sandbox"], allow_hosts=hosts)
    return merged


def run(args: argparse.Namespace) -> int:
    from seamline.acp_agent import AcpAgentSettings, serve_stdio
    from seamline.acp_agent.stdio import finish_copies
    from seamline.cli.run_flags import flag_options
    from seamline.cli.sandbox_command import sandbox_for_run
    from seamline.runner import make_provider
    from seamline.sessions.rules import PermissionRules
    from seamline.sessions.sqlite_store import default_store_path, open_store
    from seamline.tools.workspace import Workspace, workspace_tools

    if args.max_steps < 1:
        raise SeamlineUsage("--max-steps must be at least 1")
    if args.cancel_grace <= 0:
        raise SeamlineUsage("--cancel-grace must be positive")
    if args.budget_usd is not None and args.budget_usd < 0:
        raise SeamlineUsage("--budget-usd cannot be negative")
    given = flag_options(args, options=_enveloped(args, parse_options(args.provider_option)))
    make_provider(given.provider, model=given.model, options=given.options)  # a wrong name or option fails here
    if args.sandbox_policy and not args.sandbox:
        raise SeamlineUsage("--sandbox-policy needs --sandbox auto|bwrap|container")

    def tools(workspace: Workspace) -> Any:
        sandbox, journal = sandbox_for_run(args, workspace)
        return workspace_tools(workspace, sandbox=sandbox, journal=journal)

    store = None if args.no_store else open_store(args.store)
    given = given.replace(store=store)
    pipeline = None
    if args.pipeline:
        from seamline.acp_agent.pipeline_turns import PipelineSettings
        from seamline.pipeline.builtin import resolve_pipeline
        from seamline.sessions.sqlite_store import SQLiteStore

        pipeline = PipelineSettings(
            definition=resolve_pipeline(args.pipeline),
            run=given.replace(store=store if isinstance(store, SQLiteStore) else None),
            store_path=args.store,
        )
    rules = None
    if store is not None and (args.store is None or "://" not in str(args.store)):
        rules = PermissionRules(args.store or default_store_path())
    settings = AcpAgentSettings(run=given, rules=rules, tools=tools, cancel_grace=args.cancel_grace, pipeline=pipeline)
    try:
        asyncio.run(serve_stdio(settings))
    finally:
        finish_copies()  # a regular file as stdout: every answer is in it before we exit
        if rules is not None:
            rules.close()
        if store is not None:
            store.close()
    return 0
