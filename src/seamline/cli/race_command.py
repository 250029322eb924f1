"""``seamline race``: the same task on several backends (or samples of one) at once, each
in its own git worktree, checked, ranked; ``--merge-best`` merges the winner."""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from seamline.cli.main import SeamlineUsage, install_abort_handler, parse_options
from seamline.worktrees import Worktree

if TYPE_CHECKING:
    from seamline.pipeline.controller import PipelineController

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline race -p claude-code -p codex --check "pytest -q" -w ~/src/app --yes "Fix the flaky test"
  seamline race -p scripted -o script=a.yaml -p scripted -o script=b.yaml --check "test -f good.txt" \\
      --merge-best -w repo --yes "Write the good file"
  seamline race -p openai -m gpt-4.1 --samples 3 --budget-usd 2 --check "make test" --json -w . "Speed up parse()"

Each --provider starts a variant; the -o and -m after it belong to it (given before any
--provider they apply to every variant). --samples N runs each variant N times. Every
racer works in its own worktree (a worktree run: seamline diff|merge|discard RUN take it
afterwards), all at once, under one --budget-usd. Then --check runs in each worktree (in
the sandbox with --sandbox), --reviewer has an agent read each diff, and the runs are
ranked: check passed first, then cost, then time, then diff size. The race's trace
verifies with `seamline trace verify RACE`.

exit codes: 0 a winner (merged with --merge-best), 1 failed, 2 usage error or the merge
was refused (nothing changed), 3 the budget was spent, 6 no run passed (nothing merged),
130 aborted
"""


def add_parser(commands: Any) -> str:
    race = commands.add_parser(
        "race",
        help="run one task on several backends at once, each in its own worktree; rank them, merge the best",
        description="Race TASK on several backends (or samples of one), each in a git worktree of the workspace's "
        "repository; check, rank and optionally merge the best run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    race.add_argument("task", metavar="TASK", help="what every racer is asked; '-' reads it from stdin")
    race.add_argument(
        "--provider", "-p", action=_NewVariant, metavar="NAME", help="a backend to race; repeatable (one variant each)"
    )
    race.add_argument(
        "--provider-option",
        "-o",
        action=_VariantOption,
        metavar="KEY=VALUE",
        help="an option of the variant named by the --provider before it (before any: of every variant)",
    )
    race.add_argument("--model", "-m", action=_VariantModel, metavar="NAME", help="the model of that variant")
    race.add_argument("--samples", type=int, default=1, metavar="N", help="runs of each variant (default: 1)")
    race.add_argument("--check", metavar="COMMAND", help="shell command run in each racer's worktree; exit 0 passes")
    race.add_argument(
        "--check-timeout", type=float, default=600.0, metavar="S", help="seconds a check may run (default: 600)"
    )
    race.add_argument(
        "--reviewer",
        action="store_true",
        help="an agent reviews each run's diff (APPROVE or REJECT); a rejected run ranks after the approved",
    )
    race.add_argument(
        "--reviewer-provider", metavar="NAME", help="the reviewer's backend (default: the first variant's)"
    )
    race.add_argument(
        "--reviewer-option", action="append", metavar="KEY=VALUE", help="an option of --reviewer-provider; repeatable"
    )
    race.add_argument("--reviewer-model", metavar="NAME", help="the model of --reviewer-provider")
    race.add_argument("--merge-best", action="store_true", help="merge the winner as `seamline merge` does")
    race.add_argument(
        "--budget-usd", type=float, metavar="USD", help="one budget for the whole race; stops every racer"
    )
    race.add_argument(
        "--workspace", "-w", default=".", metavar="DIR", help="a folder in the git repository (default: .)"
    )
    race.add_argument(
        "--store", metavar="PATH|URL", help="session store (default: $SEAMLINE_STORE or the user data dir)"
    )
    race.add_argument(
        "--yes", "-y", action="store_true", help="allow tools that write or execute (write_file, edit_file, shell)"
    )
    race.add_argument("--max-steps", type=int, default=50, metavar="N", help="most model calls per racer (default: 50)")
    race.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "container"),
        help="run each racer's shell tool and its check isolated, as `seamline run --sandbox` does",
    )
    race.add_argument("--sandbox-policy", metavar="FILE", help="sandbox policy file (TOML or JSON); needs --sandbox")
    race.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return "race"


@dataclass
class _Variant:
    provider: str
    model: str | None = None
    options: list[str] = field(default_factory=list)


class _NewVariant(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        variants: list[_Variant] = getattr(namespace, "variants", None) or []
        variants.append(_Variant(provider=str(values)))
        namespace.variants = variants


class _VariantOption(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        variants: list[_Variant] | None = getattr(namespace, "variants", None)
        if variants:
            variants[-1].options.append(str(values))
        else:
            namespace.common_options = [*(getattr(namespace, "common_options", None) or []), str(values)]


class _VariantModel(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        variants: list[_Variant] | None = getattr(namespace, "variants", None)
        if variants:
            variants[-1].model = str(values)
        else:
            namespace.common_model = str(values)


def _variants(args: argparse.Namespace) -> list[_Variant]:
    given: list[_Variant] = getattr(args, "variants", None) or []
    common = list(getattr(args, "common_options", None) or [])
    model = getattr(args, "common_model", None)
    if not given:
        raise SeamlineUsage("name the racers: --provider NAME, twice or more (or once with --samples N)")
    if args.samples < 1:
        raise SeamlineUsage("--samples must be at least 1")
    full = [_Variant(v.provider, v.model or model, [*common, *v.options]) for v in given]
    racers = [v for v in full for _ in range(args.samples)]
    if len(racers) < 2:
        raise SeamlineUsage("a race needs at least two racers: --provider twice, or --samples 2")
    return racers


def _labels(variants: Sequence[_Variant]) -> list[str]:
    """A label per racer, ``NAME[/MODEL]``; a name that repeats (``--samples``, or the same
    backend given twice) is numbered ``#1``, ``#2``… so the table tells the racers apart."""
    names = [v.provider + (f"/{v.model}" if v.model else "") for v in variants]
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(f"{name}#{seen[name]}" if names.count(name) > 1 else name)
    return labels


def run(args: argparse.Namespace) -> int:
    from seamline.cli.sandbox_command import envelope_options, sandbox_for_run
    from seamline.live.race import Racer, open_race
    from seamline.locations import default_store_path
    from seamline.providers.registry import create_provider, provider_class
    from seamline.runner import session_run_options
    from seamline.sessions.sqlite_store import open_store
    from seamline.tools.workspace import Workspace, workspace_tools
    from seamline.worktrees import abandon
    from seamline.worktrees import create as create_worktree

    task = sys.stdin.read() if args.task == "-" else args.task
    if not task.strip():
        raise SeamlineUsage("the task is empty")
    if args.max_steps < 1:
        raise SeamlineUsage("--max-steps must be at least 1")
    variants = _variants(args)
    labels = _labels(variants)
    providers = []
    for v in variants:
        options = {**parse_options(v.options), **(envelope_options(args, provider_class(v.provider)) or {})}
        providers.append(create_provider(v.provider, model=v.model, options=options))
    reviewers = []
    if args.reviewer:  # one reviewer each: a backend that keeps state per instance reviews one run only
        first = variants[0]
        own = args.reviewer_provider is not None
        name = args.reviewer_provider or first.provider
        options = parse_options(args.reviewer_option or []) if own else parse_options(first.options)
        model = args.reviewer_model if own else first.model
        reviewers = [create_provider(name, model=model, options=options) for _ in variants]
    elif args.reviewer_provider or args.reviewer_option or args.reviewer_model:
        raise SeamlineUsage("--reviewer-provider, --reviewer-option and --reviewer-model need --reviewer")
    store = open_store(args.store)
    trees: list[Worktree] = []
    racers: list[Racer] = []
    try:
        for label, provider in zip(labels, providers, strict=True):
            tree = create_worktree(args.workspace, run_id=uuid.uuid4().hex, store=store.location)
            trees.append(tree)
            ws = Workspace(tree.workspace)
            sandbox, journal = sandbox_for_run(args, ws)
            own_tools = provider.runs_own_tools and sandbox is not None  # the program runs in the envelope
            tools = workspace_tools(ws) if own_tools else workspace_tools(ws, sandbox=sandbox, journal=journal)
            stored = session_run_options(provider, budget_usd=args.budget_usd, extra={"sandbox": args.sandbox})
            racers.append(Racer(label=label, provider=provider, tree=tree, tools=tools, sandbox=sandbox, stored=stored))
        controller, agents = open_race(
            racers,
            store=store,
            store_path=args.store or default_store_path(),
            check=args.check,
            reviewers=reviewers,
            yes=args.yes or bool(args.sandbox),
            max_steps=args.max_steps,
            budget_usd=args.budget_usd,
            check_timeout=args.check_timeout,
        )
    except BaseException:
        for tree in trees:
            abandon(tree)
        store.close()
        raise
    try:
        from seamline.cli.race_result import finish

        code = asyncio.run(_drive(controller, task))
        return finish(controller, agents, code, store=store, merge_best=args.merge_best, json_out=args.json)
    finally:
        agents.release()
        store.close()


async def _drive(controller: PipelineController, task: str) -> int:
    from seamline.cli.pipelines_command import _Progress
    from seamline.pipeline import stream_pipeline

    install_abort_handler(asyncio.get_running_loop(), controller.cancel)
    progress = _Progress() if sys.stderr.isatty() else None
    async for event in stream_pipeline(controller, task):
        if progress is not None:
            progress.note(event)
    return controller.report.exit_code
