"""The egress gate alone: the allowlist, the proxy's refusals and what it lets through, and
the envelope's command line (no credential on it; the runtime folder read-only but for its
``expose`` subfolder), and how seamline reaches a socket the program made there."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.sandbox.egress import AllowList, EgressGate, loopback_to_unix, open_exposed_socket
from seamline.sandbox.envelope import EnvelopeSpec, envelope_argv
from seamline.sandbox.policy import SandboxPolicy
from tests.sandbox.envelope_support import second_server


def test_allowlist_entries_with_and_without_port() -> None:
    allow = AllowList.parse(["Api.Example.com", "other.org:8443", "[::1]:9"])
    assert allow.permits("api.example.com", 443) and allow.permits("api.example.com", 80)
    assert allow.permits("other.org", 8443) and not allow.permits("other.org", 443)
    assert allow.permits("::1", 9) and not allow.permits("evil.com", 443)


@pytest.mark.parametrize("bad", ["http://x.org", "x.org:0", "x.org:99999", "a b", "user@host"])
def test_allowlist_rejects_what_is_not_host_port(bad: str) -> None:
    with pytest.raises(InvalidRequest):
        AllowList.parse([bad])


def test_policy_network_allow_table_and_booleans() -> None:
    policy = SandboxPolicy.from_mapping({"network": {"allow": ["api.example.com", "x.org:8080"]}})
    assert policy.network is False and policy.network_allow == ("api.example.com", "x.org:8080")
    assert SandboxPolicy.from_mapping({"network": True}).network is True
    with pytest.raises(InvalidRequest, match="network must be"):
        SandboxPolicy.from_mapping({"network": {"deny": ["x"]}})


async def _ask(socket_path: Path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


def test_proxy_refuses_unlisted_hosts_and_forwards_listed_ones(tmp_path: Path) -> None:
    async def scenario() -> None:
        with second_server() as (port, hits):
            gate = EgressGate(folder=tmp_path, allow=AllowList.parse([f"127.0.0.1:{port}"]))
            await gate.start()
            try:
                ok = await _ask(
                    gate.proxy_socket,
                    f"GET http://127.0.0.1:{port}/in HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
                )
                no = await _ask(gate.proxy_socket, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil\r\n\r\n")
                other = await _ask(
                    gate.proxy_socket, f"GET http://127.0.0.1:{port + 1}/x HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                )
                junk = await _ask(gate.proxy_socket, b"hello\r\n\r\n")
            finally:
                await gate.close()
            assert hits == ["/in"] and b"SECOND-SERVER-REACHED" in ok
            assert no.startswith(b"HTTP/1.1 403") and b"evil.example:443" in no
            assert other.startswith(b"HTTP/1.1 403")
            assert junk.startswith(b"HTTP/1.1 400")
            assert [(r.host, r.port, r.method) for r in gate.refused] == [
                ("evil.example", 443, "CONNECT"),
                ("127.0.0.1", port + 1, "GET"),
            ]
            assert not gate.proxy_socket.exists()

    asyncio.run(scenario())


def test_a_gateway_placeholder_never_leaves_through_the_proxy(tmp_path: Path) -> None:
    # The placeholder in a request's head is refused whatever the host; one in the body (split
    # between two writes) cuts the connection before it goes out. A clean request passes.
    async def scenario() -> None:
        received = bytearray()

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(65536):
                    received.extend(data)
                    if data.startswith(b"GET /ok") and data.endswith(b"\r\n\r\n"):
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                        await writer.drain()
                        break
            writer.close()

        server = await asyncio.start_server(sink, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        gate = EgressGate(folder=tmp_path, allow=AllowList.parse([f"127.0.0.1:{port}"]), refuse_carrying=(b"sl-gw-",))
        await gate.start()
        try:
            head_carries = await _ask(
                gate.proxy_socket,
                f"GET http://127.0.0.1:{port}/h HTTP/1.1\r\nAuthorization: Bearer sl-gw-HEADTOKEN\r\n\r\n".encode(),
            )
            reader, writer = await asyncio.open_unix_connection(str(gate.proxy_socket))
            body = b'{"key": "sl-gw-BODYTOKEN"}'
            writer.write(f"POST http://127.0.0.1:{port}/b HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode())
            await writer.drain()
            cut = body.index(b"sl-g") + 4
            writer.write(body[:cut])
            await writer.drain()
            await asyncio.sleep(0.05)  # most likely a piece of its own; either way the same result
            writer.write(body[cut:])
            await writer.drain()
            await reader.read()  # the proxy ends the connection
            writer.close()
            clean = await _ask(
                gate.proxy_socket, f"GET http://127.0.0.1:{port}/ok HTTP/1.1\r\nConnection: close\r\n\r\n".encode()
            )
        finally:
            await gate.close()
            server.close()
            await server.wait_closed()
        assert head_carries.startswith(b"HTTP/1.1 403") and b"only seamline's model gateway" in head_carries
        assert b"HEADTOKEN" not in received and b"BODYTOKEN" not in received
        assert b"POST /b" in received and b"GET /ok" in received and b"GET /h" not in received
        assert clean.startswith(b"HTTP/1.1 200 OK") and clean.endswith(b"ok")
        assert [(r.port, r.method, r.reason) for r in gate.refused] == [
            (port, "GET", "placeholder"),
            (port, "POST", "placeholder"),
        ]

    asyncio.run(asyncio.wait_for(scenario(), 60))  # a placeholder let through leaves a request hanging


def test_forward_socket_reaches_only_its_fixed_target(tmp_path: Path) -> None:
    async def scenario() -> None:
        with second_server() as (port, hits):
            gate = EgressGate(folder=tmp_path, allow=AllowList(), forwards=(("127.0.0.1", port),))
            await gate.start()
            try:
                # Whatever Host the inside names, the forward goes to the target fixed outside.
                answer = await _ask(
                    gate.forward_socket(0), b"GET /fwd HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
                )
            finally:
                await gate.close()
            assert hits == ["/fwd"] and b"SECOND-SERVER-REACHED" in answer

    asyncio.run(scenario())


def test_envelope_command_line_carries_no_environment() -> None:
    spec = EnvelopeSpec(
        workspace=Path("/w"),
        home=Path("/h"),
        runtime_dir=Path("/r"),
        argv=["/usr/bin/true"],
        env={"ANTHROPIC_API_KEY": "sk-ant-secret-value"},
    )
    argv = envelope_argv(spec, bwrap="/usr/bin/bwrap")
    assert not any("sk-ant-secret-value" in a for a in argv)
    assert "--share-net" not in argv and "--unshare-all" in argv and "--die-with-parent" in argv


def test_the_runtime_folder_is_bound_read_only_and_only_its_expose_folder_writable() -> None:
    runtime = Path("/run/user/1000/seamline/abc")
    spec = EnvelopeSpec(
        workspace=Path("/w"),
        home=Path("/h"),
        runtime_dir=runtime,
        argv=["/usr/bin/true"],
        env={},
        expose=((4096, str(runtime / "expose" / "expose-4096.sock")),),
        expose_dir=runtime / "expose",
    )
    argv = envelope_argv(spec, bwrap="/usr/bin/bwrap")
    mounts = [tuple(argv[i : i + 3]) for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert ("--ro-bind", str(runtime), str(runtime)) in mounts
    assert ("--bind", str(runtime), str(runtime)) not in mounts
    # The writable subfolder comes after (over) the read-only folder.
    assert mounts.index(("--bind", f"{runtime}/expose", f"{runtime}/expose")) > mounts.index(
        ("--ro-bind", str(runtime), str(runtime))
    )
    bare = EnvelopeSpec(workspace=Path("/w"), home=Path("/h"), runtime_dir=runtime, argv=["/usr/bin/true"], env={})
    assert not [a for a in envelope_argv(bare, bwrap="/usr/bin/bwrap") if a.startswith(f"{runtime}/")]


@pytest.mark.parametrize(
    ("sockets", "expose_dir"),
    [
        ((4096, "/r/expose-4096.sock"), None),  # no writable folder named
        ((4096, "/r/expose-4096.sock"), "/r/expose"),  # a socket outside it
        ((4096, "/r/expose/expose-4096.sock"), "/elsewhere/expose"),  # not in the runtime folder
    ],
)
def test_an_expose_socket_outside_the_expose_folder_is_refused(
    sockets: tuple[int, str], expose_dir: str | None
) -> None:
    spec = EnvelopeSpec(
        workspace=Path("/w"),
        home=Path("/h"),
        runtime_dir=Path("/r"),
        argv=["/usr/bin/true"],
        env={},
        expose=(sockets,),
        expose_dir=Path(expose_dir) if expose_dir else None,
    )
    with pytest.raises(ValueError, match="expose"):
        envelope_argv(spec, bwrap="/usr/bin/bwrap")


def test_seamline_reaches_an_exposed_socket_but_never_a_link_or_another_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The expose folder is the envelope's to write: it may put a link there to a socket of
    # the host's that seamline can reach and it cannot.
    expose = tmp_path / "expose"
    expose.mkdir()
    host = tmp_path / "host"
    host.mkdir()

    async def echo_server(path: Path, word: bytes) -> asyncio.Server:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(word)
            await writer.drain()
            writer.close()

        return await asyncio.start_unix_server(answer, path=str(path))

    async def through(path: Path) -> bytes:
        server, port = await loopback_to_unix(path)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            data = await asyncio.wait_for(reader.read(), timeout=10)
            writer.close()
            return data
        finally:
            server.close()
            await server.wait_closed()

    async def scenario() -> None:
        inside = await echo_server(expose / "expose-1.sock", b"inside")
        outside = await echo_server(host / "host.sock", b"HOST-SOCKET")
        try:
            (expose / "expose-2.sock").symlink_to(host / "host.sock")
            (expose / "expose-3.sock").write_text("not a socket")
            assert await through(expose / "expose-1.sock") == b"inside"
            assert await through(expose / "expose-2.sock") == b""
            assert await through(expose / "expose-3.sock") == b""
            with pytest.raises(PermissionError):
                await open_exposed_socket(expose / "expose-2.sock")
            # Swapped for a link after the check: the peer is not bound at that path.
            monkeypatch.setattr("seamline.sandbox.egress.os.lstat", os.stat)
            with pytest.raises(PermissionError, match="not the one made at this path"):
                await open_exposed_socket(expose / "expose-2.sock")
        finally:
            for server in (inside, outside):
                server.close()
                await server.wait_closed()

    asyncio.run(scenario())
