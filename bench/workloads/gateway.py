"""The model gateway: what it adds to a streamed model request, against the same request
sent straight to the fake server.

Three processes, as in use: the fake Anthropic API (``tests/fakes``) in its own process; the
client in its own process (it stands for the agent CLI: a raw asyncio HTTP/1.1 client, one
keep-alive connection, so its own cost is small and the same both ways); and the gateway
(:class:`~seamline.gateway.ModelGateway`) on this process's event loop, as seamline runs it.
Every request is the same ``POST /v1/messages`` with ``stream: true``; the fake answers each
with ``CHUNKS`` text deltas (SSE over chunked HTTP, ``CHUNKS + 6`` frames) and a usage.
``direct``: the client sends the real key to the fake; ``gateway``: the placeholder key to
the gateway, which swaps in the real one (the fake refuses any other), relays the stream and
meters it. The two kinds alternate, run by run. The fake runs with ``TCP_NODELAY`` on (as
production HTTP servers do): without it, its head and first frame, written apart, wait out
the client's delayed ACK (40 ms) on a reused connection (the gateway's upstream connections
are reused too, now that it keeps them alive).

Two streams: **burst** (the fake writes the frames as fast as it can: the gateway's
throughput) and **paced** (``chunk_delay`` 1 ms between frames, closer to a model's pace:
what the gateway adds to each chunk's arrival, and its CPU when it wakes once per chunk).

- **Time to first byte**: from the request written to the first byte of the response body
  (the first chunk's size line); p50 and p90 over every request of every run.
- **Per streamed chunk**: from the body's first byte to its last, over the chunks received
  (median of the requests).
- **Gateway CPU per request**: ``time.process_time`` of this process while a client run is
  in flight, gateway runs minus direct runs (medians), over the requests of a run (warm-up
  ones included: the gateway relays them too). In a direct run this process only waits for
  the client process, so the difference is the gateway's own CPU: parsing heads, the
  upstream connection (one per request), copying the body, the meter's SSE parsing.
- **The CLI's own CPU per model request** (full run only, when the pinned ``claude`` is
  installed): a warm ``claude -p --input-format stream-json`` process against the fake (no
  gateway; the same burst answer), its CPU (``/proc/PID/stat``, ``utime + stime`` with its
  reaped children) over turns 2 to ``CLI_TURNS``, over the model requests those turns made.
  The goal's "≤ 5% of the CLI's own" reads the gateway's burst CPU against it.

- **Kept-alive upstream connections**: the burst request straight to the fake, through the
  gateway keeping its upstream connections alive, and through it with none kept (a new
  connection per request, as the gateway did before); over HTTP and over TLS (a self-signed
  certificate made now with ``cryptography``, trusted through ``Upstream(ssl_context=…)``):
  TTFB p50 and the upstream connections opened per 100 requests.

Timings are reported, never asserted; every request checks its answer (status, chunk count,
every delta; the gateway's count of requests, no refusal, the usage metered). Quick mode:
two short runs of each kind, no CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
CHUNKS = 50
MODEL = "claude-sonnet-4-5"
DELTAS = [f"d{i} " for i in range(CHUNKS)]
CLI_TURNS = 9
PACED = "claude-paced"
CHUNK_DELAY_S = 0.001
SECRET = "sk-ant-bench-real"
CLAUDE = ROOT / ".tools" / "agent-clis" / "node_modules" / ".bin" / "claude"
GOAL_TTFB_MS = 2.0
GOAL_CPU_SHARE = 0.05


# -- the client (run as ``python gateway.py --client URL KEY WARM N``) -----------------------
async def _client(url: str, key: str, model: str, warm: int, n: int, cafile: str = "") -> dict[str, Any]:
    """``warm`` + ``n`` streamed requests on one keep-alive connection; the last ``n`` timed
    (over TLS to an ``https`` URL, trusting ``cafile``)."""
    parts = urlsplit(url)
    tls = ssl.create_default_context(cafile=cafile) if parts.scheme == "https" else None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=tls)
    reads = [0]
    feed = reader.feed_data

    def counted(data: bytes) -> None:  # how often the client wakes to read
        reads[0] += 1
        feed(data)

    reader.feed_data = counted  # type: ignore[method-assign]
    body = json.dumps(
        {"model": model, "max_tokens": 1024, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    ).encode()
    request = (
        f"POST {parts.path.rstrip('/')}/v1/messages HTTP/1.1\r\nhost: {parts.netloc}\r\nx-api-key: {key}\r\n"
        f"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    ttfb: list[float] = []
    per_chunk: list[float] = []
    cpu_started = 0.0
    for i in range(warm + n):
        if i == warm:
            cpu_started = time.process_time()
            reads[0] = 0
        started = time.perf_counter()
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
            raise SystemExit(f"unexpected answer: {head[:300]!r}")
        first = 0.0
        chunks = 0
        payload = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            if not first:
                first = time.perf_counter()
            size = int(size_line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            payload += (await reader.readexactly(size + 2))[:-2]
            chunks += 1
        ended = time.perf_counter()
        if chunks != CHUNKS + 6 or payload.count(b'"text_delta"') != CHUNKS or b'"d49 "' not in payload:
            raise SystemExit(f"unexpected body: {chunks} chunks, {bytes(payload[:300])!r}")
        if i >= warm:
            ttfb.append(first - started)
            per_chunk.append((ended - first) / chunks)
    cpu = time.process_time() - cpu_started
    writer.close()
    await writer.wait_closed()
    return {"ttfb": ttfb, "per_chunk": per_chunk, "client_cpu_per_request": cpu / n, "reads": reads[0] / n}


# -- the fake, the gateway, the runs ------------------------------------------------------
def _entry() -> dict[str, Any]:
    """The answer to every request: ``CHUNKS`` text deltas, then its usage."""
    return {"times": -1, "chunks": DELTAS, "usage": {"input_tokens": 20, "output_tokens": CHUNKS}}


_FAKE = """
import ssl
import sys
from tests.fakes import _http
from tests.fakes.anthropic_api import main
_http._Handler.disable_nagle_algorithm = True  # TCP_NODELAY, as every production HTTP server sets
args = sys.argv[1:]
if args[:1] == ["--tls"]:  # serve TLS with the bench's own certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args[1], args[2])
    args = args[3:]
    accept = _http._Server.get_request
    def get_request(self):
        sock, address = accept(self)
        return context.wrap_socket(sock, server_side=True), address
    _http._Server.get_request = get_request
raise SystemExit(main(args))
"""


def _certificate(folder: Path) -> tuple[Path, Path] | None:
    """A self-signed certificate for 127.0.0.1 (and its key), made now; ``None`` without the
    ``cryptography`` package."""
    from tests.fakes.tls import self_signed_certificate

    return self_signed_certificate(folder, name="seamline bench")


def _start_fake(folder: Path, tls: tuple[Path, Path] | None = None) -> tuple[subprocess.Popen[str], str]:
    entry = _entry()
    paced = {**entry, "match": {"model": PACED}, "chunk_delay": CHUNK_DELAY_S}
    script = folder / "script.json"
    script.write_text(json.dumps([paced, entry]))
    serve_tls = ["--tls", str(tls[0]), str(tls[1])] if tls is not None else []
    proc = subprocess.Popen(
        [sys.executable, "-c", _FAKE, *serve_tls, "--port", "0", "--script", str(script), "--api-key", SECRET],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the fake did not start: {line!r}")
    url = line.split()[1].removesuffix("/v1")
    return proc, url.replace("http://", "https://", 1) if tls is not None else url


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _client_run(
    url: str, key: str, model: str, warm: int, n: int, cafile: str = ""
) -> tuple[dict[str, Any], float]:
    """One client process's figures, and this process's CPU while it ran."""
    cpu = time.process_time()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", url, key, model, str(warm), str(n), cafile,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    spent = time.process_time() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"the client failed ({proc.returncode}): {out[-500:]!r}")
    return json.loads(out), spent


async def _measure(root_url: str, model: str, runs: int, warm: int, n: int) -> dict[str, Any]:
    from seamline.gateway import ModelGateway, Upstream

    gw = ModelGateway()
    await gw.start()
    binding = gw.bind(Upstream("anthropic", root_url, SECRET))
    urls = {"direct": (root_url, SECRET), "gateway": (gw.base_url(binding), binding.placeholder)}
    seen: dict[str, dict[str, list[float]]] = {
        k: {"ttfb": [], "per_chunk": [], "client": [], "cpu": [], "reads": []} for k in urls
    }
    try:
        for i in range(runs):
            order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
            for kind in order:
                figures, spent = await _client_run(*urls[kind], model, warm, n)
                seen[kind]["ttfb"] += figures["ttfb"]
                seen[kind]["per_chunk"] += figures["per_chunk"]
                seen[kind]["client"].append(figures["client_cpu_per_request"])
                seen[kind]["reads"].append(figures["reads"])
                seen[kind]["cpu"].append(spent)
        await gw.idle()
    finally:
        await gw.close()
    relayed = runs * (warm + n)
    assert binding.requests == relayed and not gw.refusals and not binding.failures, (binding, gw.refusals)
    assert len(binding.usages) == relayed and binding.usages[-1].output_tokens == CHUNKS, binding.usages[-1:]

    def q(values: list[float], p: int) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]

    out: dict[str, Any] = {}
    for kind, s in seen.items():
        out[f"{kind}_ttfb_p50_ms"] = round(q(s["ttfb"], 50) * 1e3, 3)
        out[f"{kind}_ttfb_p90_ms"] = round(q(s["ttfb"], 90) * 1e3, 3)
        out[f"{kind}_per_chunk_us"] = round(statistics.median(s["per_chunk"]) * 1e6, 1)
        out[f"{kind}_client_cpu_per_request_ms"] = round(statistics.median(s["client"]) * 1e3, 3)
        out[f"{kind}_client_reads_per_request"] = round(statistics.median(s["reads"]), 1)
    out["added_ttfb_p50_ms"] = round(out["gateway_ttfb_p50_ms"] - out["direct_ttfb_p50_ms"], 3)
    out["added_ttfb_p90_ms"] = round(out["gateway_ttfb_p90_ms"] - out["direct_ttfb_p90_ms"], 3)
    out["added_per_chunk_us"] = round(out["gateway_per_chunk_us"] - out["direct_per_chunk_us"], 1)
    gateway_cpu = (statistics.median(seen["gateway"]["cpu"]) - statistics.median(seen["direct"]["cpu"])) / (warm + n)
    out["gateway_cpu_per_request_ms"] = round(gateway_cpu * 1e3, 3)
    out["gateway_cpu_per_chunk_us"] = round(gateway_cpu / (CHUNKS + 6) * 1e6, 1)
    return out


# -- kept-alive upstream connections: the same requests with and without ---------------
async def _keepalive(root_url: str, runs: int, n: int, cafile: str = "") -> dict[str, Any]:
    """TTFB p50 and upstream connections opened per 100 requests: straight to the fake, through
    the gateway keeping its upstream connections alive, and through it with none kept (as
    before: one connection per request). The three alternate, run by run."""
    from seamline.gateway import ModelGateway, Upstream
    from seamline.gateway.upstream_pool import upstream_pool

    context = ssl.create_default_context(cafile=cafile) if cafile else None
    gw = ModelGateway()
    await gw.start()
    pool = upstream_pool()
    binding = gw.bind(Upstream("anthropic", root_url, SECRET, ssl_context=context))
    kinds = {
        "direct": (root_url, SECRET),
        "kept": (gw.base_url(binding), binding.placeholder),
        "fresh": (gw.base_url(binding), binding.placeholder),
    }
    ttfb: dict[str, list[float]] = {k: [] for k in kinds}
    opened: dict[str, int] = dict.fromkeys(kinds, 0)
    try:
        for i in range(runs):
            order = list(kinds) if i % 2 == 0 else list(reversed(kinds))
            for kind in order:
                await pool.close_idle()
                pool.max_idle = 0 if kind == "fresh" else 8
                before = pool.opened
                figures, _ = await _client_run(*kinds[kind], MODEL, 1, n, cafile)
                ttfb[kind] += figures["ttfb"]
                opened[kind] += pool.opened - before
        await gw.idle()
    finally:
        await gw.close()
    assert len(binding.usages) == 2 * runs * (n + 1) and not binding.failures, binding.failures
    out: dict[str, Any] = {}
    for kind in kinds:
        out[f"{kind}_ttfb_p50_ms"] = round(statistics.median(ttfb[kind]) * 1e3, 3)
        if kind != "direct":  # per 100 timed requests (the warm-up one counted in)
            out[f"{kind}_connections_per_100"] = round(opened[kind] / (runs * (n + 1)) * 100, 1)
    out["kept_saves_ttfb_p50_ms"] = round(out["fresh_ttfb_p50_ms"] - out["kept_ttfb_p50_ms"], 3)
    return out


def _default_context_ms() -> float:
    """What ``ssl.create_default_context()`` costs (the gateway made one per request before)."""
    times = []
    for _ in range(10):
        started = time.perf_counter()
        ssl.create_default_context()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1e3, 3)


def _keepalive_figures(folder: Path, runs: int, n: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    proc, root_url = _start_fake(folder)
    try:
        result.update({f"keepalive_http_{k}": v for k, v in asyncio.run(_keepalive(root_url, runs, n)).items()})
    finally:
        _stop(proc)
    tls = _certificate(folder)
    if tls is None:
        result["keepalive_https_skipped"] = "needs the cryptography package"
        return result
    proc, root_url = _start_fake(folder, tls)
    try:
        figures = asyncio.run(_keepalive(root_url, runs, n, str(tls[0])))
        result.update({f"keepalive_https_{k}": v for k, v in figures.items()})
    finally:
        _stop(proc)
    result["create_default_context_ms"] = _default_context_ms()
    return result


# -- the CLI's own CPU per model request --------------------------------------------------
def _cpu_of(pid: int) -> float:
    """CPU seconds of a live process and its reaped children (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


async def _cli_cpu(env: dict[str, str], ws: Path, fake: Any, turns: int) -> tuple[float, int]:
    """A warm Claude Code process's CPU over turns 2 to ``turns``, and the model requests they made."""
    proc = await asyncio.create_subprocess_exec(
        str(CLAUDE), "-p", "--input-format", "stream-json", "--session-id", str(uuid.uuid4()),
        "--output-format", "stream-json", "--verbose", "--include-partial-messages", "--model", MODEL,
        env=env, cwd=ws, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    cpu = 0.0
    requests = 0
    try:
        for n in range(1, turns + 1):
            if n == 2:
                cpu, requests = _cpu_of(proc.pid), len(fake.model_requests())
            message = {"role": "user", "content": [{"type": "text", "text": f"turn {n}"}]}
            proc.stdin.write(json.dumps({"type": "user", "message": message}).encode() + b"\n")
            await proc.stdin.drain()
            while line := await proc.stdout.readline():
                if line.startswith(b'{"type":"result"'):
                    assert json.loads(line).get("result", "").strip() == "".join(DELTAS).strip(), line[:300]
                    break
            else:
                raise RuntimeError("claude ended before its turn's result")
        cpu, requests = _cpu_of(proc.pid) - cpu, len(fake.model_requests()) - requests
    finally:
        proc.stdin.close()
        await proc.wait()
    return cpu, requests


def _cli_cpu_per_request() -> dict[str, Any]:
    if not CLAUDE.exists() or not Path("/proc/self/stat").exists():
        return {"cli_skipped": f"needs Linux and {CLAUDE} (bash scripts/system/40-agent-clis.sh)"}
    sys.path.insert(0, str(ROOT))
    from tests.providers.agent_cli_support import AgentAnthropic

    with tempfile.TemporaryDirectory() as tmp, AgentAnthropic([], fallback=_entry()) as fake:
        home, ws = Path(tmp) / "home", Path(tmp) / "ws"
        home.mkdir()
        ws.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SEAMLINE_BLOCK", "CLAUDE"))}
        env.update(HOME=str(home), ANTHROPIC_API_KEY="sk-ant-bench", DISABLE_AUTOUPDATER="1")
        env.update(ANTHROPIC_BASE_URL=fake.root_url, CLAUDE_CODE_MAX_RETRIES="0", CLAUDE_CODE_EAGER_FLUSH="1")
        cpu, requests = asyncio.run(_cli_cpu(env, ws, fake, turns=CLI_TURNS))
    if requests == 0:
        return {"cli_skipped": "claude made no model request after its first turn"}
    return {
        "cli_turns": CLI_TURNS - 1,
        "cli_requests": requests,
        "cli_cpu_per_request_ms": round(cpu / requests * 1e3, 1),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    runs, warm, n, paced_n = (2, 2, 10, 4) if quick else (6, 5, 100, 20)
    with tempfile.TemporaryDirectory() as tmp:
        proc, root_url = _start_fake(Path(tmp))
        try:
            figures = asyncio.run(_measure(root_url, MODEL, runs, warm, n))
            paced = asyncio.run(_measure(root_url, PACED, runs, 1, paced_n))
        finally:
            _stop(proc)
        keepalive = _keepalive_figures(Path(tmp), 2 if quick else 4, 10 if quick else 100)
    result: dict[str, Any] = {
        "chunks": CHUNKS + 6,
        "text_deltas": CHUNKS,
        "runs": runs,
        "requests_per_run": n,
        "paced_requests_per_run": paced_n,
        "paced_chunk_delay_ms": CHUNK_DELAY_S * 1e3,
    }
    result.update(figures)
    result.update({f"paced_{k}": v for k, v in paced.items()})
    result.update(keepalive)
    result["goal_added_ttfb_p50_ms"] = GOAL_TTFB_MS
    result["added_ttfb_p50_over_goal"] = round(figures["added_ttfb_p50_ms"] / GOAL_TTFB_MS, 2)
    if not quick:
        result.update(_cli_cpu_per_request())
    if "cli_cpu_per_request_ms" in result:
        share = figures["gateway_cpu_per_request_ms"] / result["cli_cpu_per_request_ms"]
        result["gateway_cpu_share_of_cli"] = round(share, 4)
        result["gateway_cpu_share_over_goal"] = round(share / GOAL_CPU_SHARE, 2)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        url, key, model, warm, n, cafile = sys.argv[2:8]
        print(json.dumps(asyncio.run(_client(url, key, model, int(warm), int(n), cafile))))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
