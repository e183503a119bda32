"""Study YAML: base experiment, search space, objectives, sampler, pruner, storage (no Optuna here).

Everything is validated when the file is loaded, before any trial runs: every search key is
checked by building a config with each of its bounds or choices.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedcore.core.component.seeding import TUNING_SEED_MIN
from fedcore.core.compose.configure import build_config
from fedcore.core.config import (
    ConfigError,
    ExperimentConfig,
    config_dir,
    limits,
    project_root,
    read_yaml,
)
from fedcore.pipeline.objective import DEFAULT_AVERAGE_LAST, objective_label
from fedcore.pipeline.sweep_file import read_base

# A personalised method's personal models (fedcore.core.callbacks.personal.personal_summary).
PERSONAL_METRICS = (
    "final/personal_accuracy_mean",
    "final/personal_accuracy_worst10",
    "final/personal_accuracy_std",
    "final/personal_jain",
)
# What a trial can be scored on: the keys of the run's summary
# (fedcore.core.callbacks.summary.summarize).
SUMMARY_METRICS = (
    "final/accuracy",
    "final/accuracy_worst10",
    "final/accuracy_mean_clients",
    "final/accuracy_std",
    "final/loss",
    "auc/accuracy",
    "final/val_accuracy",
    "final/val_loss",
    *PERSONAL_METRICS,
)
# What a trial scored on the validation split (dataset.val_fraction of the global test split,
# held out of it): the only scores tuned rows of a comparison may come from
# (fedcore.pipeline.sweep.tuning_studies).
VALIDATION_METRICS = ("final/val_accuracy", "final/val_loss")
DIRECTIONS = ("maximize", "minimize")
# Per-round metrics a pruner may watch, with the direction in which they improve.
ROUND_METRICS = {
    "test/accuracy": "maximize",
    "clients/accuracy_mean": "maximize",
    "clients/accuracy_worst10": "maximize",
    "test/loss": "minimize",
    "val/accuracy": "maximize",
    "val/loss": "minimize",
    "personal/accuracy_mean": "maximize",  # personalised methods (Ditto): their personal models
    "personal/accuracy_worst10": "maximize",
}
SAMPLERS = ("tpe", "nsga2", "random")
PRUNERS = ("none", "median", "percentile", "hyperband", "threshold")
PARAM_TYPES = ("float", "int", "categorical")
STUDY_KEYS = (
    "name", "base", "set", "search", "metric", "direction", "average_last", "n_trials",
    "timeout", "sampler", "pruner", "storage", "study_name", "heartbeat",
)
# Study keys a command-line override may set; every other key goes to the base experiment.
OVERRIDABLE = ("n_trials", "timeout", "storage", "study_name", "average_last")
OVERRIDABLE_PREFIXES = ("sampler.", "pruner.", "heartbeat.")
# Optuna's heartbeat: a running trial records one every ``interval`` s; a trial whose last one
# is older than ``grace_period`` s (its process died) is failed by the next process that asks
# for a trial and re-run with the same parameters up to ``max_retry`` times.
HEARTBEAT = {"interval": 10, "grace_period": 60, "max_retry": 1}
DEFAULT_STORAGE_FILE = "optuna.db"


@dataclass(frozen=True)
class Param:
    """One search dimension over a dotted config key."""

    key: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def candidates(self) -> list[Any]:
        """The values that bound this dimension (checked against the config before any trial)."""
        if self.type == "categorical":
            return list(self.choices)
        cast = int if self.type == "int" else float
        return [cast(bound) for bound in self.bounds()]

    def bounds(self) -> tuple[float, float]:
        """(low, high) of a numeric dimension."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.key}: a {self.type} parameter has no bounds")
        return self.low, self.high

    def choice_labels(self) -> list[Any]:
        """Categorical choices as Optuna stores them: scalars as is, lists as YAML flow text."""
        return [choice_label(c) for c in self.choices]

    def from_label(self, label: Any) -> Any:
        """The config value of a categorical label (inverse of ``choice_labels``)."""
        for choice in self.choices:
            if choice_label(choice) == label:
                return copy.deepcopy(choice)
        raise ConfigError(f"study.search.{self.key}: {label!r} is not one of its choices")


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
    # a trial's score: the metric's mean over the last k evaluations (fedcore.pipeline.objective)
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


def choice_label(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def mask_password(url: str) -> str:
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")  # with an optional driver: mysql+pymysql


def default_storage() -> str:
    return f"sqlite:///{project_root() / DEFAULT_STORAGE_FILE}"


def resolve_storage(url: str | None) -> str:
    """None -> the project's SQLite file; a relative SQLite path is relative to the project."""
    if not url:
        return default_storage()
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"study.storage: expected an SQLAlchemy URL such as sqlite:///optuna.db or "
            f"postgresql://user:pw@host/db (got {url!r})"
        )
    scheme = url.split("://", 1)[0].split("+", 1)[0]
    if scheme not in STORAGE_SCHEMES:
        raise ConfigError(
            f"study.storage: unknown scheme {scheme[:40]!r} in {mask_password(url)[:200]!r}; "
            f"allowed: {', '.join(STORAGE_SCHEMES)} (e.g. sqlite:///optuna.db)"
        )
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return "sqlite:///" + str((project_root() / url.removeprefix("sqlite:///")).resolve())
    return url


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
    params = tuple(_param(k, v) for k, v in _mapping(raw.get("search"), "study.search").items())
    if not params:
        raise ConfigError("study.search: expected at least one KEY: {type, ...} entry")
    metrics, directions = _objectives(raw.get("metric", "final/accuracy"), raw.get("direction"))
    name = str(raw.get("name") or path.stem)
    spec = StudySpec(
        name=name,
        study_name=str(raw.get("study_name") or name),
        base=base,
        fixed=fixed,
        params=params,
        metrics=metrics,
        directions=directions,
        n_trials=_budget(raw.get("n_trials"), "n_trials", int),
        timeout=_budget(raw.get("timeout"), "timeout", float),
        sampler=_sampler(raw.get("sampler"), len(metrics)),
        pruner=_pruner(raw.get("pruner"), directions),
        storage=resolve_storage(raw.get("storage")),
        heartbeat=_heartbeat(raw.get("heartbeat")),
        path=path.resolve(),
        overrides=dict(overrides or {}),
        average_last=_average_last(raw.get("average_last", DEFAULT_AVERAGE_LAST)),
    )
    if spec.n_trials is None and spec.timeout is None:
        raise ConfigError("study: set n_trials and/or timeout (seconds), e.g. n_trials=20")
    _check_space(spec)
    _check_seeds(spec)
    return spec


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping")
    return value


def _param(key: str, raw: Any) -> Param:
    where = f"study.search.{key}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with type: {'|'.join(PARAM_TYPES)}")
    kind = raw.get("type")
    if kind not in PARAM_TYPES:
        raise ConfigError(f"{where}.type: unknown {kind!r}; allowed: {', '.join(PARAM_TYPES)}")
    allowed = {"categorical": {"type", "choices"}}.get(kind, {"type", "low", "high", "log", "step"})
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ConfigError(
            f"{where}: unknown key {extra[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )
    if kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}.choices: expected a non-empty list of values")
        labels = [choice_label(c) for c in choices]
        if len(set(map(repr, labels))) != len(labels):
            raise ConfigError(f"{where}.choices: duplicate choices in {choices}")
        return Param(key, kind, choices=tuple(choices))
    number = int if kind == "int" else (int, float)
    low, high = (_bound(f"{where}.{b}", raw.get(b), kind) for b in ("low", "high"))
    if low > high:
        raise ConfigError(f"{where}: low={low} > high={high}; expected low <= high")
    log = bool(raw.get("log", False))
    if log and low <= 0:
        raise ConfigError(f"{where}: log=true needs low > 0 (got low={low})")
    step = raw.get("step")
    if step is not None and (not isinstance(step, number) or step <= 0 or log
                             or not math.isfinite(step)):
        raise ConfigError(f"{where}.step: expected a positive number, and no log (got {step!r})")
    return Param(key, kind, low=low, high=high, log=log, step=step)


def _bound(where: str, value: Any, kind: str) -> float:
    """A search bound: a finite number (an int for an int parameter)."""
    number = int if kind == "int" else (int, float)
    if not isinstance(value, number) or isinstance(value, bool):
        what = "an int" if kind == "int" else "a number"
        raise ConfigError(f"{where}: expected {what} (got {value!r})")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number (got {value!r})")
    return value


def _objectives(metric: Any, direction: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    metrics = tuple(metric) if isinstance(metric, list) else (metric,)
    if not metrics:
        raise ConfigError(f"study.metric: expected one or more of {', '.join(SUMMARY_METRICS)}")
    for m in metrics:
        if m not in SUMMARY_METRICS:
            raise ConfigError(
                f"study.metric: unknown metric {m!r}; allowed: {', '.join(SUMMARY_METRICS)}"
            )
    if direction is None:
        direction = ["minimize" if m in ("final/loss", "final/accuracy_std", "final/val_loss")
                     else "maximize"
                     for m in metrics]
    directions = tuple(direction) if isinstance(direction, list) else (direction,)
    if len(directions) != len(metrics):
        raise ConfigError(
            f"study.direction: {len(directions)} direction(s) for {len(metrics)} metric(s); "
            "expected one direction per metric"
        )
    for d in directions:
        if d not in DIRECTIONS:
            raise ConfigError(f"study.direction: unknown {d!r}; allowed: {', '.join(DIRECTIONS)}")
    return metrics, directions


def _budget(value: Any, key: str, cast: type) -> Any:
    if value is None:
        return None
    if (
        isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
        or not math.isfinite(value)
    ):
        raise ConfigError(
            f"study.{key}: expected a positive finite number or null (got {value!r})"
        )
    if cast is int and value != int(value):  # n_trials=1.5 would run 1 trial
        raise ConfigError(f"study.{key}: expected a positive integer or null (got {value!r})")
    if cast is int:
        limits.check_count(f"study.{key}", int(value), limits.TRIALS)
    return cast(value)


def _average_last(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"study.average_last: expected an int >= 1, the evaluations a trial's score "
            f"averages (1: the last one only) (got {value!r})"
        )
    limits.check_count("study.average_last", value, limits.COUNT)
    return value


def _sampler(raw: Any, n_objectives: int) -> dict[str, Any]:
    default = "tpe" if n_objectives == 1 else "nsga2"
    spec = {"type": default, "seed": 0, **_mapping(raw, "study.sampler")}
    allowed = {"type", "seed", "n_startup_trials", "population_size"}
    extra = sorted(set(spec) - allowed)
    if extra:
        raise ConfigError(
            f"study.sampler: unknown key {extra[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )
    if spec["type"] not in SAMPLERS:
        raise ConfigError(
            f"study.sampler.type: unknown {spec['type']!r}; allowed: {', '.join(SAMPLERS)}"
        )
    if spec["seed"] is not None and (not isinstance(spec["seed"], int) or spec["seed"] < 0):
        raise ConfigError(f"study.sampler.seed: expected an int >= 0 (got {spec['seed']!r})")
    if spec["seed"] is not None:
        limits.check_count("study.sampler.seed", spec["seed"], limits.SEED)
    for key in ("n_startup_trials", "population_size"):
        if key in spec and (not isinstance(spec[key], int) or spec[key] < 1):
            raise ConfigError(f"study.sampler.{key}: expected an int >= 1 (got {spec[key]!r})")
        if key in spec:
            limits.check_count(f"study.sampler.{key}", spec[key], limits.COUNT)
    return spec


def _heartbeat(raw: Any) -> dict[str, int]:
    spec = {**HEARTBEAT, **_mapping(raw, "study.heartbeat")}
    extra = sorted(set(spec) - set(HEARTBEAT))
    if extra:
        raise ConfigError(
            f"study.heartbeat: unknown key {extra[0]!r}; allowed: {', '.join(HEARTBEAT)}"
        )
    for key, value in spec.items():
        low = 0 if key == "max_retry" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"study.heartbeat.{key}: expected an int >= {low} (got {value!r})")
        limits.check_count(f"study.heartbeat.{key}", value, limits.COUNT)
    if spec["grace_period"] <= spec["interval"]:
        raise ConfigError(
            f"study.heartbeat.grace_period: expected more than interval={spec['interval']} s "
            f"(got {spec['grace_period']})"
        )
    return spec


_PRUNER_KEYS = {
    "none": set(),
    "median": {"n_startup_trials", "n_warmup_steps", "interval_steps"},
    "percentile": {"percentile", "n_startup_trials", "n_warmup_steps", "interval_steps"},
    "hyperband": {"min_resource", "max_resource", "reduction_factor"},
    "threshold": {"lower", "upper", "n_warmup_steps", "interval_steps"},
}


def _pruner(raw: Any, directions: tuple[str, ...]) -> dict[str, Any]:
    spec = {"type": "none", **_mapping(raw, "study.pruner")}
    kind = spec["type"]
    if kind not in PRUNERS:
        raise ConfigError(f"study.pruner.type: unknown {kind!r}; allowed: {', '.join(PRUNERS)}")
    if kind == "none":
        return {"type": "none"}
    spec.setdefault("metric", "test/accuracy")
    allowed = {"type", "metric"} | _PRUNER_KEYS[kind]
    extra = sorted(set(spec) - allowed)
    if extra:
        raise ConfigError(
            f"study.pruner: unknown key {extra[0]!r} for {kind}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    if spec["metric"] not in ROUND_METRICS:
        raise ConfigError(
            f"study.pruner.metric: unknown {spec['metric']!r}; allowed: {', '.join(ROUND_METRICS)}"
        )
    if len(directions) > 1:
        raise ConfigError("study.pruner: pruning needs a single objective; set type: none")
    if ROUND_METRICS[spec["metric"]] != directions[0]:
        raise ConfigError(
            f"study.pruner.metric: {spec['metric']} improves by "
            f"{ROUND_METRICS[spec['metric']]}, the study's direction is {directions[0]}; "
            f"allowed: {', '.join(m for m, d in ROUND_METRICS.items() if d == directions[0])}"
        )
    for key, value in spec.items():
        if key not in ("type", "metric", "max_resource") and (
            isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ConfigError(f"study.pruner.{key}: expected a finite number (got {value!r})")
    if kind == "percentile" and not 0 < spec.get("percentile", -1) < 100:
        got = spec.get("percentile")
        raise ConfigError(f"study.pruner.percentile: expected a number in (0, 100) (got {got!r})")
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
