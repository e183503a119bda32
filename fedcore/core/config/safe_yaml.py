"""YAML read within ``fedcore.core.config.limits``: safe types only, no duplicate keys, bounded
aliases.

``load`` parses with PyYAML's safe loader (plain data, no Python objects) and additionally
refuses, with one line naming the source and the line:

- a key given twice in one mapping (PyYAML keeps the last silently);
- more than ``ALIASES`` aliases, a recursive alias, or a document
  that expands (counting each alias where it is used) to more than
  ``NODES`` values: an anchor/alias "bomb" of a few hundred bytes
  otherwise expands to billions;
- nesting deeper than ``DEPTH`` (PyYAML would recurse until it
  fails).

``read_file`` also refuses a file over ``FILE_BYTES`` and one
that is not UTF-8 text, before parsing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fedcore.core.config import limits
from fedcore.core.config.errors import ConfigError

_MERGE = "tag:yaml.org,2002:merge"


class _Refused(yaml.YAMLError):  # type: ignore[misc]  # PyYAML has no type hints
    """Input beyond a limit, at line ``line`` (1-based; 0: unknown)."""

    def __init__(self, message: str, node_or_mark: Any = None) -> None:
        super().__init__(message)
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        self.line = mark.line + 1 if mark is not None else 0


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """The safe loader, counting aliases and depth while composing; no duplicate keys."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > limits.ALIASES:
                raise _Refused(f"more than {limits.ALIASES} aliases (*name)", self.peek_event())
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > limits.DEPTH:
                raise _Refused(f"nested deeper than {limits.DEPTH} levels", self.peek_event())
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}  # key -> line of its first occurrence
        for key_node, _ in node.value:
            if key_node.tag == _MERGE or not isinstance(key_node, ScalarNode):
                continue  # merged keys may be overridden; a complex key: PyYAML's own check
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _Refused(
                    f"duplicate key {limits.shown(key)} (first on line {seen[key]})", key_node
                )
            seen[key] = line
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


def _check_expansion(root: Node) -> None:
    """Refuse a recursive alias, or more than NODES values or DEPTH levels once aliases are
    expanded; iterative, and each distinct node is measured once."""
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) once expanded
    open_: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            open_.discard(id(node))
            parts = [size[id(c)] for c in children]
            values = 1 + sum(p[0] for p in parts)
            depth = 1 + max((p[1] for p in parts), default=0)
            if values > limits.NODES:
                raise _Refused(f"more than {limits.NODES:,} values once aliases are expanded",
                               node)
            if depth > limits.DEPTH:
                raise _Refused(f"nested deeper than {limits.DEPTH} levels once aliases are "
                               "expanded", node)
            size[id(node)] = (values, depth)
            continue
        if id(node) in size:
            continue
        if id(node) in open_:
            raise _Refused("a recursive alias (a node that contains itself)", node)
        open_.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load(text: str, source: str) -> Any:
    """The plain data of the YAML document ``text``; ``source`` names it in errors (e.g.
    ``config file 'x.yaml'``). Raises ``ConfigError`` (one
    line)."""
    loader = None
    try:
        loader = _Loader(text)  # checks for unprintable characters first
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _Refused as exc:
        where = f" line {exc.line}" if exc.line else ""
        raise ConfigError(f"{source}{where}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        first = (str(exc).splitlines() or [""])[0]
        raise ConfigError(f"{source} is not valid YAML{where}: {limits.clip(first)}") from None
    finally:
        if loader is not None:
            loader.dispose()


YAML_SUFFIXES = (".yaml", ".yml")


def read_file(path: str | Path, what: str = "config file") -> Any:
    """``load`` of the file at ``path``: at most FILE_BYTES, UTF-8 (a BOM is allowed).

    Only a regular file whose name, once symbolic links are followed, ends in ``.yaml`` or
    ``.yml`` is read: a link ``base.yaml`` to /etc/shadow, or ``confirms: /etc/shadow``, had
    the secret's first line echoed as an unknown key."""
    p = Path(path)
    source = f"{what} {limits.shown(str(p))}"
    try:
        if not p.is_file():
            raise ConfigError(f"{source} does not exist")
        target = p.resolve()
        if target.suffix.lower() not in YAML_SUFFIXES:
            link = f" (a link to {limits.shown(target.name)})" if target.name != p.name else ""
            raise ConfigError(f"{source}{link} is not a .yaml or .yml file; allowed: a YAML "
                              "file named *.yaml or *.yml")
        if p.stat().st_size > limits.FILE_BYTES:
            raise ConfigError(f"{source} is {p.stat().st_size:,} bytes; at most "
                              f"{limits.FILE_BYTES:,} allowed")
        blob = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source} cannot be read: {exc.strerror or exc}") from None
    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source} is not UTF-8 text (byte 0x{blob[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None
    return load(text, source)
