"""The Debian package installed the way users install it: ``apt-get install ./dnsfleet.deb``
into a minimal Debian chroot built by mmdebstrap from Debian's packages, one per release the
machine's Debian mirror serves (`make test-packaging`). In each: the package's own
dependencies come from that release, the unit passes ``systemd-analyze verify`` and is
scored by ``systemd-analyze security``, the exporter runs from the package as its user
against a loopback unbound (probes with dnspython, unbound statistics, a CoreDNS-style
statistics page over aiohttp, basic auth with bcrypt), regexes are refused without
google-re2, dnstap loads and decodes with the python3-protobuf the package recommends, and
remove then purge leave the file list as it was before the install. On Debian 12 the
package also upgrades the 0.1.0 package (a frozen copy of the one the
dpkg-deb script built, tests/fixtures/deb). Debian 11's python3 is too old: apt refuses
the package there.

Needs root (mmdebstrap --mode=root) and the mirror in /etc/apt/sources*: skipped elsewhere.
Network: apt talks to that mirror; everything else listens and connects on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.debpkg import build_deb
from tests.harness.metrics import matching, samples
from tests.test_logs import check_line

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
OLD_DEB = HERE / "fixtures" / "deb" / "dnsfleet_0.1.0_amd64.deb"
COREDNS_METRICS = HERE / "fixtures" / "resolver" / "coredns-documented.metrics.txt"
# Debian releases and whether the package installs there (python3 >= 3.11).
RELEASES = {"bullseye": False, "bookworm": True, "trixie": True}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.packaging,
    # The first test of a release waits for its whole mmdebstrap run (minutes, more on a
    # busy machine or a slow mirror); Run.result() bounds the wait itself.
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mmdebstrap --mode=root)"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap missing"),
]


def debian_mirror() -> str:
    """The Debian archive this machine's apt uses (deb822 or one-line sources)."""
    texts = [p.read_text() for p in Path("/etc/apt").glob("sources.list.d/*.sources")]
    for text in texts:
        for stanza in text.split("\n\n"):
            uri = re.search(r"^URIs:\s*(\S+)", stanza, re.MULTILINE)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.MULTILINE)
            if uri and suites and not any("-security" in s for s in suites.group(1).split()):
                return uri.group(1)
    lists = [Path("/etc/apt/sources.list"), *Path("/etc/apt").glob("sources.list.d/*.list")]
    for p in lists:
        if p.is_file():
            m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+", p.read_text(), re.MULTILINE)
            if m and "security" not in m.group(1):
                return m.group(1)
    pytest.skip("no Debian mirror in /etc/apt")


@pytest.fixture(scope="module")
def deb() -> Path:
    given = os.environ.get("DNSFLEET_DEB")
    return Path(given).resolve() if given else build_deb()


class Run:
    """One release's mmdebstrap, started at once; the tests of that release wait for it."""

    def __init__(self, release: str, deb: Path, work: Path) -> None:
        self.release = release
        self.work = work
        self.out = work / "out"
        self.started = time.monotonic()
        self.wall: float | None = None
        files = [deb]
        if RELEASES[release]:
            files += [HERE / "packaging" / "in-chroot.sh", COREDNS_METRICS]
            args = [f"/tmp/{deb.name}"]
            if release == "bookworm":
                files.append(OLD_DEB)
                args.append(f"/tmp/{OLD_DEB.name}")
            run = f"sh /tmp/in-chroot.sh {' '.join(args)}"
        else:
            # Only apt's verdict: install the package and its dependencies, or refuse.
            run = (
                f"sh -c 'apt-get install -y /tmp/{deb.name} > /tmp/out/install.log 2>&1;"
                " echo $? > /tmp/out/install.rc;"
                ' dpkg-query -W -f="\\${Status}" dnsfleet > /tmp/out/status 2>&1 || true\''
            )
        hooks = [
            'mkdir -p "$1/tmp/out"',
            "copy-in " + " ".join(str(f) for f in files) + " /tmp",
            f'chroot "$1" {run} || echo "$?" > "$1/tmp/out/failed"',
            f"copy-out /tmp/out {work}",
        ]
        include = ["--include=systemd"] if RELEASES[release] else []
        self.log = (work / "mmdebstrap.log").open("w")
        self.proc = subprocess.Popen(
            [
                "mmdebstrap",
                "--mode=root",
                "--variant=minbase",
                *include,
                "--aptopt=Acquire::Retries 3",
                *(f"--customize-hook={h}" for h in hooks),
                release,
                "/dev/null",  # the chroot is thrown away: what the tests read is copied out
                debian_mirror(),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=work,
            # A group of its own: stopping the run stops what runs in the chroot too.
            start_new_session=True,
        )
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def _wait(self) -> None:
        self.proc.wait()
        self.wall = time.monotonic() - self.started

    def result(self) -> Path:
        """Wait for the run; its copied-out files, or fail with its logs."""
        try:
            rc = self.proc.wait(timeout=1500)
        finally:
            self.stop()
            self.log.close()
        self.waiter.join(timeout=10)
        logs = ""
        if self.out.is_dir():
            logs = "".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}\n"
                for p in sorted(self.out.iterdir())
                if not p.name.startswith("files-")
            )
        tail = (self.work / "mmdebstrap.log").read_text(errors="replace")[-3000:]
        assert rc == 0, tail + logs
        assert not (self.out / "failed").exists(), logs
        return self.out


@pytest.fixture(scope="module")
def runs(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every release at once: each run waits on the mirror more than on the CPU."""
    started = {r: Run(r, deb, tmp_path_factory.mktemp(r)) for r in RELEASES}
    yield started
    for run in started.values():
        run.stop()
        print(f"test_packaging: {run.release}: {run.wall or 0:.0f} s wall")


def read(out: Path, name: str) -> str:
    return (out / name).read_text(errors="replace")


INSTALLS = [r for r, ok in RELEASES.items() if ok]
# (release, round): a fresh install everywhere it installs, and on Debian 12 an upgrade
# from 0.1.0, each followed by remove and purge.
ROUNDS = [(r, "fresh") for r in INSTALLS] + [("bookworm", "upgrade")]
COLLECTORS = {"stub", "nic", "bonding", "cpu_latency", "resolver_stats", "resolver_capacity"}


def version() -> str:
    first = (ROOT / "debian" / "changelog").read_text().splitlines()[0]
    m = re.match(r"dnsfleet \(([^)]+)\)", first)
    assert m, first
    return m.group(1)


@pytest.mark.parametrize(("release", "rnd"), ROUNDS)
def test_installs_and_runs_from_the_package(runs: dict[str, Run], release: str, rnd: str) -> None:
    out = runs[release].result()
    assert read(out, f"{rnd}.version") == version()
    assert "warning" not in read(out, f"{rnd}.install.log").lower()
    user = read(out, f"{rnd}.passwd").strip().split(":")
    assert user[0] == "dnsfleet" and user[5] == "/var/lib/dnsfleet", user
    assert user[6] in ("/usr/sbin/nologin", "/bin/false"), user
    assert read(out, f"{rnd}.statedir").split() == ["dnsfleet:dnsfleet", "755"]
    assert read(out, f"{rnd}.exporter-version").strip() == f"dnsfleet-exporter {version()}"
    assert read(out, f"{rnd}.cli-version").strip() == f"dnsfleet {version()}"
    # The packaged configuration: this host's resolv.conf and the host collectors.
    assert read(out, f"{rnd}.config-check").startswith("configuration valid: ")
    # google-re2 has no Debian package: regexes are refused at load, with the reason.
    re2 = read(out, f"{rnd}.re2-check")
    assert "fail_if_matches: regular expressions need the google-re2 Python module" in re2
    assert re2.rstrip().endswith("rc=1")
    # dnstap works with Debian's python3-protobuf, which the package recommends.
    assert read(out, f"{rnd}.dnstap-check").startswith("configuration valid: ")
    assert read(out, f"{rnd}.dnstap-decode").strip() == "6"  # CLIENT_RESPONSE
    # /metrics gzip on ISA-L where the release has python3-isal (the Recommends: Debian 13),
    # on zlib where it has none (Debian 12, where apt passes over it): one gzip member.
    missing = read(out, "recommends-missing").splitlines()
    assert missing == (["python3-isal (>= 1.7.2)"] if release == "bookworm" else []), missing
    deflater = read(out, f"{rnd}.deflater").strip()
    assert deflater == ("_zlib_gzip" if release == "bookworm" else "_isal_gzip"), deflater
    # The event loop, as the exporter's startup line names it: uvloop from python3-uvloop
    # (the Recommends: 0.17 in Debian 12, 0.21 in Debian 13).
    loop = re.search(r"event loop: (\w+) ", read(out, f"{rnd}.exporter.log"))
    assert loop and loop.group(1) == "uvloop", read(out, f"{rnd}.exporter.log")[-2000:]
    gzipped = read(out, f"{rnd}.gzip-scrape").split()
    assert gzipped[:2] == ["gzip", "True"] and int(gzipped[2]) >= 1, gzipped
    # Run as its user against the chroot's unbound, with basic auth (bcrypt).
    assert read(out, f"{rnd}.user").strip() == "dnsfleet"
    scrape = read(out, f"{rnd}.scrape")
    assert scrape.startswith("unauthenticated: 401\n"), scrape[:2000]
    got = samples(scrape.split("\n", 1)[1])
    probed = {dict(lab)["target"] for (n, lab) in got if n == "dnsfleet_probe_success"}
    (unbound,) = [t for t in probed if t.startswith("127.0.0.1:")]
    # dnspython: the probe; unbound's remote control; aiohttp: the CoreDNS-style page.
    assert matching(got, "dnsfleet_probe_success", target=unbound) == 1
    for target in (unbound, unbound.replace("127.0.0.1", "127.0.0.2")):
        assert matching(got, "dnsfleet_resolver_stats_up", target=target) == 1, target
    assert matching(got, "dnsfleet_resolver_cache_hits_total", target=unbound) is not None
    for c in COLLECTORS:
        assert matching(got, "dnsfleet_collector_success", collector=c) == 1, c
    lines = read(out, f"{rnd}.exporter.log").splitlines()
    assert lines and all(check_line(line, "json") for line in lines)


@pytest.mark.parametrize(("release", "rnd"), ROUNDS)
def test_unit_verifies_and_is_sandboxed(runs: dict[str, Run], release: str, rnd: str) -> None:
    out = runs[release].result()
    unit = read(out, f"{rnd}.unit-path").strip()
    assert unit.endswith("/systemd/system/dnsfleet-exporter.service"), unit
    verify = read(out, f"{rnd}.verify")
    assert verify.strip() == "", verify
    security = read(out, f"{rnd}.security")
    m = re.search(r"Overall exposure level for dnsfleet-exporter.service: ([\d.]+) (\w+)", security)
    assert m, security[-2000:]
    print(f"{release} {rnd}: systemd-analyze security: {m.group(1)} {m.group(2)}")
    # systemd's verdicts, from least exposed: SAFE, OK, MEDIUM, EXPOSED, UNSAFE.
    assert m.group(2) in ("SAFE", "OK"), security[-3000:]


@pytest.mark.parametrize(("release", "rnd"), ROUNDS)
def test_remove_keeps_conffiles_and_purge_leaves_nothing(
    runs: dict[str, Run], release: str, rnd: str
) -> None:
    out = runs[release].result()
    assert read(out, f"{rnd}.conffile-after-remove").strip() == "kept"
    assert not (out / f"{rnd}.code-after-remove").exists()  # py3clean took the bytecode
    assert read(out, f"{rnd}.conffile-after-purge").strip() == "gone"
    before = set(read(out, "files-before").splitlines())
    after = set(read(out, f"files-after-{rnd}").splitlines())
    # The dnsfleet user stays in /etc/passwd and /etc/group, files that existed before
    # (Debian leaves system users: a uid may still own files); nothing else differs.
    assert (sorted(after - before), sorted(before - after)) == ([], [])


def test_upgrades_the_previous_package(runs: dict[str, Run]) -> None:
    """0.1.0 carried private copies of its dependencies in /usr/lib/dnsfleet, where Python
    wrote bytecode as it ran (83 files): dpkg removes what it installed, the preinst the
    bytecode, and nothing of 0.1.0 stays."""
    out = runs["bookworm"].result()
    assert int(read(out, "old.pyc-count")) > 0
    log = read(out, "upgrade.install.log")
    assert f"Unpacking dnsfleet ({version()}) over (0.1.0)" in log, log
    assert "warning" not in log.lower(), log
    assert not (out / "upgrade.leftover").exists(), read(out, "upgrade.leftover")


@pytest.mark.parametrize("release", [r for r, ok in RELEASES.items() if not ok])
def test_refused_where_python3_is_too_old(runs: dict[str, Run], release: str) -> None:
    out = runs[release].result()
    log = read(out, "install.log")
    assert read(out, "install.rc").strip() == "100", log
    # Debian 11's python3 is 3.9: apt names the unmet dependency and installs nothing.
    assert re.search(r"^\s+Depends: python3:any \(>= 3\.11~\)$", log, re.MULTILINE), log
    assert "E: Unable to correct problems" in log, log
    assert "install ok installed" not in read(out, "status"), read(out, "status")
