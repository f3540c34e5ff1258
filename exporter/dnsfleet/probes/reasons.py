"""Why a probe failed: the closed set of reasons, and the reason a socket error gives.
Every transport, the answer checks (``probes/dnssec.py``) and the result's judgement use
it; it imports nothing of the package."""

from __future__ import annotations

import errno
from enum import StrEnum


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
    NOT_VALIDATED = "not_validated"  # dnssec require_ad: the answer lacks AD
    VALIDATION_DISABLED = "validation_disabled"  # dnssec expect_bogus: a bogus name answered
    TLS_HANDSHAKE = "tls_handshake"  # tls/https: the TLS handshake (or ALPN h2) failed
    CERTIFICATE = "certificate"  # tls/https: untrusted, expired or wrong-name certificate
    HTTP_STATUS = "http_status"  # https: an HTTP status other than 200
    INTERNAL = "internal"  # the exporter's own exception while probing or judging: a bug


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
