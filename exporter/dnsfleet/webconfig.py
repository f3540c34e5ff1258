"""``--web.config.file``: TLS and basic authentication in the exporter-toolkit format.

The file is the one every Prometheus exporter shares (exporter-toolkit
``docs/web-configuration.md``): ``tls_server_config``, ``http_server_config``,
``basic_auth_users`` (bcrypt hashes) and ``rate_limit``. It is read strictly, with the
configuration package's checks table (each key's check in its dataclass field): an unknown
key, a hash that is not bcrypt, a section with no value or a certificate that does not load
stops the exporter with a message naming the key, rather than serving without the
protection the operator asked for.

It is re-read when it or a file it names changes. A new version applies whole or not at
all: a fresh TLS context for every connection accepted after it (connections accepted under
an older one are ended at their next request), or, if it does not load, the previous
settings stay, ``dnsfleet_web_config_last_reload_successful`` goes to 0 and the log says
why. An empty file is refused on reload (it is what an editor's in-place rewrite leaves for
a moment, and it would read as "no TLS, no auth").

Where Python's ``ssl`` cannot do what a toolkit option asks, the option is rejected with a
reason instead of being silently weakened: ``RequestClientCert`` and
``RequireAnyClientCert`` accept certificates without verifying them, which OpenSSL through
Python cannot express; only one curve can be set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnsfleet.config import ConfigError, Node
from dnsfleet.config.checks import (
    JSON,
    Boolean,
    Check,
    Choice,
    Duration,
    Integer,
    ListOf,
    Section,
    String,
    read_keys,
)
from dnsfleet.config.checks import key as yaml_key
from dnsfleet.config.files import FileStamp, read_regular_file, read_yaml_source
from dnsfleet.config.reader import Source

log = logging.getLogger(__name__)

# A bcrypt hash as htpasswd -B and Go's x/crypto/bcrypt write it ($2y$ and $2b$ are the same
# algorithm; $2a$ predates the 2011 fix and is still verified).
BCRYPT_RE = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
MIN_BCRYPT_COST = 4  # bcrypt's own minimum
MAX_BCRYPT_COST = 14  # ~1 s of CPU per uncached check on a current core
# bcrypt reads at most 72 bytes of the password; Go's x/crypto/bcrypt compares longer ones
# on those 72 bytes (only GenerateFromPassword refuses them), while Python's bcrypt 5 raises.
BCRYPT_MAX_PASSWORD = 72

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

# The toolkit's closed set of extra headers, with their allowed values where it fixes them.
EXTRA_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}


# --------------------------------------------------------------------------- the file


class BcryptUsers(Check):
    """``basic_auth_users``: user name -> bcrypt hash, cost within bounds."""

    def read(self, node: Node) -> dict[str, bytes]:
        users: dict[str, bytes] = {}
        for name, v in node.items():
            h = v.string()
            m = BCRYPT_RE.match(h)
            if not m:
                raise v.error(
                    "not a bcrypt hash (generate one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')"
                )
            cost = int(m.group(1))
            if not MIN_BCRYPT_COST <= cost <= MAX_BCRYPT_COST:
                # Each cost step doubles the work: 31 would take days per check. The
                # toolkit's documentation uses 10-12.
                raise v.error(
                    f"bcrypt cost {cost} is outside {MIN_BCRYPT_COST}-{MAX_BCRYPT_COST} "
                    "(each step doubles the time of every login; use 10-12)"
                )
            users[name] = h.encode()
        return users

    def schema(self) -> JSON:
        return {"type": "object", "additionalProperties": {"type": "string"}}


class ExtraHeaders(Check):
    """``http_server_config.headers``: the toolkit's closed set, values without controls."""

    def read(self, node: Node) -> tuple[tuple[str, str], ...]:
        headers: list[tuple[str, str]] = []
        for name, v in node.items():
            if name not in EXTRA_HEADERS:
                raise v.error(
                    f"HTTP header {name!r} can not be configured "
                    f"(configurable: {', '.join(EXTRA_HEADERS)})"
                )
            value = v.string(allow_empty=True)
            if not value.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
                # CR or LF would let the file inject headers; the toolkit's values are ASCII.
                raise v.error(f"invalid value {value[:80]!r}: control characters or non-ASCII")
            allowed = EXTRA_HEADERS[name]
            if allowed and value not in allowed:
                raise v.error(f"invalid value {value[:80]!r}: expected one of {', '.join(allowed)}")
            if value:
                headers.append((name, value))
        return tuple(headers)

    def schema(self) -> JSON:
        return {"type": "object", "propertyNames": {"enum": list(EXTRA_HEADERS)}}


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


@dataclass(frozen=True)
class HTTPServerConfig:
    http2: bool = field(default=True, metadata=yaml_key(Boolean(), doc="accepted; HTTP/1.1 only"))
    headers: tuple[tuple[str, str], ...] = field(default=(), metadata=yaml_key(ExtraHeaders()))


@dataclass(frozen=True)
class RateLimit:
    interval: float = field(
        default=0.0, metadata=yaml_key(Duration(minimum=-0.000001), doc="seconds between requests")
    )
    burst: int = field(default=0, metadata=yaml_key(Integer(minimum=0)))


def _read_section(cls: type[Any]) -> Callable[[Node], Any]:
    def read(node: Node) -> Any:
        f = node.fields()
        obj = cls(**read_keys(f, cls))
        f.done()
        return obj

    return read


def _parse_rate_limit(node: Node) -> RateLimit | None:
    rate: RateLimit = _read_section(RateLimit)(node)
    if rate.interval <= 0:
        return None
    if rate.burst < 1:
        raise node.child("burst").error("must be at least 1 when interval is set")
    return rate


@dataclass(frozen=True)
class WebConfig:
    source: str
    tls: TLSServerConfig | None = field(
        default=None, metadata=yaml_key(Section(TLSServerConfig), name="tls_server_config")
    )
    http: HTTPServerConfig = field(
        default_factory=HTTPServerConfig,
        metadata=yaml_key(
            Section(HTTPServerConfig, _read_section(HTTPServerConfig)), name="http_server_config"
        ),
    )
    basic_auth_users: Mapping[str, bytes] = field(
        default_factory=dict, repr=False, metadata=yaml_key(BcryptUsers(), secret=True)
    )
    rate_limit: RateLimit | None = field(
        default=None, metadata=yaml_key(Section(RateLimit, _parse_rate_limit))
    )
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    # Every file this configuration was read from, as it was when read.
    files: Mapping[str, FileStamp] = field(default_factory=dict, compare=False, repr=False)

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return self.http.headers

    @property
    def http2(self) -> bool:
        return self.http.http2


def _parse_tls(node: Node, base: Path) -> TLSServerConfig:  # noqa: C901 (not split yet (issue 25 note))
    f = node.fields()
    tls = TLSServerConfig(**read_keys(f, TLSServerConfig))
    f.done()

    def path(p: str) -> str:
        return str(base / p) if p and not Path(p).is_absolute() else p

    tls = dataclasses.replace(
        tls,
        cert_file=path(tls.cert_file),
        key_file=path(tls.key_file),
        client_ca_file=path(tls.client_ca_file),
    )
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
    return tls


def parse(
    data: Any,
    *,
    source: str,
    stamps: dict[str, FileStamp] | None = None,
    text: Source | None = None,
) -> WebConfig:
    root = Node(source, "", data if data is not None else {}, text)
    f = root.fields()
    for name in f.data:
        if f.data[name] is None:
            # `basic_auth_users:` with nothing under it is what a file cut short (or a
            # half-done edit) leaves: reading it as "no users" would turn auth off.
            raise root.child(str(name)).error("no value (a file cut short?)")
    tls = None
    if f.has("tls_server_config") and f.data["tls_server_config"] != {}:
        tls = _parse_tls(f.get("tls_server_config"), Path(source).resolve().parent)
    f.seen.add("tls_server_config")
    wc = WebConfig(source=source, tls=tls, **read_keys(f, WebConfig, skip=("tls_server_config",)))
    f.done()
    stamps = {} if stamps is None else stamps
    ctx = ssl_context(tls, root.child("tls_server_config"), stamps) if tls else None
    return dataclasses.replace(wc, ssl_context=ctx, files=dict(stamps))


def load(
    path: str | Path, *, reloading: bool = False, stamps: dict[str, FileStamp] | None = None
) -> WebConfig:
    """Read and validate the file. ``reloading``: an empty file is refused (at start it
    means plain HTTP with no auth, as in the toolkit). ``stamps`` gets the stamp of every
    file read, also when the load fails."""
    stamps = {} if stamps is None else stamps
    data, text = read_yaml_source(path, stamps=stamps)
    if reloading and not data:
        raise ConfigError(
            f"{path}: the file is empty (being rewritten?): an empty web configuration "
            "would turn TLS and authentication off; restart the exporter to do that on purpose"
        )
    try:
        return parse(data, source=str(path), stamps=stamps, text=text)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None


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


def load_stamped(path: str, stamps: dict[str, FileStamp]) -> WebConfig:
    return load(path, reloading=True, stamps=stamps)
