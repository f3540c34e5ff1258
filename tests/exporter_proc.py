"""Run the real ``dnsfleet-exporter`` as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.samples import exact, parse
from tests.tools import free_port

EXPORTER = [sys.executable, "-m", "dnsfleet"]


class ExporterProcess:
    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        self.port = free_port()
        self.args = [*EXPORTER, f"--web.listen-address=127.0.0.1:{self.port}", *args]
        self.log = open(os.devnull if cwd is None else cwd / "exporter.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exporter exited with {self.proc.returncode}")
            try:
                self.get("/-/healthy")
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("exporter did not start")

    def request(
        self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        req = urllib.request.Request(self.base + path, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path: str, **kw: object) -> str:
        status, body = self.request(path, **kw)  # type: ignore[arg-type]
        if status != 200:
            raise AssertionError(f"GET {path}: {status} {body}")
        return body

    def hup(self) -> None:
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def value(text: str, name: str, **labels: str) -> float | None:
    """The sample of an exposition the process served with exactly these labels."""
    return exact(parse(text), name, **labels)
