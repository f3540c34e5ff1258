"""The event loop the exporter runs on (dnsfleet.eventloop, ``--event-loop``): the flag's
three values and the startup line that names the loop, ``auto`` falling back to asyncio's
loop where uvloop does not import, and the HTTP server's connections on both loops: a TLS
handshake that fails, and a client that resets, end only their own connection."""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trustme

from dnsfleet import eventloop
from dnsfleet.web.routes import Request, Response, Router
from dnsfleet.web.server import serve
from tests.harness.loops import both, run
from tests.harness.tools import free_port

CONFIG = """resolv_conf: []
modules:
  m: {query_name: a.local.test, query_type: A, timeout: 1s}
targets:
  - {address: "127.0.0.1:1", module: m}
"""
# The exporter with uvloop unimportable, as on a host without it (Debian 12 without the
# Recommends): an import of it raises ImportError.
NO_UVLOOP = (
    "import sys; sys.modules['uvloop'] = None; from dnsfleet import cli; "
    "sys.exit(cli.exporter_main())"
)
LISTENING = re.compile(
    r"listening on http://127\.0\.0\.1:\d+/metrics .*event loop: (\w+) ([\w.]+)\)"
)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("asked", "kind"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_each_value_runs_its_loop(asked: str, kind: str) -> None:
    """uvloop is in the test venv: auto takes it."""
    loop = eventloop.choose(asked)
    assert loop.kind == kind

    async def main() -> str:
        return eventloop.running_kind()

    assert eventloop.run(main(), loop) == kind


@pytest.mark.unit
def test_an_unknown_value_is_refused_and_asyncio_run_keeps_asyncios_loop() -> None:
    with pytest.raises(ValueError, match="want one of auto, uvloop, asyncio"):
        eventloop.choose("tokio")
    eventloop.run(asyncio.sleep(0), eventloop.choose("uvloop"))

    async def main() -> str:
        return eventloop.running_kind()

    # No global policy was changed by running on uvloop.
    assert asyncio.run(main()) == "asyncio"
    assert eventloop.running_kind() == "auto"


def _startup_line(
    tmp_path: Path,
    *argv: str,
    code: str | None = None,
    config: str = CONFIG,
    children: list[str] | None = None,
) -> str:
    """The exporter's startup line, or what it wrote before it exited; the command lines of
    the processes it runs then into ``children``."""
    conf = tmp_path / "dnsfleet.yml"
    conf.write_text(config)
    args = ["--config.file", str(conf), f"--web.listen-address=127.0.0.1:{free_port()}", *argv]
    cmd = (
        [sys.executable, "-c", code, *args]
        if code
        else [sys.executable, "-m", "dnsfleet.cli", *args]
    )
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    seen = []
    try:
        end = time.monotonic() + 60  # a hang guard on a busy machine
        while time.monotonic() < end:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "listening on" in line:
                if children is not None:
                    task = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                    for pid in task.read_text().split():
                        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                        children.append(" ".join(w.decode() for w in words))
                return line
        return "".join(seen) + f"rc={proc.wait(timeout=10)}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        ((), "uvloop"),
        (("--event-loop=auto",), "uvloop"),
        (("--event-loop=uvloop",), "uvloop"),
        (("--event-loop=asyncio",), "asyncio"),
    ],
)
def test_the_startup_line_names_the_loop(tmp_path: Path, argv: tuple[str, ...], kind: str) -> None:
    m = LISTENING.search(_startup_line(tmp_path, *argv))
    assert m and m.group(1) == kind, m


@pytest.mark.integration
def test_auto_without_uvloop_runs_asyncios_loop_and_uvloop_is_refused(tmp_path: Path) -> None:
    line = _startup_line(tmp_path, "--event-loop=auto", code=NO_UVLOOP)
    m = LISTENING.search(line)
    assert m and m.group(1) == "asyncio", line
    out = _startup_line(tmp_path, "--event-loop=uvloop", code=NO_UVLOOP)
    assert "uvloop does not import" in out and out.endswith("rc=1"), out


@pytest.mark.integration
@pytest.mark.parametrize("asked", ["asyncio", "uvloop"])
def test_the_dnstap_ingest_runs_on_the_exporters_loop(tmp_path: Path, asked: str) -> None:
    """The ingest process is started with the exporter, before its loop runs."""
    config = CONFIG + f"dnstap: {{socket: {tmp_path / 'dnstap.sock'}}}\n"
    children: list[str] = []
    line = _startup_line(tmp_path, f"--event-loop={asked}", config=config, children=children)
    assert LISTENING.search(line), line
    (ingest,) = [c for c in children if "dnsfleet.dnstap.ingest" in c]
    assert f"--event-loop {asked} " in ingest, ingest


@pytest.mark.unit
def test_a_child_is_told_the_running_or_chosen_loop() -> None:
    eventloop.choose("asyncio")
    assert eventloop.for_child() == "asyncio"

    async def main() -> str:
        return eventloop.for_child()

    assert eventloop.run(main(), eventloop.choose("uvloop")) == "uvloop"
    assert eventloop.for_child() == "uvloop"
    assert asyncio.run(main()) == "asyncio"


@pytest.mark.integration
def test_help_documents_the_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--event-loop {auto,uvloop,asyncio}" in out, out


# ------------------------------------------------------------------ the HTTP server on both


async def _ok(req: Request) -> Response:
    return Response.text(200, "ok\n")


def _router() -> Router:
    r = Router()
    r.add("GET", "/", _ok)
    return r


async def _get(port: int, ssl_ctx: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ssl_ctx, server_hostname="localhost" if ssl_ctx else None
    )
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


@pytest.mark.integration
@both
def test_failed_tls_handshakes_end_only_their_own_connection(loop_kind: str) -> None:
    """Plain HTTP, a ClientHello cut short and an untrusting client, all at once beside
    good clients: each failure closes its own connection, every good client is served."""
    ca = trustme.CA()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    good = ssl.create_default_context()
    ca.configure_trust(good)
    untrusting = ssl.create_default_context()  # trusts the system's CAs, not this one

    async def plain(port: int) -> bytes:
        try:
            return await _get(port)
        except ConnectionResetError:
            return b"reset"

    async def cut(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(bytes.fromhex("16030100c8010000c40303"))
        writer.write_eof()
        try:
            return await asyncio.wait_for(reader.read(), 20)
        finally:
            writer.close()

    async def refused(port: int) -> bytes:
        try:
            await _get(port, untrusting)
        except OSError:  # SSLError, or a reset where the client's loop is uvloop
            return b"refused"
        return b"accepted"

    async def main() -> None:
        srv = await serve(_router(), "127.0.0.1", 0, ssl_context=server_ctx, head_timeout=10)
        port = srv.sockets[0].getsockname()[1]
        try:
            bad = [plain(port), cut(port), refused(port)] * 5
            got = await asyncio.gather(*bad, *(_get(port, good) for _ in range(10)))
            assert got[15:] == [got[15]] * 10 and got[15].startswith(b"HTTP/1.1 200"), got[15:]
            assert all(not g.startswith(b"HTTP/1.1 200") for g in got[:15]), got[:15]
            assert got[2:15:3] == [b"refused"] * 5
        finally:
            srv.close()
            await srv.wait_closed()

    run(main(), loop_kind)


@pytest.mark.integration
@both
def test_a_client_that_resets_mid_request_leaves_the_server_serving(loop_kind: str) -> None:
    """A reset (RST) halfway through a request head, and one after a whole request: the
    server drops those connections and serves the next client."""
    linger_reset = struct.pack("ii", 1, 0)

    async def reset(port: int, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        with socket.socket() as s:
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", port))
            await loop.sock_sendall(s, data)
            await asyncio.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_reset)

    async def main() -> None:
        srv = await serve(_router(), "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            half = b"GET / HTTP/1.1\r\nHost: x\r\n"
            whole = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 50
            await asyncio.gather(*(reset(port, d) for d in (half, whole) * 10))
            assert (await _get(port)).startswith(b"HTTP/1.1 200")
        finally:
            srv.close()
            await srv.wait_closed()

    run(main(), loop_kind)
