"""Frame Streams, the receiving end, sans I/O (farsightsec/fstrm ``fstrm/control.h``).

A frame is a 32-bit big-endian length and that many bytes. Length 0 escapes a control
frame: a 32-bit length, then a 32-bit control type and fields (a 32-bit field type,
``CONTENT_TYPE`` = 1, a 32-bit length, the bytes).

Bidirectional (every Debian daemon's default): writer READY(content types) -> reader
ACCEPT(the one it takes) -> writer START -> data frames -> writer STOP -> reader FINISH.
Unidirectional: START -> data -> STOP. Unknown control types are ignored, as control.h asks.
"""

from __future__ import annotations

import enum
import struct

CONTENT_TYPE = b"protobuf:dnstap.Dnstap"
ACCEPT, START, STOP, READY, FINISH = 1, 2, 3, 4, 5
FIELD_CONTENT_TYPE = 1
CONTROL_MAX = 512  # FSTRM_CONTROL_FRAME_LENGTH_MAX
# A dnstap message holds at most a query and a response (64 KiB each) and their metadata.
DATA_MAX = 256 * 1024

_U32 = struct.Struct(">I")
_U32x2 = struct.Struct(">II")


class Refusal(enum.Enum):
    """Why a stream was cut (the ``reason`` of ``dnsfleet_dnstap_errors_total``)."""

    OVERSIZED_FRAME = "oversized_frame"
    CONTROL_FRAME = "control_frame"  # a control frame that does not parse
    UNEXPECTED_CONTROL = "unexpected_control"  # e.g. data before START, a second START
    CONTENT_TYPE = "content_type"  # the writer offers no protobuf:dnstap.Dnstap


class ProtocolError(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal


def encode_control(ctype: int, content_types: tuple[bytes, ...] = ()) -> bytes:
    body = _U32.pack(ctype) + b"".join(
        _U32x2.pack(FIELD_CONTENT_TYPE, len(ct)) + ct for ct in content_types
    )
    return _U32x2.pack(0, len(body)) + body


def decode_control(body: bytes) -> tuple[int, list[bytes]]:
    """The control type and the content types a control frame carries."""
    if len(body) < 4:
        raise ProtocolError(Refusal.CONTROL_FRAME)
    (ctype,) = _U32.unpack_from(body)
    off, types = 4, []
    while off < len(body):
        if off + 8 > len(body):
            raise ProtocolError(Refusal.CONTROL_FRAME)
        ftype, flen = _U32x2.unpack_from(body, off)
        off += 8
        if off + flen > len(body):
            raise ProtocolError(Refusal.CONTROL_FRAME)
        if ftype == FIELD_CONTENT_TYPE:
            types.append(body[off : off + flen])
        off += flen
    return ctype, types


class State(enum.Enum):
    HANDSHAKE = "handshake"  # nothing yet
    ACCEPTED = "accepted"  # READY answered with ACCEPT; START expected
    DATA = "data"
    DONE = "done"  # STOP seen (and FINISH sent)


class Receiver:
    """Feed it what the socket read; it returns the data frames, the bytes to write back
    and whether the stream has ended. Raises :class:`ProtocolError` on a stream to cut."""

    __slots__ = ("_buf", "bidirectional", "max_frame", "state")

    def __init__(self, max_frame: int = DATA_MAX) -> None:
        self._buf = b""
        self.state = State.HANDSHAKE
        self.max_frame = max_frame
        self.bidirectional = False

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held: a sender that stops mid-frame leaves some."""
        return len(self._buf)

    def feed(self, data: bytes) -> tuple[list[bytes], bytes, bool]:
        buf = self._buf + data if self._buf else data
        frames: list[bytes] = []
        reply = b""
        off, n = 0, len(buf)
        while off + 4 <= n:
            (length,) = _U32.unpack_from(buf, off)
            if length:
                if length > self.max_frame:
                    raise ProtocolError(Refusal.OVERSIZED_FRAME)
                if off + 4 + length > n:
                    break
                if self.state is not State.DATA:
                    raise ProtocolError(Refusal.UNEXPECTED_CONTROL)
                frames.append(buf[off + 4 : off + 4 + length])
                off += 4 + length
                continue
            if off + 8 > n:
                break
            (clen,) = _U32.unpack_from(buf, off + 4)
            if clen > CONTROL_MAX:
                raise ProtocolError(Refusal.CONTROL_FRAME)
            if off + 8 + clen > n:
                break
            ctype, types = decode_control(buf[off + 8 : off + 8 + clen])
            off += 8 + clen
            reply += self._control(ctype, types)
            if self.state is State.DONE:
                self._buf = b""
                return frames, reply, True
        self._buf = buf[off:]
        return frames, reply, False

    def _control(self, ctype: int, types: list[bytes]) -> bytes:
        if ctype == READY and self.state is State.HANDSHAKE:
            if CONTENT_TYPE not in types:
                raise ProtocolError(Refusal.CONTENT_TYPE)
            self.state = State.ACCEPTED
            self.bidirectional = True
            return encode_control(ACCEPT, (CONTENT_TYPE,))
        if ctype == START and self.state in (State.HANDSHAKE, State.ACCEPTED):
            if types and CONTENT_TYPE not in types:
                raise ProtocolError(Refusal.CONTENT_TYPE)
            self.state = State.DATA
            return b""
        if ctype == STOP and self.state is State.DATA:
            self.state = State.DONE
            # A unidirectional writer reads nothing: FINISH only answers a READY stream.
            return encode_control(FINISH) if self.bidirectional else b""
        if ctype in (ACCEPT, READY, START, STOP, FINISH):
            raise ProtocolError(Refusal.UNEXPECTED_CONTROL)
        return b""  # unknown control types are ignored (control.h)
