"""The strict reader: YAML loading (duplicate keys refused), the key-path aware
:class:`Node`, and :class:`ConfigError`, whose message names the file, the key path and the
problem."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration problem, with the file and key path in the message."""


class Node:
    """A value at a key path in a config file."""

    __slots__ = ("file", "path", "value")

    def __init__(self, file: str, path: str, value: Any) -> None:
        self.file = file
        self.path = path
        self.value = value

    def error(self, problem: str) -> ConfigError:
        where = f"{self.file}: {self.path}: " if self.path else f"{self.file}: "
        return ConfigError(where + problem)

    def child(self, key: str | int) -> Node:
        path = (
            f"{self.path}[{key}]"
            if isinstance(key, int)
            else (f"{self.path}.{key}" if self.path else str(key))
        )
        return Node(self.file, path, None)

    # -- scalars
    def string(self, *, allow_empty: bool = False) -> str:
        if isinstance(self.value, bool) or not isinstance(self.value, str | int | float):
            raise self.error(f"expected a string, got {describe(self.value)}")
        s = f"{self.value}"
        if not s and not allow_empty:
            raise self.error("must not be empty")
        return s

    def integer(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(f"expected an integer, got {describe(self.value)}")
        if minimum is not None and self.value < minimum:
            raise self.error(f"must be at least {minimum}, got {self.value}")
        if maximum is not None and self.value > maximum:
            raise self.error(f"must be at most {maximum}, got {self.value}")
        return self.value

    def number(self, *, minimum: float | None = None) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise self.error(f"expected a number, got {describe(self.value)}")
        if not math.isfinite(self.value):
            raise self.error(f"expected a finite number, got {self.value}")
        if minimum is not None and self.value < minimum:
            raise self.error(f"must be at least {minimum}, got {self.value}")
        return float(self.value)

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, got {describe(self.value)}")
        return self.value

    def duration(self, *, minimum: float = 0.0, maximum: float | None = None) -> float:
        seconds = parse_duration(self.value)
        if seconds is None:
            raise self.error(
                f"invalid duration {quote(self.value)} (use a number and a unit: 500ms, 2s, 1m)"
            )
        if seconds <= minimum:
            raise self.error(f"duration must be greater than {minimum:g}s")
        if maximum is not None and seconds > maximum:
            raise self.error(f"duration must be at most {maximum:g}s")
        return seconds

    def choice(self, choices: tuple[str, ...]) -> str:
        s = self.string()
        if s not in choices:
            raise self.error(f"{quote(s)} is not one of: {', '.join(choices)}")
        return s

    # -- containers
    def items(self) -> Iterator[tuple[str, Node]]:
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {describe(self.value)}")
        for k, v in self.value.items():
            n = self.child(str(k))
            n.value = v
            yield str(k), n

    def sequence(self) -> list[Node]:
        if self.value is None:
            return []
        if not isinstance(self.value, list):
            raise self.error(f"expected a list, got {describe(self.value)}")
        out = []
        for i, v in enumerate(self.value):
            n = self.child(i)
            n.value = v
            out.append(n)
        return out

    def fields(self) -> Fields:
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {describe(self.value)}")
        return Fields(self)


class Fields:
    """Reads the keys of a mapping; :meth:`done` rejects the keys nobody asked for."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.data: dict[Any, Any] = node.value
        self.seen: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def get(self, key: str) -> Node:
        self.seen.add(key)
        n = self.node.child(key)
        n.value = self.data.get(key)
        return n

    def req(self, key: str) -> Node:
        if not self.has(key):
            self.seen.add(key)
            raise self.node.error(f"missing required key {quote(key)}")
        return self.get(key)

    def opt(self, key: str, default: T, read: Callable[[Node], T]) -> T:
        if not self.has(key):
            self.seen.add(key)
            return default
        return read(self.get(key))

    def done(self, known: tuple[str, ...] = ()) -> None:
        valid = sorted(self.seen | set(known))
        for key in self.data:
            if str(key) not in self.seen and str(key) not in known:
                raise self.node.child(str(key)).error(
                    f"unknown key (valid keys: {', '.join(valid)})"
                )


def describe(v: Any) -> str:
    if v is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        bool: "a boolean",
        str: f"string {quote(v)}",
        int: f"integer {v}",
        float: f"number {v}",
    }.get(type(v), type(v).__name__)


def quote(v: Any) -> str:
    return '"' + str(v).replace('"', '\\"') + '"'


# Go's time.ParseDuration syntax, as the Prometheus ecosystem writes durations: one or more
# number+unit parts, `1m30s`, `500us`, `1.5h`.
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(value: Any) -> float | None:
    """``500ms``, ``2s``, ``1m30s``, ``500us`` -> seconds; a bare number is seconds. None
    for anything else, NaN and infinities included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if text and math.isfinite(total) else None


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loading that refuses duplicate keys, as Go's yaml.v2/v3 strict decoding does
    (the YAML spec says keys are unique; PyYAML keeps the last one silently)."""


def _unique_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable: construct_mapping says so
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _unique_mapping)


def read_yaml_mapping(path: str | Path) -> dict[str, Any] | None:
    """A YAML file whose top level is a mapping (None when empty); ConfigError naming the
    file, and the line and column of a YAML error, otherwise."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    try:
        # libyaml's loader when present: a 1,000-target file composes in a fraction of the
        # time and peak memory of the pure-Python one.
        data = yaml.load(text, Loader=_StrictLoader)
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {describe(data)}")
    return data
