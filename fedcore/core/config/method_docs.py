"""What a shipped method declares of itself for the docs, in the ``docs:`` block of its file in
configs/methods: the name its paper gives it, the paper, its page in docs/methods and (for the
method a page is named after, where the label will not do) the page's title in the site's nav.

The block is no part of the method: ``load_method`` drops it, so it changes no config hash.
``scripts/gen_docs.py`` builds the methods reference, README's table and the nav's method pages
from these declarations; a new method ships with its file and its page, no list edited.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcore.core.config import ConfigError, config_dir, read_yaml

KEY = "docs"  # the block's key in a method file
FIELDS = ("label", "paper", "page", "title")  # title is optional


@dataclass(frozen=True)
class MethodDocs:
    """One method's declaration: ``label`` (its name in the paper, e.g. ``SA-PEF``), ``paper``
    (the citation), ``page`` (``docs/methods/<page>.md``), ``title`` (the page's nav title,
    None: the label)."""

    label: str
    paper: str
    page: str
    title: str | None = None


def method_docs(name: str, folder: Path | None = None) -> MethodDocs | None:
    """The ``docs:`` declaration of ``configs/methods/<name>.yaml`` (None: it has none); a
    one-line ConfigError naming the file and the key when it is malformed."""
    path = (folder or config_dir()) / "methods" / f"{name}.yaml"
    return parse(read_yaml(path, "method file"), name)


def parse(spec: dict[str, Any], name: str) -> MethodDocs | None:
    """The declaration in the ``docs:`` block of method ``name``'s file content ``spec``."""
    block = spec.get(KEY)
    if block is None:
        return None
    where = f"configs/methods/{name}.yaml: {KEY}"
    if not isinstance(block, dict):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(FIELDS)}")
    for key, value in block.items():
        if key not in FIELDS:
            raise ConfigError(f"{where}.{key}: unknown key; allowed: {', '.join(FIELDS)}")
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}.{key}: expected a non-empty string")
    missing = [k for k in FIELDS[:3] if k not in block]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}: missing; required: {', '.join(FIELDS[:3])}")
    return MethodDocs(block["label"], block["paper"], block["page"], block.get("title"))
