"""The typed boundary between the exporter and its dnstap ingest process
(dnsfleet.dnstap.protocol): every message round-trips, and a reply that is cut, oversized,
not JSON or of the wrong shape is refused with its reason, never handed on."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import threading
from pathlib import Path

import pytest

from dnsfleet.dnstap.client import Ingest, _ask
from dnsfleet.dnstap.protocol import (
    HEADER,
    MAX_REPLY,
    ChannelError,
    IngestSettings,
    Listener,
    Reply,
    ReplyReader,
    Request,
)
from dnsfleet.exposition import Family, Labels
from tests.harness.dnstapwriter import Writer, ingest_settings

SETTINGS = IngestSettings(
    socket="/run/dnsfleet/dnstap.sock",
    socket_mode=0o640,
    identities=(("r1", "127.0.0.1:53"), ("r2", "[::1]:53")),
    target_labels=(("127.0.0.1:53", (("site", "ams"), ("tier", "edge"))), ("[::1]:53", ())),
    handshake_timeout=2.5,
    idle_timeout=30,
    max_connections=8,
    top_n=0,
    evict_idle=3600.0,
)


def families() -> tuple[Family, ...]:
    hist = Family("dnsfleet_dnstap_response_duration_seconds", "Latency.", "histogram")
    hist.add_raw(Labels([("target", "a"), ("le", "0.5")]), 3, "_bucket")
    hist.add_raw(Labels([("target", "a"), ("le", "+Inf")]), 4, "_bucket")
    hist.add_raw(Labels([("target", "a")]), 0.75, "_sum")
    hist.add_raw(Labels([("target", "a")]), 4, "_count")
    return (
        Family("dnsfleet_dnstap_frames_total", "Frames.", "counter").add(12),
        Family("dnsfleet_dnstap_connections", "Open.").add(1, {"note": 'a "quoted"\nvalue'}),
        Family("dnsfleet_dnstap_up", "Odd values.").add(math.inf).add(-0.5, {"x": "y"}),
        hist,
    )


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def good() -> dict[str, object]:
    return {
        "listener": {"dev": 2049, "ino": 77},
        "labelsets": [[["a", "1"]]],
        "families": [["m_total", "Help.", "counter", [["", 0, 1.5]]]],
    }


def spoiled(path: tuple[str | int, ...], value: object) -> bytes:
    doc = good()
    at: object = doc
    for key in path[:-1]:
        at = at[key]  # type: ignore[index]
    at[path[-1]] = value  # type: ignore[index]
    return body(doc)


# ------------------------------------------------------------------- round trips


@pytest.mark.unit
def test_settings_round_trip() -> None:
    assert IngestSettings.decode(SETTINGS.encode()) == SETTINGS
    bare = IngestSettings(socket="/s")
    assert IngestSettings.decode(bare.encode()) == bare


@pytest.mark.unit
def test_reply_round_trip_read_in_any_pieces() -> None:
    reply = Reply(families(), Listener(dev=2049, ino=123456789))
    data = reply.encode()
    for piece in (1, 3, 4, 7, len(data)):
        reader = ReplyReader()
        at = 0
        while reader.wanted:
            n = min(piece, reader.wanted)
            reader.feed(data[at : at + n])
            at += n
        assert at == len(data)
        assert reader.reply() == reply


@pytest.mark.unit
def test_requests_are_one_byte_each() -> None:
    assert Request().encode() == b"F"
    assert Request.decode_all(b"FFF") == [Request()] * 3
    assert Request.decode_all(b"") == []
    with pytest.raises(ChannelError, match="a request that is not b'F'"):
        Request.decode_all(b"FxF")


# ------------------------------------------------------------------- refusals

MALFORMED = [
    (b"{not json", "a reply that does not parse"),
    (b"\xff\xfe", "a reply that does not parse"),
    (b'{"families": [' + b"[" * 100_000, "a reply that does not parse"),
    (body([["m", "h", "gauge", []]]), "reply: not an object"),
    (body({"families": []}), "reply: keys ['families'], not families, labelsets and listener"),
    (spoiled(("labelsets",), {}), "reply.labelsets: not a list"),
    (spoiled(("labelsets", 0), {"a": "1"}), "reply.labelsets[0]: not a list"),
    (spoiled(("labelsets", 0, 0), ["a"]), "reply.labelsets[0][0]: not a label (name, value)"),
    (spoiled(("labelsets", 0, 0), ["a b", "1"]), "reply.labelsets[0][0]: not a label"),
    (spoiled(("labelsets", 0, 0), ["__x", 1]), "reply.labelsets[0][0]: not a label"),
    (spoiled(("listener",), [1, 2]), "reply.listener: not an object"),
    (spoiled(("listener", "ino"), "77"), "reply.listener.ino: not an integer"),
    (spoiled(("listener", "dev"), -1), "reply.listener.dev: not an integer"),
    (spoiled(("families",), {}), "reply.families: not a list"),
    (spoiled(("families", 0), ["m", "h", "gauge"]), "reply.families[0]: 3 fields, not 4"),
    (spoiled(("families", 0, 0), "m total"), "reply.families[0]: not a metric name"),
    (spoiled(("families", 0, 1), None), "reply.families[0].help: not a string"),
    (spoiled(("families", 0, 2), "summary"), "reply.families[0]: not a metric type"),
    (spoiled(("families", 0, 2), ["gauge"]), "reply.families[0]: not a metric type"),
    (spoiled(("families", 0, 3), "samples"), "reply.families[0].samples: not a list"),
    (spoiled(("families", 0, 3, 0), ["", 1.0]), "reply.families[0].samples[0]: 2 fields"),
    (spoiled(("families", 0, 3, 0, 0), "{x}"), "samples[0]: not a sample suffix"),
    (spoiled(("families", 0, 3, 0, 1), 'a="1"'), "samples[0]: not the index of one of 1 label"),
    (spoiled(("families", 0, 3, 0, 1), 1), "samples[0]: not the index of one of 1 label sets"),
    (spoiled(("families", 0, 3, 0, 1), -1), "samples[0]: not the index of one of 1 label sets"),
    (spoiled(("families", 0, 3, 0, 1), True), "samples[0]: not the index of one of 1 label"),
    (spoiled(("families", 0, 3, 0, 2), "1.5"), "samples[0]: not a number"),
    (spoiled(("families", 0, 3, 0, 2), True), "samples[0]: not a number"),
    (spoiled(("families", 0, 3, 0, 2), None), "samples[0]: not a number"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("data", "reason"), MALFORMED)
def test_a_malformed_reply_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ChannelError) as e:
        Reply.decode(data)
    assert reason in str(e.value)


@pytest.mark.unit
def test_a_good_reply_decodes() -> None:
    reply = Reply.decode(body(good()))
    assert reply.listener == Listener(2049, 77)
    assert [(f.name, f.type, f.samples) for f in reply.families] == [
        ("m_total", "counter", [("", Labels([("a", "1")]), 1.5)])
    ]


@pytest.mark.unit
def test_a_cut_reply_is_refused_with_how_much_came() -> None:
    data = Reply(families(), Listener(1, 2)).encode()
    reader = ReplyReader()
    reader.feed(data[:2])
    assert str(reader.cut()) == (
        "the ingest process closed the request's socket after 2 of the 4 bytes of its length"
    )
    reader.feed(data[2:4])
    reader.feed(data[4:10])
    length = len(data) - HEADER.size
    assert str(reader.cut()) == (
        f"the ingest process closed the request's socket after 6 of its {length} bytes"
    )
    with pytest.raises(ChannelError, match="after 6 of its"):
        reader.reply()


@pytest.mark.unit
def test_a_cut_body_does_not_parse() -> None:
    data = Reply(families(), Listener(1, 2)).encode()[HEADER.size :]
    with pytest.raises(ChannelError, match="a reply that does not parse"):
        Reply.decode(data[:-5])


@pytest.mark.unit
def test_an_oversized_reply_is_refused_before_it_is_read() -> None:
    reader = ReplyReader()
    with pytest.raises(ChannelError, match=f"a reply of {MAX_REPLY + 1} bytes \\(at most"):
        reader.feed(HEADER.pack(MAX_REPLY + 1))


@pytest.mark.unit
def test_bytes_past_the_reply_are_refused() -> None:
    data = Reply((), Listener(1, 2)).encode()
    reader = ReplyReader()
    with pytest.raises(ChannelError, match="more bytes than the reply's length"):
        reader.feed(data + b"x")


SETTINGS_REFUSED = [
    ("[]", "settings: not an object"),
    ('{"socket": "/s"}', "settings: missing keys"),
    (SETTINGS.encode()[:-1] + ',"_bound":[1,2]}', "settings: unknown keys ['_bound']"),
    (SETTINGS.encode().replace('"socket_mode":416', '"socket_mode":4096'), "socket_mode"),
    (SETTINGS.encode().replace('"max_connections":8', '"max_connections":0'), "max_conn"),
    (SETTINGS.encode().replace('"idle_timeout":30', '"idle_timeout":0'), "idle_timeout"),
    (SETTINGS.encode().replace('"top_n":0', '"top_n":"0"'), "settings.top_n"),
    (SETTINGS.encode().replace('"r1":"127.0.0.1:53"', '"r1":5'), "settings.identities.r1"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "reason"), SETTINGS_REFUSED)
def test_settings_of_another_shape_are_refused(text: str, reason: str) -> None:
    with pytest.raises(ChannelError, match=reason.replace("[", "\\[")):
        IngestSettings.decode(text)


# ------------------------------------------------------------------- over sockets


def fake_ingest(control: socket.socket, reply: bytes) -> threading.Thread:
    """Answers one request with ``reply`` as it is, then closes the request's socket."""

    def run() -> None:
        _msg, fds, _flags, _addr = socket.recv_fds(control, 1, 1)
        with socket.socket(fileno=fds[0]) as s:
            s.sendall(reply)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.integration
@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (HEADER.pack(100) + b"{}", "closed the request's socket after 2 of its 100 bytes"),
        (HEADER.pack(MAX_REPLY + 1), "a reply of"),
        (HEADER.pack(4) + b"[12]", "reply: not an object"),
    ],
)
def test_the_client_refuses_a_bad_reply_with_its_reason(reply: bytes, reason: str) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        t = fake_ingest(theirs, reply)
        with pytest.raises(ChannelError, match=reason):
            asyncio.run(asyncio.wait_for(_ask(ours), 30))
        t.join(timeout=30)


@pytest.mark.integration
def test_the_reply_names_the_socket_the_process_bound(tmp_path: Path) -> None:
    sock = tmp_path / "dnstap.sock"
    ing = Ingest(ingest_settings(sock))
    try:
        Writer(str(sock)).close()  # listening
        reply = asyncio.run(asyncio.wait_for(ing.reply(), 60))
        st = os.stat(sock)
        assert reply.listener == Listener(st.st_dev, st.st_ino)
        assert ing.listener == reply.listener
    finally:
        ing.close()
