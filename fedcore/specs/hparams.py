"""A run's regime in four parts: the method's hyperparameters, the local optimiser, the data,
and the horizon.

- method: the shipped method files (``configs/methods/<name>.yaml``) hold each method's paper
  defaults. ``paper`` when the run resolves to exactly that file's method; ``tuned`` when its
  file was written by ``fedcore tune --best`` (a study chose the values); ``set`` when any
  hyperparameter differs otherwise (set by hand), or when no shipped file has its name. (A sweep
  whose file names the study of a method calls that method's changed rows ``tuned``:
  ``fedcore.specs.rows``.)
- local: the paper recipes (``configs/experiments/<paper>.yaml``) hold each paper's local
  optimiser. ``paper`` when the run's ``local`` block equals a recipe of its own method;
  ``<recipe> recipe`` when it equals another paper's (a baseline run in that paper's regime);
  ``default`` when it is the default experiment's (``configs/experiment.yaml``); else ``set``.
- data: ``paper`` when dataset, partition, alpha and the misbehaving clients (noisy labels,
  Byzantine attackers) equal a recipe of the method; ``default`` on the default experiment's
  dataset with no misbehaving clients; else ``other``.
- horizon: rounds, clients, clients per round and model. ``paper`` when they equal a recipe of
  the method, ``other`` when the method has a recipe and they differ (its ``paper``
  hyperparameters were chosen for another horizon: the label says ``method paper (horizon
  other)``), ``none`` when the method has no recipe; ``protocol`` for a sweep row of a paper
  protocol, which runs the paper's rounds and participation on scaled data and model
  (``row_regime``: ``local <name> protocol · data scaled``).

The regime's label is ``paper`` only when all four parts are; otherwise it names each part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from fedcore.core.compose.configure import build_config
from fedcore.core.config import ClientsConfig, ConfigError, LocalConfig, config_dir, read_yaml
from fedcore.specs.rows import TUNABLE, is_tuned

TUNE_BEST_MARK = "Written by `fedcore tune --best`"


@cache
def _paper_method(name: str, folder: str) -> dict[str, Any] | None:
    path = config_dir() / "methods" / f"{name}.yaml"
    if not path.is_file() or TUNE_BEST_MARK in path.read_text():
        return None
    try:
        resolved = build_config({"method": name, "model": {"name": "mlp"}}).resolved()
    except ConfigError:
        return None
    method: dict[str, Any] = resolved["method"]
    return method


def paper_method(name: str) -> dict[str, Any] | None:
    """The resolved method of ``configs/methods/<name>.yaml`` (None: no paper file)."""
    return _paper_method(name, str(config_dir()))


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def hparams_changes(method: dict[str, Any]) -> dict[str, Any]:
    """The keys of a resolved ``method`` whose values differ from its paper file, with the
    run's values (``{"aggregator.server_lr": 0.7}``); every key when there is no paper file."""
    paper = paper_method(str(method["name"]))
    mine = _flat({k: v for k, v in method.items() if k != "name"})
    if paper is None:
        return mine
    theirs = _flat({k: v for k, v in paper.items() if k != "name"})
    return {k: v for k, v in mine.items() if theirs.get(k, object()) != v}


def _tuned_file(name: str) -> bool:
    path = config_dir() / "methods" / f"{name}.yaml"
    return path.is_file() and TUNE_BEST_MARK in path.read_text()


def hparams_label(method: dict[str, Any]) -> str:
    """``paper``, ``tuned`` or ``set`` (see the module docstring) for a resolved method."""
    name = str(method["name"])
    paper = paper_method(name)
    if paper is not None and not hparams_changes(method):
        return "paper"
    return "tuned" if _tuned_file(name) else "set"


def hparams_tags(method: dict[str, Any]) -> dict[str, str]:
    """MLflow tags: ``hparams`` (paper | tuned | set) and, when changed, ``hparams_changed``."""
    label = hparams_label(method)
    tags = {"hparams": label}
    if label != "paper" and paper_method(str(method["name"])) is not None:
        tags["hparams_changed"] = ", ".join(f"{k}={v}" for k, v in hparams_changes(method).items())
    return tags


@cache
def _recipes(folder: str) -> tuple[tuple[str, str, dict[str, Any], tuple[Any, ...],
                                         tuple[Any, ...]], ...]:
    """(recipe name, method name, resolved local block, (dataset, partition, alpha, misbehaving
    clients), horizon) per recipe.

    Files written by ``fedcore tune --best`` are a study's result, not a paper's recipe: left
    out, so that no run is labelled by a recipe it did not follow."""
    out = []
    for path in sorted((config_dir() / "experiments").glob("*.yaml")):
        if TUNE_BEST_MARK in path.read_text():
            continue
        raw = read_yaml(path)
        method = raw.get("method", "fedavg")
        name = method if isinstance(method, str) else str(method.get("name", ""))
        local = LocalConfig.model_validate(raw.get("local") or {}).model_dump()
        ds = raw.get("dataset") or {}
        clients = ClientsConfig.model_validate(raw.get("clients") or {}).model_dump()
        model = raw.get("model") or {}
        horizon = (raw.get("rounds"), ds.get("num_clients"), raw.get("clients_per_round"),
                   model.get("name") if isinstance(model, dict) else model)
        out.append((path.stem, name, local, (ds.get("name"), ds.get("partition", "dirichlet"),
                                             ds.get("alpha"), _misbehaving(clients)), horizon))
    return tuple(out)


def _misbehaving(clients: dict[str, Any]) -> tuple[Any, ...]:
    """The part of a ``clients`` block that changes the data a method sees."""
    noisy, byzantine = clients["noisy_fraction"], clients["byzantine_fraction"]
    return (noisy, clients["noise_rate"] if noisy else None, byzantine,
            (clients["attack"], clients["attack_strength"]) if byzantine else None)


@cache
def _default_experiment(folder: str) -> tuple[dict[str, Any], str]:
    raw = read_yaml(config_dir() / "experiment.yaml")
    local = LocalConfig.model_validate(raw.get("local") or {}).model_dump()
    return local, str((raw.get("dataset") or {}).get("name", "digits"))


def local_label(resolved: dict[str, Any]) -> str:
    """``paper``, ``<recipe> recipe``, ``default`` or ``tuned`` for a resolved config's local."""
    method, local = str(resolved["method"]["name"]), resolved["local"]
    recipes = _recipes(str(config_dir()))
    if any(m == method and r_local == local for _, m, r_local, _, _ in recipes):
        return "paper"
    for recipe, _, r_local, _, _ in recipes:
        if r_local == local:
            return f"{recipe} recipe"
    return "default" if local == _default_experiment(str(config_dir()))[0] else "set"


def data_label(resolved: dict[str, Any]) -> str:
    """``paper``, ``default`` or ``other`` for a resolved config's dataset setting."""
    method, ds = str(resolved["method"]["name"]), resolved["dataset"]
    bad = _misbehaving(resolved["clients"])
    mine = (ds["name"], ds["partition"], ds["alpha"], bad)
    if any(m == method and setting == mine
           for _, m, _, setting, _ in _recipes(str(config_dir()))):
        return "paper"
    clean = not bad[0] and not bad[2]
    default = ds["name"] == _default_experiment(str(config_dir()))[1]
    return "default" if default and clean else "other"


def horizon_label(resolved: dict[str, Any]) -> str:
    """``paper``, ``other`` or ``none`` for a resolved config's rounds, clients, clients per
    round and model (see the module docstring)."""
    method = str(resolved["method"]["name"])
    mine = (resolved["rounds"], resolved["dataset"]["num_clients"],
            resolved["clients_per_round"], resolved["model"]["name"])
    horizons = [h for _, m, _, _, h in _recipes(str(config_dir())) if m == method]
    if not horizons:
        return "none"
    return "paper" if mine in horizons else "other"


@dataclass(frozen=True)
class Regime:
    """The four parts of a run's regime (see the module docstring)."""

    method: str
    local: str
    data: str
    horizon: str = "none"

    @property
    def label(self) -> str:
        """``paper`` when every part is, else e.g. ``method paper (horizon other) · local default
        · data default``."""
        if self.method == self.local == self.data == self.horizon == "paper":
            return "paper"
        horizon = " (horizon other)" if self.horizon == "other" else ""
        return f"method {self.method}{horizon} · local {self.local} · data {self.data}"


def regime(resolved: dict[str, Any]) -> Regime:
    """The regime of a resolved experiment config."""
    return Regime(hparams_label(resolved["method"]), local_label(resolved), data_label(resolved),
                  horizon_label(resolved))


def row_regime(resolved: dict[str, Any], row: str, overrides: Mapping[str, Any]) -> Regime:
    """The regime of a sweep cell as its report row states it: a tuned row's (``craft
    (tuned)``) parts that the study chose (the cell's ``method.`` and ``local.`` values) are
    ``tuned``, not ``set``; a row of a paper protocol (``fedcore.specs.protocols``) runs the
    protocol's local recipe (``local <name> protocol`` unless it is its own paper's) at the
    paper's rounds and participation (horizon ``protocol``) with the data and model scaled
    (``data scaled``)."""
    mode = regime(resolved)
    protocol = overrides.get("protocol")
    if protocol is not None:  # checked against its paper's recipe before it ran
        own_local = any(k.startswith("local.") for k in overrides)
        mode = replace(mode, horizon="protocol", data="scaled", local=mode.local
                       if own_local or mode.local == "paper" else f"{protocol} protocol")
    if not is_tuned(row):
        return mode
    return replace(mode, **{part: "tuned" for part, prefix in zip(("method", "local"), TUNABLE,
                                                                 strict=True)
                            if any(k.startswith(prefix) for k in overrides)})


def regime_tags(resolved: dict[str, Any], mode: Regime | None = None) -> dict[str, str]:
    """MLflow tags: ``hparams`` (the regime's label), ``hparams_method``, ``hparams_local``,
    ``hparams_data``, ``hparams_horizon`` and, when the method is tuned, ``hparams_changed``;
    ``mode``: the regime to state (default: ``regime(resolved)``; a sweep cell's
    ``row_regime``)."""
    r = mode or regime(resolved)
    tags = hparams_tags(resolved["method"])
    tags.update({"hparams": r.label, "hparams_method": r.method, "hparams_local": r.local,
                 "hparams_data": r.data, "hparams_horizon": r.horizon})
    return tags
