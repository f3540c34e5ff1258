"""The names a stub resolver tries for one lookup, and when it stops. Pure.

A pod's resolv.conf (``ndots:5`` and three or four search domains) turns one lookup of an
external name into a walk over the search list; each step is one DNS transaction (A and
AAAA together for an AF_UNSPEC getaddrinfo). Two libcs, each after its own source:

glibc (resolv/res_query.c, ``__res_context_search``, 2.26 to 2.36): with ``dots >=
ndots`` or a trailing dot the name is tried as is first; a trailing dot ends the lookup
there, otherwise any failure goes on to the search list (only when the name has a dot).
Below ndots the search list comes first and the name as is last, unless it was already
tried or the root is on the search list, or ``no-tld-query`` is set for a dotless name. In
the search loop NXDOMAIN, NODATA and SERVFAIL go on to the next domain; a timeout or any
other failure ends the loop (``done``) but still tries the name as is; every server
refusing the connection (ECONNREFUSED) ends the lookup at once. The A and AAAA answers are
judged together (``__res_context_query``): an answer in either ends the walk, so a NODATA
AAAA beside an A answer costs nothing more.

musl (src/network/lookup_name.c, ``name_from_dns_search`` and ``name_from_dns``, 1.2.3):
the search list is used only when ``dots < ndots`` and there is no trailing dot, then the
name as is, last. Each step's answers are read A first: no answer at all or SERVFAIL ends
the lookup (EAI_AGAIN), NXDOMAIN on any of them goes on to the next name, another rcode
ends it (EAI_FAIL), and NOERROR without an address ends it too (EAI_NODATA): unlike
glibc, a NODATA name in the search list stops the walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dnsfleet.parsers.resolvconf import ResolvConf

QTYPE_A = 1
QTYPE_AAAA = 28


class Libc(StrEnum):
    GLIBC = "glibc"
    MUSL = "musl"


class Reply(StrEnum):
    """What one query of a step got back, as the libc reads it."""

    ANSWER = "answer"  # NOERROR with records of the type asked in the answer section
    NODATA = "nodata"  # NOERROR without them (none, or a CNAME alone)
    NXDOMAIN = "nxdomain"
    SERVFAIL = "servfail"
    OTHER = "other"  # REFUSED, FORMERR, NOTIMP, ...: an rcode that is neither
    TIMEOUT = "timeout"  # no reply within the libc's waits
    CONN_REFUSED = "conn_refused"  # every server refused the connection (ICMP, RST)


class Outcome(StrEnum):
    """What the application got: the closed set the families export."""

    ANSWER = "answer"
    NXDOMAIN = "nxdomain"
    NODATA = "nodata"
    TIMEOUT = "timeout"
    SERVFAIL = "servfail"
    REFUSED = "refused"


FAILURES: tuple[Outcome, ...] = tuple(o for o in Outcome if o is not Outcome.ANSWER)


class Next(StrEnum):
    STOP = "stop"  # the lookup ends with this step's outcome
    CONTINUE = "continue"  # try the next name
    AS_IS = "as_is"  # glibc's ``done``: skip the rest of the search list


class Role(StrEnum):
    FIRST = "first"  # glibc: the name as is, tried before the search list
    SEARCH = "search"  # a search domain appended (the root on the list too)
    LAST = "last"  # the name as is, after the search list (glibc and musl)


@dataclass(frozen=True, slots=True)
class Step:
    qname: str  # absolute, with its trailing dot
    suffix: str  # the search domain appended; "" for the name as is
    role: Role
    # glibc: a failure here ends the lookup (a trailing-dot name; the name as is, last)
    final: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    next: Next
    outcome: Outcome


def qtypes(conf: ResolvConf, libc: Libc) -> tuple[int, ...]:
    """An AF_UNSPEC lookup: A and AAAA, A first (both libcs build them in this order).
    glibc's ``no-aaaa`` (2.36) drops the AAAA query; musl has no such option."""
    if libc is Libc.GLIBC and conf.no_aaaa:
        return (QTYPE_A,)
    return (QTYPE_A, QTYPE_AAAA)


def _join(name: str, suffix: str) -> str:
    suffix = suffix.strip(".")
    return f"{name}.{suffix}." if suffix else f"{name}."


def steps(conf: ResolvConf, name: str, libc: Libc) -> tuple[Step, ...]:
    """Every name the libc may try, in order; a verdict may end the walk early."""
    trailing = name.endswith(".")
    bare = name.rstrip(".")
    dots = name.count(".")
    if not bare:
        return ()
    last = Step(qname=f"{bare}.", suffix="", role=Role.LAST, final=True)
    search = tuple(d for d in conf.search if d)
    if libc is Libc.MUSL:
        if dots >= conf.ndots or trailing:
            return (last,)
        return (*(Step(_join(bare, d), d.strip("."), Role.SEARCH) for d in search), last)
    out: list[Step] = []
    tried_as_is = dots >= conf.ndots or trailing
    if tried_as_is:
        out.append(Step(last.qname, "", Role.FIRST, final=trailing))
    root_on_list = False
    # res_query.c searches a dotless name (RES_DEFNAMES) and a dotted one without a
    # trailing dot (RES_DNSRCH): both on by default, so: no trailing dot.
    if not trailing:
        for d in search:
            # A leading dot is dropped; what is left empty is the root.
            dname = d[1:] if d.startswith(".") else d
            root_on_list = root_on_list or not dname
            out.append(Step(_join(bare, dname), dname.strip("."), Role.SEARCH))
    searched = bool(search) and not trailing
    tld_ok = dots or not searched or not conf.no_tld_query
    if tld_ok and not (tried_as_is or root_on_list):
        out.append(last)
    return tuple(out)


def _glibc_rcode(replies: tuple[Reply, ...]) -> Reply:
    """``__res_context_query``'s reading of the pair: the first reply unless it is a
    NOERROR, then the second; a missing second (timed out) reads as the first."""
    got = [r for r in replies if r is not Reply.TIMEOUT]
    if not got:
        return Reply.CONN_REFUSED if Reply.CONN_REFUSED in replies else Reply.TIMEOUT
    first = got[0]
    if first in (Reply.NODATA, Reply.ANSWER) and len(got) > 1:
        return got[1]
    return first


def glibc_verdict(step: Step, replies: tuple[Reply, ...]) -> Verdict:
    if Reply.ANSWER in replies:
        return Verdict(Next.STOP, Outcome.ANSWER)
    rc = _glibc_rcode(replies)
    outcome = {
        Reply.NXDOMAIN: Outcome.NXDOMAIN,
        Reply.NODATA: Outcome.NODATA,
        Reply.SERVFAIL: Outcome.SERVFAIL,
        Reply.TIMEOUT: Outcome.TIMEOUT,
        Reply.CONN_REFUSED: Outcome.REFUSED,
        Reply.OTHER: Outcome.REFUSED,
        Reply.ANSWER: Outcome.ANSWER,
    }[rc]
    if step.final or (rc is Reply.CONN_REFUSED and step.role is Role.SEARCH):
        return Verdict(Next.STOP, outcome)
    if step.role is Role.FIRST:
        # The name as is, tried first: any failure goes on to the search list.
        return Verdict(Next.CONTINUE, outcome)
    if rc in (Reply.NXDOMAIN, Reply.NODATA, Reply.SERVFAIL):
        return Verdict(Next.CONTINUE, outcome)
    return Verdict(Next.AS_IS, outcome)


def musl_verdict(replies: tuple[Reply, ...]) -> Verdict:
    for r in replies:
        if r in (Reply.TIMEOUT, Reply.SERVFAIL, Reply.CONN_REFUSED, Reply.OTHER):
            # res_msend ignores REFUSED and ICMP errors and keeps waiting, so they end as
            # no answer at all: EAI_AGAIN.
            return Verdict(Next.STOP, Outcome.SERVFAIL if r is Reply.SERVFAIL else Outcome.TIMEOUT)
        if r is Reply.NXDOMAIN:
            return Verdict(Next.CONTINUE, Outcome.NXDOMAIN)
    if Reply.ANSWER in replies:
        return Verdict(Next.STOP, Outcome.ANSWER)
    return Verdict(Next.STOP, Outcome.NODATA)


def verdict(libc: Libc, step: Step, replies: tuple[Reply, ...]) -> Verdict:
    return glibc_verdict(step, replies) if libc is Libc.GLIBC else musl_verdict(replies)


def glibc_final(verdicts: tuple[tuple[Step, Verdict], ...]) -> Outcome:
    """What the application is told when no step answered (the end of
    ``__res_context_search``): the as-is-first name's failure when it was tried first,
    else NODATA if any step had it, else SERVFAIL if any, else the last step's."""
    if not verdicts:
        return Outcome.NXDOMAIN
    first_step, first = verdicts[0]
    if first_step.role is Role.FIRST:
        return first.outcome
    searched = [v.outcome for s, v in verdicts if s.role is Role.SEARCH]
    for o in (Outcome.NODATA, Outcome.SERVFAIL):
        if o in searched:
            return o
    return verdicts[-1][1].outcome


def walk_outcome(libc: Libc, verdicts: tuple[tuple[Step, Verdict], ...]) -> Outcome:
    if verdicts and verdicts[-1][1].outcome is Outcome.ANSWER:
        return Outcome.ANSWER
    if libc is Libc.GLIBC:
        return glibc_final(verdicts)
    return verdicts[-1][1].outcome if verdicts else Outcome.NXDOMAIN


def next_index(steps_: tuple[Step, ...], at: int, v: Verdict) -> int | None:
    """Where the walk goes after step ``at``: None when it ends."""
    if v.next is Next.STOP:
        return None
    if v.next is Next.AS_IS:
        for i in range(at + 1, len(steps_)):
            if steps_[i].role is Role.LAST:
                return i
        return None
    return at + 1 if at + 1 < len(steps_) else None
