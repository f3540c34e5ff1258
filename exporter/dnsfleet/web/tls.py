"""``tls_server_config`` of ``--web.config.file`` (exporter-toolkit
``docs/web-configuration.md``): its keys in Go's vocabulary (TLS versions, cipher suite and
curve names), the rules between them, and the server context built from them. Every file
it names is read through the one bounded reader (regular files only), and a private key
never touches a disk.

Where Python's ``ssl`` cannot do what a toolkit option asks, the option is rejected with a
reason instead of being silently weakened: ``RequestClientCert`` and
``RequireAnyClientCert`` accept certificates without verifying them, which OpenSSL through
Python cannot express; only one curve can be set.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from dnsfleet.config import ConfigError, Node
from dnsfleet.config.checks import Boolean, Choice, ListOf, String, read_keys
from dnsfleet.config.checks import key as yaml_key
from dnsfleet.config.files import FileStamp, read_regular_file

TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's crypto/tls names (the toolkit's vocabulary) -> OpenSSL names. TLS 1.3 suites are not
# configurable in Go either.
CIPHER_SUITES: dict[str, str] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
}

CURVES: dict[str, str] = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")


@dataclass(frozen=True)
class TLSServerConfig:
    cert_file: str = field(default="", metadata=yaml_key(String()))
    key_file: str = field(default="", metadata=yaml_key(String()))
    cert: str = field(default="", metadata=yaml_key(String(), doc="inline PEM"))
    key: str = field(default="", repr=False, metadata=yaml_key(String(), secret=True))
    client_ca_file: str = field(default="", metadata=yaml_key(String()))
    client_ca: str = field(default="", metadata=yaml_key(String(), doc="inline PEM"))
    client_auth_type: str = field(
        default="NoClientCert", metadata=yaml_key(Choice(CLIENT_AUTH_TYPES))
    )
    client_allowed_sans: tuple[str, ...] = field(default=(), metadata=yaml_key(ListOf(String())))
    min_version: str = field(default="TLS12", metadata=yaml_key(Choice(tuple(TLS_VERSIONS))))
    max_version: str = field(default="TLS13", metadata=yaml_key(Choice(tuple(TLS_VERSIONS))))
    cipher_suites: tuple[str, ...] = field(
        default=(), metadata=yaml_key(ListOf(Choice(tuple(CIPHER_SUITES))))
    )
    prefer_server_cipher_suites: bool = field(default=True, metadata=yaml_key(Boolean()))
    curve_preferences: tuple[str, ...] = field(
        default=(), metadata=yaml_key(ListOf(Choice(tuple(CURVES))))
    )


def read_tls(node: Node) -> TLSServerConfig | None:
    """``tls_server_config`` through the checks table, then the rules between its keys;
    an empty mapping is plain HTTP. Relative file names stay as written (:func:`resolved`)."""
    if node.value == {}:
        return None
    f = node.fields()
    tls = TLSServerConfig(**read_keys(f, TLSServerConfig))
    f.done()
    for rule in (_sources_given_once, _client_auth_verifies, _versions_supported):
        rule(tls, node)
    return tls


def resolved(tls: TLSServerConfig, base: Path) -> TLSServerConfig:
    """``tls`` with its relative file names taken relative to ``base``, the directory of
    the web configuration file (as the toolkit reads them)."""

    def path(p: str) -> str:
        return str(base / p) if p and not Path(p).is_absolute() else p

    return dataclasses.replace(
        tls,
        cert_file=path(tls.cert_file),
        key_file=path(tls.key_file),
        client_ca_file=path(tls.client_ca_file),
    )


def _sources_given_once(tls: TLSServerConfig, node: Node) -> None:
    """A certificate, a key and a client CA each come from a file or inline, not both."""
    if tls.cert_file and tls.cert:
        raise node.error("cert and cert_file are mutually exclusive")
    if tls.key_file and tls.key:
        raise node.error("key and key_file are mutually exclusive")
    if tls.client_ca_file and tls.client_ca:
        raise node.error("client_ca and client_ca_file are mutually exclusive")
    if not (tls.cert_file or tls.cert):
        raise node.error("missing cert_file")
    if not (tls.key_file or tls.key):
        raise node.error("missing key_file")


def _client_auth_verifies(tls: TLSServerConfig, node: Node) -> None:
    """Client certificates are verified against a CA, or not asked for at all."""
    if tls.client_auth_type in _UNVERIFIED_CLIENT_AUTH:
        raise node.child("client_auth_type").error(
            f"{tls.client_auth_type} accepts client certificates without verifying them; "
            "not supported, use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) "
            "with client_ca_file"
        )
    verifying = tls.client_auth_type != "NoClientCert"
    if verifying and not (tls.client_ca_file or tls.client_ca):
        raise node.error(f"client_auth_type {tls.client_auth_type} needs client_ca_file")
    if (tls.client_ca_file or tls.client_ca) and not verifying:
        raise node.error(
            "client CA configured but client_auth_type is NoClientCert: "
            "client certificates would not be checked"
        )
    if tls.client_allowed_sans and tls.client_auth_type != "RequireAndVerifyClientCert":
        raise node.child("client_allowed_sans").error(
            "needs client_auth_type RequireAndVerifyClientCert"
        )


def _versions_supported(tls: TLSServerConfig, node: Node) -> None:
    """Versions and curves this system's OpenSSL, through Python, can honour."""
    if tls.min_version in ("TLS10", "TLS11"):
        # Refused rather than half-working: OpenSSL 3 at its default security level (Debian
        # 12) rejects TLS 1.0/1.1 handshakes whatever the minimum says, and RFC 8996
        # deprecates both.
        raise node.child("min_version").error(
            f"{tls.min_version} is not supported: TLS 1.0 and 1.1 are deprecated (RFC 8996) "
            "and disabled by this system's OpenSSL; use TLS12"
        )
    if TLS_VERSIONS[tls.min_version] > TLS_VERSIONS[tls.max_version]:
        raise node.error(f"min_version {tls.min_version} is above max_version {tls.max_version}")
    if len(tls.curve_preferences) > 1:
        raise node.child("curve_preferences").error(
            "Python's ssl module can set one curve only: list a single curve"
        )


def ssl_context(
    tls: TLSServerConfig, node: Node, stamps: dict[str, FileStamp] | None = None
) -> ssl.SSLContext:
    """A new server context for ``tls``, every file read through the one bounded reader
    (regular files only: a FIFO or /dev/urandom named as a certificate would hang OpenSSL's
    reader); every failure names the file and the key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    what = tls.cert_file or "cert"
    cert = _pem(tls.cert_file, tls.cert, node.child("cert_file"), stamps)
    key_pem = _pem(tls.key_file, tls.key, node.child("key_file"), stamps)
    try:
        with _in_memory_file(cert) as cert_path, _in_memory_file(key_pem) as key_path:
            ctx.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as e:
        raise node.error(
            f"cannot load certificate and key ({what}): {getattr(e, 'strerror', None) or e}"
        ) from None
    if tls.client_auth_type != "NoClientCert":
        ca = _pem(tls.client_ca_file, tls.client_ca, node.child("client_ca_file"), stamps)
        try:
            ctx.load_verify_locations(cadata=ca.decode("ascii"))
        except (OSError, ssl.SSLError, UnicodeDecodeError, ValueError) as e:
            raise node.child("client_ca_file").error(
                f"cannot load client CA: {getattr(e, 'strerror', None) or e}"
            ) from None
        ctx.verify_mode = (
            ssl.CERT_REQUIRED
            if tls.client_auth_type == "RequireAndVerifyClientCert"
            else ssl.CERT_OPTIONAL
        )
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(CIPHER_SUITES[c] for c in tls.cipher_suites))
        except ssl.SSLError as e:
            raise node.child("cipher_suites").error(f"rejected by OpenSSL: {e}") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        ctx.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
    return ctx


MAX_PEM_BYTES = 1024 * 1024


def _pem(path: str, inline: str, node: Node, stamps: dict[str, FileStamp] | None) -> bytes:
    if not path:
        return inline.encode()
    try:
        return read_regular_file(path, limit=MAX_PEM_BYTES, stamps=stamps)
    except ConfigError as e:
        raise node.error(str(e)) from None


@contextlib.contextmanager
def _in_memory_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open that holds ``data`` and never touches a disk: an anonymous
    memory file (memfd_create(2)) opened by its /dev/fd entry. SSLContext.load_cert_chain
    reads only from paths, and a private key must not be copied to /tmp."""
    fd = os.memfd_create("dnsfleet-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/dev/fd/{fd}"
    finally:
        os.close(fd)


def hand_over(loop: asyncio.AbstractEventLoop, raw: asyncio.Transport, early: bytes) -> bytes:
    """Give the bytes a connection read before its TLS handshake began (the ClientHello) to
    the TLS protocol that ``loop.start_tls`` puts on ``raw``: call this just before it.

    uvloop starts reading a connection once ``connection_made`` returns, whatever that
    paused, so the ClientHello can reach the HTTP protocol first. ``start_tls`` sets its
    protocol on the transport before its first wait and schedules that protocol's
    ``connection_made``; the bytes, scheduled here first, wait in its incoming buffer until
    the handshake starts there, as bytes read early do on asyncio's loop. Returns what
    is left for the HTTP protocol: nothing."""

    def feed() -> None:
        # asyncio's SSLProtocol and uvloop's are buffered protocols (uvloop's not by type).
        proto = cast(asyncio.BufferedProtocol, raw.get_protocol())
        if raw.is_closing() or not hasattr(proto, "buffer_updated"):
            return
        view = memoryview(early)
        while view:
            buf = memoryview(proto.get_buffer(len(view)))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            proto.buffer_updated(n)
            view = view[n:]

    if early:
        loop.call_soon(feed)
    return b""
