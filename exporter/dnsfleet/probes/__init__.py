"""One probe per transport, listed explicitly (blackbox_exporter's ``prober/``)."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

from dnsfleet.config import Module, Transport
from dnsfleet.dnswire import Query, build_query
from dnsfleet.probes import https, tcp, tls, udp
from dnsfleet.probes.reasons import REASONS, Reason
from dnsfleet.probes.result import Exchange, ProbeResult, failed, judge

ExchangeFn = Callable[..., Awaitable[Exchange]]

PROBES: dict[Transport, ExchangeFn] = {
    "udp": udp.exchange,
    "tcp": tcp.exchange,
    "tls": tls.exchange,  # DNS over TLS (RFC 7858)
    "https": https.exchange,  # DNS over HTTPS (RFC 8484)
}
# The probes that need the module itself (server name, CA, DoH URL and method).
WITH_MODULE = frozenset({"tls", "https"})


def query_for(module: Module) -> Query:
    """The query a module sends (ID 0): the one place a module's settings become a query."""
    return build_query(
        module.query_name,
        module.qtype,
        module.qclass,
        recursion_desired=module.recursion_desired,
        edns=module.edns,
        payload=module.edns_udp_size,
        nsid=module.edns,
        dnssec_ok=module.dnssec != "none",
        authenticated_data=module.dnssec != "none",
    )


async def probe(
    *,
    sockaddr: tuple[str, int] | tuple[str, int, int, int],
    family: socket.AddressFamily,
    module: Module,
    query: Query,
    timeout: float,
) -> ProbeResult:
    """Send ``query`` to ``sockaddr`` over the module's transport and judge the answer.
    Never raises for network conditions."""
    if module.transport in WITH_MODULE:
        ex = await PROBES[module.transport](
            sockaddr=sockaddr, family=family, query=query, timeout=timeout, module=module
        )
    else:
        ex = await PROBES[module.transport](
            sockaddr=sockaddr, family=family, query=query, timeout=timeout
        )
    return judge(ex, module)


__all__ = [
    "PROBES",
    "REASONS",
    "Exchange",
    "ProbeResult",
    "Reason",
    "failed",
    "judge",
    "probe",
    "query_for",
]
