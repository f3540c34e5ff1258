"""What a probe found, and the judgement of it against a module."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

import dns.rcode

from dnsfleet.config import Module
from dnsfleet.dnswire import Malformed, Response, answer_texts


class Reason(StrEnum):
    """Why a probe failed: a closed set, each member always exported (1 current, 0 others)."""

    TIMEOUT = "timeout"  # nothing usable before the deadline
    REFUSED = "refused"  # ICMP port unreachable / TCP RST: host up, no DNS
    UNREACHABLE = "unreachable"  # no route, host or network unreachable
    RCODE = "rcode"  # answered with an rcode not in valid_rcodes
    ANSWER_MISMATCH = "answer_mismatch"  # answered, but not what the module expects
    TRUNCATED = "truncated"  # TC bit set on a UDP answer
    MALFORMED = "malformed"  # bytes came back, but no well-formed answer
    NETWORK_ERROR = "network_error"  # any other socket error


REASONS: tuple[Reason, ...] = tuple(Reason)


UNREACHABLE_ERRNOS = frozenset(
    {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN, errno.EADDRNOTAVAIL}
)


def classify_oserror(e: OSError) -> Reason:
    """The reason a socket error gives a probe, whichever transport raised it."""
    if isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED:
        return Reason.REFUSED
    if e.errno in UNREACHABLE_ERRNOS:
        return Reason.UNREACHABLE
    return Reason.NETWORK_ERROR


@dataclass(frozen=True, slots=True)
class Exchange:
    """The network's side: a response, or the reason there was none."""

    response: Response | None
    error: Reason | None
    duration: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    success: bool
    reason: Reason | None
    duration: float
    rcode: int  # -1 when no response
    answer_rrs: int
    detail: str
    response: Response | None = None

    @property
    def rcode_text(self) -> str:
        return dns.rcode.to_text(self.rcode) if self.rcode >= 0 else "-"  # type: ignore[arg-type]


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
    if r is None:
        return failed(ex.error or Reason.NETWORK_ERROR, ex.duration, ex.detail)
    reason, detail = _verdict(r, module)
    return ProbeResult(
        success=reason is None,
        reason=reason,
        duration=ex.duration,
        rcode=r.rcode,
        answer_rrs=r.answer_rrs,
        detail=detail,
        response=r,
    )


def _verdict(r: Response, module: Module) -> tuple[Reason | None, str]:
    if r.truncated:
        # Over TCP nothing is ever too large: a TC answer there is a broken server.
        return (
            Reason.TRUNCATED,
            "TC bit set: the answer does not fit in UDP"
            if module.transport == "udp"
            else "TC bit set on a TCP answer",
        )
    if r.rcode not in module.valid_rcode_numbers:
        text = dns.rcode.to_text(r.rcode)  # type: ignore[arg-type]
        return Reason.RCODE, f"rcode {text} not in {', '.join(module.valid_rcodes)}"
    if r.matching_answers < module.min_answers:
        return (
            Reason.ANSWER_MISMATCH,
            f"{r.matching_answers} {module.query_type} answers, "
            f"expected at least {module.min_answers}",
        )
    if module.fail_if_not_matches or module.fail_if_matches:
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
