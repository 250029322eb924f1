"""Cassettes at the gateway: a session's exchanges recorded (no credential written) and
replayed with the upstream gone, streams piece by piece, usage metered again; a request
that matches nothing is answered in the vendor's words naming the first field that
differs; a file that is not a cassette fails naming the file and the line.

The clients are the vendors' SDKs and raw HTTP; the upstreams the wire-format fakes on
127.0.0.1, stopped before each replay.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Usage
from seamline.gateway import ModelGateway, Upstream
from seamline.gateway.cassette import CassettePlayer, CassetteRecorder, CassetteUse, load_cassette
from seamline.gateway.cassette_match import first_difference, normalised
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.gemini_api import FakeGemini

REAL_KEY = "sk-real-canary-7f3a"
USAGE = {"input_tokens": 120, "output_tokens": 17, "cache_read_tokens": 40, "cache_write_tokens": 0}
PLACES = {"workspace": "/work/app", "home": "/home/me"}


async def _stream_hello(base_url: str, key: str, text: str = "hi") -> tuple[list[str], Exception | None]:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=key, max_retries=0)
    pieces: list[str] = []
    failure: Exception | None = None
    try:
        async with client.messages.stream(
            model="claude-test-1", max_tokens=64, messages=[{"role": "user", "content": text}]
        ) as stream:
            async for piece in stream.text_stream:
                pieces.append(piece)
    except anthropic.APIStatusError as exc:
        failure = exc
    finally:
        await client.close()
    return pieces, failure


async def _through(
    upstream_url: str, cassette: CassetteRecorder | CassettePlayer, text: str = "hi"
) -> tuple[list[str], Exception | None, list[Usage]]:
    gateway = ModelGateway()
    await gateway.start()
    seen: list[Usage] = []
    try:
        secret = REAL_KEY if isinstance(cassette, CassetteRecorder) else None
        binding = gateway.bind(Upstream("anthropic", upstream_url, secret), on_usage=seen.append, cassette=cassette)
        pieces, failure = await _stream_hello(gateway.base_url(binding), binding.placeholder, text)
        await gateway.idle()
    finally:
        await gateway.close()
    return pieces, failure, seen


def test_a_recorded_stream_replays_piece_by_piece_with_the_upstream_gone(tmp_path: Path) -> None:
    tape = tmp_path / "run.cassette.jsonl"
    script = [{"chunks": ["Hel", "lo", "!"], "usage": USAGE, "model": "claude-test-1"}]
    with FakeAnthropic(script=script, api_key=REAL_KEY) as fake:
        recorder = CassetteRecorder(tape, vendor="anthropic", places=PLACES, hidden=[REAL_KEY])
        recorded, failure, recorded_usage = asyncio.run(_through(fake.root_url, recorder))
        recorder.close()
        gone = fake.root_url
    assert failure is None and recorded == ["Hel", "lo", "!"]
    text = tape.read_text()
    assert REAL_KEY not in text and "sl-gw-" not in text  # no credential, no placeholder in the file
    header, exchanges = load_cassette(tape)
    assert header["seamline_cassette"] == 1 and len(exchanges) == 1
    assert exchanges[0].body["messages"] == [{"role": "user", "content": "hi"}]  # type: ignore[index]
    assert len(exchanges[0].chunks) > 3  # the SSE frames as they arrived, not one blob

    player = CassettePlayer(tape, places=PLACES)
    replayed, failure, replayed_usage = asyncio.run(_through(gone, player))  # the fake is stopped
    assert failure is None
    assert replayed == recorded  # the same deltas, one by one
    assert [(u.input_tokens, u.output_tokens, u.usage_id) for u in replayed_usage] == [
        (u.input_tokens, u.output_tokens, u.usage_id) for u in recorded_usage
    ]
    assert player.mismatches == [] and player.left == 0
    # On the wire: each recorded piece is one HTTP chunk of the replayed answer.
    pieces = asyncio.run(_replayed_pieces(tape, {"model": "claude-test-1", "max_tokens": 64, "stream": True}))
    assert pieces == exchanges[0].chunks


async def _replayed_pieces(tape: Path, body: dict[str, Any]) -> list[bytes]:
    """The HTTP chunks of the answer a player gives, read off the socket."""
    gateway = ModelGateway()
    await gateway.start()
    try:
        binding = gateway.bind(
            Upstream("anthropic", "http://127.0.0.1:9"), cassette=CassettePlayer(tape, places=PLACES)
        )
        sent = json.dumps({**body, "messages": [{"role": "user", "content": "hi"}]}).encode()
        answer = await _raw(
            gateway.port,
            f"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {binding.placeholder}\r\n"
            f"content-length: {len(sent)}\r\nconnection: close\r\n\r\n".encode()
            + sent,
        )
    finally:
        await gateway.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower(), head
    pieces: list[bytes] = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return pieces
        pieces.append(rest[:size])
        rest = rest[size + 2 :]


def test_no_credential_is_written_whatever_carries_it(tmp_path: Path) -> None:
    tape = tmp_path / "t.jsonl"
    recorder = CassetteRecorder(tape, vendor="anthropic", places=PLACES, hidden=[REAL_KEY])
    placeholder = "sl-gw-" + "Z" * 32
    body = json.dumps({"messages": [{"role": "user", "content": f"env: KEY={placeholder} REAL={REAL_KEY}"}]})
    recorder.add(
        method="POST",
        target=f"/v1beta/models/m:generateContent?key={REAL_KEY}&alt=sse",
        body=body.encode(),
        status=200,
        reason="OK",
        headers=[("content-type", "application/json"), ("set-cookie", "s=1"), ("content-length", "2")],
        chunks=[b"{}"],
    )
    recorder.close()
    text = tape.read_text()
    assert REAL_KEY not in text and placeholder not in text and "set-cookie" not in text
    _, exchanges = load_cassette(tape)
    assert exchanges[0].target == "/v1beta/models/m:generateContent?alt=sse"
    assert exchanges[0].body == {"messages": [{"role": "user", "content": "env: KEY=<placeholder> REAL=<redacted>"}]}


def test_a_changed_request_is_refused_naming_the_first_field_that_differs(tmp_path: Path) -> None:
    tape = tmp_path / "run.cassette.jsonl"
    with FakeAnthropic(script=[{"text": "Hello", "usage": USAGE}], api_key=REAL_KEY) as fake:
        recorder = CassetteRecorder(tape, vendor="anthropic", places=PLACES, hidden=[REAL_KEY])
        asyncio.run(_through(fake.root_url, recorder, "Say hello."))
        recorder.close()
        gone = fake.root_url
    player = CassettePlayer(tape, places=PLACES)
    pieces, failure, usage = asyncio.run(_through(gone, player, "Say goodbye."))
    assert pieces == [] and usage == []
    assert failure is not None and getattr(failure, "status_code", None) == 400
    why = 'cassette: request 1 differs at messages[0].content (recorded "Say hello.", sent "Say goodbye.")'
    assert player.mismatches == [f"{why}; in {tape}"]
    assert why in str(failure)  # the program is told, in its vendor's words


async def _raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data


async def _gemini(upstream_url: str, cassette: CassetteRecorder | CassettePlayer) -> bytes:
    gateway = ModelGateway()
    await gateway.start()
    try:
        secret = REAL_KEY if isinstance(cassette, CassetteRecorder) else None
        binding = gateway.bind(Upstream("gemini", upstream_url, secret), cassette=cassette)
        body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
        path = f"/v1beta/models/gemini-test:streamGenerateContent?alt=sse&key={binding.placeholder}"
        return await _raw(
            gateway.port,
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body,
        )
    finally:
        await gateway.close()


def test_a_key_in_the_query_is_never_written_and_the_replay_matches_without_it(tmp_path: Path) -> None:
    tape = tmp_path / "gemini.jsonl"
    with FakeGemini(script=[{"text": "ok", "usage": USAGE}], api_key=REAL_KEY) as fake:
        recorder = CassetteRecorder(tape, vendor="gemini", places=PLACES, hidden=[REAL_KEY])
        first = asyncio.run(_gemini(fake.root_url, recorder))
        recorder.close()
        gone = fake.root_url
    assert first.startswith(b"HTTP/1.1 200") and b'"ok"' in first
    text = tape.read_text()
    assert REAL_KEY not in text and "sl-gw-" not in text and "key=" not in text
    assert json.loads(text.splitlines()[1])["request"]["target"].endswith("streamGenerateContent?alt=sse")
    again = asyncio.run(_gemini(gone, CassettePlayer(tape, places=PLACES)))
    assert again.startswith(b"HTTP/1.1 200") and b'"ok"' in again


def test_what_varies_from_run_to_run_is_normalised_away() -> None:
    recorded: dict[str, object] = {
        "metadata": {
            "user_id": '{"device_id":"' + "ab12" * 16 + '","session_id":"1d9f6eea-22f1-40b4-9093-071a69b69ad9"}'
        },
        "system": "Today's date is 2026-12-07. Working directory: /work/app; memory in /home/me/.claude/projects/"
        "-work-app/memory; key sl-gw-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA at 2026-12-07T10:11:12.5Z",
    }
    sent: dict[str, object] = {
        "metadata": {
            "user_id": '{"device_id":"' + "cd34" * 16 + '","session_id":"098fd6e5-f6a7-45f8-b719-39c0921d2cb1"}'
        },
        "system": "Today's date is 2027-01-02. Working directory: /tmp/x/ws; memory in /root/.claude/projects/"
        "-tmp-x-ws/memory; key sl-gw-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB at 2027-01-02T00:00:00Z",
    }
    recorded["input"] = [
        {"id": "msg_012c42dc-97f6-5698-adb3-24bba3b8d4f1", "output": "Chunk ID: 512a7a\nWall time: 0.0012 seconds"},
        {"functionCall": {"id": "run_shell_command_1796665958629_0"}, "output": "Process Group PGID: 16200"},
    ]
    sent["input"] = [
        {"id": "msg_80aa8a62-028e-5817-9b96-6b0b70dbb36b", "output": "Chunk ID: f5f6e7\nWall time: 1.5 seconds"},
        {"functionCall": {"id": "run_shell_command_1796665969653_0"}, "output": "Process Group PGID: 16542"},
    ]
    here = {"workspace": "/tmp/x/ws", "home": "/root"}
    assert normalised(recorded, PLACES) == normalised(sent, here)
    system = str(sent["system"])
    changed = {**sent, "system": system.replace("Working", "Working now")}
    assert first_difference(normalised(recorded, PLACES), normalised(changed, here)) is not None


@pytest.mark.parametrize(
    ("recorded", "sent", "where"),
    [
        ({"a": [{"b": 1}]}, {"a": [{"b": 2}]}, "a[0].b (recorded 1, sent 2)"),
        ({"a": [1, 2]}, {"a": [1]}, "a (recorded 2 items, sent 1)"),
        ({"a": 1, "b": 2}, {"a": 1}, "b (recorded, not sent)"),
        ({"a": 1}, {"a": 1, "c": 3}, "c (sent, not recorded)"),
        ({"a": "x"}, {"a": 1}, 'a (recorded "x", sent 1)'),
        ({"a": 1}, {"a": 1}, None),
    ],
)
def test_the_first_difference_is_named_by_its_path(recorded: Any, sent: Any, where: str | None) -> None:
    assert first_difference(recorded, sent) == where


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "the file is empty"),
        ("not json\n", "line 1: not JSON"),
        ('{"seamline_cassette": 99}\n', "line 1: not a seamline cassette of version 1"),
        ('{"seamline_cassette": 1}\n{"request": {}}\n', "line 2: not an exchange"),
        ('{"seamline_cassette": 1}\n\n{"request": {"method": "POST"}, "response": 1}\n', "line 3: not an exchange"),
        ('{"seamline_cassette": 1}\n[1]\n', "line 2: not a JSON object"),
    ],
)
def test_a_file_that_is_not_a_cassette_is_named_with_its_line(tmp_path: Path, content: str, said: str) -> None:
    tape = tmp_path / "bad.jsonl"
    tape.write_text(content)
    with pytest.raises(InvalidRequest) as caught:
        CassettePlayer(tape, places={})
    assert str(tape) in caught.value.message and said in caught.value.message


def test_a_cassette_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidRequest, match=r"cassette .*file/t\.jsonl: cannot be written"):
        CassetteRecorder(tmp_path / "file" / "t.jsonl", vendor="anthropic", places={}, hidden=[])


def test_a_missing_file_or_both_modes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="no such file to replay"):
        CassetteUse.of(record=None, replay=tmp_path / "none.jsonl")
    with pytest.raises(InvalidRequest, match="not both"):
        CassetteUse.of(record=tmp_path / "a", replay=tmp_path / "b")
    use = CassetteUse.of(record=tmp_path / "a", replay=None)
    assert use is not None and use.mode == "record" and use.path.is_absolute()
