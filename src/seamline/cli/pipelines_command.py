"""``seamline pipelines list | show``, and the pipeline half of ``seamline run --pipeline``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Final

import msgspec

from seamline.cli.display import one_line
from seamline.cli.main import install_abort_handler, parse_options
from seamline.events import Complete, Event, Raw, Session, ToolCall, Usage, encode_event
from seamline.live import open_run
from seamline.pipeline.builtin import BUILTIN_PIPELINES, resolve_pipeline, stream_pipeline
from seamline.pipeline.controller import PipelineController
from seamline.providers.base import Provider
from seamline.providers.registry import create_provider
from seamline.sessions.sqlite_store import default_store_path, open_store
from seamline.tools.workspace import Workspace, workspace_tools

__all__ = ["add_parser", "run", "run_pipeline"]

_EPILOG: Final = """\
examples:
  seamline pipelines list
  seamline pipelines show answer-review --json
  seamline run --pipeline answer-review "How do I add a provider?"

exit codes of a pipeline run: 0 converged/completed, 1 failed, 2 usage error, 3 budget,
4 oscillating, 5 exhausted, 6 vetoed, 7 invalid transition, 130 aborted
"""


def add_parser(commands: Any) -> str:
    pipelines = commands.add_parser(
        "pipelines",
        help="list and show pipeline definitions",
        description="List the built-in pipelines and show a definition (built-in or file) with its hash.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    sub = pipelines.add_subparsers(dest="pipelines_command", metavar="SUBCOMMAND", required=True)
    plist = sub.add_parser("list", help="the built-in pipelines")
    plist.add_argument("--json", action="store_true", help="one JSON object per pipeline")
    show = sub.add_parser("show", help="one definition, complete with defaults, and its hash")
    show.add_argument("pipeline", metavar="NAME|FILE")
    show.add_argument("--json", action="store_true")
    return "pipelines"


def run(args: argparse.Namespace) -> int:
    if args.pipelines_command == "list":
        for definition in BUILTIN_PIPELINES.values():
            row = {
                "name": definition.name,
                "description": definition.description,
                "definition_hash": definition.definition_hash(),
                "phases": [p.name for p in definition.phases],
            }
            if args.json:
                print(json.dumps(row))
            else:
                print(f"{row['name']:<16} {row['description']}")
        return 0
    definition = resolve_pipeline(args.pipeline)
    data = {"definition_hash": definition.definition_hash(), "definition": definition.to_data()}
    if args.json:
        print(json.dumps(data))
        return 0
    print(f"{definition.name}  (definition hash {data['definition_hash']})")
    for phase in definition.phases:
        roles = ", ".join(phase.bound_roles())
        route = f"-> {definition.next_of(phase)}" + (f" | revise -> {phase.on_continue}" if phase.on_continue else "")
        print(f"  {phase.name:<12} roles: {roles:<20} {route}{'  (judge)' if phase.judge else ''}")
    print(f"  terminal: {', '.join(definition.terminal_phases)}")
    conv = definition.convergence
    print(
        f"  convergence: {conv.strategy}, at most {conv.max_rounds} round(s); retries: {definition.retry.max_attempts}"
    )
    return 0


def run_pipeline(args: argparse.Namespace, prompt: str) -> int:
    """``seamline run --pipeline``: drive the controller and show its events."""
    definition = resolve_pipeline(args.pipeline)
    from seamline.cli.sandbox_command import envelope_options, sandbox_for_run
    from seamline.providers.registry import provider_class

    # --sandbox holds for every role: one whose backend runs programs runs in the envelope,
    # the others' tools (seamline's own) run in the tool sandbox.
    enveloped = envelope_options(args, provider_class(args.provider))
    provider = create_provider(
        args.provider, model=args.model, options={**parse_options(args.provider_option), **(enveloped or {})}
    )
    own: dict[str, Provider] = {}
    seamline_tools = enveloped is None and any(b.provider is None for b in definition.roles.values())
    for name, binding in definition.roles.items():
        if binding.provider is None:
            continue
        cls = provider_class(binding.provider)
        role_envelope = envelope_options(args, cls) if cls.runs_own_tools else None
        seamline_tools = seamline_tools or not cls.runs_own_tools
        options = {**binding.options, **(role_envelope or {})}
        own[name] = create_provider(binding.provider, model=binding.model, options=options)
    workspace = Workspace(args.workspace)
    sandbox, journal = sandbox_for_run(args, workspace) if seamline_tools else (None, None)
    tools = workspace_tools(workspace, sandbox=sandbox, journal=journal)
    if args.allow:
        tools = tools.restrict(args.allow)
    store_path = args.store or default_store_path()
    store = None if args.no_store else open_store(args.store)
    try:
        controller = open_run(
            definition,
            provider=provider,
            providers=own,
            workspace=workspace.root,
            store=store,
            store_path=store_path,
            tools=tools,
            yes=args.yes or bool(getattr(args, "sandbox", None)),  # as a plain run: the sandbox holds the tools
            max_steps=args.max_steps,
            budget_usd=args.budget_usd,
            in_memory=args.no_store,  # --no-store: nothing on disk, the trace included
        )
        return asyncio.run(_drive(controller, prompt, json_out=args.json, args=args))
    finally:
        if store is not None:
            store.close()


async def _drive(controller: PipelineController, prompt: str, *, json_out: bool, args: argparse.Namespace) -> int:
    from seamline.cli.otel_command import otel_events

    install_abort_handler(asyncio.get_running_loop(), controller.cancel)
    out = sys.stdout.buffer
    tag = b'{"run_id":"' + controller.run_id.encode("ascii") + b'",'
    progress = _Progress() if sys.stderr.isatty() else None
    final: Complete | None = None
    totals: bytes | None = None  # the run's usage, from its `run` record: the run's complete carries it
    async for event in otel_events(args, stream_pipeline(controller, prompt), controller=controller):
        if json_out:
            # Each line carries the run id beside the event's own fields; decode_event
            # ignores the extra keys, so the lines stay events of the vocabulary.
            line = tag + encode_event(event)[1:]
            if isinstance(event, Raw) and event.source == "run" and isinstance(event.payload, dict):
                usage = event.payload.get("usage")
                totals = msgspec.json.encode(usage) if isinstance(usage, dict) else None
            elif isinstance(event, Complete) and totals is not None:
                line = line[:-1] + b',"totals":' + totals + b"}"
            out.write(line + b"\n")
        elif progress is not None:
            progress.note(event)
        if isinstance(event, Complete):
            final = event  # the run's own complete is the last one
    out.flush()
    report = controller.report
    if final is None:  # pragma: no cover - the controller always ends with complete
        return 1
    if not json_out:
        sys.stdout.write(final.text if final.text.endswith("\n") or not final.text else final.text + "\n")
        sys.stdout.flush()
        trace = controller.writer.path
        if report.detail and report.outcome != "completed":
            print(f"seamline: {one_line(report.detail)}", file=sys.stderr)  # why, as a plain run says it
        print(
            f"seamline: {controller.definition.name} {report.outcome} ({report.stop_reason}) · run {report.run_id}"
            + (f" · trace {trace}" if trace else ""),
            file=sys.stderr,
        )
    return report.exit_code


class _Progress:
    """A pipeline's progress on a terminal (stderr): each role turn as it starts, its tool
    calls as they happen, its tokens and cost when it ends; transitions and decisions."""

    def __init__(self) -> None:
        self.in_turn = False
        self.tokens_in = self.tokens_out = 0
        self.cost: float | None = 0.0

    def note(self, event: Event) -> None:
        if isinstance(event, Session):
            self.in_turn, self.tokens_in, self.tokens_out, self.cost = True, 0, 0, 0.0
            _say(f"  ▸ turn on {event.provider} {event.model or ''} · session {event.session_id[:12]}")
        elif isinstance(event, ToolCall) and self.in_turn:
            _say(f"    → {event.name} {one_line(json.dumps(event.arguments), limit=80)}")
        elif isinstance(event, Usage) and self.in_turn:
            self.tokens_in += event.input_tokens
            self.tokens_out += event.output_tokens
            self.cost = None if self.cost is None or event.cost_usd is None else self.cost + event.cost_usd
        elif isinstance(event, Complete) and self.in_turn:
            self.in_turn = False
            cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
            _say(f"    [{event.outcome} · {self.tokens_in} in / {self.tokens_out} out tokens · {cost}]")
        elif isinstance(event, Raw) and event.source == "controller" and isinstance(event.payload, dict):
            payload = event.payload
            if payload.get("what") == "transition":
                _say(f"→ {payload.get('source')} -> {payload.get('target')}")
            elif payload.get("what") == "decision":
                decision = payload.get("decision", {})
                _say(f"  decision: {decision.get('status')} — {decision.get('reason')}")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
