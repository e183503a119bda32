"""Check every cross-reference to fedcore's API in docstrings and docs pages, in seconds.

A reference is mkdocstrings' `` [`text`][fedcore.module.Object] `` (or ``[fedcore.x][]``). Each
must name an object that exists (read statically by griffe, as the docs build reads it) and
that a ``::: module`` directive of a docs page renders, or ``mkdocs build --strict`` fails on
it later. Run first by ``./run-tests.sh``, so a moved class fails the suite in its first
seconds with the file and line of each stale reference:

    .venv/bin/python scripts/check_refs.py [ROOT]

Exit 0 when every reference resolves, 1 with one line per stale reference otherwise.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import griffe
import yaml

# [text][target] and [target][] (autorefs' two forms); the target a dotted fedcore path
REFERENCE = re.compile(
    r"\]\[(?P<target>fedcore(?:\.\w+)*)\]|\[`?(?P<bare>fedcore(?:\.\w+)*)`?\]\[\]"
)
DIRECTIVE = re.compile(r"^::: (?P<path>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+.*\n?)*)", re.M)
SOURCE_FOLDERS = ("fedcore", "flows")
# code, where autorefs resolves nothing: fenced blocks, then inline spans of one or more backticks
FENCE = re.compile(r"^([ \t]*)(```|~~~).*?^\1\2[ \t]*$", re.S | re.M)
SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


@dataclass(frozen=True)
class Reference:
    """One cross-reference: where it is written and what it names."""

    file: Path
    line: int
    target: str


def references(root: Path) -> Iterator[Reference]:
    """Every fedcore cross-reference in the package's sources and the docs pages."""
    files = [p for folder in SOURCE_FOLDERS for p in sorted((root / folder).rglob("*.py"))]
    files += sorted((root / "docs").rglob("*.md"))
    for path in files:
        text = _without_code(path.read_text(encoding="utf-8"))
        for match in REFERENCE.finditer(text):
            target = match.group("target") or match.group("bare")
            yield Reference(path.relative_to(root), text.count("\n", 0, match.start()) + 1, target)


def _without_code(text: str) -> str:
    """``text`` with its code blanked (newlines kept, so line numbers stay), the example
    references a page shows as code are not references."""

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    return SPAN.sub(lambda m: blank(m) if "][" in m.group(2) else m.group(0),
                    FENCE.sub(blank, text))


def _directives(root: Path) -> Iterator[tuple[str, list[str] | None]]:
    """Each ``::: path`` of the docs pages with its ``members:`` list (None: all members)."""
    for page in sorted((root / "docs").rglob("*.md")):
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            options = yaml.safe_load(match.group("options") or "") or {}
            members = (options.get("options") or {}).get("members") if options else None
            yield match.group("path"), members if isinstance(members, list) else None


def _descendants(obj: griffe.Object | griffe.Alias, prefix: str) -> Iterator[str]:
    """``prefix`` and the public members under it (the docs build's filter ``!^_``)."""
    yield prefix
    if isinstance(obj, griffe.Alias) or obj.is_module and prefix.count(".") > 8:
        return
    for name, member in obj.members.items():
        if not name.startswith("_") and not isinstance(member, griffe.Alias):
            yield from _descendants(member, f"{prefix}.{name}")


def rendered(root: Path, package: griffe.Module) -> set[str]:
    """The identifiers the docs pages render, so a reference to them becomes a link."""
    found: set[str] = set()
    for path, members in _directives(root):
        obj = _lookup(package, path)
        if obj is None:
            continue
        found.add(path)
        for name in members if members is not None else list(obj.members):
            member = obj.members.get(name)
            if member is None or (members is None and name.startswith("_")):
                continue
            if isinstance(member, griffe.Alias):
                found.add(f"{path}.{name}")
                continue
            found.update(_descendants(member, f"{path}.{name}"))
    return found


def _lookup(package: griffe.Module, path: str) -> griffe.Object | griffe.Alias | None:
    if path == package.path:
        return package
    try:
        return package[path.removeprefix(package.path + ".")]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def stale(root: Path) -> list[str]:
    """One message per reference that does not resolve, with its file and line."""
    package = griffe.load(root / "fedcore", search_paths=[str(root)], allow_inspection=False)
    shown = rendered(root, package)
    messages = []
    for ref in references(root):
        where = f"{ref.file}:{ref.line}"
        if _lookup(package, ref.target) is None:
            messages.append(f"{where}: `{ref.target}` does not exist (moved or renamed?)")
        elif ref.target not in shown:
            messages.append(
                f"{where}: `{ref.target}` exists but no `:::` directive in docs/ renders it "
                "(docs/reference/api.md)"
            )
    return messages


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else Path(__file__).resolve().parent.parent
    messages = stale(root)
    for message in messages:
        print(message)
    if messages:
        print(f"check_refs: {len(messages)} stale cross-reference(s) to fedcore's API")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
