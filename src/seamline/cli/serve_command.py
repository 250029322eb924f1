"""``seamline serve``: the HTTP API v1 and the web page (needs ``seamline[server]``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.extras import install_hint

__all__ = ["add_parser", "run"]

TOKEN_ENV: Final = "SEAMLINE_TOKEN"
NOTIFY_SECRET_ENV: Final = "SEAMLINE_NOTIFY_SECRET"

_EPILOG: Final = """\
examples:
  seamline serve                               http://127.0.0.1:8765/ (the web page)
  seamline serve --port 9000 --store runs.db
  SEAMLINE_TOKEN=… seamline serve --host 0.0.0.0 --allow-host box.lan
  seamline serve --agents agents.toml          clients start the declared agents by name
  seamline serve --on temporal --store postgresql://… --port 8766
                                               runs on `seamline worker`s; servers share them

Clients choose neither programs nor folders: without --agents they get any provider, one
that runs a program (an agent CLI, ACP, OpenCode) inside the envelope of --sandbox; no
option that names a program, path or endpoint, no `yes`, no `sandbox`, and workspaces
inside --workspace. Declare anything more in --agents FILE.

The API lives under /v1 (see docs/serve.md and docs/openapi.json). A run's events stream as
AG-UI over SSE, or with ?format=seamline as seamline's own events (SSE or NDJSON), each
with an id that Last-Event-ID resumes after.

Binding anything but loopback needs a token (--token or $SEAMLINE_TOKEN) or users
(`seamline users add NAME --role viewer|operator|admin`, kept beside the store, or
--users FILE): every request then carries `Authorization: Bearer TOKEN`; open the page
once as /?token=TOKEN. --token is one admin; a user's role decides what it may do.

--notify URL POSTs a JSON notification (Slack- and ntfy-compatible fields) when an approval
is wanted, a run finishes or fails, or a budget is reached, signed with --notify-secret
(or $SEAMLINE_NOTIFY_SECRET) in X-Seamline-Signature; see docs/serve.md.

exit codes: 0 stopped cleanly, 2 usage error (bad flags, no token for a public bind,
missing extra, unusable store, a bad agents file)
"""


def add_parser(commands: Any) -> str:
    serve = commands.add_parser(
        "serve",
        help="serve the HTTP API v1 (AG-UI streams) and the web page",
        description="Serve sessions and runs over HTTP: the API under /v1 and a web page at /.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    serve.add_argument("--host", default="127.0.0.1", metavar="ADDR", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, metavar="N", help="port (default: 8765; 0 picks a free one)")
    serve.add_argument(
        "--store", metavar="PATH|URL", help="session store (default: $SEAMLINE_STORE or the user data dir)"
    )
    serve.add_argument("--workspace", "-w", default=".", metavar="DIR", help="default folder for sessions' tools")
    serve.add_argument("--token", metavar="TOKEN", help=f"bearer token every request must carry (or ${TOKEN_ENV})")
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header name to serve besides loopback; repeatable",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="URL",
        help="an origin (scheme://host[:port]) whose web pages may call the API (CORS); repeatable, none by default",
    )
    serve.add_argument(
        "--agents",
        metavar="FILE",
        help="TOML file of the agents clients may start by name (provider, model, options, sandbox, "
        "budget, workspace roots); see docs/serve.md",
    )
    serve.add_argument(
        "--users",
        metavar="FILE",
        help="the users file (seamline users add …; default: STORE.users.json beside a store file, when it exists)",
    )
    serve.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="POST a JSON notification here on an approval wanted, a run finished or failed, a budget reached; repeatable",
    )
    serve.add_argument(
        "--notify-secret",
        metavar="SECRET",
        help=f"HMAC-SHA256 key of the notifications' signature (or ${NOTIFY_SECRET_ENV})",
    )
    serve.add_argument("--max-body", type=int, default=1_000_000, metavar="BYTES", help="largest request body")
    serve.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default="auto",
        help="backends that run programs (agent CLIs, ACP agents, OpenCode) run inside bubblewrap behind an "
        "egress allowlist, whatever a client asks (default: auto); none turns that off",
    )
    serve.add_argument(
        "--egress-allow",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a host sandboxed programs may reach besides their model endpoint; repeatable",
    )
    serve.add_argument(
        "--on",
        choices=("here", "temporal"),
        default="here",
        help="where runs execute: in this process (default) or on Temporal workers (`seamline worker`), "
        "every run read from the store, so several servers on one PostgreSQL share them",
    )
    serve.add_argument(
        "--temporal", default=None, metavar="HOST:PORT", help="Temporal frontend for --on temporal ($SEAMLINE_TEMPORAL)"
    )
    serve.add_argument("--task-queue", default="seamline", metavar="NAME", help="task queue for --on temporal")
    serve.add_argument("--namespace", default="default", metavar="NAME", help=argparse.SUPPRESS)
    serve.add_argument("--heartbeat-s", type=float, default=10.0, metavar="S", help=argparse.SUPPRESS)
    serve.add_argument("--fallback-s", type=float, default=1.0, metavar="S", help=argparse.SUPPRESS)
    return "serve"


def _durable(args: argparse.Namespace) -> Any:
    """Where runs go with --on temporal (None: here)."""
    if args.on != "temporal":
        return None
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise SeamlineUsage(f"--on temporal needs the extra: {install_hint('temporal')}") from None
    if not args.heartbeat_s > 0 or not args.fallback_s > 0:
        raise SeamlineUsage("--heartbeat-s and --fallback-s must be more than 0")
    from seamline.locations import default_store_path
    from seamline.server.remote_runs import DurableTarget

    store = args.store or os.environ.get("SEAMLINE_STORE") or str(default_store_path())
    if not store.startswith(("postgresql://", "postgres://")):
        store = str(Path(store).expanduser().resolve())  # workers open the same file
    return DurableTarget(
        temporal=args.temporal or os.environ.get("SEAMLINE_TEMPORAL", "127.0.0.1:7233"),
        task_queue=args.task_queue,
        store=store,
        namespace=args.namespace,
        heartbeat_s=args.heartbeat_s,
        fallback_s=args.fallback_s,
    )


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from seamline.server import create_app
        from seamline.server.guard import is_loopback
    except ImportError as exc:
        raise SeamlineUsage(f"serve needs the server extra: {install_hint('server')} ({exc.name} missing)") from None
    from seamline.locations import default_store_path
    from seamline.sessions.sqlite_store import open_store

    token = args.token or os.environ.get(TOKEN_ENV) or None
    users = _users(args.users, args.store or os.environ.get("SEAMLINE_STORE") or str(default_store_path()))
    if not is_loopback(args.host) and token is None and users is None:
        raise SeamlineUsage(
            f"binding {args.host} (not loopback) needs a token (--token or ${TOKEN_ENV}) or users (seamline users add)"
        )
    if not 0 <= args.port <= 65535:
        raise SeamlineUsage("--port must be 0..65535")
    agents = operator_agents(args)
    from seamline.server.guard import normalize_origin

    try:
        origins = tuple(normalize_origin(o) for o in args.allow_origin)
    except ValueError as exc:
        raise SeamlineUsage(f"--allow-origin {exc}") from None
    hosts = list(args.allow_host)
    if not is_loopback(args.host) and args.host not in ("0.0.0.0", "::"):
        hosts.append(args.host)
    notifier = None
    if args.notify:
        from seamline.server.notify import Notifier

        try:
            secret = args.notify_secret or os.environ.get(NOTIFY_SECRET_ENV) or None
            notifier = Notifier(args.notify, secret=secret)
        except ValueError as exc:
            raise SeamlineUsage(str(exc)) from None
    durable = _durable(args)
    store = open_store(args.store)
    app = create_app(
        store,
        workspace=args.workspace,
        token=token,
        hosts=tuple(hosts),
        max_body=args.max_body,
        close_store=True,
        agents=agents,
        allow_origins=origins,
        sandbox=args.sandbox,
        egress_allow=tuple(args.egress_allow),
        users=users,
        notifier=notifier,
        durable=durable,
    )
    try:
        # Listening before the address is announced: clients may connect at once.
        sock = listening_socket(args.host, args.port, backlog=2048)
    except SeamlineUsage:
        store.close()
        raise
    family = sock.family
    port = sock.getsockname()[1]
    # Runs are stopped first on a signal (see StoppableServer); the timeout is a backstop.
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=10)
    server = _server_class(uvicorn)(config)
    shown = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    where = f" · runs on Temporal {durable.temporal} ({durable.task_queue})" if durable is not None else ""
    print(f"seamline: serving http://{shown}:{port}/{where} (Ctrl-C stops)", file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    print("seamline: stopped", file=sys.stderr)
    return 0


def _users(given: str | None, store: str) -> Any:
    """The users file to serve: the one given (which must exist), else the one beside a
    store file when there is one; None for no users."""
    from seamline.server.users import UserBook, UsersFileError, users_path_for

    if given is not None:
        if not os.path.isfile(given):
            raise SeamlineUsage(f"--users {given}: no such file (seamline users add --file {given} … makes one)")
        path = Path(given)
    elif store.startswith(("postgresql://", "postgres://")):
        return None
    else:
        path = users_path_for(store)
        if not path.is_file():
            return None
    book = UserBook(path)
    try:
        book.users()  # read now: a broken file is a usage error, not a 500 later
    except UsersFileError as exc:
        raise SeamlineUsage(exc.message) from None
    return book


def _server_class(uvicorn: Any) -> Any:
    class StoppableServer(uvicorn.Server):  # type: ignore[misc]
        """SIGINT and SIGTERM stop the server gracefully and the command exits 0 (uvicorn
        would raise the signal again after its shutdown)."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            self._captured_signals.clear()
            hub = getattr(self.config.app, "hub", None)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            if hub is not None:
                # Open streams end when their runs do; a shutdown would otherwise wait on them.
                loop.call_soon_threadsafe(hub.stop_runs)

    return StoppableServer


def operator_agents(args: argparse.Namespace) -> Any:
    """The agents the operator declares (``--agents FILE``, or None), once ``--workspace``
    is known to be a folder; shared by ``serve`` and ``mcp``."""
    if not os.path.isdir(args.workspace):
        raise SeamlineUsage(f"--workspace {args.workspace} is not a folder")
    if args.agents is None:
        return None
    from seamline.server.agents_file import AgentsFileError, load_agents

    try:
        return load_agents(args.agents, default_workspace=Path(args.workspace).resolve())
    except AgentsFileError as exc:
        raise SeamlineUsage(str(exc)) from None


def listening_socket(host: str, port: int, *, backlog: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening; a usage error when it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SeamlineUsage(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(backlog)
    return sock
