"""Study YAML: base experiment, search space, objectives, sampler, pruner, storage (no Optuna here).

Everything is validated when the file is loaded, before any trial runs: every search key is
checked by building a config with each of its bounds or choices. Each field is checked by
``fedcore.specs.study_fields``, the storage URL by ``fedcore.specs.study_storage``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.core.component.seeding import TUNING_SEED_MIN
from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError, ExperimentConfig, config_dir, limits, read_yaml
from fedcore.specs.objective import DEFAULT_AVERAGE_LAST, objective_label
from fedcore.specs.study_fields import (
    HEARTBEAT,
    PERSONAL_METRICS,
    Param,
    choice_label,
    mapping_of,
    parse_average_last,
    parse_budget,
    parse_heartbeat,
    parse_objectives,
    parse_param,
    parse_pruner,
    parse_sampler,
)
from fedcore.specs.study_storage import mask_password, resolve_storage
from fedcore.specs.sweep_file import read_base

STUDY_KEYS = (
    "name", "base", "set", "search", "metric", "direction", "average_last", "n_trials",
    "timeout", "sampler", "pruner", "storage", "study_name", "heartbeat",
)
# Study keys a command-line override may set; every other key goes to the base experiment.
OVERRIDABLE = ("n_trials", "timeout", "storage", "study_name", "average_last")
OVERRIDABLE_PREFIXES = ("sampler.", "pruner.", "heartbeat.")


@dataclass(frozen=True)
class StudySpec:
    """A validated study: the base experiment tree, fixed keys, search space and settings."""

    name: str
    study_name: str
    base: dict[str, Any]
    fixed: dict[str, Any]
    params: tuple[Param, ...]
    metrics: tuple[str, ...]
    directions: tuple[str, ...]
    n_trials: int | None
    timeout: float | None
    sampler: dict[str, Any]
    pruner: dict[str, Any]
    storage: str
    heartbeat: dict[str, int] = field(default_factory=lambda: dict(HEARTBEAT))
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)  # as given on the command line
    # a trial's score: the metric's mean over the last k evaluations (fedcore.specs.objective)
    average_last: int = DEFAULT_AVERAGE_LAST

    @property
    def multi_objective(self) -> bool:
        return len(self.metrics) > 1

    @property
    def objective_labels(self) -> tuple[str, ...]:
        """What each objective value is, e.g. "test/accuracy mean of last 5"."""
        return tuple(objective_label(m, self.average_last) for m in self.metrics)

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seed(s) trials run at: the searched ``seed`` values, else the trial config's seed
        (the study's ``set.seed``, or the base experiment's)."""
        searched = next((p for p in self.params if p.key == "seed"), None)
        if searched is None:
            return (self.config_for({p.key: p.candidates()[0] for p in self.params}).seed,)
        if searched.type == "categorical":
            return tuple(sorted({int(c) for c in searched.choices}))
        low, high = searched.bounds()
        seeds = range(int(low), int(high) + 1, int(searched.step or 1))
        limits.check_count("study.search.seed (seeds searched)", len(seeds), limits.SEEDS)
        return tuple(seeds)

    @property
    def budget(self) -> str:
        """The trial budget as text: "30 trials", "600 s" or "30 trials or 600 s"."""
        parts = []
        if self.n_trials is not None:
            parts.append(f"{self.n_trials} trial{'s' if self.n_trials != 1 else ''}")
        if self.timeout is not None:
            parts.append(f"{self.timeout:g} s")
        return " or ".join(parts)

    def overrides_for(self, values: dict[str, Any]) -> dict[str, Any]:
        """Experiment overrides of one trial: the fixed keys, then the sampled values."""
        return {**self.fixed, **values}

    def config_for(self, values: dict[str, Any]) -> ExperimentConfig:
        """The validated experiment config of one trial's config values (not labels)."""
        return build_config(self.base, self.overrides_for(values))

    def values_from_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Optuna's stored params (labels for list choices) -> config values."""
        by_key = {p.key: p for p in self.params}
        out: dict[str, Any] = {}
        for key, value in params.items():
            p = by_key.get(key)
            out[key] = p.from_label(value) if p is not None and p.type == "categorical" else value
        return out

    def storage_label(self) -> str:
        """The storage URL without a password (safe for tags and logs)."""
        return mask_password(self.storage)



def study_names() -> list[str]:
    return sorted(p.stem for p in (config_dir() / "studies").glob("*.yaml"))


def find_study_file(name_or_path: str | Path) -> Path:
    """A path to a study YAML, or the name of one in configs/studies/."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = config_dir() / "studies" / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    raise ConfigError(
        f"study {str(name_or_path)!r}: no such file or shipped study; "
        f"allowed: a path or one of {', '.join(study_names())}"
    )


def split_overrides(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``key=value`` overrides into (study settings, base experiment keys)."""
    study = {
        k: v for k, v in overrides.items()
        if k in OVERRIDABLE or k.startswith(OVERRIDABLE_PREFIXES)
    }
    return study, {k: v for k, v in overrides.items() if k not in study}


def load_study(path: str | Path, overrides: dict[str, Any] | None = None) -> StudySpec:
    """Read and validate a study YAML; ``overrides`` set study keys or base experiment keys."""
    path = find_study_file(path)
    raw = read_yaml(path)
    unknown = sorted(set(raw) - set(STUDY_KEYS))
    if unknown:
        raise ConfigError(f"study: unknown key {unknown[0]!r}; allowed: {', '.join(STUDY_KEYS)}")
    study_over, exp_over = split_overrides(overrides or {})
    for key, value in study_over.items():
        if "." in key:
            section, sub = key.split(".", 1)
            raw[section] = {**(raw.get(section) or {}), sub: value}
        else:
            raw[key] = value
    base = read_base(raw.get("base"), path)
    fixed = raw.get("set") or {}
    if not isinstance(fixed, dict):
        raise ConfigError("study.set: expected a mapping of KEY: value")
    fixed = {**fixed, **exp_over}
    search = mapping_of(raw.get("search"), "study.search")
    params = tuple(parse_param(k, v) for k, v in search.items())
    if not params:
        raise ConfigError("study.search: expected at least one KEY: {type, ...} entry")
    metrics, directions = parse_objectives(raw.get("metric", "final/accuracy"),
                                           raw.get("direction"))
    name = str(raw.get("name") or path.stem)
    spec = StudySpec(
        name=name,
        study_name=str(raw.get("study_name") or name),
        base=base,
        fixed=fixed,
        params=params,
        metrics=metrics,
        directions=directions,
        n_trials=parse_budget(raw.get("n_trials"), "n_trials", int),
        timeout=parse_budget(raw.get("timeout"), "timeout", float),
        sampler=parse_sampler(raw.get("sampler"), len(metrics)),
        pruner=parse_pruner(raw.get("pruner"), directions),
        storage=resolve_storage(raw.get("storage")),
        heartbeat=parse_heartbeat(raw.get("heartbeat")),
        path=path.resolve(),
        overrides=dict(overrides or {}),
        average_last=parse_average_last(raw.get("average_last", DEFAULT_AVERAGE_LAST)),
    )
    if spec.n_trials is None and spec.timeout is None:
        raise ConfigError("study: set n_trials and/or timeout (seconds), e.g. n_trials=20")
    _check_space(spec)
    _check_seeds(spec)
    return spec



def _check_space(spec: StudySpec) -> None:
    """Build a config at each bound / choice of every key (others at their first candidate)."""
    anchor = {p.key: p.candidates()[0] for p in spec.params}
    try:
        _check_personal(spec, spec.config_for(anchor))
    except ConfigError as exc:
        raise ConfigError(f"study: {exc}") from None
    for p in spec.params:
        for value in p.candidates()[1:]:
            try:
                _check_personal(spec, spec.config_for({**anchor, p.key: value}))
            except ConfigError as exc:
                raise ConfigError(f"study.search.{p.key}={choice_label(value)}: {exc}") from None


def _check_seeds(spec: StudySpec) -> None:
    """Trials run at tuning seeds (>= TUNING_SEED_MIN), never at an evaluation seed."""
    low = min(spec.seeds)
    if low >= TUNING_SEED_MIN:
        return
    searched = any(p.key == "seed" for p in spec.params)
    where = "study.search.seed" if searched else "study.set.seed"
    source = "" if searched or "seed" in spec.fixed else " (the base experiment's)"
    raise ConfigError(
        f"{where}: {low}{source} is an evaluation seed; allowed: seeds >= {TUNING_SEED_MIN} "
        f"(studies tune on seeds >= {TUNING_SEED_MIN}, sweeps and claims evaluate on "
        f"0..{TUNING_SEED_MIN - 1}), e.g. set: {{seed: {TUNING_SEED_MIN}}}"
    )


def _check_personal(spec: StudySpec, cfg: ExperimentConfig) -> None:
    """A final/personal_* objective, or a pruner watching personal/*, needs a method with
    personal models (e.g. Ditto)."""
    personal = [("study.metric", m) for m in spec.metrics if m in PERSONAL_METRICS]
    watched = spec.pruner.get("metric", "")
    if watched.startswith("personal/"):
        personal.append(("study.pruner.metric", watched))
    if not personal:
        return
    from fedcore.core.clients.base import REGISTRY

    algorithm = cfg.method.client["algorithm"]
    if not REGISTRY.get(algorithm).personalized:
        allowed = ", ".join(sorted(n for n, c in REGISTRY.classes().items() if c.personalized))
        where, metric = personal[0]
        raise ConfigError(
            f"{where}: {metric} needs a personalised client algorithm, "
            f"method.client.algorithm={algorithm!r} has no personal models; allowed: {allowed}"
        )
