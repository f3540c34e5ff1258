"""The dnstap ingest process: ``python -m dnsfleet.dnstap.ingest --control-fd N SETTINGS``.

It owns the listener, the decoder and the aggregates, on an event loop of its own, so a
flood of events costs its own core and never delays the exporter's probes and scrapes.
The exporter holds the other end of the control socket: it sends a 4-byte request number,
and gets back that number, a 4-byte length and the families as JSON. When the exporter
goes away the control socket reads EOF and this process removes its socket and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import stat
import struct
import sys
from typing import Any

from dnsfleet.dnstap.aggregate import Aggregator
from dnsfleet.dnstap.framestreams import ProtocolError, Receiver

log = logging.getLogger("dnsfleet.dnstap")
READ_SIZE = 256 * 1024
_REQ = struct.Struct(">I")
_REPLY = struct.Struct(">II")


class Stream(asyncio.Protocol):
    """One writer's connection: Frame Streams in, frames to the aggregator."""

    def __init__(self, agg: Aggregator, settings: dict[str, Any]) -> None:
        self.agg = agg
        self.settings = settings
        self.rx = Receiver()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.agg.connections_open >= self.settings["max_connections"]:
            self.agg.error("too_many_connections")
            transport.abort()
            return
        self.counted = True
        self.agg.connections_total += 1
        self.agg.connections_open += 1
        self._arm(self.settings["handshake_timeout"], "handshake_timeout")

    def _arm(self, delay: float, reason: str) -> None:
        if self.timer is not None:
            self.timer.cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(delay, self._expire, reason)

    def _expire(self, reason: str) -> None:
        self.timer = None
        if reason == "idle_timeout" and not self.rx.buffered:
            return  # a quiet resolver between frames: nothing is wrong
        self.agg.error(reason)
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        try:
            frames, reply, done = self.rx.feed(data)
        except ProtocolError as e:
            self.agg.error(e.refusal.value)
            assert self.transport is not None
            self.transport.abort()
            return
        if frames:
            self.agg.ingest(frames)
        assert self.transport is not None
        if reply:
            self.transport.write(reply)
        if done:
            self.transport.close()
        elif self.rx.state.value == "data":
            self._arm(self.settings["idle_timeout"], "idle_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.counted:
            self.agg.connections_open -= 1
            self.counted = False


def _clear_stale(path: str) -> None:
    """Remove a socket left by a process that died; refuse one another process listens on
    (a second exporter, or `--config.check` run beside the service, must not take it)."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return  # not a socket: binding fails with its own error
    except FileNotFoundError:
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)
        return
    except OSError:
        return  # let bind report it
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"{path}: another process listens on it")


async def _listen(agg: Aggregator, settings: dict[str, Any]) -> list[asyncio.Server]:
    loop = asyncio.get_running_loop()
    servers = []
    path = settings.get("socket")
    if path:
        _clear_stale(path)
        srv = await loop.create_unix_server(lambda: Stream(agg, settings), path, backlog=64)
        os.chmod(path, settings["socket_mode"])
        st = os.stat(path)
        settings["_bound"] = [st.st_dev, st.st_ino]
        servers.append(srv)
    listen = settings.get("listen")
    if listen:
        host, port = listen
        servers.append(await loop.create_server(lambda: Stream(agg, settings), host, port))
    return servers


async def serve(control: socket.socket, settings: dict[str, Any]) -> None:
    agg = Aggregator(
        settings["identities"], settings.get("target_labels"), settings.get("top_n", 10)
    )
    servers = await _listen(agg, settings)
    reader, writer = await asyncio.open_connection(sock=control)
    try:
        while True:
            try:
                head = await reader.readexactly(4)
            except asyncio.IncompleteReadError:
                return  # the exporter is gone
            (seq,) = _REQ.unpack(head)
            fams = [[f.name, f.help, f.type, f.samples] for f in agg.families()]
            body = json.dumps(fams, separators=(",", ":")).encode()
            writer.write(_REPLY.pack(seq, len(body)) + body)
            await writer.drain()
    finally:
        for srv in servers:
            srv.close()
        _remove_own(settings)


def _remove_own(settings: dict[str, Any]) -> None:
    """Remove the socket this process bound, never one a successor bound at the same path
    after this one stopped listening."""
    path: str = settings.get("socket") or ""
    bound = settings.get("_bound")
    with contextlib.suppress(OSError):
        st = os.stat(path) if path else None
        if st is not None and bound == [st.st_dev, st.st_ino]:
            os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dnsfleet.dnstap.ingest")
    ap.add_argument("--control-fd", type=int, required=True)
    ap.add_argument("settings", help="JSON: socket, socket_mode, listen, identities, ...")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="dnstap ingest: %(message)s")
    settings = json.loads(args.settings)
    control = socket.socket(fileno=args.control_fd)
    try:
        asyncio.run(serve(control, settings))
    except OSError as e:
        print(f"dnstap ingest: cannot listen: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
