"""The real ``dnsfleet-exporter`` as a child process on a free loopback port, on the
managed-process helper: :class:`ExporterProcess` waits for ``/-/healthy``; the
:func:`running_exporter` context waits for the port only, so it works behind TLS and basic
auth too."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.harness.process import HttpOk, Listening, ManagedProcess
from tests.harness.tools import free_port

EXPORTER = [sys.executable, "-m", "dnsfleet"]


class ExporterProcess:
    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        self.port = free_port()
        self.args = [*EXPORTER, f"--web.listen-address=127.0.0.1:{self.port}", *args]
        self.base = f"http://127.0.0.1:{self.port}"
        log = Path(os.devnull) if cwd is None else cwd / "exporter.log"
        self.managed = ManagedProcess(self.args, log, what="exporter")
        self.proc = self.managed.proc
        self.managed.wait_until(HttpOk(self.base + "/-/healthy"), timeout=20)

    def request(
        self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        req = urllib.request.Request(self.base + path, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> str:
        status, body = self.request(path, method=method, headers=headers)
        if status != 200:
            raise AssertionError(f"GET {path}: {status} {body}")
        return body

    def hup(self) -> None:
        self.managed.signal(signal.SIGHUP)

    def stop(self) -> None:
        self.managed.stop(timeout=10)


class ExporterProc:
    def __init__(self, managed: ManagedProcess, port: int) -> None:
        self.managed = managed
        self.proc = managed.proc
        self.port = port
        self.log = managed.log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.managed.signal(sig)


@contextlib.contextmanager
def running_exporter(tmp: Path, *args: str) -> Iterator[ExporterProc]:
    port = free_port()
    managed = ManagedProcess(
        [*EXPORTER, "--web.listen-address", f"127.0.0.1:{port}", *args],
        tmp / f"exporter-{port}.log",
        what="exporter",
    )
    try:
        managed.wait_until(Listening(port), timeout=20)
        yield ExporterProc(managed, port)
    finally:
        managed.stop(timeout=10)
