"""The dnstap ingest process: ``python -m dnsfleet.dnstap.ingest --control-fd N SETTINGS``
(SETTINGS: :class:`~dnsfleet.dnstap.protocol.IngestSettings`, encoded).

It owns the listener, the decoder and the aggregates, on an event loop of its own, so a
flood of events costs its own core and never delays the exporter's probes and scrapes.
The exporter holds the other end of the control socket and asks for the families over it
as :mod:`dnsfleet.dnstap.protocol` says. When the exporter goes away the control socket
reads EOF and this process removes its socket and exits. It logs as the exporter does
(``--log.format``, ``--log.level``: :mod:`dnsfleet.logs`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import sys

from dnsfleet import eventloop, logs, malloc
from dnsfleet.dnstap.aggregate import Aggregator
from dnsfleet.dnstap.leaks import Classifier
from dnsfleet.dnstap.protocol import (
    MAX_FDS,
    ChannelError,
    IngestSettings,
    Listener,
    Reply,
    Request,
)
from dnsfleet.dnstap.writers import Slots

log = logging.getLogger("dnsfleet.dnstap")
# A reply the exporter does not read within this is dropped (it gave up on the request).
REPLY_TIMEOUT = 60.0


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


async def _listen(slots: Slots, settings: IngestSettings) -> tuple[asyncio.Server, Listener]:
    """The unix socket only: its file permissions say who may write dnstap (a TCP port
    would let any local user inject messages)."""
    loop = asyncio.get_running_loop()
    path = settings.socket
    _clear_stale(path)
    srv = await loop.create_unix_server(slots.stream, path, backlog=64)
    os.chmod(path, settings.socket_mode)
    st = os.stat(path)
    return srv, Listener(st.st_dev, st.st_ino)


async def _reply(sock: socket.socket, agg: Aggregator, listener: Listener) -> None:
    """One request's reply on its own socket; a request the exporter gave up on (its end
    closed) costs a failed write and nothing else."""
    loop = asyncio.get_running_loop()
    with sock:
        sock.setblocking(False)
        data = Reply(tuple(agg.families()), listener).encode()
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(loop.sock_sendall(sock, data), REPLY_TIMEOUT)


def _adopt(fd: int) -> socket.socket | None:
    try:
        return socket.socket(fileno=fd)
    except OSError:  # not a socket: nothing the exporter sends
        os.close(fd)
        return None


async def answer(control: socket.socket, agg: Aggregator, listener: Listener) -> None:
    """Answer the exporter's requests until it closes the control socket."""
    loop = asyncio.get_running_loop()
    control.setblocking(False)
    gone: asyncio.Future[None] = loop.create_future()
    replies: set[asyncio.Task[None]] = set()

    def readable() -> None:
        while not gone.done():
            try:
                msg, fds, _flags, _addr = socket.recv_fds(control, MAX_FDS, MAX_FDS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, fds = b"", []
            if not msg and not fds:  # EOF: the exporter is gone
                gone.set_result(None)
                return
            try:
                Request.decode_all(msg)
            except ChannelError as e:  # the exporter reads EOF on each socket passed
                log.error("dnstap ingest: %s", e)
                for fd in fds:
                    os.close(fd)
                continue
            for fd in fds:
                sock = _adopt(fd)
                if sock is not None:
                    task = loop.create_task(_reply(sock, agg, listener))
                    replies.add(task)
                    task.add_done_callback(replies.discard)

    loop.add_reader(control.fileno(), readable)
    try:
        await gone
    finally:
        loop.remove_reader(control.fileno())


async def serve(control: socket.socket, settings: IngestSettings) -> int:
    agg = Aggregator(
        dict(settings.identities),
        {t: dict(labels) for t, labels in settings.target_labels},
        settings.top_n,
        Classifier(settings.cluster_domain, settings.search_suffixes),
    )
    slots = Slots(agg, settings)
    try:
        server, listener = await _listen(slots, settings)
    except OSError as e:
        log.error("dnstap ingest cannot listen on %s: %s", settings.socket, e)
        return 1
    try:
        await answer(control, agg, listener)
    finally:
        server.close()
        slots.close_all()
        _remove_own(settings.socket, listener)
    return 0


def _remove_own(path: str, listener: Listener) -> None:
    """Remove the socket this process bound, never one a successor bound at the same path
    after this one stopped listening."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if Listener(st.st_dev, st.st_ino) == listener:
            os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dnsfleet.dnstap.ingest")
    ap.add_argument("--control-fd", type=int, required=True)
    ap.add_argument("--log.format", dest="log_format", choices=logs.FORMATS, default="logfmt")
    ap.add_argument("--log.level", dest="log_level", choices=list(logs.LEVELS), default="info")
    ap.add_argument("--event-loop", dest="event_loop", choices=eventloop.CHOICES, default="auto")
    ap.add_argument("settings", help="IngestSettings as JSON (dnsfleet.dnstap.protocol)")
    args = ap.parse_args(argv)
    logs.setup(level=args.log_level, fmt=args.log_format)
    # Frames of up to 256 KiB come and go: a pinned mmap threshold returns them to the
    # kernel instead of fragmenting the heap (see dnsfleet.malloc).
    malloc.tune()
    control = socket.socket(fileno=args.control_fd)
    try:
        loop = eventloop.choose(args.event_loop)
        return eventloop.run(serve(control, IngestSettings.decode(args.settings)), loop)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the exporter says it
        return 130
    except Exception:
        # One record in the exporter's format, the traceback inside it (its err field).
        log.exception("dnstap ingest failed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
