"""A small, strict HTTP/1.1 server on asyncio.Protocol: one connection's life (TLS upgrade,
framing, keep-alive, timeouts, back-pressure). Why ours and not aiohttp.web or h11, with
the figures: docs/design.md, "HTTP server and endpoints".

Limits: request line and headers <= 16 KiB, body <= 64 KiB (Content-Length only; chunked
request bodies are refused), a request's head must arrive within 15 s of its first byte (of
the accept on a new connection, the TLS handshake included), idle keep-alive connections
close after 75 s, one request at a time per connection. Pipelined requests wait their turn:
at most 80 KiB of them is buffered (then reading pauses), and none is started while the
connection's output is above its high-water mark. A connection whose queued output makes no
progress for 15 s is aborted (not closed: a close would wait for the peer to read).

Parsing: web/request.py, as strict as RFC 9112 asks of a server. A request runs in a task,
or on callbacks where a fast handler of the router takes it (Router.start). Any exception
while answering ends in a 500 and a closed connection, never a hung one. What a handler
sees, and how a response is written out: web/routes.py.

TLS: the listening socket is plain and each accepted connection is upgraded with
``loop.start_tls`` using the context its :class:`TLSSource` gives at that moment, so a
reloaded web configuration applies whole to every new connection (a context changed in
place keeps trust it should drop: OpenSSL can add CAs to a context, not remove them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import Callable, Mapping
from typing import Any, cast

from dnsfleet.web.request import MAX_BODY, MAX_HEAD, BadRequest, frame, keeps_alive, split_target
from dnsfleet.web.routes import Request, Response, Router, StaticTLS, TLSSource, failure
from dnsfleet.web.tls import hand_over

log = logging.getLogger(__name__)

# Pipelined input kept while a request is handled; beyond it reading pauses.
MAX_PENDING = MAX_HEAD + MAX_BODY
HEAD_TIMEOUT = 15.0
IDLE_TIMEOUT = 75.0
WRITE_TIMEOUT = 15.0  # queued output must make progress within this
# asyncio's own default: above it the transport asks us to stop producing (pause_writing).
WRITE_HIGH_WATER = 64 * 1024


_LINGER_RESET = struct.pack("ii", 1, 0)  # struct linger {l_onoff = 1, l_linger = 0}


class HTTPProtocol(asyncio.Protocol):
    """One connection. Timeouts share one timer handle whose deadline moves forward without
    touching the loop's timer heap on every request (re-arming costs a heap push and a
    cancelled handle per request); reading is paused only when pipelined input piles up,
    not around every request (each pause and resume is an epoll_ctl)."""

    def __init__(
        self,
        router: Router,
        *,
        head_timeout: float = HEAD_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        write_timeout: float = WRITE_TIMEOUT,
        tls: TLSSource | None = None,
    ) -> None:
        self.router = router
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.tls = tls
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False  # a request is being handled (or its response drained)
        self.closing = False
        self.handshaking = False
        self.read_paused = False
        self.write_paused = False  # output above the high-water mark
        self.keep_alive = True
        self.task: asyncio.Task[None] | None = None
        self.request: Request | None = None  # the one being handled
        self.cancel: Callable[[], None] | None = None  # of a fast handler's request
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.deadline = 0.0
        self.written = 0  # bytes handed to the transport
        self.sent_mark = -1  # bytes gone out at the last progress check; -1: none queued
        self.started = 0.0  # loop.time() of the first byte of the request being read
        self.peer = ""
        self.peercert: Mapping[str, Any] | None = None
        self.tls_context: ssl.SSLContext | None = None
        self.continued = False  # 100 Continue sent for the request being read

    # -- connection lifecycle
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        # The handshake and the first request's head share the head deadline.
        self._expire_at(self.loop.time() + self.head_timeout)
        if self.tls is not None:
            self.handshaking = True
            transport.pause_reading()
            self.task = self.loop.create_task(self._start_tls(transport, self.tls))
        else:
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    async def _start_tls(self, raw: asyncio.Transport, source: TLSSource) -> None:
        try:
            ctx = await source.context()
            remaining = self.deadline - self.loop.time()
            if remaining <= 0 or self.transport is None:
                raise TimeoutError
            self.buf = hand_over(self.loop, raw, self.buf)  # uvloop read the ClientHello
            tls = await self.loop.start_tls(
                raw, self, ctx, server_side=True, ssl_handshake_timeout=remaining
            )
        except (OSError, TimeoutError, EOFError):
            # A failed handshake (plain HTTP, an untrusted client certificate, a silent
            # client past the deadline): start_tls has closed the connection already.
            self._handshake_failed(raw)
            return
        except Exception:
            log.exception("TLS handshake with %s failed", self.peer)
            self._handshake_failed(raw)
            return
        if tls is None or self.closing:
            self._handshake_failed(raw)
            return
        self.handshaking = False
        self.transport = tls
        self.tls_context = ctx
        self.peercert = tls.get_extra_info("peercert")
        tls.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if self.buf:
            self._next()

    def _abort(self, transport: asyncio.Transport) -> None:
        """End the connection now, dropping what is queued, in the kernel too: a plain
        close() leaves the socket's send buffer (megabytes on loopback) to be retried to a
        peer that does not read; a zero linger makes the close a reset (RST)."""
        self.closing = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        transport.abort()

    def _handshake_failed(self, raw: asyncio.Transport) -> None:
        # asyncio calls no connection_lost for a connection that never finished its
        # handshake: clean up here.
        raw.abort()
        self.connection_lost(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.timer:
            self.timer.cancel()
            self.timer = None
        if self.task and not self.task.done() and not self.handshaking:
            self.task.cancel()
        if self.cancel is not None:
            self.cancel()
        self.transport = None

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.busy and not self.closing:
            self._continue()

    # -- deadlines
    def _expire_at(self, when: float) -> None:
        """The connection ends at ``when`` unless the deadline moves first."""
        self.deadline = when
        if self.timer is None or self.timer_at > when:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(when, self._tick)
            self.timer_at = when

    def _track_drain(self) -> None:
        """Output is queued: from now on it must make progress every write_timeout."""
        if self.sent_mark < 0 and self.transport is not None:
            queued = self.transport.get_write_buffer_size()
            if queued:
                self.sent_mark = self.written - queued
                self._expire_at(self.loop.time() + self.write_timeout)

    def _tick(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None:
            return
        now = self.loop.time()
        if self.sent_mark >= 0:
            queued = transport.get_write_buffer_size()
            sent = self.written - queued
            if queued and sent <= self.sent_mark:
                # Not one byte of the queued output went out for write_timeout: the client
                # stopped reading. Abort: close() would wait for the queue to drain.
                log.debug("aborting %s: %d bytes unread", self.peer, queued)
                self._abort(transport)
                return
            if queued:
                self.sent_mark = sent
                self._expire_at(now + self.write_timeout)
                return
            self.sent_mark = -1
            if not self.busy and not self.closing:
                self._continue()
                return
        if self.closing or (self.busy and not self.handshaking):
            return  # the handler keeps its own deadline; armed again after the response
        if now < self.deadline:
            self.timer = self.loop.call_at(self.deadline, self._tick)
            self.timer_at = self.deadline
            return
        self.closing = True
        if self.handshaking:
            transport.abort()
        else:
            transport.close()
            self._track_drain()

    # -- input
    def data_received(self, data: bytes) -> None:
        if self.buf:
            self.buf += data
        else:
            self.buf = data
            self.started = self.loop.time()
        if self.busy or self.handshaking or self.write_paused:
            if len(self.buf) > MAX_PENDING and not self.read_paused and self.transport:
                self.read_paused = True
                self.transport.pause_reading()
            return
        self._next()
        if self.buf and not self.busy and not self.closing:
            # Part of a head: it must be complete within the head timeout of its first
            # byte (an idle keep-alive connection's deadline was the idle timeout).
            self._expire_at(self.started + self.head_timeout)

    def eof_received(self) -> bool | None:
        self.keep_alive = False
        if not self.busy and self.transport is not None:
            self.closing = True
            self.transport.close()
        if self.tls is not None:
            # TLS cannot half-close; returning True there only makes asyncio log a warning
            # for every connection a client ends.
            return None
        return True  # keep our half open until the response in flight is written

    def _next(self) -> None:
        transport = self.transport
        if self.closing or transport is None:
            return
        buf = self.buf
        try:
            head = frame(buf)
            if head is None:
                return  # the head is not complete yet
        except BadRequest as e:
            self._fail(e.status, str(e))
            return
        if len(buf) < head.end:
            if head.expect_continue and not self.continued:
                self.continued = True
                transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return  # wait for the body
        self.continued = False
        body = buf[head.body_start : head.end] if head.end > head.body_start else b""
        self.buf = buf[head.end :]
        if self.buf:
            self.started = self.loop.time()
        try:
            path, query, repeated = split_target(head.target)
        except BadRequest as e:
            self._fail(e.status, str(e))
            return
        self.keep_alive = self.keep_alive and keeps_alive(head.version, head.headers)
        req = Request(
            method=head.method,
            path=path,
            query=query,
            headers=head.headers,
            body=body,
            peer=self.peer,
            repeated=repeated,
            peercert=self.peercert,
            arrived=self.loop.time(),
            tls_context=self.tls_context,
        )
        self.busy = True
        self.request = req
        try:
            self.cancel = self.router.start(req, self._answer)
        except Exception as e:
            self._failed(req, e)
            return
        if self.cancel is None:
            self.task = self.loop.create_task(self._handle(req))

    async def _handle(self, req: Request) -> None:
        try:
            resp = await self.router.dispatch(req)
        except Exception as e:
            self._failed(req, e)
            return
        self._answer(resp)

    def _answer(self, resp: Response) -> None:
        """Write the response: from the task, or from a fast handler's last callback."""
        self.cancel = None
        req = self.request
        if self.transport is None or req is None:
            return
        try:
            if resp.drop:
                self._abort(self.transport)
                return
            self.keep_alive = self.keep_alive and not resp.close
            self.written += resp.write(self.transport, self.keep_alive, req.method == "HEAD")
        except Exception as e:
            self._failed(req, e)
            return
        self.busy = False
        if not self.keep_alive:
            self.closing = True
            self.transport.close()
        # A client that has not taken the whole response yet must keep taking it.
        self._track_drain()
        if not self.write_paused and not self.closing:
            self._continue()

    def _continue(self) -> None:
        """Ready for the next request: resume reading, arm the idle or head deadline, and
        start on a pipelined request already buffered."""
        if self.read_paused and self.transport is not None:
            self.read_paused = False
            self.transport.resume_reading()
        if self.sent_mark < 0:
            now = self.loop.time()
            self._expire_at(now + (self.head_timeout if self.buf else self.idle_timeout))
        if self.buf:
            self._next()

    def _failed(self, req: Request, e: Exception) -> None:
        # A guard, a handler outside the router's net, or writing itself (a header that is
        # not latin-1) failed: answer 500 and close, never leave the client hanging on a
        # connection nobody reads.
        log.error("answering %s %s failed", req.method, req.path, exc_info=e)
        self._fail(500, "internal error")

    def _fail(self, status: int, reason: str) -> None:
        """Answer and close, without the router's extra headers (they may be what failed)."""
        if self.transport is None:
            return
        self.closing = True
        data = failure(status, reason)
        self.written += len(data)
        self.transport.write(data)
        self.transport.close()
        self._track_drain()


async def serve(
    router: Router,
    host: str | None,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    tls: TLSSource | None = None,
    head_timeout: float = HEAD_TIMEOUT,
    idle_timeout: float = IDLE_TIMEOUT,
    write_timeout: float = WRITE_TIMEOUT,
) -> asyncio.Server:
    """Listen on ``host:port``. TLS with ``tls`` (a context per connection, as the web
    configuration gives it now) or a fixed ``ssl_context``."""
    loop = asyncio.get_running_loop()
    source = tls if tls is not None else (StaticTLS(ssl_context) if ssl_context else None)
    return await loop.create_server(
        lambda: HTTPProtocol(
            router,
            head_timeout=head_timeout,
            idle_timeout=idle_timeout,
            write_timeout=write_timeout,
            tls=source,
        ),
        host or None,
        port,
        reuse_address=True,
        backlog=512,
    )
