"""Run names and the ``variant`` / ``cell`` tags that tell every run of a sweep apart.

A run is named ``<method>-<dataset>-a<alpha>-s<seed>``, followed by what else sets it apart:

- a sweep cell: every other value its grid point sets (``craft-digits-a0.1-s0 server_lr=0.7459``),
  with as many digits as the sweep needs to keep its names distinct;
- any other run: the hyperparameters that differ from its method's paper file (tag
  ``hparams_changed``).

Tag ``variant`` is the name without the seed (what a table over seeds groups by, e.g.
``pivot_table(columns="tags.variant")``); a sweep cell's tag ``cell`` is its grid point in full,
its tag ``row`` the row of the report it is a seed of (``fedavg (tuned)``, ``fedavg``), its
regime tags (``hparams``, ...) the regime that row states, and ``family.<name>`` = ``yes`` the
comparison families that judge it.
Parent runs are named per invocation: ``sweep-main-20261202-031500``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedcore.specs.families import Family
    from fedcore.specs.sweep import Cell

FAMILY_TAG = "family."  # + a family's name: "yes" on the runs of the rows it judges
# Grid keys already in the name's stem.
STEM_KEYS = ("method", "dataset.name", "dataset.alpha", "seed")
MAX_NAME = 250  # MLflow's limit on a run name is larger; a longer name is unreadable anyway


def stem(resolved: dict[str, Any]) -> tuple[str, str]:
    """(``<method>-<dataset>-a<alpha>``, ``-s<seed>``) of a resolved config."""
    ds = resolved["dataset"]
    return f"{resolved['method']['name']}-{ds['name']}-a{ds['alpha']}", f"-s{resolved['seed']}"


def _value(v: Any, digits: int | None) -> str:
    if isinstance(v, float) and not isinstance(v, bool):
        return repr(v) if digits is None else f"{v:.{digits}g}"
    return str(v)


def flatten(values: dict[str, Any]) -> dict[str, Any]:
    """Mapping values as dotted keys: ``{"method.client": {"algorithm": "fedprox", "mu": 0.1}}``
    -> ``{"method.client.algorithm": "fedprox", "method.client.mu": 0.1}``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flatten({f"{key}.{k}": v for k, v in value.items()}))
        else:
            out[key] = value
    return out


def _suffix(values: dict[str, Any], digits: int | None) -> str:
    """`` key=value ...`` with each key's last part, or the whole key when two share it; a
    mapping value shows its keys (``{rule: clipavg, clip: 0.5}``: ``rule=clipavg clip=0.5``)."""
    values = flatten(values)
    last = [k.rsplit(".", 1)[-1] for k in values]
    parts = [f"{k if last.count(short) > 1 else short}={_value(v, digits)}"
             for (k, v), short in zip(values.items(), last, strict=True)]
    return "".join(f" {p}" for p in parts)


def name_and_variant(resolved: dict[str, Any], extra: dict[str, Any],
                     digits: int | None = 4) -> tuple[str, str]:
    """The run name and its ``variant`` tag for ``resolved`` with ``extra`` values shown."""
    head, seed = stem(resolved)
    suffix = _suffix(extra, digits)
    return (head + seed + suffix)[:MAX_NAME], (head + suffix)[:MAX_NAME]


def run_identity(resolved: dict[str, Any]) -> tuple[str, str]:
    """Name and variant of a run outside a sweep: the stem and its changed hyperparameters."""
    from fedcore.specs.hparams import hparams_changes, paper_method

    method = resolved["method"]
    changed = hparams_changes(method) if paper_method(str(method["name"])) is not None else {}
    return name_and_variant(resolved, changed)


def cell_identities(cells: list[Cell], families: Sequence[Family] = ()) -> list[dict[str, str]]:
    """Per cell of a sweep: ``run_name`` and the tags ``variant``, ``cell`` and ``row_tags``;
    names are distinct between cells of distinct configs (more digits when 4 significant ones
    tie)."""
    extras = [{k: v for k, v in c.overrides.items() if k not in STEM_KEYS} for c in cells]
    hashes = [c.config.config_hash() for c in cells]
    for digits in (4, 8, None):
        named = [name_and_variant(c.config.resolved(), extra, digits)
                 for c, extra in zip(cells, extras, strict=True)]
        owners: dict[str, set[str]] = {}
        for (name, _), h in zip(named, hashes, strict=True):
            owners.setdefault(name, set()).add(h)
        if all(len(hs) == 1 for hs in owners.values()):
            break
    else:  # values that print alike in full: number the cells of a shared name
        named = [(f"{n} #{i}", v) if len(owners[n]) > 1 else (n, v)
                 for i, (n, v) in enumerate(named)]
    return [{"run_name": name, "variant": variant, "cell": cell.label,
             **row_tags(cell, families)}
            for (name, variant), cell in zip(named, cells, strict=True)]


def row_tags(cell: Cell, families: Sequence[Family] = ()) -> dict[str, str]:
    """A sweep cell's tag ``row`` (its report row's label: ``fedavg (tuned)`` apart from
    ``fedavg``), its regime tags as that row states them (a study's values ``tuned``) and
    ``family.<name>`` = ``yes`` for each family that judges its row at its alpha (MLflow's
    search has no OR: a family's runs are found by this tag)."""
    from fedcore.specs.hparams import regime_tags, row_regime

    resolved = cell.config.resolved()
    alpha = cell.config.dataset.alpha
    member = {f"{FAMILY_TAG}{f.name}": "yes" for f in families
              if cell.row in f.rows and f.alpha in (None, alpha)}
    return {"row": cell.row,
            **regime_tags(resolved, row_regime(resolved, cell.row, cell.overrides)), **member}


def parent_name(kind: str, name: str, when: datetime | None = None) -> str:
    """``<kind>-<name>-<UTC time>``, a name per invocation: ``sweep-main-20261202-031500``."""
    stamp = (when or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{kind}-{name}-{stamp}"
