"""The exporter's side of the ingest process: start it, ask it for its families, start it
again when it died or when its settings changed."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import subprocess
import sys
from typing import Any

from dnsfleet.exposition import Family

log = logging.getLogger(__name__)
_REQ = struct.Struct(">I")
_REPLY = struct.Struct(">II")
MAX_REPLY = 64 * 1024 * 1024


class IngestUnavailable(Exception):
    """The ingest process did not answer; the message says why."""


class Ingest:
    """One ingest process and its control socket. ``settings`` is JSON-able (see
    :mod:`dnsfleet.dnstap.ingest`); ``starts`` counts the processes started."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.starts = 0
        self._seq = 0
        self._busy = False
        self._spawn()

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dnsfleet.dnstap.ingest",
                "--control-fd",
                str(theirs.fileno()),
                json.dumps(self.settings),
            ],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        ours.setblocking(False)
        self.control = ours
        self._buf = b""
        self.starts += 1

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ensure(self) -> None:
        """Start the process again if it exited (its counters start from zero)."""
        if not self.alive():
            log.warning(
                "dnstap ingest process exited (%s): starting it again", self.proc.returncode
            )
            self.control.close()
            self._spawn()

    async def families(self) -> list[Family]:
        """The process's families. One request at a time (the exporter scrapes one cycle
        at a time); a second one meanwhile is refused rather than queued."""
        if self._busy:
            raise IngestUnavailable("a request to it is already in flight")
        self._busy = True
        try:
            return await self._ask()
        finally:
            self._busy = False

    async def _ask(self) -> list[Family]:
        loop = asyncio.get_running_loop()
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        try:
            await loop.sock_sendall(self.control, _REQ.pack(self._seq))
            while True:  # a reply to an earlier request that timed out is skipped
                seq, length = _REPLY.unpack(await self._read(_REPLY.size))
                if length > MAX_REPLY:
                    raise IngestUnavailable(f"a reply of {length} bytes")
                body = await self._read(length)
                if seq == self._seq:
                    break
        except OSError as e:
            raise IngestUnavailable(str(e)) from None
        return [
            Family(n, h, t, [(s, lab, v) for s, lab, v in smp]) for n, h, t, smp in json.loads(body)
        ]

    async def _read(self, n: int) -> bytes:
        loop = asyncio.get_running_loop()
        while len(self._buf) < n:
            chunk = await loop.sock_recv(self.control, max(65536, n - len(self._buf)))
            if not chunk:
                raise IngestUnavailable("the ingest process closed its control socket")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def close(self) -> None:
        """Stop the process: it reads EOF on its control socket and exits."""
        self.control.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
