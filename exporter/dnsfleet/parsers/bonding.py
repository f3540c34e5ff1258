"""Linux bonding state: /proc/net/bonding/<bond> and /sys/class/net/<bond>/bonding/*.

The proc file (``drivers/net/bonding/bond_procfs.c``) is the richer source: it has the
802.3ad churn state and the partner's LACP details. sysfs is the fallback when the proc file
is absent, e.g. a kernel built without procfs or a /proc mounted from another network
namespace. Both produce the same :class:`Bond`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# bond_mode_name() in drivers/net/bonding/bond_main.c -> the sysfs/iproute2 name.
PROC_MODE_NAMES = {
    "load balancing (round-robin)": "balance-rr",
    "fault-tolerance (active-backup)": "active-backup",
    "load balancing (xor)": "balance-xor",
    "fault-tolerance (broadcast)": "broadcast",
    "IEEE 802.3ad Dynamic link aggregation": "802.3ad",
    "transmit load balancing": "balance-tlb",
    "adaptive load balancing": "balance-alb",
}
MODES = (
    "balance-rr",
    "active-backup",
    "balance-xor",
    "broadcast",
    "802.3ad",
    "balance-tlb",
    "balance-alb",
)
ZERO_MAC = "00:00:00:00:00:00"


@dataclass(frozen=True, slots=True)
class BondSlave:
    name: str
    mii_status: str  # "up", "down", "going down", "going back"
    link_failures: int | None = None
    # 802.3ad only
    aggregator_id: int | None = None
    actor_churn_state: str | None = None  # "none", "churned", "monitoring"
    partner_churn_state: str | None = None
    actor_churned: int | None = None
    partner_churned: int | None = None
    partner_system_mac: str | None = None

    @property
    def up(self) -> bool:
        return self.mii_status == "up"


@dataclass(frozen=True, slots=True)
class Bond:
    name: str
    mode: str  # one of MODES, "unknown" when sysfs lacks it
    slaves: tuple[BondSlave, ...]
    active_slave: str | None = None
    miimon_ms: int = 0
    arp_interval_ms: int = 0
    arp_targets: tuple[str, ...] = ()
    # 802.3ad: the active aggregator
    aggregator_id: int | None = None
    partner_mac: str | None = None

    @property
    def slaves_up(self) -> int:
        return sum(1 for s in self.slaves if s.up)


def _int(value: str, what: str) -> int:
    v = value.strip()
    if not v.lstrip("-").isdigit():
        raise ValueError(f"{what}: expected an integer, got {v[:40]!r}")
    return int(v)


def _opt_id(value: str, what: str) -> int | None:
    # An unattached 802.3ad port prints "Aggregator ID: N/A".
    return None if value.strip() in ("N/A", "") else _int(value, what)


def mode_from_proc(text: str) -> str:
    # "fault-tolerance (active-backup) (fail_over_mac active)": known names are prefixes.
    for proc_name, mode in PROC_MODE_NAMES.items():
        if text.startswith(proc_name):
            return mode
    raise ValueError(f"unknown bonding mode {text[:60]!r}")


def parse_bond_proc(name: str, text: str) -> Bond:  # noqa: C901, PLR0912, PLR0915 (one pass over the file's line grammar)
    what = f"bonding/{name}"
    mode: str | None = None
    active: str | None = None
    miimon = 0
    arp_interval = 0
    arp_targets: tuple[str, ...] = ()
    agg_id: int | None = None
    partner_mac: str | None = None
    slaves: list[dict[str, str]] = []
    section = "master"  # master | aggregator | slave | actor | partner
    for raw in text.splitlines():
        if not raw.strip():
            continue
        key, sep, value = raw.partition(":")
        key = key.strip()
        value = value.strip()
        if key == "Slave Interface":
            slaves.append({"name": value})
            section = "slave"
            continue
        if section in ("slave", "actor", "partner"):
            if key == "details actor lacp pdu":
                section = "actor"
            elif key == "details partner lacp pdu":
                section = "partner"
            elif section == "partner" and key == "system mac address":
                slaves[-1]["partner_mac"] = value
            elif section == "slave" or not raw.startswith((" ", "\t")):
                section = "slave"
                slaves[-1].setdefault(key, value)
            continue
        if not sep:
            if key == "802.3ad info":
                continue
            if not key.startswith("Ethernet Channel Bonding Driver"):
                raise ValueError(f"{what}: unexpected line {raw[:60]!r}")
            continue
        if key == "Bonding Mode":
            mode = mode_from_proc(value)
        elif key == "Currently Active Slave":
            active = None if value == "None" else value
        elif key == "MII Polling Interval (ms)":
            miimon = _int(value, f"{what}: {key}")
        elif key == "ARP Polling Interval (ms)":
            arp_interval = _int(value, f"{what}: {key}")
        elif key.startswith("ARP IP target/s"):
            arp_targets = tuple(t.strip() for t in value.split(",") if t.strip())
        elif key == "Active Aggregator Info":
            section = "aggregator"
        elif section == "aggregator" and key == "Aggregator ID":
            agg_id = _opt_id(value, f"{what}: {key}")
        elif section == "aggregator" and key == "Partner Mac Address":
            partner_mac = value.lower()
    if mode is None:
        raise ValueError(f"{what}: no 'Bonding Mode' line")
    out = []
    for s in slaves:
        sname = s["name"]
        swhat = f"{what}: slave {sname}"
        if "MII Status" not in s:
            raise ValueError(f"{swhat}: no 'MII Status' line")

        def opt_int(key: str, s: dict[str, str] = s, swhat: str = swhat) -> int | None:
            return _int(s[key], f"{swhat}: {key}") if key in s else None

        out.append(
            BondSlave(
                name=sname,
                mii_status=s["MII Status"],
                link_failures=opt_int("Link Failure Count"),
                aggregator_id=(
                    _opt_id(s["Aggregator ID"], f"{swhat}: Aggregator ID")
                    if "Aggregator ID" in s
                    else None
                ),
                actor_churn_state=s.get("Actor Churn State"),
                partner_churn_state=s.get("Partner Churn State"),
                actor_churned=opt_int("Actor Churned Count"),
                partner_churned=opt_int("Partner Churned Count"),
                partner_system_mac=s["partner_mac"].lower() if "partner_mac" in s else None,
            )
        )
    return Bond(
        name=name,
        mode=mode,
        slaves=tuple(out),
        active_slave=active,
        miimon_ms=miimon,
        arp_interval_ms=arp_interval,
        arp_targets=arp_targets,
        aggregator_id=agg_id,
        partner_mac=partner_mac,
    )


def parse_bond_mode(text: str) -> str:
    """sysfs ``bonding/mode``: ``"802.3ad 4"``, ``"active-backup 1"``."""
    parts = text.split()
    if len(parts) != 2 or parts[0] not in MODES or not parts[1].isdigit():
        raise ValueError(f"bonding/mode: unexpected {text.strip()[:60]!r}")
    return parts[0]


def bond_from_sysfs(
    name: str, *, bonding: Mapping[str, str | None], slaves: Mapping[str, Mapping[str, str | None]]
) -> Bond:
    """Build a :class:`Bond` from the text of ``/sys/class/net/<bond>/bonding/<file>``
    (``bonding``) and ``.../lower_<slave>/bonding_slave/<file>`` (``slaves``, in the order of
    ``bonding/slaves``). Missing files are None."""
    what = f"{name}/bonding"
    mode_text = bonding.get("mode")
    # node_exporter's fixture trees (and some minimal sysfs copies) lack bonding/mode.
    mode = parse_bond_mode(mode_text) if mode_text else "unknown"

    def num(key: str) -> int:
        v = bonding.get(key)
        return _int(v, f"{what}/{key}") if v is not None and v.strip() else 0

    active = (bonding.get("active_slave") or "").strip() or None
    agg = (bonding.get("ad_aggregator") or "").strip()
    partner = (bonding.get("ad_partner_mac") or "").strip().lower() or None
    out = []
    for sname, files in slaves.items():
        swhat = f"{name}/lower_{sname}/bonding_slave"
        status = (files.get("mii_status") or "").strip()
        if not status:
            raise ValueError(f"{swhat}/mii_status: missing or empty")
        lf = (files.get("link_failure_count") or "").strip()
        sagg = (files.get("ad_aggregator_id") or "").strip()
        out.append(
            BondSlave(
                name=sname,
                mii_status=status,
                link_failures=_int(lf, f"{swhat}/link_failure_count") if lf else None,
                aggregator_id=(
                    _int(sagg, f"{swhat}/ad_aggregator_id") if sagg and mode == "802.3ad" else None
                ),
            )
        )
    return Bond(
        name=name,
        mode=mode,
        slaves=tuple(out),
        active_slave=active,
        miimon_ms=num("miimon"),
        arp_interval_ms=num("arp_interval"),
        arp_targets=tuple((bonding.get("arp_ip_target") or "").split()),
        aggregator_id=_int(agg, f"{what}/ad_aggregator") if agg else None,
        partner_mac=partner,
    )
