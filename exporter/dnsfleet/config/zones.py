"""``zones``: zones whose integrity is checked at their own nameservers."""

from __future__ import annotations

from dataclasses import dataclass, field

from dnsfleet.config.addresses import Address, Endpoint
from dnsfleet.config.checks import Duration, ListOf, Section, key, read_keys
from dnsfleet.config.concepts import DnsName
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

DAY = 86400.0


@dataclass(frozen=True)
class Zone:
    """A zone, its authoritative nameservers and, for the DS check, its parent's."""

    name: str = field(metadata=key(DnsName(), doc="The zone's apex, e.g. example.com"))
    nameservers: tuple[Endpoint, ...] = field(
        default=(),
        metadata=key(
            ListOf(Address()),
            doc="Addresses of every authoritative server of the zone (IP[:port]; names are "
            "not resolved): SOA serial and RRSIG expiry are read at each",
        ),
    )
    parent_nameservers: tuple[Endpoint, ...] = field(
        default=(),
        metadata=key(
            ListOf(Address()),
            doc="Addresses of the parent zone's servers: the DS published there must "
            "match a DNSKEY of the zone (dnsfleet_zone_ds_match); no DS check when empty",
        ),
    )
    signature_warning: float = field(
        default=7 * DAY,
        metadata=key(
            Duration(minimum=3600, maximum=366 * DAY),
            doc="DNSZoneSignaturesExpiring warns when an RRSIG expires within this "
            "(exported as dnsfleet_zone_signature_warning_seconds); it pages under a day",
        ),
    )
    timeout: float = field(default=2.0, metadata=key(Duration(maximum=60)))

    @property
    def apex(self) -> str:
        """The name with its trailing dot, lower-cased: the ``zone`` label."""
        return self.name.lower().rstrip(".") + "."


def _parse_zone(node: Node) -> Zone:
    f = node.fields()
    zone = Zone(**read_keys(f, Zone))
    f.done()
    if not zone.nameservers:
        raise node.child("nameservers").error(
            f"zone {quote(zone.name)} has no nameserver: list the addresses of its "
            "authoritative servers (names are not resolved)"
        )
    for k in ("nameservers", "parent_nameservers"):
        seen: set[str] = set()
        for i, ep in enumerate(getattr(zone, k)):
            if ep.key() in seen:
                raise node.child(k).child(i).error(f"{ep} is listed twice")
            seen.add(ep.key())
    return zone


def _parse_zones(node: Node) -> tuple[Zone, ...]:
    zones = tuple(_parse_zone(n) for n in node.sequence())
    seen: set[str] = set()
    for i, z in enumerate(zones):
        if z.apex in seen:
            raise node.child(i).error(f"zone {quote(z.name)} is listed twice")
        seen.add(z.apex)
    return zones


ZONES_KEY = key(
    ListOf(Section(Zone, _parse_zone), whole=_parse_zones),
    doc="Zones whose SOA serials, signatures and DS are checked at their nameservers",
)
