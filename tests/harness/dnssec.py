"""A signed DNSSEC lab on loopback, made with BIND 9's own tools.

Zones (ECDSAP256SHA256, a KSK and a ZSK each, made by ``dnssec-keygen``/``dnssec-signzone``):

- ``test.``: the signed parent; delegates the children below and publishes their DS.
- ``example.test.``: signed for 30 days, serial 100; ``bogus.example.test`` A has its RDATA
  changed after signing, so its RRSIG no longer verifies (named serves it as it is). A
  second copy with serial 99 and the same keys plays a secondary that missed a transfer.
- ``soon.test.``: RRSIGs expire two hours from now.
- ``expired.test.``: RRSIGs expired two days ago, with a ten-day validity: beyond every
  validator's clock-skew allowance (unbound accepts up to 10% of the validity period, at
  most a day, past expiry).
- ``dsmismatch.test.``: signed fine, but the parent publishes the DS of a key it lacks.
- ``rollover.test.``: in a rollover, every RRset signed twice by two key pairs, A's
  signatures ending in two hours, B's in thirty days; the parent has the DS of both KSKs.
  Validators accept it until B's signatures end.
- ``ksknosign.test.``: publishes a second KSK that signs nothing; the parent's DS is that
  key's only, so validators cannot authenticate the DNSKEY set.
- ``unsigned.test.``: unsigned, its DS left at the parent: bogus to validators.

``make_zones`` takes about a second; named loads a signed file without checking it.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.harness.servers import Named, Unbound, wait_dns
from tests.harness.tools import binary

ALGORITHM = "ECDSAP256SHA256"
CHILDREN = ("example", "soon", "expired", "dsmismatch", "rollover", "ksknosign", "unsigned")


@dataclass(frozen=True)
class SignedZones:
    dir: Path
    files: dict[str, Path]  # zone (no trailing dot) -> signed file; "example.test.b" serial 99
    trust_anchor: Path  # test.'s KSK as a DS record (unbound trust-anchor-file)
    soon_expiry: float  # epoch seconds the soon.test signatures end
    rollover_expiries: tuple[float, float]  # rollover.test's two signature ends, A's and B's


def _run(*cmd: str, cwd: Path) -> str:
    out = subprocess.run(
        [binary(cmd[0]), *cmd[1:]], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr}")
    return out.stdout


def _keys(d: Path, zone: str, keydir: str = "keys", *, zsk: bool = True) -> None:
    (d / keydir).mkdir(exist_ok=True)
    _run("dnssec-keygen", "-q", "-K", keydir, "-a", ALGORITHM, "-f", "KSK", zone, cwd=d)
    if zsk:
        _run("dnssec-keygen", "-q", "-K", keydir, "-a", ALGORITHM, zone, cwd=d)


def _ksk(d: Path, zone: str, keydir: str = "keys") -> Path:
    return next(k for k in (d / keydir).glob(f"K{zone}.+*.key") if " DNSKEY 257 " in k.read_text())


def _includes(d: Path, zone: str, *keydirs: str) -> str:
    """$INCLUDE lines publishing every key of ``zone`` in ``keydirs`` (signing or not:
    dnssec-signzone signs only with the keys of its -K directory)."""
    return "".join(
        f"$INCLUDE {k}\n" for kd in keydirs for k in sorted((d / kd).glob(f"K{zone}.+*.key"))
    )


def _child(d: Path, zone: str, serial: int, extra: str = "") -> Path:
    f = d / f"{zone}.zone"
    f.write_text(
        f"$ORIGIN {zone}.\n$TTL 300\n"
        f"@ IN SOA ns1.{zone}. hostmaster.{zone}. {serial} 3600 600 86400 300\n"
        f"  IN NS ns1.{zone}.\nns1 IN A 127.0.0.1\nwww IN A 192.0.2.10\n{extra}\n"
    )
    return f


def _sign(d: Path, zone: str, src: Path, out: str, *extra: str) -> Path:
    # -S adds the DNSKEYs, -d . writes dsset-<zone>. for the parent, -N keep the serial.
    _run(
        "dnssec-signzone", "-q", "-S", "-K", "keys", "-d", ".", "-N", "keep", "-o", zone,
        "-f", out, *extra, src.name, cwd=d,
    )  # fmt: skip
    return d / out


def _stamp(t: datetime) -> str:
    return t.strftime("%Y%m%d%H%M%S")


def make_zones(d: Path) -> SignedZones:
    d.mkdir(parents=True, exist_ok=True)
    for z in ("test", *(f"{c}.test" for c in CHILDREN)):
        _keys(d, z)
    _keys(d, "dsmismatch.test", "decoy", zsk=False)
    _keys(d, "rollover.test", "rollover-b")
    _keys(d, "ksknosign.test", "idle", zsk=False)
    files: dict[str, Path] = {}
    ex = _child(d, "example.test", 100, "bogus IN A 192.0.2.253")
    files["example.test"] = _sign(d, "example.test", ex, "example.test.signed")
    signed = files["example.test"].read_text()
    assert "192.0.2.253" in signed
    files["example.test"].write_text(signed.replace("192.0.2.253", "192.0.2.254"))
    exb = d / "example.test.b.zone"
    exb.write_text(ex.read_text().replace(" 100 3600 600", " 99 3600 600"))
    files["example.test.b"] = _sign(d, "example.test", exb, "example.test.b.signed")
    soon_end = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    files["soon.test"] = _sign(
        d, "soon.test", _child(d, "soon.test", 1), "soon.test.signed", "-e", _stamp(soon_end)
    )
    now = datetime.now(UTC)
    # -P: the post-signing verification would refuse signatures that are already expired.
    files["expired.test"] = _sign(
        d, "expired.test", _child(d, "expired.test", 1), "expired.test.signed", "-P",
        "-s", _stamp(now - timedelta(days=12)), "-e", _stamp(now - timedelta(days=2)),
    )  # fmt: skip
    files["dsmismatch.test"] = _sign(
        d, "dsmismatch.test", _child(d, "dsmismatch.test", 1), "dsmismatch.test.signed"
    )
    decoy = next((d / "decoy").glob("Kdsmismatch.test.*.key"))
    (d / "dsset-dsmismatch.test.").write_text(_run("dnssec-dsfromkey", "-2", str(decoy), cwd=d))
    rollover = _rollover(d, now)
    ksknosign = _child(d, "ksknosign.test", 1, _includes(d, "ksknosign.test", "idle"))
    files["ksknosign.test"] = _sign(d, "ksknosign.test", ksknosign, "ksknosign.test.signed")
    idle = _ksk(d, "ksknosign.test", "idle")
    (d / "dsset-ksknosign.test.").write_text(_run("dnssec-dsfromkey", "-2", str(idle), cwd=d))
    files["rollover.test"] = rollover.file
    files["unsigned.test"] = _child(d, "unsigned.test", 1)
    unsigned_ksk = _ksk(d, "unsigned.test")
    (d / "dsset-unsigned.test.").write_text(
        _run("dnssec-dsfromkey", "-2", str(unsigned_ksk), cwd=d)
    )
    parent = (
        "$ORIGIN test.\n$TTL 300\n@ IN SOA ns1.test. hostmaster.test. 1 3600 600 86400 300\n"
        "  IN NS ns1.test.\nns1 IN A 127.0.0.1\n"
    )
    for c in CHILDREN:
        parent += f"{c} IN NS ns1.{c}.test.\nns1.{c} IN A 127.0.0.1\n"
        parent += (d / f"dsset-{c}.test.").read_text()
    (d / "test.zone").write_text(parent)
    files["test"] = _sign(d, "test", d / "test.zone", "test.signed")
    ksk = _ksk(d, "test")
    anchor = d / "trust-anchor.ds"
    anchor.write_text(_run("dnssec-dsfromkey", "-2", str(ksk), cwd=d))
    return SignedZones(d, files, anchor, soon_end.timestamp(), rollover.ends)


@dataclass(frozen=True)
class _Rollover:
    file: Path
    ends: tuple[float, float]


def _rollover(d: Path, now: datetime) -> _Rollover:
    """rollover.test signed by key pair A (keys/) until two hours from now and by B
    (rollover-b/) until thirty days from now: A's signed file plus B's RRSIGs, one record
    per line (-O full) so they can be merged."""
    zone = "rollover.test"
    src = _child(d, zone, 1, _includes(d, zone, "keys", "rollover-b"))
    start = now.replace(microsecond=0) - timedelta(hours=1)
    ends = (start + timedelta(hours=3), start + timedelta(days=30, hours=1))
    signed = []
    for keydir, end, out in (("keys", ends[0], "a"), ("rollover-b", ends[1], "b")):
        _run(
            "dnssec-signzone", "-q", "-S", "-K", keydir, "-N", "keep", "-o", zone, "-O", "full",
            "-s", _stamp(start), "-e", _stamp(end), "-f", f"{zone}.{out}.signed", src.name,
            cwd=d,
        )  # fmt: skip
        signed.append((d / f"{zone}.{out}.signed").read_text().splitlines())
    b_sigs = [line for line in signed[1] if line.split()[3:4] == ["RRSIG"]]
    merged = d / f"{zone}.signed"
    merged.write_text("\n".join([*signed[0], *b_sigs]) + "\n")
    both = [_ksk(d, zone, kd) for kd in ("keys", "rollover-b")]
    (d / f"dsset-{zone}.").write_text(
        "".join(_run("dnssec-dsfromkey", "-2", str(k), cwd=d) for k in both)
    )
    return _Rollover(merged, (ends[0].timestamp(), ends[1].timestamp()))


@dataclass
class SignedNamed(Named):
    """named serving signed zone files as they are (authoritative only, no recursion)."""

    zone_files: dict[str, Path] = field(default_factory=dict)  # zone -> file

    def write_config(self) -> Path:
        conf = super().write_config()
        stanzas = "".join(
            f'zone "{z}." {{ type primary; file "{f}"; }};\n' for z, f in self.zone_files.items()
        )
        conf.write_text(conf.read_text() + stanzas)
        return conf

    def start(self) -> SignedNamed:
        super().start()
        wait_dns(self.host, self.port, next(iter(self.zone_files)), "SOA")
        return self


def validating_unbound(workdir: Path, zones: SignedZones, authority: str) -> Unbound:
    """unbound validating ``test.`` against its trust anchor, with Extended DNS Errors on,
    resolving ``test.`` through ``authority`` (host:port) only. A later ``module-config``
    line overrides the harness's non-validating one."""
    host, port = authority.rsplit(":", 1)
    return Unbound(
        workdir,
        stubs={"test.": f"{host}@{port}"},
        extra_server=(
            '  module-config: "validator iterator"\n'
            f'  trust-anchor-file: "{zones.trust_anchor}"\n'
            "  ede: yes\n"
            "  val-log-level: 2\n"
            # Each bogus name is asked once per test run, but keep verdicts from being
            # cached answers (unbound 1.17 drops the specific EDE code on those).
            "  val-bogus-ttl: 0\n"
        ),
    )
