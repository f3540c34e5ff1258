"""The families of one probe result, shared by ``/metrics`` (through ``prober.py``, one row
per configured target) and ``/probe`` (one row without labels).

Families of per-target state across scrapes (counters, the latency histogram) stay in
``prober.py`` beside ``TargetState``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from itertools import chain, compress, repeat
from operator import attrgetter, is_not

from dnsfleet.exposition import TextFamily, compile_template, format_value, render
from dnsfleet.probes.ede import code_label
from dnsfleet.probes.reasons import REASONS, Reason
from dnsfleet.probes.result import ProbeResult

_FAILURE_GAUGE = "dnsfleet_probe_failure"


def label_prefix(labels: str) -> str:
    """Labels ahead of one more label (``reason``, ``le``): with their comma, if any."""
    return labels + "," if labels else ""


# The failure gauge's line for each reason: one series while the last probe failed, none
# while it succeeded. Zeros for the other reasons told a query nothing (a reason that is
# not the failing one is 0), at 14 series per target; when the target recovers,
# Prometheus marks the series stale at the next scrape.
_FAILURE_LINE: dict[Reason | None, Callable[..., str]] = {
    r: compile_template("failure", "p", f'{_FAILURE_GAUGE}{{{{{{p}}reason="{r.value}"}}}} 1\n')
    for r in REASONS
}


_SUCCESS = attrgetter("success")
_DURATION = attrgetter("duration")
_REASON = attrgetter("reason")
_BIT = {True: "1", False: "0"}


def probe_result_families(rows: Iterable[tuple[str, ProbeResult | None]]) -> list[TextFamily]:
    """Pure: the per-probe gauges for (labels, result) rows. /metrics and /probe share it;
    /probe passes empty labels."""
    rows = list(rows)
    probed = [(labels, r) for labels, r in rows if r is not None]
    # Each column's values read and formatted in C, one pass a column (no call a line);
    # the failing few picked out in C too.
    heads = [f"{{{labels}}} " if labels else " " for labels, _ in probed]
    results = [r for _, r in probed]
    failed = compress(probed, map(is_not, map(_REASON, results), repeat(None)))
    failing = [_FAILURE_LINE[r.reason](label_prefix(labels)) for labels, r in failed]

    def column(name: str, values: Iterable[str]) -> str:
        pieces = zip(repeat(name), heads, values, repeat("\n"))
        return "".join(chain.from_iterable(pieces))

    def numbers(attr: str) -> Iterable[str]:
        return map(format, map(attrgetter(attr), results))

    return [
        TextFamily(
            "dnsfleet_probe_success",
            "1 if the last probe succeeded.",
            "gauge",
            column("dnsfleet_probe_success", map(_BIT.__getitem__, map(_SUCCESS, results))),
        ),
        TextFamily(
            "dnsfleet_probe_duration_seconds",
            "Duration of the last probe, answer or not.",
            "gauge",
            column("dnsfleet_probe_duration_seconds", map(format_value, map(_DURATION, results))),
        ),
        TextFamily(
            _FAILURE_GAUGE,
            "1 for the reason the last probe failed; absent while it succeeded (no series "
            "for the other reasons).",
            "gauge",
            "".join(failing),
        ),
        TextFamily(
            "dnsfleet_probe_dns_rcode",
            "Response code of the last answer (numeric), -1 when there was none.",
            "gauge",
            column("dnsfleet_probe_dns_rcode", numbers("rcode")),
        ),
        TextFamily(
            "dnsfleet_probe_answer_rrs",
            "Resource records in the answer section of the last answer.",
            "gauge",
            column("dnsfleet_probe_answer_rrs", numbers("answer_rrs")),
        ),
        *probe_extra_families(rows),
    ]


def probe_extra_families(rows: Iterable[tuple[str, ProbeResult | None]]) -> list[TextFamily]:
    """Pure: the per-probe gauges only some results have: DNSSEC, Extended DNS
    Errors, TLS. /probe adds them to its fixed template when the result has them."""
    authenticated: list[str] = []
    ede: list[str] = []
    expiry: list[str] = []
    handshake: list[str] = []
    for labels, r in rows:
        if r is None:
            continue
        braced = f"{{{labels}}}" if labels else ""
        resp = r.response
        if r.dnssec:
            ad = 1 if resp is not None and resp.authenticated else 0
            authenticated.append(f"dnsfleet_probe_dnssec_authenticated{braced} {ad}\n")
        if resp is not None and resp.ede:
            ede.extend(
                f'dnsfleet_probe_extended_error{{{label_prefix(labels)}code="{c}"}} 1\n'
                for c in dict.fromkeys(code_label(code) for code in resp.ede)
            )
        if r.tls is not None:
            handshake.append(
                f"dnsfleet_probe_tls_handshake_seconds{braced} {format_value(r.tls.handshake)}\n"
            )
            if r.tls.cert_expiry is not None:
                expiry.append(
                    f"dnsfleet_probe_tls_cert_expiry_timestamp_seconds{braced} "
                    f"{format_value(r.tls.cert_expiry)}\n"
                )
    return [
        TextFamily(
            "dnsfleet_probe_dnssec_authenticated",
            "1 if the last answer had AD set (the resolver validated it), 0 if it did not "
            "or there was no answer; modules with dnssec set only.",
            "gauge",
            "".join(authenticated),
        ),
        TextFamily(
            "dnsfleet_probe_extended_error",
            "1 for each Extended DNS Error code (RFC 8914; other: unregistered) in the "
            "last answer; absent when it carried none.",
            "gauge",
            "".join(ede),
        ),
        TextFamily(
            "dnsfleet_probe_tls_cert_expiry_timestamp_seconds",
            "Earliest notAfter of the certificates the server sent in the last probe's TLS "
            "handshake (tls and https transports).",
            "gauge",
            "".join(expiry),
        ),
        TextFamily(
            "dnsfleet_probe_tls_handshake_seconds",
            "Time the last probe's TLS handshake took, from TCP connected to TLS established: "
            "the part of dnsfleet_probe_duration_seconds a fresh connection costs.",
            "gauge",
            "".join(handshake),
        ),
    ]


@lru_cache(maxsize=len(REASONS) + 1)
def _template(reason: Reason | None) -> str:
    """The /probe exposition for a result with ``reason``, rendered once by the code that
    renders /metrics, with its three numbers left as format fields."""
    sentinel = ProbeResult(
        success=reason is None,
        reason=reason,
        duration=123456.25,
        rcode=987654,
        answer_rrs=876543,
        detail="",
    )
    text = render(probe_result_families([("", sentinel)]))
    text = text.replace("{", "{{").replace("}", "}}")
    for value, name in (("123456.25", "duration"), ("987654", "rcode"), ("876543", "answers")):
        assert text.count(value) == 1, value
        text = text.replace(value, "{" + name + "}")
    return text


def probe_exposition(result: ProbeResult) -> str:
    """/probe output: the per-probe gauges without target labels."""
    text = _template(result.reason).format(
        duration=format_value(result.duration), rcode=result.rcode, answers=result.answer_rrs
    )
    if result.dnssec or result.tls is not None or (result.response and result.response.ede):
        text += render(probe_extra_families([("", result)]))
    return text
