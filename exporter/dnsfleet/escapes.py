"""Text from outside (configuration values, names, answers) made safe to print: the one
escape every output stream applies (``--config.check``, log lines in both formats, error
messages that echo a value). Pure; imports nothing of dnsfleet.

A terminal obeys what a printed string carries: ESC and CSI (U+009B) sequences move the
cursor, recolour or clear lines, OSC sets the window title or writes the clipboard, a
carriage return or backspace overwrites what came before, and bidirectional overrides and
isolates (Trojan Source, CVE-2021-42574) display text in another order than it is read.
Each such character is shown as a visible escape instead, ``\\x1b``, ``\\u202e``, as Python
writes them; every other character, letters of any script included, is left alone. A
backslash is not doubled: the output is for people, and escaping is idempotent.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; the bidi marks, embeddings, overrides and isolates
# (Unicode 15 UAX #9: ALM, LRM, RLM, LRE..RLO, LRI..PDI); the line and paragraph
# separators, which some viewers break lines at.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_UNSAFE_BUT_BREAKS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control and bidi character as a visible escape. With
    ``keep_newlines``, line feeds and tabs stay (a traceback's lines, inside a log field
    whose format already quotes them)."""
    pattern = _UNSAFE_BUT_BREAKS if keep_newlines else _UNSAFE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_visible, text)
