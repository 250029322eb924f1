"""``seamline eval``: run a dataset of tasks on several backends and compare them.

``seamline eval FILE -p A -p B …`` (the same as ``eval run``) runs every task, variant
and sample as a trial; ``validate`` checks a dataset; ``resume``, ``show`` and ``list`` work on
the evaluations kept beside the store (:mod:`seamline.evals.record`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, Final

from seamline.cli.main import SeamlineUsage, install_abort_handler, parse_options
from seamline.cli.race_command import _labels, _NewVariant, _VariantModel, _VariantOption
from seamline.evals.dataset import DatasetError, load_dataset
from seamline.exit_codes import EXIT_CODES

__all__ = ["add_parser", "rewrite_argv", "run"]

_SUBCOMMANDS: Final = ("run", "validate", "resume", "rescore", "replay", "show", "list")

_EPILOG: Final = """\
examples:
  seamline eval validate docs/examples/eval/dataset.yaml
  seamline eval tasks.yaml -p claude-code -p codex --samples 4 --budget-usd 5 --yes
  seamline eval tasks.yaml -p openai -m gpt-5.5 -p anthropic -m claude-sonnet-4-5 --json
  seamline eval run tasks.yaml -p gemini-cli --concurrency 2
  seamline eval tasks.yaml -p claude-code --samples 4 --baseline 3f2a9c1d --max-cost-increase 20%
  seamline eval resume 3f2a9c1d
  seamline eval rescore 3f2a9c1d --check "pytest -q tests/test_new.py"
  seamline eval tasks.yaml -p openai -m gpt-5.5 --record
  seamline eval replay 3f2a9c1d
  seamline eval show 3f2a9c1d --json
  seamline eval list

A dataset is YAML (a list of tasks) or JSONL (one task per line); each task has an id, a
repository (a git repository, relative to the file), a prompt and a check command (exit 0
passes). Every task, variant and sample is a trial: a worktree run on its own branch,
checked in its worktree. See docs/evals.md.

exit codes: 0 finished (whatever passed), 1 failed, 2 usage error or an unusable dataset,
3 the budget ran out (what finished is kept), 8 a variant regressed against --baseline,
130 interrupted (`eval resume ID` goes on)
"""


def rewrite_argv(arguments: Sequence[str]) -> list[str]:
    """``seamline eval FILE …`` is ``seamline eval run FILE …``."""
    listed = list(arguments)
    at = listed.index("eval") + 1 if "eval" in listed else len(listed)
    if at < len(listed) and listed[at] not in _SUBCOMMANDS and not listed[at].startswith("-"):
        listed.insert(at, "run")
    return listed


def add_parser(commands: Any) -> str:
    evals = commands.add_parser(
        "eval",
        help="evaluate agents on a dataset of tasks: pass rates, pass@k, cost per pass",
        description="Run a dataset of tasks on several backends, each trial in its own worktree; "
        "check, count and compare them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    sub = evals.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)
    run_parser = sub.add_parser("run", help="run a dataset (the default: `seamline eval FILE …`)")
    run_parser.add_argument("file", metavar="FILE", help="the dataset (.yaml, .yml or .jsonl)")
    run_parser.add_argument(
        "--provider",
        "-p",
        action=_NewVariant,
        metavar="NAME",
        help="a backend to evaluate; repeatable (one variant each)",
    )
    run_parser.add_argument(
        "--provider-option",
        "-o",
        action=_VariantOption,
        metavar="KEY=VALUE",
        help="an option of the variant named by the --provider before it (before any: of every variant)",
    )
    run_parser.add_argument("--model", "-m", action=_VariantModel, metavar="NAME", help="the model of that variant")
    run_parser.add_argument(
        "--samples", type=int, default=1, metavar="K", help="trials of each task per variant (default: 1)"
    )
    run_parser.add_argument("--concurrency", type=int, default=1, metavar="N", help="trials at once (default: 1)")
    run_parser.add_argument("--budget-usd", type=float, metavar="USD", help="one budget for the whole evaluation")
    run_parser.add_argument("--tags", action="append", metavar="TAG", help="only the tasks with this tag; repeatable")
    run_parser.add_argument(
        "--max-steps", type=int, default=50, metavar="N", help="most model calls per trial (default: 50)"
    )
    run_parser.add_argument("--keep", action="store_true", help="keep every trial's worktree and branch")
    run_parser.add_argument(
        "--record",
        action="store_true",
        help="keep every trial's model exchanges in a cassette, for `seamline eval replay` (backends whose "
        "model requests pass seamline's gateway)",
    )
    run_parser.add_argument(
        "--judge-provider", metavar="NAME", help="a backend that scores each trial of a task with a rubric (0 to 1)"
    )
    run_parser.add_argument("--judge-model", metavar="NAME", help="the model of --judge-provider")
    run_parser.add_argument(
        "--judge-option", action="append", metavar="KEY=VALUE", help="an option of --judge-provider; repeatable"
    )
    _common(run_parser)
    _gate(run_parser)
    validate = sub.add_parser("validate", help="check a dataset file and list its tasks")
    validate.add_argument("file", metavar="FILE", help="the dataset (.yaml, .yml or .jsonl)")
    validate.add_argument("--json", action="store_true", help="print the result as one JSON object")
    resume = sub.add_parser("resume", help="run the trials an interrupted evaluation did not finish")
    resume.add_argument("id", metavar="ID", help="the evaluation (four or more characters of its id)")
    _common(resume)
    _gate(resume)
    rescore = sub.add_parser("rescore", help="check a kept evaluation's trials again, without running the agents")
    rescore.add_argument("id", metavar="ID", help="the evaluation (four or more characters of its id)")
    rescore.add_argument("--check", metavar="COMMAND", help="this check instead of each task's own")
    _common(rescore)
    _gate(rescore)
    replay = sub.add_parser(
        "replay", help="run every trial again from its cassette (no network) and check each verdict is the same"
    )
    replay.add_argument("id", metavar="ID", help="an evaluation run with --record")
    _common(replay)
    _gate(replay)
    show = sub.add_parser("show", help="the figures of a kept evaluation")
    show.add_argument("id", metavar="ID")
    show.add_argument(
        "--store", metavar="PATH|URL", help="session store (default: $SEAMLINE_STORE or the user data dir)"
    )
    show.add_argument("--json", action="store_true", help="print the result as one JSON object")
    _gate(show)
    listing = sub.add_parser("list", help="the kept evaluations, newest first")
    listing.add_argument(
        "--store", metavar="PATH|URL", help="session store (default: $SEAMLINE_STORE or the user data dir)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per evaluation")
    return "eval"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", metavar="PATH|URL", help="session store (default: $SEAMLINE_STORE or the user data dir)"
    )
    parser.add_argument(
        "--yes", "-y", action="store_true", help="allow tools that write or execute (write_file, shell)"
    )
    parser.add_argument(
        "--sandbox",
        choices=["auto", "bwrap", "container"],
        help="run each trial's backend, shell tool and check isolated, as `seamline run --sandbox` does",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _gate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--html", metavar="FILE", help="also write the figures as one self-contained page")
    parser.add_argument(
        "--baseline",
        metavar="ID|FILE",
        help="compare with an earlier evaluation (its id, or the file of its --json); exit 8 when a variant regressed",
    )
    parser.add_argument(
        "--max-cost-increase",
        type=_fraction,
        metavar="PCT",
        help="with --baseline: a rise of a variant's cost per pass past this (20%% or 0.2) is a regression",
    )
    parser.add_argument(
        "--significance",
        type=float,
        default=0.05,
        metavar="P",
        help="with --baseline: a fall of a pass rate counts when the paired test's p-value is below P (default: 0.05)",
    )


def _fraction(text: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage or a fraction: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("an increase of 0 or more")
    return value


def _finish(args: argparse.Namespace, data: dict[str, Any], root: Any, code: int) -> int:
    """Print the figures (and the comparison with ``--baseline``); the exit code."""
    print(json.dumps(data) if args.json else _table(data))
    if getattr(args, "html", None):
        from pathlib import Path

        from seamline.evals.html import render

        try:
            Path(args.html).write_text(render(data), encoding="utf-8")
        except OSError as exc:
            raise SeamlineUsage(f"--html {args.html}: cannot write it ({exc.strerror or exc})") from None
        print(f"seamline: the figures are in {args.html}", file=sys.stderr)
    if not getattr(args, "baseline", None):
        return code
    from seamline.evals.gate import compare

    lines, regressed = compare(
        _baseline(args.baseline, root),
        data,
        significance=args.significance,
        max_cost_increase=args.max_cost_increase,
    )
    print(f"against the baseline {args.baseline}:", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    if regressed and code == 0:
        return EXIT_CODES["regressed"]
    return code


def _table(data: dict[str, Any]) -> str:
    from seamline.evals.report import table

    return table(data)


def _baseline(given: str, root: Any) -> dict[str, Any]:
    from pathlib import Path

    from seamline.evals.record import find_record
    from seamline.evals.report import report

    path = Path(given)
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SeamlineUsage(f"--baseline {given}: not the JSON of `seamline eval --json` ({exc})") from None
        if not isinstance(data, dict) or "variants" not in data or "results" not in data:
            raise SeamlineUsage(f"--baseline {given}: not the JSON of `seamline eval --json`")
        return data
    record = find_record(root, given)
    return report(record.plan(), record.trials(), status=str(record.status().get("status")))


def run(args: argparse.Namespace) -> int:
    if args.eval_command == "validate":
        return _validate(args)
    from seamline.evals.record import evals_dir, find_record, list_records
    from seamline.evals.report import report

    root = evals_dir(args.store)
    if args.eval_command == "list":
        for record in list_records(root):
            plan, trials, status = record.plan(), record.trials(), record.status()
            labels = [v.label for v in plan.variants]
            row: dict[str, object] = {
                "id": record.id,
                "dataset": plan.dataset,
                "status": status.get("status"),
                "variants": labels,
                "trials": len(trials),
                "planned": len(plan.trial_keys()),
            }
            print(
                json.dumps(row)
                if args.json
                else f"{record.id[:12]}  {status.get('status')!s:<11} {len(trials)}/{row['planned']} "
                f"trials  {', '.join(labels)}  {plan.dataset}"
            )
        return 0
    if args.eval_command == "show":
        record = find_record(root, args.id)
        data = report(record.plan(), record.trials(), status=str(record.status().get("status")))
        return _finish(args, data, root, 0)
    if args.eval_command == "rescore":
        return _rescore(args, root, find_record(root, args.id))
    if args.eval_command == "replay":
        return _replay(args, root, find_record(root, args.id))
    if args.eval_command == "resume":
        record = find_record(root, args.id)
        plan = record.plan()
        if record.status().get("status") == "completed":
            print(f"seamline: evaluation {record.id[:12]} finished already; nothing to resume", file=sys.stderr)
        return _execute(args, record, plan)
    return _start(args, root)


def _validate(args: argparse.Namespace) -> int:
    try:
        dataset = load_dataset(args.file)
    except DatasetError as exc:
        if args.json:
            problems = [{"line": p.line, "message": p.message} for p in exc.problems]
            print(json.dumps({"file": exc.path, "valid": False, "problems": problems}))
        else:
            for problem in exc.problems:
                where = f"{exc.path}:{problem.line}" if problem.line else exc.path
                print(f"{where}: {problem.message}", file=sys.stderr)
            print(f"seamline: {len(exc.problems)} problem(s) in {exc.path}", file=sys.stderr)
        return EXIT_CODES["usage"]
    if args.json:
        tasks = [{"id": t.id, "repository": str(t.repository), "tags": list(t.tags)} for t in dataset.tasks]
        print(json.dumps({"file": args.file, "valid": True, "tasks": tasks}))
    else:
        for task in dataset.tasks:
            tags = f"  [{', '.join(task.tags)}]" if task.tags else ""
            print(f"{task.id:<24} {task.repository}{tags}")
        print(f"{len(dataset.tasks)} task(s), valid", file=sys.stderr)
    return 0


def _start(args: argparse.Namespace, root: Any) -> int:
    from seamline.evals.record import EvalRecord, Variant
    from seamline.providers.registry import provider_class

    try:
        dataset = load_dataset(args.file)
    except DatasetError as exc:
        for problem in exc.problems:
            print(f"{exc.path}:{problem.line}: {problem.message}" if problem.line else problem.message, file=sys.stderr)
        raise SeamlineUsage(
            f"{len(exc.problems)} problem(s) in {exc.path} (seamline eval validate shows them)"
        ) from None
    dataset = dataset.tagged(args.tags or [])
    from seamline.evals.runner import starting_points

    problems = starting_points(dataset.tasks)
    if problems:
        raise SeamlineUsage("the tasks cannot start: " + "; ".join(problems))
    given = getattr(args, "variants", None) or []
    if not given:
        raise SeamlineUsage("name the backends to evaluate: --provider NAME, once or more")
    for name, value in (
        ("--samples", args.samples),
        ("--concurrency", args.concurrency),
        ("--max-steps", args.max_steps),
    ):
        if value < 1:
            raise SeamlineUsage(f"{name} must be at least 1")
    if args.budget_usd is not None and args.budget_usd <= 0:
        raise SeamlineUsage("--budget-usd must be above 0")
    common = list(getattr(args, "common_options", None) or [])
    model = getattr(args, "common_model", None)
    full = [type(v)(v.provider, v.model or model, [*common, *v.options]) for v in given]
    labels = _labels(full)
    variants = []
    for label, v in zip(labels, full, strict=True):
        cls = provider_class(v.provider)  # an unknown backend is refused before anything starts
        if args.record and cls.keys not in ("gateway", "gateway_or_environment", "in_process"):
            raise SeamlineUsage(
                f"--record: {v.provider}'s model requests do not pass seamline's gateway, so they cannot be "
                "recorded (see seamline providers list)"
            )
        variants.append(Variant(label=label, provider=v.provider, model=v.model, options=parse_options(v.options)))
    judge = None
    if args.judge_provider:
        provider_class(args.judge_provider)
        judge = Variant(
            label="judge",
            provider=args.judge_provider,
            model=args.judge_model,
            options=parse_options(args.judge_option or []),
        )
    elif args.judge_model or args.judge_option:
        raise SeamlineUsage("--judge-model and --judge-option need --judge-provider")
    record, plan = EvalRecord.create(
        root,
        {
            "dataset": str(args.file),
            "tasks": dataset.tasks,
            "variants": variants,
            "samples": args.samples,
            "concurrency": args.concurrency,
            "budget_usd": args.budget_usd,
            "sandbox": args.sandbox,
            "max_steps": args.max_steps,
            "keep": args.keep,
            "judge": judge,
            "yes": args.yes,
            "record": args.record,
        },
    )
    print(f"seamline: evaluation {record.id} ({len(plan.trial_keys())} trials)", file=sys.stderr)
    return _execute(args, record, plan)


def _execute(args: argparse.Namespace, record: Any, plan: Any, *, replaying: Any = None) -> int:
    from seamline.cli.sandbox_command import envelope_options, sandbox_for_run
    from seamline.evals.record import evals_dir
    from seamline.evals.report import report
    from seamline.evals.runner import EvalRun
    from seamline.live.race import Racer
    from seamline.providers.base import Provider
    from seamline.providers.registry import create_provider, provider_class
    from seamline.runner import session_run_options
    from seamline.sessions.sqlite_store import open_store
    from seamline.tools.workspace import Workspace, workspace_tools

    sandbox = args.sandbox or plan.sandbox
    envelope = argparse.Namespace(
        sandbox=sandbox, sandbox_policy=None, allow_host=None, store=args.store, no_store=False
    )

    def make_racer(variant: Any, tree: Any) -> Racer:
        cls = provider_class(variant.provider)
        options = {**variant.options, **(envelope_options(envelope, cls) or {})}
        provider = create_provider(variant.provider, model=variant.model, options=options)
        ws = Workspace(tree.workspace)
        box, journal = sandbox_for_run(envelope, ws)
        own_tools = provider.runs_own_tools and box is not None
        tools = workspace_tools(ws) if own_tools else workspace_tools(ws, sandbox=box, journal=journal)
        stored = session_run_options(provider, budget_usd=plan.budget_usd, extra={"sandbox": sandbox, "eval": plan.id})
        return Racer(label=variant.label, provider=provider, tree=tree, tools=tools, sandbox=box, stored=stored)

    def make_judge() -> Provider:
        return create_provider(plan.judge.provider, model=plan.judge.model, options=dict(plan.judge.options))

    store = open_store(args.store)
    try:
        evaluation = EvalRun(
            plan=plan,
            record=record,
            store=store,
            make_racer=make_racer,
            make_judge=make_judge if plan.judge is not None else None,
            yes=args.yes or plan.yes or bool(sandbox),
            replaying=replaying,
        )
        status = asyncio.run(_drive(evaluation))
    finally:
        store.close()
    data = report(plan, record.trials(), status=status)
    if status == "aborted":
        print(f"seamline: interrupted; `seamline eval resume {record.id[:12]}` runs what is left", file=sys.stderr)
        print(json.dumps(data) if args.json else _table(data))
        return EXIT_CODES["aborted"]
    code = {"completed": 0, "budget": EXIT_CODES["budget"]}.get(status, 1)
    if replaying is not None and not _same_verdicts(replaying, record) and code == 0:
        code = EXIT_CODES["failed"]
    return _finish(args, data, evals_dir(args.store), code)


def _replay(args: argparse.Namespace, root: Any, original: Any) -> int:
    import msgspec

    from seamline.evals.record import EvalRecord

    plan = original.plan()
    if not plan.record:
        raise SeamlineUsage(f"evaluation {original.id[:12]} kept no cassettes: run it with --record to replay it")
    fields = msgspec.structs.asdict(plan) | {"replayed_from": plan.id, "record": False}
    fields.pop("id")
    fields.pop("created")
    record, replayed = EvalRecord.create(root, fields)
    print(f"seamline: evaluation {record.id} replays {original.id[:12]} from its cassettes", file=sys.stderr)
    return _execute(args, record, replayed, replaying=original)


def _same_verdicts(original: Any, replayed: Any) -> bool:
    """Print whether every trial's verdict came out as recorded; True when all did."""
    before = {t.key: t.passed for t in original.trials()}
    after = {t.key: t.passed for t in replayed.trials()}
    differ = [k for k in before if after.get(k) != before[k]]
    if not differ:
        print(f"seamline: all {len(before)} verdicts reproduced from the cassettes", file=sys.stderr)
        return True
    for task, variant, sample in differ:
        was = "passed" if before[(task, variant, sample)] else "failed"
        now = {True: "passed", False: "failed", None: "did not run"}[after.get((task, variant, sample))]
        print(f"seamline: {task} / {variant} / sample {sample}: {was} when recorded, {now} on replay", file=sys.stderr)
    return False


def _rescore(args: argparse.Namespace, root: Any, record: Any) -> int:
    from pathlib import Path

    from seamline.cli.sandbox_command import sandbox_for_run
    from seamline.evals.report import report
    from seamline.evals.rescore import rescore
    from seamline.tools.shell_output import run_unsandboxed
    from seamline.tools.workspace import Workspace

    sandbox = args.sandbox or record.plan().sandbox
    envelope = argparse.Namespace(
        sandbox=sandbox, sandbox_policy=None, allow_host=None, store=args.store, no_store=False
    )

    async def run_check(folder: Path, command: str, timeout: float) -> tuple[int, str]:
        box, _ = sandbox_for_run(envelope, Workspace(folder))
        if box is None:
            return await run_unsandboxed(command, cwd=folder, timeout=timeout, cap=64 * 1024)
        ran = await box.execute(command, wall_s=timeout)
        return ran.outcome.returncode, ran.outcome.output.decode("utf-8", errors="replace")

    new_record, plan = asyncio.run(rescore(record, root, check=args.check, run_check=run_check))
    print(f"seamline: evaluation {new_record.id} rescored from {record.id[:12]}; no agent ran", file=sys.stderr)
    return _finish(args, report(plan, new_record.trials(), status="completed"), root, 0)


async def _drive(evaluation: Any) -> str:
    install_abort_handler(asyncio.get_running_loop(), evaluation.stop)
    return str(await evaluation.run())
