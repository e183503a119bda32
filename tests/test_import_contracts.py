"""The import contracts of pyproject.toml ([tool.importlinter], run by `lint-imports` in
run-tests.sh) cover every module, and the schema imports no component (docs/explanation/
architecture.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import fedcore

ROOT = Path(fedcore.__file__).resolve().parent
COMPONENTS = ("fedcore.core.aggregators", "fedcore.core.clients", "fedcore.core.compression",
              "fedcore.core.engines",
              "fedcore.core.round.simulation", "fedcore.core.data", "fedcore.core.models")


def _contract(name: str) -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["id"] == name]
    return dict(contract)


def _listed(contract: dict[str, object]) -> set[str]:
    layers = contract["layers"]
    assert isinstance(layers, list)
    return {m.strip("() ") for layer in layers for m in re.split(r"[|:]", str(layer))}


def _children(folder: Path, prefix: str) -> set[str]:
    found = {f"{prefix}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    return found | {f"{prefix}.{p.parent.name}" for p in folder.glob("*/__init__.py")}


def test_every_module_of_the_package_has_a_layer() -> None:
    """A new top-level module or package of fedcore, or a new package or module of the core,
    must be placed in a layer (else the contracts cannot keep it from importing upwards)."""
    assert sorted(_children(ROOT, "fedcore") - _listed(_contract("edges"))) == []
    core = _contract("core-layers")
    assert core["containers"] == ["fedcore.core"]
    core_listed = {f"fedcore.core.{name}" for name in _listed(core)}
    assert sorted(_children(ROOT / "core", "fedcore.core") - core_listed) == []


def test_the_package_top_level_holds_only_the_entry_modules() -> None:
    """fedcore/ holds the core and the edges as packages; its only modules are the entry points
    (the CLI's ``__main__``, the library API ``api``)."""
    modules = sorted(p.stem for p in ROOT.glob("*.py"))
    assert modules == ["__init__", "__main__", "api"]


def test_the_schema_imports_no_component_and_no_cycle_runs_through_it() -> None:
    """fedcore.core.config and everything it imports are leaves: no component, driver or edge is
    loaded by importing the schema (it was one cycle with 20 modules of the core)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("fedcore", cache_dir=None)  # type-checking imports included
    upstream = graph.find_upstream_modules("fedcore.core.config")
    assert sorted(m for m in upstream if m.startswith(COMPONENTS)) == []
    assert "fedcore.core.config" not in {
        m for u in upstream for m in graph.find_upstream_modules(u)
    }


def _loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    import subprocess
    import sys

    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_cli_and_a_schema_error_load_no_torch():
    """``fedcore --help`` and a config the schema refuses answer before torch (and the
    components) are imported: the registries load on the first component check."""
    code = (
        "from fedcore import cli\n"
        "from fedcore.core.compose.configure import load_config\n"
        "from fedcore.core.config.errors import ConfigError\n"
        "try:\n"
        "    load_config(None, ['rounds=zero'])\n"
        "except ConfigError:\n"
        "    pass\n"
    )
    assert _loaded_after(code, ("torch", "fedcore.core.clients", "fedcore.core.aggregators")) == []


def test_the_tracker_reaches_mlflow_only_through_the_run_store():
    """Importing the tracker and ``run_tracked`` imports no MLflow: every write and query goes
    through ``fedcore.tracking.run_store``, which imports it on first use."""
    code = ("import fedcore.tracking.runner, fedcore.tracking.mlflow_tracker\n"
            "import fedcore.tracking.inputs, fedcore.tracking.models, fedcore.tracking.run_store")
    assert _loaded_after(code, ("mlflow", "sqlalchemy", "pandas")) == []
