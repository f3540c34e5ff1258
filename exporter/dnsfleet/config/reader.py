"""The strict reader: YAML loading (duplicate keys refused), the key-path aware
:class:`Node`, and :class:`ConfigError`, whose message names the file, the line and column,
the key path and the problem (``dnsfleet.yml:7:14: modules.x.timeout: ...``)."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

from dnsfleet.config.locate import Key, find_mark

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration problem, with the file and key path in the message."""


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


def describe(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return f"string {quote(v)}"
    if isinstance(v, int | float):
        return f"{'integer' if isinstance(v, int) else 'number'} {preview(v)}"
    if isinstance(v, dict):
        return "a mapping"
    return "a list" if isinstance(v, list) else type(v).__name__


# Values in messages are cut to this many characters: a message must never grow with the
# value (an alias bomb's list, stringified whole, once took minutes and gigabytes).
MAX_PREVIEW = 80


def preview(v: Any) -> str:
    """``v`` for a message: containers by kind (never walked), scalars cut to MAX_PREVIEW."""
    if isinstance(v, dict | list | tuple | set):
        return describe(v) if isinstance(v, dict | list) else type(v).__name__
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 256:
        return "a very large integer"  # str() of a huge int is quadratic
    s = str(v)
    return s if len(s) <= MAX_PREVIEW else f"{s[:MAX_PREVIEW]}... ({len(s)} characters)"


def quote(v: Any) -> str:
    if isinstance(v, dict | list | tuple | set):
        return preview(v)
    return '"' + preview(v).replace('"', '\\"') + '"'


# Go's time.ParseDuration syntax, as the Prometheus ecosystem writes durations: an optional
# sign, then one or more number+unit parts (`1m30s`, `500us`, `1.5h`); "0" alone is the one
# duration without a unit.
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
_BARE_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")


def parse_duration(value: Any) -> float | None:
    """``500ms``, ``2s``, ``1m30s``, ``-1s``, ``0`` -> seconds, as Go's time.ParseDuration
    reads them. None for anything else: a number without a unit (YAML's ``5`` or ``"5"``:
    is it seconds or milliseconds?), NaN, infinities, units Go does not know (``1d``)."""
    if value == 0 and type(value) is int:  # YAML's 0, as "0"
        return 0.0
    if not isinstance(value, str):
        return None
    text = value.strip()
    sign = 1.0
    if text[:1] in ("-", "+"):
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return sign * total if text and math.isfinite(total) else None


def format_duration(seconds: float) -> str:
    """``seconds`` as Go's time.Duration.String() writes it (``1m30s``, ``500ms``, ``0s``):
    what /config shows, and what :func:`parse_duration` reads back to the same value."""
    ns = round(seconds * 1e9)
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("us", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + _decimal(ns, size) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "")
    return sign + text + _decimal(rest, 1_000_000_000) + "s"


def _decimal(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    digits = f"{frac:0{len(str(size)) - 1}d}".rstrip("0") if frac else ""
    return f"{whole}.{digits}" if digits else str(whole)


def duration_problem(value: Any) -> str:
    """Why ``value`` is no duration, with the likely fix: ``5`` -> did you mean "5s"?"""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, int | float) and not isinstance(text, bool) and math.isfinite(text):
        text = f"{text:g}" if isinstance(text, float) else str(text)
    if isinstance(text, str) and _BARE_NUMBER.fullmatch(text):
        return (
            f"invalid duration {quote(value)}: a duration needs a unit "
            f'(did you mean "{text}s"? units: ns, us, ms, s, m, h)'
        )
    return f"invalid duration {quote(value)} (use a number and a unit: 500ms, 2s, 1m)"


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
                None, None, f"duplicate key {_key_text(key)}", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


def _key_text(key: Any) -> str:
    short = isinstance(key, str | int | float | bool) and len(str(key)) <= MAX_PREVIEW
    return repr(key) if short else preview(key)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _unique_mapping)

# Bounds on what one file may ask of the loader. Real configurations are a few levels deep
# and a 20,000-target file is about 1.5 MB; anything far beyond is a mistake or an attack.
MAX_FILE_BYTES = 16 * 1024 * 1024
# Nesting, aliases followed: libyaml's C composer (PyYAML's CSafeLoader) recurses once per
# level on the C stack and crashes the process (SIGSEGV) near 50,000 levels, so the bound is
# checked on the event stream before any node is built.
MAX_YAML_DEPTH = 64
# Nodes after expanding aliases: "billion laughs" (nine lists of nine aliases to the one
# before, 0.7 kB) expand to 10^9 nodes, which every walk of the value (validation, an error
# message) would visit.
MAX_YAML_NODES = 1_000_000


class _Frame:
    __slots__ = ("anchor", "height", "items", "node", "size")

    def __init__(self, node: yaml.Node, anchor: str | None) -> None:
        self.node = node
        self.anchor = anchor
        self.items: list[yaml.Node] = []
        self.size = 1  # nodes below and including this one, aliases expanded
        self.height = 0  # levels below this one, aliases followed


def _composer_error(problem: str, mark: Any) -> yaml.YAMLError:
    return yaml.composer.ComposerError(None, None, problem, mark)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while. Loading a large file builds hundreds of
    thousands of objects that all stay alive, and the collector's passes over them were
    half the time of loading a 10,000-target file (1.6 s with, 0.8 s without); loading makes
    no cyclic garbage worth collecting meanwhile. The collector is process-wide: it is
    switched back on only by whoever switched it off (two loads at once stay correct)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_yaml(text: str) -> Any:
    """The one document in ``text``, with duplicate keys refused and nesting and alias
    expansion bounded (MAX_YAML_DEPTH, MAX_YAML_NODES) while composing, before anything
    recurses: libyaml's parser produces the events (it keeps its own stack, no recursion),
    this loop composes the nodes (PyYAML's composer, iteratively), the safe constructor
    builds the values. yaml.YAMLError for every problem.

    Composing here instead of in libyaml's C composer costs nothing measurable: both call
    the same Python resolver per scalar, which is most of the time (see docs/design.md,
    "Configuration loader")."""
    with collector_paused():
        return _compose_and_construct(text)


def _compose_and_construct(text: str) -> Any:
    loader = _StrictLoader(text)
    try:
        root = _compose(loader)
        return None if root is None else loader.construct_document(root)
    finally:
        loader.dispose()


def compose_yaml(text: str) -> yaml.Node | None:
    """The node tree of the one document in ``text`` (positions kept), under the same
    bounds as :func:`load_yaml`."""
    loader = _StrictLoader(text)
    try:
        with collector_paused():
            return _compose(loader)
    finally:
        loader.dispose()


def _compose(loader: Any) -> yaml.Node | None:  # noqa: C901, PLR0912, PLR0915 (the bounded composer: one loop over parser events)
    ev = yaml.events
    scalar_event, alias_event = ev.ScalarEvent, ev.AliasEvent
    mapping_start, sequence_start = ev.MappingStartEvent, ev.SequenceStartEvent
    mapping_end, sequence_end = ev.MappingEndEvent, ev.SequenceEndEvent
    scalar_node = yaml.ScalarNode
    get = loader.get_event
    resolve = loader.resolve
    anchors: dict[str, tuple[yaml.Node, int, int]] = {}
    stack: list[_Frame] = []
    root: yaml.Node | None = None
    get()  # StreamStartEvent
    if isinstance(get(), ev.StreamEndEvent):  # else DocumentStartEvent
        return None
    while True:
        e = get()
        t = type(e)
        node: yaml.Node
        if t is scalar_event:
            tag = e.tag
            value = e.value
            if tag is None or tag == "!":
                tag = resolve(scalar_node, value, e.implicit)
            node = scalar_node(tag, value, e.start_mark, e.end_mark, e.style)
            size, height = 1, 0
            if e.anchor is not None:
                if e.anchor in anchors:
                    raise _composer_error(f"found duplicate anchor {e.anchor!r}", e.start_mark)
                anchors[e.anchor] = (node, 1, 0)
        elif t is alias_event:
            found = anchors.get(e.anchor)
            if found is None:
                raise _composer_error(f"found undefined alias {e.anchor!r}", e.start_mark)
            node, size, height = found
        elif t is mapping_start or t is sequence_start:
            kind: type[yaml.MappingNode] | type[yaml.SequenceNode] = (
                yaml.MappingNode if t is mapping_start else yaml.SequenceNode
            )
            tag = e.tag
            if tag is None or tag == "!":
                tag = resolve(kind, None, e.implicit)
            if e.anchor is not None and e.anchor in anchors:
                raise _composer_error(f"found duplicate anchor {e.anchor!r}", e.start_mark)
            collection = kind(tag, [], e.start_mark, None, flow_style=e.flow_style)
            stack.append(_Frame(collection, e.anchor))
            if len(stack) > MAX_YAML_DEPTH:
                raise _composer_error(
                    f"nested more than {MAX_YAML_DEPTH} levels deep", e.start_mark
                )
            continue
        elif t is mapping_end or t is sequence_end:
            frame = stack.pop()
            node = frame.node
            node.end_mark = e.end_mark
            items = frame.items
            if t is mapping_end:
                node.value = list(zip(items[::2], items[1::2], strict=True))
            else:
                node.value = items
            size, height = frame.size, frame.height + 1
            if frame.anchor is not None:
                anchors[frame.anchor] = (node, size, height)
        else:  # DocumentEndEvent
            break
        if not stack:
            root = node
            continue
        top = stack[-1]
        top.items.append(node)
        top.size += size
        if height > top.height:
            top.height = height
            if len(stack) + height > MAX_YAML_DEPTH:
                raise _composer_error(
                    f"nested more than {MAX_YAML_DEPTH} levels deep (aliases followed)",
                    e.start_mark,
                )
        if top.size > MAX_YAML_NODES:
            raise _composer_error(
                f"more than {MAX_YAML_NODES:,} nodes once aliases are expanded (an alias bomb?)",
                e.start_mark,
            )
    following = get()
    if not isinstance(following, ev.StreamEndEvent):
        raise _composer_error("expected a single document in the stream", following.start_mark)
    return root


# What identifies a version of a file: (mtime in ns, size, inode).
FileStamp = tuple[int, int, int]


def file_stamp(st: os.stat_result) -> FileStamp:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_regular_file(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, stamps: dict[str, FileStamp] | None = None
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ConfigError naming the file
    otherwise. Opened without blocking (a FIFO with no writer would block open() and read()
    forever), refused unless it is a regular file (a FIFO, a socket, /dev/urandom, a
    directory), and never read past ``limit``, whatever fstat said the size was.
    ``stamps`` gets the stamp of the very file read (fstat of the open descriptor), so a
    caller can tell later whether the path still holds what it read."""
    path = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file ({_file_kind(st.st_mode)})")
        if st.st_size > limit:
            raise ConfigError(f"{path}: larger than {limit // 2**20} MiB")
        if stamps is not None:
            stamps[path] = file_stamp(st)
        chunks: list[bytes] = []
        total = 0
        while total <= limit:  # the size may have changed since fstat
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise ConfigError(f"{path}: larger than {limit // 2**20} MiB")
    return b"".join(chunks)


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a file"


def read_yaml_mapping(
    path: str | Path, *, stamps: dict[str, FileStamp] | None = None
) -> dict[str, Any] | None:
    """A YAML file whose top level is a mapping (None when empty); ConfigError naming the
    file, and the line and column of a YAML error, otherwise."""
    return read_yaml_source(path, stamps=stamps)[0]


def read_yaml_source(
    path: str | Path, *, stamps: dict[str, FileStamp] | None = None
) -> tuple[dict[str, Any] | None, Source]:
    """:func:`read_yaml_mapping`, and the :class:`Source` that lets the root :class:`Node`
    of the document cite the line and column of what it rejects."""
    path = str(path)
    try:
        text = read_regular_file(path, stamps=stamps).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    try:
        data = load_yaml(text)
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except ValueError as e:  # a constructor's int() of a number past Python's 4,300 digits
        raise ConfigError(f"{path}: invalid YAML: {preview(e)}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    if data is not None and not isinstance(data, dict):
        root = Source(text).root()
        where = f":{root.start_mark.line + 1}:{root.start_mark.column + 1}" if root else ""
        raise ConfigError(
            f"{path}{where}: expected a mapping at the top level, got {describe(data)}"
        )
    return data, Source(text)
