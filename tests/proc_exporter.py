"""Run the real ``dnsfleet-exporter`` as a child process; ready once the port accepts
connections, so it works behind TLS and basic auth too."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.tools import free_port

EXPORTER = [sys.executable, "-m", "dnsfleet"]


@dataclass
class ExporterProc:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited with {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"exporter did not listen within 20s:\n{log.read_text()}")


@contextlib.contextmanager
def running_exporter(tmp: Path, *args: str) -> Iterator[ExporterProc]:
    port = free_port()
    log = tmp / f"exporter-{port}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [*EXPORTER, "--web.listen-address", f"127.0.0.1:{port}", *args],
            stdout=fh,
            stderr=fh,
            env=env,
        )
    try:
        _wait_listening(port, proc, log)
        yield ExporterProc(proc=proc, port=port, log=log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
