"""The channel between the exporter and its ingest process, which both ends import.

The exporter holds one end of a control socket pair for the life of the process: when it
closes (the exporter exits) the ingest process exits too. No reply ever travels on it. For
each request the exporter makes a fresh socket pair and passes one end over the control
socket (SCM_RIGHTS, with one byte, :data:`REQUEST`); the ingest process writes one reply on
that end and closes it: a 4-byte big-endian length, then the families as JSON.

A request that is cancelled (a scrape deadline) or fails just closes its own socket: the
ingest process's write to it fails and is dropped, and nothing is left half-read for the
next request, which has a socket of its own. The one-byte request is written whole or not
at all (a unix socket takes a 1-byte message atomically), so the control socket cannot fall
out of step either.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from dnsfleet.exposition import Family, Labels

REQUEST = b"F"
HEADER = struct.Struct(">I")
# Far above any real reply (a few hundred KB at the label bounds of aggregate.py): a length
# beyond it is a broken peer, not a reply to wait for.
MAX_REPLY = 64 * 1024 * 1024
# Requests the ingest process takes from one read of the control socket.
MAX_FDS = 64


class ChannelError(Exception):
    """The reply was cut, oversized or unparsable; the message says which."""


def encode_reply(families: list[Family]) -> bytes:
    rows = [
        [f.name, f.help, f.type, [(s, lab.pairs, v) for s, lab, v in f.samples]] for f in families
    ]
    body = json.dumps(rows, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def reply_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_REPLY:
        raise ChannelError(f"a reply of {length} bytes (at most {MAX_REPLY})")
    return int(length)


def decode_reply(body: bytes) -> list[Family]:
    try:
        rows: list[Any] = json.loads(body)
        return [
            Family(n, h, t, [(s, Labels(lab), v) for s, lab, v in smp]) for n, h, t, smp in rows
        ]
    except (ValueError, TypeError) as e:
        raise ChannelError(f"a reply that does not parse: {e}") from None
