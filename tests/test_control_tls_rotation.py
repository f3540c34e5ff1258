"""unbound's remote-control client context follows its files: when unbound-control-setup is
re-run (a new server certificate, a new client pair written over the old paths), the next
scrape trusts and presents what the files hold now. Keyed on the paths, the first pair read
was kept until the exporter restarted, and every scrape after a rotation failed the
handshake."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trustme

from dnsfleet.resolverstats import _tls_context

pytestmark = pytest.mark.unit

ROTATIONS = 12


def serials(ctx: ssl.SSLContext) -> set[int]:
    return {int(str(c["serialNumber"]), 16) for c in ctx.get_ca_certs()}


def replace(path: Path, data: bytes, i: int) -> None:
    """Written as unbound-control-setup and config management do: a new file renamed over
    the old one, with a modification time of its own (rotations are not one clock tick
    apart)."""
    new = path.with_suffix(".new")
    new.write_bytes(data)
    os.utime(new, ns=(1_700_000_000_000_000_000 + i * 10**9,) * 2)
    new.rename(path)


def test_each_rotation_is_the_context_of_the_files_now(tmp_path: Path) -> None:
    server, cert, key = tmp_path / "server.pem", tmp_path / "control.pem", tmp_path / "control.key"
    cas = [trustme.CA() for _ in range(3)]
    wanted = [
        serials(ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())) for ca in cas
    ]
    stale = []
    for i in range(ROTATIONS):
        ca = cas[i % len(cas)]
        client = ca.issue_cert("unbound-control")
        replace(server, ca.cert_pem.bytes(), i)
        replace(cert, client.cert_chain_pems[0].bytes(), i)
        replace(key, client.private_key_pem.bytes(), i)
        ctx = _tls_context(str(server), str(cert), str(key))
        if serials(ctx) != wanted[i % len(cas)]:
            stale.append(i)
    assert stale == []


def test_a_vanished_file_is_an_oserror_for_the_caller(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("unbound-control")
    server, cert, key = tmp_path / "server.pem", tmp_path / "control.pem", tmp_path / "control.key"
    server.write_bytes(ca.cert_pem.bytes())
    cert.write_bytes(client.cert_chain_pems[0].bytes())
    key.write_bytes(client.private_key_pem.bytes())
    _tls_context(str(server), str(cert), str(key))
    server.unlink()
    with pytest.raises(OSError):
        _tls_context(str(server), str(cert), str(key))
