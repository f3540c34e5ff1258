"""Where a key path is in a YAML file: the line and column a configuration error cites.

Pure functions over PyYAML's composed node tree. The tree is composed again from the file's
text only when an error is reported, so loading a valid file keeps nothing extra alive."""

from __future__ import annotations

from collections.abc import Sequence

import yaml

Key = str | int

# YAML 1.1 spellings the safe constructor turns into booleans and nulls: a key written `on`
# is the Python key True, which the reader prints as "True".
_BOOL_NULL = {
    "True": ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"),
    "False": ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"),
    "None": ("null", "Null", "NULL", "~", ""),
}


def _key_matches(node: yaml.Node, key: str) -> bool:
    if not isinstance(node, yaml.ScalarNode):
        return False
    text = node.value
    if text == key:
        return True
    if node.tag == "tag:yaml.org,2002:int":
        try:
            return str(int(text.replace("_", ""), 0)) == key
        except ValueError:
            return False
    return text in _BOOL_NULL.get(key, ())


def _entry(
    mapping: yaml.MappingNode, key: str, depth: int = 0
) -> tuple[yaml.Node, yaml.Node] | None:
    """The (key node, value node) of ``key`` in ``mapping``, merge keys (``<<``) followed
    as the constructor follows them (own keys first)."""
    for k, v in mapping.value:
        if k.tag != "tag:yaml.org,2002:merge" and _key_matches(k, key):
            return k, v
    if depth > 8:
        return None
    for k, v in mapping.value:
        if k.tag == "tag:yaml.org,2002:merge":
            sources = v.value if isinstance(v, yaml.SequenceNode) else [v]
            for src in sources:
                if isinstance(src, yaml.MappingNode):
                    found = _entry(src, key, depth + 1)
                    if found:
                        return found
    return None


def find_mark(
    root: yaml.Node | None, keys: Sequence[Key], *, at_key: bool = False
) -> yaml.Mark | None:
    """The start of what ``keys`` leads to: a scalar value's own position, a key's position
    when its value is a collection or absent (a block mapping starts on the line after its
    key) or when ``at_key`` (the key itself is wrong), the nearest ancestor's when the path
    leaves the tree (a missing key)."""
    node = root
    mark = root.start_mark if root is not None else None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            entry = _entry(node, str(key))
            if entry is None:
                return mark
            key_node, node = entry
            mark = node.start_mark if isinstance(node, yaml.ScalarNode) else key_node.start_mark
            if at_key or (
                isinstance(node, yaml.ScalarNode) and node.value == "" and node.style is None
            ):
                mark = key_node.start_mark  # the key is wrong, or `key:` has no value
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
            if not 0 <= key < len(node.value):
                return mark
            node = node.value[key]
            mark = node.start_mark
        else:
            return mark
    return mark
