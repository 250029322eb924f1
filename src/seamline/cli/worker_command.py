"""``seamline worker`` and the Temporal half of ``seamline run --on temporal``.

A worker serves durable runs (pipelines, or one turn as the ``single`` pipeline) from a
Temporal task queue; ``run --on temporal`` submits one and streams its events back from
the store. Both need the ``temporal`` extra: ``pip install 'seamline[temporal]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any, Final

from seamline.cli.main import EXIT_CODES, SeamlineUsage
from seamline.errors import SeamlineError
from seamline.events import Complete, Event, Raw, encode_event
from seamline.extras import install_hint

__all__ = ["add_durable_flags", "add_parser", "run", "run_on_temporal"]

TEMPORAL_ENV: Final = "SEAMLINE_TEMPORAL"
_EPILOG: Final = """\
examples:
  temporal server start-dev --ip 127.0.0.1 --headless --db-filename temporal.db &
  seamline worker --temporal 127.0.0.1:7233 --task-queue seamline
  seamline run --on temporal --store runs.db "What does the store keep?"

Workers and clients must reach the same store (a file path on this host, or a
postgresql:// URL) and the run's workspace. Stop a worker with Ctrl-C or SIGTERM.
"""


def _target_default() -> str:
    return os.environ.get(TEMPORAL_ENV, "127.0.0.1:7233")


def add_parser(commands: Any) -> str:
    worker = commands.add_parser(
        "worker",
        help="serve durable runs from a Temporal task queue",
        description="Run a Temporal worker for `seamline run --on temporal` (needs seamline[temporal]).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    worker.add_argument(
        "--temporal",
        default=None,
        metavar="HOST:PORT",
        help=f"Temporal frontend (default: ${TEMPORAL_ENV} or 127.0.0.1:7233)",
    )
    worker.add_argument("--task-queue", default="seamline", metavar="NAME", help="task queue (default: seamline)")
    worker.add_argument("--namespace", default="default", metavar="NAME", help="namespace (default: default)")
    worker.add_argument(
        "--max-concurrent", type=int, default=100, metavar="N", help="role turns run at once (default: 100)"
    )
    worker.add_argument("--sticky-timeout-s", type=float, default=10.0, metavar="S", help=argparse.SUPPRESS)
    return "worker"


def add_durable_flags(run: argparse.ArgumentParser) -> None:
    """The flags ``seamline run`` takes to submit to Temporal instead of running here."""
    run.add_argument(
        "--on",
        choices=("here", "temporal"),
        default="here",
        help="where the run executes: in this process (default) or on Temporal workers",
    )
    run.add_argument("--temporal", default=None, metavar="HOST:PORT", help="Temporal frontend for --on temporal")
    run.add_argument("--task-queue", default="seamline", metavar="NAME", help="task queue for --on temporal")
    run.add_argument("--heartbeat-s", type=float, default=10.0, metavar="S", help=argparse.SUPPRESS)


def _need_temporal() -> None:
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise SeamlineUsage(f"Temporal needs the extra: {install_hint('temporal')}") from None


def run(args: argparse.Namespace) -> int:
    _need_temporal()
    if args.max_concurrent < 1:
        raise SeamlineUsage("--max-concurrent must be at least 1")
    if not args.sticky_timeout_s > 0:
        raise SeamlineUsage("--sticky-timeout-s must be more than 0")
    from seamline.durable.worker import serve

    target = args.temporal or _target_default()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        ready = asyncio.Event()

        async def announce() -> None:
            await ready.wait()
            print(f"seamline: worker on task queue {args.task_queue} at {target}", file=sys.stderr, flush=True)

        notice = asyncio.create_task(announce())
        try:
            await serve(
                target,
                args.task_queue,
                namespace=args.namespace,
                max_concurrent=args.max_concurrent,
                sticky_timeout_s=args.sticky_timeout_s,
                ready=ready,
            )
        finally:
            notice.cancel()

    from seamline.durable.client import connect

    try:
        asyncio.run(connect(target, namespace=args.namespace))  # one clear line when unreachable
    except SeamlineError as exc:  # main() prints it; leave with the code it returns, guarded
        _exit_guard(2 if exc.kind in ("invalid_request", "storage") else 1)
        raise
    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    print("seamline: worker stopped", file=sys.stderr, flush=True)
    _exit_guard(0)
    return 0


def run_on_temporal(args: argparse.Namespace, prompt: str) -> int:
    """``seamline run [--pipeline P] --on temporal``: submit, stream, exit with the run's code."""
    _need_temporal()
    if args.no_store:
        raise SeamlineUsage("--on temporal keeps the run in the store; drop --no-store")
    if args.session:
        raise SeamlineUsage("--session cannot run --on temporal yet")
    _refuse_local_only(args)
    from seamline.cli.run_flags import flag_options
    from seamline.durable.client import stream_run
    from seamline.durable.steps import RunSpec
    from seamline.pipeline.builtin import resolve_pipeline
    from seamline.providers.registry import create_provider
    from seamline.runner import make_provider
    from seamline.sessions.sqlite_store import default_store_path

    definition = resolve_pipeline(args.pipeline or "single")
    # The same options as a local run; an agent CLI with --sandbox runs in the envelope on
    # the worker (its options travel in the spec).
    given = flag_options(args)
    make_provider(given.provider, model=given.model, options=given.options).check_budget(args.budget_usd)
    for binding in definition.roles.values():  # a role's own provider is refused here too, as in a local run
        if binding.provider is not None:
            create_provider(binding.provider, model=binding.model, options=binding.options).check_budget(
                args.budget_usd
            )
    if args.allow:  # an unknown name is refused here, before anything is submitted
        from seamline.tools.workspace import Workspace, workspace_tools

        workspace_tools(Workspace(args.workspace)).restrict(args.allow)
    store = str(args.store) if args.store else str(default_store_path())
    if not store.startswith(("postgresql://", "postgres://")):
        store = str(Path(store).expanduser().resolve())
    spec = RunSpec.of(given, run_id=uuid.uuid4().hex, definition=definition, task=prompt, store=store)
    target = args.temporal or _target_default()
    from seamline.cli.otel_command import otel_sink, otel_wanted

    sink = otel_sink() if otel_wanted(args) else None  # no extra: refused before submitting

    taken = False

    def submitted() -> None:  # once the workflow started: never for a run the server did not take
        nonlocal taken
        taken = True
        print(f"seamline: run {spec.run_id} submitted to {args.task_queue} at {target}", file=sys.stderr, flush=True)

    async def drive() -> Complete | None:
        final: Complete | None = None
        out = sys.stdout.buffer
        tag = b'{"run_id":"' + spec.run_id.encode("ascii") + b'",'  # as a local pipeline run's lines
        async for key, event in stream_run(
            spec, target=target, task_queue=args.task_queue, heartbeat_s=args.heartbeat_s, on_submitted=submitted
        ):
            if args.json:
                out.write(tag + encode_event(event)[1:] + b"\n")
                out.flush()
            elif sys.stderr.isatty():
                _note(key, event)
            if key == "run" and isinstance(event, Complete):
                final = event
        return final

    try:
        final = asyncio.run(drive())
        if sink is not None:  # the run's spans, rebuilt from the trace its last step wrote
            _send_spans(sink, spec.store, spec.run_id)
    except SeamlineError as exc:  # main() prints it; leave with the code it returns, guarded
        _exit_guard(2 if exc.kind in ("invalid_request", "storage") else 1)
        raise
    except KeyboardInterrupt:
        # Ctrl-C stops this client, never the run: say where it is and how to stop it, and
        # leave at once (the Temporal client's threads must not hold the exit).
        if taken:
            print(
                f"seamline: interrupted; run {spec.run_id} stays queued on {args.task_queue} (it goes on when a "
                f"worker takes it). Stop it: temporal workflow cancel --address {target} "
                f"--workflow-id seamline-{spec.run_id}",
                file=sys.stderr,
            )
        else:
            print("seamline: interrupted before the run was submitted; nothing was started", file=sys.stderr)
        _exit_guard(EXIT_CODES["aborted"])
        return EXIT_CODES["aborted"]
    finally:
        if sink is not None:
            sink.close()
    from seamline.pipeline.controller import exit_code_for

    if final is None:  # pragma: no cover - stream_run raises instead
        code = 1
    else:
        if not args.json:
            sys.stdout.write(final.text if final.text.endswith("\n") or not final.text else final.text + "\n")
        print(f"seamline: {definition.name} {final.outcome} ({final.stop_reason}) · run {spec.run_id}", file=sys.stderr)
        code = exit_code_for(final.outcome, final.stop_reason)
    _exit_guard(code)
    return code


# Flags of a local run that cannot travel to a worker: refused, never dropped. Every other
# flag travels in the run spec (prompt, provider, model, options, workspace, store, yes,
# max-steps, budget, allow, pipeline) or acts in this client (json, otel).
_LOCAL_ONLY: Final = (
    ("module", "--module"),
    ("mcp_config", "--mcp-config"),
    ("sandbox", "--sandbox"),
    ("sandbox_policy", "--sandbox-policy"),
)


def _refuse_local_only(args: argparse.Namespace) -> None:
    given = [flag for name, flag in _LOCAL_ONLY if getattr(args, name, None)]
    if given:
        raise SeamlineUsage(f"{', '.join(given)} cannot run --on temporal yet; drop it or run here")


def _send_spans(sink: Any, store_location: str, run_id: str) -> None:
    from seamline.durable.client import run_report
    from seamline.telemetry.live import spans_of_trace

    report = run_report(store_location, run_id)
    trace = report.get("trace") if report else None
    if trace and Path(trace).is_file():
        sink.emit(spans_of_trace(trace))


def _note(key: str, event: Event) -> None:
    if isinstance(event, Raw) and event.source == "controller" and isinstance(event.payload, dict):
        if event.payload.get("what") == "transition":
            print(f"→ {event.payload.get('source')} -> {event.payload.get('target')}", file=sys.stderr)
    elif isinstance(event, Complete):
        print(f"  {key}: {event.outcome}", file=sys.stderr)


def _exit_guard(code: int) -> None:
    """Leave without interpreter teardown once the work is done and flushed: the Temporal
    client's native threads can abort a finalizing interpreter ("PyGILState_Release",
    temporalio/sdk-python#300). Only in the command-line process, never inside a host
    program (or a test) that called :func:`seamline.cli.main.main` itself."""
    if Path(sys.argv[0]).name not in ("seamline", "__main__.py"):
        return

    def leave() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    atexit.register(leave)
