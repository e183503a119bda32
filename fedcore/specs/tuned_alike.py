"""Tuned alike: a family whose rows come from studies compares them only when the studies are equal.

A tuned row of a comparison family (``craft (tuned)``: its values chosen by the study the file's
``studies:`` names for its method) is compared only when

- the study scored a validation split (``final/val_*``, ``dataset.val_fraction`` of the global
  test split held out of it), never the test split, and its pruner watched validation too;
- a tuned reference has tuned baselines only (a baseline tuned less is refused);
- tuned rows of one family come from studies with the same search over the shared recipe (the
  same ``local.*`` dimensions and ranges, as many dimensions in all), the same budget
  (``n_trials``, ``timeout``), sampler, pruner, objective and the same fixed settings besides the
  method's own.

And a study's best value at a bound of its range is reported as such (``at_bound``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedcore.core.config import ConfigError
from fedcore.specs.rows import is_tuned

if TYPE_CHECKING:
    from fedcore.specs.families import Family
    from fedcore.specs.study import StudySpec
    from fedcore.specs.study_fields import Param

SHARED = "local."  # the shared recipe: the local optimiser every row runs
BOUND_SHARE = 0.05  # a best value this close to a bound (share of the range, log if searched so)


def _method_key(key: str) -> bool:
    return key == "method" or key.startswith("method.")


def _search(spec: StudySpec) -> dict[str, tuple[Any, ...]]:
    return {p.key: (p.type, p.low, p.high, p.log, p.step, p.choices)
            for p in spec.params if p.key.startswith(SHARED)}


def unequal(a: StudySpec, b: StudySpec) -> str:
    """What differs between two studies' searches (``""`` when they search alike)."""
    checks = [
        ("searched shared-recipe dimensions", _search(a), _search(b)),
        ("number of searched dimensions", len(a.params), len(b.params)),
        ("n_trials", a.n_trials, b.n_trials),
        ("timeout", a.timeout, b.timeout),
        ("sampler", a.sampler, b.sampler),
        ("pruner", a.pruner, b.pruner),
        ("metric", a.metrics, b.metrics),
        ("average_last", a.average_last, b.average_last),
        ("fixed settings besides the method",
         {k: v for k, v in a.fixed.items() if not _method_key(k)},
         {k: v for k, v in b.fixed.items() if not _method_key(k)}),
    ]
    for what, x, y in checks:
        if x != y:
            return what
    return ""


def scores_validation(spec: StudySpec) -> bool:
    """Whether the study scored, and pruned on, the validation split only."""
    from fedcore.specs.study_fields import VALIDATION_METRICS

    watched = spec.pruner.get("metric")
    return (all(m in VALIDATION_METRICS for m in spec.metrics)
            and (spec.pruner.get("type", "none") == "none" or str(watched).startswith("val/")))


def check_families(families: Sequence[Family], row_methods: Mapping[str, str],
                   studies: Mapping[str, StudySpec], where: str) -> None:
    """Refuse, in one line, a family whose tuned rows were not tuned alike on validation."""
    for i, fam in enumerate(families):
        at = f"{where}.families[{i}] ({fam.name})"
        tuned = [r for r in fam.rows if is_tuned(r)]
        if is_tuned(fam.reference):
            less = [b for b in fam.baselines if not is_tuned(b)]
            if less:
                raise ConfigError(f"{at}: the reference {fam.reference!r} is tuned and the "
                                  f"baseline {less[0]!r} is not; a baseline tuned less is no "
                                  "comparison (tune it with the same search, or compare "
                                  "untuned rows)")
        used = []
        for row in tuned:
            study = studies.get(row_methods[row])
            if study is None:
                continue
            if not scores_validation(study):
                raise ConfigError(f"{at}: row {row!r} comes from study {study.name!r}, which "
                                  f"scores {', '.join(study.metrics)}; tuned rows must come "
                                  "from a study scored on the validation split: "
                                  "metric: final/val_accuracy with dataset.val_fraction > 0")
            used.append((row, study))
        for (row_a, a), (row_b, b) in zip(used, used[1:], strict=False):
            diff = unequal(a, b)
            if diff:
                raise ConfigError(f"{at}: rows {row_a!r} and {row_b!r} were tuned unequally "
                                  f"(studies {a.name!r} and {b.name!r} differ in {diff}); "
                                  "tuned rows are compared only with the same search")


def at_bound(param: Param, value: Any) -> str:
    """``local.lr = 0.49 is at the upper bound 0.5 of its range; widen it ...`` (``""``
    inside the range, more than ``BOUND_SHARE`` of it from either bound)."""
    if param.type == "categorical" or param.low is None or param.high is None:
        return ""
    low, high, v = float(param.low), float(param.high), float(value)
    if param.log and low > 0 and v > 0:
        low, high, v = math.log(low), math.log(high), math.log(v)
    share = (v - low) / (high - low) if high > low else 0.5
    if share <= BOUND_SHARE:
        side, bound = "lower", param.low
    elif share >= 1 - BOUND_SHARE:
        side, bound = "upper", param.high
    else:
        return ""
    return (f"{param.key} = {value:.4g} is at the {side} bound {bound:g} of its range; widen it "
            "unless that bound is the parameter's own limit")
