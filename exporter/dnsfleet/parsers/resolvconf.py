"""resolv.conf(5) as glibc reads it (resolv/res_init.c, glibc 2.26 and later).

Read line by line like ``res_vinit_1``: a keyword counts only at the very start of a line
and only when a space or tab follows it; ``#`` and ``;`` start a comment only in column
one; ``domain`` and ``search`` replace each other, so the later line wins; every
``options`` line is applied in order, so a later value wins; every ``nameserver`` line is
kept but only the first three (``MAXNS``) are ever queried. glibc silently ignores what it
cannot read. We read it the same way and say what was ignored or misread in
``problems``: a problem is never fatal, because the client is not stopped by it either.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

MAXNS = 3  # resolv.h: name servers glibc and musl query
MAXDNSRCH = 6  # resolv.h: search domains glibc < 2.26 used
RES_TIMEOUT = 5  # resolv.h: default options timeout
RES_DFLRETRY = 2  # resolv.h: default options attempts
RES_MAXRETRANS = 30  # resolv.h: largest timeout glibc accepts from resolv.conf
RES_MAXRETRY = 5  # resolv.h: largest attempts
RES_MAXNDOTS = 15
NAMESERVER_PORT = 53

# res_setoptions' flag table, in glibc's order: each entry matches as a *prefix* of the
# option word (strncmp), so "single-request-reopen" must come before "single-request".
FLAG_OPTIONS: tuple[str, ...] = (
    "inet6",
    "rotate",
    "edns0",
    "single-request-reopen",
    "single-request",
    "no_tld_query",
    "no-tld-query",
    "no-reload",
    "use-vc",
    "trust-ad",
    "no-aaaa",
    "debug",
)
VALUE_OPTIONS: tuple[str, ...] = ("ndots:", "timeout:", "attempts:")
KEYWORDS: tuple[str, ...] = ("domain", "search", "nameserver", "sortlist", "options")


@dataclass(frozen=True, slots=True)
class Nameserver:
    address: str  # normalised IP literal without zone ("127.0.0.1", "fe80::1")
    version: int  # 4 or 6
    scope: str = ""  # IPv6 zone as written after "%" (interface name or index)
    line: int = 0  # 1-based line in the file

    @property
    def text(self) -> str:
        """The address as a label and as ``parse_address`` input: ``fe80::1%eth0``."""
        return f"{self.address}%{self.scope}" if self.scope else self.address


@dataclass(frozen=True, slots=True)
class Problem:
    line: int  # 1-based; 0 for the file as a whole
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


@dataclass(frozen=True)
class ResolvConf:
    # Addresses of the nameservers glibc queries (at most three), as text; the exporter's
    # built-in default probes exactly these.
    nameservers: tuple[str, ...] = ()
    servers: tuple[Nameserver, ...] = ()  # the same, typed
    ignored_servers: tuple[Nameserver, ...] = ()  # valid, but after the third
    search: tuple[str, ...] = ()
    # glibc's values after its own clamping (RES_MAXRETRANS, RES_MAXRETRY, RES_MAXNDOTS).
    # timeout and attempts may be 0 or negative: glibc stores what atoi() gave it.
    timeout: int = RES_TIMEOUT
    attempts: int = RES_DFLRETRY
    ndots: int = 1
    # What the file said before clamping (musl clamps differently); None when unset.
    timeout_written: int | None = None
    attempts_written: int | None = None
    rotate: bool = False
    single_request: bool = False
    single_request_reopen: bool = False
    use_vc: bool = False
    edns0: bool = False
    trust_ad: bool = False
    no_aaaa: bool = False
    # A dotless name is never tried as is after the search list (res_query.c).
    no_tld_query: bool = False
    # Deprecated in glibc 2.26; getaddrinfo never looked at it: read, never acted on.
    inet6: bool = False
    problems: tuple[Problem, ...] = ()


def c_atoi(text: str) -> int:
    """C ``atoi``: optional sign, then decimal digits, stop at the first other character,
    0 when there are no digits. Saturates instead of overflowing (C leaves that
    undefined; glibc's strtol saturates)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)(\d*)", text)
    if not m or not m.group(2):
        return 0
    value = int(m.group(2))
    value = -value if m.group(1) == "-" else value
    return max(min(value, 2**31 - 1), -(2**31))


def inet_aton(text: str) -> str | None:
    """glibc ``inet_aton``: 1 to 4 parts in decimal, octal (leading 0) or hex (0x), the
    last part filling the remaining bytes ("127.1" is 127.0.0.1), and anything after
    whitespace ignored. Returns the dotted quad, or None."""
    token = re.split(r"[ \t\n\v\f\r]", text, maxsplit=1)[0]
    if not token:
        return None
    parts = token.split(".")
    if len(parts) > 4:
        return None
    values: list[int] = []
    for p in parts:
        m = re.fullmatch(r"0[xX]([0-9a-fA-F]*)|(0[0-7]*)|([1-9]\d*)", p)
        if m is None:
            return None
        if m.group(1) is not None:
            values.append(int(m.group(1), 16) if m.group(1) else 0)
        elif m.group(2) is not None:
            values.append(int(m.group(2), 8))
        else:
            values.append(int(m.group(3)))
    head, last = values[:-1], values[-1]
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    addr = 0
    for v in head:
        addr = (addr << 8) | v
    addr = (addr << (8 * (4 - len(head)))) | last
    return str(ipaddress.IPv4Address(addr))


def _keyword(line: str) -> str | None:
    """res_init.c's MATCH: the keyword, then a space or a tab."""
    for kw in KEYWORDS:
        if line.startswith(kw) and len(line) > len(kw) and line[len(kw)] in " \t":
            return kw
    return None


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[ \t]+", text) if w]


def parse_resolv_conf(text: str) -> ResolvConf:  # noqa: C901, PLR0912, PLR0915 (one pass, as glibc's res_init reads the file)
    servers: list[Nameserver] = []
    search: tuple[str, ...] = ()
    problems: list[Problem] = []
    opts: dict[str, object] = {}

    def problem(n: int, message: str) -> None:
        problems.append(Problem(n, message))

    for n, raw in enumerate(text.split("\n"), start=1):
        line = raw
        if not line.strip():
            continue
        if line[0] in "#;":
            continue
        if line.endswith("\r"):
            problem(
                n,
                "line ends in a carriage return (CRLF file): glibc keeps it as part "
                "of the last word",
            )
        kw = _keyword(line)
        if kw is None:
            first = line.split(maxsplit=1)[0]
            if first[0] in "#;":
                continue  # an indented comment: ignored, as intended
            if line[0] in " \t" and _keyword(line.lstrip(" \t")):
                problem(
                    n,
                    "indented line: glibc only reads keywords in column one, this line is ignored",
                )
            elif first in KEYWORDS:
                problem(n, f"{first} without a value: ignored")
            else:
                problem(n, f"unknown keyword {first!r}: ignored")
            continue
        rest = line[len(kw) :].lstrip(" \t")
        if kw in ("domain", "search"):
            if not rest.strip("\n"):
                problem(n, f"{kw} without a value: ignored")
                continue
            if kw == "domain":
                words = _words(rest)
                search = (words[0],)
                if len(words) > 1:
                    problem(n, f"domain takes one name: {' '.join(words[1:])!r} ignored")
            else:
                search = tuple(_words(rest))
                if any(w.startswith(("#", ";")) for w in search):
                    problem(n, "inline comment: glibc reads its words as search domains")
                if len(search) > MAXDNSRCH:
                    problem(
                        n,
                        f"{len(search)} search domains: glibc before 2.26 and "
                        f"musl use only the first {MAXDNSRCH}",
                    )
        elif kw == "nameserver":
            ns = _nameserver(rest, n)
            if ns is None:
                problem(
                    n, f"nameserver {rest.strip()!r} is not an IP address glibc can read: ignored"
                )
                continue
            tail = re.split(r"[ \t]+", rest.strip(), maxsplit=1)
            if len(tail) > 1:
                problem(n, f"text after the address ignored: {tail[1]!r}")
            servers.append(ns)
        elif kw == "options":
            _options(rest, n, opts, problem)
        # sortlist only orders answers; it does not change which server is asked or when.

    used, ignored = tuple(servers[:MAXNS]), tuple(servers[MAXNS:])
    for ns in ignored:
        problem(
            ns.line,
            f"nameserver {ns.text}: only the first {MAXNS} nameservers are "
            "used, this one is never queried",
        )
    if not servers:
        problem(0, "no usable nameserver line: glibc and musl then query 127.0.0.1")
    timeout_w = opts.get("timeout")
    attempts_w = opts.get("attempts")
    timeout = RES_TIMEOUT if not isinstance(timeout_w, int) else min(timeout_w, RES_MAXRETRANS)
    attempts = RES_DFLRETRY if not isinstance(attempts_w, int) else min(attempts_w, RES_MAXRETRY)
    ndots_w = opts.get("ndots")
    ndots = 1 if not isinstance(ndots_w, int) else min(ndots_w, RES_MAXNDOTS)
    return ResolvConf(
        nameservers=tuple(s.text for s in used),
        servers=used,
        ignored_servers=ignored,
        search=search,
        timeout=timeout,
        attempts=attempts,
        ndots=ndots,
        timeout_written=timeout_w if isinstance(timeout_w, int) else None,
        attempts_written=attempts_w if isinstance(attempts_w, int) else None,
        **_flags(opts),
        problems=tuple(sorted(problems, key=lambda p: p.line)),
    )


def _flags(opts: dict[str, object]) -> dict[str, bool]:
    """The flag options as ResolvConf's fields (glibc spells no-tld-query both ways)."""
    out = {f.replace("-", "_"): bool(opts.get(f)) for f in FLAG_OPTIONS if f != "no-tld-query"}
    out["no_tld_query"] = out["no_tld_query"] or bool(opts.get("no-tld-query"))
    for unmodelled in ("no_reload", "debug"):
        del out[unmodelled]
    return out


def _nameserver(rest: str, n: int) -> Nameserver | None:
    v4 = inet_aton(rest) if rest.strip("\n") else None
    if v4 is not None:
        return Nameserver(address=v4, version=4, line=n)
    word = re.split(r"[ \t\n]", rest, maxsplit=1)[0]
    addr, _, scope = word.partition("%")
    if not addr:
        return None
    try:
        ip = ipaddress.IPv6Address(addr)
    except ValueError:
        return None
    # glibc ignores a zone it cannot convert (__inet6_scopeid_pton) "for backwards
    # compatibility"; we keep it as written and let the probe resolve it.
    return Nameserver(address=str(ip), version=6, scope=scope.rstrip("\r"), line=n)


def _options(
    rest: str, n: int, opts: dict[str, object], report: Callable[[int, str], None]
) -> None:
    for word in _words(rest.rstrip("\n")):
        word_c = word.rstrip("\r")
        for prefix in VALUE_OPTIONS:
            if word_c.startswith(prefix):
                value_text = word_c[len(prefix) :]
                value = c_atoi(value_text)
                name = prefix[:-1]
                if not re.fullmatch(r"[+-]?\d+", value_text):
                    report(n, f"options {word_c!r}: not a number, glibc reads {value}")
                limit = {
                    "timeout": RES_MAXRETRANS,
                    "attempts": RES_MAXRETRY,
                    "ndots": RES_MAXNDOTS,
                }[name]
                if value > limit:
                    report(n, f"options {word_c!r}: glibc caps {name} at {limit}")
                if name == "attempts" and value <= 0:
                    report(
                        n,
                        f"options {word_c!r}: glibc then sends no query at all, every lookup fails",
                    )
                if name == "timeout" and value <= 0:
                    report(n, f"options {word_c!r}: glibc waits 1 s instead")
                opts[name] = value
                break
        else:
            for flag in FLAG_OPTIONS:
                if word_c.startswith(flag):
                    opts[flag] = True
                    if word_c != flag:
                        report(
                            n,
                            f"options {word_c!r}: glibc matches prefixes and reads it as {flag!r}",
                        )
                    break
            else:
                report(n, f"unknown option {word_c!r}: ignored")
