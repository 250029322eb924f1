"""W3 streaming: one response of 20,000 text deltas read through each public streaming API.

seamline: ``ProviderSession.send`` (store on; the raw log coalesces deltas); pydantic-ai:
``run_stream`` + ``stream_text(delta=True, debounce_by=None)``; openai-agents:
``Runner.run_streamed`` raw response events; langgraph: ``astream(stream_mode="messages")``;
smolagents: ``run(stream=True)``. Every target checks it saw every delta, in order.
"""

from __future__ import annotations

from typing import Any

from peers import launch


def run(*, quick: bool = False) -> dict[str, Any]:
    targets, note = launch.targets()
    deltas, reps, peer_reps = (1_000, 1, 1) if quick else (20_000, 5, 3)
    values = {
        t: launch.run_target(
            t,
            "w3",
            options=["--deltas", str(deltas), "--reps", str(reps if t in launch.OURS else peer_reps)],
            timeout=60 if quick or t in launch.OURS else 90,
        )
        for t in targets
    }
    return {
        "deltas": deltas,
        "repetitions": reps,
        "peer_repetitions": peer_reps,
        "note": note,
        "metrics": [
            launch.metric(
                "w3_deltas_per_s",
                f"W3 stream of {deltas:,} deltas: deltas/s",
                unit="deltas/s",
                better="higher",
                values=values,
                field="deltas_per_s",
                goal="≥ 500,000/s",
                note=f"wall time, median of {reps} (peers {peer_reps}); limit 90 s per peer",
            )
        ],
    }
