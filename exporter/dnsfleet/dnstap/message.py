"""The dnstap message schema, and the peeks into the DNS messages it carries.

The schema is dnstap.proto (github.com/dnstap/dnstap.pb, field numbers as there), built in
code so nothing runs protoc. Messages are decoded by the ``protobuf`` package (its upb
backend decodes one in about a microsecond; a field walker written here was five times
slower) with ``FromString``: parsing again into one reused message grows its arena without
bound (protocolbuffers/protobuf#24257).

The DNS message inside is not decoded whole (dnspython's ``from_wire`` costs ~76 µs per
message): :func:`peek` reads the header, the question and the OPT record's EDE options
(RFC 8914) straight from the bytes. Every index is bounds-checked; anything that does not
parse raises :class:`Undecodable`.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, NamedTuple, Protocol

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto

CLIENT_QUERY, CLIENT_RESPONSE = 5, 6
RESOLVER_QUERY, RESOLVER_RESPONSE = 3, 4
OPT, EDE_OPTION = 41, 15
TRANSPORTS = dict(enumerate(("udp", "tcp", "dot", "doh", "dnscrypt_udp", "dnscrypt_tcp", "doq"), 1))
# Message.Type, numbered from 1 in this order.
_MESSAGE_TYPES = """AUTH_QUERY AUTH_RESPONSE RESOLVER_QUERY RESOLVER_RESPONSE CLIENT_QUERY
CLIENT_RESPONSE FORWARDER_QUERY FORWARDER_RESPONSE STUB_QUERY STUB_RESPONSE TOOL_QUERY
TOOL_RESPONSE UPDATE_QUERY UPDATE_RESPONSE""".split()  # noqa: SIM905 - a table to read


class Undecodable(ValueError):
    """A frame or DNS message that does not parse; ``reason`` is the error's label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _field(msg: Any, name: str, number: int, typ: int, type_name: str = "") -> None:
    f = msg.field.add(name=name, number=number, type=typ, label=F.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name


def _enum(owner: Any, name: str, values: list[tuple[str, int]]) -> None:
    e = owner.enum_type.add(name=name)
    for n, v in values:
        e.value.add(name=n, number=v)


def _schema() -> Any:
    fd = descriptor_pb2.FileDescriptorProto(name="dnstap.proto", package="dnstap", syntax="proto2")
    d = fd.message_type.add(name="Dnstap")
    _enum(d, "Type", [("MESSAGE", 1)])
    for name, number in (("identity", 1), ("version", 2), ("extra", 3)):
        _field(d, name, number, F.TYPE_BYTES)
    _field(d, "message", 14, F.TYPE_MESSAGE, ".dnstap.Message")
    _field(d, "type", 15, F.TYPE_ENUM, ".dnstap.Dnstap.Type")
    _enum(fd, "SocketFamily", [("INET", 1), ("INET6", 2)])
    protocols = ["UDP", "TCP", "DOT", "DOH", "DNSCryptUDP", "DNSCryptTCP", "DOQ"]
    _enum(fd, "SocketProtocol", [(n, i) for i, n in enumerate(protocols, 1)])
    m = fd.message_type.add(name="Message")
    _enum(m, "Type", [(n, i) for i, n in enumerate(_MESSAGE_TYPES, 1)])
    _field(m, "type", 1, F.TYPE_ENUM, ".dnstap.Message.Type")
    _field(m, "socket_family", 2, F.TYPE_ENUM, ".dnstap.SocketFamily")
    _field(m, "socket_protocol", 3, F.TYPE_ENUM, ".dnstap.SocketProtocol")
    for name, number in (("query_address", 4), ("response_address", 5)):
        _field(m, name, number, F.TYPE_BYTES)
    for name, number in (("query_port", 6), ("response_port", 7)):
        _field(m, name, number, F.TYPE_UINT32)
    _field(m, "query_time_sec", 8, F.TYPE_UINT64)
    _field(m, "query_time_nsec", 9, F.TYPE_FIXED32)
    _field(m, "query_message", 10, F.TYPE_BYTES)
    _field(m, "query_zone", 11, F.TYPE_BYTES)
    _field(m, "response_time_sec", 12, F.TYPE_UINT64)
    _field(m, "response_time_nsec", 13, F.TYPE_FIXED32)
    _field(m, "response_message", 14, F.TYPE_BYTES)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("dnstap.Dnstap")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)  # Debian 12's 4.21


Dnstap: Any = _schema()


class MessageFields(Protocol):
    """The fields of a decoded ``dnstap.Message`` that are read here: protobuf builds the
    class at run time (no generated stub), so this is its type for mypy."""

    type: int
    socket_protocol: int
    query_address: bytes
    query_port: int
    query_time_sec: int
    query_time_nsec: int
    query_message: bytes
    response_time_sec: int
    response_time_nsec: int
    response_message: bytes

    def HasField(self, field_name: str) -> bool: ...  # noqa: N802 - protobuf's name


class DnstapFields(Protocol):
    """The fields of a decoded ``dnstap.Dnstap`` that are read here."""

    identity: bytes
    message: MessageFields

    def HasField(self, field_name: str) -> bool: ...  # noqa: N802 - protobuf's name


def parse_frame(frame: bytes) -> DnstapFields:
    """A data frame's ``dnstap.Dnstap``; Undecodable when it is not one."""
    try:
        d: DnstapFields = Dnstap.FromString(frame)
    except Exception:  # upb raises DecodeError; be broad: the bytes are the network's
        raise Undecodable("protobuf") from None
    if not d.HasField("message"):
        raise Undecodable("protobuf")
    return d


class Rcode(enum.IntEnum):
    NOERROR = 0
    FORMERR = 1
    SERVFAIL = 2
    NXDOMAIN = 3
    NOTIMP = 4
    REFUSED = 5


class Peek(NamedTuple):
    """What a DNS message's bytes say, without decoding it whole."""

    id: int
    rcode: int  # the header's 4 bits (the OPT record's extension is not added)
    truncated: bool
    qname: bytes  # wire form, uncompressed (a question name is never compressed)
    qtype: int
    ede: tuple[int, ...]  # INFO-CODEs of the EDE options (RFC 8914), in order


_HEADER = struct.Struct(">HHHHHH")


def _skip_name(w: bytes, i: int) -> int:
    n = len(w)
    for _ in range(128):  # a name has at most 127 labels
        if i >= n:
            raise Undecodable("dns")
        ln = w[i]
        if ln == 0:
            return i + 1
        if ln & 0xC0 == 0xC0:
            if i + 1 >= n:
                raise Undecodable("dns")
            return i + 2  # a compression pointer ends the name here
        if ln > 63:
            raise Undecodable("dns")
        i += ln + 1
    raise Undecodable("dns")


def peek(w: bytes, *, with_ede: bool = True) -> Peek:
    """Header, question and (when ``with_ede``) EDE codes of a DNS message."""
    if len(w) < 12:
        raise Undecodable("dns")
    mid, flags, qd, an, ns, ar = _HEADER.unpack_from(w)
    if qd != 1:
        raise Undecodable("dns")
    end = _skip_name(w, 12)
    if w[end - 1] != 0 or end + 4 > len(w):  # compressed or cut question
        raise Undecodable("dns")
    qtype = (w[end] << 8) | w[end + 1]
    ede = _ede(w, end + 4, an + ns, ar) if with_ede and ar else ()
    return Peek(mid, flags & 0xF, bool(flags & 0x0200), w[12:end], qtype, ede)


def _ede(w: bytes, i: int, skip: int, ar: int) -> tuple[int, ...]:
    n = len(w)
    for _ in range(skip):
        i = _skip_name(w, i)
        if i + 10 > n:
            raise Undecodable("dns")
        i += 10 + ((w[i + 8] << 8) | w[i + 9])
    for _ in range(ar):
        i = _skip_name(w, i)
        if i + 10 > n:
            raise Undecodable("dns")
        rtype = (w[i] << 8) | w[i + 1]
        rdlen = (w[i + 8] << 8) | w[i + 9]
        start, i = i + 10, i + 10 + rdlen
        if i > n:
            raise Undecodable("dns")
        if rtype == OPT:
            return _ede_options(w, start, i)
    return ()


def _ede_options(w: bytes, j: int, end: int) -> tuple[int, ...]:
    codes = []
    while j + 4 <= end:
        code = (w[j] << 8) | w[j + 1]
        olen = (w[j + 2] << 8) | w[j + 3]
        if j + 4 + olen > end:
            raise Undecodable("dns")
        if code == EDE_OPTION and olen >= 2:
            codes.append((w[j + 4] << 8) | w[j + 5])
        j += 4 + olen
    return tuple(codes)


def qname_text(wire: bytes) -> str:
    """Lower-case presentation form of an uncompressed wire name (``.`` for the root);
    bytes outside printable ASCII as ``\\DDD``, as in zone files."""
    labels, i = [], 0
    while i < len(wire) and wire[i]:
        ln = wire[i]
        raw = wire[i + 1 : i + 1 + ln]
        labels.append(
            "".join(chr(b) if 0x21 <= b <= 0x7E and b not in b".\\" else f"\\{b:03d}" for b in raw)
        )
        i += ln + 1
    return ".".join(labels).lower() + "." if labels else "."
