"""One managed child process for every test that runs a real daemon: started with its log
in a given file, ready once a TCP port accepts connections or an HTTP path answers (a
bounded wait that gives up early if the process exits), stopped with SIGTERM then SIGKILL,
its log file closed; and :class:`Daemon`, the one base of the daemons built on it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGTERM
from typing import IO, ClassVar, Self


class NotReady(RuntimeError):
    pass


class ManagedProcess:
    def __init__(
        self,
        cmd: Sequence[str],
        log: Path,
        *,
        what: str = "",
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.cmd = [str(c) for c in cmd]
        self.log = log
        self.what = what or Path(self.cmd[0]).name
        self._fh: IO[bytes] | None = log.open("ab")
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self, tail: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-tail:]

    def wait_until(self, ready: Ready, timeout: float = 20) -> None:
        """Poll ``ready`` until it holds; raise NotReady (with the log's tail) when the
        process exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise NotReady(f"{self.what} exited with {self.proc.returncode}:\n{self.output()}")
            if ready():
                return
            time.sleep(0.05)
        self.stop()
        raise NotReady(f"{self.what} not ready within {timeout}s:\n{self.output()}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, sig: int = SIGTERM, timeout: float = 15) -> None:
        terminate(self.proc, sig, timeout)
        if self._fh is not None:
            self._fh.close()
            self._fh = None


@dataclass
class Daemon:
    """The one base of the daemons the tests run (BIND, unbound, PowerDNS Recursor,
    dnsdist, Knot Resolver, Prometheus, Alertmanager): its files in ``workdir``, one
    managed process, ``stop`` and ``restart``; a subclass writes its config and starts."""

    workdir: Path
    managed: ManagedProcess | None = field(default=None, kw_only=True)
    stop_timeout: ClassVar[float] = 10

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.managed is None else self.managed.proc

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        if self.managed is not None:
            self.managed.stop(timeout=self.stop_timeout)
        self.managed = None

    def restart(self) -> None:
        self.stop()
        self.start()


def terminate(proc: subprocess.Popen[bytes], sig: int = SIGTERM, timeout: float = 15) -> None:
    """``sig`` (SIGTERM), then SIGKILL if the process has not exited within ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class Ready:
    """A readiness check: called repeatedly, True once the process serves."""

    def __call__(self) -> bool:
        raise NotImplementedError


class Listening(Ready):
    """A TCP port on 127.0.0.1 accepts connections (works behind TLS and basic auth)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.addr = (host, port)

    def __call__(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(self.addr, 0.2):
            return True
        return False


class ListeningBy(Listening):
    """As :class:`Listening`, and the listening socket is ``pid``'s own: with tests in
    several processes a free port can be taken by another test's server between
    free_port() and the bind, and a connection would then reach that one."""

    def __init__(self, port: int, pid: int, host: str = "127.0.0.1") -> None:
        super().__init__(port, host)
        self.port, self.pid = port, pid

    def __call__(self) -> bool:
        return super().__call__() and self._owns()

    def _owns(self) -> bool:
        inodes = set()
        with contextlib.suppress(OSError), open("/proc/net/tcp") as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == self.port:
                    inodes.add(f"socket:[{cols[9]}]")
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{self.pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{self.pid}/fd/{fd}") in inodes:
                        return True
        return False


class HttpOk(Ready):
    """An HTTP GET of ``url`` answers 2xx."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=1):
                return True
        except OSError:
            return False
