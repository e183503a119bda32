"""Issue 24 (layers): module moves and import rewrites, safe to run again and again.

Run from the repository root: ``python moves.py``. It

1. ``git mv``s the edge modules into ``fedcore/pipeline/`` (skipped where already moved);
2. rewrites imports in fedcore/, flows/, tests/, benchmarks/, scripts/, docs/ (Python code and
   prose), mkdocs.yml, prefect.yaml, pyproject.toml, setup.py, README.md:
   ``load_config``/``build_config``/``check_requirements`` from ``fedcore.config`` come from
   ``fedcore.configure``; ``check_device_present``/``gpu_count`` from the core's
   ``fedcore.device_check``; ``check_model`` from ``fedcore.model_check`` (the driver's check,
   out of the models package); every moved module under its new name.

A second run changes nothing (prints "0 files changed").
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
EDGE = "fedcore/pipeline"
MOVED = ("sweep", "sweep_file", "claims", "comparison", "devices", "invocation", "env",
         "extras", "hparams", "stats")  # fedcore/<name>.py -> fedcore/pipeline/<name>.py
TO_CONFIGURE = ("load_config", "build_config", "check_requirements")  # fedcore.config -> configure
TO_DEVICE_CHECK = ("check_device_present", "gpu_count")  # fedcore.devices -> device_check
TO_MODEL_CHECK = ("check_model",)  # fedcore.models.protocol -> fedcore.model_check
WHERE = ("fedcore", "flows", "tests", "benchmarks", "scripts", "docs")
FILES = ("mkdocs.yml", "prefect.yaml", "pyproject.toml", "setup.py", "README.md", "run-tests.sh")
SUFFIXES = (".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".cfg", ".txt")
SKIP = {"moves.py"}

FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<module>[\w.]+) import "
    r"(?:\((?P<paren>[^)]*)\)|(?P<plain>[^\n(]*?))(?P<comment>[ \t]*#[^\n]*)?$",
    re.M,
)


def move_files() -> int:
    """``git mv`` every edge module still in the core namespace; returns how many moved."""
    pkg = ROOT / EDGE
    moved = 0
    if not (pkg / "__init__.py").exists():
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(
            '"""The edges of the pipeline that are neither tracking nor tuning: sweeps, claims,\n'
            "comparisons over seeds, device slots for parallel cells, the optional extra, the\n"
            "environment defaults and how the process was invoked. The core never imports "
            'them."""\n'
        )
        subprocess.run(["git", "add", f"{EDGE}/__init__.py"], cwd=ROOT, check=True)
    for name in MOVED:
        src, dst = ROOT / "fedcore" / f"{name}.py", pkg / f"{name}.py"
        if src.exists() and not dst.exists():
            subprocess.run(["git", "mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT))],
                           cwd=ROOT, check=True)
            moved += 1
        elif src.exists() and dst.exists():
            sys.exit(f"moves.py: both fedcore/{name}.py and {EDGE}/{name}.py exist; merge by hand")
    return moved


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.replace("\n", " ").split(",") if n.strip()]


def _emit(indent: str, module: str, names: list[str], comment: str) -> str:
    line = f"{indent}from {module} import {', '.join(names)}{comment}"
    if len(line) <= 99:
        return line
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {module} import ({comment}\n{body}{indent})"


def _split(match: re.Match[str], source: str, target: str, moving: tuple[str, ...]) -> str:
    """``from source import a, b`` with the names of ``moving`` taken from ``target``."""
    if match["module"] != source:
        return match[0]
    names = _names(match["paren"] if match["paren"] is not None else match["plain"])
    gone = [n for n in names if n.split(" as ")[0].strip() in moving]
    if not gone:
        return match[0]
    kept = [n for n in names if n not in gone]
    indent, comment = match["indent"], match["comment"] or ""
    lines = [_emit(indent, target, gone, comment if not kept else "")]
    if kept:
        lines.insert(0, _emit(indent, source, kept, comment))
    return "\n".join(lines)


def rewrite(text: str) -> str:
    text = FROM_IMPORT.sub(
        lambda m: _split(m, "fedcore.config", "fedcore.configure", TO_CONFIGURE), text)
    text = FROM_IMPORT.sub(
        lambda m: _split(m, "fedcore.models.protocol", "fedcore.model_check", TO_MODEL_CHECK),
        text)
    for devices in ("fedcore.devices", f"{EDGE.replace('/', '.')}.devices"):
        text = FROM_IMPORT.sub(
            lambda m, d=devices: _split(m, d, "fedcore.device_check", TO_DEVICE_CHECK), text)
    for name in MOVED:
        text = re.sub(rf"(?<![\w.])fedcore\.{name}(?![\w])", f"fedcore.pipeline.{name}", text)
        text = re.sub(rf"(?<![\w/])fedcore/{name}\.py\b", f"{EDGE}/{name}.py", text)
        text = re.sub(rf"^(\s*)from fedcore import {name}$",
                      rf"\1from fedcore.pipeline import {name}", text, flags=re.M)
    return text


def files() -> list[Path]:
    found = [ROOT / f for f in FILES if (ROOT / f).is_file()]
    for top in WHERE:
        found += [p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES
                  and "__pycache__" not in p.parts]
    return [p for p in found if p.name not in SKIP]


def sort_imports(paths: list[Path]) -> None:
    """Re-sort the import blocks of the rewritten Python files (ruff's isort rule)."""
    ruff = ROOT / ".venv" / "bin" / "ruff"
    python = [str(p) for p in paths if p.suffix == ".py"]
    if python and ruff.exists():
        subprocess.run([str(ruff), "check", "--fix", "--select", "I", "--quiet", *python],
                       cwd=ROOT, check=False)


def main() -> None:
    moved = move_files()
    changed = []
    for path in files():
        old = path.read_text(encoding="utf-8")
        new = rewrite(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    sort_imports(changed)
    print(f"moves.py: {moved} modules moved, {len(changed)} files changed")


if __name__ == "__main__":
    main()
