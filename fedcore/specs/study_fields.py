"""A study file's fields, each checked on its own: the search space's dimensions, the objectives,
the budget, the sampler, the pruner and the heartbeat, with the metrics each may name."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import yaml

from fedcore.core.config import ConfigError, limits

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
# (fedcore.specs.sweep.tuning_studies).
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
# Optuna's heartbeat: a running trial records one every ``interval`` s; a trial whose last one
# is older than ``grace_period`` s (its process died) is failed by the next process that asks
# for a trial and re-run with the same parameters up to ``max_retry`` times.
HEARTBEAT = {"interval": 10, "grace_period": 60, "max_retry": 1}


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



def choice_label(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()



def mapping_of(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping")
    return value


def parse_param(key: str, raw: Any) -> Param:
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


def parse_objectives(metric: Any, direction: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
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


def parse_budget(value: Any, key: str, cast: type) -> Any:
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


def parse_average_last(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"study.average_last: expected an int >= 1, the evaluations a trial's score "
            f"averages (1: the last one only) (got {value!r})"
        )
    limits.check_count("study.average_last", value, limits.COUNT)
    return value


def parse_sampler(raw: Any, n_objectives: int) -> dict[str, Any]:
    default = "tpe" if n_objectives == 1 else "nsga2"
    spec = {"type": default, "seed": 0, **mapping_of(raw, "study.sampler")}
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


def parse_heartbeat(raw: Any) -> dict[str, int]:
    spec = {**HEARTBEAT, **mapping_of(raw, "study.heartbeat")}
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


def parse_pruner(raw: Any, directions: tuple[str, ...]) -> dict[str, Any]:
    spec = {"type": "none", **mapping_of(raw, "study.pruner")}
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

