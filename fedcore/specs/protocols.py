"""A paper's protocol in a sweep: the recipe every row of its comparison family runs.

A sweep file's ``protocols:`` names each protocol's paper recipe (an experiment file in
``configs/experiments/``), what the machine cannot afford and runs scaled instead (``scaled:``,
e.g. the dataset and model), and the values its rows run (``set:``). A grid block with
``protocol: [name]`` runs its rows under those values (they replace the file's ``set:``; the
block's own keys replace them, and name the row). Every row of the block is labelled
``<row> @<protocol>``, so a method run under two protocols is two rows.

Before any cell is built each protocol row is checked against its recipe: the local optimiser
(``local``), the horizon (``rounds``), the evaluation cadence (``eval_every``), the misbehaving
clients (``clients``), the partition (``dataset.partition``, ``dataset.alpha``), each client's
local test split (``dataset.test_fraction``) and the
participation (``clients_per_round`` as a share of ``dataset.num_clients``) must be the
recipe's, except what the row's grid block sets itself (a tuned row's local lr) and the keys
its ``scaled:`` names with what runs instead (``local.steps``). A command-line
override may still change them (``rounds=5`` for a quick look): a family whose rows ran fewer
rounds than its protocol's horizon then carries no verdicts (``fedcore.stats.looks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError, ExperimentConfig, limits, read_yaml
from fedcore.specs.sweep_file import check_entry_keys

PROTOCOL_KEYS = ("recipe", "paper", "scaled", "set")
GRID_KEY = "protocol"
LABEL_MARK = " @"
# the parts of a recipe a protocol row must run as the paper does (besides participation)
CHECKED = ("rounds", "eval_every", "local", "clients", "dataset.partition", "dataset.alpha",
           "dataset.test_fraction")


@dataclass(frozen=True)
class Protocol:
    """A paper's protocol: its recipe file, what runs scaled, and the values its rows set."""

    name: str
    paper: str
    recipe: Path
    scaled: dict[str, str]
    values: dict[str, Any]
    config: ExperimentConfig  # the recipe's, resolved

    @property
    def horizon(self) -> int:
        """The recipe's rounds: a family of this protocol is judged there."""
        return self.config.rounds

    def note(self) -> str:
        """``the paper recipe configs/experiments/craft.yaml at its 500 rounds; scaled: ...``."""
        return (f"{self.paper}'s recipe `configs/experiments/{self.recipe.name}` at its "
                f"{self.horizon} rounds; scaled: {self.scaled_text()}")

    def scaled_text(self) -> str:
        """``dataset: digits (paper: CIFAR-10); model: MLP (paper: ResNet-20)``."""
        return "; ".join(f"{k}: {v}" for k, v in self.scaled.items()) or "nothing"


def labelled(row: str, protocol: str | None) -> str:
    """``fedavg @craft``: a row under a protocol (unchanged without one)."""
    return row if protocol is None else f"{row}{LABEL_MARK}{protocol}"


def parse_protocols(raw: Any, owner: Path, where: str = "sweep") -> dict[str, Protocol]:
    """A sweep file's ``protocols:`` mapping, each ``{recipe, paper?, scaled?, set}``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.protocols: expected a mapping of NAME: {{recipe, paper, "
                          "scaled, set}}")
    out = {}
    for name, spec in raw.items():
        at = f"{where}.protocols.{name}"
        check_entry_keys(spec, PROTOCOL_KEYS, at)
        recipe = spec.get("recipe")
        if not isinstance(recipe, str) or Path(recipe).suffix.lower() not in (".yaml", ".yml"):
            raise ConfigError(f"{at}.recipe: expected the paper recipe's .yaml file "
                              f"(got {limits.shown(recipe)})")
        path = Path(recipe) if Path(recipe).is_absolute() else owner.parent / recipe
        if not path.is_file():
            raise ConfigError(f"{at}.recipe: no file {limits.shown(str(path))}")
        values, scaled = spec.get("set"), spec.get("scaled") or {}
        if not isinstance(values, dict) or not values:
            raise ConfigError(f"{at}.set: expected a mapping of KEY: value (the recipe's "
                              "values its rows run)")
        if not isinstance(scaled, dict) or not all(isinstance(v, str) for v in scaled.values()):
            raise ConfigError(f"{at}.scaled: expected a mapping of PART: what runs instead")
        try:
            recipe_config = build_config(read_yaml(path), {})
        except ConfigError as exc:
            raise ConfigError(f"{at}.recipe: {exc}") from None
        out[str(name)] = Protocol(str(name), str(spec.get("paper", name)), path,
                                  {str(k): v for k, v in scaled.items()}, dict(values),
                                  recipe_config)
    return out


def _part(cfg: ExperimentConfig, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value.model_dump() if hasattr(value, "model_dump") else value


def _set_by(point: dict[str, Any], key: str) -> bool:
    return any(k == key or k.startswith(key + ".") for k in point)


def check_against_recipe(protocol: Protocol, cfg: ExperimentConfig, point: dict[str, Any],
                         where: str) -> None:
    """Refuse a protocol row whose recipe parts (``CHECKED``, participation) differ from the
    paper recipe's, except the keys its grid block sets itself; one line naming the part."""
    recipe = protocol.config
    point = {**point, **dict.fromkeys(protocol.scaled)}  # a scaled key is said, not checked
    for key in CHECKED:
        if _set_by(point, key):
            continue
        mine, paper = _part(cfg, key), _part(recipe, key)
        if isinstance(mine, dict) and isinstance(paper, dict):
            diff = sorted(k for k in mine if mine[k] != paper.get(k) and not _set_by(
                point, f"{key}.{k}"))
            if diff:
                k = diff[0]
                raise ConfigError(f"{where}: {key}.{k} = {mine[k]!r} differs from the recipe's "
                                  f"{paper.get(k)!r} ({protocol.recipe.name}); a protocol row "
                                  "runs its paper's recipe")
        elif mine != paper:
            raise ConfigError(f"{where}: {key} = {mine!r} differs from the recipe's {paper!r} "
                              f"({protocol.recipe.name}); a protocol row runs its paper's recipe")
    if not _set_by(point, "clients_per_round"):
        share = recipe.clients_per_round / recipe.dataset.num_clients
        expected = max(1, round(share * cfg.dataset.num_clients))
        if cfg.clients_per_round != expected:
            raise ConfigError(f"{where}: clients_per_round = {cfg.clients_per_round} is not the "
                              f"recipe's participation ({share * 100:g} % of "
                              f"{cfg.dataset.num_clients} clients: {expected}; "
                              f"{protocol.recipe.name})")
