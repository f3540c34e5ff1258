"""The encrypted probes' client context follows the CA file: after the file is replaced and
the configuration reloaded (a new Module), the context trusts the new CA, however often it
is rotated. Keyed on the module's identity, a new Module at the address of a collected one
got the old context: 10 or 11 reloads of 40 trusted a CA file that was gone."""

from __future__ import annotations

import gc
import os
import ssl
from pathlib import Path

import pytest
import trustme

from dnsfleet.config import Module
from dnsfleet.probes.tlsconn import context_for

pytestmark = pytest.mark.unit

ROTATIONS = 40


def serials(ctx: ssl.SSLContext) -> set[int]:
    return {int(str(c["serialNumber"]), 16) for c in ctx.get_ca_certs()}


def test_each_rotation_is_trusted_after_reload(tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    cas = [trustme.CA() for _ in range(3)]
    wanted = [
        serials(ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())) for ca in cas
    ]
    stale = []
    for i in range(ROTATIONS):
        ca = i % len(cas)
        # Replaced as rotations are done (a new file renamed over the old), with a distinct
        # modification time: rotations are seconds apart, not within one clock tick.
        new = tmp_path / "ca.pem.new"
        cas[ca].cert_pem.write_to_path(str(new))
        os.utime(new, ns=(1_700_000_000_000_000_000 + i * 10**9,) * 2)
        new.rename(path)
        module = Module(name="dot", transport="tls", tls_ca_file=str(path))  # the reload
        got = serials(context_for(module, ("dot",)))
        if got != wanted[ca]:
            stale.append(i)
        del module
        gc.collect()
    assert stale == []


def test_alpn_is_part_of_the_key(tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    module = Module(name="doh", transport="https", tls_ca_file=str(path))
    assert context_for(module, ("h2",)) is context_for(module, ("h2",))
    assert context_for(module, ("h2",)) is not context_for(module, ())
