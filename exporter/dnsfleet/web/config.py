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

``tls_server_config``, its rules and the TLS contexts are in ``web.tls``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnsfleet.config import ConfigError, Node
from dnsfleet.config.checks import (
    JSON,
    Boolean,
    Check,
    Duration,
    Integer,
    Section,
    read_keys,
)
from dnsfleet.config.checks import key as yaml_key
from dnsfleet.config.files import FileStamp, read_yaml_source
from dnsfleet.config.reader import Source
from dnsfleet.web.tls import TLSServerConfig, read_tls, resolved, ssl_context

log = logging.getLogger(__name__)

# A bcrypt hash as htpasswd -B and Go's x/crypto/bcrypt write it ($2y$ and $2b$ are the same
# algorithm; $2a$ predates the 2011 fix and is still verified).
BCRYPT_RE = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
MIN_BCRYPT_COST = 4  # bcrypt's own minimum
MAX_BCRYPT_COST = 14  # ~1 s of CPU per uncached check on a current core
# bcrypt reads at most 72 bytes of the password; Go's x/crypto/bcrypt compares longer ones
# on those 72 bytes (only GenerateFromPassword refuses them), while Python's bcrypt 5 raises.
BCRYPT_MAX_PASSWORD = 72

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
        default=None,
        metadata=yaml_key(Section(TLSServerConfig, read_tls), name="tls_server_config"),
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
    wc = WebConfig(source=source, **read_keys(f, WebConfig))
    f.done()
    stamps = {} if stamps is None else stamps
    if wc.tls is None:
        return dataclasses.replace(wc, files=dict(stamps))
    tls = resolved(wc.tls, Path(source).resolve().parent)
    ctx = ssl_context(tls, root.child("tls_server_config"), stamps)
    return dataclasses.replace(wc, tls=tls, ssl_context=ctx, files=dict(stamps))


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


def load_stamped(path: str, stamps: dict[str, FileStamp]) -> WebConfig:
    return load(path, reloading=True, stamps=stamps)
