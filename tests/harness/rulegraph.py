"""The rules a promtool scenario needs, out of the rule files it names. `promtool test rules`
evaluates every group of its rule files at every evaluation_interval step, from 0 to the
last eval_time (prometheus.io/docs/prometheus/latest/configuration/unit_testing_rules/;
cmd/promtool/unittest.go), and most of its time is spent parsing and running rules whose
results no check reads (the SLO sources a scenario gives no input for, the probe records no
alert reads): three days at 15 s took minutes.

Prometheus' semantics make dropping such rules exact. Rules see each other only through the
series they write: a recording rule's, and an alerting rule's ALERTS and ALERTS_FOR_STATE
(.../configuration/recording_rules/, .../alerting_rules/), so a rule whose series no check
reads, directly or through other rules, changes no checked value; the others keep their
order and are evaluated at the same steps. And a selector of a series name that nothing
writes selects nothing, which every function, aggregation and operator in EMPTY gives on as
nothing (a binary operation between vectors keeps only matched entries, `or` is empty only
when both sides are: .../querying/operators/), so a rule reading only such series writes
nothing at any step. A rule with anything else (`vector`, `absent`, `time`, a function not
listed, a selector without a name, no series at all) is kept as if it read a live series,
and a rule or check with a selector without a name keeps every rule, as it may read any.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Functions, aggregations and keywords that give nothing from nothing.
# fmt: off
EMPTY = frozenset((
    "rate", "irate", "increase", "delta", "idelta", "deriv", "avg_over_time", "min_over_time",
    "max_over_time", "sum_over_time", "count_over_time", "last_over_time",
    "quantile_over_time", "histogram_quantile", "clamp", "clamp_min", "clamp_max", "abs",
    "ceil", "floor", "round", "sqrt", "exp", "ln", "log2", "log10", "sum", "min", "max",
    "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile", "and", "or",
    "unless", "bool", "offset",
))
# fmt: on
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' r"|'(?:[^'\\]|\\.)*'")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# A number's exponent has its digits: in `1-errors` the number is `1`, not `1-e`.
_TOKEN = re.compile(r"[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[smhdwy]*|([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_ALERTS = re.compile(r"\bALERTS(?:_FOR_STATE)?\b\s*(\{[^}]*\})?")
# A selector's braces and the word before them: no word, or a keyword, is no series name.
_BRACE = re.compile(r"([A-Za-z0-9_:]*)\s*\{")
_KEYWORDS = frozenset(("", "and", "or", "unless", "bool"))
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Reads:
    """What an expression reads: series names, the ALERTS selectors' matchers, whether
    it may give samples from no series at all, and whether it has a selector without a
    name (``anything``: it may read any rule's series)."""

    names: frozenset[str]
    alerts: tuple[tuple[tuple[str, str, str], ...], ...]
    makes: bool
    anything: bool = False


def reads(expr: str) -> Reads:
    alerts = tuple(tuple(_MATCHER.findall(m)) for m in _ALERTS.findall(expr))
    bare = _STRING.sub('""', expr)
    # A selector without a series name ({__name__=~"..."}, after an operator or a keyword
    # too: `x or {a="b"}`) may select anything.
    anything = any(m[1] in _KEYWORDS for m in _BRACE.finditer(bare))
    makes = anything
    bare = _LABEL_LIST.sub(" ", re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare))
    names: set[str] = set()
    for m in _TOKEN.finditer(bare):
        word, call = m.group(1), m.group(2)
        if word is None or word in EMPTY:
            continue
        if call:
            makes = True
        else:
            names.add(word)
    return Reads(frozenset(names), alerts, makes or not names, anything)


def _alert_matches(matchers: Iterable[tuple[str, str, str]], rule: dict[str, Any]) -> bool:
    """Whether ALERTS{matchers} may select this alerting rule's series: only the alert's
    name and its labels without a template are known here, so other labels' matchers never
    exclude."""
    static = {k: str(v) for k, v in rule.get("labels", {}).items() if "{{" not in str(v)}
    known = {**static, "alertname": rule["alert"]}
    for label, op, value in matchers:
        if label not in known:
            continue
        got = known[label]
        hit = re.fullmatch(value, got) is not None if op in ("=~", "!~") else got == value
        if hit != (op in ("=", "=~")):
            return False
    return True


def needed(rule_docs: list[dict[str, Any]], inputs: Iterable[str], checks: Iterable[str]) -> None:
    """Drop, in place, from the rule files' documents every rule no check can see a result
    of, given the series names of the input. Each group keeps its order."""
    rules = [r for doc in rule_docs for g in doc["groups"] for r in g["rules"]]
    info = {id(r): reads(r["expr"]) for r in rules}
    live = set(inputs)
    alive: set[int] = set()
    while True:  # a rule may read what a later group writes
        new = {
            id(r)
            for r in rules
            if id(r) not in alive and (info[id(r)].makes or info[id(r)].names & live)
        }
        if not new:
            break
        alive |= new
        for r in rules:
            if id(r) in new:
                live |= {r["record"]} if "record" in r else {"ALERTS", "ALERTS_FOR_STATE"}
    wanted: set[int] = set()
    todo = [reads(c) for c in checks]
    while todo:
        what = todo.pop()
        for r in rules:
            if id(r) in wanted or id(r) not in alive:
                continue
            if "record" in r:
                hit = what.anything or r["record"] in what.names
            else:
                hit = what.anything or any(_alert_matches(m, r) for m in what.alerts)
            if hit:
                wanted.add(id(r))
                todo.append(info[id(r)])
    for doc in rule_docs:
        for g in doc["groups"]:
            g["rules"] = [r for r in g["rules"] if id(r) in wanted]
        doc["groups"] = [g for g in doc["groups"] if g["rules"]]
