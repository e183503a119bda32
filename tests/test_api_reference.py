"""The docs site's API reference and method pages: the front door first, docstrings that render
(Google sections, cross-references instead of Sphinx roles), maths drawn offline, code that fits."""

from __future__ import annotations

import re
from pathlib import Path

import griffe
import yaml

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "docs" / "reference" / "api.md"
SPHINX_ROLE = re.compile(r":(?:func|mod|class|meth|data|attr|exc|obj):`")
MATH_PAGES = ["craft", "crf", "fedoui", "sapef", "fedquad"]
CODE_WIDTH = 88


def _directives() -> list[tuple[str, list[str] | None]]:
    """``(module, members or None)`` of every ``::: module`` block of the API page, in order."""
    out: list[tuple[str, list[str] | None]] = []
    for block in re.split(r"\n(?=::: )", API_PAGE.read_text()):
        m = re.match(r"::: (\S+)", block)
        if m:
            members = re.search(r"members: \[([^\]]*)\]", block)
            names = [n.strip() for n in members.group(1).split(",")] if members else None
            out.append((m.group(1), names))
    return out


def _source(module: str) -> Path:
    path = ROOT / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_the_api_page_starts_with_fedcore_api_and_the_calls_the_library_page_uses():
    first, members = _directives()[0]
    assert first == "fedcore.api"
    used = set(re.findall(r"\b(\w+)\(", (ROOT / "docs" / "python-api.md").read_text()))
    front = {"load_config", "build_config", "federate", "run", "run_tracked", "sweep_runs",
             "load_model"}
    assert front <= used  # the walk-through calls them
    assert members is not None and front <= set(members)


def test_no_sphinx_roles_in_the_docstrings_the_api_page_renders():
    modules = [m for m, _ in _directives()]
    front = griffe.load("fedcore", resolve_aliases=True, resolve_external=False)
    sources = {_source(m) for m in modules}
    for name in dict(_directives())["fedcore.api"] or []:  # the front door's targets too
        sources.add(Path(front["api"][name].filepath))
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted(sources)
             for i, line in enumerate(p.read_text().splitlines(), 1) if SPHINX_ROLE.search(line)]
    assert not found, f"Sphinx roles print literally in mkdocstrings: {found}"


def test_front_door_functions_have_google_args_and_returns():
    package = griffe.load("fedcore", resolve_aliases=True, resolve_external=False)
    missing = []
    for name in dict(_directives())["fedcore.api"] or []:
        obj = package["api"][name]
        sections = {s.kind.value: s for s in obj.docstring.parse("google")}
        params = [p.name for p in obj.parameters if p.name not in ("self", "cls")]
        documented = {p.name.lstrip("*") for p in sections["parameters"].value} if (
            "parameters" in sections) else set()
        lost = [p for p in params if p not in documented]
        if lost or "returns" not in sections:
            missing.append(f"{name}: undocumented {lost}, Returns {'returns' in sections}")
    assert not missing, missing


def test_method_pages_write_maths_for_katex_vendored_not_fetched():
    for page in MATH_PAGES:
        text = (ROOT / "docs" / "methods" / f"{page}.md").read_text()
        assert re.search(r"\$\$\n.+\n\$\$", text) or re.search(r"\$[^$\s][^$]*\$", text), page
    assert "{g : U g = rho}" not in (ROOT / "docs" / "methods" / "craft.md").read_text()
    site = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assets = [*site["extra_javascript"], *site["extra_css"]]
    assert not [a for a in assets if "://" in a]  # no CDN: every script is in docs/
    for asset in assets:
        assert (ROOT / "docs" / asset).is_file(), asset
    assert any(a.endswith("katex.min.js") for a in assets)
    assert any(isinstance(e, dict) and "pymdownx.arithmatex" in e
               for e in site["markdown_extensions"])
    katex = ROOT / "docs" / "assets" / "katex"
    fonts = list((katex / "fonts").glob("*.woff2"))
    css = (katex / "katex.min.css").read_text()
    assert fonts and all((katex / "fonts" / f).is_file()
                         for f in re.findall(r"url\(fonts/([^)]+)\)", css))
    assert sum(f.stat().st_size for f in katex.rglob("*") if f.is_file()) < 1_000_000


def test_code_lines_in_the_docs_fit_without_scrolling():
    too_long = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        fence = None
        for i, line in enumerate(page.read_text().splitlines(), 1):
            m = re.match(r"\s*(`{3,}|~{3,})", line)
            if m and fence is None:
                fence = m.group(1)
            elif m and line.strip().startswith(fence or "\0"):
                fence = None
            elif fence is not None and len(line) > CODE_WIDTH:
                too_long.append(f"{page.relative_to(ROOT)}:{i} ({len(line)})")
    assert not too_long, f"code lines over {CODE_WIDTH} characters: {too_long}"
