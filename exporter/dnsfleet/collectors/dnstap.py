"""dnstap: the families of the ingest process (:mod:`dnsfleet.dnstap`), which
listens for the resolvers' dnstap streams in a process of its own.

The collector's start hook (:func:`start`, which the exporter calls when it starts and after
each reload) starts the process when the configuration has a ``dnstap`` section, so the
socket exists before the resolvers start: Knot Resolver never connects to a socket that was
missing when it started. Each scrape asks the process for its families, and starts it again
if it exited or stopped answering (its counters then start from zero, which Prometheus'
rate() reads as a counter reset). The close hook stops it.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from dnsfleet.collectors.base import CollectContext, Collector
from dnsfleet.config import Config
from dnsfleet.dnstap.client import Ingest, IngestUnavailable
from dnsfleet.dnstap.protocol import IngestSettings
from dnsfleet.exposition import Family

log = logging.getLogger(__name__)
STATE_KEY = "dnstap"


def ensure(state: MutableMapping[str, Any], config: Config) -> Ingest | None:
    """The ingest process for ``config``: started, restarted with new settings, stopped
    when the section is gone, or started again after it exited."""
    want = config.dnstap
    ingest: Ingest | None = state.get(STATE_KEY)
    if not want.enabled:
        if ingest is not None:
            ingest.close()
            del state[STATE_KEY]
        return None
    settings = settings_of(config)
    if ingest is not None and ingest.settings != settings:
        ingest.close()
        ingest = None
    if ingest is None:
        ingest = state[STATE_KEY] = Ingest(settings)
    else:
        ingest.ensure()
    return ingest


def settings_of(config: Config) -> IngestSettings:
    """What the ingest process is started with: the ``dnstap`` section, and the labels
    (site, ...) of the targets its identities map to."""
    want = config.dnstap
    mapped = {t for _, t in want.identities}
    labels = {t.address: t.labels for t in config.targets if t.address in mapped}
    return IngestSettings(
        socket=want.socket,
        socket_mode=want.socket_mode,
        identities=want.identities,
        target_labels=tuple(labels.items()),
        handshake_timeout=want.handshake_timeout,
        idle_timeout=want.idle_timeout,
        max_connections=want.max_connections,
        top_n=want.top_n,
        cluster_domain=want.cluster_domain,
        search_suffixes=want.search_suffixes,
    )


def start(state: MutableMapping[str, Any], config: Config) -> None:
    ensure(state, config)


def close(state: MutableMapping[str, Any]) -> None:
    ingest: Ingest | None = state.pop(STATE_KEY, None)
    if ingest is not None:
        ingest.close()


async def collect(ctx: CollectContext) -> list[Family]:
    ingest = ensure(ctx.state, ctx.config)
    assert ingest is not None  # enabled
    up = Family(
        "dnsfleet_dnstap_ingest_up",
        "1 if the dnstap ingest process answered this scrape, 0 if not (its families are "
        "then missing).",
    )
    starts = Family(
        "dnsfleet_dnstap_ingest_starts_total",
        "dnstap ingest processes started: more than one means it exited and was started "
        "again, and its counters restarted from zero.",
        "counter",
    ).add(ingest.starts)
    restarts = Family(
        "dnsfleet_dnstap_ingest_restarts_total",
        "dnstap ingest processes started again, by reason: it exited, or it was killed "
        "because a request went unanswered (unresponsive).",
        "counter",
    )
    for reason, n in ingest.restarts.items():
        restarts.add(n, {"reason": reason})
    try:
        fams = await ingest.families()
    except IngestUnavailable as e:
        log.warning("dnstap ingest process did not answer: %s", e)
        return [up.add(0), starts, restarts]
    return [up.add(1), starts, restarts, *fams]


COLLECTOR = Collector(
    name="dnstap", run=collect, enabled=lambda cfg: cfg.dnstap.enabled, start=start, close=close
)
