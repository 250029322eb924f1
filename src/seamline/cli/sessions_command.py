"""``seamline sessions list | show | resume | fork | export | rm``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from seamline.cli.display import JsonDisplay, TextDisplay, show_journal_scans, spin_while, turn_ended
from seamline.cli.extension_flags import cli_approval
from seamline.cli.main import EXIT_CODES, SeamlineUsage, install_abort_handler, parse_options
from seamline.cli.watch_rows import shown_workspace, worktree_fields
from seamline.events import Complete
from seamline.loop.messages import Message
from seamline.providers.base import ProviderSession
from seamline.providers.failover import Failover, fallback_backends
from seamline.providers.registry import create_provider
from seamline.runner import public_options, session_run_options
from seamline.sessions.handoffs import backend_spans, handoffs_of
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import SessionRecord, session_title
from seamline.sessions.sqlite_store import open_store
from seamline.tools.workspace import Workspace, workspace_tools

__all__ = ["add_parser", "continue_session", "run"]


_EPILOG = """\
ID is a session id as `seamline sessions list` prints it (a unique prefix of at least
four characters will do); a text run on a terminal ends with its id.

examples:
  seamline sessions list
  seamline sessions list --all --json
  seamline sessions show 63fe
  seamline sessions resume 63fe "And what about the raw log?"
  seamline sessions fork 63fe --at 4 --prompt "Try it another way"
  seamline sessions export 63fe > session.json
  seamline sessions rm 63fe
"""


def add_parser(commands: Any) -> str:
    sessions = commands.add_parser(
        "sessions",
        help="list, inspect, resume, fork, export and remove stored sessions",
        description="Sessions kept in the store (--store PATH or URL, else $SEAMLINE_STORE or the user data dir). "
        "An ID may be shortened to a unique prefix of at least four characters.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    sub = sessions.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", metavar="PATH|URL", help="the store (a file, or postgresql://…)")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("list", help="the newest sessions first")
    common(p)
    p.add_argument("--limit", type=int, default=50, metavar="N")
    p.add_argument("--all", "-a", action="store_true", help="also sessions opened but never started (not_started)")
    p = sub.add_parser("show", help="one session: record, cost, files touched, transcript")
    common(p)
    p.add_argument("id", metavar="ID")
    for name, text in (("resume", "continue a session with a new prompt"), ("fork", "start a new session from one")):
        p = sub.add_parser(
            name,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. The provider options (never secrets), model, sandbox, budget, "
            "allowlist and system prompt the session was started with are reused; a flag given again overrides "
            "them and is recorded.",
        )
        common(p)
        p.add_argument("id", metavar="ID")
        if name == "fork":
            p.add_argument(
                "--at", type=int, metavar="MESSAGE", help="fork after this transcript message (default: latest)"
            )
            p.add_argument("--prompt", metavar="PROMPT", help="run this prompt on the fork right away")
        else:
            p.add_argument("prompt", metavar="PROMPT")
        p.add_argument(
            "--provider",
            "-p",
            metavar="NAME",
            help="continue on another backend (a handoff: the transcript is its history; default: the session's)",
        )
        p.add_argument("--model", "-m", metavar="NAME")
        p.add_argument("--provider-option", "-o", action="append", default=[], metavar="KEY=VALUE")
        p.add_argument("--workspace", "-w", metavar="DIR", help="default: the session's own workspace")
        p.add_argument("--yes", "-y", action="store_true", help="allow tools that write or execute")
        p.add_argument("--max-steps", type=int, default=50, metavar="N")
        p.add_argument(
            "--budget-usd", type=float, metavar="USD", help="stop the turn once its cost passes this (default: kept)"
        )
        p.add_argument(
            "--allow", action="append", metavar="TOOL", help="offer only these tools; repeatable (default: kept)"
        )
        p.add_argument(
            "--sandbox", choices=("auto", "bwrap", "container"), help="isolate shell and journal edits (default: kept)"
        )
        p.add_argument("--sandbox-policy", metavar="FILE", help="sandbox policy file (default: kept)")
    p = sub.add_parser("export", help="the session, its raw log, ledger and transcript as JSON")
    common(p)
    p.add_argument("id", metavar="ID")
    p = sub.add_parser("rm", help="remove a session and everything recorded of it")
    common(p)
    p.add_argument("id", metavar="ID")
    return "sessions"


def run(args: argparse.Namespace) -> int:
    # Reading (and removing) never creates a store: a missing one holds no sessions.
    store = open_store(args.store, read_only=args.sessions_command in ("list", "show", "export", "rm"))
    try:
        command = args.sessions_command
        if command == "list":
            return _list(store, args)
        if command == "show":
            return _show(store, args)
        if command == "export":
            return _export(store, args)
        if command == "rm":
            record = store.require(args.id)
            if (record.run_options.get("worktree") or {}).get("state") == "open":
                raise SeamlineUsage(
                    f"run {record.id[:12]} has an open worktree: `seamline merge` or `seamline discard` it first"
                )
            store.delete_session(record.id)
            from seamline.providers.programs.envelope_launch import remove_envelope_homes

            remove_envelope_homes(record.id)  # what an enveloped agent CLI kept of it
            _out(args, {"removed": record.id}, f"removed {record.id}")
            return 0
        return continue_session(store, args, fork=command == "fork")
    finally:
        store.close()


def _row(record: SessionRecord, store: SessionStore) -> dict[str, Any]:
    totals = store.totals(record.id, include_descendants=False)
    tree = record.run_options.get("worktree")
    tree = tree if isinstance(tree, dict) else {}
    return {
        **asdict(record),
        "workspace": shown_workspace(record),  # a removed worktree's: the main repository's
        "cost_usd": totals.cost_usd if totals.cost_known else None,
        "cost": totals.describe_cost(),
        "title": session_title(store.first_prompt(record.id)),
        "branch": tree.get("branch"),  # a worktree run's branch and state (open, merged, discarded)
        "worktree_state": tree.get("state"),
    }


def _short_path(path: str | None) -> str:
    if not path:
        return ""
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home != "/" and (path == home or path.startswith(home + "/")) else path


def _list(store: SessionStore, args: argparse.Namespace) -> int:
    for record in store.list_sessions(limit=args.limit):
        if record.status == "not_started" and not args.all:
            continue
        row = _row(record, store)
        if args.json:
            print(json.dumps(row))
        else:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created_at))
            parent = f" ← {record.parent_id[:8]}" if record.parent_id else ""
            title = row["title"] or ("(fork)" if record.parent_id else "(no prompt)")
            where = f"  · {_short_path(row['workspace'])}" if row["workspace"] else ""
            branch = f"  ⎇ {row['branch']} ({row['worktree_state']})" if row["branch"] else ""
            print(
                f"{record.id[:12]}  {when}  {record.status:<11} {record.provider:<12} {row['cost']:<8}  "
                f"{title}{branch}{where}{parent}"
            )
    return 0


def _show(store: SessionStore, args: argparse.Namespace) -> int:
    record = store.require(args.id)
    own = store.totals(record.id, include_descendants=False)
    tree = store.totals(record.id)
    files = store.files_touched(record.id)
    transcript = store.transcript(record.id)
    children = store.descendants(record.id)
    handoffs = handoffs_of(record.metadata)
    spans = backend_spans(record.provider, record.model, handoffs, store.usage_rows(record.id)) if handoffs else []
    if args.json:
        print(
            json.dumps(
                {
                    "session": asdict(record),
                    "totals": {**asdict(own), "cost": own.describe_cost()},
                    "totals_with_descendants": {**asdict(tree), "cost": tree.describe_cost()},
                    "descendants": children,
                    "backends": [
                        {
                            "provider": span.provider,
                            "model": span.model,
                            "turns": list(span.turns),
                            "totals": {**asdict(span.totals), "cost": span.totals.describe_cost()},
                        }
                        for span in spans
                    ],
                    "files": [asdict(f) for f in files],
                    "transcript": [asdict(e) for e in transcript],
                }
            )
        )
        return 0
    print(f"session   {record.id}")
    print(
        f"provider  {record.provider} ({record.model or 'default model'}); provider id {record.provider_session_id or '-'}"
    )
    print(f"status    {record.status}; parent {record.parent_id or '-'}; workspace {shown_workspace(record) or '-'}")
    if worktree_fields(record.run_options).get("branch"):
        print(f"worktree  {_worktree_line(worktree_fields(record.run_options))}")
    print(f"tokens    {own.input_tokens} in / {own.output_tokens} out; cost {own.describe_cost()}")
    for span in spans:  # a session continued on other backends: each one's turns and figures
        first, last = span.turns
        turns = f"turn {first}" if first == last else f"turns {first}–{last}" if last else f"since turn {first}"
        print(
            f"backend   {span.provider} ({span.model or 'default model'}), {turns}: "
            f"{span.totals.input_tokens} in / {span.totals.output_tokens} out; cost {span.totals.describe_cost()}"
        )
    for switch in handoffs:  # a turn a backend could not take (--fallback), and why
        if switch.get("failover"):
            turn = int(switch.get("after_turn") or 0) + 1
            why = str(switch.get("message") or "").splitlines()[0][:120] if switch.get("message") else ""
            print(f"failover  turn {turn}: {switch.get('from')} → {switch.get('to')} ({switch.get('reason')}: {why})")
    if children:
        print(f"with {len(children)} fork(s)/child(ren): cost {tree.describe_cost()}")
    for touch in files:
        print(f"file      {touch.path} ({', '.join(touch.kinds)})")
    for entry in transcript:
        text = (
            entry.content
            if entry.kind != "tool_call"
            else f"{entry.data.get('name')}({json.dumps(entry.data.get('arguments'))})"
        )
        print(f"[{entry.index}] {entry.kind:<11} {text[:200].replace(chr(10), ' ')}")
    return 0


def _worktree_line(tree: dict[str, Any]) -> str:
    """A worktree run's branch and state, and its worktree while it is there."""
    state, path = tree.get("state"), tree.get("path")
    if state == "merged":
        commit = tree.get("merge_commit")
        into = f" into {tree['base_branch']}" if tree.get("base_branch") else ""
        return f"{tree['branch']} (merged{into}{f' as {commit[:12]}' if commit else ''}; worktree removed)"
    if state == "discarded":
        return f"{tree['branch']} (discarded; worktree and branch removed)"
    where = f"at {path}" if path and os.path.isdir(path) else "(its worktree is gone)"
    return f"{tree['branch']} ({state}) {where}"


def _export(store: SessionStore, args: argparse.Namespace) -> int:
    record = store.require(args.id)
    print(
        json.dumps(
            {
                "session": asdict(record),
                "raw_log": [asdict(r) for r in store.raw_rows(record.id)],
                "usage": [asdict(u) for u in store.usage_rows(record.id)],
                "transcript": [asdict(e) for e in store.transcript(record.id)],
            }
        )
    )
    return 0


def _out(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(json.dumps(data) if args.json else text)


def continue_session(store: SessionStore, args: argparse.Namespace, *, fork: bool) -> int:
    """Resume (or fork) a stored session and run ``args.prompt`` on it, with the options the
    session was started with; a flag given again overrides them and is recorded."""
    record = store.require(args.id)
    if args.max_steps < 1:
        raise SeamlineUsage("--max-steps must be at least 1")
    kept = record.run_options
    from seamline.worktrees import continuing, turn_committer

    tree = continuing(record)  # a worktree run goes on in its worktree; a merged or discarded one cannot
    if tree is not None and (fork or args.workspace):
        raise SeamlineUsage(
            f"run {record.id[:12]} works in its worktree: it can be resumed there, not forked or moved (--workspace)"
        )
    given = parse_options(args.provider_option)
    wanted = getattr(args, "provider", None) if getattr(args, "handoff", True) else None
    handoff = wanted is not None and wanted != record.provider  # another backend takes the session over
    name = wanted if handoff and wanted else record.provider
    model = args.model if handoff else args.model or kept.get("model") or record.model
    before = {} if handoff else kept.get("provider_options", {})  # the old backend's options stay with it
    provider = create_provider(name, model=model, options={**before, **given})
    root = args.workspace or record.workspace or "."
    workspace = Workspace(root)
    if getattr(args, "sandbox", None) is None and kept.get("sandbox"):
        args.sandbox = kept["sandbox"]
        if getattr(args, "sandbox_policy", None) is None:
            args.sandbox_policy = kept.get("sandbox_policy")
    budget = args.budget_usd if getattr(args, "budget_usd", None) is not None else kept.get("budget_usd")
    on_budget = getattr(args, "on_budget", None) or kept.get("on_budget") or "fail"  # `runs raise`: pause
    allow = getattr(args, "allow", None) or kept.get("allow")
    system_prompt = kept.get("system_prompt")
    from seamline.cli.run_flags import fallback_options, sandbox_run_options
    from seamline.cli.sandbox_command import envelope_options, sandbox_for_run

    backups = fallback_backends(fallback_options(args), budget_usd=budget)  # `run --session ID --fallback P`
    enveloped = envelope_options(args, type(provider))  # an agent CLI runs in the envelope, or is refused
    if enveloped:
        provider = create_provider(name, model=model, options={**before, **given, **enveloped})
        sandbox, journal = None, None
    else:
        sandbox, journal = sandbox_for_run(args, workspace)
    tools = workspace_tools(workspace, sandbox=sandbox, journal=journal)
    if allow:
        tools = tools.restrict(allow)
    approval = cli_approval(store, workspace, yes=args.yes or sandbox is not None)
    effective = session_run_options(
        provider,
        budget_usd=budget,
        allow=allow,
        instructions=system_prompt,
        extra={**sandbox_run_options(args), "model": args.model},  # a model given again is kept
    )
    if on_budget != "fail":
        effective["on_budget"] = on_budget
    display: JsonDisplay | TextDisplay = JsonDisplay() if args.json else TextDisplay()

    async def drive() -> int:
        if fork:
            session = await provider.fork(
                record.id, store=store, at=args.at, tools=tools, approval=approval, handoff=handoff
            )
        else:
            session = await provider.resume(record.id, store=store, tools=tools, approval=approval, handoff=handoff)
            if tree is not None:
                session.turn_hooks.append(turn_committer(tree))  # each turn a commit on the run's branch
        if system_prompt and not (session.messages and session.messages[0].role == "system"):
            # The system prompt is not part of the transcript: put it back in front.
            session.messages.insert(0, Message(role="system", content=system_prompt))
        store.set_run_options(session.session_id, effective)
        session.on_budget = "pause" if on_budget == "pause" else "fail"
        show_journal_scans(display, session)
        if fork and not args.prompt:
            await provider.close(session)
            _out(
                args,
                {"session_id": session.session_id, "parent_id": record.id},
                f"forked {record.id[:12]} into {session.session_id}",
            )
            return 0
        turns = Failover(session, backups, on_open=_taken_over(store, display)) if backups else None
        return await _turn(provider, session, args.prompt, args, display, budget, turns)

    try:
        return asyncio.run(drive())
    finally:
        display.close()


def _taken_over(store: SessionStore, display: JsonDisplay | TextDisplay) -> Callable[[ProviderSession], None]:
    """A fallback took the session over: the store keeps its options, for the next `--session`."""

    def met(session: ProviderSession) -> None:
        store.set_run_options(session.session_id, {"provider_options": public_options(session.provider) or None})
        show_journal_scans(display, session)

    return met


async def _turn(
    provider: Any,
    session: ProviderSession,
    prompt: str,
    args: argparse.Namespace,
    display: JsonDisplay | TextDisplay,
    budget_usd: float | None,
    turns: Failover | None = None,
) -> int:
    async def abort() -> None:
        serving = turns.session if turns is not None else session  # a fallback's, once one took over
        await serving.provider.abort(serving)

    install_abort_handler(asyncio.get_running_loop(), abort)
    final: Complete | None = None
    from seamline.cli.otel_command import otel_events, turn_run_id  # the turn's spans (--otel or the env)

    run_id = turn_run_id(session.session_id, session.turn + 1)
    if getattr(args, "raise_to", None) is not None:  # `runs raise`: the paused turn goes on
        events = session.continue_paused(budget_usd=args.raise_to, max_steps=args.max_steps)
    else:
        events = (turns or session).send(prompt, max_steps=args.max_steps, budget_usd=budget_usd)
    try:
        async for event in spin_while(display, otel_events(args, events, prompt=prompt, run_id=run_id)):
            display.show(event)
            if isinstance(event, Complete):
                final = event
    finally:
        try:
            await provider.close(session)
        finally:
            if turns is not None:
                await turns.aclose()
    if final is None:
        print("seamline: turn no result", file=sys.stderr)
    else:
        turn_ended(final, max_steps=args.max_steps, display=display)
    return EXIT_CODES.get(final.outcome if final else "failed", EXIT_CODES["failed"])
