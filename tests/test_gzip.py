"""/metrics gzip: ISA-L's deflater (python-isal) where it imports, zlib where it does not;
either way one gzip member that decompresses to the body's bytes, for the text formats
(compressed a slice at a time) and the protobuf one (whole)."""

from __future__ import annotations

import importlib.util
import sys
import zlib
from collections.abc import Callable
from types import ModuleType

import pytest

from dnsfleet import exposition
from dnsfleet.exposition import (
    GZIP_SLICE,
    Deflater,
    Family,
    TextFamily,
    gzip_bytes,
    gzip_parts,
    openmetrics_parts,
    render_bytes,
    render_openmetrics_bytes,
    text_parts,
)

pytestmark = pytest.mark.unit


def _families() -> list[Family | TextFamily]:
    big = "".join(
        f'dnsfleet_x{{target="10.0.{i // 250}.{i % 250}",site="zürich"}} {i}\n' for i in range(9000)
    )
    return [
        Family("dnsfleet_a", "A gauge.").add(1.5, {"target": 'é\\\n"'}),
        Family("dnsfleet_empty", "Nothing."),
        TextFamily("dnsfleet_x", "Pre-rendered, several slices long.", "gauge", big),
        Family("dnsfleet_b_total", "A counter.", "counter").add(float("nan")),
    ]


def one_member(body: bytes) -> bytes:
    """The bytes of ``body``, which must be exactly one gzip member (what Content-Encoding:
    gzip promises; gzip.decompress would read several members back to back)."""
    assert body[:3] == b"\x1f\x8b\x08", body[:10]
    d = zlib.decompressobj(31)
    out = d.decompress(body)
    assert d.eof and d.unused_data == b"", "more than one member, or a truncated one"
    return out


def _fresh_exposition(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """exposition.py run again, as a module of its own, with python-isal not importable
    (``sys.modules[name] = None`` makes ``import name`` raise ImportError)."""
    monkeypatch.setitem(sys.modules, "isal", None)
    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)
    spec = importlib.util.spec_from_file_location("_exposition_without_isal", exposition.__file__)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_isal_is_the_deflater_where_it_imports() -> None:
    pytest.importorskip("isal")
    assert exposition.gzip_compressor.__name__ == "_isal_gzip"


def test_zlib_when_isal_cannot_be_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _fresh_exposition(monkeypatch)
    assert mod.gzip_compressor.__name__ == "_zlib_gzip"
    fams = _families()
    body = mod.gzip_parts(text_parts(fams))
    assert one_member(body) == render_bytes(fams)
    # zlib's bytes, as /metrics sent them before there was a choice.
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    assert body == z.compress(render_bytes(fams)) + z.flush()
    assert one_member(mod.gzip_bytes(b"\x00\x01" * 50_000)) == b"\x00\x01" * 50_000


def _deflaters() -> list[Callable[[int], Deflater]]:
    found: list[Callable[[int], Deflater]] = [exposition._zlib_gzip]
    if exposition.gzip_compressor is not exposition._zlib_gzip:
        found.append(exposition.gzip_compressor)
    return found


@pytest.mark.parametrize("deflater", _deflaters(), ids=lambda f: f.__name__)
def test_one_member_of_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch, deflater: Callable[[int], Deflater]
) -> None:
    monkeypatch.setattr(exposition, "gzip_compressor", deflater)
    fams = _families()
    assert len(fams[2].samples) > 2 * GZIP_SLICE
    assert one_member(gzip_parts(text_parts(fams))) == render_bytes(fams)
    om = one_member(gzip_parts(openmetrics_parts(fams)))
    assert om == render_openmetrics_bytes(fams) and om.endswith(b"# EOF\n")
    assert one_member(gzip_parts([])) == b""
    blob = bytes(range(256)) * 4000
    assert one_member(gzip_bytes(blob)) == blob
    assert one_member(gzip_bytes(b"")) == b""
