"""Linux bonding: the bond under the service address, its slaves and link monitoring.

Bonds come from /proc/net/bonding (the richer source, with 802.3ad churn and partner
details) and /sys/class/net/bonding_masters; sysfs is read only for bonds that have no proc
file. No bonding driver loaded means no families. Emits every ``dnsfleet_bond_*`` family
(collector label ``bonding``).
"""

from __future__ import annotations

from collections import Counter

from dnsfleet.collectors.base import CollectorError, host_collector
from dnsfleet.config import Config
from dnsfleet.exposition import Family, MetricType
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.bonding import ZERO_MAC, Bond, bond_from_sysfs, parse_bond_proc

SYSFS_BOND_FILES = (
    "mode",
    "slaves",
    "active_slave",
    "miimon",
    "arp_interval",
    "arp_ip_target",
    "ad_aggregator",
    "ad_partner_mac",
)
SYSFS_SLAVE_FILES = ("mii_status", "link_failure_count", "ad_aggregator_id")


def read_bond(fs: HostFS, name: str) -> Bond | None:
    text = fs.read_optional(fs.proc("net", "bonding", name))
    if text is not None:
        return parse_bond_proc(name, text)
    base = fs.sys("class", "net", name)
    bonding = {f: fs.read_optional(base / "bonding" / f) for f in SYSFS_BOND_FILES}
    if bonding["slaves"] is None:
        return None  # listed in bonding_masters but gone: deleted between the two reads
    slaves = {}
    for slave in bonding["slaves"].split():
        # lower_<slave> since Linux 4.x; slave_<slave> before (and in node_exporter fixtures).
        d = base / f"lower_{slave}" / "bonding_slave"
        if not fs.exists(d):
            d = base / f"slave_{slave}" / "bonding_slave"
        slaves[slave] = {f: fs.read_optional(d / f) for f in SYSFS_SLAVE_FILES}
    return bond_from_sysfs(name, bonding=bonding, slaves=slaves)


def bond_names(fs: HostFS) -> list[str]:
    names = set(fs.listdir(fs.proc("net", "bonding")))
    masters = fs.read_optional(fs.sys("class", "net", "bonding_masters"))
    if masters:
        names.update(masters.split())
    return sorted(names)


def reference_aggregator(bond: Bond) -> int | None:
    """The aggregator a healthy 802.3ad bond's slaves all join: the active one, else the one
    most up slaves report."""
    if bond.aggregator_id is not None:
        return bond.aggregator_id
    ids = Counter(s.aggregator_id for s in bond.slaves if s.up and s.aggregator_id is not None)
    return ids.most_common(1)[0][0] if ids else None


# The bonding families, in exposition order: key -> (name, help, type).
_BOND: dict[str, tuple[str, str, MetricType]] = {
    "info": ("dnsfleet_bond_info", "A bonding interface and its mode; always 1.", "gauge"),
    "slaves": ("dnsfleet_bond_slaves", "Slaves enslaved to the bond.", "gauge"),
    "slaves_up": ("dnsfleet_bond_slaves_up", "Slaves whose MII status is up.", "gauge"),
    "slave_up": ("dnsfleet_bond_slave_up", "1 if the slave's MII status is up.", "gauge"),
    "failures": (
        "dnsfleet_bond_slave_link_failures_total",
        "Link failures the bonding driver counted on the slave.",
        "counter",
    ),
    "active": (
        "dnsfleet_bond_active_slave_info",
        "The slave currently carrying traffic (active-backup, tlb, alb); always 1.",
        "gauge",
    ),
    "monitor": (
        "dnsfleet_bond_link_monitoring_interval_seconds",
        "Link monitoring interval by method (mii, arp); 0 means that method is "
        "off, both 0 means no link monitoring at all.",
        "gauge",
    ),
    "mismatch": (
        "dnsfleet_bond_ad_aggregator_mismatch_slaves",
        "802.3ad: slaves with link up whose aggregator ID differs from the "
        "active aggregator's (up, but carrying no traffic).",
        "gauge",
    ),
    "zero_partner": (
        "dnsfleet_bond_ad_partner_mac_zero",
        "802.3ad: 1 if the active aggregator's partner MAC is "
        "00:00:00:00:00:00 (no LACP partner answered).",
        "gauge",
    ),
    "churned": (
        "dnsfleet_bond_slave_ad_churned",
        "802.3ad: 1 if the actor or partner churn state of the slave is "
        "'churned' (LACP did not converge on that port).",
        "gauge",
    ),
    "churns": (
        "dnsfleet_bond_slave_ad_churns_total",
        "802.3ad: times the actor or partner state of the slave churned.",
        "counter",
    ),
}


def families(bonds: list[Bond]) -> list[Family]:
    fams = {key: Family(name, help_, type_) for key, (name, help_, type_) in _BOND.items()}
    for b in bonds:
        _add_bond(fams, b)
        if b.mode == "802.3ad":
            _add_lacp(fams, b)
    return list(fams.values())


def _add_bond(fams: dict[str, Family], b: Bond) -> None:
    bl = {"bond": b.name}
    fams["info"].add(1, {"bond": b.name, "mode": b.mode})
    fams["slaves"].add(len(b.slaves), bl)
    fams["slaves_up"].add(b.slaves_up, bl)
    for s in b.slaves:
        sl = {"bond": b.name, "slave": s.name}
        fams["slave_up"].add(1 if s.up else 0, sl)
        if s.link_failures is not None:
            fams["failures"].add(s.link_failures, sl)
    if b.active_slave:
        fams["active"].add(1, {"bond": b.name, "slave": b.active_slave})
    fams["monitor"].add(b.miimon_ms / 1000, {"bond": b.name, "method": "mii"})
    fams["monitor"].add(b.arp_interval_ms / 1000, {"bond": b.name, "method": "arp"})


def _add_lacp(fams: dict[str, Family], b: Bond) -> None:
    """802.3ad only: the aggregators and the churn of each port."""
    bl = {"bond": b.name}
    ref = reference_aggregator(b)
    if ref is not None:
        fams["mismatch"].add(
            sum(
                1
                for s in b.slaves
                if s.up and s.aggregator_id is not None and s.aggregator_id != ref
            ),
            bl,
        )
    if b.partner_mac is not None:
        fams["zero_partner"].add(1 if b.partner_mac == ZERO_MAC else 0, bl)
    for s in b.slaves:
        for side, state, count in (
            ("actor", s.actor_churn_state, s.actor_churned),
            ("partner", s.partner_churn_state, s.partner_churned),
        ):
            labels = {"bond": b.name, "slave": s.name, "side": side}
            if state is not None:
                fams["churned"].add(1 if state == "churned" else 0, labels)
            if count is not None:
                fams["churns"].add(count, labels)


def collect(fs: HostFS, config: Config) -> list[Family]:
    del config
    bonds = []
    try:
        for name in bond_names(fs):
            bond = read_bond(fs, name)
            if bond is not None:
                bonds.append(bond)
    except (HostReadError, ValueError) as e:
        raise CollectorError(str(e)) from e
    return families(bonds) if bonds else []


COLLECTOR = host_collector("bonding", collect)
