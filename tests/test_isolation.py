"""One bad party spoils nothing: a requester's deadline never shortens another's probes, a
hostile peer cannot hold the event loop, and an exception while probing one target is that
target's failure (reason ``internal``), never a failed scrape."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
import yaml

from dnsfleet import prober as prober_mod
from dnsfleet.app import Exporter
from dnsfleet.config import Module
from dnsfleet.endpoints.router import (
    MAX_SCRAPE_TIMEOUT,
    BadTimeout,
    make_router,
    parse_scrape_timeout,
)
from dnsfleet.hostfs import HostFS
from dnsfleet.probes import ProbeResult, Reason, https, query_for
from dnsfleet.probes.tlsconn import earliest_not_after
from dnsfleet.selfmetrics import LAG_WINDOW, LoopLag
from dnsfleet.web.server import serve
from tests.harness.exporter import EXPORTER
from tests.harness.hostiledoh import HostileDoH
from tests.harness.metrics import value
from tests.harness.process import ManagedProcess, Ready
from tests.harness.servers import Blackhole, ScriptedServer, answer


def exporter(tmp_path: Path, doc: dict[str, Any]) -> Exporter:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(yaml.safe_dump({"resolv_conf": [], **doc}))
    return Exporter(fs=HostFS(), config_file=str(p))


@asynccontextmanager
async def served(exp: Exporter) -> AsyncIterator[int]:
    srv = await serve(make_router(exp), "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()
        await srv.wait_closed()


async def get(port: int, path: str, *, timeout_header: str | None = None) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if timeout_header is not None:
        head += f"X-Prometheus-Scrape-Timeout-Seconds: {timeout_header}\r\n"
    writer.write((head + "\r\n").encode())
    try:
        async with asyncio.timeout(60):
            raw = await reader.read()
    finally:
        writer.close()
    code = int(raw.split(b" ", 2)[1])
    return code, raw.partition(b"\r\n\r\n")[2].decode()


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the timeout header


@pytest.mark.unit
@pytest.mark.parametrize(
    ("raw", "want"),
    [(None, None), ("", None), (" ", None), ("10", 10.0), ("0.5", 0.5), (" 9.75 ", 9.75)],
)
def test_scrape_timeout_header_values(raw: str | None, want: float | None) -> None:
    assert parse_scrape_timeout(raw) == want


@pytest.mark.unit
@pytest.mark.parametrize(
    "raw",
    ["inf", "Infinity", "nan", "-1", "0", "0.0", "1e3", "10s", "0x10", "1_0",
     str(MAX_SCRAPE_TIMEOUT + 1), "99999999"],
)  # fmt: skip
def test_scrape_timeout_header_refusals(raw: str) -> None:
    with pytest.raises(BadTimeout):
        parse_scrape_timeout(raw)


@pytest.mark.integration
@pytest.mark.parametrize("raw", ["inf", "nan", "-3", "1e9"])
def test_a_bad_timeout_header_is_a_400(tmp_path: Path, raw: str) -> None:
    exp = exporter(tmp_path, {"modules": {"m": {}}, "targets": []})

    async def go() -> None:
        async with served(exp) as port:
            for path in ("/metrics", "/probe?target=127.0.0.1&module=m"):
                code, body = await get(port, path, timeout_header=raw)
                assert code == 400, (path, body)
                assert "X-Prometheus-Scrape-Timeout-Seconds" in body
            assert exp.scrapes_total == 0  # no cycle was started for it

    run(go())


# ---------------------------------------------------------------- whose deadline


def _slow_resolver() -> ScriptedServer:
    return ScriptedServer(
        lambda q: [answer(q, "www.example.test. 60 IN A 192.0.2.1")], udp_delay=0.1
    )


@pytest.mark.integration
def test_a_short_deadline_client_never_shortens_a_long_scrape(tmp_path: Path) -> None:
    """A client sending `X-Prometheus-Scrape-Timeout-Seconds: 0.5` without pause beside a
    10 s scraper; the resolver answers in 100 ms. The short client's cycles give probes
    50 ms and see `timeout`, which it asked for; the long scraper must see every answer.
    Before, the long scrape joined the short client's cycle and got its cut-short results."""
    dns = _slow_resolver()
    exp = exporter(
        tmp_path,
        {
            "modules": {"m": {"query_name": "www.example.test", "timeout": "2s"}},
            "targets": [{"address": dns.address, "module": "m"}],
        },
    )
    short_timeouts = [0]

    async def short_client(port: int, stop: asyncio.Event) -> None:
        for _ in range(400):  # bounded: ~0.05 s each
            if stop.is_set():
                return
            code, body = await get(port, "/metrics", timeout_header="0.5")
            labels = {"target": dns.address, "module": "m", "reason": "timeout"}
            if code == 200 and value(body, "dnsfleet_probe_failure", **labels) == 1:
                short_timeouts[0] += 1

    async def go() -> None:
        async with served(exp) as port:
            stop = asyncio.Event()
            flood = asyncio.create_task(short_client(port, stop))
            long_success = []
            for _ in range(8):
                await asyncio.sleep(0.13)
                code, body = await get(port, "/metrics", timeout_header="10")
                assert code == 200
                long_success.append(
                    value(body, "dnsfleet_probe_success", target=dns.address, module="m")
                )
            stop.set()
            await flood
            assert long_success == [1.0] * 8
            assert short_timeouts[0], "the short client never saw its own 50 ms probes time out"
            # The counters that the SLO rules read hold no cut-short probe: the short
            # client saw its own timeouts, nobody else counts them.
            code, body = await get(port, "/metrics", timeout_header="10")
            labels = {"target": dns.address, "module": "m"}
            assert value(body, "dnsfleet_probe_failures_total", reason="timeout", **labels) in (
                None,
                0,
            )
            # The long scrapes' nine probes at least; a short cycle's probe that got an
            # answer within its budget is evidence, and counted.
            assert (value(body, "dnsfleet_probe_attempts_total", **labels) or 0) >= 9

    try:
        run(go())
    finally:
        dns.close()


@pytest.mark.integration
def test_a_short_scrape_beside_the_first_long_cycle_gets_its_own(tmp_path: Path) -> None:
    """No cycle has completed yet and a long one is in flight (a silent target holds it):
    a short scrape used to join it and get a 503 at its deadline; it runs its own cycle
    now, and sees the silent target time out within its own budget."""
    hole = Blackhole()
    exp = exporter(
        tmp_path,
        {
            "modules": {"silent": {"timeout": "5s"}},
            "targets": [{"address": hole.address, "module": "silent"}],
        },
    )

    async def go() -> None:
        async with served(exp) as port:
            long = asyncio.create_task(get(port, "/metrics", timeout_header="4"))
            await asyncio.sleep(0.3)
            code, body = await get(port, "/metrics", timeout_header="1")
            assert code == 200, body
            labels = {"target": hole.address, "module": "silent", "reason": "timeout"}
            assert value(body, "dnsfleet_probe_failure", **labels) == 1
            assert (await long)[0] == 200

    try:
        run(go())
    finally:
        hole.close()


@pytest.mark.integration
def test_a_timeout_is_counted_only_when_the_modules_own_timeout_ended_it(
    tmp_path: Path,
) -> None:
    """A silent target: a scrape that gives its probe the module's whole 0.5 s counts the
    timeout; one whose 0.2 s deadline ends the wait first reports the timeout to its
    requester and counts nothing (it says nothing about the target)."""
    hole = Blackhole()
    exp = exporter(
        tmp_path,
        {
            "modules": {"silent": {"timeout": "500ms"}},
            "targets": [{"address": hole.address, "module": "silent"}],
        },
    )
    labels = {"target": hole.address, "module": "silent"}

    async def go() -> None:
        async with served(exp) as port:
            counts = []
            for header in ("10", "0.7", "10"):
                code, body = await get(port, "/metrics", timeout_header=header)
                assert code == 200, body
                assert value(body, "dnsfleet_probe_failure", reason="timeout", **labels) == 1
                counts.append(
                    (
                        value(body, "dnsfleet_probe_attempts_total", **labels),
                        value(body, "dnsfleet_probe_failures_total", reason="timeout", **labels),
                    )
                )
            # The failures series is born at 0 in the first cycle's record and counts from
            # the next record on, the short requester's own cycle's.
            assert counts == [(1, 0), (1, 1), (2, 2)]

    try:
        run(go())
    finally:
        hole.close()


@pytest.mark.integration
def test_clients_climbing_below_the_scrapers_budget_never_starve_it(tmp_path: Path) -> None:
    """Six clients each asking for a budget a nanosecond longer than the last (0.8 s,
    0.800000001 s, ...) never share a cycle, and held every slot: a 3 s scrape got the same
    kept cycle, older at every scrape. One cycle in flight is the lead requester's now:
    every scrape gets a cycle that ended after it asked."""
    hole = Blackhole()
    exp = exporter(
        tmp_path,
        {
            "modules": {"silent": {"timeout": "2s"}},
            "targets": [{"address": hole.address, "module": "silent"}],
        },
    )
    climb = [0]

    async def climber(port: int, stop: asyncio.Event) -> None:
        for _ in range(200):  # bounded: each waits for its own short cycle
            if stop.is_set():
                return
            climb[0] += 1
            await get(port, "/metrics", timeout_header=f"{1.3 + climb[0] * 1e-9:.9f}")

    async def go() -> None:
        async with served(exp) as port:
            await get(port, "/metrics", timeout_header="3")  # the lead, and a kept cycle
            stop = asyncio.Event()
            climbers = [asyncio.create_task(climber(port, stop)) for _ in range(6)]
            stale = []
            for _ in range(6):
                await asyncio.sleep(0.5)
                asked = time.time()
                code, body = await get(port, "/metrics", timeout_header="3")
                assert code == 200, body
                ended = value(body, "dnsfleet_scrape_cycle_end_timestamp_seconds")
                if ended is None or ended < asked:
                    stale.append(asked - (ended or 0))
            stop.set()
            await asyncio.gather(*climbers)
            assert climb[0] > 12, "the climbing clients did not run"
            assert not stale, f"scrapes answered with a cycle that ended before them: {stale}"

    try:
        run(go())
    finally:
        hole.close()


@pytest.mark.integration
def test_the_lead_scrapers_timeouts_count_when_the_module_outlasts_its_budget(
    tmp_path: Path,
) -> None:
    """A module timeout at or above the scrape budget (1.5 s under a 1.5 s header, a 1 s
    budget): every probe is ended by the budget, and before, none was ever counted, so a
    silent resolver added nothing to the failure counters the SLO reads. The lead
    requester's timeouts count."""
    hole = Blackhole()
    exp = exporter(
        tmp_path,
        {
            "modules": {"silent": {"timeout": "1500ms"}},
            "targets": [{"address": hole.address, "module": "silent"}],
        },
    )
    labels = {"target": hole.address, "module": "silent"}

    async def go() -> None:
        async with served(exp) as port:
            for n in (1, 2, 3):
                code, body = await get(port, "/metrics", timeout_header="1.5")
                assert code == 200, body
                assert value(body, "dnsfleet_probe_attempts_total", **labels) == n
                born = value(body, "dnsfleet_probe_failures_total", reason="timeout", **labels)
                assert born == (0 if n == 1 else n)  # born at 0, then the count

    try:
        run(go())
    finally:
        hole.close()


# ---------------------------------------------------------------- a loop that cannot starve


def _doh_module(ca: Path, timeout: str) -> dict[str, Any]:
    return {"query_name": "www.example.test", "transport": "https", "tls_ca_file": str(ca),
            "timeout": timeout}  # fmt: skip


@pytest.mark.integration
def test_a_doh_peer_flooding_pings_cannot_hold_the_loop(tmp_path: Path) -> None:
    """The endpoint keeps the socket readable with PING frames for 20 s and never answers.
    /probe with a 10 s module timeout ends with `malformed` once the peer has sent more than
    a response could hold (each PING costs h2 ~10 us of the loop: the flood held it for
    the whole timeout, and /-/healthy waited up to seconds beside it), and /-/healthy is
    answered meanwhile. Before, the probe read PINGs until its timeout; before that, until
    the flood ended."""
    doh = HostileDoH("ping_flood", flood_for=20.0)
    exp = exporter(
        tmp_path,
        {
            "modules": {"doh": _doh_module(doh.write_ca(tmp_path / "ca.pem"), "10s")},
            "targets": [{"address": doh.address, "module": "doh"}],
        },
    )
    exp.loop_lag = LoopLag()

    async def go() -> None:
        assert exp.loop_lag is not None
        exp.loop_lag.start()
        async with served(exp) as port:
            probe = asyncio.create_task(get(port, f"/probe?target={doh.address}&module=doh"))
            healthy = [await get(port, "/-/healthy") for _ in range(3)]
            code, body = await probe
            assert [c for c, _ in healthy] == [200, 200, 200]
            assert code == 200
            assert value(body, "dnsfleet_probe_failure", reason="malformed") == 1, body
            assert doh.connections == 1
            # The loop's lag is measured and shows no stall of the flood's length.
            code, metrics = await get(port, "/metrics", timeout_header="4")
            lag = value(metrics, "dnsfleet_event_loop_lag_seconds")
            assert lag is not None and lag < 10, lag
        exp.loop_lag.stop()

    try:
        run(go())
    finally:
        doh.close()


class _H2Server:
    """The server's side of a DoH connection, in memory, for ``https._request``: what the
    probe sends goes to an h2 server, ``respond`` answers each request, reads return the
    server's bytes in the sizes asked for."""

    def __init__(self, respond: Callable[[Any, int], None]) -> None:
        self.h2c: Any = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.h2c.initiate_connection()
        self.out = bytearray(self.h2c.data_to_send())
        self.respond = respond
        self.reads: list[int] = []

    async def send(self, data: bytes) -> None:
        for ev in self.h2c.receive_data(data):
            if isinstance(ev, h2.events.StreamEnded):
                self.respond(self.h2c, ev.stream_id)
        self.out += self.h2c.data_to_send()

    async def read(self, n: int) -> bytes:
        chunk = bytes(self.out[:n])
        del self.out[:n]
        self.reads.append(len(chunk))
        return chunk


def _doh_request(server: _H2Server) -> https._Response:
    module = Module(name="doh", query_name="www.example.test.", transport="https")
    r = https._Response()
    conn: Any = server
    asyncio.run(https._request(conn, module, query_for(module), ("127.0.0.1", 443), r))
    return r


@pytest.mark.unit
def test_a_doh_response_of_the_largest_body_is_read_whole() -> None:
    body = bytes(https.MAX_BODY)

    def respond(h2c: Any, sid: int) -> None:
        h2c.send_headers(sid, [(b":status", b"200"), (b"content-type", https.CONTENT_TYPE)])
        for off in range(0, len(body), 16384):  # the default largest frame
            h2c.send_data(sid, body[off : off + 16384], end_stream=off + 16384 >= len(body))

    r = _doh_request(_H2Server(respond))
    assert r.failure is None and r.ended and r.status == 200
    assert len(r.body) == https.MAX_BODY and r.got <= https.MAX_READ


@pytest.mark.unit
def test_a_doh_peer_sending_pings_without_end_is_cut_at_the_cap() -> None:
    """No response, PING frames instead: the probe reads at most MAX_READ (in slices of
    READ_SLICE) and fails as malformed, whatever the timeout."""

    def respond(h2c: Any, sid: int) -> None:
        for i in range(20_000):  # 340 kB of PINGs
            h2c.ping(i.to_bytes(8, "big"))

    server = _H2Server(respond)
    r = _doh_request(server)
    assert r.failure is not None and r.failure[0] is Reason.MALFORMED, r.failure
    assert https.MAX_READ < r.got <= https.MAX_READ + https.READ_SLICE
    assert max(server.reads) <= https.READ_SLICE


@pytest.mark.unit
def test_loop_lag_is_the_largest_of_its_window() -> None:
    lag = LoopLag()
    assert lag.current(1000.0) == 0.0
    lag.observe(1000.2, 0.004)
    lag.observe(1003.5, 2.5)
    lag.observe(1004.1, 0.001)
    assert lag.current(1005.0) == 2.5
    assert lag.current(1003.0 + LAG_WINDOW) == 0.001  # the 2.5 s second left the window
    assert lag.current(1004.0 + LAG_WINDOW + 1) == 0.0


# ---------------------------------------------------------------- a barrier per target


@pytest.mark.integration
def test_doh_status_that_is_not_a_number_fails_that_probe_only(tmp_path: Path) -> None:
    """`:status: abc` used to raise ValueError out of the probe and make every /metrics a
    500; it is that target's `malformed` now, and the other target still answers."""
    doh = HostileDoH("bad_status")
    dns = ScriptedServer(lambda q: [answer(q, "www.example.test. 60 IN A 192.0.2.1")])
    exp = exporter(
        tmp_path,
        {
            "modules": {
                "doh": _doh_module(doh.write_ca(tmp_path / "ca.pem"), "3s"),
                "udp": {"query_name": "www.example.test"},
            },
            "targets": [
                {"address": doh.address, "module": "doh"},
                {"address": dns.address, "module": "udp"},
            ],
        },
    )

    async def go() -> None:
        async with served(exp) as port:
            code, body = await get(port, "/metrics", timeout_header="5")
            assert code == 200, body
            assert value(body, "dnsfleet_probe_failure", target=doh.address, module="doh",
                         reason="malformed") == 1  # fmt: skip
            assert value(body, "dnsfleet_probe_success", target=dns.address, module="udp") == 1

    try:
        run(go())
    finally:
        doh.close()
        dns.close()


@pytest.mark.integration
def test_a_chain_certificate_whose_date_is_not_a_time_costs_only_its_expiry(
    tmp_path: Path,
) -> None:
    """A DoH server sends, after its own certificate, one whose notAfter is not a time
    ("Bad time value"): the expiry code raised and every /metrics was a 500. Now the probe
    succeeds (the verified path is sound), only that target's expiry series is left out,
    and the other target is untouched."""
    doh = HostileDoH("bad_chain_date")
    good = HostileDoH("bad_chain_date")  # the same server, without the extra certificate
    good.ctx.load_cert_chain(*good.plain_chain(tmp_path / "good"))
    exp = exporter(
        tmp_path,
        {
            "modules": {
                "doh": _doh_module(doh.write_ca(tmp_path / "ca.pem"), "3s"),
                "good": _doh_module(good.write_ca(tmp_path / "good-ca.pem"), "3s"),
            },
            "targets": [
                {"address": doh.address, "module": "doh"},
                {"address": good.address, "module": "good"},
            ],
        },
    )

    async def go() -> None:
        async with served(exp) as port:
            for _ in range(2):
                code, body = await get(port, "/metrics", timeout_header="5")
                assert code == 200, body
                for target, module in ((doh.address, "doh"), (good.address, "good")):
                    assert value(body, "dnsfleet_probe_success", target=target, module=module) == 1
                expiry = "dnsfleet_probe_tls_cert_expiry_timestamp_seconds"
                assert value(body, expiry, target=doh.address, module="doh") is None
                assert (value(body, expiry, target=good.address, module="good") or 0) > time.time()

    try:
        run(go())
    finally:
        doh.close()
        good.close()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("infos", "want"),
    [
        ([{"notAfter": "Jan  1 00:00:00 2030 GMT"}, {"notAfter": "Jan  1 00:00:00 2029 GMT"}],
         1861920000.0),
        ([{"notAfter": "not a time"}], None),
        ([{"notAfter": "Jan  1 00:00:00 2030 GMT"}, {"notAfter": "Feb 31 99:99:99 2030 GMT"}],
         None),
        ([{"notAfter": "Jan  1 00:00:00 2030 GMT"}, {}], None),
        ([{"notAfter": 12}], None),
        ([], None),
    ],
)  # fmt: skip
def test_earliest_expiry_tolerates_a_date_that_is_not_a_time(
    infos: list[dict[str, object]], want: float | None
) -> None:
    assert earliest_not_after(infos) == want


@pytest.mark.unit
def test_an_exception_while_probing_one_target_is_its_internal_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe that raises (here: a stand-in for the certificate code's ValueError) fails
    its own target with reason `internal`, is counted, and the other target and the whole
    record render as usual."""
    exp = exporter(
        tmp_path,
        {
            "modules": {"t": {"transport": "tcp"}},
            "targets": [{"address": "127.0.0.1:1053", "module": "t"},
                        {"address": "127.0.0.2:1053", "module": "t"}],
        },
    )  # fmt: skip
    ok = ProbeResult(True, None, 0.001, 0, 1, "ok")

    async def fake_probe(*, sockaddr: tuple[str, int], **_: object) -> ProbeResult:
        if sockaddr[0] == "127.0.0.1":
            raise ValueError("time data 'not a time' does not match format")
        return ok

    monkeypatch.setattr(prober_mod, "probe", fake_probe)

    async def go() -> None:
        deadline = asyncio.get_running_loop().time() + 5
        results = await exp.prober.probe_all(exp.config, deadline)
        bad = results[("127.0.0.1:1053", "t")]
        assert bad.reason is Reason.INTERNAL and "ValueError" in bad.detail
        assert results[("127.0.0.2:1053", "t")] is ok
        assert exp.prober.internal_errors == 1
        fams = {f.name for f in exp.prober.record(results).families()}
        assert "dnsfleet_probe_failures_total" in fams

    run(go())


# ---------------------------------------------------------------- the start-up log


@pytest.mark.integration
def test_the_start_up_log_names_the_port_bound(tmp_path: Path) -> None:
    """With `--web.listen-address=127.0.0.1:0` the kernel picks the port; the log used to
    say port 0. It names the port bound now, and that port answers."""
    conf = tmp_path / "dnsfleet.yml"
    conf.write_text(yaml.safe_dump({"resolv_conf": [], "modules": {"m": {}}, "targets": []}))
    proc = ManagedProcess(
        [*EXPORTER, "--web.listen-address=127.0.0.1:0", f"--config.file={conf}"],
        tmp_path / "exporter.log",
        what="exporter",
    )
    listening = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/metrics")

    class Logged(Ready):
        def __call__(self) -> bool:
            return listening.search(proc.output()) is not None

    try:
        proc.wait_until(Logged(), timeout=30)
        m = listening.search(proc.output())
        assert m is not None
        port = int(m.group(1))
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/healthy", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.stop(timeout=10)
