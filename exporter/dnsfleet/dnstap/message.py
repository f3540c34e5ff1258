"""The dnstap message schema, and the peeks into the DNS messages it carries.

The schema is dnstap.proto (github.com/dnstap/dnstap.pb, field numbers as there), built in
code so nothing runs protoc. Messages are decoded by the ``protobuf`` package (its upb
backend decodes one in about a microsecond; a field walker written here was five times
slower) with ``FromString``: parsing again into one reused message grows its arena without
bound (protocolbuffers/protobuf#24257).

The DNS message inside is not decoded whole (dnspython's ``from_wire`` costs ~76 µs per
message): :func:`peek` reads the header, the question and the OPT record's EDE options
(RFC 8914) straight from the bytes with the probes' own walker (:mod:`dnsfleet.dnswire`),
so a name, a pointer or an option means the same to both. Anything that does not parse
raises :class:`Undecodable`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from dnsfleet.dnswire import FLAG_TC, HEADER, Malformed, read_sections, skip_name

F = descriptor_pb2.FieldDescriptorProto

TRANSPORTS = dict(enumerate(("udp", "tcp", "dot", "doh", "dnscrypt_udp", "dnscrypt_tcp", "doq"), 1))
# Message.Type, numbered from 1 in this order.
MESSAGE_TYPE_NAMES = """AUTH_QUERY AUTH_RESPONSE RESOLVER_QUERY RESOLVER_RESPONSE CLIENT_QUERY
CLIENT_RESPONSE FORWARDER_QUERY FORWARDER_RESPONSE STUB_QUERY STUB_RESPONSE TOOL_QUERY
TOOL_RESPONSE UPDATE_QUERY UPDATE_RESPONSE""".split()  # noqa: SIM905 - a table to read
CLIENT_QUERY = MESSAGE_TYPE_NAMES.index("CLIENT_QUERY") + 1
CLIENT_RESPONSE = MESSAGE_TYPE_NAMES.index("CLIENT_RESPONSE") + 1


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
    _enum(m, "Type", [(n, i) for i, n in enumerate(MESSAGE_TYPE_NAMES, 1)])
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


class Peek(NamedTuple):
    """What a DNS message's bytes say, without decoding it whole."""

    id: int
    rcode: int  # the header's 4 bits (the OPT record's extension is not added)
    truncated: bool
    qname: bytes  # wire form, uncompressed (a question name is never compressed)
    qtype: int
    ede: tuple[int, ...]  # INFO-CODEs of the EDE options (RFC 8914), in order


def peek(w: bytes, *, with_ede: bool = True) -> Peek:
    """Header, question and (when ``with_ede``) EDE codes of a DNS message, read by
    :mod:`dnsfleet.dnswire`'s walker."""
    try:
        if len(w) < 12:
            raise Malformed("shorter than a header")
        mid, flags, qd, an, ns, ar = HEADER.unpack_from(w)
        tc = bool(flags & FLAG_TC)
        if qd != 1:
            raise Malformed("not one question")
        end = skip_name(w, 12) + 4
        # Cut, or compressed: its name ends in a pointer, not in the root label.
        if end > len(w) or w[end - 5]:
            raise Malformed("cut or compressed question")
        qtype = (w[end - 4] << 8) | w[end - 3]
        ede: tuple[int, ...] = ()
        if with_ede and ar:  # EDE is in the OPT record, an additional one: none, no walk
            qclass = (w[end - 2] << 8) | w[end - 1]
            sections = read_sections(
                w,
                end,
                counts=(an, ns, ar),
                qtype=qtype,
                qclass=qclass,
                truncated=tc,
            )
            ede = sections[4][1]
    except Malformed:
        raise Undecodable("dns") from None
    return Peek(mid, flags & 0xF, tc, w[12 : end - 4], qtype, ede)
