"""Every metric name fedcore records, who emits it and what it means, gathered from the emitters.

A module that records metrics declares them next to the code that emits them, as plain data at
module level: ``EMITTED_METRICS``, a literal mapping of scope to ``{name: meaning}``::

    EMITTED_METRICS = {
        "round": {"afl/lambda_max": "largest mixture weight lambda"},
    }

The catalogue is built from these declarations (the module's path is the emitter). It reads them
from the package's source with ``ast.literal_eval``, importing nothing, so an edge module
(MLflow, Optuna) declares its metrics the same way without the core importing it. The metric
reference of the docs (``docs/reference/metrics.md``) is generated from the catalogue, and
``tests/test_metric_catalogue.py`` checks that every metric a run emits and every metric name
written in the code is declared, and that every declared metric is emitted. A name may hold one
placeholder in angle brackets (``<objective>/fallback_clients``), which matches one path segment
without ``/``. A column of the round's per-client table is declared too, in scope ``client``
(``rejected_by/<stage>``), so a per-client value named with a slash is no undeclared metric.

A module whose run metrics need a setting that no shipped method's default run has (a held-out
split, a stage that rejects, central DP) declares the overrides of a tiny run that emits them,
beside its ``EMITTED_METRICS``::

    EMITTED_WHEN = ["privacy.mechanism=central", "privacy.noise_multiplier=1.0"]

``tests/test_metric_catalogue.py`` runs each shipped method and each declared run.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# The module-level name an emitter declares its metrics under.
DECLARATION = "EMITTED_METRICS"
# The module-level name an emitter declares the overrides of a run that emits its metrics under.
RUN_DECLARATION = "EMITTED_WHEN"
# Scopes: "round" (step = round 1..R of a simulation's run), "summary" (once, at the run's end),
# "client" (a column of a round's per-client table), "sweep" / "study" / "claims" (the parent
# run of that command), "system" (MLflow's monitor).
SCOPES = ("round", "summary", "client", "sweep", "study", "claims", "system")
_HOLE = r"<[a-z_ ]+>"
_NAME = re.compile(rf"([a-z][a-z0-9_]*|{_HOLE})(/([A-Za-z0-9_]+|{_HOLE}))*")


class DeclarationError(ValueError):
    """A module's metric declaration is malformed, or two modules declare the same name."""


@dataclass(frozen=True)
class MetricDoc:
    """One metric name (or pattern), the module that emits it, its scope and its meaning."""

    name: str
    emitter: str
    scope: str
    meaning: str

    def matches(self, metric: str) -> bool:
        return _pattern(self.name).fullmatch(metric) is not None


def _pattern(name: str) -> re.Pattern[str]:
    parts = re.split(_HOLE, name)
    return re.compile("[^/]+".join(re.escape(p) for p in parts))


def package_root() -> Path:
    """The folder of fedcore's top-level package (the catalogue scans it)."""
    top = sys.modules[__name__.partition(".")[0]]
    return Path(next(iter(top.__path__)))


def declaration(module: ast.Module, name: str = DECLARATION) -> ast.expr | None:
    """The value expression of the module-level ``name`` (``EMITTED_METRICS``) of a parsed
    module; None: it declares none."""
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name:
            return value
    return None


def declared(source: str, emitter: str) -> list[MetricDoc]:
    """The metrics a module's ``source`` declares, ``emitter`` its path; a
    ``DeclarationError`` naming the module and the bad entry when one is malformed."""
    value = declaration(ast.parse(source)) if DECLARATION in source else None
    if value is None:
        return []
    try:
        table = ast.literal_eval(value)
    except ValueError as exc:
        raise DeclarationError(f"{emitter}: {DECLARATION} must be a literal "
                               f"{{scope: {{name: meaning}}}} ({exc})") from None
    if not isinstance(table, dict):
        raise DeclarationError(f"{emitter}: {DECLARATION} must be a dict {{scope: {{name: "
                               f"meaning}}}}, not {type(table).__name__}")
    out = []
    for scope, entries in table.items():
        if scope not in SCOPES:
            raise DeclarationError(f"{emitter}: {DECLARATION} scope {scope!r} is not one of "
                                   f"{', '.join(SCOPES)}")
        if not isinstance(entries, dict):
            raise DeclarationError(f"{emitter}: {DECLARATION}[{scope!r}] must be a dict "
                                   f"{{name: meaning}}")
        for name, meaning in entries.items():
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise DeclarationError(f"{emitter}: metric name {name!r} is not lower-case "
                                       f"segments joined by '/' (one may be a <placeholder>)")
            if not isinstance(meaning, str) or not meaning.strip():
                raise DeclarationError(f"{emitter}: metric {name!r} needs its meaning (a "
                                       f"non-empty string)")
            out.append(MetricDoc(name, emitter, scope, meaning))
    return out


def declared_run(source: str, emitter: str) -> tuple[str, ...] | None:
    """The overrides of the run a module's ``source`` declares in ``EMITTED_WHEN`` (None: it
    declares none); a ``DeclarationError`` naming the module when it is not a literal list of
    ``key=value`` strings."""
    value = declaration(ast.parse(source), RUN_DECLARATION) if RUN_DECLARATION in source else None
    if value is None:
        return None
    try:
        overrides = ast.literal_eval(value)
    except ValueError as exc:
        raise DeclarationError(f"{emitter}: {RUN_DECLARATION} must be a literal list of "
                               f"'key=value' strings ({exc})") from None
    if not isinstance(overrides, (list, tuple)) or not overrides or not all(
        isinstance(o, str) and "=" in o for o in overrides
    ):
        raise DeclarationError(f"{emitter}: {RUN_DECLARATION} must be a non-empty list of "
                               f"'key=value' strings")
    return tuple(overrides)


def build_runs(root: Path) -> dict[str, tuple[str, ...]]:
    """The runs the modules under package folder ``root`` declare, by module path."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        emitter = path.relative_to(root.parent).as_posix()
        overrides = declared_run(path.read_text(), emitter)
        if overrides is not None:
            out[emitter] = overrides
    return out


@functools.cache
def runs() -> dict[str, tuple[str, ...]]:
    """Every run an emitter declares (read once per process), by module path."""
    return build_runs(package_root())


def build(root: Path) -> tuple[MetricDoc, ...]:
    """The declarations of every module under package folder ``root``, by module path; a
    ``DeclarationError`` when two modules declare the same name."""
    docs: list[MetricDoc] = []
    for path in sorted(root.rglob("*.py")):
        docs += declared(path.read_text(), path.relative_to(root.parent).as_posix())
    seen: dict[str, str] = {}
    for doc in docs:
        if doc.name in seen:
            raise DeclarationError(f"metric {doc.name!r} is declared by both {seen[doc.name]} "
                                   f"and {doc.emitter}; one module emits it")
        seen[doc.name] = doc.emitter
    return tuple(docs)


@functools.cache
def catalogue() -> tuple[MetricDoc, ...]:
    """Every metric fedcore declares (read once per process)."""
    return build(package_root())


def lookup(metric: str) -> MetricDoc | None:
    """The catalogue entry of ``metric`` (an exact name first, then a pattern); None: unknown."""
    docs = catalogue()
    for doc in docs:
        if doc.name == metric:
            return doc
    for doc in docs:
        if "<" in doc.name and doc.matches(metric):
            return doc
    return None
