"""The bounded YAML loader: one document, duplicate keys refused, nesting and alias
expansion bounded while composing (before anything recurses), the garbage collector paused
while a large file is built. yaml.YAMLError for every problem."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import yaml

from dnsfleet.config.values import MAX_PREVIEW, preview


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

# Bounds on what one file may ask of the loader. Real configurations are a few levels deep;
# anything far beyond is a mistake or an attack (the file's size: files.MAX_FILE_BYTES).
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
