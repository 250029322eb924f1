"""Run one bench workload for one target in this process and print its figures as JSON.

    python bench/peers/run_peer.py TARGET WORKLOAD [--runs N] [--reps R] [--deltas N] [--latency S]

TARGET is a module of bench/peers/targets/ (``floor``, ``seamline``, ``pydantic_ai``,
``openai_agents``, ``langgraph``, ``smolagents``); WORKLOAD is ``w1``, ``w2``, ``w3`` or
``once``. seamline and the floor run under the main .venv, the peers under bench/.venv;
bench/run.py starts one such process per figure so that no target warms another's caches
or shares its heap. stdout holds one line, ``BENCH-RESULT`` and the JSON result; a failed check exits 3.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402

RESULT_MARK = "BENCH-RESULT "
TARGETS = (
    "floor",
    "seamline",
    "seamline_nostore",
    "seamline_agent",
    "seamline_agent_nostore",
    "pydantic_ai",
    "openai_agents",
    "langgraph",
    "smolagents",
)


def load_target(name: str) -> ModuleType:
    # Loaded by path under a private name: a file called pydantic_ai.py must not shadow the package.
    spec = importlib.util.spec_from_file_location(f"_bench_target_{name}", HERE / "targets" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", choices=TARGETS)
    parser.add_argument("workload", choices=("w1", "w2", "w3", "once"))
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    # Whatever a framework prints (smolagents renders its stream with rich) goes to stderr, so
    # that stdout holds only the result line.
    with contextlib.redirect_stdout(sys.stderr):
        result = measure(args)
    print(RESULT_MARK + json.dumps(result))
    return 3 if result["status"] == "check_failed" else 0


def measure(args: argparse.Namespace) -> dict[str, object]:
    target = load_target(args.target)
    result: dict[str, object] = {"target": args.target, "version": target.VERSION, "workload": args.workload}
    with tempfile.TemporaryDirectory(prefix="seamline-bench-") as tmp:
        harness.workdir_setup(target, Path(tmp))
        try:
            if args.workload == "w1":
                result.update(harness.w1(target, runs=args.runs, reps=args.reps))
            elif args.workload == "w2":
                result.update(harness.w2(target, runs=args.runs, latency=args.latency))
            elif args.workload == "w3":
                result.update(harness.w3(target, deltas=args.deltas, reps=args.reps))
            else:
                result.update(harness.once(target))
        except harness.CheckFailed as exc:
            result.update(status="check_failed", detail=str(exc))
        finally:
            harness.workdir_teardown(target)
    result.setdefault("status", "ok")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
