"""DNSSEC seen from the resolver's side: the verdict on an answer to a module
with ``dnssec: require_ad`` or ``expect_bogus``. Pure; called from ``judge``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dns.rcode import NOERROR, NXDOMAIN, SERVFAIL

from dnsfleet.dnswire import rcode_text
from dnsfleet.probes.reasons import Reason

if TYPE_CHECKING:
    from dnsfleet.config import Module
    from dnsfleet.dnswire import Response


def dnssec_verdict(r: Response, module: Module) -> tuple[Reason | None, str] | None:
    """The verdict, or None when DNSSEC has nothing to say and the usual checks decide."""
    if module.dnssec == "expect_bogus":
        # A validating resolver answers a name whose signatures are broken with SERVFAIL;
        # an answer (NOERROR, NXDOMAIN) means it handed out data it did not validate.
        text = rcode_text(r.rcode)
        if r.rcode == SERVFAIL:
            return None, "ok: SERVFAIL for the bogus name"
        if r.rcode in (NOERROR, NXDOMAIN):
            ad = " with AD" if r.authenticated else ""
            return (
                Reason.VALIDATION_DISABLED,
                f"bogus name answered {text}{ad}: the resolver is not validating",
            )
        return Reason.RCODE, f"rcode {text}, expected SERVFAIL for the bogus name"
    if (
        module.dnssec == "require_ad"
        and r.rcode in module.valid_rcode_numbers
        and not r.authenticated
    ):
        return Reason.NOT_VALIDATED, "answer without AD: the resolver did not validate it"
    return None
