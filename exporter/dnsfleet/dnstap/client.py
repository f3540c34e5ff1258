"""The exporter's side of the ingest process: start it, ask it for its families over the
channel (:mod:`dnsfleet.dnstap.protocol`), and start it again when it exited or stopped
answering.

A request is never abandoned half-read: a scrape that gives up (its deadline) stops waiting
for it, but the request goes on and the next scrape shares it rather than sending another.
So a request that stays unanswered for :data:`ANSWER_TIMEOUT` means the process is stuck,
not that a scrape was short: the process is then killed and started again. The first
restart (of a process that exited or was stuck) is at once; while the process keeps
failing, the next ones wait for a backoff that doubles from :data:`BACKOFF_MIN` to
:data:`BACKOFF_MAX`, until a process has served for :data:`BACKOFF_MAX`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time

from dnsfleet import eventloop, logs
from dnsfleet.dnstap.protocol import (
    ChannelError,
    IngestSettings,
    Listener,
    Reply,
    ReplyReader,
    Request,
)
from dnsfleet.exposition import Family

log = logging.getLogger(__name__)
ANSWER_TIMEOUT = 30.0
# A reply is read in pieces of at most this (a whole one is a few hundred KB).
READ_CHUNK = 1024 * 1024
BACKOFF_MIN = 1.0
BACKOFF_MAX = 60.0
RESTART_REASONS = ("exited", "unresponsive")


class IngestUnavailable(Exception):
    """The ingest process did not answer; the message says why."""


def log_arguments() -> list[str]:
    """The exporter's own ``--log.format`` and ``--log.level`` (as :func:`logs.setup` set
    them on the root logger), so the ingest process writes the same records."""
    root = logging.getLogger()
    fmt = "logfmt"
    for handler in root.handlers:
        for name, cls in logs.FORMATTERS.items():
            if type(handler.formatter) is cls:
                fmt = name
    return ["--log.format", fmt, "--log.level", logs.level_name(root.getEffectiveLevel())]


class Ingest:
    """One ingest process and its control socket. ``starts`` counts the processes
    started, ``restarts`` the restarts by reason; ``listener`` is the socket the process
    said it listens on in its last reply."""

    def __init__(self, settings: IngestSettings, *, answer_timeout: float = ANSWER_TIMEOUT) -> None:
        self.settings = settings
        self.answer_timeout = answer_timeout
        self.starts = 0
        self.restarts = dict.fromkeys(RESTART_REASONS, 0)
        self.listener: Listener | None = None
        self._inflight: asyncio.Task[Reply] | None = None
        self._stuck = False
        self._backoff = 0.0
        self._not_before = 0.0
        self._spawn()

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dnsfleet.dnstap.ingest",
                    "--control-fd",
                    str(theirs.fileno()),
                    *log_arguments(),
                    # On the exporter's kind of loop: --event-loop=asyncio holds for both.
                    "--event-loop",
                    eventloop.for_child(),
                    self.settings.encode(),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.control = ours
        self.started = time.monotonic()
        self.starts += 1
        self._stuck = False
        self._inflight = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ensure(self) -> None:
        """Start the process again if it exited or is stuck (its counters start from
        zero), once the backoff allows."""
        if self.alive() and not self._stuck:
            return
        now = time.monotonic()
        if now < self._not_before:
            return
        if self.alive():
            reason = "unresponsive"
            log.warning("dnstap ingest process %d stopped answering: killing it", self.proc.pid)
        else:
            reason = "exited"
            log.warning("dnstap ingest process exited (%s)", self.proc.returncode)
        self._stop(kill=True)
        self.restarts[reason] += 1
        self._backoff = min(max(BACKOFF_MIN, 2 * self._backoff), BACKOFF_MAX)
        self._not_before = now + self._backoff  # for the next restart: this one is now
        try:
            self._spawn()
        except OSError as e:
            log.error("cannot start the dnstap ingest process again: %s", e)

    async def families(self) -> list[Family]:
        """The process's families, from the request in flight if there is one."""
        return list((await self.reply()).families)

    async def reply(self) -> Reply:
        """The process's reply, from the request in flight if there is one."""
        loop = asyncio.get_running_loop()
        task = self._inflight
        if task is None or task.done() or task.get_loop() is not loop:
            task = self._inflight = loop.create_task(self._request())
            task.add_done_callback(self._settled)
        return await asyncio.shield(task)

    async def _request(self) -> Reply:
        proc, control = self.proc, self.control
        try:
            return await asyncio.wait_for(_ask(control), self.answer_timeout)
        except TimeoutError:
            if proc is self.proc:
                self._stuck = True
            raise IngestUnavailable(f"no answer within {self.answer_timeout:g} s") from None
        except BlockingIOError:
            if proc is self.proc:
                self._stuck = True
            raise IngestUnavailable("it has not read its requests") from None
        except (OSError, ChannelError) as e:
            raise IngestUnavailable(str(e)) from None

    def _settled(self, task: asyncio.Task[Reply]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        self.listener = task.result().listener
        if time.monotonic() - self.started >= BACKOFF_MAX:
            self._backoff = 0.0

    def _stop(self, *, kill: bool) -> None:
        self.control.close()
        if kill and self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Stop the process: it reads EOF on its control socket and exits."""
        self._stop(kill=False)


async def _ask(control: socket.socket) -> Reply:
    """One request on a socket of its own, closed whatever happens (a cancellation too)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    reader = ReplyReader()
    try:
        with theirs:
            socket.send_fds(control, [Request().encode()], [theirs.fileno()])
        ours.setblocking(False)
        while reader.wanted:
            data = await loop.sock_recv(ours, min(reader.wanted, READ_CHUNK))
            if not data:
                raise reader.cut()
            reader.feed(data)
    finally:
        ours.close()
    return reader.reply()
