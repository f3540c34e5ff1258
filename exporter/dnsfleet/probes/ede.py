"""Extended DNS Errors (RFC 8914): the registered INFO-CODEs, which bound the ``code`` label.

The table follows the IANA "Extended DNS Error Codes" registry as dnspython 2.9 knows it
(0-24 from RFC 8914, 25-32 added since); a test compares it with ``dns.edns.EDECode``.
Any other code (unregistered, or private use 49152-65535) is exported as ``other``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dnsfleet.dnswire import Response

EDE_CODES: dict[int, str] = {
    0: "Other Error",
    1: "Unsupported DNSKEY Algorithm",
    2: "Unsupported DS Digest Type",
    3: "Stale Answer",
    4: "Forged Answer",
    5: "DNSSEC Indeterminate",
    6: "DNSSEC Bogus",
    7: "Signature Expired",
    8: "Signature Not Yet Valid",
    9: "DNSKEY Missing",
    10: "RRSIGs Missing",
    11: "No Zone Key Bit Set",
    12: "NSEC Missing",
    13: "Cached Error",
    14: "Not Ready",
    15: "Blocked",
    16: "Censored",
    17: "Filtered",
    18: "Prohibited",
    19: "Stale NXDOMAIN Answer",
    20: "Not Authoritative",
    21: "Not Supported",
    22: "No Reachable Authority",
    23: "Network Error",
    24: "Invalid Data",
    25: "Signature Expired before Valid",
    26: "Too Early",
    27: "Unsupported NSEC3 Iterations Value",
    28: "Unable to conform to policy",
    29: "Synthesized",
    30: "Invalid Query Type",
    31: "Rate Limited",
    32: "Over Quota",
}
OTHER = "other"
# Every value the `code` label can take: the registered codes, then `other`.
CODE_LABELS: tuple[str, ...] = (*(str(c) for c in EDE_CODES), OTHER)


def code_label(code: int) -> str:
    """The ``code`` label value of an INFO-CODE."""
    return str(code) if code in EDE_CODES else OTHER


def describe(code: int) -> str:
    """``7 Signature Expired``, for people (the status page)."""
    return f"{code} {EDE_CODES.get(code, 'unregistered')}"


# The alert of a failed DNSSEC check by its reason: the resolver answered, not validating.
NOT_VALIDATING = dict.fromkeys(("not_validated", "validation_disabled"), "DNSResolverNotValidating")


def ede_note(resp: Response | None) -> str:
    """`` (EDE 7 Signature Expired: text)`` for an answer with Extended DNS Errors, for
    people: the status page puts it beside the failure reason."""
    if resp is None or not resp.ede:
        return ""
    codes = ", ".join(describe(c) for c in resp.ede)
    return f" (EDE {codes}{': ' + resp.ede_text if resp.ede_text else ''})"
