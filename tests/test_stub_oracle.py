"""The stub-resolver model against real glibc.

Every case writes a resolv.conf, runs ``getent ahostsv4`` (glibc's getaddrinfo and
nss_dns, the code every glibc program uses) with it in a network namespace whose loopback
carries an answering unbound, a blackhole, a closed port and a refusing unbound (see
tests/harness/netlab.py), and measures its wall time. The same text goes through
``parse_resolv_conf`` and ``stubmodel.model``: the model must agree with glibc within
0.25 s (plus what this machine adds to a lookup and to its waits, measured in the same
batch: see machine_slack), and on whether the lookup fails. Cases run concurrently, each
getent in its own mount namespace, so the file takes about as long as its slowest case
(~5 s).

``rotate`` makes glibc start at a random server per process: those cases run several times
and each run must match the model's delay for one of the start positions (the model's
expected delay is their average).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.stubmodel import ServerOutcome, ServerState, Verdict, model
from tests.harness.metrics import samples
from tests.harness.netlab import (
    ANSWERING,
    CLOSED,
    QUERY_NAME,
    RCODE_REFUSED,
    SILENT,
    NetLab,
    netlab,
)

pytestmark = [pytest.mark.integration, pytest.mark.netns]

TOLERANCE = 0.25
ROTATE_RUNS = 5
U, S, R, X = ANSWERING, SILENT, CLOSED, RCODE_REFUSED
OUTCOMES = {
    ANSWERING: ServerOutcome(ServerState.ANSWERING),
    SILENT: ServerOutcome(ServerState.SILENT),
    CLOSED: ServerOutcome(ServerState.REFUSED),
    RCODE_REFUSED: ServerOutcome(ServerState.RCODE_REFUSED),
}


def conf(*servers: str, options: str = "", extra: str = "") -> str:
    lines = [f"nameserver {s}" for s in servers]
    if options:
        lines.append(f"options {options}")
    return extra + "\n".join(lines) + "\n"


# (name, resolv.conf text)
CASES: list[tuple[str, str]] = [
    ("answering", conf(U)),
    ("refused-first", conf(R, U)),
    ("rcode-refused-first", conf(X, U)),
    ("silent-first-t1-a1", conf(S, U, options="timeout:1 attempts:1")),
    ("silent-first-t2-a1", conf(S, U, options="timeout:2 attempts:1")),
    ("silent-first-t1-a2", conf(S, U, options="timeout:1")),
    ("two-silent-t1", conf(S, S, U, options="timeout:1")),
    ("two-silent-t3-a1", conf(S, S, U, options="timeout:3 attempts:1")),
    ("silent-refused-t2", conf(S, R, U, options="timeout:2")),
    ("refused-silent-t3", conf(R, S, U, options="timeout:3 attempts:3")),
    ("silent-answer-silent-t2-a3", conf(S, U, S, options="timeout:2 attempts:3")),
    ("all-silent-1-t1-a3", conf(S, options="timeout:1 attempts:3")),
    ("silent-refused-fail-t1-a2", conf(S, R, options="timeout:1 attempts:2")),
    ("all-silent-3-t1-a1", conf(S, S, S, options="timeout:1 attempts:1")),
    ("all-refusing-a3", conf(R, R, X, options="attempts:3")),
    ("fourth-server-unused", conf(S, R, S, U, options="timeout:1 attempts:1")),
    (
        "later-options-win",
        conf(S, U, options="timeout:1 attempts:1", extra="options timeout:3 attempts:2\n"),
    ),
    (
        "inet_aton-short-forms",
        "nameserver 127.2\nnameserver 0x7f.1\noptions timeout:2 attempts:1\n",
    ),
    ("attempts-0", conf(U, options="attempts:0")),
    ("rotate-silent-answer-answer-t1", conf(S, U, U, options="timeout:1 rotate")),
    ("rotate-silent-silent-answer-t2", conf(S, S, U, options="timeout:2 attempts:1 rotate")),
]


@dataclass
class Run:
    case: str
    text: str
    verdict: Verdict
    proc: subprocess.Popen[str]
    measured: float = 0.0
    rc: int = -1


def _model(text: str) -> Verdict:
    rc = parse_resolv_conf(text)
    return model(rc, tuple(OUTCOMES[s.address] for s in rc.servers), "glibc")


def _start(lab: NetLab, workdir: Path, case: str, text: str, i: int) -> Run:
    path = workdir / f"{case}.{i}.resolv.conf"
    path.write_text(text)
    cmd = lab.client_command(path, f"getent ahostsv4 {QUERY_NAME} >/dev/null")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Run(case, text, _model(text), proc)


def _finish(run: Run) -> None:
    out, err = run.proc.communicate(timeout=60)
    line = next((ln for ln in out.splitlines() if ln.startswith("TIMING ")), None)
    assert line is not None, f"{run.case}: no timing from the client: {err}"
    _, start, end, rc = line.split()
    run.measured = float(end) - float(start)
    run.rc = int(rc)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetLab]:
    with netlab(tmp_path_factory.mktemp("netlab")) as lab:
        yield lab


# Calibration, run in the same batch as the cases: what a lookup costs on this machine at
# this moment with no wait at all, and with one 1 s wait. On a busy machine a getent takes
# longer to start, and each of glibc's timed waits ends later than asked (the process is
# woken late): the model predicts the waits, so the test allows what the machine adds, as
# measured now, instead of assuming an idle machine (it once failed with 3.46 s against
# the model's 3.0 when other suites were running).
CALIBRATION_RUNS = 3
# A case measured slower than allowed runs again, up to this many times (see the test).
RETRIES = 2
NO_WAIT = conf(U)
ONE_WAIT = conf(S, U, options="timeout:1 attempts:1")


def machine_slack(no_wait: list[Run], one_wait: list[Run]) -> tuple[float, float]:
    """(seconds a lookup takes beyond its waits, seconds added per second of waiting)."""
    overhead = max(r.measured for r in no_wait)
    per_second = max(0.0, max(r.measured for r in one_wait) - min(r.measured for r in no_wait) - 1)
    return overhead, per_second


def test_model_agrees_with_real_glibc(lab: NetLab, tmp_path: Path) -> None:
    t0 = time.monotonic()
    runs: list[Any] = []
    no_wait = [
        _start(lab, tmp_path, "calibrate-no-wait", NO_WAIT, i) for i in range(CALIBRATION_RUNS)
    ]
    one_wait = [
        _start(lab, tmp_path, "calibrate-one-wait", ONE_WAIT, i) for i in range(CALIBRATION_RUNS)
    ]
    for case, text in CASES:
        n = ROTATE_RUNS if "rotate" in text else 1
        runs.extend(_start(lab, tmp_path, case, text, i) for i in range(n))
    for r in [*no_wait, *one_wait, *runs]:
        _finish(r)
    elapsed = time.monotonic() - t0
    overhead, per_second = machine_slack(no_wait, one_wait)

    table = [
        "",
        f"glibc oracle: {len(runs)} getent runs, {len(CASES)} cases, {elapsed:.1f} s wall; "
        f"this machine now: {overhead:.3f} s per lookup, +{per_second:.3f} s per s of wait",
        f"{'case':34} {'glibc s':>8} {'model s':>8} {'fails':>10}  resolv.conf",
    ]
    bad = []
    for first in runs:
        r = first
        v = r.verdict
        candidates = v.delays_by_start or (v.delay,)
        nearest = min(candidates, key=lambda c: abs(c - r.measured))
        glibc_failed = r.rc != 0
        allowed = TOLERANCE + overhead + nearest * per_second
        ok = nearest - TOLERANCE <= r.measured <= nearest + allowed and glibc_failed == v.failing
        for retry in range(RETRIES):
            # Too slow only: a busy machine can wake glibc late once, beyond what the
            # calibration saw; a model that is wrong is wrong again. Too fast, or a different
            # verdict, is never the machine's doing.
            if ok or r.measured < nearest or glibc_failed != v.failing:
                break
            again = _start(lab, tmp_path, r.case, r.text, 100 + retry)
            _finish(again)
            table.append(f"{r.case:34} {r.measured:8.3f} (too slow: run again)")
            r = again
            nearest = min(candidates, key=lambda c: abs(c - r.measured))
            glibc_failed = r.rc != 0
            allowed = TOLERANCE + overhead + nearest * per_second
            ok = (
                nearest - TOLERANCE <= r.measured <= nearest + allowed and glibc_failed == v.failing
            )
        model_txt = f"{nearest:.2f}" if not v.delays_by_start else f"{nearest:.2f}*"
        table.append(
            f"{r.case:34} {r.measured:8.3f} {model_txt:>8} "
            f"{str(glibc_failed) + '/' + str(v.failing):>10}  " + r.text.strip().replace("\n", "; ")
        )
        if not ok:
            bad.append(
                f"{r.case}: glibc {r.measured:.3f} s (rc {r.rc}), model "
                f"{candidates} failing={v.failing}, allowed {nearest - TOLERANCE:.3f} to "
                f"{nearest + allowed:.3f} s"
            )
    table.append(
        "* rotate: the start-position delay nearest to this run; the model's "
        "expected delay is their mean"
    )
    print("\n".join(table))
    assert not bad, "model disagrees with glibc:\n" + "\n".join(bad)


def test_rotate_expected_delay_is_the_mean_over_start_positions() -> None:
    v = _model(conf(S, S, U, options="timeout:2 attempts:1 rotate"))
    # waits for server index 0, 1, 2: 2, (2<<1)/3 = 1, (2<<2)/3 = 2
    assert v.waits == (2.0, 1.0, 2.0)
    assert v.delays_by_start == (3.0, 1.0, 0.0)
    assert v.delay == pytest.approx(4 / 3)


def test_exporter_in_namespace_against_port_53(lab: NetLab, tmp_path: Path) -> None:
    """The real exporter (--once) in the namespace: the resolv.conf names servers on port 53
    exactly as a client's does, no seam."""
    rc = tmp_path / "client.resolv.conf"
    rc.write_text(conf(S, R, U, options="timeout:3 attempts:2"))
    cfg = tmp_path / "dnsfleet.yml"
    cfg.write_text(
        f"resolv_conf:\n  - path: {rc}\n    query_name: {QUERY_NAME}\n"
        "    query_type: A\n    probe_timeout: 300ms\n"
    )
    exe = str(Path(sys.executable).parent / "dnsfleet-exporter")
    out = subprocess.run(
        lab.exec_args(exe, "--config.file", str(cfg), "--once"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    got = samples(out.stdout)
    f = ("resolv_conf", str(rc))

    def v(name: str, *labels: tuple[str, str]) -> float | None:
        return got.get((name, frozenset((f, *labels))))

    assert got[("dnsfleet_collector_success", frozenset({("collector", "stub")}))] == 1
    assert v("dnsfleet_stub_nameservers") == 3
    assert (
        v(
            "dnsfleet_stub_nameserver_failure",
            ("nameserver", S),
            ("position", "0"),
            ("reason", "silent"),
        )
        == 1
    )
    assert (
        v(
            "dnsfleet_stub_nameserver_failure",
            ("nameserver", R),
            ("position", "1"),
            ("reason", "refused"),
        )
        == 1
    )
    assert v("dnsfleet_stub_nameserver_up", ("nameserver", U), ("position", "2")) == 1
    glibc_delay = v("dnsfleet_stub_expected_delay_seconds", ("libc", "glibc"))
    # the blackhole's 3 s, plus the closed port's time to refuse, capped by its 2 s wait
    assert glibc_delay is not None and 3.0 <= glibc_delay <= 5.0
    assert v("dnsfleet_stub_expected_delay_seconds", ("libc", "musl")) == 0
    assert v("dnsfleet_stub_resolution_failing", ("libc", "glibc")) == 0
    assert v("dnsfleet_stub_timeout_seconds") == 3
    assert v("dnsfleet_stub_attempts") == 2


def test_failover_command_in_namespace(lab: NetLab, tmp_path: Path) -> None:
    rc = tmp_path / "oncall.resolv.conf"
    rc.write_text(conf(S, X, U, options="timeout:2"))
    exe = str(Path(sys.executable).parent / "dnsfleet")
    out = subprocess.run(
        lab.exec_args(
            exe,
            "failover",
            "--resolv-conf",
            str(rc),
            "--query-name",
            QUERY_NAME,
            "--query-type",
            "A",
            "--probe-timeout",
            "300ms",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(S in ln and "silent" in ln and "2.000s" in ln for ln in lines), out.stdout
    assert any(X in ln and "rcode_refused" in ln for ln in lines), out.stdout
    assert any(U in ln and "answering" in ln for ln in lines), out.stdout
    assert "a lookup now waits 2.0" in out.stdout
    out = subprocess.run(
        lab.exec_args(
            exe,
            "failover",
            "--resolv-conf",
            str(rc),
            "--libc",
            "musl",
            "--query-name",
            QUERY_NAME,
            "--probe-timeout",
            "300ms",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "a lookup now waits 0.000 s" in out.stdout, out.stdout
