"""The generated docs (scripts/gen_docs.py) match the code, and every document the code cites
exists in the repository.

When a test here fails after you added a config key, a CLI flag, a metric or a method, run
``.venv/bin/python scripts/gen_docs.py`` and commit what it writes."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import create_model

ROOT = Path(__file__).resolve().parents[1]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def committed(path: str) -> str:
    return (ROOT / path).read_text()


def test_generated_pages_are_current() -> None:
    stale = gen.stale(ROOT)
    assert not stale, f"stale generated docs {stale}: run .venv/bin/python scripts/gen_docs.py"


def test_a_new_config_key_makes_the_config_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedcore.core.config

    bigger = create_model("ExperimentConfig", __base__=fedcore.core.config.ExperimentConfig,
                          new_knob=(int, 3))
    monkeypatch.setattr(fedcore.core.config, "ExperimentConfig", bigger)
    with pytest.raises(gen.GenerationError, match="new_knob"):
        gen.config_page()  # a key without a meaning is refused
    monkeypatch.setitem(gen.KEY_MEANINGS, "new_knob", "a new knob")
    page = gen.config_page()
    assert "`new_knob`" in page and page != committed("docs/reference/config.md")


def test_a_new_cli_flag_makes_the_cli_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedcore.cli

    original = fedcore.cli.build_parser

    def with_flag() -> argparse.ArgumentParser:
        parser = original()
        parser.add_argument("--new-flag", action="store_true", help="a new flag")
        return parser

    monkeypatch.setattr(fedcore.cli, "build_parser", with_flag)
    page = gen.cli_page()
    assert "--new-flag" in page and page != committed("docs/reference/cli.md")


def test_a_new_metric_makes_the_metrics_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedcore.core.metrics.catalogue as cat

    extra = cat.MetricDoc("agg/new_metric", "fedcore/core/round/round_phases.py", "round", "new")
    declared = cat.catalogue()
    monkeypatch.setattr(cat, "catalogue", lambda: (*declared, extra))
    page = gen.metrics_page()
    assert "`agg/new_metric`" in page and page != committed("docs/reference/metrics.md")


def test_a_new_method_makes_the_tables_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    files = gen._method_files()
    files["fednew"] = {"name": "fednew", "client": {"algorithm": "fedavg"},
                       "aggregator": {"rule": "fedavg"}, "compression": {"compressor": "none"}}
    monkeypatch.setattr(gen, "_method_files", lambda: files)
    with pytest.raises(gen.GenerationError, match="'fednew' .* declares no docs"):
        gen.methods_page()  # a method without its paper and page is refused
    files["fednew"]["docs"] = {"label": "FedNew", "paper": "New et al., 2027", "page": "nope"}
    with pytest.raises(gen.GenerationError, match=r"methods/nope\.md does not exist"):
        gen.methods_page()
    files["fednew"]["docs"]["page"] = "fedavg"
    assert "`fednew`" in gen.methods_page()
    assert gen.methods_page() != committed("docs/reference/methods.md")
    assert gen.readme_with_table(committed("README.md")) != committed("README.md")
    assert gen.papers()["fednew"] == ("New et al., 2027", "fedavg")


def test_the_nav_lists_each_declared_page_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = gen.nav_pages()
    assert ("Krum, Multi-Krum", "krum") in pages and ("FedAvg", "fedavg") in pages
    assert len({p for _, p in pages}) == len(pages)
    assert [t.casefold() for t, _ in pages] == sorted(t.casefold() for t, _ in pages)
    files = gen._method_files()
    files["multikrum"] = {**files["multikrum"],
                          "docs": {**files["multikrum"]["docs"], "title": "Other"}}
    monkeypatch.setattr(gen, "_method_files", lambda: files)
    with pytest.raises(gen.GenerationError, match="krum.md: its methods declare the titles"):
        gen.nav_pages()


def test_a_new_hyper_parameter_makes_the_methods_page_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedcore.core.aggregators.base import REGISTRY

    cls = REGISTRY.get("fedavg")
    monkeypatch.setattr(cls, "HParams", create_model("HParams", __base__=cls.HParams,
                                                     new_hp=(float, 0.5)))
    page = gen.methods_page()
    assert "`new_hp`" in page and page != committed("docs/reference/methods.md")


# A document named in code: a path under docs/ (or the README), never the design notes that
# live outside the repository.
DOC_PATH = re.compile(r"\b(docs/[A-Za-z0-9_./-]+\.(?:md|png))")
SOURCES = ("fedcore", "flows", "tests", "benchmarks", "scripts", "configs")


def cited_documents() -> list[tuple[str, str]]:
    out = []
    files = [p for d in SOURCES for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".yaml", ".sh", ".md") and p.is_file()]
    for path in [*files, ROOT / "prefect.yaml", ROOT / "mlflow.yml", ROOT / "run-tests.sh"]:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            out += [(m, f"{path.relative_to(ROOT)}:{lineno}") for m in DOC_PATH.findall(line)]
    return out


def test_every_document_the_code_cites_exists() -> None:
    cited = cited_documents()
    assert len(cited) > 50  # the scan reads the rule files' references
    missing = [f"{doc} ({where})" for doc, where in cited if not (ROOT / doc).is_file()]
    assert not missing, f"code cites documents that are not in the repository: {missing}"


def test_code_cites_no_document_outside_the_repository() -> None:
    outside = re.compile(r"\b(DESIGN|METHODS)\.md\b|README ['\"]")
    hits = []
    for d in ("fedcore", "flows", "tests", "benchmarks", "configs", "docs"):
        for path in (ROOT / d).rglob("*"):
            if path.suffix in (".py", ".yaml", ".md") and path != Path(__file__):
                text = path.read_text()
                hits += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in outside.finditer(text)]
    assert not hits, f"cite a page under docs/ instead: {hits}"


def test_where_things_live_is_each_package_by_its_docstring(tmp_path: Path) -> None:
    new = tmp_path / "fedcore" / "core" / "newpkg"
    new.mkdir(parents=True)
    (tmp_path / "fedcore" / "__init__.py").write_text('"""fedcore."""\n')
    (tmp_path / "fedcore" / "core" / "__init__.py").write_text('"""The core. More."""\n')
    (new / "__init__.py").write_text('"""New things: one\nsentence. Then more.\n\nDetail."""\n')
    table = gen.where_things_live(tmp_path)
    assert "| `fedcore/core/newpkg/` | New things: one sentence. |" in table
    assert "| `fedcore/core/` | The core. |" in table
    (new / "__init__.py").write_text("VALUE = 1\n")
    with pytest.raises(gen.GenerationError, match="no docstring"):
        gen.where_things_live(tmp_path)
