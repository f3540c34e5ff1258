"""What a probe found, and the judgement of it against a module."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from dnsfleet.config import Module
from dnsfleet.dnswire import FLAG_TC, Malformed, Response, answer_texts, rcode_text
from dnsfleet.probes.dnssec import dnssec_verdict
from dnsfleet.probes.reasons import Reason
from dnsfleet.valueclass import value


@dataclass(frozen=True, slots=True)
class TlsInfo:
    """What a completed TLS handshake showed (tls and https transports)."""

    handshake: float  # seconds, from TCP connected to TLS established
    connect: float  # seconds to TCP connected
    cert_expiry: float | None  # earliest notAfter in the chain the server sent, epoch s
    alpn: str | None = None


@value
class Exchange:
    """The network's side: a response, or the reason there was none."""

    response: Response | None
    error: Reason | None
    duration: float
    detail: str = ""
    tls: TlsInfo | None = None


def unanswered(ignored: int, timeout: float, duration: float) -> Exchange:
    """A UDP query's end without an answer: ``malformed`` when datagrams came back that
    answered nothing (a stub keeps waiting past them too), else ``timeout``. Both UDP
    paths (a socket per probe, the shared sockets of a batch) end so."""
    if ignored:
        detail = f"{ignored} datagram(s) that were not an answer to the query, "
        return Exchange(
            None, Reason.MALFORMED, duration, detail + "and no answer before the timeout"
        )
    return Exchange(None, Reason.TIMEOUT, duration, f"no answer within {timeout:.3g}s")


@value
class ProbeResult:
    success: bool
    reason: Reason | None
    duration: float
    rcode: int  # -1 when no response
    answer_rrs: int
    detail: str
    response: Response | None = None
    dnssec: bool = False  # the module asked for DNSSEC (DO and AD set in the query)
    tls: TlsInfo | None = None  # the handshake, when one completed

    @property
    def rcode_text(self) -> str:
        return rcode_text(self.rcode) if self.rcode >= 0 else "-"


@lru_cache(maxsize=256)
def _compile(pattern: str) -> Any:
    # RE2 matches in time linear in the text: `(a+)+$` against a hostile TXT record cannot
    # stall the event loop (Python's re backtracks exponentially there), and its syntax is
    # Go's regexp, as blackbox_exporter's. Patterns RE2 does not support (backreferences,
    # lookaround) are refused when the config is loaded. Imported on first use: modules
    # without answer checks do not load it.
    import re2  # noqa: PLC0415

    return re2.compile(pattern)


def failed(reason: Reason, duration: float, detail: str) -> ProbeResult:
    return ProbeResult(
        success=False, reason=reason, duration=duration, rcode=-1, answer_rrs=0, detail=detail
    )


def judge(ex: Exchange, module: Module) -> ProbeResult:
    """Pure: turn an exchange into a verdict for ``module``."""
    r = ex.response
    dnssec = module.dnssec != "none"
    if r is None:
        # ``dnssec`` is the module's setting, not whether a handshake happened: an encrypted
        # probe that timed out after its handshake asked for DNSSEC only if its module did.
        res = failed(ex.error or Reason.NETWORK_ERROR, ex.duration, ex.detail)
        return replace(res, dnssec=dnssec, tls=ex.tls)
    if (
        not dnssec
        and not r.flags & FLAG_TC
        and r.rcode in module.valid_rcode_numbers
        and r.matching_answers >= module.min_answers
        and not module.fail_if_not_matches
        and not module.fail_if_matches
    ):
        # _verdict's "ok" for what most answers are, without its call and tuple.
        return ProbeResult(True, None, ex.duration, r.rcode, r.answer_rrs, "ok", r, False, ex.tls)
    reason, detail = _verdict(r, module, dnssec=dnssec)
    # Positional, in field order: the hot path of every answered probe.
    return ProbeResult(
        reason is None, reason, ex.duration, r.rcode, r.answer_rrs, detail, r, dnssec, ex.tls
    )


def _verdict(r: Response, module: Module, *, dnssec: bool) -> tuple[Reason | None, str]:
    if r.flags & FLAG_TC:  # r.truncated, without the property's call
        # Over TCP nothing is ever too large: a TC answer there is a broken server.
        return (
            Reason.TRUNCATED,
            "TC bit set: the answer does not fit in UDP"
            if module.transport == "udp"
            else "TC bit set on a TCP answer",
        )
    said = dnssec_verdict(r, module) if dnssec else None
    if said is not None:
        return said
    if r.rcode not in module.valid_rcode_numbers:
        return Reason.RCODE, f"rcode {rcode_text(r.rcode)} not in {', '.join(module.valid_rcodes)}"
    if r.matching_answers < module.min_answers:
        return (
            Reason.ANSWER_MISMATCH,
            f"{r.matching_answers} {module.query_type} answers, "
            f"expected at least {module.min_answers}",
        )
    if module.fail_if_not_matches or module.fail_if_matches:
        return _text_checks(r, module)
    return None, "ok"


def _text_checks(r: Response, module: Module) -> tuple[Reason | None, str]:
    try:
        texts = answer_texts(r.wire)
    except Malformed as e:
        return Reason.MALFORMED, str(e)
    for pat in module.fail_if_not_matches:
        if not any(_compile(pat).search(t) for t in texts):
            return Reason.ANSWER_MISMATCH, f"no answer matches {pat!r}"
    for pat in module.fail_if_matches:
        hit = next((t for t in texts if _compile(pat).search(t)), None)
        if hit is not None:
            return Reason.ANSWER_MISMATCH, f"answer {hit!r} matches {pat!r}"
    return None, "ok"


# A cycle's probe that its deadline left no time to start: the prober's own verdict.
NOT_STARTED = failed(Reason.TIMEOUT, 0.0, "scrape deadline reached before the probe could start")

# A timeout is evidence about a resolver when its probe waited at least this long, or its
# module's whole timeout if that is shorter: no DNS client waits less for an answer.
MIN_EVIDENT_WAIT = 1.0


def evident(result: ProbeResult, module: Module, *, budget: float, lead: bool) -> bool:
    """Whether a probe's outcome is evidence about its target, for the attempts and
    failures counters that the SLO rules and every scraper read. Not evidence: a probe
    that could not start before its cycle's deadline (the exporter's capacity), an
    exception of dnsfleet's own (``internal``, counted in
    dnsfleet_probe_internal_errors_total), and a timeout that a requester's shorter
    deadline caused. A timeout counts when the probe waited its module's whole timeout,
    or when its cycle is the lead requester's (``lead``: the largest budget asked for
    lately, the Prometheus server; see app.py) and gave it at least
    min(module timeout, MIN_EVIDENT_WAIT): then a module timeout at or above the scrape
    budget still counts, and a client with a short deadline never counts failures
    against a healthy resolver. An answer, a refusal or a SERVFAIL is always evidence."""
    if result is NOT_STARTED or result.reason is Reason.INTERNAL:
        return False
    if result.reason is not Reason.TIMEOUT or result.duration >= module.timeout - 0.001:
        return True
    return lead and budget >= min(module.timeout, MIN_EVIDENT_WAIT)
