"""The package tree of docs/explanation/architecture.md ("## Layers", which README.md links) is
the package's tree: every package of fedcore/ (and of fedcore/core/) and every module at its
top is listed, and nothing listed is missing, so the pages cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fedcore"


def tree_block(text: str, heading: str) -> str:
    """The first fenced block after ``heading``."""
    start = text.index(heading)
    match = re.search(r"^```\n(.*?)^```", text[start:], re.S | re.M)
    assert match, f"no fenced block after {heading!r}"
    return match.group(1)


def listed_paths(block: str) -> set[str]:
    """Paths the tree names: each line's leading names (``x/``, ``y.py``, comma- or
    space-separated), nested by two-space indentation under the last folder above."""
    paths: set[str] = set()
    parents: list[tuple[int, str]] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip(" "))
        names = []
        for token in line.split():
            token = token.rstrip(",")
            if not re.fullmatch(r"[\w.]+/|[\w.]+\.py", token):
                break
            names.append(token)
        if not names:  # a continuation line of a description
            continue
        while parents and parents[-1][0] >= depth:
            parents.pop()
        prefix = parents[-1][1] if parents else ""
        for name in names:
            paths.add(prefix + name)
        if len(names) == 1 and names[0].endswith("/"):
            parents.append((depth, prefix + names[0]))
    return paths


def package_tree() -> set[str]:
    """fedcore/, its packages and top-level modules, and the packages of fedcore/core/."""
    found = {"fedcore/"}
    for folder in (PACKAGE, PACKAGE / "core"):
        rel = folder.relative_to(ROOT).as_posix() + "/"
        found |= {rel + p.parent.name + "/" for p in folder.glob("*/__init__.py")}
    found |= {f"fedcore/{p.name}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return found


PAGES = [("docs/explanation/architecture.md", "## Layers")]


@pytest.mark.parametrize(("page", "heading"), PAGES)
def test_the_page_lists_the_package_tree(page: str, heading: str) -> None:
    listed = {p for p in listed_paths(tree_block((ROOT / page).read_text(), heading))
              if p.startswith("fedcore/")}
    tree = package_tree()
    assert sorted(tree - listed) == [], f"{page}: packages or modules not in its tree"
    missing = sorted(p for p in listed if not (ROOT / p).exists())
    assert missing == [], f"{page}: its tree names what does not exist"


@pytest.mark.parametrize(("page", "heading"), PAGES)
def test_the_page_names_every_extension_point(page: str, heading: str) -> None:
    text = (ROOT / page).read_text()
    for word in ("stages", "samplers", "callbacks", "compose", "plugins", "six"):
        assert word in text, f"{page} does not mention {word}"
    assert "three parts" not in text


def test_the_parser_reads_nesting_and_lists() -> None:
    block = ("fedcore/        the package\n"
             "  core/         the core\n"
             "    a/ b/       two packages\n"
             "                continued description with words/ in it\n"
             "  api.py, cli/  entry points\n"
             "configs/        not the package\n")
    assert listed_paths(block) == {"fedcore/", "fedcore/core/", "fedcore/core/a/",
                                   "fedcore/core/b/", "fedcore/api.py", "fedcore/cli/",
                                   "configs/"}


def test_the_flows_folder_holds_only_the_deployments_entry_points() -> None:
    """flows/ is not a package: one file per deployment of prefect.yaml, each giving Prefect
    the flow of fedcore.flows (what `prefect deploy` and a worker load)."""
    flows = pytest.importorskip("prefect.flows")
    deployments = (ROOT / "prefect.yaml").read_text()
    entries = re.findall(r"entrypoint:\s*(flows/(\w+)\.py:(\w+))", deployments)
    assert entries
    assert sorted(p.name for p in (ROOT / "flows").glob("*.py")) == sorted(
        f"{stem}.py" for _, stem, _ in entries)
    assert not (ROOT / "flows" / "__init__.py").exists()
    for entry, stem, name in entries:
        flow = flows.load_flow_from_entrypoint(str(ROOT / entry))
        assert (flow.name, flow.fn.__module__) == (name, f"fedcore.flows.{stem}")
