"""``seamline trace list`` and ``seamline trace show | verify | replay | redrive | export RUN``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.errors import InvalidRequest
from seamline.pipeline.redrive import redrive
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.sqlite_store import default_store_path, open_store
from seamline.sessions.trace_heads import anchored_head
from seamline.trace.listing import header_run_id, list_traces, resolve_prefix, trace_ids
from seamline.trace.replay import replay
from seamline.trace.verify import Verification, verify_trace
from seamline.trace.writer import trace_path, traces_dir

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
RUN is a run id (its trace is traces/RUN.jsonl beside the session store, or under
$SEAMLINE_TRACES), a unique prefix of one (at least 4 characters, as `trace list`
prints them), or the id of one of the run's sessions (as `sessions list` prints it);
--file FILE reads a trace file instead, e.g. an exported one.

examples:
  seamline trace list
  seamline trace show 5f0c... --json
  seamline trace verify --file run.jsonl
  seamline trace verify 5f0c...
  seamline trace replay 5f0c...
  seamline trace redrive 5f0c... --pipeline answer-review
  seamline trace export 5f0c... > run.jsonl
  seamline trace export --otlp 5f0c...

exit codes: 0 ok, 1 the trace does not verify / the re-drive differs / the replay
disagrees with the run's end, 2 usage error (no such run, unreadable file)
"""


def add_parser(commands: Any) -> str:
    trace = commands.add_parser(
        "trace",
        help="show, verify, replay, re-drive and export run traces",
        description="Inspect the trace of a pipeline run: verify its hash chain and lifecycle, rebuild its "
        "result without calling any provider, or run the controller again on the recorded responses.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    sub = trace.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    tlist = sub.add_parser("list", help="the traces kept, newest first", description="the traces kept, newest first")
    tlist.add_argument("--store", metavar="PATH", help="session store whose traces/ to use")
    tlist.add_argument("--json", action="store_true", help="one JSON object per trace")
    tlist.add_argument("--limit", type=int, default=50, metavar="N", help="at most N traces (default: 50)")
    for name, text in (
        ("show", "run id, definition hash, head hash, fingerprint, outcome"),
        ("verify", "check the chain, the lifecycle grammar, completeness and replayability"),
        ("replay", "rebuild the run's result from the trace alone"),
        ("redrive", "run the controller again on the recorded responses; report drift"),
        ("export", "write the trace, verbatim, to a file or stdout"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("run_id", nargs="?", metavar="RUN")
        cmd.add_argument("--file", metavar="FILE", help="a trace file instead of a run id")
        cmd.add_argument("--store", metavar="PATH", help="session store whose traces/ to use")
        cmd.add_argument("--json", action="store_true", help="one JSON object on stdout")
        if name == "redrive":
            cmd.add_argument("--pipeline", metavar="NAME|FILE", help="re-drive against this definition")
        if name == "export":
            cmd.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
            cmd.add_argument(
                "--otlp",
                action="store_true",
                help="send the run's OpenTelemetry GenAI spans over OTLP/HTTP instead (to $OTEL_EXPORTER_OTLP_ENDPOINT)",
            )
    return "trace"


def _source(args: argparse.Namespace) -> Path:
    if args.file:
        path = Path(args.file)
    elif args.run_id:
        path = _resolve_run(args.run_id, args.store)
    else:
        raise SeamlineUsage("give a run id or --file FILE")
    if not path.is_file():
        raise SeamlineUsage(f"no trace at {path}")
    return path


def _resolve_run(given: str, store: str | None) -> Path:
    """A run id, a unique prefix of one, or one of the run's sessions (by its short id)."""
    exact = trace_path(given, store_path=store)
    if exact.is_file():
        return exact
    folder = traces_dir(store)
    run_id = resolve_prefix(given, trace_ids(folder), what="run") or _run_of_session(given, store)
    if run_id is None:
        raise SeamlineUsage(f"no trace at {exact}, nor a run or session whose id starts with {given!r}")
    return trace_path(run_id, store_path=store)


@contextmanager
def _existing_store(store: str | None) -> Iterator[SessionStore | None]:
    """The session store when there is one; never creates one to look something up."""
    location = store or str(default_store_path())
    if "://" not in location and not Path(location).expanduser().is_file():
        yield None
        return
    opened = open_store(location)
    try:
        yield opened
    finally:
        opened.close()


def _run_of_session(given: str, store: str | None) -> str | None:
    with _existing_store(store) as opened:
        if opened is None:
            return None
        try:
            record = opened.require(given)
        except InvalidRequest:
            return None
    run_id = record.metadata.get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None


def _verify(path: Path, args: argparse.Namespace) -> Verification:
    """Verify ``path`` as the run asked for, against the head the store kept for it."""
    asked = None if args.file else path.name.removesuffix(".jsonl")
    # The run id to look the anchor up by: the one asked for, else the one the file names.
    run_id = asked or header_run_id(path)
    anchor = _anchor_of(run_id, args.store) if run_id else None
    return verify_trace(path, run_id=asked, anchor=anchor)


def _anchor_of(run_id: str, store: str | None) -> tuple[str, int] | None:
    with _existing_store(store) as opened:
        return anchored_head(opened, run_id) if opened is not None else None


def _list(args: argparse.Namespace) -> int:
    folder = traces_dir(args.store)
    for entry in list_traces(folder)[: max(args.limit, 0)]:
        row = {
            "run_id": entry.run_id,
            "modified": entry.modified,
            "pipeline": entry.pipeline,
            "outcome": entry.outcome,
            "stop_reason": entry.stop_reason,
            "path": str(entry.path),
        }
        if args.json:
            print(json.dumps(row))
        else:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.modified))
            end = f"{entry.outcome} ({entry.stop_reason})" if entry.outcome else "(no run_end)"
            print(f"{entry.run_id[:12]}  {when}  {entry.pipeline or '?':<16} {end}")
    return 0


def run(args: argparse.Namespace) -> int:
    command = args.trace_command
    if command == "list":
        return _list(args)
    path = _source(args)
    if command == "export" and args.otlp:
        from seamline.cli.otel_command import export_trace

        print(f"seamline: sent {export_trace(path)} span(s) of {path.name.removesuffix('.jsonl')}", file=sys.stderr)
        return 0
    if command == "export":
        data = path.read_bytes()
        if args.output:
            try:
                Path(args.output).write_bytes(data)
            except OSError as exc:
                raise SeamlineUsage(f"cannot write {args.output}: {exc.strerror or exc}") from None
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        return 0
    verification = _verify(path, args)
    if command in ("show", "verify"):
        return _show(verification, args, verify=command == "verify")
    if not verification.ok:
        return _show(verification, args, verify=True)
    if command == "replay":
        result = replay(verification)
        if args.json:
            print(json.dumps(result.data()))
        else:
            sys.stdout.write(result.text if result.text.endswith("\n") or not result.text else result.text + "\n")
            print(f"seamline: replayed {result.pipeline}: {result.outcome} ({result.stop_reason})", file=sys.stderr)
            for mismatch in result.mismatches:
                print(f"seamline: mismatch: {mismatch}", file=sys.stderr)
        return 1 if result.mismatches else 0
    definition = None
    if args.pipeline:
        from seamline.pipeline.builtin import resolve_pipeline

        definition = resolve_pipeline(args.pipeline)
    report = redrive(verification, definition=definition)
    if args.json:
        print(json.dumps(report.data()))
    else:
        print(f"re-drive: {'same' if report.same else 'DIFFERENT'} — {report.outcome} ({report.stop_reason})")
        for kind, items in report.drift.items():
            for item in items:
                print(f"  {kind} drift: {item}")
        for item in report.differences:
            print(f"  difference: {item}")
    return 0 if report.same else 1


def _show(verification: Verification, args: argparse.Namespace, *, verify: bool) -> int:
    summary = verification.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        for key in (
            "run_id",
            "pipeline",
            "definition_hash",
            "head_hash",
            "fingerprint",
            "records",
            "outcome",
            "stop_reason",
        ):
            print(f"{key:<16} {summary[key]}")
        if summary.get("detail"):
            print(f"{'why':<16} {summary['detail']}")
        print(f"{'verified':<16} {'ok' if verification.ok else 'FAILED'}")
        print(f"{'replayable':<16} {'yes' if verification.replayable else 'no'}")
        anchored = "yes" if verification.anchored else "no (the store keeps no head for this run)"
        print(f"{'head in store':<16} {anchored}")
        for reason in verification.replay_reasons:
            print(f"  not replayable: {reason}")
    for problem in verification.problems:
        print(f"seamline: trace: {problem}", file=sys.stderr)
    if verify and not args.json:
        for note in verification.notes:
            print(f"seamline: trace: note: {note}", file=sys.stderr)
    return 1 if verify and not verification.ok else 0
