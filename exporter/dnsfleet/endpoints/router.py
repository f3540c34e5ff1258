"""HTTP endpoints: /metrics, /probe, /-/healthy, /-/ready, /-/reload, /config and /."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from dnsfleet import expoproto
from dnsfleet.app import Exporter
from dnsfleet.config import to_yaml
from dnsfleet.endpoints.probe import ProbeHandler, Refusal, Refused
from dnsfleet.exposition import (
    OPENMETRICS_TYPE,
    Family,
    TextFamily,
    gzip_bytes,
    gzip_parts,
    openmetrics_parts,
    render_bytes,
    render_openmetrics_bytes,
    text_parts,
)
from dnsfleet.probes import ProbeResult
from dnsfleet.probes.families import probe_exposition
from dnsfleet.status import page as statuspage
from dnsfleet.web.routes import Cancel, Request, Respond, Response, Router

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REFUSAL_STATUS = {Refusal.INVALID: 400, Refusal.FORBIDDEN: 403, Refusal.BUSY: 503}
# Concurrent /metrics requests before a 503 (--web.max-requests; 0: no limit), as
# node_exporter's --web.max-requests.
DEFAULT_MAX_REQUESTS = 40


# The largest X-Prometheus-Scrape-Timeout-Seconds taken (seconds): Prometheus' own
# scrape_timeout is at most its scrape_interval, minutes at the very most.
MAX_SCRAPE_TIMEOUT = 300.0
# What Prometheus sends (strconv.FormatFloat(t, 'f', -1, 64)): digits, perhaps a fraction.
_TIMEOUT_TEXT = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,9})?")


class BadTimeout(ValueError):
    """The scrape timeout header is present but not a usable deadline."""


def parse_scrape_timeout(raw: str | None) -> float | None:
    """The requester's scrape timeout in seconds, or None when it sent none (the
    configured default applies). Strict: a decimal number above 0 and at most
    MAX_SCRAPE_TIMEOUT; anything else (``inf``, ``nan``, ``-1``, ``0``, ``1e3``, ``10s``)
    raises BadTimeout, which the endpoints answer with 400. A deadline nobody can meet, or
    one that never comes, is the requester's mistake to hear about, not one to guess at:
    ``inf`` used to be taken, and a cycle started with it never ended."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if not _TIMEOUT_TEXT.fullmatch(text):
        raise BadTimeout(
            f"X-Prometheus-Scrape-Timeout-Seconds {text[:32]!r} is not a number of seconds"
        )
    v = float(text)
    if not 0 < v <= MAX_SCRAPE_TIMEOUT:
        raise BadTimeout(
            f"X-Prometheus-Scrape-Timeout-Seconds {text!r} is not above 0 and at most "
            f"{MAX_SCRAPE_TIMEOUT:g}"
        )
    return v


def scrape_timeout_header(request: Request) -> float | None:
    return parse_scrape_timeout(request.headers.get("x-prometheus-scrape-timeout-seconds"))


def wants_openmetrics(accept: str) -> bool:
    """As prometheus_client decides: any listed media type application/openmetrics-text."""
    return any(
        part.split(";")[0].strip() == "application/openmetrics-text" for part in accept.split(",")
    )


def wants_protobuf(accept: str) -> bool:
    """Whether to answer with the protobuf exposition: the requester lists it
    (``application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
    encoding=delimited``, as Prometheus sends it when native histograms are on) with a
    weight above 0 and at least that of anything else it lists (``*/*`` included).
    Otherwise the text formats are chosen as before (:func:`wants_openmetrics`)."""
    proto_q = 0.0
    other_q = 0.0
    for member in accept.split(","):
        kind, *params = member.split(";")
        q = _qvalue(params)
        if kind.strip().lower() != "application/vnd.google.protobuf":
            other_q = max(other_q, q) if kind.strip() else other_q
            continue
        named = {
            k.strip().lower(): v.strip().strip('"')
            for k, _, v in (p.partition("=") for p in params)
        }
        if (named.get("proto"), named.get("encoding", "").lower()) == (
            "io.prometheus.client.MetricFamily",
            "delimited",
        ):
            proto_q = max(proto_q, q)
    return proto_q > 0 and proto_q >= other_q


def _qvalue(params: list[str]) -> float:
    """The weight of an Accept or Accept-Encoding member (RFC 9110 §12.4.2): 1 without
    ``q``; 0 for a weight that is not a qvalue (0 to 1), so a malformed weight never
    enables a coding or a format."""
    for p in params:
        name, _, value = p.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def accepts_gzip(accept_encoding: str) -> bool:
    """RFC 9110 §12.5.3: gzip is acceptable if listed with a weight above 0, or, when not
    listed at all, if ``*`` is; a coding listed with q=0 is not acceptable whatever ``*``
    says. An empty value asks for no coding."""
    gzip_q: float | None = None
    star_q: float | None = None
    for member in accept_encoding.split(","):
        coding, *params = member.split(";")
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            gzip_q = max(gzip_q or 0.0, _qvalue(params))
        elif coding == "*":
            star_q = _qvalue(params)
    if gzip_q is not None:
        return gzip_q > 0
    return star_q is not None and star_q > 0


class Handlers:
    def __init__(
        self,
        exp: Exporter,
        metrics_path: str,
        *,
        enable_lifecycle: bool = False,
        max_requests: int = DEFAULT_MAX_REQUESTS,
    ) -> None:
        self.exp = exp
        self.metrics_path = metrics_path
        self.probe_handler = ProbeHandler(exp)
        self.enable_lifecycle = enable_lifecycle
        self.max_requests = max_requests
        self.metrics_in_flight = 0
        # Requests sharing one scrape render it once per format and coding (gzip or not);
        # dropped when none waits.
        self._rendered: list[tuple[list[Family | TextFamily], tuple[str, bool], bytes]] = []

    async def metrics(self, request: Request) -> Response:
        if self.max_requests and self.metrics_in_flight >= self.max_requests:
            return _bad(
                503, f"too many concurrent scrapes (--web.max-requests {self.max_requests})"
            )
        try:
            header_timeout = scrape_timeout_header(request)
        except BadTimeout as e:
            return _bad(400, str(e))
        self.metrics_in_flight += 1
        try:
            try:
                fams = await self.exp.scrape_families(
                    header_timeout, arrived=request.arrived or None
                )
            except TimeoutError:
                return _bad(503, "the scrape did not finish within this request's scrape timeout")
            kind = _content_type(request.headers.get("accept", ""))
            gz = accepts_gzip(request.headers.get("accept-encoding", ""))
            body = next((b for f, k, b in self._rendered if f is fams and k == (kind, gz)), None)
            if body is None:
                body = await _render(fams, kind, gz)
                self._rendered = [(f, k, b) for f, k, b in self._rendered if f is fams]
                self._rendered.append((fams, (kind, gz), body))
        finally:
            self.metrics_in_flight -= 1
            if not self.metrics_in_flight:
                self._rendered.clear()
        headers = [("Vary", "Accept-Encoding")]
        if gz:
            headers.append(("Content-Encoding", "gzip"))
        return Response(body=body, content_type=kind, headers=headers)

    async def probe(self, request: Request) -> Response:
        try:
            header_timeout = scrape_timeout_header(request)
        except BadTimeout as e:
            return _bad(400, str(e))
        outcome = await self.probe_handler.handle(
            request.query, repeated=request.repeated, header_timeout=header_timeout
        )
        if isinstance(outcome, Refused):
            return _bad(REFUSAL_STATUS[outcome.kind], outcome.reason)
        return Response(body=probe_exposition(outcome).encode(), content_type=CONTENT_TYPE)

    def probe_now(self, request: Request, respond: Respond) -> Cancel | None:
        """/probe by callbacks (ProbeHandler.start) for the common request; None, having
        done nothing, to leave it to :meth:`probe`."""
        if request.repeated:
            return None
        try:
            header_timeout = scrape_timeout_header(request)
        except BadTimeout:
            return None

        def answer(result: ProbeResult) -> None:
            try:
                body = probe_exposition(result).encode()
            except Exception:  # as the router answers a handler that failed
                log.exception("handler for GET /probe failed")
                respond(Response(500, b"internal error\n", close=True))
                return
            respond(Response(body=body, content_type=CONTENT_TYPE))

        fast = self.probe_handler.start(request.query, header_timeout, answer)
        return None if fast is None else fast.cancel

    async def healthy(self, request: Request) -> Response:
        return Response.text(200, "OK\n")

    async def ready(self, request: Request) -> Response:
        return Response.text(200, "Ready\n")

    async def reload(self, request: Request) -> Response:
        if not self.enable_lifecycle:
            # As Prometheus: reloading over HTTP is opt-in (SIGHUP always works).
            return _bad(403, "Lifecycle API is not enabled (--web.enable-lifecycle)")
        st = await self.exp.reload()
        if st.successful:
            return Response.text(200, "reloaded\n")
        return Response.text(500, f"reload failed, old configuration kept: {st.error}\n")

    async def config(self, request: Request) -> Response:
        return Response(
            body=to_yaml(self.exp.config).encode(), content_type="text/yaml; charset=utf-8"
        )

    async def index(self, request: Request) -> Response:
        return Response(
            body=statuspage.render(self.exp.status_view(), metrics_path=self.metrics_path).encode(),
            content_type="text/html; charset=utf-8",
        )


async def _render(fams: list[Family | TextFamily], kind: str, gz: bool) -> bytes:
    """A scrape's body in ``kind``, gzipped when ``gz``. A 1,000-target exposition is ~4.4 MB
    raw, ~200 kB gzipped; zlib releases the GIL, so compressing in a thread keeps the loop
    serving, and text is compressed a slice at a time, never built whole."""
    if kind == expoproto.CONTENT_TYPE:
        body = expoproto.encode(fams)
        return await asyncio.to_thread(gzip_bytes, body) if gz else body
    om = kind == OPENMETRICS_TYPE
    if gz:
        return await asyncio.to_thread(
            gzip_parts, openmetrics_parts(fams) if om else text_parts(fams)
        )
    return render_openmetrics_bytes(fams) if om else render_bytes(fams)


def _content_type(accept: str) -> str:
    """The exposition format a /metrics request asked for (/probe always answers text)."""
    if wants_protobuf(accept):
        return expoproto.CONTENT_TYPE
    return OPENMETRICS_TYPE if wants_openmetrics(accept) else CONTENT_TYPE


def _bad(status: int, reason: str) -> Response:
    return Response.text(status, reason + "\n")


def make_router(
    exp: Exporter,
    *,
    metrics_path: str = "/metrics",
    enable_lifecycle: bool = False,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> Router:
    h = Handlers(exp, metrics_path, enable_lifecycle=enable_lifecycle, max_requests=max_requests)
    router = Router()
    routes: list[tuple[str, str, Callable[[Request], Awaitable[Response]]]] = [
        ("GET", metrics_path, h.metrics),
        ("GET", "/probe", h.probe),
        ("GET", "/-/healthy", h.healthy),
        ("GET", "/-/ready", h.ready),
        ("POST", "/-/reload", h.reload),
        ("PUT", "/-/reload", h.reload),
        ("GET", "/config", h.config),
    ]
    if metrics_path != "/":
        routes.append(("GET", "/", h.index))
    for method, path, handler in routes:
        router.add(method, path, handler)
    router.add_fast("/probe", h.probe_now)
    return router
