"""Reading a resolver's own statistics: unbound remote control, BIND's statistics channel,
and the Prometheus ``/metrics`` of PowerDNS Recursor, dnsdist, Knot Resolver and CoreDNS.

Thin I/O only; the text goes to the pure parsers in ``parsers/unbound.py`` and
``parsers/bind.py``. One reader per software, listed in :data:`READERS`.

unbound remote control (daemon/remote.c): the client sends one line ``UBCT<version>
<command>\\n`` (version 1, ``UNBOUND_CONTROL_VERSION``) and reads until the daemon closes the
connection. Over a unix socket or ``control-use-cert: no`` that is plain text; otherwise TLS
where the client presents ``unbound_control.pem``/``.key`` and trusts ``unbound_server.pem``
(unbound-control-setup). The server certificate's name is "unbound", not the host: like
unbound-control we check the chain, not the host name.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from dnsfleet.config import StatsSource, parse_address
from dnsfleet.parsers.bind import parse_bind_server
from dnsfleet.parsers.promtext import parse_resolver_metrics
from dnsfleet.parsers.resolver import ResolverStats
from dnsfleet.parsers.unbound import (
    parse_option,
    parse_threads,
    parse_unbound_stats,
    parse_version,
)

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)
_T = TypeVar("_T")

CONTROL_VERSION = 1
MAX_REPLY_BYTES = 1 << 20  # stats with extended-statistics on 64 threads is ~200 KiB


class StatsError(Exception):
    """The statistics could not be read; the message is the reason."""


# A file's identity and content version: (path, device, inode, size, mtime_ns).
FileKey = tuple[str, int, int, int, int]


def _file_key(path: str) -> FileKey:
    st = os.stat(path)
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _context_of(server_cert: FileKey, client_cert: FileKey, client_key: FileKey) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(server_cert[0])
    ctx.load_cert_chain(client_cert[0], client_key[0])
    return ctx


def _tls_context(server_cert: str, client_cert: str, client_key: str) -> ssl.SSLContext:
    """The remote-control client context for the files as they are now. Keyed on each
    file's stamp, not its path: unbound-control-setup re-run, or a certificate renewed in
    place, is a new key, so the next scrape presents and trusts what the files hold now
    rather than the pair read at the first scrape until the exporter restarts. A file that
    cannot be read raises OSError, which the caller reports as the read's failure."""
    return _context_of(_file_key(server_cert), _file_key(client_cert), _file_key(client_key))


async def unbound_control(source: StatsSource, command: str) -> str:
    """Run one remote-control command and return its output. Raises StatsError."""
    scheme, _, rest = source.control.partition("://")
    try:
        if scheme == "unix":
            reader, writer = await asyncio.open_unix_connection(rest)
        else:
            host, port, _ = parse_address(rest, default_port=8953)
            ctx = None
            if scheme == "tls":
                assert source.server_cert and source.client_cert and source.client_key
                ctx = _tls_context(source.server_cert, source.client_cert, source.client_key)
            reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
    except (OSError, ssl.SSLError) as e:
        raise StatsError(f"cannot connect to {source.control}: {e}") from None
    try:
        writer.write(f"UBCT{CONTROL_VERSION} {command}\n".encode())
        await writer.drain()
        data = await reader.read(MAX_REPLY_BYTES + 1)
        buf = bytearray(data)
        while data and len(buf) <= MAX_REPLY_BYTES:
            data = await reader.read(MAX_REPLY_BYTES + 1 - len(buf))
            buf += data
    except (OSError, ssl.SSLError) as e:
        raise StatsError(f"{source.control}: {command}: {e}") from None
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    if len(buf) > MAX_REPLY_BYTES:
        raise StatsError(f"{source.control}: {command}: reply larger than {MAX_REPLY_BYTES}")
    text = buf.decode("utf-8", "replace")
    if text.startswith("error"):
        raise StatsError(f"{source.control}: {command}: {text.strip()[:200]}")
    if not text:
        # unbound closes without a word when the version line is wrong or TLS is expected.
        raise StatsError(f"{source.control}: {command}: empty reply")
    return text


async def _optional(reply: Awaitable[_T]) -> _T | None:
    """A reply that only adds a figure (a limit, a memory total): its failure leaves the
    figure out instead of failing the whole read."""
    try:
        return await reply
    except StatsError as e:
        log.debug("optional statistics left out: %s", e)
        return None


async def read_unbound(source: StatsSource, session: aiohttp.ClientSession | None) -> ResolverStats:
    # stats_noreset: plain `stats` would zero the resolver's counters for every other reader.
    stats_text, status_text, per_thread = await asyncio.gather(
        unbound_control(source, "stats_noreset"),
        unbound_control(source, "status"),
        _optional(unbound_control(source, "get_option num-queries-per-thread")),
    )
    try:
        return parse_unbound_stats(
            stats_text,
            version=parse_version(status_text),
            # The request list is per thread: its limit is the option times the threads.
            threads=parse_threads(status_text),
            queries_per_thread=None if per_thread is None else parse_option(per_thread),
        )
    except ValueError as e:
        raise StatsError(f"{source.control}: garbled statistics: {e}") from None


async def _http_get(
    url: str, session: aiohttp.ClientSession | None, headers: dict[str, str] | None = None
) -> bytes:
    """One bounded GET for a statistics source; StatsError with the reason."""
    import aiohttp  # noqa: PLC0415 - only HTTP sources pay for aiohttp (~28 MB RSS)

    if session is None:
        raise StatsError("no HTTP session")
    try:
        async with session.get(url, allow_redirects=False, headers=headers or {}) as resp:
            if resp.status != 200:
                raise StatsError(f"{url}: HTTP {resp.status}")
            body = await resp.content.read(MAX_REPLY_BYTES * 8 + 1)
    except aiohttp.ClientError as e:
        raise StatsError(f"{url}: {e or type(e).__name__}") from None
    if len(body) > MAX_REPLY_BYTES * 8:
        raise StatsError(f"{url}: reply too large")
    return body


async def read_bind(source: StatsSource, session: aiohttp.ClientSession | None) -> ResolverStats:
    url = source.url + "/json/v1/server"
    # /json/v1/mem holds the memory total (4 KB); /json/v1 whole would add every zone.
    body, mem = await asyncio.gather(
        _http_get(url, session), _optional(_http_get(source.url + "/json/v1/mem", session))
    )
    try:
        return parse_bind_server(body, mem)
    except ValueError as e:
        raise StatsError(f"{url}: {e}") from None


async def read_metrics(source: StatsSource, session: aiohttp.ClientSession | None) -> ResolverStats:
    """PowerDNS Recursor, dnsdist, Knot Resolver, CoreDNS: their Prometheus ``/metrics``."""
    headers = {"X-API-Key": source.api_key} if source.api_key else None
    body = await _http_get(source.url, session, headers)
    try:
        return parse_resolver_metrics(source.type, body.decode("utf-8", "replace"))
    except ValueError as e:
        raise StatsError(f"{source.url}: {e}") from None


Reader = Callable[[StatsSource, "aiohttp.ClientSession | None"], Awaitable[ResolverStats]]
READERS: dict[str, Reader] = {
    "unbound": read_unbound,
    "bind": read_bind,
    "pdns-recursor": read_metrics,
    "dnsdist": read_metrics,
    "knot-resolver": read_metrics,
    "coredns": read_metrics,
}


async def read_stats(source: StatsSource, session: aiohttp.ClientSession | None) -> ResolverStats:
    """Read and normalise; raises StatsError (with the reason) or TimeoutError."""
    async with asyncio.timeout(source.timeout):
        return await READERS[source.type](source, session)
