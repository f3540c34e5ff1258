"""The strict reader: the key-path aware :class:`Node` each section's reader is handed, its
:class:`Fields`, and :class:`ConfigError`, whose message names the file, the line and column,
the key path and the problem (``dnsfleet.yml:7:14: modules.x.timeout: ...``). The YAML is
loaded by ``yamlload``, files are read by ``files``, values are quoted by ``values``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import yaml

from dnsfleet.config.locate import Key, find_mark
from dnsfleet.config.values import (
    MAX_PREVIEW,
    describe,
    duration_problem,
    parse_duration,
    preview,
    quote,
)
from dnsfleet.config.yamlload import compose_yaml
from dnsfleet.escapes import escape

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration problem, with the file and key path in the message. The message is
    escaped once here (dnsfleet.escapes), whatever part of it came from the file: keys,
    values, YAML's own complaints."""

    def __init__(self, message: str) -> None:
        super().__init__(escape(message))


class Source:
    """The text a configuration was read from. Its node tree (for the line and column of an
    error) is composed again only when an error is reported, and at most once."""

    __slots__ = ("_root", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._root: yaml.Node | bool | None = False

    def root(self) -> yaml.Node | None:
        if self._root is False:
            try:
                self._root = compose_yaml(self.text)
            except (yaml.YAMLError, RecursionError, ValueError):
                self._root = None
        return self._root if isinstance(self._root, yaml.Node) else None


class Node:
    """A value at a key path in a config file."""

    __slots__ = ("file", "key", "parent", "path", "source", "value")

    def __init__(self, file: str, path: str, value: Any, source: Source | None = None) -> None:
        self.file = file
        self.path = path
        self.value = value
        self.source = source
        self.parent: Node | None = None
        self.key: Key | None = None

    def error(self, problem: str, *, at_key: bool = False) -> ConfigError:
        """``problem`` at this node: ``file:line:column: key.path: problem``. ``at_key``:
        the position is the key's (an unknown key), not its value's."""
        where = f"{self.file}{self.position(at_key=at_key)}: "
        return ConfigError(where + (f"{self.path}: " if self.path else "") + problem)

    def position(self, *, at_key: bool = False) -> str:
        """``:line:column`` of this node in its file (1-based, as editors and compilers
        print them), or "" where the file's text is not known (a document built in code)."""
        if self.source is None or self.key is None:
            return ""  # built in code, or the whole document (an empty file has no line)
        keys: list[Key] = []
        node: Node | None = self
        while node is not None and node.key is not None:
            keys.append(node.key)
            node = node.parent
        mark = find_mark(self.source.root(), keys[::-1], at_key=at_key)
        return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""

    def child(self, key: str | int) -> Node:
        shown = key if isinstance(key, int) or len(key) <= MAX_PREVIEW else preview(key)
        path = (
            f"{self.path}[{shown}]"
            if isinstance(shown, int)
            else (f"{self.path}.{shown}" if self.path else str(shown))
        )
        n = Node(self.file, path, None, self.source)
        n.parent = self
        n.key = key
        return n

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
            raise self.error(duration_problem(self.value))
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
                    f"unknown key (valid keys: {', '.join(valid)})", at_key=True
                )
