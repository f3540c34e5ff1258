"""``--web.config.file``: TLS and basic authentication in the exporter-toolkit format.

The file is the one every Prometheus exporter shares (exporter-toolkit
``docs/web-configuration.md``): ``tls_server_config``, ``http_server_config``,
``basic_auth_users`` (bcrypt hashes) and ``rate_limit``. It is read strictly at start: an
unknown key, a hash that is not bcrypt or a certificate that does not load stops the
exporter with a message naming the key, rather than serving without the protection the
operator asked for.

Where Python's ``ssl`` cannot do what a toolkit option asks, the option is rejected with a
reason instead of being silently weakened: ``RequestClientCert`` and
``RequireAnyClientCert`` accept certificates without verifying them, which OpenSSL through
Python cannot express; only one curve can be set.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnsfleet.config import ConfigError, Fields, Node, read_yaml_mapping
from dnsfleet.httpserver import Request, Response, Router

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

# Successful and failed verifications are remembered, keyed by a keyed hash of user,
# stored hash and password (never the password itself). Bounded so that a client trying
# many passwords cannot grow the exporter's memory.
AUTH_CACHE_SIZE = 1024


@dataclass(frozen=True)
class TLSServerConfig:
    cert_file: str = ""
    key_file: str = ""
    cert: str = ""
    key: str = field(default="", repr=False)
    client_ca_file: str = ""
    client_ca: str = ""
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()


@dataclass(frozen=True)
class RateLimit:
    interval: float  # seconds between requests; 0 disables
    burst: int


@dataclass(frozen=True)
class WebConfig:
    source: str
    tls: TLSServerConfig | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    http2: bool = True
    rate_limit: RateLimit | None = None
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)


# --------------------------------------------------------------------------- loading


def _strings(n: Node) -> tuple[str, ...]:
    return tuple(item.string() for item in n.sequence())


def _parse_tls(node: Node, base: Path) -> TLSServerConfig:
    f = node.fields()

    def path(n: Node) -> str:
        p = Path(n.string())
        return str(p if p.is_absolute() else base / p)

    tls = TLSServerConfig(
        cert_file=f.opt("cert_file", "", path),
        key_file=f.opt("key_file", "", path),
        cert=f.opt("cert", "", lambda n: n.string()),
        key=f.opt("key", "", lambda n: n.string()),
        client_ca_file=f.opt("client_ca_file", "", path),
        client_ca=f.opt("client_ca", "", lambda n: n.string()),
        client_auth_type=f.opt(
            "client_auth_type", "NoClientCert", lambda n: n.choice(CLIENT_AUTH_TYPES)
        ),
        client_allowed_sans=f.opt("client_allowed_sans", (), _strings),
        min_version=f.opt("min_version", "TLS12", lambda n: n.choice(tuple(TLS_VERSIONS))),
        max_version=f.opt("max_version", "TLS13", lambda n: n.choice(tuple(TLS_VERSIONS))),
        cipher_suites=f.opt(
            "cipher_suites",
            (),
            lambda n: tuple(i.choice(tuple(CIPHER_SUITES)) for i in n.sequence()),
        ),
        prefer_server_cipher_suites=f.opt("prefer_server_cipher_suites", True, Node.boolean),
        curve_preferences=f.opt(
            "curve_preferences", (), lambda n: tuple(i.choice(tuple(CURVES)) for i in n.sequence())
        ),
    )
    f.done()
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


def _parse_http(node: Node) -> tuple[bool, tuple[tuple[str, str], ...]]:
    f = node.fields()
    http2 = f.opt("http2", True, Node.boolean)
    headers: list[tuple[str, str]] = []
    if f.has("headers"):
        for name, v in f.get("headers").items():
            if name not in EXTRA_HEADERS:
                raise v.error(
                    f"HTTP header {name!r} can not be configured "
                    f"(configurable: {', '.join(EXTRA_HEADERS)})"
                )
            value = v.string(allow_empty=True)
            if not value.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
                # CR or LF would let the file inject headers; the toolkit's values are ASCII.
                raise v.error(f"invalid value {value!r}: control characters or non-ASCII")
            allowed = EXTRA_HEADERS[name]
            if allowed and value not in allowed:
                raise v.error(f"invalid value {value!r}: expected one of {', '.join(allowed)}")
            if value:
                headers.append((name, value))
    else:
        f.get("headers")
    f.done()
    return http2, tuple(headers)


def _parse_users(node: Node) -> dict[str, bytes]:
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
            # Each cost step doubles the work: 31 would take days per check. The toolkit's
            # documentation uses 10-12.
            raise v.error(
                f"bcrypt cost {cost} is outside {MIN_BCRYPT_COST}-{MAX_BCRYPT_COST} "
                "(each step doubles the time of every login; use 10-12)"
            )
        users[name] = h.encode()
    return users


def _parse_rate_limit(node: Node) -> RateLimit | None:
    f = node.fields()
    interval = f.opt("interval", 0.0, lambda n: n.duration(minimum=-0.000001))
    burst = f.opt("burst", 0, lambda n: n.integer(minimum=0))
    f.done()
    if interval <= 0:
        return None
    if burst < 1:
        raise node.child("burst").error("must be at least 1 when interval is set")
    return RateLimit(interval=interval, burst=burst)


def parse(data: Any, *, source: str) -> WebConfig:
    root = Node(source, "", data if data is not None else {})
    f: Fields = root.fields()
    base = Path(source).resolve().parent
    tls_node = f.get("tls_server_config")
    tls = None
    if tls_node.value is not None and tls_node.value != {}:
        tls = _parse_tls(tls_node, base)
    no_headers: tuple[tuple[str, str], ...] = ()
    http2, headers = f.opt("http_server_config", (True, no_headers), _parse_http)
    no_users: dict[str, bytes] = {}
    users = f.opt("basic_auth_users", no_users, _parse_users)
    rate = f.opt("rate_limit", None, _parse_rate_limit)
    f.done()
    ctx = ssl_context(tls, tls_node) if tls is not None else None
    return WebConfig(
        source=source,
        tls=tls,
        basic_auth_users=users,
        headers=headers,
        http2=http2,
        rate_limit=rate,
        ssl_context=ctx,
    )


def load(path: str | Path) -> WebConfig:
    return parse(read_yaml_mapping(path), source=str(path))


def ssl_context(
    tls: TLSServerConfig, node: Node, ctx: ssl.SSLContext | None = None
) -> ssl.SSLContext:
    """Build the server context, or reconfigure ``ctx`` in place (the listening socket
    keeps the object: new connections see new certificates); every failure names the file
    and the key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER) if ctx is None else ctx
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    try:
        if tls.cert_file and tls.key_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
        else:
            _load_inline_chain(ctx, tls)
    except (OSError, ssl.SSLError) as e:
        what = tls.cert_file or "cert"
        raise node.error(
            f"cannot load certificate and key ({what}): {getattr(e, 'strerror', None) or e}"
        ) from None
    if tls.client_auth_type != "NoClientCert":
        try:
            if tls.client_ca_file:
                ctx.load_verify_locations(cafile=tls.client_ca_file)
            else:
                ctx.load_verify_locations(cadata=tls.client_ca)
        except (OSError, ssl.SSLError) as e:
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


def _load_inline_chain(ctx: ssl.SSLContext, tls: TLSServerConfig) -> None:
    # SSLContext can only load a chain from files: write the inline PEM to a private
    # directory for the duration of the call.
    with tempfile.TemporaryDirectory(prefix="dnsfleet-tls-") as d:
        cert = Path(d, "cert.pem")
        key = Path(d, "key.pem")
        if tls.cert:
            cert.write_text(tls.cert)
        if tls.key:
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(tls.key)
        ctx.load_cert_chain(tls.cert_file or str(cert), tls.key_file or str(key))


# --------------------------------------------------------------------------- serving


class BasicAuth:
    """bcrypt verification with a bounded cache, one hash at a time, off the event loop.

    A cost-10 bcrypt takes ~70 ms of CPU: without the cache every scrape would pay it.
    Unknown users are checked against a hash of a random password with the same cost, so
    response time does not tell which user names exist (as the toolkit does)."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = asyncio.Lock()
        self._dummy: bytes | None = None
        self.bcrypt_calls = 0

    def _dummy_hash(self) -> bytes:
        if self._dummy is None:
            costs = [
                int(m.group(1)) for h in self.users.values() if (m := BCRYPT_RE.match(h.decode()))
            ]
            import bcrypt  # noqa: PLC0415 - see _checkpw

            self._dummy = bcrypt.hashpw(
                secrets.token_bytes(16), bcrypt.gensalt(rounds=max(costs, default=10))
            )
        return self._dummy

    def _cache_key(self, user: str, hashed: bytes, password: bytes) -> bytes:
        msg = b"\0".join((user.encode(), hashed, password))
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    async def check(self, user: str, password: bytes) -> bool:
        hashed = self.users.get(user)
        known = hashed is not None
        if hashed is None:
            hashed = await asyncio.to_thread(self._dummy_hash)  # hashpw: off the loop
        key = self._cache_key(user, hashed, password)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit and known
        async with self._lock:
            self.bcrypt_calls += 1
            ok = await asyncio.to_thread(_checkpw, password, hashed)
        self._cache[key] = ok
        if len(self._cache) > AUTH_CACHE_SIZE:
            self._cache.popitem(last=False)
        return ok and known


def _checkpw(password: bytes, hashed: bytes) -> bool:
    # Imported on first use: exporters without basic_auth_users do not load bcrypt.
    import bcrypt  # noqa: PLC0415

    try:
        return bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD], hashed)
    except ValueError:
        return False


def parse_basic(header: str) -> tuple[str, bytes] | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


class TokenBucket:
    def __init__(self, rate: RateLimit) -> None:
        self.interval = rate.interval
        self.burst = rate.burst
        self.tokens = float(rate.burst)
        self.last = time.monotonic()

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) / self.interval)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _peer_sans(request: Request) -> set[str]:
    cert = request.peercert
    if not cert:
        return set()
    return {str(v) for _, v in cert.get("subjectAltName", ())}


def guard(
    wc: WebConfig,
) -> tuple[Callable[[Request], Awaitable[Response | None]], BasicAuth | None]:
    """Rate limit, client SAN check and basic auth, in the toolkit's order; 401 carries
    ``WWW-Authenticate: Basic``. Returns the guard and the BasicAuth it uses (or None)."""
    auth = BasicAuth(wc.basic_auth_users) if wc.basic_auth_users else None
    bucket = TokenBucket(wc.rate_limit) if wc.rate_limit else None
    allowed_sans = set(wc.tls.client_allowed_sans) if wc.tls else set()

    async def check(request: Request) -> Response | None:
        if bucket is not None and not bucket.allow():
            return Response.text(429, "Too Many Requests\n")
        if allowed_sans and not (_peer_sans(request) & allowed_sans):
            return Response.text(403, "client certificate SAN is not in client_allowed_sans\n")
        if auth is not None:
            creds = parse_basic(request.headers.get("authorization", ""))
            if creds is None or not await auth.check(*creds):
                return Response(
                    status=401, body=b"Unauthorized\n", headers=[("WWW-Authenticate", "Basic")]
                )
        return None

    return check, auth


def install(router: Router, wc: WebConfig) -> LiveWebConfig:
    """Guard every route of ``router`` and add the configured response headers; the file is
    re-read when it (or a certificate, key or CA file it names) changes."""
    return LiveWebConfig(router, wc)


def _stamp(paths: list[str]) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


class LiveWebConfig:
    """The web config in force. The exporter-toolkit reads its file on every request, so
    rotated certificates and changed passwords take effect without a restart; here a stat
    of the file and the files it names per request (a few microseconds) decides whether
    to re-read. A file that no longer loads keeps the previous settings and is logged.
    Turning TLS on or off needs a restart (the listening socket is plain or TLS)."""

    def __init__(self, router: Router, wc: WebConfig) -> None:
        self.router = router
        self.wc = wc
        self.check, self.auth = guard(wc)
        self.stamp = _stamp(self._paths(wc))
        self.reloads = 0
        router.guards.insert(0, self.guard)
        router.extra_headers.extend(wc.headers)

    @staticmethod
    def _paths(wc: WebConfig) -> list[str]:
        tls = wc.tls
        files = [tls.cert_file, tls.key_file, tls.client_ca_file] if tls else []
        return [wc.source, *(str(f) for f in files if f)]

    async def guard(self, request: Request) -> Response | None:
        stamp = _stamp(self._paths(self.wc))
        if stamp != self.stamp:
            self.stamp = stamp
            self._reload()
        return await self.check(request)

    def _reload(self) -> None:
        try:
            new = load(self.wc.source)
            if (new.tls is None) != (self.wc.tls is None):
                raise ConfigError(f"{self.wc.source}: turning TLS on or off needs a restart")
            if new.tls is not None and self.wc.ssl_context is not None:
                ssl_context(
                    new.tls, Node(new.source, "tls_server_config", None), self.wc.ssl_context
                )
        except ConfigError as e:
            log.error("web config not reloaded, keeping the previous one: %s", e)
            return
        for h in self.wc.headers:
            self.router.extra_headers.remove(h)
        self.router.extra_headers.extend(new.headers)
        self.check, self.auth = guard(new)
        self.wc = WebConfig(
            source=new.source,
            tls=new.tls,
            basic_auth_users=new.basic_auth_users,
            headers=new.headers,
            http2=new.http2,
            rate_limit=new.rate_limit,
            ssl_context=self.wc.ssl_context,
        )
        self.reloads += 1
        log.info("web config %s reloaded", new.source)
