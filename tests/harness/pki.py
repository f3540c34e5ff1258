"""A test PKI made with openssl: root CA -> intermediate -> leaf certificates.

- ``good``: SAN DNS:dns.test, IP:127.0.0.1, IP:::1; the chain file is leaf + intermediate,
  and the intermediate (20 days) expires before the leaf (90 days): the earliest expiry in
  the chain is the intermediate's, not the leaf's.
- ``expired``: the same names, valid 30 days from 2020-01-01 (signed under faketime:
  OpenSSL 3.0 has no -not_before/-not_after).
- ``wrongname``: SAN DNS:other.test only.
- ``untrusted``: the same names, signed by a separate root the client does not trust.

P-256 keys; about two seconds on this machine.
"""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness.tools import binary

EXTENSIONS = """
[ca]
basicConstraints=critical,CA:TRUE
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash
[int]
basicConstraints=critical,CA:TRUE,pathlen:0
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
[leaf]
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:dns.test,IP:127.0.0.1,IP:::1
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
[wrong]
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:other.test
authorityKeyIdentifier=keyid
"""
SERVER_NAME = "dns.test"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path  # the trusted root

    def chain(self, name: str) -> Path:
        return self.dir / f"{name}.chain.pem"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    def not_after(self, name: str) -> float:
        """notAfter of a certificate, epoch seconds (openssl's own reading)."""
        out = _openssl(self.dir, "x509", "-in", f"{name}.crt", "-noout", "-enddate")
        return float(ssl.cert_time_to_seconds(out.strip().split("=", 1)[1]))


def _openssl(d: Path, *args: str, fake: str | None = None) -> str:
    cmd = [binary("openssl"), *args]
    if fake:
        cmd = [binary("faketime"), fake, *cmd]
    out = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr}")
    return out.stdout


def _key(d: Path, name: str) -> None:
    _openssl(
        d, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-out", f"{name}.key",
    )  # fmt: skip


def _root(d: Path, name: str, cn: str) -> None:
    _key(d, name)
    _openssl(
        d, "req", "-x509", "-new", "-key", f"{name}.key", "-subj", f"/CN={cn}", "-days", "3650",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", f"{name}.crt",
    )  # fmt: skip


def _sign(d: Path, name: str, issuer: str, *, ext: str, days: int, fake: str | None = None) -> None:
    _key(d, name)
    _openssl(d, "req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr")
    _openssl(
        d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.crt", "-CAkey",
        f"{issuer}.key", "-CAcreateserial", "-days", str(days), "-extfile", "ext.cnf",
        "-extensions", ext, "-out", f"{name}.crt",
        fake=fake,
    )  # fmt: skip


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    (d / "ext.cnf").write_text(EXTENSIONS)
    _root(d, "ca", "dnsfleet test root")
    _root(d, "rogue", "rogue root")
    _sign(d, "int", "ca", ext="int", days=20)
    _sign(d, "good", "int", ext="leaf", days=90)
    _sign(d, "expired", "int", ext="leaf", days=30, fake="2020-01-01 00:00:00")
    _sign(d, "wrongname", "int", ext="wrong", days=90)
    _sign(d, "untrusted", "rogue", ext="leaf", days=90)
    intermediate = (d / "int.crt").read_text()
    for n in ("good", "expired", "wrongname"):
        (d / f"{n}.chain.pem").write_text((d / f"{n}.crt").read_text() + intermediate)
    (d / "untrusted.chain.pem").write_text((d / "untrusted.crt").read_text())
    return Pki(d, d / "ca.crt")
