"""seamline's benchmarks: one command, every workload, ratios against the floor.

    python bench/run.py            full run; writes bench/results/latest.json
    python bench/run.py --quick    a few repetitions of each workload (CI runs this so it never rots)

Every workload checks its own result, so no figure is hollow. Tests never assert times;
figures live here.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from report import render_table, report_machine  # noqa: E402
from workloads import acp_opencode as acp_opencode_workload  # noqa: E402
from workloads import big_repo as big_repo_workload  # noqa: E402
from workloads import cli_parsers as cli_parsers_workload  # noqa: E402
from workloads import eval_overhead as eval_overhead_workload  # noqa: E402
from workloads import fleet_views as fleet_views_workload  # noqa: E402
from workloads import gateway as gateway_workload  # noqa: E402
from workloads import (  # noqa: E402
    loop_overhead,
    sandbox_startup,
    w1_tool_loop,
    w2_concurrency,
    w3_streaming,
    w6_startup,
)
from workloads import model_apis as model_apis_workload  # noqa: E402
from workloads import stages as stages_workload  # noqa: E402
from workloads import store as store_workload  # noqa: E402
from workloads import trace as trace_workload  # noqa: E402
from workloads import warm_sessions as warm_sessions_workload  # noqa: E402
from workloads import warm_sessions_codex as warm_sessions_codex_workload  # noqa: E402
from workloads import worktree as worktree_workload  # noqa: E402

WORKLOADS = {
    "loop_overhead": loop_overhead.run,
    "w1_tool_loop": w1_tool_loop.run,
    "w2_concurrency": w2_concurrency.run,
    "w3_streaming": w3_streaming.run,
    "w6_startup": w6_startup.run,
}
WORKLOADS["trace"] = trace_workload.run
WORKLOADS["store"] = store_workload.run
WORKLOADS["stages"] = stages_workload.run
WORKLOADS["sandbox_startup"] = sandbox_startup.run
WORKLOADS["model_apis"] = model_apis_workload.run
WORKLOADS["cli_parsers"] = cli_parsers_workload.run
WORKLOADS["acp_opencode"] = acp_opencode_workload.run
WORKLOADS["worktree"] = worktree_workload.run
WORKLOADS["warm_sessions"] = warm_sessions_workload.run
WORKLOADS["warm_sessions_codex"] = warm_sessions_codex_workload.run
WORKLOADS["gateway"] = gateway_workload.run
WORKLOADS["big_repo"] = big_repo_workload.run
WORKLOADS["eval_overhead"] = eval_overhead_workload.run
WORKLOADS["fleet_views"] = fleet_views_workload.run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few repetitions; for CI")
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="run only these workloads")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    results = {}
    for name in args.only or WORKLOADS:
        started = time.perf_counter()
        results[name] = WORKLOADS[name](quick=args.quick)
        results[name]["wall_s"] = round(time.perf_counter() - started, 3)
    report = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.machine(),
            **report_machine(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": args.quick,
        "results": results,
    }
    for name, result in results.items():
        print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in result.items() if not isinstance(v, dict | list)))
    print(render_table(report))
    out = args.out or (None if args.quick else HERE / "results" / "latest.json")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
