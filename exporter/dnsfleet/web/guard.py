"""Serving under ``--web.config.file`` (web/config.py reads it): the guard every request
passes (rate limit, client certificate SANs, basic auth with remembered bcrypt verdicts, in
the exporter-toolkit's order), and :class:`LiveWebConfig`, the configuration in force, re-read
when the file or a file it names changes, which is also the listener's TLS source.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

from dnsfleet.config import ConfigError
from dnsfleet.config.files import FileStamp, file_stamp
from dnsfleet.selfmetrics import ReloadStatus
from dnsfleet.web.config import (
    BCRYPT_MAX_PASSWORD,
    BCRYPT_RE,
    RateLimit,
    WebConfig,
    load_stamped,
)
from dnsfleet.web.routes import Request, Response, Router

log = logging.getLogger(__name__)

# Successful and failed verifications are remembered, keyed by a keyed hash of user,
# stored hash and password (never the password itself). Bounded so that a client trying
# many passwords cannot grow the exporter's memory.
AUTH_CACHE_SIZE = 1024


class Verdicts:
    """Remembered bcrypt verdicts, keyed by an HMAC of (user, stored hash, password) under a
    per-process key (never the password itself), bounded so that a client trying many
    passwords cannot grow memory. Kept across web-config reloads: a key names the stored
    hash, so a changed hash can never match an old verdict."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self.entries: OrderedDict[bytes, bool] = OrderedDict()

    def key(self, user: str, hashed: bytes, password: bytes) -> bytes:
        msg = b"\0".join((user.encode(), hashed, password))
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def get(self, k: bytes) -> bool | None:
        hit = self.entries.get(k)
        if hit is not None:
            self.entries.move_to_end(k)
        return hit

    def put(self, k: bytes, ok: bool) -> None:
        self.entries[k] = ok
        if len(self.entries) > AUTH_CACHE_SIZE:
            self.entries.popitem(last=False)


class BasicAuth:
    """bcrypt verification with a bounded cache, off the event loop.

    A cost-10 bcrypt takes ~70 ms of CPU: without the cache every scrape would pay it.
    Uncached checks run in threads, as many at once as there are CPUs (bcrypt releases the
    GIL), and concurrent checks of the same credentials share one computation. Unknown
    users are checked against a hash of a random password with the same cost, so response
    time does not tell which user names exist (as the toolkit does)."""

    def __init__(self, users: Mapping[str, bytes], verdicts: Verdicts | None = None) -> None:
        self.users = dict(users)
        self.verdicts = verdicts if verdicts is not None else Verdicts()
        self._slots = asyncio.Semaphore(max(2, os.cpu_count() or 1))
        self._pending: dict[bytes, asyncio.Future[bool]] = {}
        self._dummy: bytes | None = None
        self.bcrypt_calls = 0

    @property
    def _cache(self) -> OrderedDict[bytes, bool]:
        return self.verdicts.entries

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

    async def check(self, user: str, password: bytes) -> bool:
        hashed = self.users.get(user)
        known = hashed is not None
        if hashed is None:
            hashed = await asyncio.to_thread(self._dummy_hash)  # hashpw: off the loop
        k = self.verdicts.key(user, hashed, password)
        hit = self.verdicts.get(k)
        if hit is not None:
            return hit and known
        pending = self._pending.get(k)
        if pending is None:
            pending = self._pending[k] = asyncio.get_running_loop().create_future()
            try:
                async with self._slots:
                    self.bcrypt_calls += 1
                    ok = await asyncio.to_thread(_checkpw, password, hashed)
                self.verdicts.put(k, ok)
                pending.set_result(ok)
            except BaseException as e:
                pending.set_exception(e)
                pending.exception()  # retrieved: no "never retrieved" warning
                raise
            finally:
                del self._pending[k]
        ok = await asyncio.shield(pending)
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
    wc: WebConfig, verdicts: Verdicts | None = None
) -> tuple[Callable[[Request], Awaitable[Response | None]], BasicAuth | None]:
    """Rate limit, client SAN check and basic auth, in the toolkit's order; 401 carries
    ``WWW-Authenticate: Basic``. Returns the guard and the BasicAuth it uses (or None)."""
    auth = BasicAuth(wc.basic_auth_users, verdicts) if wc.basic_auth_users else None
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
    re-read when it (or a certificate, key or CA file it names) changes. The result is also
    the TLS source of the listener (:func:`dnsfleet.web.server.serve`)."""
    return LiveWebConfig(router, wc)


def _changed(files: Mapping[str, FileStamp]) -> bool:
    """Whether any of ``files`` is no longer the version that was read."""
    for path, stamp in files.items():
        try:
            if file_stamp(os.stat(path)) != stamp:
                return True
        except OSError:
            return True
    return False


_DROP = Response(status=0, drop=True)


class LiveWebConfig:
    """The web config in force. The exporter-toolkit reads its file on every request, so
    rotated certificates and changed passwords take effect without a restart; here a stat
    of the file and the files it names, per request and per accepted connection (a few
    microseconds), decides whether to re-read. Re-reading runs in a thread, once for all
    the requests that notice the change. Turning TLS on or off needs a restart (the
    listening port is plain or TLS)."""

    def __init__(self, router: Router, wc: WebConfig) -> None:
        self.router = router
        self.wc = wc
        self.ssl_context = wc.ssl_context
        self.verdicts = Verdicts()
        self.check, self.auth = guard(wc, self.verdicts)
        # The files to watch: those the configuration in force was read from, or, after a
        # failed reload, those that failed (re-read when they change again).
        self.watched: Mapping[str, FileStamp] = wc.files
        self.reloads = 0
        self.status = ReloadStatus(True, time.time())
        self._reloading: asyncio.Task[None] | None = None
        router.guards.insert(0, self.guard)
        router.extra_headers.extend(wc.headers)

    async def refresh(self) -> None:
        """Re-read the file if it or a file it names changed since it was last read."""
        if self._reloading is None:
            if not _changed(self.watched):
                return
            self._reloading = asyncio.get_running_loop().create_task(self._reload())
        await asyncio.shield(self._reloading)

    async def context(self) -> ssl.SSLContext:
        """The TLS context a connection accepted now must use (routes.TLSSource)."""
        await self.refresh()
        assert self.ssl_context is not None
        return self.ssl_context

    async def guard(self, request: Request) -> Response | None:
        await self.refresh()
        if request.tls_context is not None and request.tls_context is not self.ssl_context:
            # Accepted under TLS settings that are no longer in force (a CA rotated out, a
            # client certificate requirement changed): end the connection without answering;
            # the client's retry handshakes under the new settings.
            return _DROP
        return await self.check(request)

    async def _reload(self) -> None:
        source = self.wc.source
        stamps: dict[str, FileStamp] = {}
        try:
            new = await asyncio.to_thread(load_stamped, source, stamps)
            if (new.tls is None) != (self.wc.tls is None):
                raise ConfigError(f"{source}: turning TLS on or off needs a restart")
        except ConfigError as e:
            # Not re-read on every request: only when one of the files read changes again
            # (or, when the web config itself could not be read, when it appears).
            self.watched = stamps or {source: (-1, -1, -1)}
            self.status = ReloadStatus(False, self.status.timestamp, str(e), failed_at=time.time())
            log.error("web config not reloaded, keeping the previous one: %s", e)
            return
        except Exception as e:  # a check that missed a case must not leave auth undefined
            self.watched = stamps or {source: (-1, -1, -1)}
            self.status = ReloadStatus(
                False, self.status.timestamp, f"{type(e).__name__}: {e}", failed_at=time.time()
            )
            log.exception("web config not reloaded, keeping the previous one")
            return
        finally:
            self._reloading = None
        for h in self.wc.headers:
            self.router.extra_headers.remove(h)
        self.router.extra_headers.extend(new.headers)
        self.check, self.auth = guard(new, self.verdicts)
        self.wc = new
        self.watched = new.files
        if new.ssl_context is not None:
            self.ssl_context = new.ssl_context
        self.reloads += 1
        self.status = ReloadStatus(True, time.time())
        log.info("web config %s reloaded", new.source)
