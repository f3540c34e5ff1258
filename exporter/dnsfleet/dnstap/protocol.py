"""What the exporter and its ingest process say to each other; both ends import this module.

Three messages cross the process boundary, each a frozen dataclass encoded and decoded here
and nowhere else:

- :class:`IngestSettings`: what the process is started with, one JSON argument on its
  command line.
- :class:`Request`: one byte on the control socket, carrying the socket the reply goes on.
- :class:`Reply`: the families, and what the process reports of the socket it listens on
  (:class:`Listener`). Label sets travel as typed (name, value) pairs, each distinct set
  once in a table that samples name by index: a target's set is shared by every sample of
  it, so it is checked and made into one :class:`~dnsfleet.exposition.Labels` once.

The exporter holds one end of a control socket pair for the life of the process: when it
closes (the exporter exits) the ingest process exits too. No reply ever travels on it. For
each request the exporter makes a fresh socket pair and passes one end over the control
socket (SCM_RIGHTS, with the request's byte); the ingest process writes one reply on that
end and closes it: a 4-byte big-endian length, then the reply as JSON.

A request that is cancelled (a scrape deadline) or fails just closes its own socket: the
ingest process's write to it fails and is dropped, and nothing is left half-read for the
next request, which has a socket of its own. The one-byte request is written whole or not
at all (a unix socket takes a 1-byte message atomically), so the control socket cannot fall
out of step either.

Decoding is validation: a reply that is cut, oversized, not JSON or of the wrong shape
raises :class:`ChannelError` with the reason, which the exporter reports as a request the
process did not answer; nothing of the wrong type reaches a family or the exposition.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, fields
from typing import get_args

from dnsfleet.dnswire import encode_name
from dnsfleet.exposition import Family, Labels, MetricType

HEADER = struct.Struct(">I")
# Far above any real reply (a few hundred KB at the label bounds of aggregate.py): a length
# beyond it is a broken peer, not a reply to wait for.
MAX_REPLY = 64 * 1024 * 1024
# Requests the ingest process takes from one read of the control socket.
MAX_FDS = 64
# A writer idle this long may lose its slot to a new one when all are taken (writers.py).
EVICT_IDLE = 1.0

Pairs = tuple[tuple[str, str], ...]

_METRIC_TYPES: dict[str, MetricType] = {t: t for t in get_args(MetricType)}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# What a sample's name may add to its family's (a histogram's series; OpenMetrics' others).
_SUFFIXES = frozenset({"", "_bucket", "_sum", "_count", "_total", "_created", "_info"})


class ChannelError(Exception):
    """A message that is cut, oversized or not of its shape; the message says which."""


@dataclass(frozen=True)
class IngestSettings:
    """What the ingest process needs: its socket, the writers' bounds and the label maps.
    ``identities``: dnstap identity -> target; ``target_labels``: a mapped target's own
    labels (site, ...), as (target, ((name, value), ...)) pairs in the configuration's
    order."""

    socket: str
    socket_mode: int = 0o660
    identities: Pairs = ()
    target_labels: tuple[tuple[str, Pairs], ...] = ()
    handshake_timeout: float = 10.0
    idle_timeout: float = 60.0
    max_connections: int = 64
    top_n: int = 10
    evict_idle: float = EVICT_IDLE
    cluster_domain: str = "cluster.local"
    search_suffixes: tuple[str, ...] = ()

    def encode(self) -> str:
        return json.dumps(
            {
                "socket": self.socket,
                "socket_mode": self.socket_mode,
                "identities": dict(self.identities),
                "target_labels": {t: dict(labels) for t, labels in self.target_labels},
                "handshake_timeout": self.handshake_timeout,
                "idle_timeout": self.idle_timeout,
                "max_connections": self.max_connections,
                "top_n": self.top_n,
                "evict_idle": self.evict_idle,
                "cluster_domain": self.cluster_domain,
                "search_suffixes": list(self.search_suffixes),
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str) -> IngestSettings:
        """The settings :meth:`encode` wrote; json.JSONDecodeError for text that is not
        JSON, ChannelError for JSON of another shape."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ChannelError("settings: not an object")
        names = {f.name for f in fields(cls)}
        if unknown := sorted(set(doc) - names):
            raise ChannelError(f"settings: unknown keys {unknown}")
        if missing := sorted(names - set(doc)):
            raise ChannelError(f"settings: missing keys {missing}")
        labels = _object(doc["target_labels"], "settings.target_labels")
        return cls(
            socket=_string(doc["socket"], "settings.socket"),
            socket_mode=_integer(doc["socket_mode"], "settings.socket_mode", 0, 0o777),
            identities=_pairs(doc["identities"], "settings.identities"),
            target_labels=tuple(
                (t, _pairs(v, f"settings.target_labels.{t}")) for t, v in labels.items()
            ),
            handshake_timeout=_seconds(doc["handshake_timeout"], "settings.handshake_timeout"),
            idle_timeout=_seconds(doc["idle_timeout"], "settings.idle_timeout"),
            max_connections=_integer(doc["max_connections"], "settings.max_connections", 1),
            top_n=_integer(doc["top_n"], "settings.top_n", 0),
            evict_idle=_seconds(doc["evict_idle"], "settings.evict_idle"),
            cluster_domain=_domain(doc["cluster_domain"], "settings.cluster_domain"),
            search_suffixes=tuple(
                _domain(s, f"settings.search_suffixes[{i}]")
                for i, s in enumerate(_list(doc["search_suffixes"], "settings.search_suffixes"))
            ),
        )


@dataclass(frozen=True)
class Request:
    """Ask for the families; the reply goes on the socket passed with this byte."""

    BYTE = b"F"

    def encode(self) -> bytes:
        return self.BYTE

    @classmethod
    def decode_all(cls, data: bytes) -> list[Request]:
        """The requests of one read of the control socket, a byte each."""
        if data.strip(cls.BYTE):
            raise ChannelError(f"a request that is not {cls.BYTE!r}: {data[:16]!r}")
        return [cls() for _ in data]


@dataclass(frozen=True)
class Listener:
    """The socket the ingest process bound, as stat(2) names it: what it may remove when it
    stops, and never a successor's socket at the same path."""

    dev: int
    ino: int


@dataclass(frozen=True)
class Reply:
    families: tuple[Family, ...]
    listener: Listener

    def encode(self) -> bytes:
        """The reply framed: its length, then its JSON."""
        index: dict[Labels, int] = {}
        families = []
        for f in self.families:
            samples = []
            for suffix, labels, value in f.samples:
                i = index.get(labels)
                if i is None:
                    i = index[labels] = len(index)
                samples.append((suffix, i, value))
            families.append([f.name, f.help, f.type, samples])
        doc = {
            "listener": {"dev": self.listener.dev, "ino": self.listener.ino},
            "labelsets": [labels.pairs for labels in index],
            "families": families,
        }
        body = json.dumps(doc, separators=(",", ":")).encode()
        return HEADER.pack(len(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> Reply:
        """The reply whose JSON is ``body``; ChannelError when it is not one."""
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            raise ChannelError(f"a reply that does not parse: {e}") from None
        doc = _object(doc, "reply")
        if set(doc) != {"listener", "labelsets", "families"}:
            raise ChannelError(f"reply: keys {sorted(doc)}, not families, labelsets and listener")
        where = _object(doc["listener"], "reply.listener")
        if set(where) != {"dev", "ino"}:
            raise ChannelError(f"reply.listener: keys {sorted(where)}, not dev and ino")
        listener = Listener(
            _integer(where["dev"], "reply.listener.dev", 0),
            _integer(where["ino"], "reply.listener.ino", 0),
        )
        sets = _list(doc["labelsets"], "reply.labelsets")
        labelsets = [_labelset(v, f"reply.labelsets[{i}]") for i, v in enumerate(sets)]
        rows = _list(doc["families"], "reply.families")
        return cls(tuple(_family(row, i, labelsets) for i, row in enumerate(rows)), listener)


class ReplyReader:
    """One framed reply read as its bytes come (sans I/O): :attr:`wanted` says how many
    more to read, :meth:`feed` takes them, :meth:`reply` decodes the whole reply, and
    :meth:`cut` is the error for a socket closed before it was whole."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._length: int | None = None

    @property
    def wanted(self) -> int:
        if self._length is None:
            return HEADER.size - len(self._buf)
        return self._length - len(self._buf)

    def feed(self, data: bytes) -> None:
        if len(data) > self.wanted:
            raise ChannelError("more bytes than the reply's length")
        self._buf += data
        if self._length is None and len(self._buf) == HEADER.size:
            (length,) = HEADER.unpack(self._buf)
            if length > MAX_REPLY:
                raise ChannelError(f"a reply of {length} bytes (at most {MAX_REPLY})")
            self._length = int(length)
            self._buf.clear()

    def reply(self) -> Reply:
        if self._length is None or self.wanted:
            raise self.cut()
        return Reply.decode(bytes(self._buf))

    def cut(self) -> ChannelError:
        if self._length is None:
            got = f"{len(self._buf)} of the {HEADER.size} bytes of its length"
        else:
            got = f"{len(self._buf)} of its {self._length} bytes"
        return ChannelError(f"the ingest process closed the request's socket after {got}")


def _labelset(v: object, where: str) -> Labels:
    pairs = []
    for j, pair in enumerate(_list(v, where)):
        if not (
            type(pair) is list
            and len(pair) == 2
            and type(pair[0]) is str
            and _LABEL.fullmatch(pair[0])
            and type(pair[1]) is str
        ):
            raise ChannelError(f"{where}[{j}]: not a label (name, value): {pair!r:.80}")
        pairs.append((pair[0], pair[1]))
    return Labels(pairs)


def _family(row: object, i: int, labelsets: list[Labels]) -> Family:
    where = f"reply.families[{i}]"
    parts = _list(row, where)
    if len(parts) != 4:
        raise ChannelError(f"{where}: {len(parts)} fields, not 4")
    name, help_, mtype, samples = parts
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ChannelError(f"{where}: not a metric name: {name!r:.80}")
    help_ = _string(help_, f"{where}.help")
    kind = _METRIC_TYPES.get(mtype) if isinstance(mtype, str) else None
    if kind is None:
        raise ChannelError(f"{where}: not a metric type: {mtype!r:.80}")
    fam = Family(name, help_, kind)
    out = fam.samples
    # One test per sample on the way that passes (a reply has tens of thousands of them);
    # _sample says what is wrong with one that fails it.
    for j, s in enumerate(_list(samples, f"{where}.samples")):
        if (
            type(s) is list
            and len(s) == 3
            and s[0] in _SUFFIXES
            and type(s[1]) is int
            and 0 <= s[1] < len(labelsets)
            and type(s[2]) in (int, float)
        ):
            out.append((s[0], labelsets[s[1]], s[2]))
        else:
            _sample(s, f"{where}.samples[{j}]", len(labelsets))
    return fam


def _sample(sample: object, at: str, labelsets: int) -> None:
    """Raise the reason ``sample`` is not one."""
    s = _list(sample, at)
    if len(s) != 3:
        raise ChannelError(f"{at}: {len(s)} fields, not 3")
    suffix, labels, value = s
    if not isinstance(suffix, str) or suffix not in _SUFFIXES:
        raise ChannelError(f"{at}: not a sample suffix: {suffix!r:.80}")
    if isinstance(labels, bool) or not isinstance(labels, int) or not 0 <= labels < labelsets:
        raise ChannelError(f"{at}: not the index of one of {labelsets} label sets: {labels!r:.80}")
    _number(value, at)
    raise ChannelError(f"{at}: not a sample: {s!r:.80}")


def _object(v: object, where: str) -> dict[str, object]:
    if not isinstance(v, dict):
        raise ChannelError(f"{where}: not an object")
    return v


def _list(v: object, where: str) -> list[object]:
    if not isinstance(v, list):
        raise ChannelError(f"{where}: not a list")
    return v


def _string(v: object, where: str) -> str:
    if not isinstance(v, str):
        raise ChannelError(f"{where}: not a string")
    return v


def _domain(v: object, where: str) -> str:
    """A domain below the root, as the classifier of search expansions reads it."""
    s = _string(v, where)
    try:
        wire = encode_name(s)
    except ValueError as e:
        raise ChannelError(f"{where}: {e}") from None
    if wire == b"\x00":
        raise ChannelError(f"{where}: the root")
    return s


def _pairs(v: object, where: str) -> Pairs:
    return tuple((k, _string(x, f"{where}.{k}")) for k, x in _object(v, where).items())


def _number(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ChannelError(f"{where}: not a number: {v!r:.80}")
    return v


def _integer(v: object, where: str, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise ChannelError(f"{where}: not an integer from {lo} to {hi or 'any'}: {v!r:.80}")
    return v


def _seconds(v: object, where: str) -> float:
    n = _number(v, where)
    if not math.isfinite(n) or n <= 0:
        raise ChannelError(f"{where}: not a positive number of seconds: {n!r}")
    return float(n)
