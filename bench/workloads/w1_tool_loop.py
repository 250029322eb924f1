"""W1 sequential tool loop: µs of framework CPU per model call, side by side.

Each run is six model calls and five tool calls on a scripted model with no latency;
every target (seamline with its SQLite store on, the peers, the bare asyncio floor) runs
in its own process and checks every run's answer, model calls and tool outputs.
"""

from __future__ import annotations

from typing import Any

from peers import launch


def run(*, quick: bool = False) -> dict[str, Any]:
    targets, note = launch.targets()
    # the peers spend 0.5-2 ms per model call: fewer runs give them as many samples per second
    runs, peer_runs, reps = (20, 10, 3) if quick else (200, 100, 5)
    values = {
        t: launch.run_target(
            t,
            "w1",
            options=["--runs", str(runs if t in launch.OURS else peer_runs), "--reps", str(reps)],
            timeout=60 if quick else 180,
        )
        for t in targets
    }
    return {
        "runs": runs,
        "peer_runs": peer_runs,
        "repetitions": reps,
        "note": note,
        "metrics": [
            launch.metric(
                "w1_us_per_model_call",
                "W1 tool loop: CPU per model call",
                unit="µs",
                better="lower",
                values=values,
                field="us_per_model_call",
                goal="≤ 50 µs",
                note=f"{runs} runs (peers {peer_runs}) × 6 model calls, CPU time, median of {reps}",
            )
        ],
    }
