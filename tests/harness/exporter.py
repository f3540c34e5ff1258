"""The real ``dnsfleet-exporter`` as a child process on a free loopback port, on the
managed-process helper: one class, :class:`ExporterProcess`, which waits for ``/-/healthy``
or (``wait="port"``, as the :func:`running_exporter` context does) for the port only, so it
works behind TLS and basic auth too."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from tests.harness.process import HttpOk, ListeningBy, ManagedProcess
from tests.harness.tools import free_port

EXPORTER = [sys.executable, "-m", "dnsfleet"]


class ExporterProcess:
    """The exporter on a free loopback port. Ready when ``/-/healthy`` answers, or, with
    ``wait="port"``, when the port accepts connections (behind TLS or basic auth)."""

    def __init__(
        self,
        *args: str,
        cwd: Path | None = None,
        log_dir: Path | None = None,
        wait: Literal["healthy", "port"] = "healthy",
    ) -> None:
        self.port = free_port()
        self.args = [*EXPORTER, f"--web.listen-address=127.0.0.1:{self.port}", *args]
        self.base = f"http://127.0.0.1:{self.port}"
        if log_dir is not None:
            log = log_dir / f"exporter-{self.port}.log"
        else:
            log = Path(os.devnull) if cwd is None else cwd / "exporter.log"
        self.log = log
        self.managed = ManagedProcess(self.args, log, what="exporter")
        self.proc = self.managed.proc
        ready = (
            HttpOk(self.base + "/-/healthy")
            if wait == "healthy"
            else ListeningBy(self.port, self.proc.pid)
        )
        try:
            self.managed.wait_until(ready, timeout=20)
        except BaseException:
            self.managed.stop(timeout=10)
            raise

    @property
    def url(self) -> str:
        return self.base

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

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

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.managed.signal(sig)

    def hup(self) -> None:
        self.managed.signal(signal.SIGHUP)

    def stop(self) -> None:
        self.managed.stop(timeout=10)


@contextlib.contextmanager
def running_exporter(tmp: Path, *args: str) -> Iterator[ExporterProcess]:
    """The exporter, ready once its port accepts connections (so behind TLS and basic auth
    too), logging to a file in ``tmp``; stopped on leaving."""
    exp = ExporterProcess(*args, log_dir=tmp, wait="port")
    try:
        yield exp
    finally:
        exp.stop()
