"""One validator per concept, shared by every section that has a key of that kind: the
machinery, the generic scalars and the containers here; the domain's concepts (DNS names,
rcodes, labels, networks, URLs, ...) in :mod:`~dnsfleet.config.concepts`.

A :class:`Check` does three things with one key: reads it from a :class:`Node` (raising a
:class:`ConfigError` with the file, key path and problem), says what JSON Schema allows
there, and writes the value back for the effective configuration (/config). Dataclass
fields carry their check in their metadata (:func:`key`); the field default is the one
place a default is written. :func:`read_keys`, :mod:`~dnsfleet.config.dump` and
:mod:`~dnsfleet.config.schema` all walk ``dataclasses.fields``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from dnsfleet.config.reader import Fields, Node
from dnsfleet.config.values import format_duration

T = TypeVar("T")
JSON = dict[str, Any]
SECRET = "<secret>"


class Check:
    """Reads, describes (JSON Schema) and writes back the value of one key."""

    def read(self, node: Node) -> Any:
        raise NotImplementedError

    def schema(self) -> JSON:
        raise NotImplementedError

    def dump(self, value: Any) -> Any:
        return value


def key(
    check: Check,
    *,
    doc: str = "",
    name: str | None = None,
    secret: bool = False,
    omit: Any = None,
    needs: str | None = None,
    types: frozenset[str] | None = None,
    required: bool = False,
) -> Mapping[str, Any]:
    """Field metadata making a dataclass field a YAML key.

    ``doc``: what the key means (the schema's description). ``name``: the YAML key when it
    differs from the field name. ``secret``: /config shows ``<secret>`` instead of the
    value. ``omit``: a value /config leaves out (None always is). ``needs``: another key
    this one is only meaningful with (refused without it, left out of /config then).
    ``types``: for :class:`~dnsfleet.config.targets.StatsSource`, the ``type`` values the key
    belongs to; ``required``: required where it belongs (the key has a default elsewhere).
    """
    return {
        "check": check,
        "doc": doc,
        "name": name,
        "secret": secret,
        "omit": omit,
        "needs": needs,
        "types": types,
        "required": required,
    }


YamlKeys = tuple[tuple[str, dataclasses.Field[Any], Check], ...]
_YAML_KEYS: dict[type, YamlKeys] = {}


def yaml_keys(cls: type) -> YamlKeys:
    """The YAML keys of a section's dataclass, in field order: (key, field, check)."""
    keys = _YAML_KEYS.get(cls)
    if keys is None:  # once per class: a 20,000-target file asks 20,000 times
        keys = _YAML_KEYS[cls] = tuple(
            (f.metadata["name"] or f.name, f, f.metadata["check"])
            for f in dataclasses.fields(cls)
            if "check" in f.metadata
        )
    return keys


def dump_section(obj: Any) -> dict[str, Any]:
    """A section's keys as YAML data: None (unset) and ``omit`` values left out, secrets
    redacted."""
    out: dict[str, Any] = {}
    for name, fld, check in yaml_keys(type(obj)):
        value = getattr(obj, fld.name)
        needs = fld.metadata["needs"]
        if (
            value is None
            or (fld.metadata["omit"] is not None and value == fld.metadata["omit"])
            or (needs is not None and getattr(obj, needs) is None)
        ):
            continue
        out[name] = SECRET if fld.metadata["secret"] else check.dump(value)
    return out


def default_of(fld: dataclasses.Field[Any]) -> Any:
    if fld.default is not dataclasses.MISSING:
        return fld.default
    if fld.default_factory is not dataclasses.MISSING:
        return fld.default_factory()
    return dataclasses.MISSING


def read_keys(
    f: Fields,
    cls: type,
    *,
    only: Callable[[str], bool] = lambda _: True,
    skip: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Reads every key of ``cls`` (except ``skip``, and those ``only`` refuses) into field
    name -> value, defaults from the dataclass fields; required keys are those without."""
    out: dict[str, Any] = {}
    for name, fld, check in yaml_keys(cls):
        if name in skip or not only(name):
            continue
        if f.has(name):
            out[fld.name] = check.read(f.get(name))
        else:
            default = default_of(fld)
            if default is dataclasses.MISSING:
                f.req(name)  # raises: missing required key
            f.seen.add(name)
            out[fld.name] = default
    return out


def check_needs(f: Fields, obj: Any) -> None:
    """Refuses a key given without the key it is only meaningful with."""
    for name, fld, _ in yaml_keys(type(obj)):
        needs = fld.metadata["needs"]
        if needs is not None and getattr(obj, needs) is None and f.has(name):
            raise f.get(name).error(f"only meaningful with {needs}")


def read_section(node: Node, cls: type[T]) -> T:
    """A section with no rules across its keys: each key read by its check, then unknown
    keys refused."""
    f = node.fields()
    obj = cls(**read_keys(f, cls))
    f.done()
    return obj


# --------------------------------------------------------------------------- scalars


@dataclasses.dataclass(frozen=True)
class String(Check):
    allow_empty: bool = False

    def read(self, node: Node) -> str:
        return node.string(allow_empty=self.allow_empty)

    def schema(self) -> JSON:
        return {"type": "string"} if self.allow_empty else {"type": "string", "minLength": 1}


@dataclasses.dataclass(frozen=True)
class Integer(Check):
    minimum: int | None = None
    maximum: int | None = None

    def read(self, node: Node) -> int:
        return node.integer(minimum=self.minimum, maximum=self.maximum)

    def schema(self) -> JSON:
        s: JSON = {"type": "integer"}
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        return s


@dataclasses.dataclass(frozen=True)
class Number(Check):
    """A finite number: YAML's .nan and .inf are refused (JSON has neither)."""

    minimum: float | None = None

    def read(self, node: Node) -> float:
        return node.number(minimum=self.minimum)

    def schema(self) -> JSON:
        return (
            {"type": "number"}
            if self.minimum is None
            else {"type": "number", "minimum": self.minimum}
        )


class Boolean(Check):
    def read(self, node: Node) -> bool:
        return node.boolean()

    def schema(self) -> JSON:
        return {"type": "boolean"}


# Go's time.ParseDuration syntax (values.parse_duration), for editors.
DURATION_PATTERN = r"^\s*[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)\s*$"


@dataclasses.dataclass(frozen=True)
class Duration(Check):
    """Seconds, written as a Go duration (``500ms``, ``1m30s``; a number needs its unit,
    as in Go's time.ParseDuration, ``0`` alone excepted); greater than ``minimum``, at most
    ``maximum``."""

    maximum: float | None = None
    minimum: float = 0.0

    def read(self, node: Node) -> float:
        return node.duration(minimum=self.minimum, maximum=self.maximum)

    def dump(self, value: Any) -> Any:
        return format_duration(value)

    def schema(self) -> JSON:
        # A pattern cannot say "greater than"; the loader checks the bounds. YAML's bare 0
        # is Go's "0".
        text: JSON = {"type": "string", "pattern": DURATION_PATTERN}
        return {"oneOf": [text, {"const": 0}]} if self.minimum < 0 else text


@dataclasses.dataclass(frozen=True)
class Choice(Check):
    choices: tuple[str, ...]

    def read(self, node: Node) -> str:
        return node.choice(self.choices)

    def schema(self) -> JSON:
        return {"enum": list(self.choices)}


# --------------------------------------------------------------------------- containers


@dataclasses.dataclass(frozen=True)
class Section(Check):
    """A mapping read into the dataclass ``cls`` by ``parse``; written back key by key."""

    cls: type
    parse: Callable[[Node], Any] | None = None  # None: the owner reads it, with context

    def read(self, node: Node) -> Any:
        if self.parse is None:
            raise NotImplementedError(f"{self.cls.__name__} is read by its owner")
        return self.parse(node)

    def schema(self) -> JSON:
        return {"$ref": f"#/$defs/{self.cls.__name__}"}

    def dump(self, value: Any) -> Any:
        return dump_section(value)


@dataclasses.dataclass(frozen=True)
class ShortSection(Section):
    """A section that may also be written as its one required key's value (``- web`` for
    ``- {name: web}``)."""

    short: Check | None = None

    def schema(self) -> JSON:
        assert self.short is not None
        return {"oneOf": [self.short.schema(), super().schema()]}


@dataclasses.dataclass(frozen=True)
class ListOf(Check):
    item: Check
    # Reads the whole list when its items must be checked against each other.
    whole: Callable[[Node], tuple[Any, ...]] | None = None

    def read(self, node: Node) -> tuple[Any, ...]:
        if self.whole is not None:
            return self.whole(node)
        return tuple(self.item.read(n) for n in node.sequence())

    def schema(self) -> JSON:
        return {"type": "array", "items": self.item.schema()}

    def dump(self, value: Any) -> Any:
        return [self.item.dump(v) for v in value]


@dataclasses.dataclass(frozen=True)
class MapOf(Check):
    """A mapping of names to sections; ``item`` is read by the caller, which knows the name."""

    item: Check

    def read(self, node: Node) -> Any:
        raise NotImplementedError("read by the section that owns it")

    def schema(self) -> JSON:
        return {"type": "object", "additionalProperties": self.item.schema()}

    def dump(self, value: Any) -> Any:
        return {k: self.item.dump(v) for k, v in value.items()}
