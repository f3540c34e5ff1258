"""Registered domains (eTLD+1) from the Public Suffix List, for the dnstap insight.

What it is for: the dnstap top-N tables and the random-subdomain detector count by
*registered domain* (`victim.example.co.uk`, `bar.blogspot.com`), not by query name, so a
flood of random names under one owner is one key. It renders nothing; the caller exports
`status()` as an info metric so an operator sees whether the list or the fallback is in use.

The list is Debian's `publicsuffix` package (`/usr/share/publicsuffix/public_suffix_list.dat`),
read once, lazily, and cached; nothing is ever downloaded. Both its ICANN and PRIVATE
sections are used (different owners under `blogspot.com` are different domains). The
algorithm is publicsuffix.org/list's: normal, wildcard (`*.ck`) and exception (`!www.ck`)
rules; the longest matching rule prevails, an exception rule always prevails and drops its
leftmost label; a name no rule matches has the implicit rule `*` (its last label is the
suffix). Rules are matched in their Unicode form and in their IDNA A-label (`xn--`) form.

Fallback: when the file is missing or unreadable the rule set is empty, so only the
implicit `*` rule applies: the registered domain is the **last two labels** (`example.co.uk`
becomes `co.uk`). `status()` says which is in use and why.

Hostile names are harmless: the lookup looks at no more labels from the right than the
deepest rule has (plus one), whatever the name's length; `\\.` and `\\046` escapes of the
presentation format stay inside their label; nothing raises.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_PATH",
    "PublicSuffixList",
    "Status",
    "configure",
    "default_list",
    "registered_domain",
    "split_labels",
    "status",
]

DEFAULT_PATH = "/usr/share/publicsuffix/public_suffix_list.dat"
MAX_LIST_BYTES = 16 * 1024 * 1024  # the 2023 list is 230 KB; a larger file is not the list


@dataclass(frozen=True)
class Status:
    """Which rules `registered_domain` uses: source "file" or "fallback" (last two labels)."""

    source: str
    path: str
    entries: int
    error: str = ""


def split_labels(name: str) -> list[str]:
    """Lower-case labels of a presentation-format name; a dot after a backslash is data."""
    name = name.lower()
    if "\\" not in name:
        labels = name.split(".")
    else:
        labels, label, escaped = [], [], False
        for char in name:
            if escaped:
                label.append(char)
                escaped = False
            elif char == "\\":
                label.append(char)
                escaped = True
            elif char == ".":
                labels.append("".join(label))
                label = []
            else:
                label.append(char)
        labels.append("".join(label))
    if labels and labels[-1] == "":
        labels.pop()  # the root: "example.com." and "example.com" are the same name
    return labels


def _a_label(rule: str) -> str | None:
    try:
        return rule.encode("idna").decode("ascii")
    except UnicodeError:
        return None


class PublicSuffixList:
    """The rules of one list text; `PublicSuffixList("")` is the fallback (last two labels)."""

    __slots__ = ("depth", "entries", "exceptions", "rules", "wildcards")

    def __init__(self, text: str) -> None:
        self.rules: set[str] = set()
        self.wildcards: set[str] = set()  # "*.ck" is held as "ck"
        self.exceptions: set[str] = set()  # "!www.ck" is held as "www.ck"
        self.entries = 0
        for line in text.splitlines():
            words = line.split()
            if not words or words[0].startswith("//"):
                continue
            self.entries += 1
            rule = words[0].lower()
            kind, body = "", rule
            if rule.startswith("!"):
                kind, body = "!", rule[1:]
            elif rule.startswith("*."):
                kind, body = "*", rule[2:]
            for form in (body, _a_label(body)) if not body.isascii() else (body,):
                if form is not None:
                    {"!": self.exceptions, "*": self.wildcards}.get(kind, self.rules).add(form)
        known = self.rules | self.exceptions | {w + ".x" for w in self.wildcards}
        self.depth = max((len(split_labels(r)) for r in known), default=1)

    def suffix_labels(self, labels: list[str]) -> int:
        """How many of the rightmost `labels` the public suffix has (at least 1)."""
        best, exception = 1, -1
        suffix = ""
        for i in range(1, min(len(labels), self.depth) + 1):
            parent = suffix
            suffix = labels[-i] + "." + suffix if suffix else labels[-i]
            if suffix in self.exceptions:
                exception = i - 1
            if suffix in self.rules or (parent and parent in self.wildcards):
                best = i
        return exception if exception >= 0 else best

    def registered_domain(self, qname: str) -> str:
        """eTLD+1 of `qname`, lower-case, no trailing dot; the name itself when shorter."""
        labels = split_labels(qname)
        keep = self.suffix_labels(labels) + 1 if labels else 0
        return ".".join(labels[-keep:]) if keep < len(labels) else ".".join(labels)


_lock = threading.Lock()
_path = DEFAULT_PATH
_loaded: tuple[PublicSuffixList, Status] | None = None


def load(path: str) -> tuple[PublicSuffixList, Status]:
    """Read the list at `path`; the fallback with the reason when it cannot be read."""
    try:
        with Path(path).open("rb") as f:
            data = f.read(MAX_LIST_BYTES + 1)
        if len(data) > MAX_LIST_BYTES:
            raise ValueError(f"larger than {MAX_LIST_BYTES} bytes")
        psl = PublicSuffixList(data.decode("utf-8"))
        if not psl.entries:
            raise ValueError("no rules in the file")
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        return PublicSuffixList(""), Status("fallback", path, 0, f"{type(e).__name__}: {e}")
    return psl, Status("file", path, psl.entries)


def configure(path: str = DEFAULT_PATH) -> None:
    """Use the list at `path` from now on (read at the next lookup)."""
    global _path, _loaded  # one list per process
    with _lock:
        _path, _loaded = path, None


def _current() -> tuple[PublicSuffixList, Status]:
    global _loaded  # noqa: PLW0603 (loaded once, lazily)
    loaded = _loaded
    if loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = load(_path)
            loaded = _loaded
    return loaded


def default_list() -> PublicSuffixList:
    """The configured list (loaded on first use)."""
    return _current()[0]


def status() -> Status:
    """Which list is in use (for an info metric: source, path, entries)."""
    return _current()[1]


def registered_domain(qname: str) -> str:
    """eTLD+1 of `qname` by the configured list (lower-case, no trailing dot)."""
    return _current()[0].registered_domain(qname)
