"""JSON Schema (draft 2020-12) of dnsfleet.yml, derived from the same dataclass fields and
checks the loader reads with, so editors (yaml-language-server and the like) flag what the
loader would refuse.

The loader remains the authority: rules across keys (a tls:// control needs its three
certificates, a target's module must exist, names unique) are its alone."""

from __future__ import annotations

import argparse
import dataclasses
import json

from dnsfleet.config.checks import JSON, Check, ListOf, MapOf, Section, default_of, yaml_keys
from dnsfleet.config.document import MONITORING_KEYS, Config
from dnsfleet.config.targets import STATS_TYPES, StatsSource

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> JSON:
    defs: dict[str, JSON] = {}
    _collect(Config, defs)
    root = defs.pop(Config.__name__)
    root["anyOf"] = [{"required": [k]} for k in MONITORING_KEYS]
    return {
        "$schema": DIALECT,
        "title": "dnsfleet-exporter configuration (dnsfleet.yml)",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def _collect(cls: type, defs: dict[str, JSON]) -> None:
    if cls.__name__ in defs:
        return
    defs[cls.__name__] = (
        _stats_schema() if cls is StatsSource else _object(cls, [k for k, _, _ in yaml_keys(cls)])
    )
    for _, _, check in yaml_keys(cls):
        for inner in _sections(check):
            _collect(inner, defs)


def _sections(check: Check) -> list[type]:
    if isinstance(check, Section):
        return [check.cls]
    if isinstance(check, ListOf | MapOf):
        return _sections(check.item)
    return []


def _object(cls: type, names: list[str], *, required: tuple[str, ...] = ()) -> JSON:
    props: JSON = {}
    needed = list(required)
    for name, fld, check in yaml_keys(cls):
        if name not in names:
            continue
        prop = check.schema()
        if fld.metadata["doc"]:
            prop = {**prop, "description": fld.metadata["doc"]}
        default = default_of(fld)
        if default is dataclasses.MISSING:
            needed.append(name)
        else:
            if (
                default is not None
                and not isinstance(check, Section)
                and not (isinstance(check, ListOf) and isinstance(check.item, Section))
            ):
                prop = {**prop, "default": check.dump(default)}
            prop = _nullable(prop)
        if fld.metadata["needs"]:
            prop = {
                **prop,
                "description": (
                    prop.get("description", "") + f" (only with {fld.metadata['needs']})"
                ).lstrip(),
            }
        props[name] = prop
    out: JSON = {"type": "object", "properties": props, "additionalProperties": False}
    if needed:
        out["required"] = needed
    dependent = {
        name: [fld.metadata["needs"]]
        for name, fld, _ in yaml_keys(cls)
        if name in names and fld.metadata["needs"]
    }
    if dependent:
        out["dependentRequired"] = dependent
    return out


def _nullable(prop: JSON) -> JSON:
    """An optional key may be written empty (``a_record_limit: null``, ``key:``): the
    loader reads that as unset."""
    if isinstance(prop.get("type"), str):
        return {**prop, "type": [prop["type"], "null"]}
    if "enum" in prop:
        return {**prop, "enum": [*prop["enum"], None]}
    return {"anyOf": [prop, {"type": "null"}]}


def _stats_schema() -> JSON:
    """One variant per set of keys: unbound's control socket, the HTTP readers, and those of
    them that take an API key."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for kind in STATS_TYPES:
        names = tuple(
            name
            for name, fld, _ in yaml_keys(StatsSource)
            if fld.metadata["types"] is None or kind in fld.metadata["types"]
        )
        groups.setdefault(names, []).append(kind)
    variants = []
    for names, kinds in groups.items():
        required = tuple(
            name
            for name, fld, _ in yaml_keys(StatsSource)
            if name in names and fld.metadata["required"]
        )
        variant = _object(StatsSource, list(names), required=required)
        variant["properties"]["type"] = {"enum": kinds}
        variants.append(variant)
    return {"oneOf": variants}


def print_schema(args: argparse.Namespace) -> int:
    """`dnsfleet config-schema` (its flags, none, are declared in cli.py)."""
    del args
    print(render(), end="")
    return 0
