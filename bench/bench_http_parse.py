"""Request parsing: dnsfleet's strict parser against h11 (the well-kept HTTP/1.1 state
machine the serving layer was held to), on the request Prometheus sends for a scrape.

    .venv/bin/python bench/bench_http_parse.py [-n 50000]

Prints microseconds per request for each and the ratio. h11 is a test extra; the exporter
does not depend on it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "exporter"))

from dnsfleet.web.request import _parse_head

REQUEST = (
    b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9853\r\n"
    b"User-Agent: Prometheus/2.42.0\r\nAccept: application/openmetrics-text;"
    b"version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    b"text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
    b"X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
)


def ours(n: int) -> float:
    head = REQUEST[:-4]
    t = time.perf_counter()
    for _ in range(n):
        _parse_head(head)
    return (time.perf_counter() - t) / n


def theirs(n: int) -> float:
    import h11

    t = time.perf_counter()
    for _ in range(n):
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(REQUEST)
        event = conn.next_event()
        assert isinstance(event, h11.Request)
    return (time.perf_counter() - t) / n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=50000)
    n = p.parse_args().n
    ours(1000), theirs(1000)  # warm up
    a, b = ours(n), theirs(n)
    print(f"dnsfleet _parse_head: {a * 1e6:.1f} µs/request")
    print(f"h11 Connection + next_event: {b * 1e6:.1f} µs/request")
    print(f"ratio dnsfleet/h11: {a / b:.2f}")


if __name__ == "__main__":
    main()
